#include "daemon/trainer/trainer.h"

#include <fmt/ranges.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <tuple>

#include "daemon/ops/metrics.h"
#include "learn/checkpoint.h"
#include "learn/mixing.h"

namespace meshtrain::daemon {

namespace {

// CPU time the calling thread has used, in seconds.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

BuiltinTrainer::BuiltinTrainer(std::unique_ptr<learn::Task> task, TrainerOptions options,
                               MetricsLog* metrics, std::function<void()> notify)
    : task_(std::move(task)),
      options_(std::move(options)),
      average_(options_.eval_average),
      outer_(options_.outer, options_.outer_lr, options_.outer_momentum),
      metrics_(metrics),
      notify_(std::move(notify)),
      num_params_(task_->num_params()),
      evaluator_("mt-eval",
                 [this](EvalJob& job) {
                   if (job.consensus) {
                     SetParams(*job.consensus);
                     job.params.clear();
                   }
                   const float* p = job.consensus ? job.consensus->data() : job.params.data();
                   const size_t n = job.consensus ? job.consensus->size() : job.params.size();
                   RecordEval(job.step, task_->EvaluateAt(p), learn::ParamsCrc32(p, n));
                 }),
      checkpointer_("mt-checkpoint", [this](CheckpointJob& job) {
        if (auto st = WriteCheckpoint(job.data); !st.ok()) {
          spdlog::error("checkpoint failed: {}", st.message());
        } else {
          metrics_->Write("checkpoint", {{"step", job.step}});
        }
      }) {
  state_.sync_every = std::max(1, options_.sync_every);
  state_.outer = options_.outer;
  state_.outer_lr = options_.outer_lr;
  state_.outer_momentum = options_.outer_momentum;
  state_.fragments = std::max(1, options_.fragments);
  mixer_.SetRobust(options_.robust);
}

BuiltinTrainer::~BuiltinTrainer() { Stop(); }

void BuiltinTrainer::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.step = static_cast<uint64_t>(task_->steps());
    state_.batch = task_->batch_size();
    state_.lr = task_->optimizer().lr();
    state_.training = !(options_.max_steps > 0 && state_.step >= options_.max_steps);
  }
  // The workers first: the trainer thread asks evaluator_.running().
  if (options_.target_accuracy <= 0) evaluator_.Start();
  if (!options_.checkpoint_dir.empty()) checkpointer_.Start();
  thread_ = std::thread([this] { Run(); });
}

void BuiltinTrainer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  evaluator_.Stop();     // a pending evaluation still runs: its line belongs in the metrics
  checkpointer_.Stop();  // a capture not written yet is still written: nothing is lost
}

void BuiltinTrainer::Permit(uint64_t step, double mesh_step_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (mesh_step_s > 0) mesh_step_s_ = mesh_step_s;
    if (step <= permitted_) return;
    permitted_ = step;
  }
  cv_.notify_all();
}

void BuiltinTrainer::Deliver(const std::string& from, std::vector<float> params, uint64_t step,
                             bool finished, std::optional<uint64_t> final_step) {
  if (params.size() != num_params_) return;  // the codec already checks; defence in depth
  std::lock_guard<std::mutex> lock(mu_);
  inbox_[from] = Incoming{std::move(params), step, finished, final_step};
}

void BuiltinTrainer::DeliverChunk(node::MixChunk chunk) {
  if (chunk.total != num_params_) return;
  uint64_t ours = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ours = state_.step;
  }
  const double w = learn::MixWeight(ours, chunk.step);
  mixer_.Push(std::move(chunk), w);
}

void BuiltinTrainer::Adopt(std::vector<float> params, uint64_t step) {
  // Finite: checked chunk by chunk on arrival (node::AdoptState), not again on the loop.
  if (params.size() != num_params_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adopt_ = Incoming{std::move(params), step, false, std::nullopt};
  }
  cv_.notify_all();
}

