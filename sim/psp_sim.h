// The PSP simulator behind `meshtrain simulate` (docs/contract.md "Simulator"): N real node::Node
// cores — the state machine the daemon runs: barrier driving, multicast rounds with ParamAck,
// SELMCAST plans, reassembly, and (with `membership`) SWIM — train in virtual time over a simulated
// network (sim/node_sim.h, sim/node_net.h). One run simulates one barrier configuration;
// RunPspSim() is called once per policy with the same seed, so node speeds and per-step compute
// times are identical across policies (common random numbers: differences come from the barriers,
// not from luck).
//
// Model (all defaults documented in `meshtrain simulate --help`):
//   Compute. Node i has a mean step time m_i = step_time · g_i · f_i, where g_i ~ Gamma with
//     mean 1 and coefficient of variation node_cv (persistent hardware heterogeneity, drawn once)
//     and f_i = straggler_factor for a seeded straggler_fraction of the nodes, else 1. Each
//     step's duration is drawn around m_i: Gamma (CV step_cv, the default), exponential (CV 1:
//     memoryless, very bursty) or constant. A pure exponential makes every node look like a
//     straggler half of the time; the PSP paper's simulations instead have nodes whose speeds
//     differ persistently, which the two-level gamma model reproduces.
//   Trainer. Each node's trainer asks its node for a permit (TrainerProgress, waiting), computes
//     one step, then hands the node a parameter snapshot and its new step (sync every step).
//   Network. Every datagram and frame takes latency + uniform[0, jitter] ms. Frames queue on the
//     sender's uplink and the receiver's downlink (bandwidth MB/s each); a parameter transfer
//     costs param_bytes. Datagrams (SWIM, progress queries and replies) are lost with probability
//     `loss`; a lost stream attempt costs one retransmission timeout, nothing is dropped.
//   Barriers, as the node core runs them. pbsp/pssp sample β peers and query them (UDP); bsp and
//     ssp are pbsp/pssp with β = every live peer (the node queries them all: the limit case of
//     docs/contract.md "Barriers"). Peers' steps also arrive with every parameter transfer and
//     ParamAck. asp never waits.
//   Parameter exchange (docs/contract.md "Parameter exchange"). After each step a node multicasts
//   its snapshot to receivers
//     chosen by the node core (select random: `fanout` uniform live peers; all; or selmcast: the
//     node's global sync::Select plan, shared for plan_epoch_steps). A receiver acknowledges the
//     whole snapshot; its trainer mixes everything that arrived (learn::MixAverage) when its
//     next step starts.
//   View. Without `membership` the simulator feeds every node its membership (PeerView inputs):
//     bsp/ssp/dssp nodes know everyone; pbsp/pssp/asp nodes know `view` random peers (0 =
//     everyone up to 2000 nodes, else 500), a peer-sampling partial view, so 10 000 nodes do not
//     need 10^8 view entries. With `membership` every node runs SWIM, whose view is the same
//     choice: everyone, or (pbsp/pssp/asp beyond 2000 nodes, or `view` given) a bounded view
//     of `view` members (membership::Config::max_members) that SWIM itself keeps.
//   Failures. `crashes` stop nodes at given times. With membership off an oracle tells every
//     node that knows a crashed node at once (PeerView alive = false); with membership on, SWIM
//     must detect it, and the result reports when the first and the last live node marked it
//     failed. Connections to a crashed node end after a timeout unless the node core aborts them.
//   Task. With task "synthetic" every node trains a learn::Task on shared synthetic data (small
//     d by default); the model error is the mean test MSE over live nodes (and the MSE of their
//     averaged model), sampled every eval_every_s. With a Fashion-MNIST preset (fmnist-mlp,
//     fmnist-softmax, fmnist-cnn: the agents' models, learn/task.h) every node trains that model
//     on its shard of the real training set (node i: shard i mod `shards`) and the error is the
//     test error rate, 1 - accuracy, on the first eval_samples test images. With task "none"
//     the snapshot is a token and the network charges param_bytes for it.
//   Hosts. With nodes_per_host K > 0, nodes iK .. iK+K-1 share one host of host_cores cores:
//     a step's compute (its drawn time divided by the node's --slowdowns factor) is processor-
//     shared with the other nodes of the host that are computing at the same moment (each runs
//     at min(1, cores / computing) of full speed), and the rest of the step, (factor - 1) x that
//     compute, is a sleep that takes no core — the daemon's `--slowdown` emulation (a step takes
//     factor x its CPU time). It emulates the bench of six agents sharing two cores. With
//     step_overhead_ms, each completed step also costs the agent's loop that much host CPU
//     (sending and receiving parameters, evaluations), shared alike, one step after the other:
//     the node learns of the step (its snapshot and progress) only when the loop is done with
//     it, so a trainer whose next permit depends on it waits for the loop, and a busy loop
//     takes cores from every trainer of the host. With eval_cost_ms and eval_steps, each
//     evaluation costs that much host CPU beside them (the agents evaluate on their own thread).
//
// Everything random is seeded from `seed`; the same options give the same result, bit for bit.
//
// Thread-safety: RunPspSim is reentrant (no globals); a run owns all its state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "learn/status.h"
#include "membership/swim.h"
#include "sync/barrier.h"
#include "sync/selection.h"

