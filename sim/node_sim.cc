#include "sim/node_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#ifdef __linux__
#include <sys/mman.h>
#endif
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/sanitizer.h"
#include "learn/mixing.h"
#include "sim/instruments.h"
#include "sim/sim_random.h"

namespace meshtrain::sim {
namespace {

constexpr TimeMs kNever = std::numeric_limits<TimeMs>::max();
constexpr size_t kMaxCachedPlans = 256;
// Drain's output buffer circulates between the nodes (TakeOutput swaps it with the node's own):
// one that a burst grew beyond this many outputs (328 bytes each) is dropped, not handed on.
constexpr size_t kMaxKeptOutputs = 8;
// wbsp: at most this many local steps per barrier wait (the daemon's TrainerOptions value).
constexpr int kMaxLocalSteps = 16;

// From this many nodes on, the simulator's memory is put on huge pages after the setup.
constexpr size_t kHugePagesMinNodes = 5000;
// threads = 2: a batch for the worker is worth its hand-over from this many events on.
constexpr size_t kAheadMinItems = 8;
constexpr uint8_t kDatagramIn = 0;  // SimEvent::input of a DatagramIn
static_assert(
    std::is_same_v<std::variant_alternative_t<kDatagramIn, node::Input>, node::DatagramIn>);

// Asks the kernel to back the process's anonymous memory (the heap and malloc's mappings: the
// nodes' state, built by the setup) with transparent huge pages, at once (MADV_COLLAPSE, Linux
// 6.1 and later, whatever the system's THP setting) and for later faults in the same mappings
// (MADV_HUGEPAGE). The run touches every node's state in a random order: with 4 KB pages
// almost every access also misses the TLB. A hint: any failure is ignored, and the results do
// not depend on it.
void AdviseHugePages() {
  // Not under ASan, whose shadow memory is a vast anonymous mapping, nor on mappings larger
  // than any heap this process builds (a reservation, mostly not backed).
#if defined(__linux__)
  if constexpr (kAddressSanitizer) return;
  constexpr uintptr_t kMaxRange = uintptr_t{64} << 30;
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0, offset = 0, inode = 0;
    char perms[8] = {}, dev[32] = {};
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %7s %lx %31s %lu %n", &lo, &hi, perms, &offset, dev, &inode,
                    &path_at) < 6) {
      continue;
    }
    if (perms[0] != 'r' || perms[1] != 'w' || inode != 0) continue;
    const char* path = line + path_at;
    // Unnamed mappings (malloc's) and the heap; not the stack or the kernel's.
    if (*path != '\n' && *path != '\0' && std::strncmp(path, "[heap]", 6) != 0) continue;
    ranges.emplace_back(lo, hi);
  }
  std::fclose(f);
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  constexpr int kMadvCollapse = 25;  // MADV_COLLAPSE, which older headers lack
  for (const auto& [lo, hi] : ranges) {
    const uintptr_t a = (lo + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t b = hi & ~(kHuge - 1);
    if (b <= a || b - a > kMaxRange) continue;
    void* p = reinterpret_cast<void*>(a);
    madvise(p, b - a, MADV_HUGEPAGE);
    madvise(p, b - a, kMadvCollapse);
  }
#endif
}

}  // namespace

NodeSim::CoreTimer::CoreTimer(NodeSim* s) : sim(s), start(s->started_ ? Ticks() : 0) {}
NodeSim::CoreTimer::~CoreTimer() {
  if (start != 0) sim->core_ticks_ += Ticks() - start;
}

NodeSim::NodeSim(const PspSimOptions& options)
    : o_(options),
      n_(options.nodes),
      crash_rng_(SubSeed(options.seed, 4)),
      rss_at_start_(ResidentBytes(true)) {
  threads_ = o_.threads != 0 ? std::min<size_t>(o_.threads, 2)
             : o_.nodes >= kAheadMinNodes && std::thread::hardware_concurrency() >= 2 ? 2
                                                                                      : 1;
}

NodeSim::~NodeSim() = default;