void BuiltinTrainer::AdoptConsensus(std::shared_ptr<const std::vector<float>> params,
                                    size_t participants, bool /*settled*/) {
  if (!params || params->size() != num_params_) return;
  uint64_t step = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_.training || stop_) return;  // not ours to take while training
    if (consensus_ == params) return;      // the same result, settled
    consensus_ = params;
    latest_ = params;
    state_.consensus_crc32 = learn::ParamsCrc32(params->data(), params->size());
    state_.consensus_models = participants;
    step = state_.step;
    spdlog::info("consensus model of {} nodes adopted (crc32 {:08x})", participants,
                 state_.consensus_crc32);
  }
  // Evaluated, and made the task's parameters, on the evaluation thread (started now when
  // evaluations ran inline: the trainer thread has ended).
  if (!evaluator_.running()) evaluator_.Start();
  evaluator_.Post(EvalJob{step, {}, std::move(params)});
}

std::optional<Snapshot> BuiltinTrainer::TakeSnapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<Snapshot> out = std::move(outbox_);
  outbox_.reset();
  return out;
}

TrainerState BuiltinTrainer::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

learn::Status BuiltinTrainer::Restore(int64_t* resumed_step) {
  using learn::Status;
  if (options_.checkpoint_dir.empty()) return Status::OK();
  auto loaded = learn::LoadLatestGood(options_.checkpoint_dir);
  if (!loaded.ok()) {
    if (loaded.status().IsNotFound()) return Status::OK();
    return Status::Corruption("no usable checkpoint in " + options_.checkpoint_dir + ": " +
                              loaded.status().message() +
                              " (move the directory away to start from scratch)");
  }
  for (const auto& why : loaded->skipped) {
    spdlog::error("skipped a bad checkpoint, using the previous one: {}", why);
  }
  if (loaded->data.task != task_->name()) {
    return Status::InvalidArgument("checkpoint " + loaded->path + " is for task " +
                                   loaded->data.task + ", not " + task_->name());
  }
  if (auto st = learn::RestoreCheckpoint(loaded->data, task_.get()); !st.ok()) {
    return Status::Corruption("cannot restore " + loaded->path + ": " + st.message());
  }
  *resumed_step = task_->steps();
  spdlog::info("resumed from {} at step {}", loaded->path, task_->steps());
  return Status::OK();
}

learn::Result<learn::ModelFile> BuiltinTrainer::Model() const {
  learn::ModelFile model;
  model.spec = task_->model_spec();  // immutable after construction
  model.input_shape = task_->input_shape();
  model.input_shift = task_->input_transform()[0];
  model.input_scale = task_->input_transform()[1];
  if (model.spec.empty()) {
    return Status::InvalidArgument("task " + task_->name() + " is not a layer-spec model");
  }
  std::shared_ptr<const std::vector<float>> params;
  {
    std::lock_guard<std::mutex> lock(mu_);
    params = latest_;
    model.step = static_cast<int64_t>(latest_step_);
  }
  if (!params) return Status::Unavailable("no model yet: training has not taken a step");
  model.params = *params;
  return model;
}

learn::Status BuiltinTrainer::WriteFinalModel(const std::string& path) {
  learn::ModelFile model;
  model.spec = task_->model_spec();
  if (model.spec.empty()) return Status::OK();  // synthetic: nothing to export
  model.input_shape = task_->input_shape();
  model.input_shift = task_->input_transform()[0];
  model.input_scale = task_->input_transform()[1];
  model.step = task_->steps();
  std::shared_ptr<const std::vector<float>> consensus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    consensus = consensus_;
  }
  if (consensus) {
    model.params = *consensus;  // the mesh's one model
  } else {
    const Eigen::VectorXf& p = EvalParams();  // the model the evaluations measured
    model.params.assign(p.data(), p.data() + p.size());
  }
  return learn::WriteModelFile(path, model);
}

learn::Status BuiltinTrainer::SaveCheckpoint() {
  if (options_.checkpoint_dir.empty()) return learn::Status::OK();
  return WriteCheckpoint(learn::CaptureCheckpoint(*task_, {{"node", options_.name}}));
}

learn::Status BuiltinTrainer::WriteCheckpoint(const learn::CheckpointData& data) {
  std::lock_guard<std::mutex> lock(ckpt_write_mu_);
  auto st = learn::SaveCheckpointToDir(options_.checkpoint_dir, data);
  if (st.ok()) checkpoints_++;
  return st;
}

void BuiltinTrainer::SaveCheckpointLater(uint64_t step) {
  // Replaces a capture the writer has not started.
  checkpointer_.Post(
      CheckpointJob{step, learn::CaptureCheckpoint(*task_, {{"node", options_.name}})});
}

