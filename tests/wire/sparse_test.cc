// The sparse encoding of parameter transfers (wire/compress.h): mostly-zero chunks of few
// distinct values round-trip bit for bit, chunks that do not fit go as int8, the exact bytes of
// the form, the checks a receiver makes of every field, and the size of a streamed transfer.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

#include "wire/codec.h"
#include "wire/compress.h"
#include "wire/framing.h"

namespace meshtrain::wire {
namespace {

const CompressSpec kSparse{Encoding::kSparse, 0.01};

// n values, each nonzero with probability `density`, then one of `levels` distinct values
// (positive and negative, never -0.0), drawn at random.
std::vector<float> SparseValues(uint32_t n, double density, uint32_t levels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> level(levels);
  for (uint32_t i = 0; i < levels; ++i) {
    level[i] = (i % 2 == 0 ? 1.0f : -1.0f) * 0.0137f * static_cast<float>(i / 2 + 1);
  }
  std::bernoulli_distribution nonzero(density);
  std::uniform_int_distribution<uint32_t> pick(0, levels - 1);
  std::vector<float> v(n, 0.0f);
  for (auto& x : v) {
    if (nonzero(rng)) x = level[pick(rng)];
  }
  return v;
}

std::vector<float> DenseValues(uint32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The whole of `v` as one streamed chunk.
ParamChunk EncodeOne(const std::vector<float>& v, const CompressSpec& spec = kSparse) {
  const auto n = static_cast<uint32_t>(v.size());
  return EncodeStreamChunk(v.data(), n, 0, spec, 3, 7, n);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

uint64_t Int8Bytes(uint32_t n) { return n + 4 * uint64_t{(n + kInt8Block - 1) / kInt8Block}; }

// Positions 0, 200, 20201 and 65535 of a full-size chunk (gaps 0, 199, 20000 and 45333: varints
// of 1, 2, 3 and 3 bytes) with the values 0.5, -1.25, 3 and 0.5.
std::vector<float> FourValues() {
  std::vector<float> v(kParamChunkFloats, 0.0f);
  v[0] = 0.5f;
  v[200] = -1.25f;
  v[20201] = 3.0f;
  v[65535] = 0.5f;
  return v;
}

// A frame as TcpHub hands a large one over (the payload BigFrame::kLead bytes into a buffer of
// its own), decoded in place.
std::optional<Frame> DecodeHeld(const Codec& codec, const std::vector<uint8_t>& bytes,
                                Reject* why) {
  std::shared_ptr<uint8_t[]> buf(new uint8_t[BigFrame::kLead + bytes.size()]);
  std::copy(bytes.begin(), bytes.end(), buf.get() + BigFrame::kLead);
  return codec.DecodeFrameHeld(buf, buf.get() + BigFrame::kLead, bytes.size(), why);
}

}  // namespace

TEST_CASE("sparse: chunks of few levels round-trip bit for bit", "[gossip][compress]") {
  const uint32_t n = kParamChunkFloats;
  std::vector<float> gaps(n, 0.0f);  // gaps 5, 199 and 19999: varints of 1, 2 and 3 bytes
  gaps[5] = 1.0f, gaps[205] = 2.0f, gaps[20205] = 1.0f;
  std::vector<float> last(n, 0.0f);
  last[n - 1] = -7.5f;
  const std::vector<std::pair<const char*, std::vector<float>>> cases = {
      {"2% at 4 levels", SparseValues(n, 0.02, 4, 1)},
      {"2% at 200 levels", SparseValues(n, 0.02, 200, 2)},
      {"2% at 1 level", SparseValues(n, 0.02, 1, 3)},
      {"0.5% at 256 levels", SparseValues(n, 0.005, 256, 4)},
      {"short chunk at 16 levels", SparseValues(1000, 0.01, 16, 5)},
      {"all zero", std::vector<float>(n, 0.0f)},
      {"one value, at the last index", last},
      {"long gaps", gaps},
      {"four values", FourValues()},
  };
  for (const auto& [what, v] : cases) {
    INFO(what);
    ParamChunk c = EncodeOne(v);
    REQUIRE(c.encoding == static_cast<uint8_t>(Encoding::kSparse));
    CHECK(c.count == v.size());
    CHECK(c.data.empty());
    CHECK(c.q.empty());
    CHECK(std::is_sorted(c.book.begin(), c.book.end()));
    const auto nonzero =
        static_cast<size_t>(std::count_if(v.begin(), v.end(), [](float x) { return x != 0; }));
    CHECK(c.codes.size() == (nonzero * SparseBits(c.book.size()) + 7) / 8);
    CHECK(ChunkWireBytes(c) == 4 * c.book.size() + c.gaps.size() + c.codes.size());
    CHECK(ChunkWireBytes(c) < Int8Bytes(c.count));
    REQUIRE(ExpandChunk(&c));
    CHECK(c.book.empty());
    CHECK(SameBits(c.data, v));
    // EncodeTransfer keeps what the receiver holds: the values themselves.
    const EncodedTransfer t = EncodeTransfer(v, kSparse, 3, 7, 0);
    REQUIRE(t.chunks.size() == (v.size() + kParamChunkFloats - 1) / kParamChunkFloats);
    CHECK(t.chunks[0].encoding == static_cast<uint8_t>(Encoding::kSparse));
    CHECK(SameBits(t.decoded, v));
  }
  // The exact bytes: positions as varints (low 7 bits first, the high bit set on all but the
  // last byte), then 2-bit codes into the ascending book from the lowest bit of a byte up.
  const ParamChunk c = EncodeOne(FourValues());
  CHECK(c.book == std::vector<float>{-1.25f, 0.5f, 3.0f});
  CHECK(c.gaps == std::vector<uint8_t>{0x00, 0xC7, 0x01, 0xA0, 0x9C, 0x01, 0x95, 0xE2, 0x02});
  CHECK(c.codes == std::vector<uint8_t>{0x61});  // codes 1, 0, 2, 1
  CHECK(ChunkWireBytes(c) == 3 * 4 + 9 + 1);
  // Codes of 1, 4 and 8 bits for books of 2, 16 and 17 values.
  for (const auto& [levels, bits] : {std::pair{2u, 1u}, {16u, 4u}, {17u, 8u}}) {
    INFO(levels << " levels");
    std::vector<float> v(4096, 0.0f);
    for (uint32_t i = 0; i < 3 * levels; ++i) v[i * 11] = static_cast<float>(i % levels) + 1.0f;
    const ParamChunk s = EncodeOne(v);
    REQUIRE(s.book.size() == levels);
    CHECK(s.codes.size() == (3 * levels * bits + 7) / 8);
  }
}

TEST_CASE("sparse: -0.0 counts as zero and arrives as +0.0", "[gossip][compress]") {
  std::vector<float> v(5000, 0.0f);
  for (uint32_t i = 0; i < v.size(); i += 3) v[i] = -0.0f;
  v[10] = 2.0f;
  v[4999] = -2.0f;
  ParamChunk c = EncodeOne(v);
  REQUIRE(c.encoding == static_cast<uint8_t>(Encoding::kSparse));
  CHECK(c.book == std::vector<float>{-2.0f, 2.0f});
  CHECK(c.gaps.size() == 3);  // 10, then 4988 in two bytes
  REQUIRE(ExpandChunk(&c));
  std::vector<float> want(v.size(), 0.0f);  // +0.0
  want[10] = 2.0f;
  want[4999] = -2.0f;
  CHECK(SameBits(c.data, want));
  CHECK(SameBits(EncodeTransfer(v, kSparse, 3, 7, 0).decoded, want));
}

TEST_CASE("sparse: a chunk through the codec", "[gossip][compress]") {
  Codec codec("default", nullptr);
  for (const auto& v :
       {SparseValues(kParamChunkFloats, 0.02, 4, 9), FourValues(), std::vector<float>(300, 0.0f)}) {
    const ParamChunk c = EncodeOne(v);
    REQUIRE(c.encoding == static_cast<uint8_t>(Encoding::kSparse));
    const auto bytes = codec.EncodeFrame(Frame{"n1", c, 1});
    REQUIRE_FALSE(bytes.empty());
    for (bool held : {false, true}) {
      INFO((held ? "held" : "copied") << ", " << c.book.size() << " levels");
      Reject why{};
      auto f = held ? DecodeHeld(codec, bytes, &why)
                    : codec.DecodeFrame(bytes.data(), bytes.size(), &why);
      REQUIRE(f);
      const auto& d = std::get<ParamChunk>(f->body);
      CHECK(d.encoding == static_cast<uint8_t>(Encoding::kSparse));
      CHECK(d.wire_bytes == ChunkWireBytes(c));
      CHECK_FALSE(d.held);
      CHECK(d.book.empty());
      CHECK(SameBits(d.data, v));
      // A decoded chunk (dense, its encoding kept as a record) re-encodes to the same values.
      const auto bytes2 = codec.EncodeFrame(*f);
      REQUIRE_FALSE(bytes2.empty());
      auto f2 = codec.DecodeFrame(bytes2.data(), bytes2.size(), nullptr);
      REQUIRE(f2);
      ParamChunk back = std::get<ParamChunk>(f2->body);
      REQUIRE(ExpandChunk(&back));
      CHECK(SameBits(back.data, v));
    }
  }
}

TEST_CASE("sparse: chunks that do not fit go as int8", "[gossip][compress]") {
  const uint32_t n = kParamChunkFloats;
  std::vector<float> levels300(n, 0.0f);  // 1% nonzero, 300 distinct values
  for (uint32_t i = 0; i < 655; ++i) levels300[i * 100] = 0.001f * static_cast<float>(i % 300 + 1);
  std::vector<float> nan = SparseValues(n, 0.02, 4, 6);
  nan[1234] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> inf = SparseValues(n, 0.02, 4, 6);
  inf[77] = -std::numeric_limits<float>::infinity();
  const std::vector<std::pair<const char*, std::vector<float>>> cases = {
      {"dense model values", DenseValues(n, 8)},
      {"300 levels", levels300},
      {"a NaN", nan},
      {"an infinity", inf},
      {"dense at 3 levels", SparseValues(n, 0.95, 3, 10)},
  };
  for (const auto& [what, v] : cases) {
    INFO(what);
    const ParamChunk c = EncodeOne(v);
    const ParamChunk int8 = EncodeOne(v, CompressSpec{Encoding::kInt8, 0.01});
    CHECK(c.encoding == static_cast<uint8_t>(Encoding::kInt8));
    CHECK(c.book.empty());
    CHECK(c.gaps.empty());
    CHECK(c.codes.empty());
    CHECK(c.q == int8.q);  // int8's own form, also of a value not finite
    REQUIRE(c.scales.size() == int8.scales.size());
    CHECK(std::memcmp(c.scales.data(), int8.scales.data(), c.scales.size() * sizeof(float)) == 0);
    CHECK(ChunkWireBytes(c) == Int8Bytes(n));
    // int8 sends what is not finite as a scale that is not; the receiver refuses it.
    const bool finite = std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
    ParamChunk r = c;
    CHECK(ExpandChunk(&r) == finite);
  }
}

TEST_CASE("sparse: wire bytes", "[gossip][compress]") {
  // A nonzero value every 50th position at 4 levels: 1311 positions of one gap byte each, 2 bits
  // a code, 4 book values: 1311 + 328 + 16 bytes, against 1 + 1/64 a value for int8.
  const uint32_t n = kParamChunkFloats;
  std::vector<float> v(n, 0.0f);
  for (uint32_t i = 0; i < n; i += 50) v[i] = 0.25f * static_cast<float>(i / 50 % 4 + 1);
  ParamChunk c = EncodeOne(v);
  REQUIRE(c.encoding == static_cast<uint8_t>(Encoding::kSparse));
  CHECK(c.gaps.size() == 1311);
  CHECK(c.codes.size() == 328);
  CHECK(ChunkWireBytes(c) == 1311 + 328 + 16);
  CHECK(ChunkWireBytes(c) < 0.03 * n);
  // 2 % at random positions: a few gaps take two bytes.
  CHECK(ChunkWireBytes(EncodeOne(SparseValues(n, 0.02, 4, 12))) < 0.03 * n);
  // Sparse only when smaller than int8: 256 values make 260 int8 bytes, and k values in a row
  // at one level 4 + k + ceil(k / 8) sparse bytes (259 for 226 values, 260 for 227), at four
  // levels 16 + k + ceil(k / 4) (259 for 194, 260 for 195).
  for (const auto& [levels, k, sparse] :
       {std::tuple{1u, 226u, true}, {1u, 227u, false}, {4u, 194u, true}, {4u, 195u, false}}) {
    INFO(k << " values at " << levels << " levels");
    std::vector<float> w(256, 0.0f);
    for (uint32_t i = 0; i < k; ++i) w[i] = 0.5f * static_cast<float>(i % levels + 1);
    const ParamChunk s = EncodeOne(w);
    CHECK((s.encoding == static_cast<uint8_t>(Encoding::kSparse)) == sparse);
    CHECK(ChunkWireBytes(s) == (sparse ? 259 : 260));
  }
}

TEST_CASE("sparse: malformed chunks are rejected", "[gossip][compress]") {
  Codec codec("default", nullptr);
  const ParamChunk four = EncodeOne(FourValues());  // book -1.25, 0.5, 3; codes 1, 0, 2, 1
  std::vector<float> three_v(1000, 0.0f);           // three 2-bit codes: 2 bits of 8 unused
  three_v[1] = 1.0f, three_v[2] = 2.0f, three_v[3] = 3.0f;
  const ParamChunk three = EncodeOne(three_v);
  REQUIRE(four.encoding == static_cast<uint8_t>(Encoding::kSparse));
  REQUIRE(three.encoding == static_cast<uint8_t>(Encoding::kSparse));
  REQUIRE(three.codes == std::vector<uint8_t>{0x24});
  struct Bad {
    const char* what;
    ParamChunk c;
  };
  std::vector<Bad> bad;
  auto add = [&](const char* what, const ParamChunk& from, auto&& mutate) {
    ParamChunk c = from;
    mutate(c);
    bad.push_back({what, std::move(c)});
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  add("book not ascending", four, [](ParamChunk& c) { std::swap(c.book[0], c.book[1]); });
  add("book value twice", four, [](ParamChunk& c) { c.book[1] = c.book[0]; });
  add("book holds 0", four, [](ParamChunk& c) { c.book[1] = 0.0f; });
  add("book holds -0.0", four, [](ParamChunk& c) { c.book[1] = -0.0f; });
  add("book holds infinity", four, [](ParamChunk& c) { c.book[2] = INFINITY; });
  add("book holds NaN", four, [nan](ParamChunk& c) { c.book[2] = nan; });
  add("book of 257", four, [](ParamChunk& c) {
    c.book.resize(257);
    for (uint32_t i = 0; i < 257; ++i) c.book[i] = static_cast<float>(i) + 1.0f;
    c.codes = {1, 0, 2, 1};  // 8 bits a code
  });
  add("code beyond the book", four, [](ParamChunk& c) { c.codes[0] |= 0x03; });
  add("position beyond count", four, [](ParamChunk& c) { c.count -= 1; });
  add("varint cut off", four, [](ParamChunk& c) { c.gaps.push_back(0x80); });
  add("varint beyond 32 bits", four, [](ParamChunk& c) {
    c.gaps.erase(c.gaps.begin());  // 2^32 (as a uint32: 0, the position it replaces)
    c.gaps.insert(c.gaps.begin(), {0x80, 0x80, 0x80, 0x80, 0x10});
  });
  add("varint of 6 bytes", four, [](ParamChunk& c) {
    c.gaps.erase(c.gaps.begin());
    c.gaps.insert(c.gaps.begin(), {0x80, 0x80, 0x80, 0x80, 0x80, 0x00});
  });
  add("varint not shortest", four, [](ParamChunk& c) {
    c.gaps.erase(c.gaps.begin());
    c.gaps.insert(c.gaps.begin(), {0x80, 0x00});
  });
  add("codes too long", four, [](ParamChunk& c) { c.codes.push_back(0); });
  add("codes too short", four, [](ParamChunk& c) { c.codes.clear(); });
  add("unused code bits set", three, [](ParamChunk& c) { c.codes[0] |= 0x80; });
  add("positions without a book", three, [](ParamChunk& c) { c.book.clear(); });
  add("sparse with floats", three, [](ParamChunk& c) { c.data.assign(c.count, 1.0f); });
  add("int8 with a book", EncodeOne(DenseValues(1000, 3)), [](ParamChunk& c) { c.book = {1.0f}; });
  for (auto& b : bad) {
    INFO(b.what);
    ParamChunk c = b.c;
    CHECK_FALSE(ExpandChunk(&c));
    c = b.c;
    CHECK_FALSE(CheckChunk(&c));
    const auto bytes = codec.EncodeFrame(Frame{"n1", b.c, 1});
    REQUIRE_FALSE(bytes.empty());
    Reject why = Reject::kTooLarge;
    CHECK_FALSE(codec.DecodeFrame(bytes.data(), bytes.size(), &why).has_value());
    CHECK(why == Reject::kSemantic);
    why = Reject::kTooLarge;
    CHECK_FALSE(DecodeHeld(codec, bytes, &why).has_value());
    CHECK(why == Reject::kSemantic);
  }
  // The originals pass.
  for (const ParamChunk& good : {four, three}) {
    ParamChunk c = good;
    CHECK(ExpandChunk(&c));
  }
}

TEST_CASE("sparse: corrupted chunks are refused or decode to count finite values",
          "[gossip][compress]") {
  // Random damage to a valid chunk's fields: the checks never read out of bounds (the sanitizer
  // build runs this too), and what they accept is `count` finite floats.
  std::mt19937_64 rng(31);
  const ParamChunk good = EncodeOne(SparseValues(5000, 0.03, 5, 30));
  REQUIRE(good.encoding == static_cast<uint8_t>(Encoding::kSparse));
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    ParamChunk c = good;
    for (int k = 0, n = static_cast<int>(rng() % 3) + 1; k < n; ++k) {
      switch (rng() % 6) {
        case 0:
          if (!c.gaps.empty()) c.gaps[rng() % c.gaps.size()] ^= uint8_t{1} << (rng() % 8);
          break;
        case 1:
          if (!c.codes.empty()) c.codes[rng() % c.codes.size()] ^= uint8_t{1} << (rng() % 8);
          break;
        case 2: {
          float& b = c.book[rng() % c.book.size()];
          uint32_t bits;
          std::memcpy(&bits, &b, sizeof bits);
          bits ^= 1u << (rng() % 32);
          std::memcpy(&b, &bits, sizeof bits);
          break;
        }
        case 3:
          c.gaps.resize(rng() % (good.gaps.size() + 8), static_cast<uint8_t>(rng()));
          break;
        case 4:
          c.codes.resize(rng() % (good.codes.size() + 4), static_cast<uint8_t>(rng()));
          break;
        default:
          c.count = static_cast<uint32_t>(rng() % (good.count + 2));
      }
    }
    if (!ExpandChunk(&c)) continue;
    ++accepted;
    REQUIRE(c.data.size() == c.count);
    REQUIRE(std::all_of(c.data.begin(), c.data.end(), [](float x) { return std::isfinite(x); }));
  }
  CHECK(accepted > 0);  // some damage leaves a valid chunk (a code to another book value)
}

TEST_CASE("sparse: a streamed transfer's bytes are those of its chunks", "[gossip][compress]") {
  // Sparse chunks and dense ones (sent as int8) in one model, whole and as a fragment.
  const uint32_t total = 300000;
  std::vector<float> params = SparseValues(total, 0.02, 4, 21);
  const std::vector<float> dense = DenseValues(total, 22);
  std::copy(dense.begin() + 180000, dense.end(), params.begin() + 180000);
  const auto total_bytes = [&](const CompressSpec& spec, uint32_t floats, StreamSpan span,
                               std::vector<int>* kinds) {
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < StreamChunks(total, floats, span); ++i) {
      const ParamChunk c = EncodeStreamChunk(params.data(), total, i, spec, 3, 7, floats, span);
      bytes += ChunkWireBytes(c);
      if (kinds != nullptr) (*kinds)[c.encoding]++;
    }
    return bytes;
  };
  for (uint32_t floats : {kParamChunkFloats, 1000u, 7u}) {
    for (const StreamSpan span : {StreamSpan{}, StreamSpan{2500, 250000}}) {
      INFO(floats << " floats a chunk, span " << span.begin << ".." << span.end);
      std::vector<int> kinds(kMaxEncoding + 1, 0);
      const uint64_t bytes = total_bytes(kSparse, floats, span, &kinds);
      CHECK(StreamWireBytes(params.data(), total, kSparse, floats, span) == bytes);
      CHECK(kinds[static_cast<int>(Encoding::kSparse)] > 0);
      CHECK(kinds[static_cast<int>(Encoding::kInt8)] > 0);
      // Without the values: the int8 size, which bounds it.
      const CompressSpec int8{Encoding::kInt8, 0.01};
      CHECK(StreamWireBytes(total, kSparse, floats, span) ==
            total_bytes(int8, floats, span, nullptr));
      CHECK(StreamWireBytes(total, kSparse, floats, span) >= bytes);
      // The other schemes' sizes follow from the counts: the same either way.
      for (const char* name : {"none", "fp16", "int8", "topk:0.1"}) {
        INFO(name);
        const CompressSpec spec = *ParseCompress(name);
        const uint64_t want = total_bytes(spec, floats, span, nullptr);
        CHECK(StreamWireBytes(params.data(), total, spec, floats, span) == want);
        CHECK(StreamWireBytes(total, spec, floats, span) == want);
      }
    }
  }
}

}  // namespace meshtrain::wire
