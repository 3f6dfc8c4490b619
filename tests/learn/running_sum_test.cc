// The running sum of peers' chunks (learn/running_sum.h) and the vector kernels under it
// (base/kernels.h): each against a plain reference computed value by value.
#include "learn/running_sum.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/kernels.h"

namespace meshtrain::learn {
namespace {

std::vector<float> RsValues(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The reference for one coordinate: (x + sum w_j v_j) / (1 + sum w_j), in the order the sum is
// built (the first fold sets, later ones add), in float as the running sum computes it.
struct RsRef {
  std::vector<float> s;
  std::vector<double> w;
  explicit RsRef(size_t n) : s(n, 0.0f), w(n, 0.0) {}
  void Fold(size_t offset, const std::vector<float>& v, double wt) {
    for (size_t i = 0; i < v.size(); ++i) {
      s[offset + i] += static_cast<float>(wt) * v[i];
      w[offset + i] += wt;
    }
  }
  void Apply(std::vector<float>* x) {
    for (size_t i = 0; i < x->size(); ++i) {
      if (w[i] == 0) continue;
      (*x)[i] = ((*x)[i] + s[i]) * static_cast<float>(1.0 / (1.0 + w[i]));
    }
    std::fill(s.begin(), s.end(), 0.0f);
    std::fill(w.begin(), w.end(), 0.0);
  }
};

TEST_CASE("RunningSum mixes (x + sum w_j x_j) / (1 + sum w_j) per coordinate", "[learn][mixing]") {
  const uint32_t n = 1000;
  auto x = RsValues(n, 1), want = x;
  const auto a = RsValues(n, 2), b = RsValues(600, 3);
  RunningSum sum;
  RsRef ref(n);
  // a whole, b over [300, 900) in two chunks with another weight: three segments of weight.
  REQUIRE(sum.Fold("a", n, 0, a.data(), n, 1.0));
  ref.Fold(0, a, 1.0);
  const std::vector<float> b1(b.begin(), b.begin() + 250), b2(b.begin() + 250, b.end());
  REQUIRE(sum.Fold("b", n, 300, b1.data(), b1.size(), 0.5));
  REQUIRE(sum.Fold("b", n, 550, b2.data(), b2.size(), 0.5));
  ref.Fold(300, b1, 0.5);
  ref.Fold(550, b2, 0.5);
  CHECK(sum.window_floats() == n + 600);
  // The same chunk of the same sender twice in a window would count it twice: refused.
  CHECK_FALSE(sum.Fold("b", n, 300, b1.data(), b1.size(), 0.5));
  // Another model size, a non-positive weight, a slice past the end: refused.
  CHECK_FALSE(sum.Fold("c", n + 1, 0, a.data(), 10, 1.0));
  CHECK_FALSE(sum.Fold("c", n, 0, a.data(), 10, 0.0));
  CHECK_FALSE(sum.Fold("c", n, n - 5, a.data(), 10, 1.0));
  CHECK(sum.Apply(x.data(), n) == 2);
  ref.Apply(&want);
  CHECK(x == want);
}

TEST_CASE("RunningSum: a later window never reads an earlier window's sums", "[learn][mixing]") {
  const uint32_t n = 512;
  auto x = RsValues(n, 4), want = x;
  RunningSum sum;
  RsRef ref(n);
  // Window 1: large values everywhere.
  const auto big = RsValues(n, 5, 1e6f);
  REQUIRE(sum.Fold("a", n, 0, big.data(), n, 1.0));
  ref.Fold(0, big, 1.0);
  sum.Apply(x.data(), n);
  ref.Apply(&want);
  REQUIRE(x == want);
  // Window 2: b covers [100, 300), then c covers [200, 450): [200, 300) adds, the rest sets.
  const auto b = RsValues(200, 6), c = RsValues(250, 7);
  REQUIRE(sum.Fold("b", n, 100, b.data(), b.size(), 1.0));
  REQUIRE(sum.Fold("c", n, 200, c.data(), c.size(), 2.0));
  ref.Fold(100, b, 1.0);
  ref.Fold(200, c, 2.0);
  CHECK(sum.Apply(x.data(), n) == 2);
  ref.Apply(&want);
  CHECK(x == want);
  // Clear drops a window: the next one starts from nothing.
  REQUIRE(sum.Fold("a", n, 0, big.data(), n, 1.0));
  sum.Clear();
  CHECK(sum.empty());
  const auto d = RsValues(64, 8);
  REQUIRE(sum.Fold("d", n, 0, d.data(), d.size(), 1.0));
  ref.Fold(0, d, 1.0);
  CHECK(sum.Apply(x.data(), n) == 1);
  ref.Apply(&want);
  CHECK(x == want);
  // A model of another size: nothing mixed, the sum forgets.
  REQUIRE(sum.Fold("d", n, 0, d.data(), d.size(), 1.0));
  std::vector<float> other(n + 1, 1.0f);
  CHECK(sum.Apply(other.data(), n + 1) == 0);
  CHECK(sum.empty());
}

TEST_CASE("RunningSum::FoldInt8 folds exactly what the dequantized chunk would",
          "[learn][mixing]") {
  const uint32_t n = 2048, block = 256;
  const uint32_t count = 700;  // a short last block
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> qd(-127, 127);
  std::vector<int8_t> q(count);
  for (auto& v : q) v = static_cast<int8_t>(qd(rng));
  std::vector<float> scales = {0.01f, 0.5f, 3e-5f};
  std::vector<float> dense(count);
  for (uint32_t i = 0; i < count; ++i) dense[i] = static_cast<float>(q[i]) * scales[i / block];
  const auto other = RsValues(300, 10);
  auto x = RsValues(n, 11), y = x;
  RunningSum a, b;
  // A dense chunk over [500, 800) first, so that the int8 chunk at 300 sets [300, 500), adds
  // [500, 800) (across its block boundary at 556) and sets [800, 1000).
  REQUIRE(a.Fold("o", n, 500, other.data(), other.size(), 0.7));
  REQUIRE(b.Fold("o", n, 500, other.data(), other.size(), 0.7));
  REQUIRE(a.FoldInt8("q", n, 300, q.data(), scales.data(), block, count, 1.3));
  REQUIRE(b.Fold("q", n, 300, dense.data(), count, 1.3));
  CHECK(a.window_floats() == b.window_floats());
  CHECK(a.Apply(x.data(), n) == 2);
  CHECK(b.Apply(y.data(), n) == 2);
  CHECK(x == y);
  CHECK_FALSE(a.FoldInt8("q", n, 0, q.data(), scales.data(), 0, count, 1.0));  // no block size
}

TEST_CASE("kernels: each matches its plain loop, tails included", "[learn][kernels]") {
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{256}, size_t{1000}}) {
    INFO(n);
    const auto x = RsValues(n, 20), s0 = RsValues(n, 21);
    auto s = s0, want = s0;
    kernels::AddScaled(s.data(), x.data(), 0.3f, n);
    for (size_t i = 0; i < n; ++i) want[i] += 0.3f * x[i];
    CHECK(s == want);
    kernels::SetScaled(s.data(), x.data(), -2.0f, n);
    for (size_t i = 0; i < n; ++i) want[i] = -2.0f * x[i];
    CHECK(s == want);
    auto m = s0, mwant = s0;
    kernels::MixInto(m.data(), x.data(), 0.25f, n);
    for (size_t i = 0; i < n; ++i) mwant[i] = (mwant[i] + x[i]) * 0.25f;
    CHECK(m == mwant);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    CHECK(kernels::MaxAbs(x.data(), n) == amax);
    // int8: round to nearest even of v * inv, clamped to [-127, 127], as nearbyint does.
    const float scale = amax / 127.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
    std::vector<int8_t> q(n);
    std::vector<float> decoded(n), back(n);
    kernels::QuantizeInt8(x.data(), n, inv, scale, q.data(), decoded.data());
    for (size_t i = 0; i < n; ++i) {
      // Nearest, up to the rounding of the product (which FMA targets skip).
      const double exact = static_cast<double>(x[i]) * inv;
      CHECK(std::fabs(q[i] - exact) <= 0.5 + 1e-5);
      CHECK(std::abs(q[i]) <= 127);
      CHECK(decoded[i] == static_cast<float>(q[i]) * scale);
    }
    CHECK(kernels::DequantizeInt8(q.data(), n, scale, back.data()));
    CHECK(back == decoded);
  }
  // Ties (exact products) go to even, and values past the range clamp.
  const std::vector<float> ties = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 126.5f, 127.4f, 300.0f, -300.0f};
  std::vector<int8_t> q(ties.size());
  kernels::QuantizeInt8(ties.data(), ties.size(), 1.0f, 1.0f, q.data(), nullptr);
  CHECK(q == std::vector<int8_t>{0, 2, 2, 0, -2, 126, 127, 127, -127});
  // -128 is outside what the encoder makes.
  std::vector<int8_t> bad(40, 3);
  bad[37] = -128;
  std::vector<float> out(40);
  CHECK_FALSE(kernels::DequantizeInt8(bad.data(), bad.size(), 1.0f, out.data()));
  CHECK_FALSE(kernels::NoInt8Min(bad.data(), bad.size()));
  CHECK_FALSE(kernels::NoInt8Min(bad.data(), 38));  // in the tail
  CHECK(kernels::NoInt8Min(bad.data(), 37));
  bad[37] = 3;
  bad[3] = -128;
  CHECK_FALSE(kernels::NoInt8Min(bad.data(), 16));  // in the vector part
  CHECK(kernels::NoInt8Min(bad.data() + 4, 36));
}

}  // namespace
}  // namespace meshtrain::learn