int AutoSyncEvery(double round_s, double step_s) {
  if (!(round_s > 0) || !(step_s > 0) || !std::isfinite(round_s / step_s)) return 1;
  return static_cast<int>(std::clamp(std::ceil(round_s / step_s), 1.0, 64.0));
}

void BuiltinTrainer::SetSyncEvery(int steps) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.sync_every = std::max(1, steps);
}

const Eigen::VectorXf& BuiltinTrainer::EvalParams() const {
  return average_.enabled() && average_.value().size() == task_->params().size() ? average_.value()
                                                                                 : task_->params();
}

void BuiltinTrainer::Evaluate(uint64_t step) {
  const Eigen::VectorXf& p = EvalParams();
  const learn::EvalResult r = task_->EvaluateAt(p.data());
  RecordEval(step, r, learn::ParamsCrc32(p));
}

void BuiltinTrainer::EvaluateLater(uint64_t step) {
  const Eigen::VectorXf& p = EvalParams();
  // A newer evaluation replaces one not started yet: evaluations never queue up.
  evaluator_.Post(EvalJob{step, std::vector<float>(p.data(), p.data() + p.size()), nullptr});
}

void BuiltinTrainer::RecordEval(uint64_t step, const learn::EvalResult& r, uint32_t crc) {
  bool reached = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.params_crc32 = crc;
    state_.loss = r.loss;
    state_.accuracy = r.accuracy;
    state_.eval_step = step;
    reached = options_.target_accuracy > 0 && r.accuracy >= options_.target_accuracy;
    if (reached) {
      state_.training = false;
      mixer_.SetFrozen(true);  // its center stops moving (ChunkMixer::SetFrozen)
    }
  }
  metrics_->Write("eval", {{"step", step}, {"loss", r.loss}, {"accuracy", r.accuracy}});
  spdlog::info("step {} test loss {:.4f} accuracy {:.4f}", step, r.loss, r.accuracy);
  if (reached) {
    spdlog::info("target accuracy {:.3f} reached at step {}: training stops, staying in the mesh",
                 options_.target_accuracy, step);
  }
}

void BuiltinTrainer::AdaptBatch(double step_compute_s) {
  constexpr uint64_t kAdaptEvery = 10;
  if (base_batch_ == 0) {
    base_batch_ = task_->batch_size();
    base_lr_ = task_->optimizer().lr();
  }
  if (++adapt_count_ % kAdaptEvery != 0 || step_compute_s <= 0) return;
  double mesh_s = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mesh_s = mesh_step_s_;
  }
  if (mesh_s <= 0) return;
  const int b = task_->batch_size();
  const int next = learn::AdaptBatchSize(b, base_batch_, step_compute_s, mesh_s);
  if (next == b) return;
  task_->set_batch_size(next);
  task_->optimizer().set_lr(base_lr_ * static_cast<float>(next) / static_cast<float>(base_batch_));
  std::lock_guard<std::mutex> lock(mu_);
  state_.batch = next;
  state_.lr = task_->optimizer().lr();
}

double BuiltinTrainer::TimedStep(float* loss) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const double cpu0 = options_.slowdown > 1 ? ThreadCpuSeconds() : 0;
  const float l = task_->Step();
  if (loss != nullptr) *loss = l;
  if (average_.enabled()) average_.Update(task_->params());
  if (options_.slowdown > 1) {
    // Straggler emulation: the step takes `slowdown` times its compute time in total. On one
    // thread the compute time is the thread's CPU time: time lost to other processes on the
    // same cores is absorbed in the emulated step instead of being multiplied by it.
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const double compute = options_.threads == 1 ? ThreadCpuSeconds() - cpu0 : wall;
    const double rest = compute * options_.slowdown - wall;
    if (rest > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(rest), [&] { return stop_; });
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void BuiltinTrainer::SetParams(const std::vector<float>& params) {
  task_->params() =
      Eigen::Map<const Eigen::VectorXf>(params.data(), static_cast<Eigen::Index>(params.size()));
  if (average_.enabled()) average_.Reset(task_->params());  // replaced, not trained
  outer_.Reset(task_->params().data(), static_cast<size_t>(task_->params().size()));
}

void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

void BulkThread() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (errno == 0) setpriority(PRIO_PROCESS, tid, std::min(19, now + kBulkNice));
  ThroughputThread();
}

