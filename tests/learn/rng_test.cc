// The deterministic RNG behind initialisation and sample order: fixed streams, sane moments.
#include "learn/rng.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

namespace meshtrain::learn {
namespace {

TEST_CASE("Rng streams are fixed by the seed", "[learn][rng]") {
  Rng a(123), b(123), c(124);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    CHECK(x == b.Next());
    CHECK(x != c.Next());
  }
  // Pinned values: a change of algorithm would silently change every node's initial model.
  Rng pinned(0);
  CHECK(pinned.Next() == 0x99ec5f36cb75f2b4ULL);
  CHECK(SeedFromString("") == 0xcbf29ce484222325ULL);
  CHECK(SeedFromString("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(SeedFromString("n1") != SeedFromString("n2"));
}

TEST_CASE("Rng distributions have the expected moments", "[learn][rng]") {
  Rng rng(9);
  const int n = 200000;
  double sum = 0, sq = 0, usum = 0;
  bool uniform_in_range = true;
  std::vector<int> buckets(7, 0);
  for (int i = 0; i < n; ++i) {
    const double z = rng.Normal();
    sum += z;
    sq += z * z;
    const double u = rng.Uniform();
    uniform_in_range = uniform_in_range && u >= 0.0 && u < 1.0;
    usum += u;
    ++buckets[rng.UniformInt(7)];
  }
  CHECK(uniform_in_range);
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sq / n - 1.0) < 0.02);
  CHECK(std::abs(usum / n - 0.5) < 0.005);
  for (int count : buckets) CHECK(std::abs(count - n / 7.0) < 0.03 * n / 7.0);
}

TEST_CASE("Rng shuffle is a seeded permutation", "[learn][rng]") {
  std::vector<int> v(1000);
  std::iota(v.begin(), v.end(), 0);
  std::vector<int> w = v;
  Rng a(5), b(5);
  a.Shuffle(&v);
  b.Shuffle(&w);
  CHECK(v == w);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);
  CHECK(v != iota);
}

}  // namespace
}  // namespace meshtrain::learn
