// The node core: everything one meshtrain agent decides, as one sans-I/O state machine.
//
// A Node combines the protocol cores — SWIM membership (membership::Swim), the barrier
// (sync::BarrierCore) and receiver selection (sync::Select) — with what the agent does around
// them: driving the barrier for the trainer, multicast rounds of parameter snapshots (chunks out,
// one ParamAck per receiver back), reassembly of incoming snapshots, bandwidth meters, push-pull
// and join tracking, retry-join, and the graceful leave. It owns no socket, timer, thread or
// clock, and draws randomness only from one RNG seeded from NodeConfig::seed (Scylla raft's fsm,
// Tarantool's swim).
//
// The driver (the daemon's libuv agent, or the simulator):
//   1. feeds inputs with Step(input, now): verified datagrams and frames (wire/inbound.h has
//      done the size, authentication, verification and semantic checks), connection closes,
//      trainer progress and snapshots, plan results and operator commands;
//   2. calls Tick(now) when now >= NextDeadline();
//   3. after each Step/Tick executes TakeOutput(): datagrams and frames to send, connections to
//      open or close, barrier permits and parameters for the trainer, plans to solve, events.
// Nothing an output causes is delivered back synchronously: a connect that fails at once, a
// closed socket, a solved plan — each comes back as a later input. Connections are named by
// ConnId: the driver's ids for accepted connections, the node's ids (>= kFirstOutgoingConn)
// for the ones it asks the driver to open.
//
// Membership has two sources. By default the node runs its own Swim. With
// NodeConfig::external_membership the driver supplies the view instead (PeerView inputs): the
// simulator does this for meshes of thousands of nodes, where full SWIM views would need
// n² state; everything else (barrier, rounds, selection, mixing inputs) is the same code.
//
// Thread-safety: none; one thread owns a Node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "membership/swim.h"
#include "node/busy_meter.h"
#include "node/config.h"
#include "node/consensus.h"
#include "node/data_conns.h"
#include "node/io.h"
#include "node/lifecycle.h"
#include "node/link_probes.h"
#include "node/round.h"
#include "node/state_fetch.h"
#include "node/watchers.h"
#include "sync/bandwidth_estimate.h"
#include "sync/barrier.h"
#include "sync/name_index.h"
#include "sync/name_table.h"
#include "sync/selection.h"
#include "wire/compress.h"
#include "wire/messages.h"

namespace meshtrain::node {

// ---- Counters and state for status --------------------------------------------------------------

struct NodeStats {
  // The end-of-training consensus behind NAT: pulls of the consensus model this
  // node (a participant behind NAT) made, and answered with it (as the leader).
  uint64_t consensus_pulls = 0;
  uint64_t consensus_pulls_served = 0;
  uint64_t rounds = 0;
  uint64_t fanout_sum = 0;
  uint64_t params_bytes_sent = 0;  // acknowledged parameter bytes on the wire
  uint64_t params_bytes_raw = 0;   // the same transfers as plain float32 (before compression)
  uint64_t params_need_full = 0;   // compressed changes refused for a missing reference
  uint64_t params_received = 0;
  uint64_t early_permits = 0;    // permits granted while their step still computed (OSP)
  uint64_t rejected = 0;         // inputs refused by the node's own semantic checks
  uint64_t oversize_drops = 0;   // unused by the node; the driver counts encoder refusals
  uint64_t probes_sent = 0;      // capacity probe trains asked for (ProbeLink)
  uint64_t probes_measured = 0;  // their reports with a rate
  // Work units: inputs and ticks handled, and peers visited by walks over the view
  // (ForEachPeer; the barrier counts its own in BarrierStats::visited). With nothing walking
  // per step or per message, peer_visits stays a small multiple of the view size.
  uint64_t inputs = 0;
  mutable uint64_t peer_visits = 0;
};

class Node {
 public:
  Node(NodeConfig config, TimeMs now);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Starts: joins the configured peers. Call once, before any other input.
  void Start(TimeMs now);
  void Step(Input input, TimeMs now) { StepIn(input, now); }
  // The same, on an input the caller keeps (the simulator's in-flight slot): the node may move
  // from it, and the caller only destroys or reassigns it afterwards.
  void StepIn(Input& input, TimeMs now);
  void Tick(TimeMs now);
  // Earliest time Tick must run; never in the past by more than the caller's lateness.
  TimeMs NextDeadline() const;
  std::vector<Output> TakeOutput();
  // The same into `*out` (cleared first); both vectors keep their capacity, so a driver that
  // reuses its buffer allocates nothing per input (the simulator runs millions of them).
  void TakeOutput(std::vector<Output>* out);

