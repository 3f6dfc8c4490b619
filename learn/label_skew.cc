#include "learn/label_skew.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace meshtrain::learn {

std::string ShardMode::ToString() const {
  if (!label_skew) return "iid";
  char buf[64];
  std::snprintf(buf, sizeof buf, "label-skew:%g", alpha);
  return buf;
}

Result<ShardMode> ParseShardMode(const std::string& text) {
  ShardMode mode;
  if (text == "iid") return mode;
  static const std::string kPrefix = "label-skew:";
  if (text.rfind(kPrefix, 0) == 0) {
    const std::string num = text.substr(kPrefix.size());
    char* end = nullptr;
    const double alpha = num.empty() ? 0.0 : std::strtod(num.c_str(), &end);
    if (!num.empty() && end == num.c_str() + num.size() && std::isfinite(alpha) && alpha > 0) {
      mode.label_skew = true;
      mode.alpha = alpha;
      return mode;
    }
  }
  return Status::InvalidArgument("--shard-mode \"" + text +
                                 "\": expected iid or label-skew:ALPHA with ALPHA > 0");
}

double SampleGamma(Rng* rng, double shape) {
  if (shape < 1.0) {
    double u = rng->Uniform();
    while (u <= 0.0) u = rng->Uniform();
    return SampleGamma(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = rng->Normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = rng->Uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

std::vector<uint32_t> LabelSkewIndices(const std::vector<int32_t>& labels, int num_classes,
                                       const Shard& s, double alpha, uint64_t seed) {
  std::vector<std::vector<uint32_t>> by_class(static_cast<size_t>(num_classes));
  size_t n_total = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= 0 && labels[i] < num_classes) {
      by_class[labels[i]].push_back(static_cast<uint32_t>(i));
      ++n_total;
    }
  }
  // Cumulative split points floor(n * sum_{j<k} p_j) of every class over every shard: disjoint,
  // covering, order-stable. bounds[c][k] is where shard k's part of class c ends.
  const size_t min_size = std::max<size_t>(1, n_total / (size_t{kMinShardShareInverse} * s.count));
  Rng rng(seed);
  std::vector<double> p(s.count);
  std::vector<std::vector<size_t>> bounds, best;
  size_t best_min = 0;
  for (int attempt = 0; attempt < kLabelSkewAttempts && best_min < min_size; ++attempt) {
    bounds.assign(by_class.size(), std::vector<size_t>(s.count));
    std::vector<size_t> sizes(s.count, 0);
    for (size_t c = 0; c < by_class.size(); ++c) {
      double total = 0;
      for (auto& x : p) total += (x = SampleGamma(&rng, alpha));
      const size_t n = by_class[c].size();
      double cum = 0;
      size_t begin = 0;
      for (uint32_t k = 0; k < s.count; ++k) {
        cum += total > 0 ? p[k] / total : 1.0 / s.count;
        const size_t end = std::max(
            begin, k + 1 == s.count ? n : std::min(n, static_cast<size_t>(std::floor(cum * n))));
        bounds[c][k] = end;
        sizes[k] += end - begin;
        begin = end;
      }
    }
    const size_t smallest = *std::min_element(sizes.begin(), sizes.end());
    if (best.empty() || smallest > best_min) {
      best = bounds;
      best_min = smallest;
    }
  }
  std::vector<uint32_t> out;
  for (size_t c = 0; c < by_class.size(); ++c) {
    const size_t begin = s.index == 0 ? 0 : best[c][s.index - 1];
    out.insert(out.end(), by_class[c].begin() + begin, by_class[c].begin() + best[c][s.index]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<size_t> LabelHistogram(const std::vector<int32_t>& labels,
                                   const std::vector<uint32_t>& indices, int num_classes) {
  std::vector<size_t> h(static_cast<size_t>(num_classes), 0);
  for (uint32_t i : indices) {
    if (i < labels.size() && labels[i] >= 0 && labels[i] < num_classes) ++h[labels[i]];
  }
  return h;
}

}  // namespace meshtrain::learn
