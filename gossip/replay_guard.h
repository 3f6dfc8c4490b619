// Replay protection for UDP datagrams: rejects a captured datagram that is sent again, and any
// datagram whose sender clock (Datagram::sent_ms) is too old or too far in the future.
//
// Rules, checked in order (the first that fails decides):
//  1. stale:     sent_ms < horizon, where horizon = max over calls of (now_ms - max_age_ms).
//                The horizon never moves back, so a receiver clock stepping backwards cannot
//                re-open a window whose entries were already forgotten.
//  2. future:    sent_ms > now_ms + max_skew_ms.
//  3. evicted:   sent_ms below the floor left by an eviction (below), globally or for this sender.
//  4. duplicate: the same (sender, sent_ms, replay_id) was accepted before and is still remembered.
// Otherwise the datagram is fresh and remembered until its sent_ms falls below the horizon;
// after that rule 1 rejects any copy, so memory is bounded by the traffic of one window.
//
// Memory is also capped: at most max_per_sender entries per sender and max_entries overall.
// When a sender is full, its entry with the oldest sent_ms is forgotten (or the new one, if it is
// older still); when the guard is full, the entry with the oldest sent_ms overall is forgotten.
// An eviction raises a floor (the sender's, resp. the global one) to just above the forgotten
// sent_ms, and datagrams below a floor are rejected (rule 3), so evicting never lets a replay
// through; it may instead reject a genuine datagram that arrives late and out of order while the
// guard is under pressure. Such rejections are counted apart (stats().evicted_floor).
//
// What the replay id is worth depends on the mode (see Datagram::replay_id). Sealed: the AEAD
// nonce, random and authenticated, and sent_ms is authenticated too; replays are reliably
// rejected. Plaintext: a hash of the envelope, so exact copies are rejected, but anyone can
// forge a fresh datagram anyway, so without a key replay protection is best-effort.
//
// Pure: the receiver's wall clock is an input (ms since the Unix epoch, the unit the encoders
// stamp), so tests drive it without sleeping. Thread-safety: none; one owner (the loop thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "gossip/codec.h"

namespace meshtrain::gossip {

struct ReplayGuardConfig {
  uint64_t max_age_ms = 30000;   // how stale a datagram may be (sender clock vs. receiver clock)
  uint64_t max_skew_ms = 10000;  // how far ahead of the receiver a sender's clock may run
  size_t max_per_sender = 4096;  // remembered datagrams per sender (about 100/s over a window)
  size_t max_entries = 65536;    // remembered datagrams overall (about 128 bytes each)
};

class ReplayGuard {
 public:
  enum class Verdict : uint8_t { kFresh, kStale, kFuture, kEvictedFloor, kDuplicate };

  struct Stats {
    uint64_t fresh = 0;
    uint64_t stale = 0;
    uint64_t future = 0;
    uint64_t evicted_floor = 0;
    uint64_t duplicate = 0;
    uint64_t evictions = 0;  // entries forgotten before their time (by either cap)
    uint64_t rejected() const { return stale + future + evicted_floor + duplicate; }
  };

  explicit ReplayGuard(ReplayGuardConfig config = {});
  ReplayGuard(const ReplayGuard&) = delete;
  ReplayGuard& operator=(const ReplayGuard&) = delete;

  // True if the datagram is fresh (and remembers it); false for a replay, a stale or a
  // future datagram. `now_ms` is the receiver's wall clock.
  bool Check(const std::string& sender, const ReplayId& id, uint64_t sent_ms, uint64_t now_ms) {
    return Admit(sender, id, sent_ms, now_ms) == Verdict::kFresh;
  }
  bool Check(const Datagram& d, uint64_t now_ms) {
    return Check(d.sender, d.replay_id, d.sent_ms, now_ms);
  }
  // As Check, with the reason.
  Verdict Admit(const std::string& sender, const ReplayId& id, uint64_t sent_ms, uint64_t now_ms);
  Verdict Admit(const Datagram& d, uint64_t now_ms) {
    return Admit(d.sender, d.replay_id, d.sent_ms, now_ms);
  }

  const Stats& stats() const { return stats_; }
  size_t entries() const { return by_age_.size(); }
  size_t senders() const { return senders_.size(); }
  const ReplayGuardConfig& config() const { return config_; }

 private:
  struct Sender {
    uint64_t id = 0;
    size_t count = 0;
    uint64_t floor_ms = 0;  // datagrams with sent_ms < floor_ms are rejected
  };
  using SenderMap = std::map<std::string, Sender>;

  // Forgets entries below the horizon.
  void Expire();
  // Removes one entry from both indexes; drops its sender once it has no entries (its floor is
  // then covered by the horizon or the global floor, see replay_guard.cc).
  void Erase(uint64_t sent_ms, uint64_t sender_id, const ReplayId& id);

  ReplayGuardConfig config_;
  Stats stats_;
  uint64_t horizon_ms_ = 0;       // monotone: max(now_ms - max_age_ms)
  uint64_t global_floor_ms_ = 0;  // raised by max_entries evictions
  uint64_t next_sender_id_ = 0;
  SenderMap senders_;  // only senders with at least one entry
  // Sender id -> its map entry (std::map iterators stay valid until erased).
  std::unordered_map<uint64_t, SenderMap::iterator> sender_by_id_;
  // The same entries, ordered by age (expiry, global eviction) and by sender (lookup, per-sender
  // eviction).
  std::set<std::tuple<uint64_t, uint64_t, ReplayId>> by_age_;     // (sent_ms, sender, id)
  std::set<std::tuple<uint64_t, uint64_t, ReplayId>> by_sender_;  // (sender, sent_ms, id)
};

const char* ReplayVerdictName(ReplayGuard::Verdict v);  // "fresh", "stale", "future", ...

}  // namespace meshtrain::gossip