learn::Status NodeSim::Setup() {
  Report(SimProgress::Phase::kSetup, 0, 0);
  trainers_.resize(n_);
  steps_.assign(n_, 0);
  live_.assign(n_, 1);
  tick_at_.assign(n_, kNever);
  if (learn::Status s = SetupTasks(); !s.ok()) return s;
  net_ = std::make_unique<NodeNet>(n_, o_.net, param_bytes_, SubSeed(o_.seed, 2));
  SetupNodes();
  if (o_.membership) {
    if (learn::Status s = WarmUpMembership(); !s.ok()) return s;
  }
  if (n_ >= kHugePagesMinNodes) AdviseHugePages();
  t0_ = now_;
  end_ = t0_ + static_cast<TimeMs>(std::llround(o_.duration_s * 1000.0));
  return learn::Status::OK();
}

void NodeSim::RunUntil(TimeMs until) {
  SimEvent ev;
  while (net_->PopUntil(until, &ev)) {
    Prefetch();
    now_ = std::max(now_, ev.at);
    Handle(ev);
  }
  now_ = std::max(now_, until);
}

void NodeSim::Prefetch() const {
  // The queue's next events touch other nodes' state, each a chain of cache misses at thousands
  // of nodes. A pipeline over the next four events: the node object of the fourth, what it
  // points to and its input for the third, the views' index buckets for the input's sender for
  // the second, the views' entries for the next one. Each stage reads only lines the previous
  // stage requested an event earlier. Nodes posted to ahead_ are the worker's (it has its own
  // pipeline; Drain reads nothing of them).
  const auto node_event = [this](const SimEvent* e) {
    return e != nullptr && (e->kind == SimEvent::kInput || e->kind == SimEvent::kTick) &&
           !(ahead_ && ahead_->Posted(e->node));
  };
  if (const SimEvent* e = net_->PeekAhead(3); node_event(e)) nodes_[e->node]->Prefetch(0);
  if (const SimEvent* e = net_->PeekAhead(2); node_event(e)) {
    if (e->kind == SimEvent::kInput) net_->PrefetchInput(e->slot);
    nodes_[e->node]->Prefetch(1);
  }
  for (size_t k = 0; k < 2; ++k) {
    const SimEvent* e = net_->PeekAhead(1 - k);
    if (!node_event(e) || e->kind != SimEvent::kInput) continue;
    nodes_[e->node]->Prefetch(static_cast<int>(2 + k), net_->PeekInput(e->slot));
  }
}

void NodeSim::Arm(uint32_t i) { ArmAt(i, nodes_[i]->NextDeadline()); }

void NodeSim::ArmAt(uint32_t i, TimeMs d) {
  if (d == sync::kNoDeadline) return;
  const TimeMs at = std::max(d, now_);
  if (at < tick_at_[i]) {
    tick_at_[i] = at;
    net_->Push(at, SimEvent::kTick, i);
  }
}

void NodeSim::StepNode(uint32_t i, node::Input& in) {
  if (trace_of_[i] >= 0) {
    traces_[static_cast<size_t>(trace_of_[i])].calls.push_back(Call{now_, false, started_, in});
  }
  CoreTimer timer(this);
  nodes_[i]->StepIn(in, now_);
}

void NodeSim::TickNode(uint32_t i) {
  if (trace_of_[i] >= 0) {
    traces_[static_cast<size_t>(trace_of_[i])].calls.push_back(
        Call{now_, true, started_, node::Input{}});
  }
  CoreTimer timer(this);
  nodes_[i]->Tick(now_);
}

void NodeSim::Drain(uint32_t i) {
  // Dispatch never re-enters Drain: what it causes at a node comes back through the queue.
  nodes_[i]->TakeOutput(&outputs_);
  for (node::Output& o : outputs_) Dispatch(i, o);
  if (outputs_.capacity() > kMaxKeptOutputs) std::vector<node::Output>().swap(outputs_);
  Arm(i);
}

void NodeSim::DrainTaken(uint32_t i, std::vector<node::Output>* out, TimeMs deadline) {
  for (node::Output& o : *out) Dispatch(i, o);
  out->clear();
  if (out->capacity() > kMaxKeptOutputs) std::vector<node::Output>().swap(*out);
  ArmAt(i, deadline);
}

