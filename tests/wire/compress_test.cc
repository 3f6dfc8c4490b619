// Compressed parameter transfers (wire/compress.h): the binary16 conversion, the
// error bounds of each scheme, their sizes, and that malformed compressed frames are rejected by
// the codec (counted as semantic rejections, never mixed).
#include "wire/compress.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tests/wire/test_keys.h"
#include "wire/codec.h"
#include "wire/framing.h"

namespace meshtrain::wire {
namespace {

std::vector<float> RandomParams(size_t n, uint64_t seed, float stddev = 0.05f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Decodes every chunk as a receiver does and stitches the values back together.
std::vector<float> Receive(const EncodedTransfer& t, uint32_t total) {
  std::vector<float> out(total, std::numeric_limits<float>::quiet_NaN());
  for (ParamChunk c : t.chunks) {
    REQUIRE(ExpandChunk(&c));
    REQUIRE(c.data.size() == c.count);
    std::copy(c.data.begin(), c.data.end(), out.begin() + c.offset);
  }
  return out;
}

// A frame as TcpHub hands a large one over (wire::BigFrame: the payload kLead bytes into a
// buffer of its own), decoded in place. `lead` other than kLead misaligns the envelope.
std::optional<Frame> DecodeHeld(const Codec& codec, const std::vector<uint8_t>& bytes,
                                std::weak_ptr<uint8_t[]>* owner = nullptr,
                                size_t lead = BigFrame::kLead, Reject* why = nullptr) {
  std::shared_ptr<uint8_t[]> buf(new uint8_t[lead + bytes.size()]);
  std::copy(bytes.begin(), bytes.end(), buf.get() + lead);
  if (owner != nullptr) *owner = buf;
  return codec.DecodeFrameHeld(buf, buf.get() + lead, bytes.size(), why);
}

}  // namespace

TEST_CASE("compress: parse", "[gossip][compress]") {
  CHECK(ParseCompress("none")->kind == Encoding::kNone);
  CHECK(ParseCompress("fp16")->kind == Encoding::kFp16);
  CHECK(ParseCompress("int8")->kind == Encoding::kInt8);
  const auto s = ParseCompress("sparse");
  REQUIRE(s.ok());
  CHECK(s->kind == Encoding::kSparse);
  CHECK(CompressName(*s) == "sparse");
  CHECK(ParseCompress(CompressName(*s))->kind == Encoding::kSparse);
  CHECK(CompressChoices() == "none, fp16, int8, sparse or topk:F");
  const auto bad_name = ParseCompress("sparse8");
  REQUIRE_FALSE(bad_name.ok());
  CHECK(bad_name.status().message() ==
        "invalid --compress \"sparse8\": expected none, fp16, int8, sparse or topk:F");
  auto t = ParseCompress("topk:0.01");
  REQUIRE(t.ok());
  CHECK(t->kind == Encoding::kTopK);
  CHECK(t->topk_fraction == Approx(0.01));
  CHECK(CompressName(*t) == "topk:0.01");
  for (const char* bad : {"", "int4", "topk", "topk:", "topk:0", "topk:0.6", "topk:x", "topk:nan",
                          "topk:0.1x", "FP16", "sparse:0.1", "sparse:"}) {
    INFO(bad);
    CHECK_FALSE(ParseCompress(bad).ok());
  }
}

TEST_CASE("compress: binary16 conversion", "[gossip][compress]") {
  // Every finite half converts to float and back to itself.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00u) == 0x7C00u) continue;  // inf / NaN
    INFO(h);
    REQUIRE(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))) == h);
  }
  CHECK(HalfToFloat(FloatToHalf(1.0f)) == 1.0f);
  CHECK(HalfToFloat(FloatToHalf(-2.5f)) == -2.5f);
  CHECK(HalfToFloat(FloatToHalf(1e9f)) == 65504.0f);  // saturates, never inf
  CHECK(HalfToFloat(FloatToHalf(-std::numeric_limits<float>::infinity())) == -65504.0f);
  CHECK(HalfToFloat(FloatToHalf(1e-9f)) == 0.0f);
  // Round to nearest: relative error <= 2^-11 for normal halves, absolute <= 2^-25 below them.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> e(-30.0f, 15.0f);
  for (int i = 0; i < 200000; ++i) {
    const float v = std::ldexp(1.0f + std::uniform_real_distribution<float>(0, 1)(rng),
                               static_cast<int>(e(rng))) *
                    (i % 2 ? 1.0f : -1.0f);
    const float r = HalfToFloat(FloatToHalf(v));
    if (std::fabs(v) >= 6.103515625e-05f) {
      REQUIRE(std::fabs(r - v) <= std::fabs(v) * 0.00048828125f);
    } else {
      REQUIRE(std::fabs(r - v) <= 2.98023224e-08f);
    }
  }
}

