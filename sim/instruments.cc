// The simulator's measuring instruments: progress reports and samples, the evaluation of the
// nodes' errors, the collection of a run's results and costs, and the replays that time node
// cores alone (replay_alone).
#include "sim/instruments.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "sim/node_sim.h"
#include "sim/sim_random.h"

namespace meshtrain::sim {
namespace {

// replay_alone: replays of each traced node (the fastest counts).
constexpr int kReplays = 5;

}  // namespace

uint64_t ResidentBytes(bool trim) {
#ifdef __GLIBC__
  if (trim) malloc_trim(0);
#else
  (void)trim;
#endif
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * 4096ULL : 0;
}

void NodeSim::Report(SimProgress::Phase phase, double t_s, uint64_t median_step) const {
  if (!o_.progress) return;
  SimProgress p;
  p.phase = phase;
  p.nodes = n_;
  p.t_s = t_s;
  p.duration_s = o_.duration_s;
  p.median_step = median_step;
  o_.progress(p);
}

void NodeSim::ReplayAlone(PspSimResult* r) {
  // The same inputs at the same times give a node core the same behaviour (it reads no clock
  // and draws from its seeded RNG): each replay repeats what the node did in the run, with only
  // its own state in the cache. The outputs are dropped (their effects are already in the
  // inputs that follow).
  std::vector<node::Output> out;
  for (const Trace& tr : traces_) {
    int64_t best = std::numeric_limits<int64_t>::max();
    uint64_t steps = 0;
    bool same = true;
    for (int rep = 0; rep < kReplays && same; ++rep) {
      node::Node nd(tr.config, tr.created);
      nd.Start(tr.created);
      nd.TakeOutput(&out);
      int64_t ns = 0;
      for (const Call& c : tr.calls) {
        if (c.tick) {
          const int64_t t0 = NowNs();
          nd.Tick(c.now);
          if (c.training) ns += NowNs() - t0;
        } else {
          node::Input in = c.in;
          const int64_t t0 = NowNs();
          nd.Step(std::move(in), c.now);
          if (c.training) ns += NowNs() - t0;
        }
        nd.TakeOutput(&out);
      }
      // A replay that did not retrace the run (it would be a bug) measures nothing.
      same = nd.step() == nodes_[tr.node]->step() &&
             nd.stats().inputs == nodes_[tr.node]->stats().inputs;
      best = std::min(best, ns);
      steps = nd.step();
    }
    if (!same) continue;
    r->alone_core_s += static_cast<double>(best) / 1e9;
    r->alone_steps += steps;
    ++r->alone_nodes;
  }
}

void NodeSim::EvaluateAtStep(uint32_t i) {
  Trainer& t = trainers_[i];
  if (t.reached || !started_ || NodeError(i) > o_.target_error) return;
  t.reached = true;
  for (uint32_t j = 0; j < n_; ++j) {
    if (live_[j] && !trainers_[j].reached) return;
  }
  ReachedTargetAll();
}

void NodeSim::ReachedTargetAll() {
  if (result_.time_to_target_all_s) return;
  result_.time_to_target_all_s = static_cast<double>(now_ - t0_) / 1000.0;
  if (o_.stop_at_target) end_ = now_;
}

double NodeSim::ErrorOf(const learn::Task& task, const float* params) const {
  const learn::EvalResult r = task.EvaluateAt(params);
  return classifier_ ? 1.0 - r.accuracy : r.loss;
}

double NodeSim::NodeError(uint32_t i) const {
  const Trainer& t = trainers_[i];
  const bool averaged = t.average.enabled() && t.average.value().size() == t.task->params().size();
  return ErrorOf(*t.task, averaged ? t.average.value().data() : t.task->params().data());
}

void NodeSim::Sample() {
  TimePoint tp;
  tp.t_s = static_cast<double>(now_ - t0_) / 1000.0;
  std::vector<uint64_t> steps;
  steps.reserve(n_);
  for (uint32_t j = 0; j < n_; ++j) {
    if (live_[j]) steps.push_back(steps_[j]);
  }
  std::sort(steps.begin(), steps.end());
  tp.min = Quantile(steps, 0);
  tp.p10 = Quantile(steps, 0.1);
  tp.median = Quantile(steps, 0.5);
  tp.p90 = Quantile(steps, 0.9);
  tp.max = Quantile(steps, 1);
  const TimeMs rel = now_ - t0_;
  const auto eval_ms = static_cast<TimeMs>(std::llround(std::max(0.001, o_.eval_every_s) * 1000));
  if (eval_task_ && (rel % eval_ms == 0 || now_ >= end_)) {
    double sum = 0, worst = 0;
    size_t live = 0;
    Eigen::VectorXd avg = Eigen::VectorXd::Zero(eval_task_->params().size());
    for (uint32_t j = 0; j < n_; ++j) {
      if (!live_[j]) continue;
      const double error = NodeError(j);
      sum += error;
      worst = std::max(worst, error);
      avg += trainers_[j].task->params().cast<double>();
      ++live;
    }
    if (live > 0) {
      tp.error = sum / static_cast<double>(live);
      tp.error_max = worst;
      eval_task_->params() = (avg / static_cast<double>(live)).cast<float>();
      tp.error_avg_model = ErrorOf(*eval_task_, eval_task_->params().data());
      if (!result_.time_to_target_s && *tp.error <= o_.target_error) {
        result_.time_to_target_s = tp.t_s;
      }
      if (o_.eval_steps == 0 && !result_.time_to_target_all_s && worst <= o_.target_error) {
        ReachedTargetAll();
      }
    }
  }
  result_.series.push_back(tp);
  if (o_.record_nodes && rel % 1000 == 0) result_.node_steps.push_back(steps_);  // whole s
  if (now_ < end_) net_->Push(std::min(end_, now_ + 1000), SimEvent::kSample, 0);
  Report(SimProgress::Phase::kTraining, tp.t_s, tp.median);
}

CrashReport NodeSim::ReportCrash(const CrashTrack& c) const {
  CrashReport cr;
  cr.node = net_->name(c.node);
  cr.crash_at_s = static_cast<double>(c.at - t0_) / 1000.0;
  TimeMs first = -1, last = -1;
  for (uint32_t j = 0; j < n_; ++j) {
    if (j == c.node || !live_[j]) continue;
    if (!c.knew[j]) {
      ++cr.unaware;
      continue;
    }
    ++cr.observers;
    const TimeMs d = c.detected_at[j];
    if (d < 0) {
      cr.dropped += c.dropped[j];
      continue;
    }
    ++cr.detected;
    first = first < 0 ? d : std::min(first, d);
    last = std::max(last, d);
  }
  if (first >= 0) cr.first_detect_s = static_cast<double>(first - c.at) / 1000.0;
  if (cr.detected + cr.dropped == cr.observers && last >= 0) {
    cr.all_detect_s = static_cast<double>(last - c.at) / 1000.0;
  }
  return cr;
}

PspSimResult NodeSim::Collect() {
  PspSimResult& r = result_;
  r.policy = o_.barrier.policy;
  r.sample = o_.barrier.sample;
  r.staleness = o_.barrier.staleness;
  r.nodes = n_;
  r.view = view_;
  r.duration_s = static_cast<double>(end_ - t0_) / 1000.0;  // shorter with stop_at_target
  std::vector<uint64_t> live_steps;
  double wait = 0, busy = 0;
  uint64_t messages = 0, bytes = 0;
  for (uint32_t i = 0; i < n_; ++i) {
    r.final_steps.push_back(steps_[i]);
    messages += net_->traffic()[i].messages - traffic_at_t0_[i].messages;
    bytes += net_->traffic()[i].bytes - traffic_at_t0_[i].bytes;
    if (const sync::BarrierCore* b = nodes_[i]->barrier()) {
      r.rounds += b->stats().rounds;
      r.queries += b->stats().queries;
      r.replies += b->stats().replies;
      r.timeouts += b->stats().timeouts;
    }
    if (!live_[i]) continue;
    live_steps.push_back(steps_[i]);
    wait += nodes_[i]->BarrierWaitSeconds(end_);
    busy += trainers_[i].busy_ms / 1000.0;
    r.local_steps += trainers_[i].local_steps;
  }
  r.live_nodes = live_steps.size();
  std::sort(live_steps.begin(), live_steps.end());
  r.steps_min = Quantile(live_steps, 0);
  r.steps_median = Quantile(live_steps, 0.5);
  r.steps_max = Quantile(live_steps, 1);
  r.steps_p10 = Quantile(live_steps, 0.1);
  r.steps_p90 = Quantile(live_steps, 0.9);
  if (r.live_nodes > 0) {
    r.wait_share = wait / static_cast<double>(r.live_nodes) / std::max(1e-9, r.duration_s);
    r.compute_share =
        std::min(1.0, busy / static_cast<double>(r.live_nodes) / std::max(1e-9, r.duration_s));
  }
  r.membership_messages = net_->membership_datagrams() - membership_at_t0_;
  r.messages_per_node = static_cast<double>(messages) / static_cast<double>(n_);
  r.bytes_per_node = static_cast<double>(bytes) / static_cast<double>(n_);
  if (eval_task_) {
    r.node_errors.assign(n_, std::numeric_limits<double>::quiet_NaN());
    for (uint32_t i = 0; i < n_; ++i) {
      if (live_[i]) r.node_errors[i] = NodeError(i);
    }
  }
  if (!r.series.empty() && r.series.back().error) {
    r.error = r.series.back().error;
    r.error_avg_model = r.series.back().error_avg_model;
  }
  for (const CrashTrack& c : crash_tracks_) r.crashes.push_back(ReportCrash(c));
  r.param_messages = net_->param_frames();
  r.false_failures = false_failures_;
  for (uint32_t i = 0; i < n_; ++i) {
    const node::NodeStats& st = nodes_[i]->stats();
    r.work += st.inputs + st.peer_visits;
    r.peer_visits += st.peer_visits;
    if (const sync::BarrierCore* b = nodes_[i]->barrier()) {
      r.work += b->stats().visited;
      r.peer_visits += b->stats().visited;
      r.sample_visits += b->stats().sample_visits;
    }
  }
  r.work -= inputs_at_t0_;
  r.view_entries = o_.membership ? 0 : static_cast<uint64_t>(n_) * view_;
  const uint64_t ticks = Ticks() - ticks_at_start_;
  const double ns = static_cast<double>(NowNs() - ns_at_start_);
  r.threads = threads_;
  r.ahead_posted = ahead_posted_;
  r.ahead_stepped = ahead_stepped_;
  r.node_core_s =
      ticks == 0 ? 0 : static_cast<double>(core_ticks_) * (ns / 1e9) / static_cast<double>(ticks);
  const uint64_t rss = ResidentBytes();
  r.mem_bytes_per_node =
      rss > rss_at_start_ ? static_cast<double>(rss - rss_at_start_) / static_cast<double>(n_) : 0;
  return std::move(result_);
}

}  // namespace meshtrain::sim