void NodeSim::Dispatch(uint32_t i, node::Output& out) {
  if (auto* d = std::get_if<node::SendDatagram>(&out)) {
    net_->Send(i, std::move(*d), now_);
  } else if (auto* f = std::get_if<node::SendFrame>(&out)) {
    net_->Send(i, std::move(*f), now_);
  } else if (auto* sp = std::get_if<node::SendParams>(&out)) {
    for (auto& frame : node::Endpoint::ParamFrames(*sp)) {
      net_->Send(i, node::SendFrame{sp->conn, std::move(frame)}, now_);
    }
  } else if (auto* mc = std::get_if<node::MixChunk>(&out)) {
    if (auto whole = wholes_[i].Add(*mc)) {
      node::Output o = std::move(*whole);
      Dispatch(i, o);
    }
  } else if (auto* c = std::get_if<node::Connect>(&out)) {
    net_->Open(i, *c, now_);
  } else if (auto* cl = std::get_if<node::Close>(&out)) {
    net_->Close(i, *cl, now_);
  } else if (auto* p = std::get_if<node::Permit>(&out)) {
    trainers_[i].permit = std::max(trainers_[i].permit, p->step);
    if (p->mesh_step_ms > 0) trainers_[i].mesh_step_ms = p->mesh_step_ms;
    TryCompute(i);
  } else if (auto* m = std::get_if<node::Mix>(&out)) {
    Trainer& t = trainers_[i];
    if (t.task && m->params.size() == t.task->num_params() &&
        learn::ParamsFinite(m->params.data(), m->params.size())) {
      t.inbox.push_back(std::move(m->params));
      t.inbox_steps.push_back(m->step);
    }
  } else if (auto* r = std::get_if<node::PlanRequest>(&out)) {
    SolvePlan(i, *r);
  } else if (auto* e = std::get_if<node::MemberEvent>(&out)) {
    OnMemberEvent(i, *e);
  }
  // RoundDone, ParamsReceived, LogLine, MembershipChanged, ...: nothing to drive.
}

void NodeSim::SolvePlan(uint32_t i, node::PlanRequest& req) {
  // Every node that asks with the same seed has the same view: the plan is solved once.
  std::vector<std::string> receivers;
  auto it = plans_.find(req.seed);
  const bool hit = it != plans_.end() && it->second.nodes.size() == req.candidates.size() + 1 &&
                   std::binary_search(it->second.nodes.begin(), it->second.nodes.end(), req.self);
  if (hit) {
    receivers = it->second.ReceiversOf(req.self);
  } else {
    sync::Rng rng(req.seed);
    sync::Assignment plan;
    receivers = sync::Select(sync::SelectPolicy::kSelmcast, req.self, req.candidates, req.fanout,
                             req.bandwidth, rng, {}, &plan);
    if (plans_.size() >= kMaxCachedPlans) plans_.clear();
    plans_[req.seed] = std::move(plan);
  }
  net_->Deliver(now_, i, node::PlanResult{req.id, std::move(receivers)});
}

void NodeSim::OnMemberEvent(uint32_t observer, const node::MemberEvent& e) {
  using Kind = membership::Event::Kind;
  if (e.kind != Kind::kFailed && e.kind != Kind::kLeft && e.kind != Kind::kReaped) return;
  const int64_t target = net_->IndexOf(e.member.name);
  if (target < 0 || !started_) return;  // warm-up and setup are not reported
  if (e.kind == Kind::kReaped) {
    // Forgotten while still taken for alive (bounded views): the observer holds it no more.
    if (e.member.status != membership::Status::kAlive) return;
    for (CrashTrack& c : crash_tracks_) {
      if (c.node == target && c.detected_at[observer] < 0) c.dropped[observer] = true;
    }
    return;
  }
  for (CrashTrack& c : crash_tracks_) {
    if (c.node == target && c.detected_at[observer] < 0) c.detected_at[observer] = now_;
  }
  if (live_[static_cast<size_t>(target)]) ++false_failures_;
}

