#include "membership/lifeguard.h"

#include <algorithm>
#include <cmath>

namespace meshtrain::membership {

TimeMs SuspicionMinTimeout(int suspicion_mult, size_t n, TimeMs probe_interval) {
  const double node_scale = std::max(1.0, std::log10(std::max(1.0, static_cast<double>(n))));
  // memberlist keeps three decimals of the scale before multiplying by the interval.
  const auto scale_milli = static_cast<int64_t>(node_scale * 1000.0);
  return static_cast<TimeMs>(suspicion_mult) * scale_milli * probe_interval / 1000;
}

TimeMs SuspicionTimeout(int confirmations, int expected, TimeMs min, TimeMs max) {
  if (expected < 1) return min;
  const double frac = std::log(static_cast<double>(confirmations) + 1.0) /
                      std::log(static_cast<double>(expected) + 1.0);
  const double raw = static_cast<double>(max) - frac * static_cast<double>(max - min);
  const auto timeout = static_cast<TimeMs>(std::floor(raw));
  return std::max(timeout, min);
}

}  // namespace meshtrain::membership
