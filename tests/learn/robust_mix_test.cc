// Robust mixing (docs/design.md "Robust mixing"): the judge's radius, its verdicts and flags, and
// the robust end-of-training reduce.
#include "learn/robust_mix.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "learn/mixing.h"

namespace meshtrain::learn {
namespace {

TEST_CASE("DiffNorm2 and ClipToward", "[learn][robust]") {
  const std::vector<float> ref = {1, 2, 3, 4, 5};
  const std::vector<float> x = {2, 2, 3, 4, 7};
  const DiffNorms d = DiffNorm2(x.data(), ref.data(), x.size());
  CHECK(d.diff2 == Approx(5.0));
  CHECK(d.ref2 == Approx(55.0));
  std::vector<float> out(x.size());
  ClipToward(x.data(), ref.data(), 0.5, out.data(), x.size());
  CHECK(out == std::vector<float>{1.5f, 2, 3, 4, 6});
  const std::vector<int8_t> q = {2, -2, 3, 4, 7};
  const std::vector<float> scales = {1.0f, 0.5f};  // blocks of 4
  const DiffNorms d8 = DiffNorm2Int8(q.data(), scales.data(), 4, ref.data(), q.size());
  // Values 2, -2, 3, 4, 3.5 against 1, 2, 3, 4, 5.
  CHECK(d8.diff2 == Approx(1 + 16 + 0 + 0 + 2.25));
}

TEST_CASE("RobustJudge accepts the mesh's spread and clips or refuses beyond it",
          "[learn][robust]") {
  RobustJudge j;
  // Warm-up: nothing is judged against a radius yet.
  for (int i = 0; i < static_cast<int>(RobustJudge::kWarmup); ++i) {
    CHECK(j.Judge("p" + std::to_string(i % 3), 1.0 + 0.1 * (i % 3), 10).kind ==
          RobustVerdict::kAccept);
  }
  CHECK(j.Radius(10) == Approx(RobustJudge::kClipMedians * 1.1));
  // Honest spread: accepted, never flagged.
  for (int i = 0; i < 40; ++i) {
    CHECK(j.Judge("p" + std::to_string(i % 3), 0.8 + 0.2 * (i % 3), 10).kind ==
          RobustVerdict::kAccept);
  }
  // Beyond the radius: clipped to it (scale = tau / r).
  const double tau = j.Radius(10);
  const RobustVerdict c = j.Judge("bad", 2 * tau, 10);
  CHECK(c.kind == RobustVerdict::kClip);
  CHECK(c.scale == Approx(0.5).epsilon(0.05));
  // Far beyond (more than 4 tau), or not finite: refused.
  CHECK(j.Judge("bad", 100 * tau, 10).kind == RobustVerdict::kRefuse);
  CHECK(j.Judge("bad", std::nan(""), 10).kind == RobustVerdict::kRefuse);
  CHECK(j.Judge("bad", 100 * tau, 10).kind == RobustVerdict::kRefuse);
  CHECK(j.peers().at("bad").flagged);
  // Flagged: quarantined, so even a close model is refused, until accepted judgments lift it.
  CHECK(j.Judge("bad", 1.0, 10).kind == RobustVerdict::kRefuse);
  for (int i = 0; i < 6; ++i) j.Judge("bad", 1.0, 10);
  CHECK_FALSE(j.peers().at("bad").flagged);
  CHECK(j.Judge("bad", 1.0, 10).kind == RobustVerdict::kAccept);
  for (const char* p : {"p0", "p1", "p2"}) {
    CHECK_FALSE(j.peers().at(p).flagged);
    CHECK(j.peers().at(p).clipped == 0);
    CHECK(j.peers().at(p).refused == 0);
  }
  CHECK(j.peers().at("bad").refused >= 4);
  CHECK(j.peers().at("bad").clipped == 1);
}

TEST_CASE("RobustJudge counts a model's chunks as one judgment", "[learn][robust]") {
  RobustJudge j;
  for (int i = 0; i < 12; ++i) j.Judge("p" + std::to_string(i % 3), 1.0, 10);
  const double far = 1.5 * RobustJudge::kClipMedians;  // the median is 1: clipped, not refused
  // One far model in four chunks: all four clipped, but a single model's worth of bad judgments
  // does not flag its sender (as four whole models would).
  for (int c = 0; c < 4; ++c) j.Judge("once", 1.0, 10, 0.25);
  for (int c = 0; c < 4; ++c) CHECK(j.Judge("once", far, 10, 0.25).kind == RobustVerdict::kClip);
  CHECK(j.peers().at("once").models == Approx(2));
  CHECK_FALSE(j.peers().at("once").flagged);
  // Far model after model: flagged once there are enough of them.
  for (int m = 0; m < 3; ++m) {
    for (int c = 0; c < 4; ++c) j.Judge("once", far, 10, 0.25);
  }
  CHECK(j.peers().at("once").flagged);
}

// Four senders judged model by model, in chunks of a quarter; `far(i, m)` is sender i's distance
// at model m (the others as d[i]).
template <typename Far>
void JudgeModels(RobustJudge* j, int models, const std::vector<double>& d, Far far) {
  for (int m = 0; m < models; ++m) {
    for (size_t i = 0; i < d.size(); ++i) {
      for (int c = 0; c < 4; ++c) j->Judge("p" + std::to_string(i), far(i, m), 100, 0.25);
    }
  }
}

TEST_CASE("RobustJudge flags a sender whose distance grew against the others' (drift)",
          "[learn][robust]") {
  // Senders at their own usual distances (one near, as a node on every class is), within the
  // radius throughout. Sender 3 turns bad at model 20: three times as far as it was (a
  // sign-flipped update the mesh follows stays about there), still inside the radius.
  const std::vector<double> d = {1.0, 1.2, 0.9, 0.4};
  RobustJudge j;
  JudgeModels(&j, 40, d, [&](size_t i, int) { return d[i]; });
  for (const auto& [name, p] : j.peers()) {
    CHECK(p.drift < 1.1);
    CHECK_FALSE(p.flagged);
  }
  JudgeModels(&j, 8, d, [&](size_t i, int) { return i == 3 ? 3 * d[i] : d[i]; });
  CHECK(j.peers().at("p3").clipped == 0);  // within the radius: only drift tells
  CHECK(j.peers().at("p3").drift > RobustJudge::kDriftFlagAt);
  CHECK(j.peers().at("p3").flagged);
  for (const char* p : {"p0", "p1", "p2"}) CHECK_FALSE(j.peers().at(p).flagged);
  // Flagged, it stays so while it stays there (the baseline does not follow it) ...
  JudgeModels(&j, 100, d, [&](size_t i, int) { return i == 3 ? 3 * d[i] : d[i]; });
  CHECK(j.peers().at("p3").flagged);
  // ... also through a dip of two models back where it was (its drift under 2 meanwhile) ...
  JudgeModels(&j, 2, d, [&](size_t i, int) { return d[i]; });
  CHECK(j.peers().at("p3").drift < RobustJudge::kDriftFlagAt);
  CHECK(j.peers().at("p3").flagged);
  JudgeModels(&j, 6, d, [&](size_t i, int) { return i == 3 ? 3 * d[i] : d[i]; });
  CHECK(j.peers().at("p3").flagged);
  // ... and is lifted once it is back where it was.
  JudgeModels(&j, 20, d, [&](size_t i, int) { return d[i]; });
  CHECK_FALSE(j.peers().at("p3").flagged);
}

TEST_CASE("RobustJudge: places that settle over the first steps are no drift", "[learn][robust]") {
  // Training's first steps move models fast and unevenly: sender 3 starts near the center (0.3)
  // and settles at its usual place (1.0) from model 10 on. Its baseline forms over the first
  // kBaselineModels models, following it: no drift afterwards.
  const std::vector<double> d = {1.0, 1.2, 0.9, 1.0};
  RobustJudge j;
  JudgeModels(&j, 60, d, [&](size_t i, int m) { return i == 3 && m < 10 ? 0.3 : d[i]; });
  CHECK(j.peers().at("p3").drift < 1.2);
  CHECK_FALSE(j.peers().at("p3").flagged);
}

TEST_CASE("RobustJudge: a drift that lasts a step or two is no flag", "[learn][robust]") {
  // An honest sender that lags for a moment: five times as far for 3 models (its drift goes past
  // 2 within them), then back. Flagged only if it stays there kDriftHold models.
  const std::vector<double> d = {1.0, 1.2, 0.9, 0.4};
  RobustJudge j;
  JudgeModels(&j, 40, d, [&](size_t i, int) { return d[i]; });
  JudgeModels(&j, 3, d, [&](size_t i, int) { return i == 3 ? 5 * d[i] : d[i]; });
  CHECK(j.peers().at("p3").drift > RobustJudge::kDriftFlagAt);
  CHECK_FALSE(j.peers().at("p3").flagged);
  JudgeModels(&j, 20, d, [&](size_t i, int) { return d[i]; });
  CHECK_FALSE(j.peers().at("p3").flagged);
  CHECK(j.peers().at("p3").drift < RobustJudge::kDriftFlagAt);
  // The same for longer is flagged.
  JudgeModels(&j, 8, d, [&](size_t i, int) { return i == 3 ? 5 * d[i] : d[i]; });
  CHECK(j.peers().at("p3").flagged);
}

TEST_CASE("RobustJudge::Peek gives Judge's verdict and records nothing", "[learn][robust]") {
  const std::vector<double> d = {1.0, 1.2, 0.9, 0.4};
  RobustJudge j;
  JudgeModels(&j, 40, d, [&](size_t i, int) { return d[i]; });
  const PeerJudgment before = j.peers().at("p0");
  const double tau = j.Radius(100);
  CHECK(j.Peek("p0", 0.5 * tau, 100).kind == RobustVerdict::kAccept);
  CHECK(j.Peek("p0", 2 * tau, 100).kind == RobustVerdict::kClip);
  CHECK(j.Peek("p0", 2 * tau, 100).scale == Approx(0.5));
  CHECK(j.Peek("p0", 5 * tau, 100).kind == RobustVerdict::kRefuse);
  CHECK(j.Peek("new", 0.5 * tau, 100).kind == RobustVerdict::kAccept);
  // A sender five times as far as it used to be, as long as a frozen center lets it drift: no
  // drift recorded, no flag.
  for (int k = 0; k < 50; ++k) j.Peek("p0", 5 * d[0], 100);
  const PeerJudgment& after = j.peers().at("p0");
  CHECK(after.accepted == before.accepted);
  CHECK(after.drift == before.drift);
  CHECK(after.level == before.level);
  CHECK_FALSE(after.flagged);
  CHECK(j.peers().count("new") == 0);
  CHECK(j.Radius(100) == tau);
  // A flagged sender is refused by Peek as by Judge.
  JudgeModels(&j, 8, d, [&](size_t i, int) { return i == 3 ? 3 * d[i] : d[i]; });
  REQUIRE(j.peers().at("p3").flagged);
  CHECK(j.Peek("p3", 0.1 * tau, 100).kind == RobustVerdict::kRefuse);
}

TEST_CASE("RobustJudge: distances that move together (a learning-rate schedule) are no drift",
          "[learn][robust]") {
  const std::vector<double> d = {1.0, 1.2, 0.9, 0.4};
  RobustJudge j;
  // Every sender's distance grows 5x over 60 models, and some jitter: nobody drifts.
  JudgeModels(&j, 60, d, [&](size_t i, int m) {
    return d[i] * (1 + 4.0 * m / 60) * (1 + 0.2 * std::sin(1.7 * m + static_cast<double>(i)));
  });
  for (const auto& [name, p] : j.peers()) {
    CHECK(p.drift < 1.5);
    CHECK_FALSE(p.flagged);
  }
}

TEST_CASE("RobustJudge's radius has a floor relative to the reference's norm", "[learn][robust]") {
  RobustJudge j;
  for (int i = 0; i < 10; ++i) j.Judge("p", 0.0, 100);  // identical models
  CHECK(j.Radius(100) == Approx(RobustJudge::kFloor * 100));
  CHECK(j.Judge("p", 0.05, 100).kind == RobustVerdict::kAccept);
}

std::vector<float> Around(float base, int n, float spread, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = base + spread * std::sin(static_cast<float>(i * (seed + 3)));
  }
  return v;
}

TEST_CASE("ReduceModels: plain it is AverageModels; robust it drops a far model",
          "[learn][robust]") {
  std::vector<std::vector<float>> ms;
  for (int s = 0; s < 4; ++s) ms.push_back(Around(1.0f, 200, 0.1f, s));
  std::vector<const std::vector<float>*> honest;
  for (const auto& m : ms) honest.push_back(&m);
  // Honest models only: robust gives the same bytes as the plain average.
  CHECK(ReduceModels(honest, true) == AverageModels(honest));
  CHECK(ReduceModels(honest, false) == AverageModels(honest));

  std::vector<float> exploded = ms[0];
  for (float& v : exploded) v *= 100;
  std::vector<const std::vector<float>*> all = honest;
  all.push_back(&exploded);
  std::vector<size_t> dropped, clipped;
  const std::vector<float> r = ReduceModels(all, true, &dropped, &clipped);
  CHECK(dropped == std::vector<size_t>{4});
  CHECK(clipped.empty());
  CHECK(r == AverageModels(honest));
  // Plain: the exploded model dominates.
  CHECK(AverageModels(all)[0] > 10 * r[0]);
  // The same inputs, the same bytes.
  CHECK(ReduceModels(all, true) == r);
  // Two models: no majority to judge by, the plain average.
  CHECK(ReduceModels({&ms[0], &exploded}, true) == AverageModels({&ms[0], &exploded}));
}

TEST_CASE("ReduceModels clips a model a few radii out toward the median", "[learn][robust]") {
  std::vector<std::vector<float>> ms;
  for (int s = 0; s < 4; ++s) ms.push_back(Around(1.0f, 200, 0.1f, s));
  std::vector<float> off = AverageModels({&ms[0], &ms[1], &ms[2], &ms[3]});
  // Far enough to be clipped (beyond tau, within 4 tau): honest distances are ~0.1 sqrt(100).
  for (float& v : off) v += 0.6f;
  std::vector<const std::vector<float>*> all = {&ms[0], &ms[1], &ms[2], &ms[3], &off};
  std::vector<size_t> dropped, clipped;
  const std::vector<float> r = ReduceModels(all, true, &dropped, &clipped);
  CHECK(dropped.empty());
  CHECK(clipped == std::vector<size_t>{4});
  const std::vector<float> plain = AverageModels(all);
  const std::vector<float> honest = AverageModels({&ms[0], &ms[1], &ms[2], &ms[3]});
  double moved = 0, plain_moved = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    moved += std::abs(r[i] - honest[i]);
    plain_moved += std::abs(plain[i] - honest[i]);
  }
  CHECK(moved < plain_moved);
}