void NodeSim::TryCompute(uint32_t i) {
  Trainer& t = trainers_[i];
  if (!live_[i] || t.computing || now_ >= end_) return;
  if (t.step >= t.permit) {
    // wbsp: busy while the barrier holds — local steps on the node's own data.
    if (o_.barrier.policy == sync::Policy::kWbsp && t.local_run < kMaxLocalSteps) {
      t.local = true;
      StartCompute(i);
    }
    return;
  }
  t.local_run = 0;
  t.local = false;
  // docs/contract.md "Parameter exchange": parameters that arrived since the last step are mixed at
  // this step boundary.
  if (t.task && !t.inbox.empty()) {
    // Progress-aware, as the daemon's trainer mixes (learn::MixWeight).
    std::vector<const float*> others;
    std::vector<double> weights;
    for (size_t k = 0; k < t.inbox.size(); ++k) {
      others.push_back(t.inbox[k].data());
      weights.push_back(learn::MixWeight(t.step, t.inbox_steps[k]));
    }
    learn::MixWeighted(t.task->params(), others, weights);
  }
  t.inbox.clear();
  t.inbox_steps.clear();
  StartCompute(i);
}

void NodeSim::StartCompute(uint32_t i) {
  Trainer& t = trainers_[i];
  double scale = 1.0;
  switch (o_.compute.dist) {
    case StepDist::kGamma:
      scale = UnitGamma(t.compute_rng, o_.compute.step_cv);
      break;
    case StepDist::kExponential:
      scale = -std::log(1.0 - t.compute_rng.Uniform());
      break;
    case StepDist::kConstant:
      break;
  }
  // Compute time is proportional to the batch (batch auto shrinks it).
  scale *= static_cast<double>(t.batch) / static_cast<double>(std::max(1, o_.batch));
  const auto duration = std::max<TimeMs>(1, static_cast<TimeMs>(std::llround(t.mean_ms * scale)));
  t.computing = true;
  t.started_at = now_;
  if (hosts_.empty()) {
    net_->Push(now_ + duration, SimEvent::kStepDone, i);
    return;
  }
  // The step's compute is shared with the host's other computing nodes; the slowdown's part
  // of it is a sleep afterwards.
  const double factor =
      o_.compute.slowdowns.empty() ? 1.0 : o_.compute.slowdowns[i % o_.compute.slowdowns.size()];
  const double compute = static_cast<double>(duration) / factor;
  t.sleep_ms = static_cast<double>(duration) - compute;
  AddHostJob(Job(i, kTrainJob), compute);
}

double NodeSim::HostRate(const Host& h) const {
  if (h.jobs.empty()) return 1.0;
  return std::min(1.0, o_.host_cores / static_cast<double>(h.jobs.size()));
}

double& NodeSim::WorkLeft(uint32_t job) {
  Trainer& t = trainers_[job / kJobKinds];
  switch (job % kJobKinds) {
    case kTrainJob:
      return t.cpu_left;
    case kLoopJob:
      return t.background_left;
    default:
      return t.eval_left;
  }
}

void NodeSim::AdvanceHost(Host& h) {
  const double done = static_cast<double>(now_ - h.updated) * HostRate(h);
  for (uint32_t job : h.jobs) WorkLeft(job) -= done;
  h.updated = now_;
}

void NodeSim::AddHostJob(uint32_t job, double work_ms) {
  const auto host = static_cast<uint32_t>(job / kJobKinds / o_.nodes_per_host);
  Host& h = hosts_[host];
  AdvanceHost(h);
  double& left = WorkLeft(job);
  if (std::find(h.jobs.begin(), h.jobs.end(), job) == h.jobs.end()) {
    left = 0;
    h.jobs.push_back(job);
  }
  left += work_ms;
  ScheduleHost(host);
}

void NodeSim::ScheduleHost(uint32_t host) {
  Host& h = hosts_[host];
  ++h.gen;
  if (h.jobs.empty()) return;
  double least = std::numeric_limits<double>::infinity();
  for (uint32_t job : h.jobs) least = std::min(least, WorkLeft(job));
  const double wait = std::max(0.0, least) / HostRate(h);
  net_->Push(now_ + static_cast<TimeMs>(std::ceil(wait - 1e-9)), SimEvent::kCpuDone, host, h.gen);
}