void ThroughputThread() {
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
}

void BuiltinTrainer::Run() {
  NameThisThread("mt-train");
  LoopState loop;
  loop.train_start = LoopClock::now();
  if (average_.enabled()) average_.Reset(task_->params());  // initial or restored parameters
  // The outer step starts from the parameters in hand (its momentum is not checkpointed).
  outer_.Reset(task_->params().data(), static_cast<size_t>(task_->params().size()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.start_step = state_.step;
  }
  while (true) {
    Round r;
    const RoundStart start = AwaitRound(&r);
    if (start == RoundStart::kStop) break;
    if (start == RoundStart::kAdopted) continue;  // wait for the permit of the adopted step + 1
    const auto t0 = LoopClock::now();
    if (!MixRound(loop, &r)) continue;  // the finished peer's final model ended training
    loop.published = false;
    float loss = 0;
    const double compute = TimedStep(&loss);
    if (options_.batch_auto) AdaptBatch(compute);
    const uint64_t done = r.step + 1;
    PublishStep(&loop, r, t0, compute, loss);
    CheckpointAndEvaluate(done);
    notify_();
  }
  OfferFinalModel();
  notify_();
}

BuiltinTrainer::RoundStart BuiltinTrainer::AwaitRound(Round* r) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!state_.training || stop_) return RoundStart::kStop;
  const uint64_t step = r->step = state_.step;
  state_.waiting = permitted_ < step + 1;
  const auto wait_start = LoopClock::now();
  if (state_.waiting) {
    lock.unlock();
    notify_();  // the loop runs the barrier for step + 1
    lock.lock();
    // wbsp: busy while blocked — local steps whose update joins the next global step.
    for (int local = 0;
         local < options_.busy_local_steps && !stop_ && !adopt_ && permitted_ < step + 1; ++local) {
      lock.unlock();
      const double c = TimedStep();
      lock.lock();
      state_.compute_s += c;
      state_.local_steps++;
    }
    const auto idle_start = LoopClock::now();
    cv_.wait(lock, [&] { return stop_ || adopt_ || permitted_ >= step + 1; });
    state_.idle_s += std::chrono::duration<double>(LoopClock::now() - idle_start).count();
    if (stop_) return RoundStart::kStop;
  }
  if (!adopt_) {
    state_.wait.Observe(std::chrono::duration<double>(LoopClock::now() - wait_start).count());
  }
  if (adopt_) {
    // Join with state: the peer's model replaces ours before our first step.
    SetParams(adopt_->params);
    mixer_.Clear();
    task_->set_steps(static_cast<int64_t>(adopt_->step));
    state_.step = adopt_->step;
    adopt_.reset();
    inbox_.clear();
    return RoundStart::kAdopted;
  }
  state_.waiting = false;
  r->incoming.clear();
  r->incoming_from.clear();
  if (options_.target_accuracy > 0) {
    if (auto* f = finals_.Take(inbox_)) r->final_model = std::move(*f);
  }
  if (!r->final_model) {
    for (auto& [from, in] : inbox_) {
      r->incoming.push_back(std::move(in));
      r->incoming_from.push_back(from);
    }
  }
  inbox_.clear();
  return RoundStart::kTrain;
}

bool BuiltinTrainer::MixRound(const LoopState& loop, Round* r) {
  if (r->final_model) {
    // Mesh-wide stop: a finished peer's model met the target; take it over (the other models
    // of this round are dropped) and evaluate it now. Falling short of the target (other test
    // data), this node trains on from it.
    SetParams(r->final_model->params);
    mixer_.Clear();
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_.mixes += 1;
    }
    Evaluate(r->step);
    std::lock_guard<std::mutex> lock(mu_);
    if (!state_.training) return false;
  } else if (!r->incoming.empty()) {
    // Progress-aware mixing (learn::MixWeight): a model far behind ours barely counts.
    std::vector<const float*> others;
    std::vector<double> weights;
    Eigen::VectorXf& own = task_->params();
    for (size_t j = 0; j < r->incoming.size(); ++j) {
      auto& in = r->incoming[j];
      // Robust mixing: refused, clipped in place, or kept (docs/design.md "Robust mixing").
      if (!mixer_.JudgeWhole(r->incoming_from[j], own.data(), in.params.data(), num_params_)) {
        continue;
      }
      others.push_back(in.params.data());
      weights.push_back(learn::MixWeight(r->step, in.step));
    }
    learn::MixWeighted(task_->params(), others, weights);
  }
  if (!r->final_model) {
    Eigen::VectorXf& x = task_->params();
    r->chunk_mixed = mixer_.Apply(x.data(), static_cast<size_t>(x.size()));
    if (loop.published && outer_.enabled()) {
      outer_.Step(x.data(), static_cast<size_t>(x.size()), loop.published_lo, loop.published_hi);
      r->outer_stepped = true;
    }
  }
  return true;
}