  // Simulator-only (node/sim_hooks.h): a cache hint, no effect on behaviour.
  void Prefetch(int stage, const Input* in = nullptr) const;

  // ---- Read-only views (status, members, tests) ----
  const NodeConfig& config() const { return config_; }
  // The local model's size once an external trainer attaches (0 = any size accepted).
  void SetExpectedParams(uint32_t n) { config_.expected_params = n; }
  std::vector<membership::Member> Members() const;
  size_t PeersAlive() const;  // live (alive or suspect) members other than self
  uint64_t step() const { return progress_.step; }
  // Training as the mesh sees it: a fresh node joining a running mesh is not (nobody waits for
  // it) until it has adopted a peer's model (node_state.cc).
  bool training() const { return config_.training && progress_.training && !Joining(); }
  // Our trainer is gone past --trainer-grace and we did not finish: peers leave us out of the
  // end-of-training consensus (docs/design.md "One model at the end").
  bool absent() const {
    return config_.training && progress_.absent && !progress_.training && !lifecycle_.finished();
  }
  double BarrierWaitSeconds(TimeMs now) const;
  const NodeStats& stats() const { return stats_; }
  // The membership core's counters (zero without membership).
  membership::Stats MembershipStats() const;
  int HealthScore() const;
  uint64_t Incarnation() const;
  // This node's reachability as it publishes it, and the address it advertises now
  // (its reflexive address after a move behind NAT).
  membership::Reach Reach() const;
  std::string AdvertisedAddr() const;
  // The membership core (null with external membership): relay state and counters.
  const membership::Swim* swim() const { return swim_.get(); }
  bool leaving() const { return lifecycle_.leaving(); }
  // Whether `name` is a live (alive or suspect) member other than self, by one lookup.
  bool KnowsLive(const std::string& name) const { return PeerLive(name); }
  const sync::BarrierCore* barrier() const { return barrier_.get(); }
  // When `name` last came back: a suspect or failed member alive again, or a member that failed
  // while training joining anew (a restart). Nothing for members that never went away.
  std::optional<TimeMs> ReturnedAt(const std::string& name) const {
    auto it = returned_at_.find(name);
    return it == returned_at_.end() ? std::nullopt : std::optional<TimeMs>(it->second);
  }
  double uplink_estimate_mbps() const;
  double downlink_estimate_mbps() const;
  // The end-of-training consensus (node_consensus.cc) as status shows it.
  struct ConsensusView {
    ConsensusPhase state = ConsensusPhase::kOff;
    std::string leader;
    size_t participants = 0;
    size_t models = 0;  // leader: final models in hand (its own included)
    // Live members left out because their trainer is gone past the grace (Meta::absent).
    std::vector<std::string> left_out;
    // Members that failed while training, waited for (up to consensus_hold_ms) before the
    // finished nodes agree without them.
    std::vector<std::string> awaiting;
  };
  ConsensusView consensus() const;

 private:
  struct Peer;
  struct PushPull;