TEST_CASE("compress: error bounds and sizes per scheme", "[gossip][compress]") {
  const uint32_t n = 235146;  // fmnist-mlp's parameter count
  const auto v = RandomParams(n, 11);
  const uint64_t raw = uint64_t{n} * sizeof(float);

  SECTION("none is exact") {
    const auto t = EncodeTransfer(v, CompressSpec{}, 1, 2, 0);
    CHECK(t.wire_bytes == raw);
    CHECK(Receive(t, n) == v);
    CHECK(t.decoded == v);
  }
  SECTION("fp16: half the bytes, relative error <= 2^-11") {
    const auto t = EncodeTransfer(v, *ParseCompress("fp16"), 1, 2, 0);
    CHECK(t.wire_bytes == raw / 2);
    const auto r = Receive(t, n);
    CHECK(r == t.decoded);
    for (uint32_t i = 0; i < n; ++i) {
      REQUIRE(std::fabs(r[i] - v[i]) <= std::max(std::fabs(v[i]) * 0.00048828125f, 3e-8f));
    }
  }
  SECTION("int8: ~1/4 of the bytes, error <= half a step of the block's scale") {
    const auto t = EncodeTransfer(v, *ParseCompress("int8"), 1, 2, 0);
    uint64_t want = 0;
    for (const auto& c : t.chunks) want += c.count + 4 * ((c.count + kInt8Block - 1) / kInt8Block);
    CHECK(t.wire_bytes == want);
    CHECK(static_cast<double>(raw) / static_cast<double>(t.wire_bytes) > 3.9);
    const auto r = Receive(t, n);
    CHECK(r == t.decoded);
    for (const auto& c : t.chunks) {
      for (uint32_t i = 0; i < c.count; ++i) {
        const uint32_t g = c.offset + i;
        float amax = 0;
        const uint32_t lo = c.offset + (i / kInt8Block) * kInt8Block;
        for (uint32_t j = lo; j < std::min(c.offset + c.count, lo + kInt8Block); ++j) {
          amax = std::max(amax, std::fabs(v[j]));
        }
        REQUIRE(std::fabs(r[g] - v[g]) <= amax / 127.0f * 0.5001f + 1e-12f);
      }
    }
  }
  SECTION("topk: exactly the k largest magnitudes, 8 bytes each") {
    const auto t = EncodeTransfer(v, *ParseCompress("topk:0.01"), 1, 2, 7);
    const size_t k = static_cast<size_t>(std::ceil(0.01 * n));
    CHECK(t.wire_bytes == k * 8);
    CHECK(static_cast<double>(raw) / static_cast<double>(t.wire_bytes) > 49);
    const auto r = Receive(t, n);
    CHECK(r == t.decoded);
    std::vector<float> mags;
    size_t nonzero = 0;
    float min_sent = std::numeric_limits<float>::max(), max_unsent = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (r[i] != 0) {
        ++nonzero;
        REQUIRE(r[i] == v[i]);
        min_sent = std::min(min_sent, std::fabs(v[i]));
      } else {
        max_unsent = std::max(max_unsent, std::fabs(v[i]));
      }
    }
    CHECK(nonzero == k);
    CHECK(min_sent >= max_unsent);
    for (const auto& c : t.chunks) CHECK(c.base == 7);
  }
  SECTION("topk falls back to floats where pairs would be larger") {
    std::vector<float> w(1000, 0.0f);
    for (int i = 0; i < 400; ++i) w[i] = 1.0f + static_cast<float>(i);  // all in chunk 0
    const auto t = EncodeTransfer(w, *ParseCompress("topk:0.4"), 1, 2, 3, 500);
    REQUIRE(t.chunks.size() == 2);
    CHECK(t.chunks[0].encoding == static_cast<uint8_t>(Encoding::kNone));
    CHECK(t.chunks[1].encoding == static_cast<uint8_t>(Encoding::kTopK));
    CHECK(t.chunks[1].idx.empty());
    CHECK(Receive(t, 1000) == w);
  }
}

