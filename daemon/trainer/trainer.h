// The trainer interface the agent drives, and the built-in trainer: a thread beside the libuv
// loop that takes SGD steps on the local task.
//
// The loop thread stays in charge of everything protocol-related; the trainer only computes.
// Before each step the trainer asks for permission (the loop runs the barrier policy and calls
// Permit); at each step boundary it mixes the parameters that arrived since the last step
// (docs/contract.md "Parameter exchange"); every `sync_every` steps it leaves a parameter snapshot
// for the loop to multicast, so communication overlaps the next step's computation. Nothing the
// trainer does waits on the network: a newer snapshot replaces one the loop has not taken yet.
//
// Thread-safety: the public methods are safe to call from any thread; `notify` is called from
// the trainer thread whenever there is something new for the loop (it must be thread-safe,
// e.g. uv_async_send).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config.h"
#include "daemon/ops/histogram.h"
#include "daemon/trainer/chunk_mixer.h"
#include "learn/checkpoint.h"
#include "learn/mixing.h"
#include "learn/model_file.h"
#include "learn/status.h"
#include "learn/task.h"
#include "node/node.h"

namespace meshtrain::daemon {

class MetricsLog;

// Names the calling thread (at most 15 characters show): `top -H`, `ps -L` and
// /proc/<pid>/task/*/comm tell the agent's threads apart (bench/benchlib.py finds the trainer
// by its name, "mt-train").
void NameThisThread(const char* name);
// Bulk work (libuv's pool threads: encoding, snapshot copies, mixes) runs at nice +kBulkNice
// relative to the process, so that the event loop (membership, RPC), the chunk mixer, the
// trainer and a user's `meshtrain status` get a core first when a large model's copies keep both
// busy. Linux applies nice per
// thread (setpriority on the thread id). They are also SCHED_BATCH (ThroughputThread). Once per
// thread; errors are ignored (never fatal).
constexpr int kBulkNice = 5;
void BulkThread();
// SCHED_BATCH for the calling thread, at its priority: the scheduler treats it as a CPU-bound
// thread whose wake-ups never preempt a running task, so a short interactive task (the event
// loop's callbacks, a `meshtrain status` process) that wakes gets the core first. For threads
// whose work is throughput, not latency (the chunk mixer, the bulk pool). Errors are ignored.
void ThroughputThread();

// A worker thread with a one-slot mailbox, for work kept off the trainer's critical path
// (evaluations, checkpoint writes): Post() hands a job over and replaces one not started yet
// (jobs never queue up behind a slow one); Stop() lets the worker finish the job in hand and
// the one pending, then joins. Post and Stop from one thread (the owner); the job runs on the
// worker thread.
template <typename Job>
class LatestJobWorker {
 public:
  LatestJobWorker(const char* name, std::function<void(Job&)> run)
      : name_(name), run_(std::move(run)) {}
  ~LatestJobWorker() { Stop(); }
  LatestJobWorker(const LatestJobWorker&) = delete;
  LatestJobWorker& operator=(const LatestJobWorker&) = delete;

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  bool running() const { return thread_.joinable(); }
  void Post(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = std::move(job);
    }
    cv_.notify_all();
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    NameThisThread(name_);
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || job_.has_value(); });
        if (!job_) return;  // stopping, nothing left
        job = std::move(*job_);
        job_.reset();
      }
      run_(job);
    }
  }

  const char* const name_;  // the worker thread's name
  const std::function<void(Job&)> run_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::thread thread_;
};

struct TrainerOptions {
  uint64_t max_steps = 0;      // 0 = unbounded
  double target_accuracy = 0;  // 0 = none
  int eval_every = 100;
  int sync_every = 1;
  // Straggler emulation: each step takes this many times its compute time — the CPU time the
  // step's thread used when the step runs on one thread (so an agent sharing cores with others
  // emulates an F-times slower host, not F times its contention), else its wall time.
  double slowdown = 1;
  int threads = 1;             // threads one step's gradient is split over (--threads)
  std::string name;            // for log lines and checkpoint metadata
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 500;  // steps between periodic checkpoints
  // wbsp: while the barrier holds, keep taking local steps on the node's own data
  // (their update accumulates in the parameters and goes out with the next snapshot), at most
  // this many per wait; 0 = idle while waiting (every other policy).
  int busy_local_steps = 0;
  // --batch auto (dynamic batch size): see Trainer::AdaptBatch.
  bool batch_auto = false;
  // --eval-average D: evaluations, the target-accuracy decision, the final model offered to
  // peers and model.npz use the moving average of the parameters (learn::ParamAverage); the
  // parameters exchanged each step stay the trained ones. 0 = the trained parameters.
  double eval_average = 0;
  // --outer (learn::OuterStep): applied after the mix that follows each snapshot published.
  learn::OuterStep::Kind outer = learn::OuterStep::Kind::kAvg;
  double outer_lr = 1.0;
  double outer_momentum = 0.0;
  int fragments = 1;    // --fragments: one of F fragments goes out every sync_every / F steps
  bool robust = false;  // --robust: judge peers' models before mixing (ChunkMixer::SetRobust)
  static constexpr int kMaxBusyLocalSteps = 16;
};

