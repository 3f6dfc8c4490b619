#include "sim/node_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef __linux__
#include <sys/mman.h>
#endif
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "base/sanitizer.h"
#include "learn/mixing.h"
#include "sim/sim_random.h"

namespace meshtrain::sim {
namespace {

constexpr TimeMs kNever = std::numeric_limits<TimeMs>::max();
constexpr size_t kParamHeaderBytes = 64;
constexpr size_t kDefaultParamBytes = 100000;
// Automatic partial views: full membership up to this many nodes, else this many peers.
constexpr size_t kAutoFullViewMax = 2000;
constexpr size_t kAutoPartialView = 500;
constexpr TimeMs kMembershipWarmupMaxMs = 300000;
constexpr TimeMs kWarmupCheckMs = 500;
constexpr size_t kMaxCachedPlans = 256;
// Drain's output buffer circulates between the nodes (TakeOutput swaps it with the node's own):
// one that a burst grew beyond this many outputs (328 bytes each) is dropped, not handed on.
constexpr size_t kMaxKeptOutputs = 8;
// Without a task the snapshot is a token: the network charges param_bytes for it.
constexpr size_t kNoTaskFloats = 4;
// wbsp: at most this many local steps per barrier wait (the daemon's TrainerOptions value).
constexpr int kMaxLocalSteps = 16;
// replay_alone: nodes traced, and replays of each (the fastest counts).
constexpr size_t kTracedNodes = 4;
constexpr int kReplays = 5;

// Resident set size of this process, bytes (0 where /proc is unavailable). `trim`: first hand
// memory freed by an earlier run back to the system, so that a run's growth is its own.
uint64_t ResidentBytes(bool trim = false) {
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

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A cheap monotonic counter: the time-stamp counter where there is one (constant-rate on the
// x86 CPUs of the last decade), else nanoseconds.
uint64_t Ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(NowNs());
#endif
}

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

learn::Status NodeSim::SetupTasks() {
  // Node speeds: drawn from streams that do not depend on the policy (common random numbers).
  learn::Rng speed_rng(SubSeed(o_.seed, 7));
  std::vector<double> factor(n_, 1.0);
  if (o_.compute.straggler_fraction > 0) {
    const auto k = static_cast<uint32_t>(
        std::llround(o_.compute.straggler_fraction * static_cast<double>(n_)));
    for (uint32_t s : SampleDistinct(speed_rng, static_cast<uint32_t>(n_), k)) {
      factor[s] = o_.compute.straggler_factor;
    }
  }
  learn::TaskOptions topts;
  if (o_.task == "synthetic") {
    learn::SyntheticOptions so;
    so.dim = o_.task_dim;
    so.train_samples = o_.task_train_samples;
    so.test_samples = o_.task_test_samples;
    so.data_seed = SubSeed(o_.seed, 8);
    data_ = learn::MakeSyntheticData(so);
    topts.synthetic_data = data_;
    topts.synthetic.dim = o_.task_dim;
  } else if (o_.task != "none") {
    // A Fashion-MNIST model: one copy of the data for every node, the test set cut to the
    // images that are evaluated (each node's model is evaluated at every sample).
    auto loaded = learn::LoadFashionMnist(o_.dataset_dir);
    if (!loaded.ok()) return loaded.status();
    auto data = std::make_shared<learn::FashionMnist>(*loaded.value());
    learn::ImageSet& test = data->test;
    if (o_.eval_samples > 0 && o_.eval_samples < test.size()) {
      test.labels.resize(o_.eval_samples);
      test.pixels.resize(o_.eval_samples * test.dim());
    }
    topts.dataset_dir = o_.dataset_dir;
    topts.fashion_mnist = std::move(data);
    classifier_ = true;
  }
  const bool has_task = o_.task != "none";
  const size_t shards = o_.shards == 0 ? n_ : o_.shards;
  topts.batch_size = o_.batch;
  topts.lr = o_.lr;
  topts.momentum = o_.momentum;
  topts.init_seed = SubSeed(o_.seed, 9);  // the same for every node (SPEC §6 mixing)
  for (size_t i = 0; i < n_; ++i) {
    Trainer& t = trainers_[i];
    t.compute_rng = learn::Rng(SubSeed(o_.seed, 10, i));
    t.mean_ms = o_.compute.step_ms * UnitGamma(speed_rng, o_.compute.node_cv) * factor[i];
    if (!o_.compute.slowdowns.empty()) {
      t.mean_ms *= o_.compute.slowdowns[i % o_.compute.slowdowns.size()];
    }
    t.batch = o_.batch;
    if (has_task) {
      topts.data_seed = SubSeed(o_.seed, 11, i);
      if (classifier_) {
        topts.shard = {static_cast<uint32_t>(i % shards), static_cast<uint32_t>(shards)};
      }
      auto task = learn::MakeTask(o_.task, topts);
      if (!task.ok()) return task.status();
      t.task = std::move(task).value();
      t.average = learn::ParamAverage(o_.eval_average);
      if (t.average.enabled()) t.average.Reset(t.task->params());
    }
  }
  if (has_task) {
    topts.shard = {};
    auto task = learn::MakeTask(o_.task, topts);
    if (!task.ok()) return task.status();
    eval_task_ = std::move(task).value();
    param_bytes_ =
        o_.param_bytes != 0 ? o_.param_bytes : 4 * eval_task_->num_params() + kParamHeaderBytes;
  } else {
    param_bytes_ = o_.param_bytes != 0 ? o_.param_bytes : kDefaultParamBytes;
    no_task_params_ = std::make_shared<const std::vector<float>>(kNoTaskFloats, 0.0f);
  }
  if (o_.nodes_per_host > 0) hosts_.resize((n_ + o_.nodes_per_host - 1) / o_.nodes_per_host);
  return learn::Status::OK();
}

void NodeSim::SetupNodes() {
  // With SWIM (--membership) a partial view is SWIM's bounded view (membership::Config::
  // max_members): the node's barrier and receivers come from it, as in an agent.
  full_view_ = NeedsFullView(o_.barrier.policy) || (o_.view == 0 && n_ <= kAutoFullViewMax) ||
               o_.view + 1 >= n_;
  view_ = full_view_ ? n_ - 1 : (o_.view == 0 ? kAutoPartialView : o_.view);
  const membership::Config profile =
      membership::Config::Profile(o_.profile).value_or(membership::Config::Lan());
  nodes_.reserve(n_);
  // replay_alone: up to kTracedNodes nodes, spread over the indices (without a task: a task's
  // inputs carry its parameters, too much to keep).
  trace_of_.assign(n_, -1);
  if (o_.replay_alone && o_.task == "none") {
    for (size_t k = 0; k < std::min(n_, kTracedNodes); ++k) {
      const size_t i = k * n_ / std::min(n_, kTracedNodes);
      trace_of_[i] = static_cast<int32_t>(traces_.size());
      traces_.push_back(Trace{static_cast<uint32_t>(i), {}, 0, {}});
    }
  }
  // One table of names for every node's view: node j's name has id j.
  auto names = std::make_shared<sync::NameTable>();
  for (size_t i = 0; i < n_; ++i) names->Intern(net_->name(static_cast<uint32_t>(i)));
  for (size_t i = 0; i < n_; ++i) {
    node::NodeConfig cfg;
    cfg.name = net_->name(static_cast<uint32_t>(i));
    cfg.addr = cfg.name;
    cfg.data_addr = cfg.name;
    cfg.membership = profile;
    cfg.external_membership = !o_.membership;
    if (cfg.external_membership) cfg.names = names;
    // The node runs the barrier with membership's probe timeout (one --probe-timeout in the
    // daemon). Without SWIM that timeout is the simulator's --probe-timeout; with SWIM, the
    // profile's, so that failure detection keeps its timing.
    if (cfg.external_membership) cfg.membership.probe_timeout = o_.barrier.probe_timeout;
    if (!full_view_) cfg.membership.max_members = view_;
    cfg.seed = SubSeed(o_.seed, 12, i);
    cfg.training = true;
    cfg.barrier = o_.barrier;
    cfg.select = o_.select;
    cfg.fanout = o_.fanout;
    cfg.uplink_limit_mbps = o_.net.bandwidth_mbps;
    cfg.downlink_limit_mbps = o_.net.bandwidth_mbps;
    cfg.expected_params = eval_task_ ? static_cast<uint32_t>(eval_task_->num_params())
                                     : static_cast<uint32_t>(kNoTaskFloats);
    if (o_.membership && i > 0) cfg.join = {net_->name(0)};
    if (trace_of_[i] >= 0) {
      Trace& tr = traces_[static_cast<size_t>(trace_of_[i])];
      tr.config = cfg;
      tr.created = now_;
    }
    nodes_.push_back(std::make_unique<node::Node>(std::move(cfg), now_));
  }
  for (uint32_t i = 0; i < n_; ++i) {
    nodes_[i]->Start(now_);
    Drain(i);
  }
  if (o_.membership) return;

  // External membership: every node learns its view, every peer at step 0.
  learn::Rng view_rng(SubSeed(o_.seed, 6));
  node::PeerView pv;
  pv.uplink_mbps = static_cast<float>(o_.net.bandwidth_mbps);
  pv.downlink_mbps = pv.uplink_mbps;
  std::vector<uint32_t> peers;
  for (uint32_t i = 0; i < n_; ++i) {
    peers.clear();
    if (full_view_) {
      for (uint32_t j = 0; j < n_; ++j) {
        if (j != i) peers.push_back(j);
      }
    } else {
      for (uint32_t j :
           SampleDistinct(view_rng, static_cast<uint32_t>(n_ - 1), static_cast<uint32_t>(view_))) {
        peers.push_back(j >= i ? j + 1 : j);
      }
    }
    for (uint32_t j : peers) {
      pv.name = net_->name(j);
      pv.addr = pv.name;
      StepNode(i, pv);
      Drain(i);  // a short output vector stays in cache
    }
  }
}

learn::Status NodeSim::WarmUpMembership() {
  // Every node joins through n0; training starts once every view is complete (every member,
  // or a bounded view full).
  const auto converged = [this] {
    for (const auto& nd : nodes_) {
      if (nd->PeersAlive() < view_) return false;
    }
    return true;
  };
  while (!converged()) {
    if (now_ >= kMembershipWarmupMaxMs) {
      return learn::Status::InvalidArgument("membership did not converge within " +
                                            std::to_string(kMembershipWarmupMaxMs / 1000) +
                                            " virtual seconds of warm-up");
    }
    RunUntil(now_ + kWarmupCheckMs);
    Report(SimProgress::Phase::kWarmUp, static_cast<double>(now_) / 1000.0, 0);
  }
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
  // SPEC §6: parameters that arrived since the last step are mixed at this step boundary.
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
  for (const CrashTrack& c : crash_tracks_) {
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
    r.crashes.push_back(cr);
  }
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