TEST_CASE("compress: error feedback sends what top-k left out in later rounds",
          "[gossip][compress]") {
  // The node keys transfers by the receiver's reference: each round sends the top-k of
  // (model - reference), and the reference moves by what was sent. With a fixed model the
  // reference converges to it: nothing is lost, only delayed.
  const uint32_t n = 10000;
  const auto model = RandomParams(n, 3);
  std::vector<float> ref(n, 0.0f);
  double first = 0;
  for (int round = 1; round <= 60; ++round) {
    std::vector<float> delta(n);
    for (uint32_t i = 0; i < n; ++i) delta[i] = model[i] - ref[i];
    const auto t = EncodeTransfer(delta, *ParseCompress("topk:0.05"), round, 0, 1);
    const auto r = Receive(t, n);
    for (uint32_t i = 0; i < n; ++i) ref[i] += r[i];
    double err = 0;
    for (uint32_t i = 0; i < n; ++i) err += (model[i] - ref[i]) * (model[i] - ref[i]);
    if (round == 1) first = err;
    if (round == 60) CHECK(err < first * 1e-6);
  }
}

TEST_CASE("compress: plain and int8 chunks stay in the frame they came in", "[gossip][compress]") {
  for (bool sealed : {false, true}) {
    Codec codec("default", sealed ? testing::MakeKeyring() : nullptr);
    const auto v = RandomParams(5000, 17);
    for (const char* spec : {"none", "int8"}) {
      INFO(spec << (sealed ? " sealed" : ""));
      const auto t = EncodeTransfer(v, *ParseCompress(spec), 4, 9, 0, 2048);
      for (const auto& c : t.chunks) {
        const auto bytes = codec.EncodeFrame(Frame{"n1", c, 1});
        REQUIRE_FALSE(bytes.empty());
        auto copied = codec.DecodeFrame(bytes.data(), bytes.size(), nullptr);
        REQUIRE(copied);
        ParamChunk want = std::get<ParamChunk>(copied->body);
        REQUIRE(ExpandChunk(&want));
        for (size_t lead : {BigFrame::kLead, size_t{0}}) {
          INFO("lead " << lead);
          std::weak_ptr<uint8_t[]> owner;
          auto f = DecodeHeld(codec, bytes, &owner, lead);
          REQUIRE(f);
          ParamChunk d = std::get<ParamChunk>(f->body);
          f.reset();
          const HeldValues& h = d.held;
          REQUIRE(h);
          // In place only where the envelope is aligned in the reader's buffer (plaintext).
          CHECK(owner.expired() == (sealed || lead != BigFrame::kLead));
          CHECK(d.data.empty());
          CHECK(d.q.empty());
          CHECK(d.scales.empty());
          CHECK(d.expanded);
          CHECK(h.n == c.count);
          CHECK(d.wire_bytes == ChunkWireBytes(c));
          CHECK(ChunkWireBytes(d) == ChunkWireBytes(c));
          std::vector<float> values(h.n);
          if (c.encoding == static_cast<uint8_t>(Encoding::kInt8)) {
            REQUIRE(h.q != nullptr);
            CHECK(h.f == nullptr);
            CHECK(h.ns == c.scales.size());
            REQUIRE(DequantizeInt8Chunk(h.q, h.s, h.n, values.data()));
          } else {
            REQUIRE(h.f != nullptr);
            std::copy(h.f, h.f + h.n, values.begin());
          }
          CHECK(values == want.data);
          ParamChunk again = d;
          REQUIRE(CheckChunk(&again));   // checked already: not scanned again
          REQUIRE(ExpandChunk(&again));  // copies the values out and lets the frame go
          CHECK_FALSE(again.held);
          CHECK(again.data == want.data);
          d = ParamChunk{};
          again = ParamChunk{};
          CHECK(owner.expired());
        }
      }
    }
  }
}