void NodeSim::OnCpuDone(uint32_t host, uint32_t gen) {
  Host& h = hosts_[host];
  if (gen != h.gen) return;  // the set of jobs changed since it was scheduled
  AdvanceHost(h);
  auto done = std::stable_partition(h.jobs.begin(), h.jobs.end(),
                                    [this](uint32_t job) { return WorkLeft(job) > 1e-6; });
  std::vector<uint32_t> finished(done, h.jobs.end());
  h.jobs.erase(done, h.jobs.end());
  ScheduleHost(host);
  for (uint32_t job : finished) {
    const uint32_t i = job / kJobKinds;
    Trainer& t = trainers_[i];
    if (job % kJobKinds == kTrainJob) {
      net_->Push(now_ + static_cast<TimeMs>(std::llround(t.sleep_ms)), SimEvent::kStepDone, i);
      continue;
    }
    if (job % kJobKinds == kEvalJob) continue;  // nobody waits for an evaluation
    // The loop is done with its oldest step: the node gets it; the next one's work begins.
    if (t.loop_queue.empty()) continue;
    LoopItem item = std::move(t.loop_queue.front());
    t.loop_queue.pop_front();
    if (!t.loop_queue.empty()) AddHostJob(job, o_.step_overhead_ms);
    HandOver(i, item.step, std::move(item.params), item.step_ms);
  }
}

void NodeSim::LeaveHost(uint32_t i) {
  if (hosts_.empty()) return;
  const auto host = static_cast<uint32_t>(i / o_.nodes_per_host);
  Host& h = hosts_[host];
  AdvanceHost(h);
  h.jobs.erase(std::remove_if(h.jobs.begin(), h.jobs.end(),
                              [i](uint32_t job) { return job / kJobKinds == i; }),
               h.jobs.end());
  ScheduleHost(host);
}

void NodeSim::FinishStep(uint32_t i) {
  Trainer& t = trainers_[i];
  if (!live_[i] || !t.computing) return;
  t.computing = false;
  if (started_) t.busy_ms += static_cast<double>(now_ - t.started_at);
  // The step's time as the daemon measures it (with hosts, slowed by sharing the cores).
  if (!t.local) t.last_ms = static_cast<double>(now_ - t.started_at);
  if (t.local) {
    if (t.task) {
      t.task->Step();
      if (t.average.enabled()) t.average.Update(t.task->params());
    }
    t.local_steps++;
    t.local_run++;
    t.local = false;
    TryCompute(i);  // the global step if the permit came, else another local step
    return;
  }
  if (o_.batch_auto && t.task && (t.step + 1) % 10 == 0) {
    // With SWIM the node core reports the peers' published compute times (Permit); without it
    // the simulator is the membership and gives the same median directly.
    const double mesh = o_.membership ? t.mesh_step_ms : OracleMeshStepMs(i);
    const int next = learn::AdaptBatchSize(t.batch, o_.batch, t.last_ms, mesh);
    if (next != t.batch) {
      t.batch = next;
      t.task->set_batch_size(next);
      t.task->optimizer().set_lr(o_.lr * static_cast<float>(next) / static_cast<float>(o_.batch));
    }
  }
  steps_[i] = ++t.step;
  std::shared_ptr<const std::vector<float>> params = no_task_params_;
  if (t.task) {
    t.task->Step();
    if (t.average.enabled()) t.average.Update(t.task->params());
    const Eigen::VectorXf& x = t.task->params();
    params = std::make_shared<const std::vector<float>>(x.data(), x.data() + x.size());
  }
  if (o_.eval_steps > 0 && t.task && t.step % o_.eval_steps == 0) {
    EvaluateAtStep(i);
    // The agent's evaluator thread: host CPU beside the trainer, which does not wait for it.
    if (!hosts_.empty() && o_.eval_cost_ms > 0) AddHostJob(Job(i, kEvalJob), o_.eval_cost_ms);
  }
  if (!hosts_.empty() && o_.step_overhead_ms > 0) {
    // The agent's loop takes the step's snapshot and progress after step_overhead_ms of host
    // CPU (its transfers and evaluations), behind the work of the steps before.
    t.loop_queue.push_back({t.step, std::move(params), t.last_ms});
    if (t.loop_queue.size() == 1) AddHostJob(Job(i, kLoopJob), o_.step_overhead_ms);
  } else {
    HandOver(i, t.step, std::move(params), t.last_ms);
  }
  TryCompute(i);  // wbsp: local steps while the barrier holds
}

void NodeSim::HandOver(uint32_t i, uint64_t step, std::shared_ptr<const std::vector<float>> params,
                       double step_ms) {
  StepNode(i, node::SnapshotIn{step, std::move(params), false, {}});
  StepNode(i, node::TrainerProgress{step, true, true, {}, static_cast<float>(step_ms)});
  Drain(i);
}