// A copy of the parameters at a step boundary, to send.
struct Snapshot {
  uint64_t step = 0;
  std::shared_ptr<const std::vector<float>> params;
  bool final = false;       // the model as training stopped: offered to every training peer
  wire::StreamSpan span{};  // streaming fragments: the fragment to send (empty: all)
};

// Barrier waits per step, for the Prometheus histogram meshtrain_barrier_wait_seconds.
struct WaitBounds {
  static constexpr std::array<double, 12> kValues = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,   1,    2.5,   5,    10};
};
using WaitHistogram = BucketHistogram<WaitBounds>;

// What an external trainer's syncs mixed (docs/design.md "Mixing"): a sync waits for the whole
// models of the live training peers that reached its step, then mixes them.
struct SyncTally {
  uint64_t count = 0;     // MIX requests answered
  uint64_t short_of = 0;  // syncs that mixed fewer whole models than peers they waited for
  uint64_t timeouts = 0;  // syncs that stopped waiting at the deadline
  uint64_t partial = 0;   // syncs that mixed some peer's model only in part
  // PUBLISHes that published nothing new: the one snapshot buffer of a large layout was still
  // being sent (the round before had not ended)
  uint64_t unsent = 0;
  // time PUBLISHes of the exact exchange waited for that buffer (the trainer waits meanwhile)
  double publish_wait_s = 0;
  size_t last_waited = 0;  // the last sync: peers it waited for
  size_t last_mixed = 0;   // whole peer models it mixed
  double last_models = 0;  // peer models it mixed, in model-sized units (parameters covered)
  double wait_s = 0;       // time syncs spent waiting for peers' models
};

struct TrainerState {
  uint64_t step = 0;
  bool training = true;
  bool waiting = false;            // blocked on the barrier for step `step + 1`
  bool absent = false;             // an external trainer left unfinished, none back in the grace
  std::optional<double> loss;      // last evaluated test loss
  std::optional<double> accuracy;  // last evaluated test accuracy
  uint64_t eval_step = 0;          // the step of that evaluation
  double train_loss = 0;           // EWMA of minibatch losses
  uint64_t outer_steps = 0;        // --outer steps taken (learn::OuterStep)
  uint32_t consensus_crc32 = 0;    // CRC32 of the consensus model adopted (0: none yet)
  size_t consensus_models = 0;     // final models it averages
  uint64_t mixes = 0;              // parameter vectors mixed in
  double compute_s = 0;            // time spent computing steps
  double step_s = 0;               // EWMA of the time from one step's end to the next's (compute,
                                   // --slowdown and barrier waits: the pace snapshots come at)
  int sync_every = 1;              // steps between snapshots now (changes with --sync-every auto)
  uint32_t params_crc32 = 0;       // CRC32 of the parameters at the last evaluation
  WaitHistogram wait;              // barrier wait before each step (0 when the permit was there)
  uint64_t local_steps = 0;        // wbsp: extra local steps taken while the barrier held
  double idle_s = 0;               // time the trainer sat idle waiting for the barrier
  double step_compute_s = 0;       // EWMA of one global step's compute time (s)
  double train_s = 0;              // wall time since training started (to the last update)
  uint64_t start_step = 0;         // the step training started (or resumed) from
  int batch = 0;                   // current mini-batch size (changes with --batch auto)
  double lr = 0;                   // current learning rate
  // How the trainer syncs: the built-in trainer's options, or what an external trainer runs
  // (its CONFIGURE; the agent's defaults until it says).
  learn::OuterStep::Kind outer = learn::OuterStep::Kind::kAvg;
  double outer_lr = 1.0;
  double outer_momentum = 0.0;
  int fragments = 1;
  const char* drift = "none";  // an external trainer's drift correction: none, params, gradient
  bool configured = false;     // an external trainer said how it syncs
  SyncTally syncs;             // what the syncs mixed (external trainer)
};

