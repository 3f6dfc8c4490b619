// MixAverage (gossip averaging, docs/contract.md "Parameter exchange") and parameter fingerprints;
// SGD-with-momentum update.
#include "learn/mixing.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "base/loop_guard.h"
#include "learn/optimizer.h"
#include "learn/running_sum.h"

namespace meshtrain::learn {
namespace {

TEST_CASE("MixAverage computes (x + sum x_j) / (1 + k)", "[learn][mixing]") {
  Eigen::VectorXf x(3);
  x << 1, 2, 3;
  const std::vector<float> a = {3, 4, 5};
  const std::vector<float> b = {5, 0, -8};
  MixAverage(x, {a.data(), b.data()});
  CHECK(x[0] == Approx(3.0f));
  CHECK(x[1] == Approx(2.0f));
  CHECK(x[2] == Approx(0.0f).margin(1e-7));

  Eigen::VectorXf y(3);
  y << 1, 2, 3;
  MixAverage(y, {});
  CHECK(y == Eigen::Vector3f(1, 2, 3));

  MixAverage(y, {a.data()});  // pairwise average
  CHECK(y == Eigen::Vector3f(2, 3, 4));
}

TEST_CASE("MixAverage on long vectors matches the elementwise mean", "[learn][mixing]") {
  const Eigen::Index n = 10000;  // spans several internal blocks
  Eigen::VectorXf x = Eigen::VectorXf::LinSpaced(n, -1, 1);
  std::vector<Eigen::VectorXf> others = {Eigen::VectorXf::Constant(n, 2),
                                         Eigen::VectorXf::LinSpaced(n, 5, -5),
                                         Eigen::VectorXf::Random(n)};
  Eigen::VectorXf expected = x;
  for (const auto& o : others) expected += o;
  expected /= 4;
  std::vector<const float*> ptrs;
  for (const auto& o : others) ptrs.push_back(o.data());
  MixAverage(x, ptrs);
  CHECK((x - expected).cwiseAbs().maxCoeff() < 1e-6f);

  // Repeated mixing of a group with itself converges to one model (consensus).
  Eigen::VectorXf p = Eigen::VectorXf::Constant(4, 0), q = Eigen::VectorXf::Constant(4, 8);
  for (int i = 0; i < 3; ++i) {
    Eigen::VectorXf p_old = p;
    MixAverage(p, {q.data()});
    MixAverage(q, {p_old.data()});
  }
  CHECK(p == q);
  CHECK(p[0] == 4.0f);
}

TEST_CASE("ParamsCrc32 fingerprints the exact bytes", "[learn][mixing]") {
  Eigen::VectorXf x = Eigen::VectorXf::LinSpaced(100, 0, 1);
  const uint32_t h = ParamsCrc32(x);
  CHECK(ParamsCrc32(x.data(), 100) == h);
  Eigen::VectorXf y = x;
  CHECK(ParamsCrc32(y) == h);
  y[57] = std::nextafter(y[57], 2.0f);  // one ulp
  CHECK(ParamsCrc32(y) != h);
  // CRC32 of four zero bytes, a fixed point of zlib's crc32 (IEEE polynomial).
  const float zero = 0.0f;
  CHECK(ParamsCrc32(&zero, 1) == 0x2144DF1Cu);
}

TEST_CASE("ParamsFinite rejects NaN and infinities", "[learn][mixing]") {
  std::vector<float> v = {1, -2, 3e38f, 0};
  CHECK(ParamsFinite(v.data(), v.size()));
  CHECK(ParamsFinite(v.data(), 0));
  v[2] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(ParamsFinite(v.data(), v.size()));
  v[2] = 0;
  v[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(ParamsFinite(v.data(), v.size()));
}

TEST_CASE(
    "ParamsFinite finds a non-finite value at every position, in the 16-float lanes and the tail",
    "[learn][mixing]") {
  using L = std::numeric_limits<float>;
  const float finite[] = {L::max(), -L::max(), L::denorm_min(), -0.0f, 1.5f};
  const float bad[] = {L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN(),
                       L::signaling_NaN()};
  for (size_t n = 1; n <= 40; ++n) {  // two lanes of 16 and every tail length
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = finite[i % 5];
    CHECK(ParamsFinite(v.data(), n));
    for (size_t pos = 0; pos < n; ++pos) {
      for (float b : bad) {
        std::vector<float> w = v;
        w[pos] = b;
        CHECK_FALSE(ParamsFinite(w.data(), n));
        std::vector<float> copy(n);
        CHECK_FALSE(CopyParamsFinite(w.data(), copy.data(), n));
        CHECK(std::memcmp(copy.data(), w.data(), n * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("SGD with momentum follows v <- mu v + g, x <- x - lr v", "[learn][optimizer]") {
  SgdMomentum opt(2, 0.1f, 0.9f);
  Eigen::VectorXf x(2), g(2);
  x << 1, -1;
  g << 1, 2;
  opt.Apply(g, &x);  // v = g
  CHECK(opt.velocity()[0] == Approx(1.0f));
  CHECK(x[0] == Approx(0.9f));
  CHECK(x[1] == Approx(-1.2f));
  opt.Apply(g, &x);  // v = 0.9 g + g = 1.9 g
  CHECK(opt.velocity()[1] == Approx(3.8f));
  CHECK(x[0] == Approx(0.71f));
  CHECK(x[1] == Approx(-1.58f));
  opt.ResetVelocity();
  CHECK(opt.velocity().isZero());
}

TEST_CASE("LoopGuard counts passes over a whole model on the marked thread only", "[learn][loop]") {
  const size_t big = LoopGuard::kLoopFloatsMax + 1;
  std::vector<float> model(big, 1.0f), other(big, 2.0f), out(big);
  const size_t chunk = 64 * 1024;
  const uint64_t before = LoopGuard::passes();
  // Unmarked thread: nothing counted, however large.
  CHECK(ParamsFinite(model.data(), big));
  CHECK(LoopGuard::passes() == before);
  LoopGuard::MarkLoopThread();
  // Chunk-sized work on the loop is fine.
  CHECK(ParamsFinite(model.data(), chunk));
  RunningSum sum;
  CHECK(sum.Fold("a", static_cast<uint32_t>(big), 0, other.data(), chunk, 1.0));
  CHECK(LoopGuard::passes() == before);
  // Each whole-model pass is counted: the finite scan, a copy with it, mixing, the running sum's
  // apply, the checksum.
  CHECK(ParamsFinite(model.data(), big));
  CHECK(CopyParamsFinite(model.data(), out.data(), big));
  MixWeighted(out.data(), big, {other.data()}, {1.0});
  sum.Apply(out.data(), big);
  (void)ParamsCrc32(model.data(), big);
  CHECK(LoopGuard::passes() == before + 5);
  CHECK(LoopGuard::largest() >= big);
  // Another thread is not the loop.
  std::thread([&] { CHECK(ParamsFinite(model.data(), big)); }).join();
  CHECK(LoopGuard::passes() == before + 5);
  LoopGuard::MarkLoopThread(false);
  CHECK(ParamsFinite(model.data(), big));
  CHECK(LoopGuard::passes() == before + 5);
}

}  // namespace
}  // namespace meshtrain::learn

TEST_CASE("progress-aware mixing: a model far behind barely pulls", "[learn][mixing]") {
  using meshtrain::learn::MixWeight;
  using meshtrain::learn::MixWeighted;
  CHECK(MixWeight(100, 100) == 1.0);
  CHECK(MixWeight(100, 150) == 1.0);  // further on: full weight
  CHECK(MixWeight(100, 96) == Approx((97.0 / 101.0) * (97.0 / 101.0)));
  CHECK(MixWeight(99, 49) == Approx(0.25));
  CHECK(MixWeight(500, 0) < 1e-5);
  CHECK(MixWeight(0, 0) == 1.0);
  // x = 1, a peer at the same step with 3 -> the plain average 2; a fresh peer's 100 at step 0
  // against our step 500 moves x by less than 0.001.
  Eigen::VectorXf x = Eigen::VectorXf::Constant(5, 1.0f);
  std::vector<float> same(5, 3.0f), fresh(5, 100.0f);
  MixWeighted(x, {same.data()}, {MixWeight(10, 10)});
  CHECK(x[0] == Approx(2.0f));
  Eigen::VectorXf y = Eigen::VectorXf::Constant(5, 1.0f);
  MixWeighted(y, {fresh.data()}, {MixWeight(500, 0)});
  CHECK(std::fabs(y[0] - 1.0f) < 1e-3f);
  // Weights 1 are MixAverage.
  Eigen::VectorXf a = Eigen::VectorXf::LinSpaced(5, 0, 4), b = a;
  std::vector<float> o1(5, 2.0f), o2(5, -1.0f);
  MixWeighted(a, {o1.data(), o2.data()}, {1.0, 1.0});
  meshtrain::learn::MixAverage(b, {o1.data(), o2.data()});
  CHECK(a == b);
}

TEST_CASE("ParamAverage: warm-up, decay and reset", "[learn][mixing]") {
  using meshtrain::learn::ParamAverage;
  ParamAverage off(0);
  CHECK_FALSE(off.enabled());
  ParamAverage avg(0.9);
  REQUIRE(avg.enabled());
  Eigen::VectorXf x = Eigen::VectorXf::Zero(2);
  avg.Reset(x);
  CHECK(avg.value() == x);
  // First update: d = min(0.9, 2/11) -> 2/11 of the old average, 9/11 of x.
  x << 11, -22;
  avg.Update(x);
  CHECK(avg.value()[0] == Approx(9.0));
  CHECK(avg.value()[1] == Approx(-18.0));
  // After many updates the decay is D: a constant input converges to it and an alternating
  // one (SGD's noise ball around 0) is damped to about (1 - D) / (1 + D) of its amplitude.
  for (int i = 0; i < 400; ++i) {
    x << ((i % 2) ? 1.0f : -1.0f), 5.0f;
    avg.Update(x);
  }
  CHECK(std::fabs(avg.value()[0]) < 0.06f);
  CHECK(avg.value()[1] == Approx(5.0f).margin(1e-3));
  // A replaced model (join, take-over) restarts the average at it.
  x << 7, 7;
  avg.Reset(x);
  CHECK(avg.value() == x);
  // A size change (never in a running task) restarts it as well, rather than mixing sizes.
  Eigen::VectorXf y = Eigen::VectorXf::Ones(3);
  avg.Update(y);
  CHECK(avg.value() == y);
}

TEST_CASE("OuterStep: avg keeps the mix, sgd and nesterov step from the last outer parameters",
          "[learn][outer]") {
  using K = meshtrain::learn::OuterStep::Kind;
  K kind;
  CHECK(meshtrain::learn::OuterStep::ParseKind("nesterov", &kind));
  CHECK(kind == K::kNesterov);
  CHECK_FALSE(meshtrain::learn::OuterStep::ParseKind("adam", &kind));

  std::vector<float> x = {1, 1, 1};
  meshtrain::learn::OuterStep avg(K::kAvg, 0.7, 0.9);
  avg.Reset(x.data(), x.size());
  x = {0, 1, 2};
  avg.Step(x.data(), x.size());
  CHECK(x == std::vector<float>{0, 1, 2});

  // sgd lr 1 is avg; lr 0.5 goes halfway from θ₀ to the mix.
  meshtrain::learn::OuterStep sgd(K::kSgd, 0.5, 0);
  x = {1, 1, 1};
  sgd.Reset(x.data(), x.size());
  x = {0, 1, 3};
  sgd.Step(x.data(), x.size());
  CHECK(x == std::vector<float>{0.5f, 1, 2});

  // nesterov: Δ = θ₀ − x̄, m = μ m + Δ, θ = θ₀ − lr (Δ + μ m), θ₀ = θ; twice by hand.
  const float lr = 0.7f, mu = 0.9f;
  meshtrain::learn::OuterStep nag(K::kNesterov, lr, mu);
  x = {1, 1, 1};
  nag.Reset(x.data(), x.size());
  x = {0, 1, 2};
  nag.Step(x.data(), x.size());
  std::vector<float> theta(3), m(3);
  const float d1[3] = {1, 0, -1};
  for (int i = 0; i < 3; ++i) {
    m[i] = d1[i];
    theta[i] = 1 - lr * (d1[i] + mu * m[i]);
    CHECK(x[i] == Approx(theta[i]));
  }
  std::vector<float> mixed = {x[0] - 0.1f, x[1], x[2] + 0.2f};
  x = mixed;
  nag.Step(x.data(), x.size());
  for (int i = 0; i < 3; ++i) {
    const float d = theta[i] - mixed[i];
    m[i] = mu * m[i] + d;
    CHECK(x[i] == Approx(theta[i] - lr * (d + mu * m[i])));
  }
  CHECK(nag.steps() == 2);

  // After a Reset (an adopted model) the momentum is gone: a step at θ₀ changes nothing.
  nag.Reset(x.data(), x.size());
  const auto held = x;
  nag.Step(x.data(), x.size());
  CHECK(x == held);
}
