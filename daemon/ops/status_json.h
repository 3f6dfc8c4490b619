// The JSON documents of `meshtrain status` and `meshtrain members` (docs/contract.md "Output
// formats"), built from plain inputs so that tests can check them without an agent. Thread-safety:
// pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/ops/loop_monitor.h"
#include "daemon/ops/metrics.h"
#include "daemon/trainer/trainer.h"
#include "membership/swim.h"
#include "node/node.h"
#include "wire/messages.h"

namespace meshtrain::daemon {

// --trainer external: whether a trainer process is attached.
struct ExternalStatus {
  bool attached = false;
  int64_t pid = 0;
  std::string socket;
};

struct StatusInputs {
  StatusInputs(const AgentConfig& c, const node::Node& n) : config(c), node(n) {}
  const AgentConfig& config;
  const node::Node& node;
  std::optional<TrainerState> trainer;  // absent with --task none
  int64_t now = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  wire::RejectCounters rejects;
  uint64_t rpc_rejects = 0;
  std::map<std::string, uint64_t> trainer_rejects;  // Trainer::Rejects()
  std::optional<ExternalStatus> external;
  uint64_t framing_errors = 0;
  uint64_t refused_connections = 0;
  uint64_t probe_trains_answered = 0;   // capacity probe trains from peers measured here
  uint64_t probe_trains_contended = 0;  // of those, unmeasurable (other traffic came in)
  uint64_t probe_trains_queued = 0;     // of those, unmeasurable (queued behind a backlog)
  uint64_t probe_rejects = 0;           // probe datagrams dropped (daemon/link_prober.h)
  double uptime_s = 0;
  std::optional<LoopStats> loop;    // event-loop responsiveness (daemon/ops/loop_monitor.h)
  uint64_t streams_active = 0;      // parameter snapshots being streamed (daemon/param_streamer.h)
  uint64_t chunks_encoded = 0;      // chunk encodings (one per chunk per round when shared)
  uint64_t chunks_sent = 0;         // chunk frames queued on connections
  uint64_t mix_chunks_dropped = 0;  // incoming chunks the mixer's queue had no room for
  double models_mixed = 0;          // streamed peer models mixed, in whole models
  uint64_t read_pauses = 0;         // parameter connections paused: the running sum was behind
  uint64_t relay_nested = 0;        // relay frames delivered inside a relay frame
  learn::RobustReport robust;       // robust mixing's judgments (Trainer::Robust)
};

// The trainer's mixing figures: mix_chunks_dropped, models_mixed, robust.
void FillMixStatus(const Trainer& trainer, StatusInputs* in);
// A sender's judgments as status and members show them.
nlohmann::json RobustPeerJson(const learn::PeerJudgment& p);

nlohmann::json StatusJson(const StatusInputs& in);
// `self`: this node's name (its row's path is "self"). With a trainer whose robust mixing is
// on, each member it judged has "robust" (RobustPeerJson; null for the others) and "flagged".
nlohmann::json MembersJson(const std::vector<membership::Member>& members,
                           const std::string& self = "", const Trainer* trainer = nullptr);
// How this node reaches member `m`: "self", "punched" (the member is behind NAT:
// the path exists because its own traffic opened it; for a relayed member, while we send to
// it at the source of its own recent datagrams, Member::direct), "relayed" or "direct".
const char* PathName(const membership::Member& m, const std::string& self);
// Writes what a node event means to the operator: member and sync lines in the metrics file,
// log lines. False for outputs that are not such events.
bool RecordEvent(const node::Output& o, MetricsLog* metrics);
// The RPC reply to a command the node finished (join, force-leave).
nlohmann::json CommandReply(const node::CommandDone& done);

// (name, addr) of the alive members other than `self`.
std::vector<std::pair<std::string, std::string>> LivePeers(
    const std::vector<membership::Member>& members, const std::string& self);
// "alive", "suspect", "failed", "left", "reaped" for the metrics file's member events.
const char* EventStatus(membership::Event::Kind kind);

}  // namespace meshtrain::daemon
