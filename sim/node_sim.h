// One run of `meshtrain simulate` (sim/psp_sim.h's RunPspSim): N real node::Node cores — the
// code the daemon runs — with a simulated trainer each, over the simulated network of
// sim/node_net.h, in virtual time.
//
// Per node, the driver does what daemon/agent does with libuv:
//   - inputs come from the event heap (datagrams, frames, closes, plan results) and from the
//     node's trainer; after every Step/Tick the outputs are executed: network outputs go to
//     NodeNet, Permit and Mix to the trainer, a PlanRequest is solved with sync::Select (seeded
//     with the request's seed; plans are shared between nodes that asked with the same seed) and
//     answered by a PlanResult input through the heap; the node's next deadline is one kTick
//     event.
//   - The trainer sends TrainerProgress{step, waiting = true} and waits for a Permit; at the
//     start of a step it mixes the Mix outputs received since its previous step
//     (progress-aware, learn::MixWeighted with learn::MixWeight as the daemon's trainer;
//     synthetic task only), computes for the drawn step time (the compute
//     model of PspSimOptions::compute), then sends a SnapshotIn and TrainerProgress (sync every
//     step).
//   - Membership: with `membership` each node runs its own SWIM (joining through n0, with a
//     warm-up until every view is complete); otherwise the simulator is the membership: it feeds
//     each node PeerView inputs for its view and, when a node crashes, PeerView{alive = false}
//     to every node that knows it (an oracle failure detector).
//
// Thread-safety: none; one run owns a NodeSim.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "learn/status.h"
#include "learn/task.h"
#include "node/node.h"
#include "sim/node_net.h"
#include "sim/psp_sim.h"
#include "sync/selection.h"

namespace meshtrain::sim {

class NodeSim {
 public:
  explicit NodeSim(const PspSimOptions& options);
  ~NodeSim();
  NodeSim(const NodeSim&) = delete;
  NodeSim& operator=(const NodeSim&) = delete;

  learn::Status Setup();
  PspSimResult Run();

 private:
  struct Trainer {
    learn::Rng compute_rng{0};
    double mean_ms = 0;
    uint64_t step = 0;
    uint64_t permit = 0;
    bool computing = false;
    bool local = false;        // the step computing is a wbsp local step
    int local_run = 0;         // local steps in the current wait
    uint64_t local_steps = 0;  // in all
    double busy_ms = 0;        // time spent computing (training phase)
    int batch = 0;             // current batch (batch auto)
    double mesh_step_ms = 0;   // from the last Permit
    double last_ms = 0;        // duration of the last global step
    TimeMs started_at = 0;
    std::vector<std::vector<float>> inbox;  // Mix outputs since the last step
    std::vector<uint64_t> inbox_steps;      // their senders' steps (progress-aware mixing)
    std::unique_ptr<learn::Task> task;
  };
  struct CrashTrack {
    uint32_t node;
    TimeMs at;
    std::vector<TimeMs> detected_at;  // per observer; -1 = not yet
    // Per observer: it knew the victim as a live member when it crashed (SWIM ignores news about
    // members it never heard of, so such a node has nothing to detect).
    std::vector<bool> knew;
  };

  learn::Status SetupTasks();
  void SetupNodes();
  learn::Status WarmUpMembership();
  // Executes node i's outputs and re-arms its deadline.
  void Drain(uint32_t i);
  void Dispatch(uint32_t i, node::Output& out);
  void Arm(uint32_t i);
  void Handle(const SimEvent& ev);
  void RunUntil(TimeMs until);
  void TryCompute(uint32_t i);
  // Schedules the end of a step (global, or a wbsp local one) after its drawn compute time.
  void StartCompute(uint32_t i);
  double OracleMeshStepMs(uint32_t self) const;
  void FinishStep(uint32_t i);
  void SolvePlan(uint32_t i, node::PlanRequest& req);
  void OnMemberEvent(uint32_t observer, const node::MemberEvent& e);
  void Crash(uint32_t spec);
  void Sample();
  PspSimResult Collect();

  PspSimOptions o_;
  size_t n_ = 0;
  size_t param_bytes_ = 0;
  size_t view_ = 0;
  bool full_view_ = true;
  std::unique_ptr<NodeNet> net_;
  std::vector<std::unique_ptr<node::Node>> nodes_;
  std::vector<Trainer> trainers_;
  std::vector<uint64_t> steps_;               // trainers' completed steps (for the observer)
  std::vector<uint8_t> live_;                 // not crashed
  std::vector<TimeMs> tick_at_;               // the kTick event each node waits for
  std::vector<node::Output> outputs_;         // Drain's buffer
  std::vector<std::vector<uint32_t>> views_;  // external membership: each node's peers, sorted
  std::shared_ptr<const std::vector<float>> no_task_params_;
  std::shared_ptr<const learn::SyntheticData> data_;
  std::unique_ptr<learn::Task> eval_task_;      // evaluates the averaged model
  std::map<uint64_t, sync::Assignment> plans_;  // SELMCAST plans by seed
  learn::Rng crash_rng_;
  TimeMs now_ = 0;
  TimeMs t0_ = 0;  // training starts (after the membership warm-up)
  TimeMs end_ = 0;
  bool started_ = false;  // training began (events before are the warm-up)
  uint64_t events_ = 0;
  uint64_t false_failures_ = 0;
  std::vector<NodeTraffic> traffic_at_t0_;
  uint64_t membership_at_t0_ = 0;
  std::vector<CrashTrack> crash_tracks_;
  PspSimResult result_;
};

}  // namespace meshtrain::sim
