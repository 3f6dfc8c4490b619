#include "wire/replay_guard.h"

#include <algorithm>

namespace meshtrain::wire {

// Why forgetting never lets an accepted datagram through again: a datagram accepted in session
// X has sent_ms <= X.last_ms. While X is remembered, its window refuses the copy (duplicate or
// too_old) or X is closed. Once X is forgotten, the copy looks like a new session, and the
// sender's floor is above X.last_ms (Forget), so rule 3 refuses it; if X came back since
// (recreated with a fresh window), it was created with that floor and refuses the copy too. Only
// forgetting the whole sender (max_senders) loses the floor; the header lists that as a residual
// risk.

ReplayGuard::ReplayGuard(ReplayGuardConfig config) : config_(config) {
  config_.max_senders = std::max<size_t>(config_.max_senders, 1);
  config_.max_sessions_per_sender = std::max<size_t>(config_.max_sessions_per_sender, 2);
}

void ReplayGuard::Forget(Sender& s, size_t index) {
  const Session& x = s.sessions[index];
  s.floor_ms = std::max(s.floor_ms, x.last_ms == UINT64_MAX ? UINT64_MAX : x.last_ms + 1);
  s.sessions.erase(s.sessions.begin() + static_cast<std::ptrdiff_t>(index));
  --num_sessions_;
  ++stats_.sessions_forgotten;
}

void ReplayGuard::Expire(Sender& s, double now_s) {
  for (size_t i = 0; i < s.sessions.size();) {
    if (now_s - s.sessions[i].last_seen_s > config_.session_idle_s) {
      Forget(s, i);
    } else {
      ++i;
    }
  }
}

ReplayGuard::Verdict ReplayGuard::Window(Session& x, uint64_t counter) {
  if (counter > x.top) {
    const uint64_t shift = counter - x.top;
    if (shift >= kReplayWindow) {
      x.seen.reset();
    } else {
      x.seen <<= static_cast<size_t>(shift);
    }
    x.seen.set(0);
    x.top = counter;
    return Verdict::kFresh;
  }
  const uint64_t diff = x.top - counter;
  if (diff >= kReplayWindow) return Verdict::kTooOld;
  if (x.seen.test(static_cast<size_t>(diff))) return Verdict::kDuplicate;
  x.seen.set(static_cast<size_t>(diff));
  return Verdict::kFresh;
}

ReplayGuard::Verdict ReplayGuard::Admit(const std::string& sender, uint64_t session,
                                        uint64_t counter, uint64_t sent_ms, double now_s) {
  now_s_ = std::max(now_s_, now_s);
  const double now = now_s_;
  if (session == 0 || counter == 0) {
    ++stats_.unstamped;
    return Verdict::kUnstamped;
  }

  // The sender's state, most recently used first; a new sender may push out the oldest one.
  auto it = senders_.find(sender);
  if (it == senders_.end()) {
    if (senders_.size() >= config_.max_senders) {
      auto victim = senders_.find(lru_.back());
      num_sessions_ -= victim->second.sessions.size();
      senders_.erase(victim);
      lru_.pop_back();
      ++stats_.senders_forgotten;
    }
    lru_.push_front(sender);
    it = senders_.emplace(sender, Sender{}).first;
    it->second.lru = lru_.begin();
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  Sender& s = it->second;
  Expire(s, now);

  // Rule 2: a session we know.
  auto known = std::find_if(s.sessions.begin(), s.sessions.end(),
                            [session](const Session& x) { return x.id == session; });
  if (known != s.sessions.end()) {
    Session& x = *known;
    if (x.superseded_s >= 0 && now - x.superseded_s > config_.supersede_grace_s) {
      ++stats_.closed_session;
      return Verdict::kClosedSession;
    }
    if (sent_ms < x.floor_ms) {
      // Older than what the sender showed before this session was (re)created: a copy from
      // an earlier life of it, which the fresh window does not remember.
      ++stats_.old_session;
      return Verdict::kOldSession;
    }
    const Verdict v = Window(x, counter);
    switch (v) {
      case Verdict::kFresh:
        ++stats_.fresh;
        x.last_ms = std::max(x.last_ms, sent_ms);
        x.last_seen_s = now;
        break;
      case Verdict::kDuplicate:
        ++stats_.duplicate;
        break;
      default:
        ++stats_.too_old;
        break;
    }
    return v;
  }

  // Rule 3: a new session must not be older than what this sender already showed us.
  if (sent_ms < s.floor_ms) {
    ++stats_.old_session;
    return Verdict::kOldSession;
  }
  for (Session& x : s.sessions) {
    if (x.superseded_s < 0) x.superseded_s = now;
  }
  if (s.sessions.size() >= config_.max_sessions_per_sender) {
    // Make room: the least recently seen session goes. All of them are now superseded by the
    // new one, which becomes the sender's newest and is never the one forgotten.
    size_t victim = 0;
    for (size_t i = 1; i < s.sessions.size(); ++i) {
      if (s.sessions[i].last_seen_s < s.sessions[victim].last_seen_s) victim = i;
    }
    Forget(s, victim);
  }
  Session x;
  x.id = session;
  x.start_ms = sent_ms;
  x.last_ms = sent_ms;
  x.floor_ms = s.floor_ms;
  x.top = counter;
  x.seen.set(0);
  x.last_seen_s = now;
  s.sessions.push_back(x);
  ++num_sessions_;
  s.floor_ms = std::max(s.floor_ms, sent_ms);
  ++stats_.fresh;
  return Verdict::kFresh;
}

const char* ReplayVerdictName(ReplayGuard::Verdict v) {
  switch (v) {
    case ReplayGuard::Verdict::kFresh:
      return "fresh";
    case ReplayGuard::Verdict::kDuplicate:
      return "duplicate";
    case ReplayGuard::Verdict::kTooOld:
      return "too_old";
    case ReplayGuard::Verdict::kOldSession:
      return "old_session";
    case ReplayGuard::Verdict::kClosedSession:
      return "closed_session";
    case ReplayGuard::Verdict::kUnstamped:
      return "unstamped";
  }
  return "unknown";
}

}  // namespace meshtrain::wire
