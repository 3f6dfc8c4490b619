// Token bucket for parameter traffic caps (--uplink-limit / --downlink-limit, docs/contract.md
// "Command line"), and an EWMA bandwidth estimator fed by measured transfers (docs/contract.md
// "Receiver selection"). Both are pure: time is an input (seconds on any monotonic clock), so tests
// drive them without sleeping.
//
// The bucket allows debt: a transfer of n bytes is never split by the bucket; it is admitted
// when the bucket is not in debt and then charged in full, so the long-run rate is exactly
// `rate` while single writes may be larger than the burst.
//
// Thread-safety: none; one owner.
#pragma once

#include <algorithm>
#include <cstdint>

#include "sync/bandwidth_estimate.h"

namespace meshtrain::transport {

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

using sync::BandwidthEstimate;

}  // namespace meshtrain::transport
