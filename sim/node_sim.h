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
//     (progress-aware, learn::MixWeighted with learn::MixWeight as the daemon's trainer; with a
//     task), computes for the drawn step time (the compute model of PspSimOptions::compute; with
//     hosts, the compute part processor-shared with the host's other nodes, then the slowdown's
//     sleep), then sends a SnapshotIn and TrainerProgress (sync every step).
//   - Membership: with `membership` each node runs its own SWIM (joining through n0, with a
//     warm-up until every view is complete); otherwise the simulator is the membership: it feeds
//     each node PeerView inputs for its view and, when a node crashes, PeerView{alive = false}
//     to every node that knows it (an oracle failure detector).
//
// Code: node_sim.cc (the event loop, the trainers and hosts), node_sim_setup.cc (the setup) and
// instruments.cc (samples, evaluation, the results and their costs).
//
// Thread-safety: none; one run owns a NodeSim.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "learn/mixing.h"
#include "learn/status.h"
#include "learn/task.h"
#include "node/endpoint.h"
#include "node/node.h"
#include "sim/core_ahead.h"
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
  // A completed step the agent's loop has not yet handed to its node (hosts, step_overhead).
  struct LoopItem {
    uint64_t step = 0;
    std::shared_ptr<const std::vector<float>> params;
    double step_ms = 0;
  };
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
    learn::ParamAverage average{0};   // what is evaluated, with eval_average
    double cpu_left = 0;              // hosts: ms of compute the current step still needs
    double background_left = 0;       // hosts: ms of loop work left for loop_queue.front()
    std::deque<LoopItem> loop_queue;  // hosts: steps waiting for the agent's loop, oldest first
    double eval_left = 0;             // hosts: ms of evaluation work left
    double sleep_ms = 0;              // hosts: then this long asleep (the slowdown's part)
    bool reached = false;             // eval_steps: an evaluation at a step was at target
  };
  // Hosts: the nodes that share one host's cores. Jobs are what uses its cores now: Job(i, kind)
  // for node i's trainer computing a step, its loop working on the oldest step of its
  // loop_queue (step_overhead_ms a step), or its evaluator (eval_cost_ms an evaluation).
  enum JobKind : uint32_t { kTrainJob, kLoopJob, kEvalJob, kJobKinds };
  static uint32_t Job(uint32_t node, JobKind kind) { return node * kJobKinds + kind; }
  struct Host {
    std::vector<uint32_t> jobs;
    TimeMs updated = 0;  // the jobs' work left is as of this time
    uint32_t gen = 0;    // the kCpuDone event with this generation is the live one
  };
  struct CrashTrack {
    uint32_t node;
    TimeMs at;
    std::vector<TimeMs> detected_at;  // per observer; -1 = not yet
    // Per observer: it knew the victim as a live member when it crashed (SWIM ignores news about
    // members it never heard of, so such a node has nothing to detect).
    std::vector<bool> knew;
    // Per observer: it stopped holding the victim (made room with it, or gave it away in a
    // shuffle of bounded views) before it saw it failed.
    std::vector<bool> dropped;
  };

  // Every call into node i's core goes through these (the replay records the traced nodes').
  void StepNode(uint32_t i, node::Input& in);
  void StepNode(uint32_t i, node::Input&& in) { StepNode(i, in); }
  void TickNode(uint32_t i);
  // replay_alone: the traced nodes' inputs replayed one node at a time (after the run).
  void ReplayAlone(PspSimResult* r);

  learn::Status SetupTasks();
  void SetupNodes();
  learn::Status WarmUpMembership();
  // Executes node i's outputs and re-arms its deadline.
  void Drain(uint32_t i);
  // The same for outputs a step on ahead_'s thread left, with the node's deadline after it.
  void DrainTaken(uint32_t i, std::vector<node::Output>* out, TimeMs deadline);
  void Dispatch(uint32_t i, node::Output& out);
  void Arm(uint32_t i);
  void ArmAt(uint32_t i, TimeMs deadline);
  // Cache hints for the next events (no effect on behaviour).
  void Prefetch() const;
  void Handle(const SimEvent& ev);
  // threads = 2: posts the rest of the current millisecond's first input (admitted) or live
  // deadline of each node to ahead_ (none while `ev`, just popped, could touch other nodes than its
  // own).
  void PostAhead(const SimEvent& ev);
  // Calls PspSimOptions::progress, if set.
  void Report(SimProgress::Phase phase, double t_s, uint64_t median_step) const;
  void RunUntil(TimeMs until);
  void TryCompute(uint32_t i);
  // Schedules the end of a step (global, or a wbsp local one) after its drawn compute time.
  void StartCompute(uint32_t i);
  double OracleMeshStepMs(uint32_t self) const;
  void FinishStep(uint32_t i);
  // Hosts: charge the compute done since the last update, (re)schedule the next completion,
  // and end the compute of the nodes that are done.
  double HostRate(const Host& h) const;
  void AdvanceHost(Host& h);
  double& WorkLeft(uint32_t job);
  void AddHostJob(uint32_t job, double work_ms);
  void ScheduleHost(uint32_t host);
  void OnCpuDone(uint32_t host, uint32_t gen);
  void LeaveHost(uint32_t i);
  // The trainer's step reaches node i (SnapshotIn and TrainerProgress).
  void HandOver(uint32_t i, uint64_t step, std::shared_ptr<const std::vector<float>> params,
                double step_ms);
  // The error of node i's model as evaluated (MSE, or 1 - accuracy for a classifier).
  double NodeError(uint32_t i) const;
  double ErrorOf(const learn::Task& task, const float* params) const;
  // eval_steps: node i's evaluation at the step it just completed.
  void EvaluateAtStep(uint32_t i);
  void ReachedTargetAll();
  void SolvePlan(uint32_t i, node::PlanRequest& req);
  void OnMemberEvent(uint32_t observer, const node::MemberEvent& e);
  void Crash(uint32_t spec);
  void Sample();
  PspSimResult Collect();
  // Collect's report on one crash: who noticed it, and when.
  CrashReport ReportCrash(const CrashTrack& c) const;

  PspSimOptions o_;
  size_t n_ = 0;
  size_t param_bytes_ = 0;
  size_t view_ = 0;
  bool full_view_ = true;
  std::unique_ptr<NodeNet> net_;
  std::vector<std::unique_ptr<node::Node>> nodes_;
  std::vector<Trainer> trainers_;
  std::map<uint32_t, node::WholeModels> wholes_;  // nodes receiving parameter chunks
  std::vector<uint64_t> steps_;                   // trainers' completed steps (for the observer)
  std::vector<uint8_t> live_;                     // not crashed
  std::vector<TimeMs> tick_at_;                   // the kTick event each node waits for
  std::vector<node::Output> outputs_;             // Drain's buffer
  std::shared_ptr<const std::vector<float>> no_task_params_;
  std::shared_ptr<const learn::SyntheticData> data_;
  bool classifier_ = false;  // a Fashion-MNIST task: error = 1 - accuracy
  std::vector<Host> hosts_;
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

  // What the run costs. Node-core time (Step/Tick calls during training, measured),
  // and resident memory (RSS growth from construction to the end of the run, over n_).
  // The calls are timed with the CPU's time-stamp counter (a clock read costs a tenth of
  // clock_gettime's, and the run makes tens of millions), converted to seconds with the ticks
  // per second measured over the whole run (ticks_at_start_, ns_at_start_).
  struct CoreTimer {
    explicit CoreTimer(NodeSim* sim);
    ~CoreTimer();
    NodeSim* sim;
    uint64_t start;
  };
  uint64_t core_ticks_ = 0;
  std::unique_ptr<CoreAhead> ahead_;  // threads = 2, during the training loop
  std::vector<CoreAhead::Item> ahead_items_;
  std::vector<uint32_t> ahead_mark_;  // node -> the PostAhead scan that last saw it
  uint32_t ahead_scan_ = 0;
  size_t threads_ = 1;
  uint64_t ahead_posted_ = 0, ahead_stepped_ = 0;
  uint64_t ticks_at_start_ = 0;
  int64_t ns_at_start_ = 0;
  // replay_alone: what a traced node's core was given, in order (input or tick; during training).
  struct Call {
    TimeMs now;
    bool tick;
    bool training;
    node::Input in;
  };
  struct Trace {
    uint32_t node;
    node::NodeConfig config;
    TimeMs created;
    std::vector<Call> calls;
  };
  std::vector<Trace> traces_;
  std::vector<int32_t> trace_of_;  // node -> index in traces_, or -1
  uint64_t rss_at_start_ = 0;
  uint64_t inputs_at_t0_ = 0;
};

}  // namespace meshtrain::sim
