// The node core: everything one meshtrain agent decides, as one sans-I/O state machine.
//
// A Node combines the protocol cores — SWIM membership (membership::Swim), the barrier
// (sync::BarrierCore) and receiver selection (sync::Select) — with what the agent does around
// them: driving the barrier for the trainer, multicast rounds of parameter snapshots (chunks out,
// one ParamAck per receiver back), reassembly of incoming snapshots, bandwidth meters, push-pull
// and join tracking, retry-join, and the graceful leave. It owns no socket, timer, thread or
// clock, and draws randomness only from one RNG seeded from NodeConfig::seed (Scylla raft's fsm,
// Tarantool's swim: STYLE.md).
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
#include "sync/bandwidth_estimate.h"
#include "sync/barrier.h"
#include "sync/name_index.h"
#include "sync/name_table.h"
#include "sync/selection.h"
#include "wire/compress.h"
#include "wire/messages.h"

namespace meshtrain::node {

using TimeMs = int64_t;
using ConnId = uint64_t;
inline constexpr ConnId kFirstOutgoingConn = ConnId{1} << 62;

struct NodeConfig {
  std::string name;
  std::string cluster = "default";  // seeds the shared SELMCAST plan
  std::string addr;                 // advertised membership address ("ip:port")
  std::string data_addr;            // parameter address; empty = addr
  std::vector<std::pair<std::string, std::string>> tags;  // operator tags, sorted (issue 19)
  membership::Config membership;
  bool external_membership = false;  // the driver supplies PeerView inputs instead of SWIM
  // Where peer names are interned (the external view's and the barrier's): the simulator shares
  // one table between all its nodes; null: the node keeps its own. A table never forgets a name:
  // it grows with the distinct peers ever seen.
  std::shared_ptr<sync::NameTable> names;
  uint64_t seed = 1;  // the node's only source of randomness

  // Training (absent: the node is a member only).
  bool training = false;
  sync::BarrierConfig barrier;
  sync::SelectPolicy select = sync::SelectPolicy::kSelmcast;
  size_t fanout = 3;
  size_t min_peers = 0;     // training peers to wait for before the first step of a fresh run
  uint64_t start_step = 0;  // resumed from a checkpoint at this step (skips min_peers)
  bool resumed = false;
  double uplink_limit_mbps = 0;  // caps of the bandwidth estimates (0 = none)
  double downlink_limit_mbps = 0;
  uint32_t chunk_floats = wire::kParamChunkFloats;
  uint32_t expected_params = 0;  // floats of the local model; other sizes are rejected
  // false: an external trainer (issue 16) has not attached yet: the node starts as not training
  // (peers do not wait for it) until TrainerProgress says otherwise.
  bool trainer_attached = true;
  wire::CompressSpec compress;  // --compress (wire/compress.h)
  uint32_t full_every = 32;     // compressed: a full snapshot after this many changes