  // Constructs the output in place (an Output alternative or an Output).
  template <typename T>
  void Emit(T&& o) {
    out_.emplace_back(std::forward<T>(o));
  }
  // Runs after every input: drains the membership core and re-runs the barrier if needed.
  void Pump(TimeMs now, uint64_t join_tag);
  void OnDatagram(DatagramIn& in, TimeMs now);
  void OnFrame(FrameIn& in, TimeMs now);
  void OnClosed(const ConnClosed& in, TimeMs now);
  void OnTrainer(const TrainerProgress& p, TimeMs now);
  void OnSnapshot(SnapshotIn s, TimeMs now);
  void OnPlan(PlanResult p, TimeMs now);
  void OnJoin(const JoinCmd& c, TimeMs now);
  void OnLeave(TimeMs now);
  void OnForceLeave(const ForceLeaveCmd& c, TimeMs now);
  void OnPeerView(const PeerView& v, TimeMs now);

  // Membership queries over either source. A PeerRef points into the membership core's (or the
  // external view's) own records: nothing is copied, and it is valid until the next input.
  struct PeerRef {
    const std::string* name = nullptr;
    const std::string* addr = nullptr;       // membership address
    const std::string* data_addr = nullptr;  // where parameters go
    bool live = false;                       // alive or suspect
    bool alive = false;                      // alive only
    bool training = false;
    uint64_t step = 0;
    float uplink_mbps = 0;
    float downlink_mbps = 0;
    float step_ms = 0;  // published compute time per step (SWIM only)
    // Behind NAT (its reach is nat): nothing can open a parameter connection to it;
    // it pulls models over connections it opens (MaybePull).
    bool nat = false;
    // Its step was learned (from the peer itself, progress gossip or a state exchange), not
    // merely defaulted to 0 because gossip told of the member before anything told its step.
    bool step_known = true;
    // Its trainer is gone past the grace period (Meta::absent): no consensus participant.
    bool absent = false;
  };
  static PeerRef RefOf(const membership::Member& m);
  // Visits every peer but self, in the source's own order (not sorted), copying nothing. Each
  // visit counts in NodeStats::peer_visits: such walks are for rare events (a node's first
  // step, a probe, a membership change seen by a SELMCAST round), never per step or message.
  template <typename F>
  void ForEachPeer(F&& fn) const;
  std::optional<PeerRef> FindPeer(const std::string& name) const;
  const std::string* PeerAddr(const std::string& name) const;  // membership address, or null
  bool PeerLive(const std::string& name) const;
  // Alive, training peers: the receivers a round may choose from. Kept between membership
  // changes (PeerView inputs, SWIM events), sorted by name.
  // Candidates() that a push can reach: not behind NAT (those pull). Same cache.
  const std::vector<std::string>& PushCandidates();
  const std::vector<std::string>& Candidates();
  // A peer's membership record changed (joined, status, metadata, step): the incremental state
  // (barrier view with SWIM, candidates, the largest peer step for Joining) follows it.
  void OnPeerChanged(const PeerRef& p, bool membership_changed, TimeMs now);
  // Alive, training peers' largest step (Joining), raised as steps arrive and recomputed by one
  // walk only when a peer holding it leaves that set (and Joining asks).
  uint64_t PeersMaxStep() const;
  mutable uint64_t peers_max_step_ = 0;
  mutable bool peers_max_stale_ = false;
  // Live peers that trained and stopped (at least one step, not training, not absent: finished,
  // or waiting for a trainer): their largest step, cached the same way. A node that starts when
  // nobody trains any more joins them (node_state.cc), and the --min-peers gate does not hold
  // it back.
  uint64_t FinishedMaxStep() const;
  static bool FinishedPeer(const PeerRef& p) {
    return p.alive && !p.training && !p.absent && p.step > 0;
  }
  mutable uint64_t finished_max_step_ = 0;
  mutable bool finished_max_stale_ = false;
  // The step a joining node compares itself with: the training peers' largest, or, when none
  // trains ahead of step 0, the finished peers'.
  uint64_t MeshLeadStep() const {
    const uint64_t t = PeersMaxStep();
    return t > 0 ? t : FinishedMaxStep();
  }
  std::vector<std::string> consensus_left_out_;  // ConsensusView::left_out
  // Members that failed while training (node_consensus.cc, ConsensusHeld): when, at which step,
  // and whether the wait for them was logged.
  struct FellTraining {
    TimeMs at = 0;
    uint64_t step = 0;
    bool logged = false;
  };
  std::map<std::string, FellTraining> fell_training_;
  std::map<std::string, TimeMs> returned_at_;  // ReturnedAt (erased when it leaves for good)
  // Whether a member that failed while training still holds the consensus back: it has neither
  // come back (training, or past the step it failed at) nor stayed away consensus_hold_ms.
  bool ConsensusHeld(TimeMs now);
  uint64_t peers_version_ = 0;    // counts membership changes other than steps (SELMCAST view)
  size_t external_eligible_ = 0;  // external membership: alive, training peers
  // `fanout` distinct alive, training peers of the external view, drawn by index with rejection
  // (memberlist's kRandomNodes): O(fanout), no candidate list. Empty when most of the view is
  // ineligible (then the caller walks).
  std::vector<std::string> SampleExternal();
  void SetOwnMeta(TimeMs now);

