#include "gossip/replay_guard.h"

#include <algorithm>
#include <limits>

namespace meshtrain::gossip {

// Invariant behind dropping a sender's state when its last entry goes: a sender's floor is at
// most (oldest remembered sent_ms of that sender) + 1, because a per-sender eviction forgets the
// oldest of the sender's datagrams (the new one included). So when the last entry expires
// (sent_ms < horizon), floor <= horizon and rule 1 already covers the floor; when the last entry
// is evicted by the global cap, the global floor rises to at least that entry's sent_ms + 1,
// which is >= the sender's floor. Either way the floor can be forgotten with the sender.

ReplayGuard::ReplayGuard(ReplayGuardConfig config) : config_(config) {
  config_.max_per_sender = std::max<size_t>(config_.max_per_sender, 1);
  config_.max_entries = std::max<size_t>(config_.max_entries, 1);
}

ReplayGuard::Verdict ReplayGuard::Admit(const std::string& sender, const ReplayId& id,
                                        uint64_t sent_ms, uint64_t now_ms) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const uint64_t horizon = now_ms > config_.max_age_ms ? now_ms - config_.max_age_ms : 0;
  horizon_ms_ = std::max(horizon_ms_, horizon);
  Expire();

  if (sent_ms < horizon_ms_) {
    ++stats_.stale;
    return Verdict::kStale;
  }
  const uint64_t latest = now_ms > kMax - config_.max_skew_ms ? kMax : now_ms + config_.max_skew_ms;
  if (sent_ms > latest) {
    ++stats_.future;
    return Verdict::kFuture;
  }
  if (sent_ms < global_floor_ms_) {
    ++stats_.evicted_floor;
    return Verdict::kEvictedFloor;
  }
  auto it = senders_.find(sender);
  if (it != senders_.end()) {
    if (sent_ms < it->second.floor_ms) {
      ++stats_.evicted_floor;
      return Verdict::kEvictedFloor;
    }
    if (by_sender_.count({it->second.id, sent_ms, id}) != 0) {
      ++stats_.duplicate;
      return Verdict::kDuplicate;
    }
  } else {
    it = senders_.emplace(sender, Sender{next_sender_id_++, 0, 0}).first;
    sender_by_id_.emplace(it->second.id, it);
  }
  ++stats_.fresh;
  Sender& s = it->second;
  const uint64_t sid = s.id;

  by_age_.emplace(sent_ms, sid, id);
  by_sender_.emplace(sid, sent_ms, id);
  if (++s.count > config_.max_per_sender) {
    // Forget the sender's oldest datagram, which may be the new one: it is then accepted once
    // and its copies fall below the floor. The sender keeps max_per_sender >= 1 entries, so
    // Erase does not drop it.
    const auto [old_sid, old_ms, old_id] = *by_sender_.lower_bound({sid, 0, ReplayId{}});
    ++stats_.evictions;
    s.floor_ms = std::max(s.floor_ms, old_ms + 1);
    Erase(old_ms, old_sid, old_id);
  }

  if (by_age_.size() > config_.max_entries) {
    const auto [old_ms, old_sid, old_id] = *by_age_.begin();
    ++stats_.evictions;
    global_floor_ms_ = std::max(global_floor_ms_, old_ms + 1);
    Erase(old_ms, old_sid, old_id);
  }
  return Verdict::kFresh;
}

void ReplayGuard::Expire() {
  while (!by_age_.empty() && std::get<0>(*by_age_.begin()) < horizon_ms_) {
    const auto [ms, sid, id] = *by_age_.begin();
    Erase(ms, sid, id);
  }
}

void ReplayGuard::Erase(uint64_t sent_ms, uint64_t sender_id, const ReplayId& id) {
  by_age_.erase({sent_ms, sender_id, id});
  by_sender_.erase({sender_id, sent_ms, id});
  const auto idx = sender_by_id_.find(sender_id);
  if (idx == sender_by_id_.end()) return;
  if (--idx->second->second.count == 0) {
    senders_.erase(idx->second);
    sender_by_id_.erase(idx);
  }
}

const char* ReplayVerdictName(ReplayGuard::Verdict v) {
  switch (v) {
    case ReplayGuard::Verdict::kFresh:
      return "fresh";
    case ReplayGuard::Verdict::kStale:
      return "stale";
    case ReplayGuard::Verdict::kFuture:
      return "future";
    case ReplayGuard::Verdict::kEvictedFloor:
      return "evicted_floor";
    case ReplayGuard::Verdict::kDuplicate:
      return "duplicate";
  }
  return "unknown";
}

}  // namespace meshtrain::gossip