  std::vector<std::string> join;  // peers to contact at start
  bool retry_join = false;
  TimeMs retry_join_interval_ms = 30000;
  int retry_join_max = 0;      // join attempts (the first included) before giving up; 0 = unlimited
  TimeMs leave_max_ms = 3000;  // SPEC §3: wait at most this long for "left" to spread
  TimeMs bandwidth_interval_ms = 2000;  // how often measurements become published estimates
  // Link-capacity probes (SPEC §7, wire/link_probe.h): a train to one live peer this often
  // (the first ten 2 s apart); 0 = off. Probed rates are kept kProbeKeepIntervals intervals.
  TimeMs capacity_probe_interval_ms = 0;
  // Probe peers at loopback addresses too (tests of the node core; a loopback path has no link
  // to measure, and trains would only crowd the other agents' sockets on one machine).
  bool probe_loopback = false;
  TimeMs min_peers_poll_ms = 100;
  // OSP (issue 18): after a pass, query the next step's blocking peers while the step computes.
  bool overlap_barrier = true;
  uint64_t plan_epoch_steps = 16;  // a SELMCAST plan is shared for this many steps (see node.cc)
  // Join with state (issue 14): a node about to take its first step (fresh or resumed) that
  // finds every live training peer further on fetches the
  // most advanced one's model before its first step and adopts the slowest live peer's step.
  bool join_state = true;
  TimeMs join_state_timeout_ms = 10000;  // then it starts from its own initialisation
  uint64_t join_state_min_lead = 20;     // fetch only from a mesh this many steps further on (the
                                         // first nodes of a mesh start within a few steps)
  // A node that finished training (--target-accuracy, --steps) offers its final model to the
  // peers still training this often, so the last nodes converge with it instead of alone.
  TimeMs final_serve_interval_ms = 200;
  // One model at the end (issue 32, node_consensus.cc): once no live member trains any more, the
  // finished nodes agree on the average of their final models. Off: each keeps its own.
  bool consensus = true;
  TimeMs consensus_retry_ms = 2000;  // a transfer of the consensus protocol is repeated after
};

// ---- Inputs ----------------------------------------------------------------------------------

struct DatagramIn {
  std::string from;  // source "ip:port"; empty for a datagram a relay delivered (`via`)
  wire::Datagram msg;
  std::string via{};  // the relay that delivered it (issue 34); empty: it came straight
};
struct FrameIn {
  ConnId conn;
  wire::Frame msg;
};
// A connection ended. `clean`: closed after an orderly exchange (for outgoing connections the
// node asked to close), otherwise refused, reset, timed out or aborted.
struct ConnClosed {
  ConnId conn;
  bool clean = false;
};
// The trainer's state (sent whenever it changed).
struct TrainerProgress {
  uint64_t step = 0;      // completed steps
  bool training = true;   // false once --steps / --target-accuracy stopped it
  bool waiting = false;   // blocked on the barrier for step `step + 1`
  membership::Eval eval;  // last test evaluation (published with our progress)
  float step_ms = 0;      // compute time per step (EWMA, ms; published for --batch auto)
};
// A parameter snapshot to multicast; a newer one replaces one not yet sent.
struct SnapshotIn {
  uint64_t step = 0;
  std::shared_ptr<const std::vector<float>> params;
  bool final = false;  // the model as training stopped: offered to every training peer
  // Streaming fragments (issue 32): only floats [span.begin, span.end) go out (params still
  // holds the whole model, for joiners). Empty span: the whole model. Ignored with top-k.
  wire::StreamSpan span{};
};
// The answer to a ConsensusReduce output: the average it asked for.
struct ConsensusResult {
  uint64_t id = 0;
  std::shared_ptr<const std::vector<float>> params;
};
// The answer to a PlanRequest output.
struct PlanResult {
  uint64_t id = 0;
  std::vector<std::string> receivers;
};
// Operator commands; `tag` comes back in the CommandDone event.
struct JoinCmd {
  uint64_t tag = 0;
  std::vector<std::string> addrs;
};
struct LeaveCmd {};
struct ForceLeaveCmd {
  uint64_t tag = 0;
  std::string name;
};
// The report on a probe this node sent (ProbeLink{id}): the train crossed the path at `mbps` MB/s
// (0: nothing measurable arrived).
struct ProbeResult {
  uint64_t id = 0;
  double mbps = 0;
  int received = 0;
};
// A probe train from `from` (membership address) arrived here at `mbps` MB/s: a lower bound of
// this node's downlink.
struct ProbeReceived {
  std::string from;
  double mbps = 0;
};
// External membership: the driver's view of one peer (replaces what was known of it).
struct PeerView {
  std::string name;
  std::string addr;
  bool alive = true;
  bool training = true;
  uint64_t step = 0;
  float uplink_mbps = 0;
  float downlink_mbps = 0;
};

using Input =
    std::variant<DatagramIn, FrameIn, ConnClosed, TrainerProgress, SnapshotIn, PlanResult, JoinCmd,
                 LeaveCmd, ForceLeaveCmd, PeerView, ProbeResult, ProbeReceived, ConsensusResult>;

// ---- Outputs ---------------------------------------------------------------------------------

struct SendDatagram {
  std::string to;
  wire::Datagram msg;
  // Issue 34: non-empty when `to` is a member behind a relay: send `msg` to `via` (the relay's
  // address) inside a relay frame for member `dest` (Endpoint::SendRelayed).
  std::string via{};
  std::string dest{};
};
// A relay frame for this node came from its relay (issue 34): the driver decodes `inner` as an
// inbound datagram (counting what it refuses, a nested relay frame included) and feeds it as a
// DatagramIn with `via` set and no source address.
struct RelayedIn {
  std::string via;       // the relay's name
  std::string via_addr;  // where the frame came from (the rate limiter's key)
  std::vector<uint8_t> inner;
};
// Open a TCP connection; its id is used by the SendFrame/Close outputs that follow at once.
struct Connect {
  ConnId conn;
  std::string to;
};
struct SendFrame {
  ConnId conn;
  wire::Frame msg;
};
struct Close {
  ConnId conn;
  bool abort = false;  // reset instead of an orderly close
};
// Stream a full snapshot on `conn` as the chunk frames of one transfer (issue 31): the driver
// encodes chunk after chunk (wire::EncodeStreamChunk) as the connection drains, off its event
// loop, from the one shared snapshot, so no encoded copy of the whole model is ever made and all
// receivers of a round get the same bytes. Frames that follow on `conn` (a Close) go after the
// last chunk. Endpoint::SendParams's default expands it into SendFrames at once.
struct SendParams {
  ConnId conn;
  std::string sender;  // Frame::sender
  std::shared_ptr<const std::vector<float>> params;
  uint64_t round = 0;
  uint64_t step = 0;
  bool final = false;
  wire::CompressSpec spec;  // Streamable(): none, fp16 or int8
  uint32_t chunk_floats = wire::kParamChunkFloats;
  bool consensus = false;   // the consensus model (plain floats, ParamChunk::consensus)
  wire::StreamSpan span{};  // a fragment of the model only (SnapshotIn::span)
};
// Send a probe train of `packets` datagrams to the membership address `to`; the report comes
// back as ProbeResult{id} (or never: the node gives up after a few seconds).
struct ProbeLink {
  uint64_t id = 0;
  std::string to;
  int packets = 0;
};
// The trainer may start steps up to and including `step`.
struct Permit {
  uint64_t step;
  // Median compute time per step that the live training peers publish (ms; 0 = unknown): the
  // mesh's pace, for --batch auto.
  double mesh_step_ms = 0;
};
// Parameters from `from` to mix at the trainer's next step boundary.
struct Mix {
  std::string from;
  uint64_t step = 0;
  std::vector<float> params;
  bool finished = false;  // the sender finished training: mix at full weight (`step` is ours)
  // The chunks say final: the sender's final model (it met its target or step budget), at the
  // sender's own step `sender_step` (a (from, sender_step) pair names one final model; it is
  // offered again every 200 ms).
  bool final_model = false;
  uint64_t sender_step = 0;
};
// One chunk of a peer's snapshot, floats [offset, offset + count()) of a model of `total`, to
// fold into the trainer's running sum as it arrives (issue 31: no whole model per sender is ever
// assembled). The values are `data`, or, for an int8 chunk the codec checked
// (wire::CheckChunk), q[i] * scales[i / wire::kInt8Block] (wire::DequantizeInt8Chunk). `step`
// is the weight step as in Mix (ours when the sender finished). The transfer's ParamsReceived
// follows its last chunk; a transfer broken off leaves the chunks that came mixed, which is still
// an average per coordinate. Final models and top-k transfers come whole, as Mix.
struct MixChunk {
  std::string from;
  uint64_t round = 0;  // the sender's transfer
  uint64_t step = 0;
  bool finished = false;
  uint32_t total = 0;
  uint32_t offset = 0;
  std::vector<float> data;
  std::vector<int8_t> q;      // int8: one value a byte, with
  std::vector<float> scales;  // one scale a block
  // Or the values left in the frame they came in (the vectors above then stay empty).
  wire::HeldValues held;
  bool int8() const { return held ? held.q != nullptr : !q.empty(); }
  size_t count() const { return held ? held.n : q.empty() ? data.size() : q.size(); }
  const float* values() const { return held ? held.f : data.data(); }
  const int8_t* qvalues() const { return held ? held.q : q.data(); }
  const float* qscales() const { return held ? held.s : scales.data(); }
};
// Solve a SELMCAST plan (off the loop thread in the daemon) and answer with PlanResult{id}.
struct PlanRequest {
  uint64_t id = 0;
  std::string self;
  std::vector<std::string> candidates;
  sync::BandwidthView bandwidth;
  size_t fanout = 0;
  uint64_t seed = 0;  // the plan's tie-breaking RNG (shared by every node of the epoch)
};

struct MemberEvent {
  membership::Event::Kind kind;
  membership::Member member;
};
struct RoundDone {
  int fanout = 0;      // receivers that acknowledged the whole snapshot
  uint64_t bytes = 0;  // on the wire
  double seconds = 0;
  uint64_t raw_bytes = 0;  // the same transfers as plain float32 chunks (before compression)
};
struct ParamsReceived {
  std::string from;
  uint64_t step = 0;
};
struct CommandDone {
  uint64_t tag = 0;
  bool ok = false;
  int joined = 0;
  std::string error;
};
// Join with state: the trainer adopts `params` (fetched from `from`) and continues after `step`
// (it has not taken a step yet). The Permit for step + 1 follows. Every value is finite: each
// chunk was checked on arrival (wire::ExpandChunk), so the driver need not scan it again on
// its event loop (issue 31).
struct AdoptState {
  std::string from;
  uint64_t step = 0;
  std::vector<float> params;
};
// A note for the operator's log; `warn` for problems.
struct LogLine {
  bool warn = false;
  std::string text;
};
// The graceful leave finished: the driver may shut down.
struct LeaveDone {
  TimeMs took_ms = 0;
};
// Membership changed (the driver may persist a peer snapshot).
struct MembershipChanged {};
// Retry-join is due (attempt 2, 3, ...): the driver resolves the configured peers' names again
// and answers with JoinCmd{0, addresses} (tag 0: no CommandDone). `last`: after this attempt
// the node gives up (--retry-max) unless it succeeds; then JoinGaveUp follows.
struct RetryJoin {
  int attempt = 0;
  bool last = false;
};
// Every join attempt --retry-max allowed failed (Serf: the agent then shuts down).
struct JoinGaveUp {
  int attempts = 0;
};

// Consensus at the end of training (issue 32): average `models` with equal weights, in this order
// (learn::AverageModels), off the event loop, and answer with ConsensusResult{id}.
struct ConsensusReduce {
  uint64_t id = 0;
  std::vector<std::shared_ptr<const std::vector<float>>> models;
};
// The mesh's consensus model: the trainer takes it over bit for bit as its final model. `crc`:
// learn::ParamsCrc32 of it is the driver's to compute; `participants` averaged by `leader`.
struct AdoptConsensus {
  std::string leader;
  std::shared_ptr<const std::vector<float>> params;
  size_t participants = 0;
};

using Output = std::variant<SendDatagram, Connect, SendFrame, Close, Permit, Mix, PlanRequest,
                            MemberEvent, RoundDone, ParamsReceived, CommandDone, LogLine, LeaveDone,
                            MembershipChanged, AdoptState, RetryJoin, JoinGaveUp, ProbeLink,
                            SendParams, MixChunk, ConsensusReduce, AdoptConsensus, RelayedIn>;

// ---- Counters and state for status --------------------------------------------------------------

struct NodeStats {
  // The end-of-training consensus behind NAT (issue 34): pulls of the consensus model this
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
  // Work units (issue 33): inputs and ticks handled, and peers visited by walks over the view
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

