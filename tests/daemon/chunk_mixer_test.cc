// daemon::ChunkMixer: chunks whose values stay in the frame they came in
// (wire::HeldValues) fold exactly as chunks in vectors, and the frame is let go once folded.
#include "daemon/trainer/chunk_mixer.h"

#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <string>
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

namespace meshtrain::daemon {

// Robust mixing judges against the center, the model the last mix made (docs/design.md "Robust
// mixing"), and against the receiver's own model only before there is one.
TEST_CASE("chunk mixer: robust mixing judges against the last mix", "[daemon][mixer][robust]") {
  const size_t n = 1000;
  ChunkMixer mixer;
  mixer.SetRobust(true);
  const std::vector<float> own(n, 0.0f);
  auto around = [&](float at, uint32_t seed) {
    std::vector<float> v = MixerRandom(n, seed);
    for (float& x : v) x = at + 0.1f * x;
    return v;
  };
  // No center yet: judged against our own model, a model near it is accepted as it is.
  std::vector<float> near_own = around(0.0f, 1);
  const std::vector<float> near_own_copy = near_own;
  CHECK(mixer.JudgeWhole("p0", own.data(), near_own.data(), n));
  CHECK(near_own == near_own_copy);
  // A mix (nothing folded) makes the model at 5 the center.
  std::vector<float> x(n, 5.0f);
  CHECK(mixer.Apply(x.data(), n) == 0);
  for (uint32_t i = 0; i < 12; ++i) {
    std::vector<float> honest = around(5.0f, 10 + i);
    CHECK(mixer.JudgeWhole("p" + std::to_string(i % 3), own.data(), honest.data(), n));
  }
  // Our own model is now far from where the mesh stood: a peer that sends it is refused, and
  // one that sends a model near the center is accepted.
  std::vector<float> stale = around(0.0f, 30);
  CHECK_FALSE(mixer.JudgeWhole("bad", own.data(), stale.data(), n));
  std::vector<float> honest = around(5.0f, 31);
  CHECK(mixer.JudgeWhole("p1", own.data(), honest.data(), n));
  // The same holds for streamed chunks: the far one is not folded.
  REQUIRE(mixer.Push("bad", static_cast<uint32_t>(n), 0, around(0.0f, 32), 1.0));
  REQUIRE(mixer.Push("p2", static_cast<uint32_t>(n), 0, around(5.0f, 33), 1.0));
  mixer.Drain();
  std::vector<float> mixed(n, 5.0f);
  CHECK(mixer.Apply(mixed.data(), n) == 1);
  for (float v : mixed) REQUIRE(v == Approx(5.0f).margin(0.5));
  CHECK(mixer.Robust().peers.at("bad").refused == 2);
  // The model was replaced: the center goes, and our own model stands in again.
  mixer.Clear();
  std::vector<float> near_again = around(0.0f, 34);
  CHECK(mixer.JudgeWhole("p0", own.data(), near_again.data(), n));
}

// A receiver whose trainer stopped (finished, reached its target, left) has a center that no
// longer moves: the senders still sending drift away from it with time. Frozen, the mixer judges
// them by the standing radius and flags and records nothing (no drift, no flag).
TEST_CASE("chunk mixer: frozen, judgments record nothing", "[daemon][mixer][robust]") {
  const size_t n = 1000;
  ChunkMixer mixer;
  mixer.SetRobust(true);
  const std::vector<float> own(n, 0.0f);
  auto around = [&](float at, float spread, uint32_t seed) {
    std::vector<float> v = MixerRandom(n, seed);
    for (float& x : v) x = at + spread * x;
    return v;
  };
  std::vector<float> x(n, 5.0f);
  CHECK(mixer.Apply(x.data(), n) == 0);
  uint32_t seed = 100;
  auto round = [&](float late_spread) {  // p0..p3 at their usual distance, "late" at its own
    for (int i = 0; i < 4; ++i) {
      std::vector<float> m = around(5.0f, 0.1f, seed++);
      mixer.JudgeWhole("p" + std::to_string(i), own.data(), m.data(), n);
    }
    std::vector<float> m = around(5.0f, late_spread, seed++);
    return mixer.JudgeWhole("late", own.data(), m.data(), n);
  };
  for (int k = 0; k < 40; ++k) round(0.1f);
  const learn::PeerJudgment before = mixer.Robust().peers.at("late");
  // Frozen: "late" goes three times as far (within the radius), again and again: nothing
  // recorded.
  mixer.SetFrozen(true);
  for (int k = 0; k < 20; ++k) CHECK(round(0.3f));
  learn::PeerJudgment p = mixer.Robust().peers.at("late");
  CHECK(p.accepted == before.accepted);
  CHECK(p.drift == before.drift);
  CHECK_FALSE(p.flagged);
  // A model beyond four radii is still refused while frozen.
  std::vector<float> far = around(0.0f, 0.1f, seed++);
  CHECK_FALSE(mixer.JudgeWhole("late", own.data(), far.data(), n));
  // Unfrozen, the same distances are recorded, and the sender is flagged for its drift.
  mixer.SetFrozen(false);
  for (int k = 0; k < 20; ++k) round(0.3f);
  p = mixer.Robust().peers.at("late");
  CHECK(p.accepted + p.clipped + p.refused > before.accepted + 19);
  CHECK(p.drift > learn::RobustJudge::kDriftFlagAt);
  CHECK(p.flagged);
}

}  // namespace meshtrain::daemon