  // Barrier driving.
  void SendBarrierQueries(uint64_t step);
  double MeshStepMs(TimeMs now);  // recomputed at most once per second
  double mesh_step_ms_ = 0;
  std::optional<TimeMs> mesh_step_at_;  // when MeshStepMs last walked the view
  void RunBarrier(TimeMs now);
  void TryEarlyPermit(TimeMs now);
  void OnBarrierNews(TimeMs now);

  // Parameter rounds.
  void StartRound(TimeMs now);
  std::vector<std::string> RandomReceivers(const std::vector<std::string>& candidates);
  void SendRound(std::vector<std::string> receivers, TimeMs now, bool consensus = false);
  void FinishTransfer(ConnId conn, bool ok, TimeMs now);
  void AbortTransfersTo(const std::string& name);
  // The open parameter connection to `name`, or a new one (Connect emitted).
  ConnId DataConnTo(const std::string& name, const std::string& addr);
  // A received transfer on `conn` is complete (or broken off): its bytes go to the downlink meter.
  void EndIncoming(ConnId conn, TimeMs now);
  // Forgets a parameter connection (closing, closed or broken): no transfer reuses it.
  void DropDataConn(ConnId conn);
  std::vector<wire::ParamChunk> EncodeFor(const std::string& name, const std::vector<float>& params,
                                          uint64_t round, uint64_t step, Round::Transfer* t);
  void OnParamChunk(ConnId conn, const std::string& sender, wire::ParamChunk& chunk, TimeMs now);
  uint64_t PlanEpoch() const;

  // Push-pull and joins.
  void StartPushPull(const membership::OutPushPull& pp, uint64_t join_tag, TimeMs now);
  void FinishJoinPart(uint64_t tag, bool ok);
  void OnPushPullReply(ConnId conn, wire::PushPullMsg& msg, TimeMs now);

  void UpdateBandwidth(TimeMs now);
  void Reject();  // counts an input the node refused
  // A datagram the node itself addresses (barrier queries and replies): through the member's
  // relay when it has one.
  void SendTo(std::string addr, wire::Datagram dg);
  void OnRelayFrame(const DatagramIn& in, const wire::RelayFrame& rf, TimeMs now);

  // Join with state and final-model serving (node_state.cc).
  bool StateReady(TimeMs now);       // false while a fresh node fetches a peer's model
  bool Joining() const;              // see training()
  void PublishTraining(TimeMs now);  // our metadata's `training` follows training()
  void NotifyWatchers();
  void OnStateChunk(ConnId conn, wire::Frame& f, TimeMs now);
  void OnStateClosed(TimeMs now);
  void ServeState(ConnId conn, const std::string& from);
  void ServeFinal(TimeMs now);
  // The end-of-training consensus (node_consensus.cc).
  void RunConsensus(TimeMs now);
  void OnConsensusResult(ConsensusResult r, TimeMs now);
  // A finished peer's final model (store: we are finished) or the leader's consensus model
  // (averaging `covers` participants, 0 = not said). True when taken (not to be mixed).
  bool OnConsensusModel(const std::string& sender, bool consensus, uint32_t covers,
                        std::vector<float>* params, TimeMs now);
  // Updates consensus_'s participants; false while the consensus does not apply (we or peers
  // still train, or it is off).
  bool ConsensusParticipants(TimeMs now);
  // Streams latest_ to a joiner's state request on `conn`, then closes it.
  void SendState(ConnId conn);
  // Drops latest_ when no round, pending round or final model needs it.
  void ReleaseSnapshot();

