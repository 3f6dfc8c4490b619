// Replay protection for UDP datagrams without clock agreement between hosts: hosts'
// wall clocks may differ by minutes, so nothing is ever judged by comparing a sender's
// timestamp with the receiver's clock. Instead every datagram carries logical state stamped by
// the sender's codec (Codec::set_session): a per-process `session` id, drawn at random when the
// agent starts, and a `counter` numbering the session's datagrams 1, 2, ...
//
// The guard keeps, per sender name, a small set of recent sessions, each with an anti-replay
// sliding window as in IPsec (RFC 4303 §3.4.3) and WireGuard: the highest counter accepted and a
// bitmap of the kReplayWindow counters below it. For a datagram (sender, session, counter,
// sent_ms), checked in order (the first rule that applies decides):
//  1. unstamped:  session 0 or counter 0 (a codec without a session): refused.
//  2. known session: counter above the highest: fresh (the window slides); within the window
//     and not seen: fresh; seen: duplicate; below the window: too_old. A session superseded
//     by a newer one (rule 3) stays open for supersede_grace_s of receiver time (datagrams in
//     flight when the sender restarted), then closes: everything in it is closed_session.
//     A session that was forgotten and comes back is a new session (rule 3) with a fresh
//     window, so it also refuses, as old_session, stamps below the floor it was created with:
//     the copies of what it accepted before it was forgotten.
//  3. new session of a known sender: accepted only if its sent_ms is not below the sender's
//     floor: the start stamp (first sent_ms seen) of the newest session accepted from it, and
//     1 ms above the last sent_ms of every session forgotten since. sent_ms is the SENDER's own
//     wall clock and is only ever compared with that same sender's earlier stamps, so a sender
//     whose clock runs minutes ahead of or behind the receiver is treated like any other, and a
//     recorded old session cannot be replayed after the sender restarted (its stamps are older
//     than the new session's). Older sessions of the sender are then superseded (rule 2).
//     Otherwise: old_session. A first session from an unknown sender is always accepted.
//
// Memory is bounded: at most max_sessions_per_sender sessions per sender (the least recently
// used one that is not the sender's newest is forgotten first) and max_senders senders (least
// recently used first; a forgotten sender's state is lost entirely). A session silent for
// session_idle_s of receiver time is forgotten. Forgetting a session raises the sender's floor
// above its last stamp, so its datagrams (replays included) are refused afterwards.
//
// Residual risks:
//  - Plaintext mode (no --encrypt): session, counter and sent_ms are not authenticated, so
//    anybody can forge a fresh datagram, or a new session with a far-future stamp that makes the
//    sender's real next session look old (a sender lockout until the receiver forgets it).
//    Exact copies are refused, but protection is best-effort, as is everything without a key.
//  - Sealed mode: the guard is per receiver. A datagram captured on its way to another member,
//    never seen here, is accepted here once while its session is open.
//  - A sender forgotten under max_senders pressure (more distinct authenticated names than the
//    cap) loses its floor: a recording of its older sessions can then be replayed once each.
//  - A legitimate sender whose wall clock stepped back across a restart (its new session starts
//    below its previous session's start) is refused until its clock passes that start again,
//    or until this receiver forgets the sender.
//
// Pure: no clock reads; the receiver's monotonic time (seconds) is an input, used only to expire
// superseded and idle sessions. Thread-safety: none; one owner (the loop thread).
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "wire/messages.h"

namespace meshtrain::wire {

// Counters below a session's highest that the window still tells apart (as WireGuard's 2048 -
// 64, IPsec's 32..1024): a datagram reordered by more than this many is refused as too_old.
constexpr uint64_t kReplayWindow = 1024;

struct ReplayGuardConfig {
  size_t max_senders = 4096;           // sender names remembered (about 0.6 KB each, 4 sessions)
  size_t max_sessions_per_sender = 4;  // at least 2: the newest plus one being superseded
  double supersede_grace_s = 10;       // an older session stays open this long after a newer one
  double session_idle_s = 600;         // a session silent this long is forgotten (floor kept)
};

class ReplayGuard {
 public:
  enum class Verdict : uint8_t {
    kFresh,
    kDuplicate,      // this counter of this session was accepted before
    kTooOld,         // below the session's window
    kOldSession,     // an unknown session whose stamp is below the sender's floor
    kClosedSession,  // a session superseded by a newer one, past its grace period
    kUnstamped,      // session or counter 0
  };

  struct Stats {
    uint64_t fresh = 0;
    uint64_t duplicate = 0;
    uint64_t too_old = 0;
    uint64_t old_session = 0;
    uint64_t closed_session = 0;
    uint64_t unstamped = 0;
    uint64_t sessions_forgotten = 0;  // by the per-sender cap or idleness
    uint64_t senders_forgotten = 0;   // by the max_senders cap
    uint64_t rejected() const {
      return duplicate + too_old + old_session + closed_session + unstamped;
    }
  };

  explicit ReplayGuard(ReplayGuardConfig config = {});
  ReplayGuard(const ReplayGuard&) = delete;
  ReplayGuard& operator=(const ReplayGuard&) = delete;

  // The verdict for one decoded datagram; a fresh one is remembered. `now_s`: the receiver's
  // monotonic clock in seconds (any origin; a clock going backwards expires nothing).
  Verdict Admit(const std::string& sender, uint64_t session, uint64_t counter, uint64_t sent_ms,
                double now_s);
  Verdict Admit(const Datagram& d, double now_s) {
    return Admit(d.sender, d.session, d.counter, d.sent_ms, now_s);
  }
  // True if fresh.
  bool Check(const Datagram& d, double now_s) { return Admit(d, now_s) == Verdict::kFresh; }

  const Stats& stats() const { return stats_; }
  size_t senders() const { return senders_.size(); }
  size_t sessions() const { return num_sessions_; }
  const ReplayGuardConfig& config() const { return config_; }

 private:
  struct Session {
    uint64_t id = 0;
    uint64_t start_ms = 0;            // first sent_ms seen
    uint64_t last_ms = 0;             // largest sent_ms seen
    uint64_t floor_ms = 0;            // the sender's floor when this session was (re)created
    uint64_t top = 0;                 // highest counter accepted
    std::bitset<kReplayWindow> seen;  // bit i: counter top - i was accepted
    double last_seen_s = 0;
    double superseded_s = -1;  // receiver time a newer session appeared; < 0: current
  };
  struct Sender {
    std::vector<Session> sessions;  // small (max_sessions_per_sender)
    uint64_t newest_start_ms = 0;   // start of the newest session accepted
    uint64_t floor_ms = 0;          // a new session needs sent_ms >= floor_ms
    std::list<std::string>::iterator lru;
  };

  // Forgets sessions of `s` that are idle or closed for good, raising its floor.
  void Expire(Sender& s, double now_s);
  void Forget(Sender& s, size_t index);
  Verdict Window(Session& session, uint64_t counter);

  ReplayGuardConfig config_;
  Stats stats_;
  double now_s_ = 0;  // monotone: max of the times seen
  size_t num_sessions_ = 0;
  std::unordered_map<std::string, Sender> senders_;
  std::list<std::string> lru_;  // most recently seen sender first
};

const char* ReplayVerdictName(ReplayGuard::Verdict v);  // "fresh", "duplicate", "too_old", ...

}  // namespace meshtrain::wire