namespace meshtrain::sim {

enum class StepDist { kGamma, kExponential, kConstant };

// "gamma" | "exp" | "const"; nullopt for anything else.
std::optional<StepDist> ParseStepDist(const std::string& name);

// Whether a barrier policy needs every node's full view of the mesh (bsp, ssp, dssp, wbsp).
bool NeedsFullView(sync::Policy p);
const char* StepDistName(StepDist dist);

struct ComputeModel {
  double step_ms = 1000;  // mean compute time of one local step
  StepDist dist = StepDist::kGamma;
  double step_cv = 0.3;  // gamma: coefficient of variation of one step around the node's mean
  double node_cv = 0.2;  // spread of per-node mean speeds (0 = all nodes equally fast)
  double straggler_fraction = 0;  // this share of nodes (seeded choice) ...
  double straggler_factor = 1;    // ... is this many times slower
  // Node i is also slowdowns[i % size] times slower (e.g. 1,1,1,2,3,4 as the six-agent
  // bench's --slowdown per agent); empty = none.
  std::vector<double> slowdowns;
};

struct NetModel {
  double latency_ms = 10;       // one-way base latency
  double jitter_ms = 5;         // plus uniform [0, jitter]
  double bandwidth_mbps = 100;  // per-node uplink and downlink, MB/s
  double loss = 0;              // datagram loss rate; a stream attempt lost costs retransmit_ms
  double retransmit_ms = 200;
};

struct CrashSpec {
  size_t count = 1;  // nodes to crash (seeded choice among live nodes)
  double at_s = 0;   // virtual seconds after training starts
};

// From this many nodes on, PspSimOptions::threads = 0 uses a second thread.
inline constexpr size_t kAheadMinNodes = 2000;

// Where a run is, for PspSimOptions::progress: once when the setup starts, after every virtual
// half second of the membership warm-up (--membership), and at every virtual second of training
// (the step distribution's samples, the last at the end of the run).
struct SimProgress {
  enum class Phase { kSetup, kWarmUp, kTraining };
  Phase phase = Phase::kSetup;
  size_t nodes = 0;
  double t_s = 0;            // virtual seconds of this phase so far
  double duration_s = 0;     // kTraining: the virtual seconds the run simulates (--duration)
  uint64_t median_step = 0;  // kTraining: the live nodes' median step
};

struct PspSimOptions {
  size_t nodes = 100;
  double duration_s = 100;
  uint64_t seed = 1;
  sync::BarrierConfig barrier;  // policy, staleness, sample (β), r_max, probe_timeout
  ComputeModel compute;
  NetModel net;
  sync::SelectPolicy select = sync::SelectPolicy::kRandom;
  size_t fanout = 2;
  size_t param_bytes = 0;   // bytes per parameter transfer; 0 = 4·params + 64 (task) or 100 000
  size_t view = 0;          // partial view size for pbsp/pssp/asp; 0 = auto (see above)
  bool membership = false;  // run SWIM for failure detection
  membership::TimingProfile profile = membership::TimingProfile::kLan;  // membership timing
  std::vector<CrashSpec> crashes;
  // Training task: "none", "synthetic" or a Fashion-MNIST preset (fmnist-mlp, fmnist-softmax,
  // fmnist-cnn), trained on the data in dataset_dir.
  std::string task = "none";
  std::string dataset_dir = "/usr/share/datasets/fashion-mnist";
  size_t shards = 0;           // Fashion-MNIST: node i trains on shard i mod shards (0 = nodes)
  size_t eval_samples = 1000;  // Fashion-MNIST: test images evaluated (the first N; 0 = all)
  // Evaluate each node's moving average of its parameters (decay, as the agents'
  // --eval-average) instead of the parameters themselves; 0 = the parameters.
  double eval_average = 0;
  bool stop_at_target = false;  // end the run at the first sample with every node at target
  // > 0: as the agents' --eval-every, each node also evaluates its model at every eval_steps-th
  // step it completes, and time_to_target_all_s is when the last live node first had such an
  // evaluation at or below target_error (how bench/policies.py times real agents); 0 = from
  // the samples every eval_every_s.
  uint64_t eval_steps = 0;
  size_t nodes_per_host = 0;  // > 0: nodes share hosts of host_cores cores (see Hosts above)
  double host_cores = 1;
  // Hosts: CPU ms an agent's loop spends on each step of its trainer (sending and receiving
  // parameters, evaluations) before its node learns of the step (see Hosts above).
  double step_overhead_ms = 0;
  // Hosts, with eval_steps: CPU ms of each evaluation (the agent's evaluator thread), shared
  // with the host's other work; nobody waits for it.
  double eval_cost_ms = 0;
  int task_dim = 16;
  int task_train_samples = 2048;
  int task_test_samples = 512;
  int batch = 32;
  bool batch_auto = false;  // --batch auto (the daemon's rule: learn::AdaptBatchSize)
  float lr = 0.05f;
  float momentum = 0.9f;
  double eval_every_s = 1;
  // Report the first time the mean node error (test MSE, or 1 - accuracy for Fashion-MNIST) is
  // at or below it, and the first time every node's is.
  double target_error = 0.1;
  bool record_nodes = false;  // keep every node's step at every virtual second (for --csv)
  // Measure the node core alone (PspSimResult::alone_core_s): record every input of a few
  // nodes and, after the run, replay each one's inputs into a fresh node::Node of the same
  // configuration, with nothing else running between its calls (an agent's situation: one node
  // per host, its state in the cache). Time only; the run's results do not depend on it.
  bool replay_alone = false;
  // Threads of the run: 1, or 2 to step node cores ahead on a second thread (sim/core_ahead.h;
  // the results are identical); 0 = 2 from kAheadMinNodes nodes on where the machine has two
  // hardware threads, else 1.
  size_t threads = 0;
  // Called after every event of the training phase with each node's completed steps and
  // whether it is still up (tests check invariants such as the SSP bound with it).
  std::function<void(const std::vector<uint64_t>& steps, const std::vector<uint8_t>& live)>
      observer;
  // Called as the run goes (SimProgress); the results do not depend on it. `meshtrain simulate
  // --progress` shows it on stderr.
  std::function<void(const SimProgress&)> progress;
};

// One sample of the step distribution over live nodes (and the error, with a task).
struct TimePoint {
  double t_s = 0;
  uint64_t min = 0, p10 = 0, median = 0, p90 = 0, max = 0;
  std::optional<double> error;            // mean over live nodes of the test MSE
  std::optional<double> error_max;        // the worst live node's test MSE
  std::optional<double> error_avg_model;  // test MSE of the live nodes' averaged parameters
};

// What membership reported about one crashed node (membership on only).
struct CrashReport {
  std::string node;
  double crash_at_s = 0;
  std::optional<double> first_detect_s;  // crash → first live node marks it failed
  std::optional<double> all_detect_s;    // crash → every observer that kept it has
  size_t observers = 0;                  // live nodes at the end that knew it when it crashed
  size_t detected = 0;                   // of those, how many did
  // Of the observers, how many forgot it, still taken for alive, before they saw it failed
  // (bounded views: made room with it, or gave it away in a shuffle).
  size_t dropped = 0;
  size_t unaware = 0;  // live nodes that had not yet heard of it at the crash
};

struct PspSimResult {
  sync::Policy policy = sync::Policy::kPssp;
  size_t sample = 0;       // β as configured (meaningful for pbsp/pssp)
  uint64_t staleness = 0;  // s (ssp/pssp; s_L for dssp)
  size_t nodes = 0;
  size_t live_nodes = 0;  // nodes not crashed at the end (all statistics are over these)
  size_t view = 0;        // peers each node knew at the start
  double duration_s = 0;

