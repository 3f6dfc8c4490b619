// The node core's inputs and outputs (node/node.h): what a driver feeds Node::Step and what it
// executes from Node::TakeOutput. Plain values; nothing here refers back to a Node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "membership/swim.h"
#include "sync/selection.h"
#include "wire/compress.h"
#include "wire/messages.h"

namespace meshtrain::node {

using TimeMs = int64_t;  // the same alias as node/config.h
using ConnId = uint64_t;
inline constexpr ConnId kFirstOutgoingConn = ConnId{1} << 62;

// ---- Inputs ----------------------------------------------------------------------------------

struct DatagramIn {
  std::string from;  // source "ip:port"; empty for a datagram a relay delivered (`via`)
  wire::Datagram msg;
  std::string via{};  // the relay that delivered it; empty: it came straight
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
  // Not training, and no trainer came back within --trainer-grace (an external trainer that
  // died): published, so that the end-of-training consensus goes on without this node.
  bool absent = false;
};
// A parameter snapshot to multicast; a newer one replaces one not yet sent.
struct SnapshotIn {
  uint64_t step = 0;
  std::shared_ptr<const std::vector<float>> params;
  bool final = false;  // the model as training stopped: offered to every training peer
  // Streaming fragments: only floats [span.begin, span.end) go out (params still
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
  // Non-empty when `to` is a member behind a relay: send `msg` to `via` (the relay's
  // address) inside a relay frame for member `dest` (Endpoint::SendRelayed).
  std::string via{};
  std::string dest{};
};
// A relay frame for this node came from its relay: the driver decodes `inner` as an
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
// Stream a full snapshot on `conn` as the chunk frames of one transfer: the driver
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
  wire::CompressSpec spec;  // Streamable(): none, fp16, int8 or sparse
  uint32_t chunk_floats = wire::kParamChunkFloats;
  bool consensus = false;   // the consensus model (plain floats, ParamChunk::consensus)
  wire::StreamSpan span{};  // a fragment of the model only (SnapshotIn::span)
  uint32_t covers = 0;      // the consensus model: participants it averages (ParamChunk::covers)
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
  // offered once to each peer, again only when that transfer failed).
  bool final_model = false;
  uint64_t sender_step = 0;
};
// One chunk of a peer's snapshot, floats [offset, offset + count()) of a model of `total`, to
// fold into the trainer's running sum as it arrives (no whole model per sender is ever
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
  bool last = false;  // the transfer's last chunk: the sender's model (or fragment) is whole
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
// its event loop.
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

// Consensus at the end of training: average `models` with equal weights, in this order
// (learn::AverageModels), off the event loop, and answer with ConsensusResult{id}.
struct ConsensusReduce {
  uint64_t id = 0;
  std::vector<std::shared_ptr<const std::vector<float>>> models;
  std::vector<std::string> names;  // the participant each model is of
};
// The mesh's consensus model: the trainer takes it over bit for bit as its final model. `crc`:
// learn::ParamsCrc32 of it is the driver's to compute; `participants` averaged by `leader`.
struct AdoptConsensus {
  std::string leader;
  std::shared_ptr<const std::vector<float>> params;
  size_t participants = 0;
  // The result is final as far as this node can tell (Consensus::TakeSettled): a trainer's
  // finish() may return it. A provisional one (false) is followed by the same `params` settled,
  // or by the leader's next result.
  bool settled = true;
};

using Output = std::variant<SendDatagram, Connect, SendFrame, Close, Permit, Mix, PlanRequest,
                            MemberEvent, RoundDone, ParamsReceived, CommandDone, LogLine, LeaveDone,
                            MembershipChanged, AdoptState, RetryJoin, JoinGaveUp, ProbeLink,
                            SendParams, MixChunk, ConsensusReduce, AdoptConsensus, RelayedIn>;

}  // namespace meshtrain::node