  // A hint for the processor, no effect on behaviour: loads what handling an input touches first.
  // Stage 0 fetches lines of this object; stage 1 (later, when those had time to arrive) the
  // objects it points to. The simulator calls it for the next events' nodes: with thousands of
  // nodes every node's state is a cache miss otherwise.
  // Stages 2 and 3 follow the input's sender into the views (their index buckets, then their
  // entries).
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
  double BarrierWaitSeconds(TimeMs now) const;
  const NodeStats& stats() const { return stats_; }
  // The membership core's counters (zero without membership).
  membership::Stats MembershipStats() const;
  int HealthScore() const;
  uint64_t Incarnation() const;
  // Issue 34: this node's reachability as it publishes it, and the address it advertises now
  // (its reflexive address after a move behind NAT).
  membership::Reach Reach() const;
  std::string AdvertisedAddr() const;
  // The membership core (null with external membership): relay state and counters (issue 34).
  const membership::Swim* swim() const { return swim_.get(); }
  bool leaving() const { return leaving_; }
  // Whether `name` is a live (alive or suspect) member other than self, by one lookup.
  bool KnowsLive(const std::string& name) const { return PeerLive(name); }
  const sync::BarrierCore* barrier() const { return barrier_.get(); }
  double uplink_estimate_mbps() const;
  double downlink_estimate_mbps() const;
  // The end-of-training consensus (node_consensus.cc) as status shows it.
  struct ConsensusView {
    const char* state = "off";  // off, training, collecting, reducing, serving, adopted
    std::string leader;
    size_t participants = 0;
    size_t models = 0;  // leader: final models in hand (its own included)
  };
  ConsensusView consensus() const;

