// Internals of membership::Swim shared by swim.cc (the public API), swim_state.cc (member state
// and its updates), swim_probe.cc (probing, gossip and push-pull scheduling), swim_nat.cc (NAT
// traversal) and swim_relay.cc (relays). Not part of the library's API.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "gossip/broadcast_queue.h"
#include "membership/lifeguard.h"
#include "membership/swim.h"

namespace meshtrain::membership {

namespace swim_detail {

constexpr TimeMs kNever = std::numeric_limits<TimeMs>::max();

// Lifeguard nacks: an intermediary that has not heard from the target after this fraction of
// the probe timeout tells the origin so, early enough to reach it before the origin's deadline.
constexpr double kNackFraction = 0.8;

// A member we hear from but do not know (we missed its alive message, or reaped it while it
// was cut off) gets a push-pull after this many probe intervals, unless gossip told us about
// it meanwhile. At most this many such senders are remembered at once.
constexpr TimeMs kUnknownSenderGraceIntervals = 2;
constexpr size_t kMaxUnknownSenders = 64;

// NAT traversal: a node moves to the address peers see it at once this many peers
// (or every live peer not behind NAT, when fewer) agree on it, so one peer cannot move a node
// that has several reachable peers by lying. The
// addresses it sent to are remembered for kSentToMemoryMs, at most kMaxSentTo of them (beyond
// that the oldest are forgotten), to tell an unsolicited ping from an answer.
constexpr size_t kReflexiveQuorum = 2;
constexpr TimeMs kSentToMemoryMs = 10 * 60 * 1000;
constexpr size_t kMaxSentTo = 4096;

// Bounded views: a member heard from (a packet or push-pull straight from it) within this many
// probe intervals may be shuffled away or evicted to make room for another. The shorter, the
// fewer holders let a member go that crashed just after they heard from it (before they could
// detect it), and the fewer entries each shuffle finds to trade.
constexpr TimeMs kFreshIntervals = 1;

// memberlist pushPullScale: above this many members the push-pull interval grows with
// log2(n), so full-state syncs stay O(1) per second cluster-wide instead of O(n).
constexpr size_t kPushPullScaleThreshold = 32;

inline bool IsLive(Status s) { return s == Status::kAlive || s == Status::kSuspect; }
inline bool IsDeadOrLeft(Status s) { return !IsLive(s); }

inline TimeMs PushPullScale(TimeMs interval, size_t n) {
  if (n <= kPushPullScaleThreshold) return interval;
  const double mult =
      std::ceil(std::log2(static_cast<double>(n)) - std::log2(double{kPushPullScaleThreshold})) +
      1.0;
  return static_cast<TimeMs>(static_cast<double>(interval) * mult);
}

// Lifeguard suspicion state for one suspected member (memberlist suspicion.go).
struct Suspicion {
  TimeMs start = 0;
  TimeMs min = 0;
  TimeMs max = 0;
  int expected = 0;       // K: confirmations that bring the timeout down to min
  int confirmations = 0;  // independent confirmations so far (the first accuser excluded)
  std::vector<std::string> accusers;
  TimeMs deadline = 0;
  TimeMs refresh_at = 0;  // when to gossip the suspicion again (see RefreshSuspicion)
};

struct NodeState {
  Member m;
  std::optional<Suspicion> suspicion;
  TimeMs reap_at = kNever;
  uint64_t admitted = 0;  // order of addition (bounded views evict the longest held first)
  // Last packet or push-pull straight from the member (bounded views: only members heard from
  // within a shuffle interval are shuffled, so a crashed member is not handed on).
  TimeMs heard = std::numeric_limits<TimeMs>::min() / 2;
  // Unconfirmed addresses (Config::unconfirmed_grace_intervals): when we learned the member at
  // its current address, and whether that address has answered (an ack to our probe) or sent
  // us a datagram of the member's own.
  TimeMs addr_since = 0;
  bool addr_confirmed = false;
  // When our join's discovery last pinged it (Swim::Impl::Discover).
  TimeMs discovery_ping = std::numeric_limits<TimeMs>::min() / 2;
};

// Our own probe in flight (memberlist probeNode, as a resumable state machine).
struct Probe {
  bool active = false;
  uint32_t seq = 0;
  std::string target;
  TimeMs timeout_at = 0;  // direct ack deadline; then indirect pings
  TimeMs deadline = 0;    // end of the probe interval; then suspect the target
  bool indirect_sent = false;
  bool waited = false;  // its late verdict waited a turn (Swim::Impl::ProbeDue)
  // A relayed target's relay, asked to ping it (SendIndirectPings), and whether it nacked.
  std::string via_relay;
  bool relay_nacked = false;
  int expected_nacks = 0;
  int nacks = 0;
  std::string addr;  // where the target was when the probe started, and through which relay
  std::string relay;
  bool unconfirmed = false;  // its address was unconfirmed then (Swim::Impl::HoldProbe)
};

// An indirect ping we are running for another member (SWIM ping-req at the intermediary).
struct Relay {
  std::string origin_addr;
  uint32_t origin_seq = 0;
  bool want_nack = false;
  bool nack_sent = false;
  TimeMs nack_at = 0;
  TimeMs expire_at = 0;
};

}  // namespace swim_detail
using namespace swim_detail;  // NOLINT: internal header of the swim*.cc files

struct Swim::Impl {
  Impl(Config c, uint64_t seed, TimeMs now);

