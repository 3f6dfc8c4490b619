// `--shard-mode iid|label-skew:ALPHA`: how a training set is split into the N shards of
// `--shard I/N`. iid keeps today's contiguous ranges (ShardRange). label-skew:ALPHA is the
// standard non-IID benchmark (Hsu et al. 2019): for every class c, proportions p_c ~ Dirichlet(
// ALPHA, ..., ALPHA) over the N shards are drawn from a seeded Rng and the samples of class c are
// split among the shards in those proportions. Every node computes the same partition from the
// same labels and seed, so shards stay disjoint and cover the set; small ALPHA (0.1) gives shards
// dominated by one or two classes, large ALPHA approaches iid. Per-class draws can leave a shard
// with almost nothing (alpha 0.1, 4 shards: one in five draws gives some shard no class at all, a
// node with 26 samples), so like NIID-Bench the whole partition is redrawn (from the same Rng,
// still deterministic) until every shard holds at least 1/kMinShardShareInverse of an iid
// shard's size; after kLabelSkewAttempts draws the one with the largest smallest shard is used.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "learn/dataset.h"
#include "learn/rng.h"
#include "learn/status.h"

namespace meshtrain::learn {

inline constexpr int kMinShardShareInverse = 10;
inline constexpr int kLabelSkewAttempts = 200;

struct ShardMode {
  bool label_skew = false;
  double alpha = 0.0;  // > 0 when label_skew

  std::string ToString() const;  // "iid" or "label-skew:ALPHA"
};

// Parses "iid" or "label-skew:ALPHA" with ALPHA a finite decimal > 0.
Result<ShardMode> ParseShardMode(const std::string& text);

// Gamma(shape, 1) by Marsaglia-Tsang (shape < 1 through Gamma(shape+1) * U^(1/shape)).
double SampleGamma(Rng* rng, double shape);

// Indices (ascending) of the samples of shard `s` under label skew with concentration `alpha`;
// labels[i] < num_classes. The partition depends only on (labels, s.count, alpha, seed).
std::vector<uint32_t> LabelSkewIndices(const std::vector<int32_t>& labels, int num_classes,
                                       const Shard& s, double alpha, uint64_t seed);

// Per-class counts of the samples `indices` ("label histogram" of a shard).
std::vector<size_t> LabelHistogram(const std::vector<int32_t>& labels,
                                   const std::vector<uint32_t>& indices, int num_classes);

}  // namespace meshtrain::learn