  NodeConfig config_;
  std::unique_ptr<membership::Swim> swim_;
  // External membership. Hashed: with thousands of simulated nodes of 500 peers each, a tree
  // lookup per query and per transfer is a chain of cache misses.
  // One peer of the external view, compact (simulated meshes hold millions of these): the
  // address is the name unless `addr` says otherwise (1 + its place in external_addrs_).
  struct ExternalPeer {
    uint32_t name = 0;  // in names_
    uint32_t addr = 0;
    uint64_t step = 0;
    float uplink_mbps = 0;
    float downlink_mbps = 0;
    bool alive = true;
    bool training = true;
  };
  std::shared_ptr<sync::NameTable> names_;  // interned peer names (external view, barrier)
  const std::string& NameOf(const ExternalPeer& v) const { return (*names_)[v.name]; }
  std::vector<ExternalPeer> external_;       // external membership: peers in the order first seen
  std::vector<std::string> external_addrs_;  // addresses that differ from the name
  sync::NameIndex external_index_;           // name -> position in external_
  const ExternalPeer* FindExternal(const std::string& name) const;
  const std::string& AddrOf(const ExternalPeer& v) const {
    return v.addr == 0 ? NameOf(v) : external_addrs_[v.addr - 1];
  }
  PeerRef RefOf(const ExternalPeer& v) const;
  std::vector<std::string> candidates_;  // Candidates()
  bool candidates_stale_ = true;
  // Candidates() less the members behind NAT (PeerRef::nat): the receivers a push may choose.
  std::vector<std::string> push_candidates_;
  std::vector<Output> out_;
  NodeStats stats_;
  ConnId next_conn_ = kFirstOutgoingConn;

  // Trainer and barrier.
  std::unique_ptr<sync::BarrierCore> barrier_;
  TrainerProgress progress_;
  bool published_training_ = false;
  bool published_absent_ = false;
  uint64_t published_step_ = 0;
  bool barrier_waiting_ = false;
  uint64_t early_permit_ = 0;  // the last permit granted before its step's Check (OSP)
  TimeMs barrier_deadline_ = sync::kNoDeadline;
  bool progress_dirty_ = false;
  membership::Reach logged_reach_ = membership::Reach::kUnknown;  // last logged
  std::string logged_addr_;
  std::string logged_relay_;  // the relay last logged as registered ("" = none)
  // Read on every input: kept together (node/sim_hooks.h).
  TimeMs bandwidth_at_ = 0;                    // bandwidth estimates are published
  TimeMs retry_join_at_ = sync::kNoDeadline;   // the next retry-join attempt
  TimeMs final_serve_at_ = sync::kNoDeadline;  // the final model is offered again
  // Start gates, training finished (latest_ is the final model), graceful leave.
  Lifecycle lifecycle_;
  LinkProbes probes_;  // its deadline first: read with the ones above
  // Join with state (node/state_fetch.h; the phase is lifecycle_.start()).
  StateFetch fetch_;
  Watchers watchers_;  // peers waiting for our step (ProgressQuery.need)
  // This node's barrier relies on watchers (sync::BarrierConfig::peers_watch): every sampled
  // policy but dssp.
  bool WatchesPeers() const {
    const sync::Policy p = config_.barrier.policy;
    return p != sync::Policy::kAsp && p != sync::Policy::kDssp;
  }