void BuiltinTrainer::PublishStep(LoopState* loop, const Round& r, LoopClock::time_point t0,
                                 double compute, float loss) {
  const uint64_t done = r.step + 1;
  std::shared_ptr<std::vector<float>> snap;
  const auto end = LoopClock::now();
  const double interval =
      std::chrono::duration<double>(end - (loop->have_last_end ? loop->last_end : t0)).count();
  loop->have_last_end = true;
  loop->last_end = end;
  int sync_every = 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.step_s = state_.step_s == 0 ? interval : 0.9 * state_.step_s + 0.1 * interval;
    sync_every = std::max(1, state_.sync_every);
  }
  std::shared_ptr<std::vector<float>> exported;  // what `export` gives: the evaluated model
  // --fragments F: one fragment every H/F steps, in turn (H = sync_every, a multiple of F).
  const uint64_t fragments = static_cast<uint64_t>(std::max(1, options_.fragments));
  const uint64_t every = std::max<uint64_t>(1, static_cast<uint64_t>(sync_every) / fragments);
  wire::StreamSpan span;
  if (done % every == 0) {
    const auto& p = task_->params();
    snap = std::make_shared<std::vector<float>>(p.data(), p.data() + p.size());
    loop->published = true;
    std::tie(loop->published_lo, loop->published_hi) =
        learn::FragmentRange(static_cast<size_t>(p.size()), fragments, (done / every) % fragments);
    if (fragments > 1) {
      span = {static_cast<uint32_t>(loop->published_lo), static_cast<uint32_t>(loop->published_hi)};
    }
    exported = snap;
    if (average_.enabled()) {
      const Eigen::VectorXf& a = EvalParams();
      exported = std::make_shared<std::vector<float>>(a.data(), a.data() + a.size());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  state_.step = done;
  state_.mixes += r.incoming.size() + r.chunk_mixed;
  state_.outer_steps += r.outer_stepped ? 1 : 0;
  state_.compute_s += compute;
  state_.step_compute_s =
      state_.step_compute_s == 0 ? compute : 0.8 * state_.step_compute_s + 0.2 * compute;
  state_.train_s = std::chrono::duration<double>(end - loop->train_start).count();
  state_.train_loss = state_.train_loss == 0 ? loss : 0.95 * state_.train_loss + 0.05 * loss;
  if (snap) {
    mixer_.SetReference(snap);
    latest_ = std::move(exported);
    latest_step_ = done;
    outbox_ = Snapshot{done, std::move(snap), false, span};
  }
  if (options_.max_steps > 0 && done >= options_.max_steps) {
    state_.training = false;
    mixer_.SetFrozen(true);  // its center stops moving (ChunkMixer::SetFrozen)
  }
}

void BuiltinTrainer::CheckpointAndEvaluate(uint64_t done) {
  if (!options_.checkpoint_dir.empty() &&
      done % static_cast<uint64_t>(options_.checkpoint_every) == 0) {
    SaveCheckpointLater(done);  // written by the checkpoint thread
  }
  const bool last = options_.max_steps > 0 && done >= options_.max_steps;
  if (done % static_cast<uint64_t>(options_.eval_every) == 0 || last) {
    // Beside training, unless the result decides whether to stop (--target-accuracy) or it
    // is the last one.
    if (evaluator_.running() && !last) {
      EvaluateLater(done);
    } else {
      Evaluate(done);
    }
  }
}

void BuiltinTrainer::OfferFinalModel() {
  std::lock_guard<std::mutex> lock(mu_);
  state_.waiting = false;
  if (!stop_ && !state_.training) {
    // Finished (step budget or target accuracy): hand the final model to the peers still
    // training, so they converge towards it rather than on their own: the model evaluated.
    const Eigen::VectorXf& p = EvalParams();
    latest_ = std::make_shared<std::vector<float>>(p.data(), p.data() + p.size());
    latest_step_ = state_.step;
    outbox_ = Snapshot{state_.step, latest_, true};
  }
}

learn::Result<std::unique_ptr<Trainer>> MakeTrainer(const AgentConfig& config, MetricsLog* metrics,
                                                    std::function<void()> notify,
                                                    int64_t* resumed_step) {
  *resumed_step = -1;
  if (config.task == "none") return std::unique_ptr<Trainer>();
  learn::TaskOptions opts;
  opts.dataset_dir = config.dataset_dir;
  if (!config.shard.empty()) {
    auto shard = learn::ParseShard(config.shard);
    if (!shard.ok())
      return learn::Status::InvalidArgument("invalid --shard: " + shard.status().message());
    opts.shard = shard.value();
  }
  auto mode = learn::ParseShardMode(config.shard_mode);
  if (!mode.ok()) return learn::Status::InvalidArgument("invalid " + mode.status().message());
  opts.shard_mode = mode.value();
  opts.train_data = config.train_data;
  opts.test_data = config.test_data;
  opts.data_options.label_column = config.label_column;
  if (!config.input_shape.empty()) {
    auto shape = learn::ParseInputShape(config.input_shape);
    if (!shape.ok()) return shape.status();
    opts.data_options.input_shape = shape.value();
  }
  opts.threads = config.threads;
  opts.batch_size = config.batch;
  opts.lr = static_cast<float>(config.lr);
  opts.momentum = static_cast<float>(config.momentum);
  // Every node starts from the same parameters (gossip averaging assumes one model); sample
  // order differs per node.
  opts.init_seed = 0x6d657368;
  opts.data_seed = config.seed ? *config.seed : learn::SeedFromString(config.name);
  spdlog::info("loading task {}", config.task);
  auto task = learn::MakeTask(config.task, opts);
  if (!task.ok()) {
    return learn::Status::InvalidArgument("cannot start task " + config.task + ": " +
                                          task.status().message());
  }
  if (const std::string spec = task.value()->model_spec(); !spec.empty()) {
    const auto in = task.value()->input_shape();
    spdlog::info("model {}: {} parameters, input {}x{}x{}, {} thread(s)", spec,
                 task.value()->num_params(), in[0], in[1], in[2], opts.threads);
  }
  if (const auto hist = task.value()->LabelHistogram(); !hist.empty()) {
    spdlog::info("shard {} ({}): {} samples, label histogram [{}]", opts.shard.ToString(),
                 opts.shard_mode.ToString(), task.value()->train_size(), fmt::join(hist, ","));
  }
  return MakeTrainerFor(config, std::move(task).value(), metrics, std::move(notify), resumed_step);
}

learn::Result<std::unique_ptr<Trainer>> MakeTrainerFor(const AgentConfig& config,
                                                       std::unique_ptr<learn::Task> task,
                                                       MetricsLog* metrics,
                                                       std::function<void()> notify,
                                                       int64_t* resumed_step) {
  *resumed_step = -1;
  TrainerOptions topts;
  topts.max_steps = config.steps;
  topts.target_accuracy = config.target_accuracy;
  topts.eval_every = config.eval_every;
  topts.sync_every = config.sync_every;
  topts.slowdown = config.slowdown;
  topts.threads = config.threads;
  topts.name = config.name;
  topts.checkpoint_dir = config.data_dir;
  topts.checkpoint_every = config.checkpoint_every;
  if (config.barrier == sync::Policy::kWbsp)
    topts.busy_local_steps = TrainerOptions::kMaxBusyLocalSteps;
  topts.batch_auto = config.batch_auto;
  topts.eval_average = config.eval_average;
  topts.outer = config.outer;
  topts.robust = config.robust;
  topts.outer_lr = config.outer_lr;
  topts.outer_momentum = config.outer_momentum;
  topts.fragments = config.fragments;
  auto trainer =
      std::make_unique<BuiltinTrainer>(std::move(task), topts, metrics, std::move(notify));
  if (auto st = trainer->Restore(resumed_step); !st.ok()) return st;
  return std::unique_ptr<Trainer>(std::move(trainer));
}

}  // namespace meshtrain::daemon
