// Token bucket for parameter traffic caps (--uplink-limit / --downlink-limit, SPEC §3), and an
// EWMA bandwidth estimator fed by measured transfers (SPEC §7). Both are pure: time is an input
// (seconds on any monotonic clock), so tests drive them without sleeping.
//
// The bucket allows debt: a transfer of n bytes is never split by the bucket; it is admitted
// when the bucket is not in debt and then charged in full, so the long-run rate is exactly
// `rate` while single writes may be larger than the burst.
//
// Thread-safety: none; one owner.
#pragma once

#include <algorithm>
#include <cstdint>

namespace meshtrain::gossip {

class TokenBucket {
 public:
  // rate in bytes per second (<= 0: unlimited); burst in bytes.
  TokenBucket(double rate, double burst) : rate_(rate), burst_(burst), tokens_(burst) {}

  bool unlimited() const { return rate_ <= 0; }
  double rate() const { return rate_; }

  // Seconds until a transfer may start at `now` (0 = now).
  double Delay(double now) {
    if (unlimited()) return 0;
    Refill(now);
    // Within a byte of paid off counts as paid: floating-point refills may land just below 0.
    return tokens_ > -1.0 ? 0 : -tokens_ / rate_;
  }
  // Charges n bytes at `now` (call when the transfer is admitted or has happened).
  void Charge(double now, double n) {
    if (unlimited()) return;
    Refill(now);
    tokens_ -= n;
  }

 private:
  void Refill(double now) {
    if (!started_) {
      last_ = now;
      started_ = true;
    }
    if (now > last_) {
      tokens_ = std::min(burst_, tokens_ + (now - last_) * rate_);
      last_ = now;
    }
  }

  double rate_;
  double burst_;
  double tokens_;
  double last_ = 0;
  bool started_ = false;
};

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

}  // namespace meshtrain::gossip