double NodeSim::OracleMeshStepMs(uint32_t self) const {
  std::vector<double> ms;
  for (uint32_t j = 0; j < n_; ++j) {
    if (j != self && live_[j] && trainers_[j].last_ms > 0) ms.push_back(trainers_[j].last_ms);
  }
  if (ms.empty()) return 0;
  auto mid = ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2);
  std::nth_element(ms.begin(), mid, ms.end());
  return *mid;
}

void NodeSim::Handle(const SimEvent& ev) {
  ++events_;
  const uint32_t i = ev.node;
  switch (ev.kind) {
    case SimEvent::kInput: {
      node::Input& in = net_->InputAt(ev.slot);
      if (ahead_ && ahead_->Posted(i, ev.slot)) {
        // An input to a live node, admitted when posted, stepped (or to be stepped here) as the
        // code below would. Admit again records a close (and cannot refuse: PostAhead).
        if (!net_->Admit(i, in)) {
          std::fprintf(stderr, "simulate: a posted input was refused at its turn\n");
          std::abort();
        }
        TimeMs deadline = 0;
        std::vector<node::Output>* out = ahead_->Take(i, &deadline);
        if (out == nullptr) StepNode(i, in);
        net_->ReleaseInput(ev.slot);
        if (out != nullptr) {
          DrainTaken(i, out, deadline);
        } else {
          Drain(i);
        }
        break;
      }
      const bool admit = live_[i] && net_->Admit(i, in);
      if (admit) StepNode(i, in);  // no Deliver before the release: `in` stays valid
      net_->ReleaseInput(ev.slot);
      if (admit) Drain(i);
      break;
    }
    case SimEvent::kTick:
      if (!live_[i] || ev.at != tick_at_[i]) break;
      tick_at_[i] = kNever;
      if (ahead_ && ahead_->Posted(i, CoreAhead::kTickSlot)) {
        TimeMs deadline = 0;
        if (std::vector<node::Output>* out = ahead_->Take(i, &deadline)) {
          DrainTaken(i, out, deadline);
          break;
        }
      }
      if (now_ >= nodes_[i]->NextDeadline()) TickNode(i);
      Drain(i);
      break;
    case SimEvent::kStepDone:
      FinishStep(i);
      break;
    case SimEvent::kCrash:
      Crash(ev.slot);
      break;
    case SimEvent::kSample:
      Sample();
      break;
    case SimEvent::kCpuDone:
      OnCpuDone(i, ev.slot);
      break;
  }
}

void NodeSim::PostAhead(const SimEvent& ev) {
  // Events handled with nothing but their own node's core: a crash reaches every node, a host's
  // compute completion the nodes of the host.
  const auto local = [](SimEvent::Kind k) {
    return k == SimEvent::kInput || k == SimEvent::kTick || k == SimEvent::kStepDone;
  };
  if (!local(ev.kind) && ev.kind != SimEvent::kSample) return;
  const SimEvent* first = nullptr;
  const size_t n = std::min(net_->Upcoming(&first), CoreAhead::kMaxItems);
  if (n < kAheadMinItems) return;
  if (++ahead_scan_ == 0) {
    ahead_mark_.assign(n_, 0);
    ahead_scan_ = 1;
  }
  if (local(ev.kind)) ahead_mark_[ev.node] = ahead_scan_;
  ahead_items_.clear();
  for (size_t k = 0; k < n; ++k) {
    const SimEvent& e = first[k];
    if (!local(e.kind)) break;
    // Only a node's first event: its later ones depend on what the first does.
    if (ahead_mark_[e.node] == ahead_scan_) continue;
    ahead_mark_[e.node] = ahead_scan_;
    if (!live_[e.node] || trace_of_[e.node] >= 0) continue;
    if (e.kind == SimEvent::kTick) {
      // A live deadline (Handle's test): the node core's Tick, if the node still wants it.
      if (e.at == tick_at_[e.node]) {
        ahead_items_.push_back(CoreAhead::Item{e.node, CoreAhead::kTickSlot, e.at, nullptr});
      }
      continue;
    }
    if (e.kind != SimEvent::kInput) continue;
    // A frame or close is admitted by the state of its connection's end, which only this node's
    // own earlier inputs change: as it is first, the answer now is the answer at its turn.
    if (e.input != kDatagramIn && !net_->Admissible(e.node, net_->InputAt(e.slot))) continue;
    ahead_items_.push_back(CoreAhead::Item{e.node, e.slot, e.at, &net_->InputAt(e.slot)});
  }
  if (ahead_items_.size() >= kAheadMinItems) ahead_->Post(ahead_items_);
}