 private:
  struct Peer;
  struct Round;
  struct Transfer;
  struct Reference;
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
    // Behind NAT (its reach is nat, issue 34): nothing can open a parameter connection to it;
    // it pulls models over connections it opens (MaybePull).
    bool nat = false;
    // Its step was learned (from the peer itself, progress gossip or a state exchange), not
    // merely defaulted to 0 because gossip told of the member before anything told its step.
    bool step_known = true;
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
  // Candidates() that a push can reach: not behind NAT (issue 34; those pull). Same cache.
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
                                          uint64_t round, uint64_t step, Transfer* t);
  void OnParamChunk(ConnId conn, const std::string& sender, wire::ParamChunk& chunk, TimeMs now);
  uint64_t PlanEpoch() const;

  // Push-pull and joins.
  void StartPushPull(const membership::OutPushPull& pp, uint64_t join_tag, TimeMs now);
  void FinishJoinPart(uint64_t tag, bool ok);
  void OnPushPullReply(ConnId conn, wire::PushPullMsg& msg, TimeMs now);

  void UpdateBandwidth(TimeMs now);
  void Reject();  // counts an input the node refused
  // A datagram the node itself addresses (barrier queries and replies): through the member's
  // relay when it has one (issue 34).
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
  void Consensus(TimeMs now);
  void OnConsensusResult(ConsensusResult r, TimeMs now);
  // A finished peer's final model (store: we are finished) or the leader's consensus model.
  // True when taken (not to be mixed).
  bool OnConsensusModel(const std::string& sender, bool consensus, std::vector<float>* params,
                        TimeMs now);
  // Updates consensus_.participants; false while the consensus does not apply (we or peers
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
  uint64_t published_step_ = 0;
  bool barrier_waiting_ = false;
  uint64_t early_permit_ = 0;  // the last permit granted before its step's Check (OSP)
  bool min_peers_reached_ = false;
  TimeMs barrier_deadline_ = sync::kNoDeadline;
  bool progress_dirty_ = false;
  membership::Reach logged_reach_ = membership::Reach::kUnknown;  // last logged (issue 34)
  std::string logged_addr_;
  std::string logged_relay_;  // the relay last logged as registered ("" = none)
  // What NextDeadline, Tick and the barrier read on every input, kept on a few cache lines next
  // to the barrier state above (with thousands of simulated nodes, each line is a cache miss).
  TimeMs bandwidth_at_ = 0;                    // bandwidth estimates are published
  TimeMs probe_at_ = sync::kNoDeadline;        // the next capacity probe
  TimeMs retry_join_at_ = sync::kNoDeadline;   // the next retry-join attempt
  TimeMs final_serve_at_ = sync::kNoDeadline;  // the final model is offered again
  bool final_ = false;                         // latest_ is the final model
  bool leaving_ = false;                       // graceful leave started
  bool left_ = false;                          // and finished
  TimeMs leave_started_ = 0;
  struct Fetch {
    enum { kIdle, kWaiting, kDone } phase = kIdle;
    ConnId conn = 0;
    std::string from;
    uint64_t adopt_step = 0;
    TimeMs deadline = 0;  // of the whole attempt (learning the mesh, fetches, retries)
    TimeMs retry_at = 0;
    wire::ParamAssembler assembler;
  } fetch_;
  static constexpr TimeMs kStateRetryMs = 250;
  // Peers waiting for our step (ProgressQuery.need): answered again when we reach it.
  // A flat vector with a hashed index (one lookup per query instead of a walk down a tree of
  // strings) and the smallest `need`, so a step that satisfies nobody costs no walk.
  struct Watcher {
    std::string name;
    std::string addr;
    uint32_t seq = 0;
    uint64_t need = 0;
  };
  // At most this many, or one per peer of the barrier's view if that is more (bsp in a mesh of
  // thousands: every peer may wait for us).
  static constexpr size_t kMaxWatchers = 1024;
  std::vector<Watcher> watchers_;
  sync::NameIndex watcher_index_;  // name -> position in watchers_
  uint64_t watchers_min_need_ = 0;
  // False if no place was left (the query is then answered at once, and only at once).
  bool AddWatcher(const std::string& name, const std::string& addr, uint32_t seq, uint64_t need);
  // This node's barrier relies on watchers (sync::BarrierConfig::peers_watch): every sampled
  // policy but dssp.
  bool WatchesPeers() const {
    const sync::Policy p = config_.barrier.policy;
    return p != sync::Policy::kAsp && p != sync::Policy::kDssp;
  }

