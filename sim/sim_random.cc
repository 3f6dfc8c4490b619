#include "sim/sim_random.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace meshtrain::sim {
uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t SubSeed(uint64_t seed, uint64_t stream, uint64_t index) {
  return SplitMix(SplitMix(seed ^ (stream * 0x51ed2701ULL)) + index);
}

double Gamma(learn::Rng& rng, double shape) {
  if (shape < 1.0) {
    double u;
    do {
      u = rng.Uniform();
    } while (u <= 0.0);
    return Gamma(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.Normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = rng.Uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

double UnitGamma(learn::Rng& rng, double cv) {
  if (cv <= 0) return 1.0;
  const double shape = 1.0 / (cv * cv);
  return Gamma(rng, shape) / shape;
}

std::vector<uint32_t> SampleDistinct(learn::Rng& rng, uint32_t n, uint32_t k) {
  std::vector<uint32_t> out;
  if (k >= n) {
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  if (uint64_t{k} * 8 < n) {
    // A small sample of a large range (a view of 500 of 100 000 nodes): the chosen values in a
    // hash set of O(k) (linear probing, at most half full) instead of n flags scanned in full.
    // The same draws choose the same set; sorted, it comes out in the scan's order.
    size_t size = 16;
    while (size < 2 * static_cast<size_t>(k)) size *= 2;
    constexpr uint32_t kEmpty = UINT32_MAX;  // n - 1 < UINT32_MAX: never a value
    std::vector<uint32_t> set(size, kEmpty);
    const size_t mask = size - 1;
    // Inserts `v`; false if it was there.
    const auto insert = [&](uint32_t v) {
      for (size_t b = (v * size_t{0x9e3779b1}) & mask;; b = (b + 1) & mask) {
        if (set[b] == v) return false;
        if (set[b] == kEmpty) {
          set[b] = v;
          return true;
        }
      }
    };
    out.reserve(k);
    for (uint32_t j = n - k; j < n; ++j) {
      const auto t = static_cast<uint32_t>(rng.UniformInt(uint64_t{j} + 1));
      // j itself is new: every value chosen before is at most j - 1.
      const uint32_t v = insert(t) ? t : (insert(j), j);
      out.push_back(v);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<bool> chosen(n, false);
  for (uint32_t j = n - k; j < n; ++j) {
    const auto t = static_cast<uint32_t>(rng.UniformInt(uint64_t{j} + 1));
    chosen[chosen[t] ? j : t] = true;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (chosen[i]) out.push_back(i);
  }
  return out;
}

uint64_t Quantile(const std::vector<uint64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
}

}  // namespace meshtrain::sim