// --sync-every auto: hide a round's transfer under computation. A round started at a
// snapshot ends `round_s` later; the next snapshot comes H steps of `step_s` each later (step_s:
// the measured interval between step ends, barrier waits included), so
// H = ceil(round_s / step_s) keeps one round in flight without queueing snapshots behind it and
// without idle links. Clamped to [1, 64]; 1 while either figure is unknown.
int AutoSyncEvery(double round_s, double step_s);

// What the agent drives: the built-in trainer below (a learn::Task on a thread beside the loop)
// or an external trainer process attached over a local socket (daemon/trainer/external_trainer.h).
// The agent calls every method from the loop thread; `notify` (given at construction) tells the
// loop that state() or TakeSnapshot() has something new. The mesh-wide stop (--target-accuracy): a
// node still training takes over a finished peer's final model (the one that met the target)
// instead of averaging it with its own, and evaluates it at once. Each (peer, final step) is taken
// once; later copies of the same final model (its sender re-offers it every 200 ms) mix by progress
// like any model, so a node whose own evaluation falls short (other test data) trains on rather
// than being reset every round.
class FinalModels {
 public:
  // The first final model in `inbox` (a map from sender to an entry with `finished` and
  // `step`) not taken before, or nullptr. Marks it taken.
  template <class Inbox>
  auto* Take(Inbox& inbox) {
    for (auto& [from, in] : inbox) {
      if (in.final_step && taken_.emplace(from, *in.final_step).second) return &in;
    }
    return static_cast<typename Inbox::mapped_type*>(nullptr);
  }

 private:
  std::set<std::pair<std::string, uint64_t>> taken_;
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual void Start() = 0;
  virtual void Stop() = 0;
  // Allows the trainer to start steps up to and including `step`.
  // `mesh_step_s`: the peers' median step interval (0 = unknown), for --batch auto.
  virtual void Permit(uint64_t step, double mesh_step_s = 0) = 0;
  // Parameters received from `from` at its step `step`; mixed at the next step boundary (the
  // newest vector per sender wins).
  // `step`: the sender's step, for the progress-aware weight (learn::MixWeight).
  // `finished`: the sender stopped training (its model mixes at full weight). `final_step`: the
  // chunks say this is the sender's final model, taken at its step *final_step; with
  // --target-accuracy it replaces ours (once per sender and step, see FinalModels) and is
  // evaluated at once; training stops if it meets the target (the mesh-wide stop).
  virtual void Deliver(const std::string& from, std::vector<float> params, uint64_t step,
                       bool finished = false,
                       std::optional<uint64_t> final_step = std::nullopt) = 0;
  // One chunk of a peer's snapshot: folded into the running sum
  // (daemon/trainer/chunk_mixer.h) that the next step boundary mixes in, with the progress-aware
  // weight of chunk.step.
  virtual void DeliverChunk(node::MixChunk chunk) = 0;
  // Join with state: before the first step, take over `params` and continue after `step`
  // (the loop permits step + 1 next).
  virtual void Adopt(std::vector<float> params, uint64_t step) = 0;
  virtual std::optional<Snapshot> TakeSnapshot() = 0;
  // Steps between snapshots from now on (>= 1), for --sync-every auto.
  virtual void SetSyncEvery(int steps) = 0;
  // The live training peers and the step each reported, for syncs that wait for the peers'
  // models (the external trainer's exact exchange; daemon/trainer/external_trainer.h), with the
  // seconds since each one last came back from suspect or failed (node::Node::ReturnedAt; 1e9:
  // never).
  struct PeerStep {
    std::string name;
    uint64_t step = 0;
    double since_change_s = 1e9;
  };
  using PeerSteps = std::vector<PeerStep>;
  virtual void SetPeerSteps(std::function<PeerSteps()>) {}
  virtual TrainerState state() const = 0;
  // Floats in the model; 0 while unknown (an external trainer that never attached).
  virtual size_t num_params() const = 0;
  // Writes a checkpoint now. Only while the trainer is stopped.
  virtual learn::Status SaveCheckpoint() = 0;
  // The newest parameter snapshot with its layer spec (for `meshtrain export`); Unavailable
  // before the first snapshot, InvalidArgument without a layer spec. Any thread.
  virtual learn::Result<learn::ModelFile> Model() const = 0;
  // Writes the current parameters as a model file (learn/model_file.h). Only while stopped.
  // OK without writing when there is no layer spec.
  virtual learn::Status WriteFinalModel(const std::string& path) = 0;
  // Incoming chunks the running sum's queue had no room for (status param_streams).
  virtual uint64_t MixChunksDropped() const { return 0; }
  // The running sum's queue is past half full: stop reading parameter chunks for a while.
  virtual bool MixBacklogged() const { return false; }
  // The mesh's consensus model at the end of training (node::AdoptConsensus), averaging
  // `participants` final models: the trainer's final model from now on (export, model.npz,
  // evaluated once). Called after training ended. `settled`: final as far as the node can
  // tell; a provisional one is followed by the same `params` settled, or by a new result.
  virtual void AdoptConsensus(std::shared_ptr<const std::vector<float>> params, size_t participants,
                              bool settled) = 0;
  // Peer models mixed in chunk by chunk so far, in whole models (ChunkMixer::models_mixed).
  virtual double ModelsMixed() const { return 0; }
  // Inputs of this trainer rejected, by reason (merged into status rejected_by_reason).
  virtual std::map<std::string, uint64_t> Rejects() const { return {}; }
  // What robust mixing judged of each sender (ChunkMixer::Robust). Safe on the loop.
  virtual learn::RobustReport Robust() const { return {}; }
};