TEST_CASE("compress: compressed frames round-trip through the codec", "[gossip][compress]") {
  Codec codec("default", nullptr);
  const auto v = RandomParams(3000, 9);
  for (const char* spec : {"fp16", "int8", "topk:0.1"}) {
    INFO(spec);
    const auto t = EncodeTransfer(v, *ParseCompress(spec), 4, 9, 2, 1024);
    for (const auto& c : t.chunks) {
      const auto bytes = codec.EncodeFrame(Frame{"n1", c, 1});
      REQUIRE_FALSE(bytes.empty());
      Reject why{};
      auto f = codec.DecodeFrame(bytes.data(), bytes.size(), &why);
      REQUIRE(f);
      const auto& d = std::get<ParamChunk>(f->body);
      CHECK(d.base == 2);
      CHECK(d.encoding == c.encoding);
      CHECK(d.wire_bytes == ChunkWireBytes(c));
      // int8 stays compact (folded from q and scales), the rest arrives dense.
      ParamChunk dense = d;
      if (c.encoding == static_cast<uint8_t>(Encoding::kInt8)) {
        CHECK(d.data.empty());
        CHECK(d.q == c.q);
        CHECK(d.scales == c.scales);
        std::vector<float> values(d.q.size());
        DequantizeInt8Chunk(d.q, d.scales, values.data());
        CHECK(std::equal(values.begin(), values.end(), t.decoded.begin() + c.offset));
        REQUIRE(ExpandChunk(&dense));
        CHECK(dense.q.empty());
      }
      REQUIRE(dense.data.size() == c.count);
      CHECK(std::equal(dense.data.begin(), dense.data.end(), t.decoded.begin() + c.offset));
      // The node checks what a simulated network hands over; what the codec checked already
      // passes unchanged, and expands to the same values.
      ParamChunk again = d;
      REQUIRE(CheckChunk(&again));
      CHECK(again.data == d.data);
      CHECK(again.q == d.q);
      REQUIRE(ExpandChunk(&again));
      CHECK(again.data == dense.data);
      // A decoded chunk re-encodes (its encoding kept) to the same values (found by
      // fuzz_frame_plain's re-encoding oracle).
      const auto bytes2 = codec.EncodeFrame(*f);
      REQUIRE_FALSE(bytes2.empty());
      auto f2 = codec.DecodeFrame(bytes2.data(), bytes2.size(), nullptr);
      REQUIRE(f2);
      ParamChunk back = std::get<ParamChunk>(f2->body);
      REQUIRE(ExpandChunk(&back));
      CHECK(back.data == dense.data);
    }
  }
}