void NodeSim::Crash(uint32_t spec) {
  std::vector<uint32_t> live;
  for (uint32_t j = 0; j < n_; ++j) {
    if (live_[j]) live.push_back(j);
  }
  const auto k = static_cast<uint32_t>(std::min(o_.crashes[spec].count, live.size()));
  for (uint32_t pick : SampleDistinct(crash_rng_, static_cast<uint32_t>(live.size()), k)) {
    const uint32_t victim = live[pick];
    LeaveHost(victim);
    live_[victim] = 0;
    trainers_[victim].computing = false;
    trainers_[victim].loop_queue.clear();
    trainers_[victim].inbox.clear();
    net_->Crash(victim, now_);
    const std::string& name = net_->name(victim);
    CrashTrack track{victim, now_, std::vector<TimeMs>(n_, -1), std::vector<bool>(n_, false),
                     std::vector<bool>(n_, false)};
    for (uint32_t j = 0; j < n_; ++j) {
      // One lookup in j's view (SWIM's member table, or the PeerViews it was fed).
      if (j != victim && live_[j]) track.knew[j] = nodes_[j]->KnowsLive(name);
    }
    crash_tracks_.push_back(std::move(track));
    if (o_.membership) continue;  // SWIM has to notice
    // Oracle failure detector: everyone who knows the victim learns it failed, at once.
    node::PeerView pv;
    pv.name = name;
    pv.addr = name;
    pv.alive = false;
    for (uint32_t j = 0; j < n_; ++j) {
      if (!crash_tracks_.back().knew[j]) continue;
      StepNode(j, pv);
      Drain(j);
    }
  }
}

PspSimResult NodeSim::Run() {
  traffic_at_t0_ = net_->traffic();
  membership_at_t0_ = net_->membership_datagrams();
  const uint64_t lost_at_t0 = net_->datagrams_lost();
  const uint64_t events_at_t0 = events_;
  for (const auto& nd : nodes_) inputs_at_t0_ += nd->stats().inputs;
  started_ = true;
  ns_at_start_ = NowNs();
  ticks_at_start_ = Ticks();
  for (uint32_t i = 0; i < n_; ++i) {
    StepNode(i, node::TrainerProgress{0, true, true, {}, 0});
    Drain(i);
  }
  for (uint32_t c = 0; c < o_.crashes.size(); ++c) {
    net_->Push(t0_ + static_cast<TimeMs>(std::llround(o_.crashes[c].at_s * 1000.0)),
               SimEvent::kCrash, 0, c);
  }
  Sample();  // t = 0; schedules the next sample
  if (threads_ > 1) {
    ahead_ = std::make_unique<CoreAhead>(&nodes_, &Ticks);
    ahead_mark_.assign(n_, 0);
  }
  SimEvent ev;
  while (net_->PopUntil(end_, &ev)) {
    if (ahead_ && !ahead_->busy()) PostAhead(ev);
    Prefetch();
    now_ = std::max(now_, ev.at);
    Handle(ev);
    if (o_.observer) o_.observer(steps_, live_);
  }
  if (ahead_) {
    // Every posted event is due before end_ and so was taken above.
    core_ticks_ += ahead_->ticks();
    ahead_posted_ = ahead_->posted_items();
    ahead_stepped_ = ahead_->worker_items();
    ahead_.reset();
  }
  now_ = end_;
  // Stopped at the target, between samples: the results end with a sample at the stop.
  if (result_.series.empty() ||
      result_.series.back().t_s < static_cast<double>(end_ - t0_) / 1000.0) {
    Sample();
  }
  PspSimResult r = Collect();
  ReplayAlone(&r);
  r.events = events_ - events_at_t0;
  r.datagrams_lost = net_->datagrams_lost() - lost_at_t0;
  return r;
}

}  // namespace meshtrain::sim