// The built-in trainer: a thread beside the libuv loop that takes SGD steps on a learn::Task.
class BuiltinTrainer : public Trainer {
 public:
  BuiltinTrainer(std::unique_ptr<learn::Task> task, TrainerOptions options, MetricsLog* metrics,
                 std::function<void()> notify);
  ~BuiltinTrainer() override;  // stops and joins
  BuiltinTrainer(const BuiltinTrainer&) = delete;
  BuiltinTrainer& operator=(const BuiltinTrainer&) = delete;

  void Start() override;
  void Stop() override;
  void Permit(uint64_t step, double mesh_step_s = 0) override;
  void Deliver(const std::string& from, std::vector<float> params, uint64_t step,
               bool finished = false, std::optional<uint64_t> final_step = std::nullopt) override;
  void DeliverChunk(node::MixChunk chunk) override;
  uint64_t MixChunksDropped() const override { return mixer_.dropped(); }
  bool MixBacklogged() const override { return mixer_.backlogged(); }
  double ModelsMixed() const override { return mixer_.models_mixed(); }
  learn::RobustReport Robust() const override { return mixer_.Robust(); }
  void Adopt(std::vector<float> params, uint64_t step) override;
  void AdoptConsensus(std::shared_ptr<const std::vector<float>> params, size_t participants,
                      bool settled) override;
  std::optional<Snapshot> TakeSnapshot() override;
  void SetSyncEvery(int steps) override;
  TrainerState state() const override;
  size_t num_params() const override { return num_params_; }
  // Restores the newest good checkpoint of options.checkpoint_dir before Start(). An error (never
  // a silent start from zero over a corrupt checkpoint); ok also when there is no checkpoint
  // yet. `*resumed_step` is set when one was loaded.
  learn::Status Restore(int64_t* resumed_step);
  learn::Status SaveCheckpoint() override;
  // InvalidArgument for the synthetic task.
  learn::Result<learn::ModelFile> Model() const override;
  learn::Status WriteFinalModel(const std::string& path) override;

 private:
  void Run();
  // One SGD step (with the --slowdown emulation); its wall time in seconds.
  double TimedStep(float* loss = nullptr);
  // Replaces the task's parameters (a join's or a finished peer's model; sizes checked on
  // delivery).
  void SetParams(const std::vector<float>& params);
  // --batch auto: every kAdaptEvery steps, scale the batch so this node's step time
  // (`step_compute_s`, at the current batch) approaches the mesh's median step interval:
  // b <- clamp(b * mesh / own, base / 8, base), halfway per adjustment; the learning rate
  // follows linearly (lr = base_lr * b / base: the linear scaling rule, so the update per
  // processed sample stays the same). A node never goes above its base batch: fast nodes keep
  // it, slow ones take smaller steps at the mesh's pace instead of holding barriers.
  void AdaptBatch(double step_compute_s);
  // What evaluations see and a finished node offers: the parameters, or with --eval-average
  // their moving average. Trainer thread only (or after Stop()).
  const Eigen::VectorXf& EvalParams() const;
  // Evaluates EvalParams() now, on the trainer thread.
  void Evaluate(uint64_t step);
  // Hands a copy to the evaluation thread (off the critical path). Used when no
  // --target-accuracy depends on the result; a newer request replaces one not started.
  void EvaluateLater(uint64_t step);
  void RecordEval(uint64_t step, const learn::EvalResult& r, uint32_t crc);
  // Periodic checkpoints (off the critical path): the trainer thread captures the
  // state (a copy of parameters and velocity) and the checkpoint thread writes it (serialize,
  // write, fsync, rename). A newer capture replaces one not written yet; Stop() writes the one
  // pending before it returns, and SaveCheckpoint() (shutdown) writes synchronously.
  void SaveCheckpointLater(uint64_t step);
  learn::Status WriteCheckpoint(const learn::CheckpointData& data);
  std::atomic<uint64_t> checkpoints_{0};