  // ---- state updates (memberlist state.go) ----
  NodeState* FindState(const std::string& name) {
    auto it = map_.find(name);
    return it == map_.end() ? nullptr : it->second.get();
  }
  NodeState* AddNode(const std::string& name);
  void RemoveNode(NodeState* st);
  void SetStatus(NodeState* st, Status s);
  void Emit(Event::Kind kind, const NodeState* st) {
    if (st != self_) events_.push_back(Event{kind, st->m});
  }
  void ClearSuspicion(NodeState* st);
  void RefreshSuspicion(NodeState* st);
  void StartSuspicion(NodeState* st, const std::string& from);
  bool Confirm(NodeState* st, const std::string& from);
  // `spread` = false learns without re-gossiping (state that is old news to the cluster).
  void OnAlive(const AliveMsg& a, bool spread = true);
  // Bounded views (Config::max_members): whether an alive member we do not hold may be added,
  // evicting an alive member when the view is full. `direct`: it introduces itself.
  bool Admit(bool direct);
  bool Bounded() const { return cfg_.max_members > 0; }
  // Bounded views: heard from within kFreshIntervals probe intervals. Only such members are
  // shuffled away or evicted to make room for another.
  bool Fresh(const NodeState& st) const {
    return now_ - st.heard <= kFreshIntervals * cfg_.probe_interval;
  }
  // Bounded views: a holder's view and a crashed member's other holders overlap little once
  // shuffles have mixed the views, so news of a failure spread among holders only would reach
  // few of them (each would find out by its own probe, up to a view's worth of probe intervals
  // later, and time its suspicion out alone). Suspicions and failures of members not held are
  // therefore passed on once (per incarnation and kind; remembered in relayed_), as in
  // unbounded SWIM, and so is the refutation of a suspicion passed on. Progress and alive news
  // about members not held are still dropped. True: queue `kind` news about `name`.
  static constexpr uint8_t kRelayAlive = 0, kRelaySuspect = 1, kRelayDead = 2;
  bool RelayNews(const std::string& name, uint32_t incarnation, uint8_t kind);
  struct Relayed {
    uint64_t rank = 0;  // incarnation << 2 | kind
    TimeMs at = 0;
  };
  static constexpr size_t kMaxRelayed = 4096;
  std::unordered_map<std::string, Relayed> relayed_;
  void OnSuspect(const SuspectMsg& s);
  void OnDead(const DeadMsg& d);
  void OnProgress(const ProgressMsg& p);
  void OnUpdate(const Update& u);
  void Refute(uint32_t accused);
  void NoteStale(const NodeState* st);
  void MergeState(const std::vector<MemberState>& remote, bool spread = true);
  std::vector<MemberState> LocalState(bool without_self = false) const;

