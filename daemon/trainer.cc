#include "daemon/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "daemon/metrics.h"
#include "learn/mixing.h"

namespace meshtrain::daemon {

Trainer::Trainer(std::unique_ptr<learn::Task> task, TrainerOptions options, MetricsLog* metrics,
                 std::function<void()> notify)
    : task_(std::move(task)),
      options_(std::move(options)),
      metrics_(metrics),
      notify_(std::move(notify)),
      num_params_(task_->num_params()) {}

Trainer::~Trainer() { Stop(); }

void Trainer::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.step = static_cast<uint64_t>(task_->steps());
    state_.training = !(options_.max_steps > 0 && state_.step >= options_.max_steps);
  }
  thread_ = std::thread([this] { Run(); });
}

void Trainer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Trainer::Permit(uint64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (step <= permitted_) return;
    permitted_ = step;
  }
  cv_.notify_all();
}

void Trainer::Deliver(const std::string& from, std::vector<float> params) {
  if (params.size() != num_params_) return;  // the codec already checks; defence in depth
  std::lock_guard<std::mutex> lock(mu_);
  inbox_[from] = std::move(params);
}

std::optional<Snapshot> Trainer::TakeSnapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<Snapshot> out = std::move(outbox_);
  outbox_.reset();
  return out;
}

TrainerState Trainer::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void Trainer::Evaluate(uint64_t step) {
  const learn::EvalResult r = task_->Evaluate();
  bool reached = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.loss = r.loss;
    state_.accuracy = r.accuracy;
    reached = options_.target_accuracy > 0 && r.accuracy >= options_.target_accuracy;
    if (reached) state_.training = false;
  }
  metrics_->Write("eval", {{"step", step}, {"loss", r.loss}, {"accuracy", r.accuracy}});
  spdlog::info("step {} test loss {:.4f} accuracy {:.4f}", step, r.loss, r.accuracy);
  if (reached) {
    spdlog::info("target accuracy {:.3f} reached at step {}: training stops, staying in the mesh",
                 options_.target_accuracy, step);
  }
}

void Trainer::Run() {
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<float>> incoming;
  while (true) {
    uint64_t step = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!state_.training || stop_) break;
      step = state_.step;
      state_.waiting = permitted_ < step + 1;
      if (state_.waiting) {
        lock.unlock();
        notify_();  // the loop runs the barrier for step + 1
        lock.lock();
        cv_.wait(lock, [&] { return stop_ || permitted_ >= step + 1; });
        if (stop_) break;
      }
      state_.waiting = false;
      incoming.clear();
      for (auto& [from, params] : inbox_) incoming.push_back(std::move(params));
      inbox_.clear();
    }
    const auto t0 = Clock::now();
    if (!incoming.empty()) {
      std::vector<const float*> others;
      for (const auto& v : incoming) others.push_back(v.data());
      learn::MixAverage(task_->params(), others);
    }
    const float loss = task_->Step();
    const double compute = std::chrono::duration<double>(Clock::now() - t0).count();
    if (options_.slowdown > 1) {
      // Straggler emulation: the step takes `slowdown` times its compute time in total.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(compute * (options_.slowdown - 1)),
                   [&] { return stop_; });
    }
    const uint64_t done = step + 1;
    std::shared_ptr<std::vector<float>> snap;
    if (done % static_cast<uint64_t>(options_.sync_every) == 0) {
      const auto& p = task_->params();
      snap = std::make_shared<std::vector<float>>(p.data(), p.data() + p.size());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_.step = done;
      state_.mixes += incoming.size();
      state_.compute_s += compute;
      state_.train_loss = state_.train_loss == 0 ? loss : 0.95 * state_.train_loss + 0.05 * loss;
      if (snap) outbox_ = Snapshot{done, std::move(snap)};
      if (options_.max_steps > 0 && done >= options_.max_steps) state_.training = false;
    }
    if (done % static_cast<uint64_t>(options_.eval_every) == 0 ||
        (options_.max_steps > 0 && done >= options_.max_steps)) {
      Evaluate(done);
    }
    notify_();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.waiting = false;
  }
  notify_();
}

}  // namespace meshtrain::daemon