  std::vector<uint64_t> final_steps;  // per node (crashed nodes keep their last step)
  uint64_t steps_min = 0, steps_median = 0, steps_max = 0;
  uint64_t steps_p10 = 0, steps_p90 = 0;
  uint64_t spread() const { return steps_max - steps_min; }
  // The spread of the middle 80%: insensitive to a few stragglers and the single fastest node.
  uint64_t spread_p10_p90() const { return steps_p90 - steps_p10; }
  double wait_share = 0;         // mean over live nodes of barrier wait / duration
  double compute_share = 0;      // mean over live nodes of computing time / duration
  uint64_t local_steps = 0;      // wbsp: local steps taken while barriers held (all nodes)
  double messages_per_node = 0;  // datagrams and frames sent, mean over all nodes (queries,
                                 // replies, parameter chunks, acks; SWIM traffic with membership)
  double bytes_per_node = 0;
  std::optional<double> error;             // final mean node test MSE (task only)
  std::optional<double> error_avg_model;   // final MSE of the averaged model (task only)
  std::optional<double> time_to_target_s;  // first sample with error ≤ target_error
  // First sample with every live node's error ≤ target_error (what bench/policies.py measures
  // on real agents: time until every node reaches the target accuracy).
  std::optional<double> time_to_target_all_s;
  std::vector<double> node_errors;  // final test MSE per node (task only; NaN for crashed nodes)