  // ---- failure detector ----
  NodeState* NextProbeTarget();
  void StartProbe();
  void SendIndirectPings();
  // The probe's deadline passed: its verdict (ProbeFailed), unless we were not running then.
  // Under CPU load the driver's timer fires late, before it reads the datagrams that came
  // meanwhile (the agent's libuv loop runs due timers, then polls sockets): an ack that arrived
  // in time may be waiting unread. A phase of the probe that starts more than kLateFraction of
  // the probe timeout after it was due is given its full length from when it starts, and a
  // verdict that late waits one turn (1 ms) for what arrived.
  void ProbeDue();
  static constexpr TimeMs kLateFraction = 10;  // late = more than probe_timeout / 10 past due
  bool Late(TimeMs due) const { return now_ - due > cfg_.probe_timeout / kLateFraction; }
  // Moves the probe's deadline to `deadline` (never earlier), and the next probe with it.
  void DelayProbe(TimeMs deadline);
  void ProbeFailed();
  // The relay our datagrams to `st` cross (with nat): its relay unless that is us, or ours
  // when we are relayed and `st` is behind NAT; null if none, or that relay is not live.
  NodeState* RelayOf(const NodeState& st);
  // `direct`: the target's own ack (not an intermediary's): its address answers us.
  void ProbeSucceeded(bool direct);
  // A ping-req from the origin at `reply_to`: ping the target for it. When the origin names
  // another address than the one we know the target at, one of us missed a move (news of a
  // member behind NAT that moved while the other sat at an address nobody reached): we ping it
  // at ours too, and send the origin our alive message for it (taken if newer).
  void OnIndirectPing(const IndirectPingMsg& ind, const std::string& reply_to);
  // The target answered ping-req `r`: its other ping for the same request has nothing to do.
  void EndIndirectPing(const Relay& r);
  // What we know of `target`, for the origin of a ping-req we answer (with nat): the origin's
  // direct ping went unanswered, so its view of where the target is may be stale (a move it
  // missed), and our alive message corrects it (taken only as a newer incarnation).
  std::vector<Update> TargetNews(const std::string& target) const;

  // ---- dissemination ----
  int RetransmitLimit() const {
    const double n = static_cast<double>(nodes_.size());
    return cfg_.retransmit_mult * static_cast<int>(std::ceil(std::log10(n + 1.0)));
  }
  // `piggyback`: fill the rest of the packet from the broadcast queue (each copy counts towards
  // the update's retransmissions). Direct news (Announce, Introduce) goes without: its
  // receivers are chosen for the news, not at random, and would spend gossip's budget.
  void SendPacket(const std::string& to, Primary primary, std::vector<Update> extra = {},
                  bool piggyback = true);
  // Sends `u` directly to up to kAnnounceFanout random live members (every one when they fit),
  // besides queueing it for gossip. Used for rare, important news (our join, our leave, a
  // force-leave, a failure we declare while the live members fit in the fanout): in small
  // clusters the retransmit budget (RetransmitMult × ceil(log10(n+1)), as low as 2) can be
  // spent on packets to the recently dead or to the subject itself, leaving a member to learn
  // the news only at the next push-pull.
  void Announce(const Update& u);
  // Sends our own alive message (current incarnation and metadata) to a member we just learned
  // about or that came back, while the live members fit in kAnnounceFanout.
  void Introduce(const NodeState& st);
  static constexpr size_t kAnnounceFanout = 32;
  void Gossip();
  void StartPushPulls();
  // Bounded views: a view shuffle with one random live member (Config::shuffle_interval).
  void StartShuffle();
  // Up to `k` random alive members for a shuffle, none of them `skip` (self is never one).
  std::vector<MemberState> ShuffleEntries(size_t k, const std::string& skip,
                                          const std::vector<MemberState>* not_in);
  // Takes a shuffle's entries: the alive ones not held are admitted, in place of the members
  // named in `pool` (front first) once the view is full; held ones are merged as usual.
  void MergeShuffle(const std::vector<MemberState>& entries, std::vector<std::string> pool);
  NodeState* PickAlivePeer();              // uniformly, or null
  void PushPullWith(const NodeState& st);  // queues a push-pull request with our state
  void QueueProgress();
  TimeMs NextGossip() const;