  // Rounds (node/round.h): one in flight; a newer snapshot replaces a pending one.
  std::unique_ptr<Round> round_;
  std::optional<SnapshotIn> pending_;
  uint64_t next_round_ = 1;
  uint64_t next_plan_ = 1;
  uint64_t awaiting_plan_ = 0;  // id of the PlanRequest a round waits for (0 = none)
  struct PlanCache {
    uint64_t epoch = ~uint64_t{0};
    uint64_t view_hash = 0;
    std::vector<std::string> receivers;
  } plan_cache_;
  // The SELMCAST inputs (candidates, published bandwidth, the canonical view text and its hash),
  // rebuilt only when membership or a published figure changed (peers_version_, own figures).
  struct PlanView {
    uint64_t version = ~uint64_t{0};
    float self_up = -1, self_down = -1;
    std::vector<std::string> candidates;
    sync::BandwidthView bw;
    std::string text;
    uint64_t hash = 0;
  } plan_view_;
  uint64_t awaiting_hash_ = 0;
  uint64_t awaiting_epoch_ = 0;
  std::map<std::string, wire::ParamAssembler> assemblers_;  // final models, top-k transfers
  // Streamed (unkeyed, not final) transfers being received, per sender: which chunks came.
  struct InStream {
    uint64_t round = 0;
    uint32_t chunks = 0;
    uint32_t total = 0;
    uint32_t got = 0;
    std::vector<bool> seen;
  };
  std::map<std::string, InStream> in_streams_;
  // Handles a chunk of a streamed transfer; false when it is malformed.
  bool OnStreamChunk(ConnId conn, const std::string& sender, wire::ParamChunk& chunk, TimeMs now);
  // The transfer from `sender` on `conn` is complete: acknowledge it, note the sender's progress.
  void CompleteIncoming(ConnId conn, const std::string& sender, uint64_t round, uint64_t step,
                        TimeMs now);
  std::map<std::string, Reference> tx_refs_;  // per receiver: what it holds of our model
  std::map<std::string, Reference> rx_refs_;  // per sender: our copy of what it last sent
  std::map<ConnId, uint64_t> incoming_;       // parameter connections being received: bytes so far
  // Behind NAT nobody can open a parameter connection to this node, so it asks a
  // reachable training peer for its model (StateRequest) on a connection it opens itself, once
  // per sync round, and mixes the answer like a received snapshot. At most one at a time.
  // At the end of training a participant behind NAT pulls the consensus model from the leader
  // the same way (node_consensus.cc): the leader answers such a request with the consensus
  // model (ParamChunk::consensus) once it has one, and closes before.
  std::map<ConnId, std::string> pulls_;  // by connection: the peer asked
  void MaybePull();
  void PullFrom(const std::string& name, const std::string& data_addr);
  DataConns data_conns_;  // open parameter connections to receivers (node/data_conns.h)
  // The newest snapshot of our model (served to joiners; the final one to peers still training).
  // Held only while a round, a pending round or a state transfer uses it, or when final: a large
  // model's trainer reuses the one snapshot buffer once nobody holds it.
  std::shared_ptr<const std::vector<float>> latest_;
  std::vector<ConnId> state_waiters_;  // joiners' state requests waiting for a snapshot
  uint64_t latest_step_ = 0;
  Consensus consensus_;  // the end-of-training consensus (node/consensus.h)

  BusyMeter up_, down_;  // bandwidth meters (node/busy_meter.h)

  void SendProbe(TimeMs now);

  // Push-pulls and joins.
  std::map<ConnId, std::unique_ptr<PushPull>> pushpulls_;
  struct JoinWait {
    int outstanding = 0;
    int joined = 0;
  };
  std::map<uint64_t, JoinWait> joins_;
  int join_attempts_ = 0;     // made at start and by retry-join
  std::set<ConnId> serving_;  // accepted connections we answered and closed

  // The node's only randomness (2.5 KB of state; last: node/sim_hooks.h).
  sync::Rng rng_;
};

}  // namespace meshtrain::node