  std::unique_ptr<learn::Task> task_;
  const TrainerOptions options_;
  learn::ParamAverage average_;  // trainer thread only
  learn::OuterStep outer_;       // trainer thread only
  MetricsLog* metrics_;
  std::function<void()> notify_;
  const size_t num_params_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  bool stop_ = false;
  uint64_t permitted_ = 0;
  double mesh_step_s_ = 0;  // guarded by mu_
  int base_batch_ = 0;      // trainer thread only (batch auto)
  float base_lr_ = 0;
  uint64_t adapt_count_ = 0;
  struct Incoming {
    std::vector<float> params;
    uint64_t step = 0;
    bool finished = false;
    std::optional<uint64_t> final_step;  // the sender's final model, at this step of its own
  };
  std::map<std::string, Incoming> inbox_;
  ChunkMixer mixer_;    // streamed chunks of peers' snapshots
  FinalModels finals_;  // trainer thread, under mu_
  std::optional<Incoming> adopt_;
  std::optional<Snapshot> outbox_;
  // The newest model for Model() (`export`): the snapshot sent, or with --eval-average the
  // average at that step.
  std::shared_ptr<const std::vector<float>> latest_;
  uint64_t latest_step_ = 0;
  std::shared_ptr<const std::vector<float>> consensus_;  // under mu_
  TrainerState state_;

  // The training loop (Run) in its steps, in the order each round takes them: AwaitRound (the
  // permit for step + 1, or a join's model to adopt; takes the inbox), MixRound (a finished peer's
  // final model, or the received models, the streamed chunks and the outer step), the SGD step,
  // PublishStep (the step's bookkeeping and snapshot), CheckpointAndEvaluate; at the end
  // OfferFinalModel. Trainer thread only.
  using LoopClock = std::chrono::steady_clock;
  // Carried from one round to the next.
  struct LoopState {
    LoopClock::time_point train_start;
    LoopClock::time_point last_end;
    bool have_last_end = false;
    // The last step published a snapshot (of the fragment [published_lo, published_hi)): the
    // outer step is due on that range.
    bool published = false;
    size_t published_lo = 0, published_hi = 0;
  };
  // One round: the step it starts from and what it mixes in.
  struct Round {
    uint64_t step = 0;
    std::vector<Incoming> incoming;
    std::vector<std::string> incoming_from;  // the sender of each
    std::optional<Incoming> final_model;     // a finished peer's model to take over
    size_t chunk_mixed = 0;
    bool outer_stepped = false;
  };
  enum class RoundStart { kStop, kAdopted, kTrain };
  RoundStart AwaitRound(Round* r);
  // False when the final model taken over ended training (the round ends there).
  bool MixRound(const LoopState& loop, Round* r);
  void PublishStep(LoopState* loop, const Round& r, LoopClock::time_point t0, double compute,
                   float loss);
  void CheckpointAndEvaluate(uint64_t done);
  void OfferFinalModel();

  std::thread thread_;
  struct EvalJob {
    uint64_t step = 0;
    std::vector<float> params;
    // Or the mesh's consensus model, which also becomes the task's parameters (the trainer
    // thread has ended; only this worker touches the task now).
    std::shared_ptr<const std::vector<float>> consensus;
  };
  LatestJobWorker<EvalJob> evaluator_;
  struct CheckpointJob {
    uint64_t step = 0;  // the trainer's step when captured
    learn::CheckpointData data;
  };
  std::mutex ckpt_write_mu_;  // one checkpoint write at a time
  LatestJobWorker<CheckpointJob> checkpointer_;
};

// The built-in trainer for config.task (nullptr for --task none), restored from the newest good
// checkpoint of --data-dir; *resumed_step is the step it resumed at, or -1 for a fresh start.
learn::Result<std::unique_ptr<Trainer>> MakeTrainer(const AgentConfig& config, MetricsLog* metrics,
                                                    std::function<void()> notify,
                                                    int64_t* resumed_step);

// The built-in trainer for a task the caller made (the embedding API: Agent(config, task)), with
// the training options of `config` (--steps, --target-accuracy, --eval-every, --data-dir ...).
learn::Result<std::unique_ptr<Trainer>> MakeTrainerFor(const AgentConfig& config,
                                                       std::unique_ptr<learn::Task> task,
                                                       MetricsLog* metrics,
                                                       std::function<void()> notify,
                                                       int64_t* resumed_step);

}  // namespace meshtrain::daemon
