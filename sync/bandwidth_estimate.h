// Bandwidth estimates from measured transfers (docs/contract.md "Receiver selection"): an EWMA and
// an aged recent peak, bounded by the configured caps. Pure: the caller supplies bytes and seconds.
// Thread-safety: none; one owner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace meshtrain::sync {

// Exponentially weighted moving average of measured rates, bounded by a configured cap.
class BandwidthEstimate {
 public:
  explicit BandwidthEstimate(double alpha = 0.3) : alpha_(alpha) {}

  // One measured transfer: `bytes` moved in `seconds`. Tiny transfers (latency-dominated) are
  // ignored: they say nothing about bandwidth.
  void Add(double bytes, double seconds) {
    if (bytes < kMinBytes || seconds <= 0) return;
    const double mbps = bytes / seconds / 1e6;
    value_ = samples_ == 0 ? mbps : alpha_ * mbps + (1 - alpha_) * value_;
    peak_ = std::max(peak_, mbps);
    samples_++;
  }
  // Ages the peak (call periodically): peak ← peak·factor, never below the EWMA.
  void Decay(double factor) { peak_ = std::max(value_, peak_ * factor); }
  // Available capacity, MB/s: a measured rate is a lower bound of what the link can carry (a
  // transfer may be slow because of the other end), so this is the recent peak (aged by Decay)
  // rather than the mean; bounded by `cap_mbps` when > 0. With no samples: the cap (or 0).
  double CapacityMbps(double cap_mbps) const {
    if (samples_ == 0) return cap_mbps > 0 ? cap_mbps : 0;
    const double v = std::max(value_, peak_);
    return cap_mbps > 0 ? std::min(v, cap_mbps) : v;
  }
  // MB/s; bounded by `cap_mbps` when > 0. With no samples: the cap (or 0 = unknown).
  double Mbps(double cap_mbps) const {
    if (samples_ == 0) return cap_mbps > 0 ? cap_mbps : 0;
    return cap_mbps > 0 ? std::min(value_, cap_mbps) : value_;
  }
  uint64_t samples() const { return samples_; }

  static constexpr double kMinBytes = 64 * 1024;

 private:
  double alpha_;
  double value_ = 0;
  double peak_ = 0;
  uint64_t samples_ = 0;
};

// Capacity from probe rates (node.cc, link-capacity probes): the largest rate that another one
// confirms within 25 %, i.e. at most 1.25x the confirming rate (rates[j] >= 0.8 * rates[i]);
// with none confirmed, the smallest (one rate: itself). A rate can be too high only rarely and
// not twice alike, so one outlier never sets the estimate. (With rates[j] >= 0.75 * rates[i] a
// squeezed train read 1.33x a 40 Mbit/s uplink, 53 against 40.1, and counted as confirmed.)
// 0 for no rates.
inline double ConfirmedRate(std::vector<double> rates) {
  if (rates.empty()) return 0;
  std::sort(rates.begin(), rates.end(), std::greater<double>());
  for (size_t i = 0; i + 1 < rates.size(); ++i) {
    if (rates[i + 1] * 1.25 >= rates[i]) return rates[i];
  }
  return rates.back();
}

}  // namespace meshtrain::sync
