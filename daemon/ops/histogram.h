// Fixed-bucket histograms for Prometheus (barrier waits, loop lag): per-bucket counts (not
// cumulative; +Inf = count minus their sum), the count and the sum of the observations.
// Thread-safety: none (one owner).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace meshtrain::daemon {

// Bounds: a type with `static constexpr std::array<double, N> kValues` (upper bounds, ascending).
template <typename Bounds>
struct BucketHistogram {
  static constexpr auto kBounds = Bounds::kValues;
  std::array<uint64_t, kBounds.size()> counts{};
  uint64_t count = 0;
  double sum = 0;
  void Observe(double seconds) {
    for (size_t i = 0; i < kBounds.size(); ++i) {
      if (seconds <= kBounds[i]) {
        counts[i]++;
        break;
      }
    }
    count++;
    sum += seconds;
  }
};

}  // namespace meshtrain::daemon