TEST_CASE("ReduceModels drops quarantined senders' models and judges the rest with a floor",
          "[learn][robust]") {
  std::vector<std::vector<float>> ms;
  for (int s = 0; s < 5; ++s) ms.push_back(Around(1.0f, 200, 0.1f, s));
  // Three final models alike (they mixed the same models last), two a few steps apart: the
  // median distance is small, and alone it would call the two far.
  ms[1] = ms[0];
  ms[2] = ms[0];
  std::vector<const std::vector<float>*> all;
  for (const auto& m : ms) all.push_back(&m);
  std::vector<size_t> dropped, clipped;
  ReduceModels(all, true, &dropped, &clipped);
  CHECK(dropped.size() + clipped.size() == 2);
  // With the training-time radius as a floor, they are honest models a few steps apart.
  ReduceJudgment judged;
  judged.min_radius = 10;
  dropped.clear();
  clipped.clear();
  CHECK(ReduceModels(all, true, &dropped, &clipped, judged) == AverageModels(all));
  CHECK(dropped.empty());
  CHECK(clipped.empty());
  // A quarantined sender's model is dropped whatever its distance.
  judged.quarantined = {false, false, false, true, false};
  const std::vector<float> r = ReduceModels(all, true, &dropped, &clipped, judged);
  CHECK(dropped == std::vector<size_t>{3});
  CHECK(r == AverageModels({&ms[0], &ms[1], &ms[2], &ms[4]}));
}

TEST_CASE("ReduceModels: a reducing node that flags most of the others is not followed",
          "[learn][robust]") {
  // The leader's own trainer sent an exploded model: every honest model is far from its center,
  // so it flags them all and its radius is huge. Its flags and radius are set aside, and the
  // median rule drops its model.
  std::vector<std::vector<float>> ms;
  for (int s = 0; s < 5; ++s) ms.push_back(Around(1.0f, 200, 0.1f, s));
  for (float& v : ms[0]) v *= 100;
  std::vector<const std::vector<float>*> all;
  for (const auto& m : ms) all.push_back(&m);
  ReduceJudgment judged;
  judged.quarantined = {false, true, true, true, false};
  judged.min_radius = 1e6;
  std::vector<size_t> dropped, clipped;
  const std::vector<float> r = ReduceModels(all, true, &dropped, &clipped, judged);
  CHECK(dropped == std::vector<size_t>{0});
  CHECK(r == AverageModels({&ms[1], &ms[2], &ms[3], &ms[4]}));
}

}  // namespace
}  // namespace meshtrain::learn
