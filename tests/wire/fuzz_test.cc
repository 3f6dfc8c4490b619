// Seeded mutation fuzzing of the decoders (docs/contract.md "Quality bars": every decoder is
// fuzzed). At least 100 000 corrupted datagrams and 100 000 corrupted frames (release build) go
// through each of a plaintext and an encrypted codec: bit flips, byte insertions/deletions/
// overwrites, truncations, splices, random garbage, oversized buffers, hand-crafted hostile
// envelopes and encoder-made buffers that are well-formed but semantically wrong. Every input
// must be accepted or rejected with a reason (never crash, hang or throw), and accepted +
// rejected must equal the inputs.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "base/sanitizer.h"
#include "tests/wire/crafted.h"
#include "tests/wire/messages.h"
#include "wire/codec.h"
#include "wire/crypto.h"
#include "wire/framing.h"

namespace meshtrain::wire {
namespace {

using Bytes = std::vector<uint8_t>;
using testing::Gen;
namespace ms = ::meshtrain::membership;

// The release build runs the full 100 000 of each kind; the ASan + UBSan build (about ten times
// slower, and fuzzing the same decoders with libFuzzer in tests/fuzz) a fifth of them.
constexpr size_t kInputsPerKind = kAddressSanitizer ? 20000 : 100000;
constexpr uint32_t kModelFloats = 1024;  // the "local model" size the frame codec expects

struct Tally {
  uint64_t inputs = 0;
  uint64_t accepted = 0;
  uint64_t unexplained = 0;        // rejected without a valid reason (must stay 0)
  uint64_t reencode_failures = 0;  // accepted, re-encoded, and then rejected (must stay 0)
  RejectCounters rejects;
};

// Feeds one buffer to the right decoder and accounts for the verdict.
void Feed(const Codec& codec, bool frame, const uint8_t* data, size_t len, Tally* t) {
  auto why = static_cast<Reject>(0xFF);  // not a valid reason: detects an unset *why
  ++t->inputs;
  if (frame) {
    const auto f = codec.DecodeFrame(data, len, &why);
    if (f) {
      ++t->accepted;
      // Whatever was accepted is a message we can send back out and read again.
      const Bytes again = codec.EncodeFrame(*f);
      if (!again.empty() && !codec.DecodeFrame(again.data(), again.size(), nullptr)) {
        ++t->reencode_failures;
      }
      return;
    }
  } else {
    const auto d = codec.DecodeDatagram(data, len, &why);
    if (d) {
      ++t->accepted;
      const Bytes again = codec.EncodeDatagram(*d);
      if (!again.empty() && !codec.DecodeDatagram(again.data(), again.size(), nullptr)) {
        ++t->reencode_failures;
      }
      return;
    }
  }
  if (static_cast<size_t>(why) >= kNumRejects) {
    ++t->unexplained;
  } else {
    t->rejects.add(why);
  }
}

void Mutate(Gen& g, Bytes* v) {
  const int rounds = static_cast<int>(g.U(1, 3));
  for (int r = 0; r < rounds; ++r) {
    const size_t n = v->size();
    switch (g.U(0, 8)) {
      case 0:  // bit flips
        for (uint64_t k = g.U(1, 4); k > 0 && n > 0; --k) {
          (*v)[g.U(0, n - 1)] ^= static_cast<uint8_t>(1u << g.U(0, 7));
        }
        break;
      case 1: {  // insert random bytes
        Bytes ins(g.U(1, 16));
        for (auto& b : ins) b = static_cast<uint8_t>(g.U(0, 255));
        v->insert(v->begin() + static_cast<std::ptrdiff_t>(g.U(0, n)), ins.begin(), ins.end());
        break;
      }
      case 2:  // delete a range
        if (n > 0) {
          const size_t pos = g.U(0, n - 1);
          const size_t len = std::min<size_t>(g.U(1, 16), n - pos);
          v->erase(v->begin() + static_cast<std::ptrdiff_t>(pos),
                   v->begin() + static_cast<std::ptrdiff_t>(pos + len));
        }
        break;
      case 3:  // truncate
        v->resize(g.U(0, n));
        break;
      case 4: {  // interesting bytes
        static constexpr uint8_t kInteresting[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0x10, 0xFE};
        for (uint64_t k = g.U(1, 8); k > 0 && n > 0; --k) {
          (*v)[g.U(0, n - 1)] = kInteresting[g.U(0, sizeof(kInteresting) - 1)];
        }
        break;
      }
      case 5:  // overwrite an aligned 32-bit word (offsets, lengths, vtable entries)
        if (n >= 4) {
          const size_t pos = g.U(0, n / 4 - 1) * 4;
          const uint32_t choices[] = {0u,
                                      0xFFFFFFFFu,
                                      0x7FFFFFFFu,
                                      0x80000000u,
                                      static_cast<uint32_t>(g.U(0, 64)),
                                      static_cast<uint32_t>(n),
                                      static_cast<uint32_t>(g.U(0, n))};
          const uint32_t w = choices[g.U(0, 6)];
          for (int i = 0; i < 4; ++i) (*v)[pos + i] = static_cast<uint8_t>(w >> (8 * i));
        }
        break;
      case 6:  // copy a slice over another place
        if (n >= 2) {
          const size_t from = g.U(0, n - 1), to = g.U(0, n - 1);
          const size_t len = std::min<size_t>({g.U(1, 32), n - from, n - to});
          std::copy(v->begin() + static_cast<std::ptrdiff_t>(from),
                    v->begin() + static_cast<std::ptrdiff_t>(from + len),
                    v->begin() + static_cast<std::ptrdiff_t>(to));
        }
        break;
      case 7: {  // append garbage
        for (uint64_t k = g.U(1, 64); k > 0; --k) v->push_back(static_cast<uint8_t>(g.U(0, 255)));
        break;
      }
      default:  // 16-bit overwrite (vtable offsets and sizes are 16-bit)
        if (n >= 2) {
          const size_t pos = g.U(0, n / 2 - 1) * 2;
          const uint16_t w =
              g.Coin() ? static_cast<uint16_t>(g.U(0, 0xFFFF)) : static_cast<uint16_t>(g.U(0, 40));
          (*v)[pos] = static_cast<uint8_t>(w);
          (*v)[pos + 1] = static_cast<uint8_t>(w >> 8);
        }
    }
  }
}

Bytes Garbage(Gen& g, size_t max_len, uint8_t marker) {
  Bytes v(g.U(0, max_len));
  for (auto& b : v) b = static_cast<uint8_t>(g.U(0, 255));
  // Half the time look like a plausible envelope so the verifier, not the marker, decides.
  if (g.Coin() && v.size() >= 9) {
    v[0] = marker;
    v[5] = 'M';
    v[6] = 'S';
    v[7] = 'H';
    v[8] = 'T';
  }
  return v;
}

// Strips the plaintext marker: the FlatBuffer a plaintext codec produced.
Bytes Unmarked(const Bytes& plain) { return Bytes(plain.begin() + 1, plain.end()); }

// Well-formed envelopes with something semantically wrong, made by real encoders.
struct BadCorpus {
  std::vector<Bytes> datagrams;  // FlatBuffers without marker
  std::vector<Bytes> frames;
};

BadCorpus MakeBadCorpus(Gen& g, const Codec& plain) {
  BadCorpus c;
  Codec other("staging", nullptr);
  Codec v2("default", nullptr);
  v2.set_send_version(2);
  const Datagram good = g.RandomDatagram(plain);
  c.datagrams.push_back(Unmarked(other.EncodeDatagram(good)));
  c.datagrams.push_back(Unmarked(v2.EncodeDatagram(good)));
  Datagram bad_sender{std::string(kMaxSenderBytes + 1, 's'), ProgressQuery{1, 1}};
  c.datagrams.push_back(Unmarked(plain.EncodeDatagram(bad_sender)));
  for (const char* addr : {"1.2.3.4:0", "300.1.1.1:1", "nope", ""}) {
    Datagram d{"n1", g.Packet("n1", 600)};
    std::get<ms::Packet>(d.body).from_addr = addr;
    c.datagrams.push_back(Unmarked(plain.EncodeDatagram(d)));
  }
  {
    Datagram d{"n1", g.Packet("n1", 600)};
    std::get<ms::Packet>(d.body).updates.push_back(ms::AliveMsg{
        "x", "1.1.1.1:1", 1, {"", true, std::numeric_limits<float>::infinity(), 0, {}}});
    c.datagrams.push_back(Unmarked(plain.EncodeDatagram(d)));
  }
  // Frame bodies in datagrams and datagram bodies in frames.
  c.datagrams.push_back(Unmarked(plain.EncodeFrame(Frame{"n1", g.Chunk(100)})));
  c.frames.push_back(Unmarked(plain.EncodeDatagram(good)));

  const Frame frame_good{"n1", SplitParams(g.Floats(kModelFloats), 1, 2, 300)[1]};
  c.frames.push_back(Unmarked(other.EncodeFrame(frame_good)));
  c.frames.push_back(Unmarked(v2.EncodeFrame(frame_good)));
  auto chunk_variant = [&](auto&& edit) {
    Frame f = frame_good;
    edit(std::get<ParamChunk>(f.body));
    c.frames.push_back(Unmarked(plain.EncodeFrame(f)));
  };
  chunk_variant([](ParamChunk& p) { p.chunk = p.chunks; });
  chunk_variant([](ParamChunk& p) { p.chunk = UINT32_MAX; });
  chunk_variant([](ParamChunk& p) { p.chunks = 0; });
  chunk_variant([](ParamChunk& p) { p.offset = p.total - 1; });
  chunk_variant([](ParamChunk& p) { p.offset = UINT32_MAX - 10; });
  chunk_variant([](ParamChunk& p) { p.total = kModelFloats + 1; });  // != expected
  chunk_variant([](ParamChunk& p) { p.total = UINT32_MAX; });
  chunk_variant([](ParamChunk& p) { p.data[7] = std::numeric_limits<float>::quiet_NaN(); });
  chunk_variant([](ParamChunk& p) { p.data.back() = -std::numeric_limits<float>::infinity(); });
  chunk_variant([](ParamChunk& p) { p.data.clear(); });
  PushPullMsg pp = g.PushPull("n1", 5);
  pp.state.members.push_back({"m", "1.1.1.1:1", 0, static_cast<ms::Status>(9), {}, 0});
  c.frames.push_back(Unmarked(plain.EncodeFrame(Frame{"n1", pp})));
  pp.state.members.back() = {"", "1.1.1.1:1", 0, ms::Status::kAlive, {}, 0};
  c.frames.push_back(Unmarked(plain.EncodeFrame(Frame{"n1", pp})));
  pp.state.members.back() = {"m", "1.1.1.1", 0, ms::Status::kAlive, {}, 0};
  c.frames.push_back(Unmarked(plain.EncodeFrame(Frame{"n1", pp})));

  // Hostile hand-built envelopes, except the few very large ones (they run once, below).
  for (auto& crafted : testing::CraftedCases()) {
    if (crafted.fb.size() > 4096) continue;
    (crafted.frame ? c.frames : c.datagrams).push_back(std::move(crafted.fb));
  }
  for (const auto& v : c.datagrams) REQUIRE_FALSE(v.empty());
  for (const auto& v : c.frames) REQUIRE_FALSE(v.empty());
  return c;
}

void Report(const char* label, const Tally& t, double seconds) {
  std::printf("fuzz %-16s inputs %7llu accepted %6llu rejected %7llu (", label,
              static_cast<unsigned long long>(t.inputs),
              static_cast<unsigned long long>(t.accepted),
              static_cast<unsigned long long>(t.rejects.total()));
  for (size_t r = 0; r < kNumRejects; ++r) {
    std::printf("%s%s %llu", r ? ", " : "", RejectName(static_cast<Reject>(r)),
                static_cast<unsigned long long>(t.rejects.count[r]));
  }
  std::printf(") %.2f s\n", seconds);
  std::fflush(stdout);
}

void Check(const Tally& t) {
  CHECK(t.inputs >= kInputsPerKind);
  CHECK(t.unexplained == 0);
  CHECK(t.reencode_failures == 0);
  CHECK(t.accepted + t.rejects.total() == t.inputs);
  // Every stage of the pipeline was reached, so the loop exercised the whole decoder.
  for (Reject r : {Reject::kTooLarge, Reject::kTooSmall, Reject::kAuth, Reject::kVerify,
                   Reject::kVersion, Reject::kCluster, Reject::kSemantic}) {
    CAPTURE(RejectName(r));
    CHECK(t.rejects.get(r) > 0);
  }
  CHECK(t.accepted > 0);
}

void RunFuzz(bool encrypted, uint64_t seed) {
  Gen g(seed);
  const auto keyring =
      encrypted ? std::make_shared<Keyring>(*ParseKeyBase64(GenerateKeyBase64())) : nullptr;
  Codec codec("default", keyring);
  codec.set_expected_params(kModelFloats);
  Codec plain("default", nullptr);  // makes the FlatBuffers we mutate before sealing
  Codec stranger("default", std::make_shared<Keyring>(*ParseKeyBase64(GenerateKeyBase64())));
  const uint8_t marker = encrypted ? kSealedMarker : kPlainMarker;

  // Valid corpora: FlatBuffers without marker.
  std::vector<Bytes> datagrams, frames;
  for (int i = 0; i < 256; ++i)
    datagrams.push_back(Unmarked(plain.EncodeDatagram(g.RandomDatagram(plain))));
  for (int i = 0; i < 256; ++i) {
    Frame f;
    f.sender = g.Name();
    if (i % 8 == 6) {
      f.body = g.KeyOp();
    } else if (i % 8 == 7) {
      f.body = g.KeyOpReply();
    } else if (i % 2) {
      f.body = g.PushPull(f.sender, 24);
    } else {
      const auto chunks = SplitParams(g.Floats(kModelFloats), g.U(0, 99), g.U(0, 999),
                                      static_cast<uint32_t>(g.U(16, kModelFloats)));
      f.body = chunks[g.U(0, chunks.size() - 1)];
    }
    frames.push_back(Unmarked(plain.EncodeFrame(f)));
  }
  const BadCorpus bad = MakeBadCorpus(g, plain);
  const Bytes oversized(kMaxFrameBytes + 4096, marker);

  // The codec's wire form of a FlatBuffer: marker or seal.
  auto wrap = [&](const Bytes& fb) {
    if (keyring) return keyring->Seal(fb.data(), fb.size(), "default");
    Bytes v{kPlainMarker};
    v.insert(v.end(), fb.begin(), fb.end());
    return v;
  };

  for (const bool frame : {false, true}) {
    const auto start = std::chrono::steady_clock::now();
    const auto& corpus = frame ? frames : datagrams;
    const auto& bad_corpus = frame ? bad.frames : bad.datagrams;
    const size_t limit = frame ? kMaxFrameBytes : kMaxDatagramBytes;
    Tally t;
    for (size_t i = 0; i < kInputsPerKind; ++i) {
      const Bytes& base = corpus[g.U(0, corpus.size() - 1)];
      Bytes v;
      const uint64_t kind = g.U(0, 99);
      if (kind < 30) {  // corrupt the FlatBuffer, then wrap it properly
        v = base;
        Mutate(g, &v);
        v = wrap(v);
      } else if (kind < 55) {  // corrupt the bytes on the wire
        v = wrap(base);
        Mutate(g, &v);
      } else if (kind < 65) {  // garbage
        v = Garbage(g, frame ? 8192 : 1600, marker);
      } else if (kind < 68) {  // over the size limit
        const size_t len = limit + 1 + g.U(0, 4000);
        Feed(codec, frame, oversized.data(), len, &t);
        continue;
      } else if (kind < 83) {  // well-formed, semantically wrong
        v = bad_corpus[g.U(0, bad_corpus.size() - 1)];
        if (g.U(0, 3) == 0) Mutate(g, &v);
        v = wrap(v);
      } else if (kind < 88) {  // the other mode, or a key we do not hold
        if (encrypted) {
          v = g.Coin() ? Bytes{kPlainMarker} : Bytes{};
          if (!v.empty()) {
            v.insert(v.end(), base.begin(), base.end());
          } else {
            v = stranger.keyring()->Seal(base.data(), base.size(), "default");
          }
        } else {
          v = stranger.keyring()->Seal(base.data(), base.size(), "default");
        }
      } else if (kind < 91) {  // a splice of two messages
        const Bytes& other = corpus[g.U(0, corpus.size() - 1)];
        v = wrap(base);
        const Bytes w = wrap(other);
        v.resize(g.U(0, v.size()));
        v.insert(v.end(), w.begin() + static_cast<std::ptrdiff_t>(g.U(0, w.size())), w.end());
      } else {  // valid
        v = wrap(base);
      }
      Feed(codec, frame, v.data(), v.size(), &t);
    }
    if (frame) {
      // The large hostile push-pulls, once each.
      for (const auto& crafted : testing::CraftedCases()) {
        if (crafted.frame && crafted.fb.size() > 4096) {
          const Bytes v = wrap(crafted.fb);
          Feed(codec, true, v.data(), v.size(), &t);
        }
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char label[32];
    std::snprintf(label, sizeof(label), "%s %s", frame ? "frames" : "datagrams",
                  encrypted ? "sealed" : "plain");
    Report(label, t, secs);
    INFO(label);
    Check(t);
  }
}

TEST_CASE("fuzz: corrupted datagrams and frames, plaintext codec", "[gossip][fuzz]") {
  RunFuzz(/*encrypted=*/false, 0xF00D);
}

TEST_CASE("fuzz: corrupted datagrams and frames, encrypted codec", "[gossip][fuzz]") {
  RunFuzz(/*encrypted=*/true, 0xBEEF);
}

// Random byte streams and corrupted frame sequences through the TCP reassembler: it must
// either yield payloads within its limit or enter the sticky error state, never buffer more
// than one frame past the limit.
TEST_CASE("fuzz: frame decoder on corrupted streams", "[gossip][fuzz]") {
  Gen g(0xCAFE);
  constexpr size_t kMax = 4096;
  uint64_t payloads = 0, errors = 0;
  for (int s = 0; s < 20000; ++s) {
    Bytes stream;
    for (uint64_t k = g.U(1, 6); k > 0; --k) {
      Bytes p(g.U(1, kMax));
      for (auto& b : p) b = static_cast<uint8_t>(g.U(0, 255));
      const Bytes f = EncodeFramed(p);
      stream.insert(stream.end(), f.begin(), f.end());
    }
    if (g.Coin()) Mutate(g, &stream);
    FrameDecoder dec(kMax);
    size_t pos = 0;
    while (pos < stream.size()) {
      const size_t n = std::min<size_t>(stream.size() - pos, g.U(1, 3000));
      dec.Feed(stream.data() + pos, n);
      pos += n;
      while (auto p = dec.Next()) {
        REQUIRE(!p->empty());
        REQUIRE(p->size() <= kMax);
        ++payloads;
      }
      REQUIRE(dec.buffered() <= stream.size());
      if (dec.error()) REQUIRE(dec.buffered() == 0);
    }
    errors += dec.error() ? 1 : 0;
  }
  std::printf("fuzz framing: 20000 streams, %llu payloads, %llu streams closed on error\n",
              static_cast<unsigned long long>(payloads), static_cast<unsigned long long>(errors));
  CHECK(payloads > 0);
  CHECK(errors > 0);
}

}  // namespace
}  // namespace meshtrain::wire