  std::vector<TimePoint> series;  // one per virtual second (and t = 0), and one at a stop
  std::vector<std::vector<uint64_t>> node_steps;  // [second][node], with record_nodes
  std::vector<CrashReport> crashes;

  // Counters, for tests and curiosity.
  uint64_t events = 0;
  uint64_t rounds = 0;  // barrier samples drawn (sync::BarrierStats::rounds)
  uint64_t queries = 0;
  uint64_t replies = 0;
  uint64_t timeouts = 0;
  uint64_t param_messages = 0;  // parameter chunk frames
  uint64_t datagrams_lost = 0;
  uint64_t membership_messages = 0;
  uint64_t false_failures = 0;  // membership marked a live node failed (with membership on)
  // The cost of the run. `work`: work units of the node cores, deterministic: inputs
  // and ticks handled during training, plus view entries visited by walks over a view at any
  // time (setup included; node::NodeStats, sync::BarrierStats::visited). The setup's PeerView
  // inputs, which build the views, are `view_entries` (the views' total size, memory).
  uint64_t work = 0;
  uint64_t view_entries = 0;
  uint64_t peer_visits = 0;  // of `work`: view entries visited by walks
  // Not in `work`: sampled peers examined by the barriers' walks over their samples
  // (sync::BarrierStats::sample_visits), at any time.
  uint64_t sample_visits = 0;
  double node_core_s = 0;  // measured time in node-core Step/Tick calls during training
  size_t threads = 1;      // threads the run used (PspSimOptions::threads)
  // threads = 2: node-core calls posted to the second thread (the same in every run of the same
  // options), and those of them it stepped (the rest the main thread did; this varies).
  uint64_t ahead_posted = 0;
  uint64_t ahead_stepped = 0;
  // With replay_alone: the traced nodes' Step/Tick time during training when replayed alone
  // (the fastest of a few replays each, summed) and the steps they completed.
  double alone_core_s = 0;
  uint64_t alone_steps = 0;
  size_t alone_nodes = 0;
  double mem_bytes_per_node = 0;  // measured: resident memory growth of the run / nodes
};

// Checks the options (nodes ≥ 1, duration > 0, known task, sane rates).
learn::Status ValidatePspSimOptions(const PspSimOptions& options);

// Runs one simulation. Errors: invalid options, task construction failure, or membership not
// converging during warm-up.
learn::Result<PspSimResult> RunPspSim(const PspSimOptions& options);

// Label for a run in CSV files and plot legends (no commas): "pssp:b4:s4", "pbsp:b10",
// "ssp:s4", "dssp:s4", "bsp", "asp".
std::string PolicyLabel(sync::Policy policy, size_t sample, uint64_t staleness);

}  // namespace meshtrain::sim
