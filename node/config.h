// The node core's configuration: every knob of one meshtrain agent's decisions (node/node.h).
// The daemon fills it from the command line (docs/contract.md "Command line"), the simulator
// from its scenario.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "membership/swim.h"
#include "sync/barrier.h"
#include "sync/name_table.h"
#include "sync/selection.h"
#include "wire/compress.h"
#include "wire/messages.h"

namespace meshtrain::node {

using TimeMs = int64_t;  // the same alias as node/io.h

struct NodeConfig {
  std::string name;
  std::string cluster = "default";  // seeds the shared SELMCAST plan
  std::string addr;                 // advertised membership address ("ip:port")
  std::string data_addr;            // parameter address; empty = addr
  std::vector<std::pair<std::string, std::string>> tags;  // operator tags, sorted
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
  // false: an external trainer has not attached yet: the node starts as not training
  // (peers do not wait for it) until TrainerProgress says otherwise.
  bool trainer_attached = true;
  wire::CompressSpec compress;  // --compress (wire/compress.h)
  uint32_t full_every = 32;     // compressed: a full snapshot after this many changes

  std::vector<std::string> join;  // peers to contact at start
  bool retry_join = false;
  TimeMs retry_join_interval_ms = 30000;
  int retry_join_max = 0;  // join attempts (the first included) before giving up; 0 = unlimited
  TimeMs leave_max_ms =
      3000;  // docs/contract.md "Command line": wait at most this long for "left" to spread
  TimeMs bandwidth_interval_ms = 2000;  // how often measurements become published estimates
  // Link-capacity probes (docs/contract.md "Receiver selection", wire/link_probe.h): a train to one
  // live peer this often (the first ten 2 s apart); 0 = off. Probed rates are kept
  // kProbeKeepIntervals intervals.
  TimeMs capacity_probe_interval_ms = 0;
  // Probe peers at loopback addresses too (tests of the node core; a loopback path has no link
  // to measure, and trains would only crowd the other agents' sockets on one machine).
  bool probe_loopback = false;
  TimeMs min_peers_poll_ms = 100;
  // OSP: after a pass, query the next step's blocking peers while the step computes.
  bool overlap_barrier = true;
  uint64_t plan_epoch_steps = 16;  // a SELMCAST plan is shared for this many steps (see node.cc)
  // Join with state: a node about to take its first step (fresh or resumed) that
  // finds every live training peer further on fetches the
  // most advanced one's model before its first step and adopts the slowest live peer's step.
  bool join_state = true;
  TimeMs join_state_timeout_ms = 10000;  // then it starts from its own initialisation
  // A fetch under way waits this long for the peer's answer (its next snapshot: one sync
  // interval of an external trainer away) before the node goes on with its own model.
  TimeMs join_state_answer_ms = 60000;
  // Between rounds the node keeps its newest snapshot when it has at most this many floats, so a
  // joiner's state request is answered at once rather than at the next sync (up to H steps
  // away). Larger snapshots are let go: the trainer reuses their buffer. 0: never kept.
  size_t keep_snapshot_floats = 0;
  uint64_t join_state_min_lead = 20;  // fetch only from a mesh this many steps further on (the
                                      // first nodes of a mesh start within a few steps)
  // A node that finished training (--target-accuracy, --steps) offers its final model to the
  // peers still training this often, so the last nodes converge with it instead of alone.
  TimeMs final_serve_interval_ms = 200;
  // Whether peers still training need our final model: they mix it (the built-in trainer) or
  // take it over (--target-accuracy). An external trainer's peers mix only the peers their syncs
  // wait for, and the consensus averages the final models at the end: the agent turns it off.
  bool offer_final = true;
  // One model at the end (node_consensus.cc): once no live member trains any more, the
  // finished nodes agree on the average of their final models. Off: each keeps its own.
  bool consensus = true;
  TimeMs consensus_retry_ms = 2000;  // a transfer of the consensus protocol is repeated after
  // A member that failed while training may come back (restarted with its --data-dir): the
  // consensus waits this long after its failure before it goes on without it (--trainer-grace).
  TimeMs consensus_hold_ms = 60000;
};

}  // namespace meshtrain::node