  // Up to k distinct random members accepted by `accept`, by rejection sampling over at most
  // 3·n draws (memberlist kRandomNodes): O(k) when most members qualify, never O(n²).
  template <typename F>
  std::vector<NodeState*> RandomNodes(size_t k, F accept) {
    std::vector<NodeState*> out;
    const size_t n = nodes_.size();
    for (size_t i = 0; i < 3 * n && out.size() < k; ++i) {
      NodeState* cand = nodes_[rng_() % n];
      if (!accept(cand)) continue;
      if (std::find(out.begin(), out.end(), cand) != out.end()) continue;
      out.push_back(cand);
    }
    return out;
  }
  // One uniformly random member accepted by `accept`, by a full O(n) scan (for rare states).
  template <typename F>
  NodeState* PickOne(F accept) {
    NodeState* chosen = nullptr;
    uint64_t seen = 0;
    for (NodeState* st : nodes_) {
      if (!accept(st)) continue;
      ++seen;
      if (rng_() % seen == 0) chosen = st;  // reservoir sampling
    }
    return chosen;
  }

  uint32_t NextSeq() { return next_seq_++; }
  uint64_t admissions_ = 0;

  Config cfg_;
  std::mt19937_64 rng_;
  TimeMs now_;

  std::unordered_map<std::string, std::unique_ptr<NodeState>> map_;
  std::vector<NodeState*> nodes_;  // probe order (memberlist's shuffled nodes slice)
  size_t probe_index_ = 0;
  NodeState* self_ = nullptr;
  size_t num_live_ = 0;

  Probe probe_;
  std::map<uint32_t, Relay> relays_;  // by the seq of our ping to the target
  uint32_t next_seq_ = 1;

  std::set<std::pair<TimeMs, std::string>> suspicion_timers_;
  std::set<std::pair<TimeMs, std::string>> refresh_timers_;
  std::set<std::pair<TimeMs, std::string>> reap_timers_;

  TimeMs next_probe_;
  TimeMs next_gossip_;
  TimeMs next_push_pull_;
  TimeMs next_shuffle_ = kNever;  // bounded views with a shuffle interval only
  // The shuffle in flight: the peer asked and the entries sent (dropped first to make room for
  // its answer's).
  struct PendingShuffle {
    std::string peer;
    std::vector<std::string> sent;
  };
  std::optional<PendingShuffle> shuffle_;
  // While a shuffle's entries are merged: the members that may make room for them (Admit).
  std::vector<std::string>* shuffle_pool_ = nullptr;
  bool progress_dirty_ = false;
  TimeMs last_progress_queued_ = std::numeric_limits<TimeMs>::min() / 2;
  TimeMs last_extra_push_pull_ = std::numeric_limits<TimeMs>::min() / 2;  // RequestPushPull
  bool left_ = false;

  gossip::BroadcastQueue queue_;
  Awareness awareness_;

  // Senders not in our member list, by name: (address, first heard).
  std::map<std::string, std::pair<std::string, TimeMs>> unknown_senders_;

  // The member whose packet or push-pull is being handled (bounded views: an alive message
  // about its sender is a self-introduction); null outside.
  const std::string* source_ = nullptr;
  bool admitting_joiner_ = false;  // handling a join push-pull (Admit: see there)

  // Corrections for stale accusations found in the packet being handled (see NoteStale).
  bool collecting_ = false;
  std::vector<Update> corrections_;

