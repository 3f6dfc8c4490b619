// Lifeguard pieces of the SWIM core, kept separate so they can be unit-tested on their own:
// the suspicion timeout arithmetic (memberlist suspicion.go / util.go) and the local health
// awareness score (memberlist awareness.go). Pure values and functions, no I/O.
//
// Thread-safety: none; plain values.
#pragma once

#include <cstddef>

#include "membership/types.h"

namespace meshtrain::membership {

// Minimum suspicion timeout: SuspicionMult × max(1, log10 n) × ProbeInterval (docs/contract.md
// "Membership", memberlist suspicionTimeout). n counts every known member, ourselves included.
TimeMs SuspicionMinTimeout(int suspicion_mult, size_t n, TimeMs probe_interval);

// Total suspicion timeout after `confirmations` independent confirmations out of `expected`
// (Lifeguard §IV-B): max − (max − min)·log(c+1)/log(K+1), floored at min. With K < 1 no
// confirmations are expected and the timeout is min from the start.
TimeMs SuspicionTimeout(int confirmations, int expected, TimeMs min, TimeMs max);

// Lifeguard local health awareness: a saturating score in [0, max_multiplier − 1]. A node that
// misses acks or nacks, or has to refute suspicion about itself, is probably the slow one, so
// it stretches its own probe interval and timeout by (score + 1) instead of accusing others.
class Awareness {
 public:
  explicit Awareness(int max_multiplier) : max_(max_multiplier < 1 ? 1 : max_multiplier) {}

  void ApplyDelta(int delta) {
    score_ += delta;
    if (score_ < 0) score_ = 0;
    if (score_ > max_ - 1) score_ = max_ - 1;
  }
  int score() const { return score_; }
  TimeMs Scale(TimeMs t) const { return t * (score_ + 1); }

 private:
  int max_;
  int score_ = 0;
};

}  // namespace meshtrain::membership
