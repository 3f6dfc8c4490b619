// daemon::ChunkMixer: chunks whose values stay in the frame they came in
// (wire::HeldValues) fold exactly as chunks in vectors, and the frame is let go once folded.
#include "daemon/trainer/chunk_mixer.h"

#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <vector>

#include "wire/compress.h"

namespace meshtrain::daemon {
namespace {

std::vector<float> MixerRandom(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("chunk mixer: values held in their frame fold as values in vectors", "[daemon][mixer]") {
  const uint32_t total = 3000, half = 1500;
  const auto own = MixerRandom(total, 1);
  const auto peer = MixerRandom(total, 2);
  const auto t =
      wire::EncodeTransfer(MixerRandom(total, 3), *wire::ParseCompress("int8"), 1, 1, 0, half);
  REQUIRE(t.chunks.size() == 2);

  ChunkMixer by_vector, held;
  std::vector<std::weak_ptr<const void>> frames;
  for (uint32_t off : {0u, half}) {
    // Peer "a": plain floats; peer "b": int8.
    REQUIRE(by_vector.Push("a", total, off,
                           std::vector<float>(peer.begin() + off, peer.begin() + off + half), 0.5));
    const auto& c = t.chunks[off / half];
    REQUIRE(by_vector.PushInt8("b", total, off, c.q, c.scales, 0.25));

    auto floats =
        std::make_shared<std::vector<float>>(peer.begin() + off, peer.begin() + off + half);
    wire::HeldValues hf{floats, floats->data(), nullptr, nullptr, half, 0};
    auto bytes =
        std::make_shared<std::pair<std::vector<int8_t>, std::vector<float>>>(c.q, c.scales);
    wire::HeldValues hq{bytes,
                        nullptr,
                        bytes->first.data(),
                        bytes->second.data(),
                        half,
                        static_cast<uint32_t>(c.scales.size())};
    frames.push_back(floats);
    frames.push_back(bytes);
    floats.reset();
    bytes.reset();
    REQUIRE(held.PushHeld("a", total, off, std::move(hf), 0.5));
    REQUIRE(held.PushHeld("b", total, off, std::move(hq), 0.25));
  }
  by_vector.Drain();
  held.Drain();
  for (const auto& f : frames) CHECK(f.expired());  // folded, then let go

  auto x1 = own, x2 = own;
  CHECK(by_vector.Apply(x1.data(), total) == 2);
  CHECK(held.Apply(x2.data(), total) == 2);
  CHECK(x1 == x2);
  CHECK(x1 != own);

  // Inconsistent geometry is refused (the codec checked it; defence in depth).
  auto keep = std::make_shared<int>(0);
  CHECK_FALSE(held.PushHeld("c", total, 0, wire::HeldValues{}, 1.0));
  CHECK_FALSE(
      held.PushHeld("c", total, 0, wire::HeldValues{keep, nullptr, nullptr, nullptr, 4, 0}, 1.0));
  std::vector<int8_t> q(300, 1);
  std::vector<float> s(1, 1.0f);  // 300 values need 2 blocks of scales
  CHECK_FALSE(held.PushHeld("c", total, 0,
                            wire::HeldValues{keep, nullptr, q.data(), s.data(), 300, 1}, 1.0));
}

}  // namespace meshtrain::daemon
