// Length-prefixed TCP framing (wire/framing.h).
#include "wire/framing.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

namespace meshtrain::wire {
namespace {

std::vector<uint8_t> Payload(size_t n, uint8_t seed) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
  return p;
}

TEST_CASE("framing: big-endian length prefix", "[gossip][framing]") {
  const auto f = EncodeFramed(Payload(0x010203, 1));
  REQUIRE(f.size() == 4 + 0x010203);
  CHECK(f[0] == 0x00);
  CHECK(f[1] == 0x01);
  CHECK(f[2] == 0x02);
  CHECK(f[3] == 0x03);
  CHECK(f[4] == 1);
}

TEST_CASE("framing: payloads survive arbitrary read boundaries", "[gossip][framing]") {
  std::mt19937 rng(1234);
  std::vector<std::vector<uint8_t>> sent;
  std::vector<uint8_t> stream;
  for (int i = 0; i < 200; ++i) {
    const size_t n = std::uniform_int_distribution<size_t>(1, i % 10 == 0 ? 70000 : 300)(rng);
    sent.push_back(Payload(n, static_cast<uint8_t>(i)));
    const auto framed = EncodeFramed(sent.back());
    stream.insert(stream.end(), framed.begin(), framed.end());
  }
  for (const size_t max_read : {size_t{1}, size_t{3}, size_t{5}, size_t{1000}, size_t{65536}}) {
    CAPTURE(max_read);
    FrameDecoder dec(1 << 20);
    std::vector<std::vector<uint8_t>> got;
    size_t pos = 0;
    while (pos < stream.size()) {
      const size_t n =
          std::min(stream.size() - pos, std::uniform_int_distribution<size_t>(1, max_read)(rng));
      dec.Feed(stream.data() + pos, n);
      pos += n;
      while (auto p = dec.Next()) got.push_back(std::move(*p));
    }
    CHECK_FALSE(dec.error());
    CHECK(dec.buffered() == 0);
    REQUIRE(got.size() == sent.size());
    CHECK(got == sent);
  }
}

TEST_CASE("framing: large frames take direct reads into their own buffer", "[gossip][framing]") {
  std::mt19937 rng(99);
  std::vector<std::vector<uint8_t>> sent;
  std::vector<uint8_t> stream;
  for (int i = 0; i < 40; ++i) {
    const size_t n =
        i % 3 == 0 ? 50
                   : std::uniform_int_distribution<size_t>(FrameDecoder::kDirectBytes, 300000)(rng);
    sent.push_back(Payload(n, static_cast<uint8_t>(i)));
    const auto framed = EncodeFramed(sent.back());
    stream.insert(stream.end(), framed.begin(), framed.end());
  }
  FrameDecoder dec(1 << 20);
  std::vector<std::vector<uint8_t>> got;
  size_t pos = 0, direct = 0, taken = 0;
  while (pos < stream.size()) {
    // A reader as TcpHub's: into the frame's buffer when the decoder offers it (at most what
    // the frame still needs), else a staging buffer fed in.
    size_t room = 0;
    uint8_t* space = dec.Space(&room);
    const size_t want = std::uniform_int_distribution<size_t>(1, 65536)(rng);
    const size_t n = std::min({stream.size() - pos, want, space != nullptr ? room : want});
    if (space != nullptr) {
      std::copy(stream.begin() + static_cast<std::ptrdiff_t>(pos),
                stream.begin() + static_cast<std::ptrdiff_t>(pos + n), space);
      dec.Commit(n);
      direct += n;
    } else {
      dec.Feed(stream.data() + pos, n);
    }
    pos += n;
    while (true) {
      if (dec.BigReady() && rng() % 2 == 0) {
        // Taken as read (TcpHub's BigFrameFn): the envelope after a 1-byte marker is aligned.
        const BigFrame f = dec.TakeBig();
        CHECK(reinterpret_cast<uintptr_t>(f.data() + 1) % 16 == 0);
        got.emplace_back(f.data(), f.data() + f.len);
        taken++;
        continue;
      }
      auto p = dec.Next();
      if (!p) break;
      got.push_back(std::move(*p));
    }
  }
  CHECK_FALSE(dec.error());
  CHECK(dec.buffered() == 0);
  CHECK(got == sent);
  CHECK(taken > 5);
  CHECK(direct > stream.size() / 2);  // most of the large frames' bytes went straight in
  // A header alone does not make the decoder allocate the frame: a quarter of kDirectBytes of
  // its payload must have come first.
  FrameDecoder lazy(1 << 20);
  const auto framed = EncodeFramed(Payload(500000, 1));
  size_t room = 0;
  lazy.Feed(framed.data(), 4 + FrameDecoder::kDirectBytes / 4 - 1);
  CHECK_FALSE(lazy.Next());
  CHECK(lazy.Space(&room) == nullptr);
  lazy.Feed(framed.data() + 4 + FrameDecoder::kDirectBytes / 4 - 1, 1);
  CHECK_FALSE(lazy.Next());
  REQUIRE(lazy.Space(&room) != nullptr);
  CHECK(room == 500000 - FrameDecoder::kDirectBytes / 4);
}

TEST_CASE("framing: oversized and zero length prefixes are sticky errors", "[gossip][framing]") {
  SECTION("oversized") {
    FrameDecoder dec(1000);
    const auto ok = EncodeFramed(Payload(1000, 3));  // exactly the limit
    dec.Feed(ok);
    const auto p = dec.Next();
    REQUIRE(p);
    CHECK(p->size() == 1000);
    const uint8_t big[] = {0x00, 0x00, 0x03, 0xE9};  // 1001
    dec.Feed(big, sizeof(big));
    CHECK_FALSE(dec.Next());
    CHECK(dec.error());
    CHECK(dec.buffered() == 0);
    // Nothing gets through afterwards, even valid frames.
    dec.Feed(ok);
    CHECK_FALSE(dec.Next());
    CHECK(dec.error());
    CHECK(dec.buffered() == 0);
  }
  SECTION("a huge prefix is refused before its body arrives") {
    FrameDecoder dec(1 << 20);
    const uint8_t huge[] = {0xFF, 0xFF, 0xFF, 0xFF};
    dec.Feed(huge, sizeof(huge));
    CHECK_FALSE(dec.Next());
    CHECK(dec.error());
  }
  SECTION("zero length") {
    FrameDecoder dec(100);
    const uint8_t zero[] = {0, 0, 0, 0, 1, 2, 3};
    dec.Feed(zero, sizeof(zero));
    CHECK_FALSE(dec.Next());
    CHECK(dec.error());
  }
  SECTION("a partial prefix is not an error") {
    FrameDecoder dec(100);
    const uint8_t part[] = {0, 0};
    dec.Feed(part, sizeof(part));
    CHECK_FALSE(dec.Next());
    CHECK_FALSE(dec.error());
    CHECK(dec.buffered() == 2);
  }
}

}  // namespace
}  // namespace meshtrain::wire