  // Rounds: one in flight; a newer snapshot replaces a pending one.
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
  // Issue 34: behind NAT nobody can open a parameter connection to this node, so it asks a
  // reachable training peer for its model (StateRequest) on a connection it opens itself, once
  // per sync round, and mixes the answer like a received snapshot. At most one at a time.
  // At the end of training a participant behind NAT pulls the consensus model from the leader
  // the same way (node_consensus.cc): the leader answers such a request with the consensus
  // model (ParamChunk::consensus) once it has one, and closes before.
  std::map<ConnId, std::string> pulls_;  // by connection: the peer asked
  void MaybePull();
  void PullFrom(const std::string& name, const std::string& data_addr);
  // Parameter connections stay open between transfers (one transfer at a time on each), so a
  // transfer skips TCP's handshake and slow start; the driver's idle timeout closes unused ones
  // and at most kMaxDataConns stay open (the least recently used idle one is closed).
  struct DataConn {
    ConnId conn = 0;
    uint64_t used = 0;  // round that used it last
  };
  static constexpr size_t kMaxDataConns = 32;
  std::map<std::string, DataConn> data_conns_;     // receiver -> its open connection
  std::map<ConnId, std::string> data_conn_peers_;  // the same, by connection
  // The newest snapshot of our model (served to joiners; the final one to peers still training).
  // Held only while a round, a pending round or a state transfer uses it, or when final: a large
  // model's trainer reuses the one snapshot buffer once nobody holds it (issue 31).
  std::shared_ptr<const std::vector<float>> latest_;
  std::vector<ConnId> state_waiters_;  // joiners' state requests waiting for a snapshot
  uint64_t latest_step_ = 0;
  struct ConsensusState {
    // Sorted; self included unless we are a spectator: a node that took no step of its own
    // (it took a finished peer's final model over before its first step) is no participant by
    // its peers' rule (stopped after at least one step), so by ours neither: it pulls the
    // leader's result instead of sending it a final model.
    std::vector<std::string> participants;
    bool spectator = false;
    // The first participant not behind NAT (every other pushes to it; issue 34), else the first.
    std::string leader;
    std::set<std::string> natted;  // participants behind NAT: they pull the result (PullFrom)
    TimeMs next_pull = 0;
    // Leader: the finished peers' final models (the newest per sender).
    std::map<std::string, std::shared_ptr<const std::vector<float>>> finals;
    uint64_t reduce_id = 0;
    bool reducing = false;
    std::vector<std::string> reduced_over;  // the participants of the reduce in flight or done
    std::shared_ptr<const std::vector<float>> result;
    std::string result_from;      // who averaged it (ourselves when leading)
    std::set<std::string> acked;  // leader: participants that acknowledged the result
    TimeMs next_send = 0;
    // A consensus model received, not adopted yet (our view may not agree yet that everyone
    // finished, or that its sender leads).
    std::shared_ptr<const std::vector<float>> offer;
    std::string offer_from;
  } consensus_;

