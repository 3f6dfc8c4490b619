#include "learn/label_skew.h"

#include <catch2/catch.hpp>
#include <numeric>

using namespace meshtrain::learn;

TEST_CASE("ParseShardMode accepts iid and label-skew:ALPHA, rejects the rest", "[learn]") {
  REQUIRE(ParseShardMode("iid").ok());
  auto m = ParseShardMode("label-skew:0.1");
  REQUIRE(m.ok());
  CHECK(m.value().label_skew);
  CHECK(m.value().alpha == 0.1);
  CHECK(m.value().ToString() == "label-skew:0.1");
  for (const char* bad : {"", "IID", "label-skew:", "label-skew:0", "label-skew:-1",
                          "label-skew:abc", "label-skew:1x", "label-skew:nan", "skew:1"}) {
    CHECK_FALSE(ParseShardMode(bad).ok());
  }
}

TEST_CASE("Gamma samples have the right mean", "[learn]") {
  for (double shape : {0.1, 0.5, 1.0, 3.0}) {
    Rng rng(7);
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const double g = SampleGamma(&rng, shape);
      REQUIRE(g >= 0);
      sum += g;
    }
    CHECK(std::abs(sum / n - shape) < 0.05 * shape + 0.01);
  }
}

TEST_CASE("Label-skew shards are disjoint, cover the set and are skewed for small alpha",
          "[learn]") {
  std::vector<int32_t> labels(6000);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7) % 10);
  const uint32_t n = 4;
  std::vector<int> seen(labels.size(), 0);
  size_t max_share_small = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const auto idx = LabelSkewIndices(labels, 10, Shard{k, n}, 0.1, 42);
    REQUIRE(idx == LabelSkewIndices(labels, 10, Shard{k, n}, 0.1, 42));  // deterministic
    for (uint32_t i : idx) ++seen[i];
    const auto h = LabelHistogram(labels, idx, 10);
    REQUIRE(std::accumulate(h.begin(), h.end(), size_t{0}) == idx.size());
    if (!idx.empty()) {
      max_share_small =
          std::max(max_share_small, *std::max_element(h.begin(), h.end()) * 100 / idx.size());
    }
  }
  for (int c : seen) REQUIRE(c == 1);
  CHECK(max_share_small >= 40);  // some shard is dominated by one class
  // No shard is left (nearly) empty: every seed gives each shard >= 10 % of an iid shard.
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    for (uint32_t k = 0; k < n; ++k) {
      CHECK(LabelSkewIndices(labels, 10, Shard{k, n}, 0.1, seed).size() >=
            labels.size() / (10 * n));
    }
  }
  // Large alpha: every shard holds every class in roughly equal share.
  for (uint32_t k = 0; k < n; ++k) {
    const auto idx = LabelSkewIndices(labels, 10, Shard{k, n}, 1000.0, 42);
    const auto h = LabelHistogram(labels, idx, 10);
    for (size_t c : h) CHECK(c * 10 > idx.size() / 2);
  }
}