TEST_CASE("compress: malformed compressed frames are rejected", "[gossip][compress]") {
  Codec codec("default", nullptr);
  const auto v = RandomParams(600, 4);
  const auto int8 = EncodeTransfer(v, *ParseCompress("int8"), 4, 9, 0).chunks.at(0);
  const auto fp16 = EncodeTransfer(v, *ParseCompress("fp16"), 4, 9, 0).chunks.at(0);
  const auto topk = EncodeTransfer(v, *ParseCompress("topk:0.05"), 4, 9, 1).chunks.at(0);
  struct Bad {
    const char* what;
    ParamChunk c;
  };
  std::vector<Bad> bad;
  auto add = [&](const char* what, ParamChunk c, auto&& mutate) {
    mutate(c);
    bad.push_back({what, std::move(c)});
  };
  add("NaN scale", int8, [](ParamChunk& c) { c.scales[1] = std::nanf(""); });
  add("infinite scale", int8, [](ParamChunk& c) { c.scales[0] = INFINITY; });
  add("negative scale", int8, [](ParamChunk& c) { c.scales[0] = -1; });
  add("huge scale overflows", int8, [](ParamChunk& c) {
    c.scales[0] = 3e38f;
    c.q[0] = 127;
  });
  add("wrong block count", int8, [](ParamChunk& c) { c.scales.pop_back(); });
  add("extra block", int8, [](ParamChunk& c) { c.scales.push_back(1); });
  add("int8 -128", int8, [](ParamChunk& c) { c.q[3] = -128; });
  add("int8 short", int8, [](ParamChunk& c) { c.q.pop_back(); });
  add("fp16 inf", fp16, [](ParamChunk& c) { c.half[2] = 0x7C00; });
  add("fp16 NaN", fp16, [](ParamChunk& c) { c.half[2] = 0xFE01; });
  add("fp16 count mismatch", fp16, [](ParamChunk& c) { c.count += 1; });
  add("index out of range", topk, [](ParamChunk& c) { c.idx.back() = c.count; });
  add("indices not ascending", topk, [](ParamChunk& c) { std::swap(c.idx[0], c.idx[1]); });
  add("duplicate index", topk, [](ParamChunk& c) { c.idx[1] = c.idx[0]; });
  add("values and indices differ", topk, [](ParamChunk& c) { c.data.pop_back(); });
  add("NaN value", topk, [](ParamChunk& c) { c.data[0] = std::nanf(""); });
  add("unknown encoding", int8, [](ParamChunk& c) { c.encoding = 9; });
  add("count beyond the model", int8, [](ParamChunk& c) { c.offset = c.total - 10; });
  add("mixed fields", fp16, [](ParamChunk& c) { c.scales = {1.0f, 1.0f, 1.0f}; });
  ParamChunk plain = EncodeTransfer(v, *ParseCompress("none"), 4, 9, 0).chunks.at(0);
  REQUIRE(plain.data.size() == plain.count);
  add("plain NaN", plain, [](ParamChunk& c) { c.data[5] = std::nanf(""); });
  add("plain infinite", plain, [](ParamChunk& c) { c.data.back() = -INFINITY; });
  add("int8 called plain", int8, [](ParamChunk& c) { c.encoding = 0; });
  add("int8 with floats", int8, [](ParamChunk& c) { c.data = {1.0f}; });
  for (auto& b : bad) {
    INFO(b.what);
    const auto bytes = codec.EncodeFrame(Frame{"n1", b.c, 1});
    REQUIRE_FALSE(bytes.empty());
    Reject why = Reject::kTooLarge;
    CHECK_FALSE(codec.DecodeFrame(bytes.data(), bytes.size(), &why).has_value());
    CHECK(why == Reject::kSemantic);
    // The same where the values would stay in the frame.
    why = Reject::kTooLarge;
    CHECK_FALSE(DecodeHeld(codec, bytes, nullptr, BigFrame::kLead, &why).has_value());
    CHECK(why == Reject::kSemantic);
    ParamChunk c = b.c;
    CHECK_FALSE(ExpandChunk(&c));
  }
}

}  // namespace meshtrain::wire