  // Bandwidth meters (SPEC §7): measured while transfers are active.
  struct BusyMeter {
    int active = 0;
    TimeMs since = 0;
    TimeMs busy_ms = 0;
    uint64_t bytes = 0;
    sync::BandwidthEstimate estimate;
    void Begin(TimeMs now);
    void End(TimeMs now, uint64_t moved);
    void Sample();
  };
  BusyMeter up_, down_;

  // Link-capacity probes (NodeConfig::capacity_probe_interval_ms).
  struct ProbeRate {
    double mbps = 0;
    TimeMs at = 0;
  };
  static constexpr TimeMs kProbeTimeoutMs = 3000;  // no report by then: the probe is given up
  static constexpr int kProbeKeepIntervals = 4;    // probed rates are kept this many intervals
  static constexpr int kProbeFastProbes = 10;      // the first ones go 2 s apart
  static constexpr size_t kProbeRatesPerPeer = 8;
  void SendProbe(TimeMs now);
  void OnProbeResult(const ProbeResult& r, TimeMs now);
  void OnProbeReceived(const ProbeReceived& r, TimeMs now);
  void AgeProbes(TimeMs now);
  using ProbeRates = std::map<std::string, std::vector<ProbeRate>>;  // recent, per peer
  // The best recent probe when there is one, else the transfer-based capacity; bounded by `cap`
  // when > 0.
  static double WithProbes(const sync::BandwidthEstimate& e, const ProbeRates& probes, double cap);
  uint64_t probe_id_ = 0;  // the outstanding probe, 0 = none
  std::string probe_peer_;
  TimeMs probe_sent_at_ = 0;
  std::string probe_last_peer_;
  std::string probe_confirm_;     // probe this peer next (its figure awaits confirmation)
  TimeMs probe_defer_from_ = -1;  // since when a due probe waits for our round to end
  std::set<std::string> probed_;  // peers probed at least once
  ProbeRates probe_up_;           // peer name -> rates our trains to it arrived at
  ProbeRates probe_down_;         // sender address -> rates its trains arrived here at

  // Push-pulls and joins.
  std::map<ConnId, std::unique_ptr<PushPull>> pushpulls_;
  struct JoinWait {
    int outstanding = 0;
    int joined = 0;
  };
  std::map<uint64_t, JoinWait> joins_;
  int join_attempts_ = 0;     // made at start and by retry-join
  std::set<ConnId> serving_;  // accepted connections we answered and closed

  // The node's only randomness (2.5 KB of state: kept away from the hot lines above).
  sync::Rng rng_;
};

}  // namespace meshtrain::node