  // ---- NAT traversal ----
  std::string configured_addr_;
  std::unordered_map<std::string, TimeMs> sent_to_;  // address -> last sent
  std::map<std::string, std::string> observed_;      // peer name -> address it sees us at
  std::string last_observed_;                        // the newest of them
  void NoteSentTo(const std::string& addr);
  void NoteObserved(const std::string& peer, const std::string& addr);
  // Inbound traffic nobody here asked for reached us: we are reachable from outside.
  void NoteUnsolicited();
  void PublishSelf();  // a new incarnation of our alive message (address or metadata changed)
  // Hole punching: when we and `st` are both behind NAT, our alive message straight to its
  // address opens our router for datagrams from it; it does the same when it learns ours, so
  // probes pass both routers from then on instead of failing until a probe happens to go out
  // each way (which got live members suspected in the first seconds).
  void Punch(const NodeState& st);
  void PunchAll();
  // Right after a join, pings to a few members not behind NAT: their acks say where they see
  // us, so a node behind NAT moves to its reflexive address within a round trip instead of
  // after several probe periods, during which peers probe its unreachable inner address and
  // suspect it. seq -> the member pinged.
  std::map<uint32_t, std::string> discovery_;
  // `retry`: a later round (Tick), which first asks a reachable member for the state we
  // missed (nobody could gossip to us) and re-weighs the reports we have.
  void Discover(bool retry = false);
  // Weighs the reports in observed_, `addr` the newest: moves, or asks for a relay.
  void WeighObserved(const std::string& addr);
  // Counts towards the quorum of reports: a live member not behind NAT that could answer our
  // pings (it says it is public, or we heard from it at its address, or our discovery has not
  // waited a probe interval for its answer yet: a member that joined behind NAT at the same
  // time sits at an inner address that never answers).
  bool CanReport(const NodeState& st) const;
  // Until a quorum of reports settled where we are (or discover_until_ passed), Discover runs
  // again every probe interval: the first pings may all have gone to members behind NAT whose
  // inner addresses we learned, or to too few members, in a mesh whose nodes start together.
  bool discovered_ = false;
  TimeMs discover_until_ = 0;
  TimeMs next_discover_ = kNever;
  // Whether `st`'s address is unconfirmed now (Config::unconfirmed_grace_intervals), and
  // whether a failed probe of it must not make it suspect: its address was unconfirmed when
  // the probe went out, or it moved while the probe was out.
  bool Unconfirmed(const NodeState& st) const;
  bool HoldProbe(const NodeState& st) const;

  // ---- Relays ----
  // Advertised address -> name of each member behind NAT (a relayed member's address is where
  // its relay sees it: unique), so SendPacket finds the route of any address it is handed.
  std::unordered_map<std::string, std::string> nat_addr_;
  void IndexNat(const NodeState& st, const std::string& old_addr);
  std::optional<RelayRoute> RouteFor(const std::string& addr) const;
  // As a relayed node: set once peers saw us at different addresses and we could not move.
  bool need_relay_ = false;
  struct RelayClient {
    std::string name;  // "" = none chosen
    bool registered = false;
    bool awaiting = false;  // the last registration is unanswered
    uint32_t seq = 0;
    TimeMs last_heard = 0;  // last datagram from it (an answer, a probe)
    TimeMs next_keepalive = 0;
    std::string prev;  // the relay before (frames it still forwards are delivered)
    TimeMs prev_until = 0;
  } relay_;
  void RelayTick();
  void ChooseRelay(const std::string& avoid);
  void SendRegistration();
  void OnRelayAck(const AckMsg& ack, const std::string& from);
  void OnRelayNack(const std::string& from);
  // As a relay: registered members (name -> the address their registrations came from, last
  // registration) and the bandwidth cap's token bucket.
  struct RelayEntry {
    std::string addr;
    TimeMs last = 0;
  };
  std::map<std::string, RelayEntry> relay_clients_;
  // Members that sent frames through us lately, where they came from: a member behind a cone
  // NAT admits datagrams from us there, so a relayed node's answers reach it (return paths).
  std::map<std::string, RelayEntry> relay_returns_;
  // As any node: direct return paths to relayed members (Config::direct_ttl), by name: where
  // their last datagram straight to us came from, and when.
  std::unordered_map<std::string, RelayEntry> direct_;
  void NoteDirectFrom(const NodeState* st, const std::string& from_addr);
  const RelayEntry* DirectPath(const Member& m) const;
  // Set while sending an indirect ping (SWIM ping-req) for another member: it goes through the
  // target's relay even when a direct path is fresh (the path the origin's probe failed on may
  // be the one that broke).
  bool no_direct_ = false;
  double relay_tokens_ = 0;
  TimeMs relay_refill_ = 0;
  void OnRelayRegister(const RelayRegisterMsg& r, const Packet& p, const std::string& from_addr);

  std::vector<OutPacket> out_packets_;
  std::vector<OutPushPull> out_push_pulls_;
  std::vector<Event> events_;
  bool track_progress_ = false;
  std::vector<std::string> progress_news_;
  void NoteStep(NodeState* st, uint64_t step, TimeMs now) {
    st->m.step = step;
    st->m.step_learned = now;
    if (track_progress_) progress_news_.push_back(st->m.name);
  }
  Stats stats_;
};

}  // namespace meshtrain::membership
