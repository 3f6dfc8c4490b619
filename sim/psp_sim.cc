#include "sim/psp_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <queue>
#include <utility>

#include "learn/mixing.h"
#include "learn/rng.h"
#include "learn/task.h"
#include "membership/swim.h"
#include "sim/swim_cluster.h"

namespace meshtrain::sim {
namespace {

using sync::Decision;
using sync::Policy;

// Sizes of the small messages, bytes on the wire (envelope included).
constexpr size_t kQueryBytes = 48;
constexpr size_t kReplyBytes = 56;
constexpr size_t kAnnounceBytes = 48;
constexpr size_t kParamHeaderBytes = 64;
constexpr size_t kDefaultParamBytes = 100000;
// Automatic partial views: full membership up to this many nodes, else this many peers.
constexpr size_t kAutoFullViewMax = 2000;
constexpr size_t kAutoPartialView = 500;
// bsp/ssp/dssp need a full view per node: n² entries. Beyond this the run would need gigabytes.
constexpr size_t kMaxFullViewNodes = 4000;
constexpr int kMaxRetransmits = 10;
constexpr TimeMs kMembershipWarmupMaxMs = 300000;

// SplitMix64 finalizer: independent, reproducible sub-seeds.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
uint64_t SubSeed(uint64_t seed, uint64_t stream, uint64_t index = 0) {
  return Mix(Mix(seed ^ (stream * 0x51ed2701ULL)) + index);
}

// Gamma(shape, 1) by Marsaglia & Tsang (2000), from learn::Rng so that draws are the same on
// every standard library (std::gamma_distribution's algorithm is unspecified).
double Gamma(learn::Rng& rng, double shape) {
  if (shape < 1.0) {
    double u;
    do {
      u = rng.Uniform();
    } while (u <= 0.0);
    return Gamma(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.Normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = rng.Uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

// A draw with mean 1 and coefficient of variation `cv` (1 when cv ≤ 0).
double UnitGamma(learn::Rng& rng, double cv) {
  if (cv <= 0) return 1.0;
  const double shape = 1.0 / (cv * cv);
  return Gamma(rng, shape) / shape;
}

// k distinct values of [0, n) (k ≤ n), ascending. Floyd's algorithm.
std::vector<uint32_t> SampleDistinct(learn::Rng& rng, uint32_t n, uint32_t k) {
  std::vector<uint32_t> out;
  if (k >= n) {
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  std::vector<bool> chosen(n, false);
  for (uint32_t j = n - k; j < n; ++j) {
    const auto t = static_cast<uint32_t>(rng.UniformInt(uint64_t{j} + 1));
    chosen[chosen[t] ? j : t] = true;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (chosen[i]) out.push_back(i);
  }
  return out;
}

uint64_t Quantile(const std::vector<uint64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
}

bool NeedsFullView(Policy p) {
  return p == Policy::kBsp || p == Policy::kSsp || p == Policy::kDssp;
}

// One discrete event. Plain data, so the heap stays cheap at millions of events.
struct Event {
  enum Kind : uint8_t {
    kStepDone,  // `to` finished computing a step
    kRetry,     // barrier deadline of `to` (valid while aux == its wake token)
    kQuery,     // progress query from `from` to `to`, sequence aux
    kReply,     // answer to query aux: `from` has completed `step`
    kAnnounce,  // `from` completed `step` (bsp/ssp/dssp progress broadcast)
    kParams,    // parameter transfer from `from` (payload aux) at its `step`
    kCrash,     // crash spec aux happens
    kSample,    // record the step distribution (and error)
  };
  TimeMs at;
  uint64_t seq;
  uint64_t step;
  uint32_t to;
  uint32_t from;
  uint32_t aux;
  Kind kind;
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.at != b.at ? a.at > b.at : a.seq > b.seq;
  }
};

class PspSim {
 public:
  explicit PspSim(const PspSimOptions& o)
      : o_(o),
        barrier_rng_(SubSeed(o.seed, 1)),
        net_rng_(SubSeed(o.seed, 2)),
        select_rng_(SubSeed(o.seed, 3)),
        crash_rng_(SubSeed(o.seed, 4)) {}

  learn::Status Setup();
  PspSimResult Run();

 private:
  struct Node {
    std::unique_ptr<sync::BarrierCore> core;
    learn::Rng compute_rng{0};
    double mean_ms = 0;
    uint64_t step = 0;
    bool alive = true;
    bool computing = false;
    uint32_t wake_token = 0;
    double up_free = 0;    // ms at which the uplink is idle again
    double down_free = 0;  // same for the downlink
    uint64_t messages = 0;
    uint64_t bytes = 0;
    std::vector<uint32_t> peers;     // live peers it knows, sorted (view ∩ not removed)
    std::vector<uint32_t> original;  // its view at the start, sorted (re-admission after refute)
    std::vector<uint32_t> inbox;     // payload ids to mix at the next step start
    std::unique_ptr<learn::Task> task;
  };
  struct Payload {
    std::vector<float> data;
    uint32_t refs = 0;
  };
  struct CrashTrack {
    uint32_t node;
    TimeMs at;
    std::vector<TimeMs> detected_at;  // per observer; -1 = not yet
    // Per observer: it knew the victim when it crashed. A node still waiting to hear of a
    // late joiner when that joiner crashes never learns of it at all (SWIM ignores suspect and
    // dead news about unknown members, as memberlist does), so it has nothing to detect.
    std::vector<bool> knew;
  };

  void Push(TimeMs at, Event::Kind kind, uint32_t to, uint32_t from = 0, uint64_t step = 0,
            uint32_t aux = 0) {
    queue_.push(Event{std::max(at, now_), seq_++, step, to, from, aux, kind});
  }
  void Handle(const Event& ev);
  void TryStart(uint32_t i);
  void StartStep(uint32_t i);
  void FinishStep(uint32_t i);
  void SendQueries(uint32_t i);
  void SendParams(uint32_t i);
  std::vector<uint32_t> Receivers(uint32_t i);
  void RefreshSelmcastPlan();
  void Crash(uint32_t spec);
  // Observer drops `target` from its view (failure detected, or oracle). Re-checks a waiter.
  void RemovePeer(uint32_t observer, uint32_t target);
  void ReadmitPeer(uint32_t observer, uint32_t target);
  void OnMembershipEvent(size_t observer, TimeMs at, const membership::Event& e);
  void Sample();
  bool Knows(uint32_t observer, uint32_t peer) const {
    const auto& p = nodes_[observer].peers;
    return std::binary_search(p.begin(), p.end(), peer);
  }

  TimeMs Latency() {
    return static_cast<TimeMs>(
        std::llround(o_.net.latency_ms + net_rng_.Uniform() * std::max(0.0, o_.net.jitter_ms)));
  }
  bool Lost() { return o_.net.loss > 0 && net_rng_.Uniform() < o_.net.loss; }
  // A datagram; false if lost. Counts at the sender.
  bool SendDatagram(uint32_t from, size_t bytes, TimeMs* arrival) {
    nodes_[from].messages++;
    nodes_[from].bytes += bytes;
    if (Lost()) {
      ++datagrams_lost_;
      return false;
    }
    *arrival = now_ + Latency();
    return true;
  }
  // A stream message: never lost; each lost attempt costs a retransmission timeout.
  TimeMs StreamDelay() {
    double extra = 0;
    for (int k = 0; k < kMaxRetransmits && Lost(); ++k) extra += o_.net.retransmit_ms;
    return Latency() + static_cast<TimeMs>(std::llround(extra));
  }
  uint32_t NewPayload(const Eigen::VectorXf& params, uint32_t refs);
  void Release(uint32_t id);
  std::optional<uint32_t> IndexOf(const std::string& name) const;

  PspSimOptions o_;
  sync::Rng barrier_rng_;
  learn::Rng net_rng_;
  learn::Rng select_rng_;
  learn::Rng crash_rng_;
  std::vector<std::string> names_;
  std::vector<Node> nodes_;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  uint64_t seq_ = 0;
  TimeMs now_ = 0;
  TimeMs t0_ = 0;  // training starts (after the membership warm-up)
  TimeMs end_ = 0;
  uint64_t events_ = 0;
  uint64_t datagrams_lost_ = 0;
  uint64_t param_messages_ = 0;
  size_t view_ = 0;

  std::vector<Payload> payloads_;
  std::vector<uint32_t> free_payloads_;

  std::shared_ptr<const learn::SyntheticData> data_;
  std::unique_ptr<learn::Task> eval_task_;  // evaluates the averaged model
  size_t param_bytes_ = 0;

  // selmcast: one global plan per virtual second.
  TimeMs plan_second_ = -1;
  std::vector<std::vector<uint32_t>> plan_;

  std::unique_ptr<SwimCluster> cluster_;
  uint64_t swim_datagrams_at_t0_ = 0;
  uint64_t swim_bytes_at_t0_ = 0;
  uint64_t false_failures_ = 0;
  std::vector<CrashTrack> crash_tracks_;

  PspSimResult result_;
};

learn::Status PspSim::Setup() {
  const size_t n = o_.nodes;
  names_.resize(n);
  for (size_t i = 0; i < n; ++i) names_[i] = "n" + std::to_string(i);  // as SwimCluster names
  nodes_.resize(n);

  // Membership warm-up: boot SWIM through node 0 and wait for full, converged views.
  if (o_.membership) {
    SwimClusterOptions so;
    so.nodes = n;
    so.config = *membership::Config::Profile(o_.profile);
    so.seed = SubSeed(o_.seed, 5);
    const auto lat = static_cast<TimeMs>(std::llround(o_.net.latency_ms));
    so.latency =
        LinkLatency{std::max<TimeMs>(1, lat), static_cast<TimeMs>(std::llround(o_.net.jitter_ms))};
    cluster_ = std::make_unique<SwimCluster>(so);
    cluster_->net().set_loss(o_.net.loss);
    cluster_->start_all_via(0, 1);
    SwimCluster& c = *cluster_;
    const SwimCluster::RunResult r =
        c.run_until([&c] { return c.converged(); }, kMembershipWarmupMaxMs,
                    std::numeric_limits<uint64_t>::max(), 500);
    if (!r.ok) {
      return learn::Status::InvalidArgument("membership did not converge within " +
                                            std::to_string(kMembershipWarmupMaxMs / 1000) +
                                            " virtual seconds of warm-up");
    }
    t0_ = c.clock().now();
    swim_datagrams_at_t0_ = c.net().stats().datagrams_sent;
    swim_bytes_at_t0_ = c.net().stats().bytes_sent;
    c.set_event_hook([this](size_t observer, TimeMs at, const membership::Event& e) {
      OnMembershipEvent(observer, at, e);
    });
  }
  now_ = t0_;
  end_ = t0_ + static_cast<TimeMs>(std::llround(o_.duration_s * 1000.0));

  // Views.
  const bool full = NeedsFullView(o_.barrier.policy) || (o_.view == 0 && n <= kAutoFullViewMax) ||
                    o_.view >= n - 1;
  view_ = full ? n - 1 : (o_.view == 0 ? kAutoPartialView : o_.view);
  learn::Rng view_rng(SubSeed(o_.seed, 6));

  // Node speeds: drawn from streams that do not depend on the policy (common random numbers).
  learn::Rng speed_rng(SubSeed(o_.seed, 7));
  std::vector<double> factor(n, 1.0);
  if (o_.compute.straggler_fraction > 0) {
    const auto k =
        static_cast<uint32_t>(std::llround(o_.compute.straggler_fraction * static_cast<double>(n)));
    for (uint32_t s : SampleDistinct(speed_rng, static_cast<uint32_t>(n), k)) {
      factor[s] = o_.compute.straggler_factor;
    }
  }

  if (o_.task == "synthetic") {
    learn::SyntheticOptions so;
    so.dim = o_.task_dim;
    so.train_samples = o_.task_train_samples;
    so.test_samples = o_.task_test_samples;
    so.data_seed = SubSeed(o_.seed, 8);
    data_ = learn::MakeSyntheticData(so);
  }
  learn::TaskOptions topts;
  topts.synthetic_data = data_;
  topts.synthetic.dim = o_.task_dim;
  topts.batch_size = o_.batch;
  topts.lr = o_.lr;
  topts.momentum = o_.momentum;
  topts.init_seed = SubSeed(o_.seed, 9);  // the same for every node (SPEC §6 mixing)

  for (size_t i = 0; i < n; ++i) {
    Node& node = nodes_[i];
    node.core = std::make_unique<sync::BarrierCore>(o_.barrier, names_[i]);
    node.compute_rng = learn::Rng(SubSeed(o_.seed, 10, i));
    node.mean_ms = o_.compute.step_ms * UnitGamma(speed_rng, o_.compute.node_cv) * factor[i];
    if (full) {
      node.peers.reserve(n - 1);
      for (size_t j = 0; j < n; ++j) {
        if (j != i) node.peers.push_back(static_cast<uint32_t>(j));
      }
    } else {
      // A random partial view: view_ of the n − 1 others.
      for (uint32_t j :
           SampleDistinct(view_rng, static_cast<uint32_t>(n - 1), static_cast<uint32_t>(view_))) {
        node.peers.push_back(j >= i ? j + 1 : j);
      }
    }
    node.original = node.peers;
    // Every peer starts at step 0, as the node learned from membership when it joined.
    for (uint32_t j : node.peers) node.core->OnProgress(names_[j], 0, t0_);
    if (data_) {
      topts.data_seed = SubSeed(o_.seed, 11, i);
      auto task = learn::MakeTask("synthetic", topts);
      if (!task.ok()) return task.status();
      node.task = std::move(task).value();
    }
  }
  if (data_) {
    auto task = learn::MakeTask("synthetic", topts);
    if (!task.ok()) return task.status();
    eval_task_ = std::move(task).value();
    param_bytes_ =
        o_.param_bytes != 0 ? o_.param_bytes : 4 * eval_task_->num_params() + kParamHeaderBytes;
  } else {
    param_bytes_ = o_.param_bytes != 0 ? o_.param_bytes : kDefaultParamBytes;
  }
  return learn::Status::OK();
}

std::optional<uint32_t> PspSim::IndexOf(const std::string& name) const {
  if (name.size() < 2 || name[0] != 'n') return std::nullopt;
  uint64_t v = 0;
  for (size_t k = 1; k < name.size(); ++k) {
    if (name[k] < '0' || name[k] > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(name[k] - '0');
    if (v >= nodes_.size()) return std::nullopt;
  }
  return static_cast<uint32_t>(v);
}

uint32_t PspSim::NewPayload(const Eigen::VectorXf& params, uint32_t refs) {
  uint32_t id;
  if (!free_payloads_.empty()) {
    id = free_payloads_.back();
    free_payloads_.pop_back();
  } else {
    id = static_cast<uint32_t>(payloads_.size());
    payloads_.emplace_back();
  }
  Payload& p = payloads_[id];
  p.data.assign(params.data(), params.data() + params.size());
  p.refs = refs;
  return id;
}

void PspSim::Release(uint32_t id) {
  if (--payloads_[id].refs == 0) free_payloads_.push_back(id);
}

void PspSim::TryStart(uint32_t i) {
  Node& n = nodes_[i];
  if (!n.alive || n.computing || now_ >= end_) return;
  ++n.wake_token;
  const Decision d = n.core->Check(n.step, now_, barrier_rng_);
  SendQueries(i);
  if (d == Decision::kPass) {
    StartStep(i);
    return;
  }
  const TimeMs deadline = n.core->NextDeadline();
  if (deadline != sync::kNoDeadline) Push(deadline, Event::kRetry, i, i, 0, n.wake_token);
}

void PspSim::SendQueries(uint32_t i) {
  for (const sync::ProgressQuery& q : nodes_[i].core->TakeQueries()) {
    const std::optional<uint32_t> to = IndexOf(q.to);
    if (!to) continue;
    TimeMs arrival;
    if (SendDatagram(i, kQueryBytes, &arrival)) {
      Push(arrival, Event::kQuery, *to, i, nodes_[i].step, q.seq);
    }
  }
}

void PspSim::StartStep(uint32_t i) {
  Node& n = nodes_[i];
  // SPEC §6: parameters that arrived since the last step are mixed at this step boundary.
  if (n.task && !n.inbox.empty()) {
    std::vector<const float*> others;
    others.reserve(n.inbox.size());
    for (uint32_t id : n.inbox) others.push_back(payloads_[id].data.data());
    learn::MixAverage(n.task->params(), others);
  }
  for (uint32_t id : n.inbox) Release(id);
  n.inbox.clear();

  double scale = 1.0;
  switch (o_.compute.dist) {
    case StepDist::kGamma:
      scale = UnitGamma(n.compute_rng, o_.compute.step_cv);
      break;
    case StepDist::kExponential: {
      scale = -std::log(1.0 - n.compute_rng.Uniform());
      break;
    }
    case StepDist::kConstant:
      break;
  }
  const auto duration = std::max<TimeMs>(1, static_cast<TimeMs>(std::llround(n.mean_ms * scale)));
  n.computing = true;
  Push(now_ + duration, Event::kStepDone, i, i);
}

void PspSim::FinishStep(uint32_t i) {
  Node& n = nodes_[i];
  n.computing = false;
  ++n.step;
  if (n.task) n.task->Step();
  if (NeedsFullView(o_.barrier.policy)) {
    // Deterministic barriers need every live peer's step: announce it to all of them.
    for (uint32_t j : n.peers) {
      n.messages++;
      n.bytes += kAnnounceBytes;
      Push(now_ + StreamDelay(), Event::kAnnounce, j, i, n.step);
    }
  }
  SendParams(i);
  TryStart(i);
}

void PspSim::RefreshSelmcastPlan() {
  const TimeMs second = (now_ - t0_) / 1000;
  if (second == plan_second_) return;
  plan_second_ = second;
  std::vector<sync::NodeCapacity> caps;
  std::vector<uint32_t> index;
  for (uint32_t j = 0; j < nodes_.size(); ++j) {
    if (!nodes_[j].alive) continue;
    caps.push_back(sync::NodeCapacity{names_[j], o_.net.bandwidth_mbps, o_.net.bandwidth_mbps});
    index.push_back(j);
  }
  const sync::Assignment plan = sync::SolveSelmcast(caps, o_.fanout, barrier_rng_);
  plan_.assign(nodes_.size(), {});
  for (size_t k = 0; k < plan.receivers.size(); ++k) {
    for (size_t r : plan.receivers[k]) plan_[index[k]].push_back(index[r]);
  }
}

std::vector<uint32_t> PspSim::Receivers(uint32_t i) {
  const std::vector<uint32_t>& peers = nodes_[i].peers;
  switch (o_.select) {
    case sync::SelectPolicy::kAll:
      return peers;
    case sync::SelectPolicy::kSelmcast:
      RefreshSelmcastPlan();
      return plan_[i];
    case sync::SelectPolicy::kRandom:
      break;
  }
  // sync::Select(kRandom) semantics — `fanout` distinct live peers, uniformly — drawn by index:
  // Select copies its candidates into a string set per call, which at 10 000 nodes × 100 steps
  // would cost more than the rest of the simulation.
  const size_t k = std::min(o_.fanout, peers.size());
  std::vector<uint32_t> out;
  out.reserve(k);
  if (2 * k > peers.size()) {
    std::vector<uint32_t> copy = peers;
    for (size_t a = 0; a < k; ++a) {
      const size_t b = a + static_cast<size_t>(select_rng_.UniformInt(copy.size() - a));
      std::swap(copy[a], copy[b]);
      out.push_back(copy[a]);
    }
    return out;
  }
  while (out.size() < k) {
    const uint32_t c = peers[static_cast<size_t>(select_rng_.UniformInt(peers.size()))];
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

void PspSim::SendParams(uint32_t i) {
  Node& n = nodes_[i];
  const std::vector<uint32_t> receivers = Receivers(i);
  if (receivers.empty()) return;
  uint32_t payload = std::numeric_limits<uint32_t>::max();
  if (n.task) payload = NewPayload(n.task->params(), static_cast<uint32_t>(receivers.size()));
  // Transfers queue on the sender's uplink and the receiver's downlink (MB/s → bytes per ms).
  const double tx_ms =
      static_cast<double>(param_bytes_) / std::max(1e-9, o_.net.bandwidth_mbps * 1000.0);
  for (uint32_t r : receivers) {
    n.messages++;
    n.bytes += param_bytes_;
    ++param_messages_;
    const double start = std::max(static_cast<double>(now_), n.up_free);
    n.up_free = start + tx_ms;
    Node& rx = nodes_[r];
    const double first = n.up_free + static_cast<double>(StreamDelay());
    const double done = std::max(first, rx.down_free + tx_ms);
    rx.down_free = done;
    Push(static_cast<TimeMs>(std::ceil(done)), Event::kParams, r, i, n.step, payload);
  }
}

void PspSim::RemovePeer(uint32_t observer, uint32_t target) {
  Node& o = nodes_[observer];
  auto it = std::lower_bound(o.peers.begin(), o.peers.end(), target);
  if (it == o.peers.end() || *it != target) return;
  o.peers.erase(it);
  if (o.core->OnPeerRemoved(names_[target]) && o.alive && !o.computing) TryStart(observer);
}

void PspSim::ReadmitPeer(uint32_t observer, uint32_t target) {
  Node& o = nodes_[observer];
  if (!std::binary_search(o.original.begin(), o.original.end(), target)) return;
  auto it = std::lower_bound(o.peers.begin(), o.peers.end(), target);
  if (it != o.peers.end() && *it == target) return;
  o.peers.insert(it, target);
  o.core->OnProgress(names_[target], 0, now_);  // its real step arrives with its next message
}

void PspSim::OnMembershipEvent(size_t observer, TimeMs at, const membership::Event& e) {
  const std::optional<uint32_t> target = IndexOf(e.member.name);
  if (!target || observer >= nodes_.size() || !nodes_[observer].alive) return;
  now_ = std::max(now_, at);
  using Kind = membership::Event::Kind;
  if (e.kind == Kind::kFailed || e.kind == Kind::kLeft) {
    for (CrashTrack& c : crash_tracks_) {
      if (c.node == *target && c.detected_at[observer] < 0) c.detected_at[observer] = at;
    }
    if (nodes_[*target].alive) ++false_failures_;
    RemovePeer(static_cast<uint32_t>(observer), *target);
  } else if ((e.kind == Kind::kAlive || e.kind == Kind::kJoined) && nodes_[*target].alive) {
    ReadmitPeer(static_cast<uint32_t>(observer), *target);
  }
}

void PspSim::Crash(uint32_t spec) {
  std::vector<uint32_t> live;
  for (uint32_t j = 0; j < nodes_.size(); ++j) {
    if (nodes_[j].alive) live.push_back(j);
  }
  const auto k = static_cast<uint32_t>(std::min(o_.crashes[spec].count, live.size()));
  for (uint32_t pick : SampleDistinct(crash_rng_, static_cast<uint32_t>(live.size()), k)) {
    const uint32_t victim = live[pick];
    Node& v = nodes_[victim];
    v.alive = false;
    v.computing = false;
    for (uint32_t id : v.inbox) Release(id);
    v.inbox.clear();
    crash_tracks_.push_back(CrashTrack{victim, now_, std::vector<TimeMs>(nodes_.size(), -1),
                                       std::vector<bool>(nodes_.size(), true)});
    if (cluster_) {
      for (uint32_t j = 0; j < nodes_.size(); ++j) {
        if (j != victim) crash_tracks_.back().knew[j] = cluster_->view(j, victim) != nullptr;
      }
      cluster_->crash(victim);  // SWIM has to notice
    } else {
      // Oracle failure detector: everyone removes it at once.
      for (uint32_t j = 0; j < nodes_.size(); ++j) {
        if (j != victim && nodes_[j].alive) {
          crash_tracks_.back().detected_at[j] = now_;
          RemovePeer(j, victim);
        }
      }
    }
  }
}

void PspSim::Sample() {
  TimePoint tp;
  tp.t_s = static_cast<double>(now_ - t0_) / 1000.0;
  std::vector<uint64_t> steps;
  steps.reserve(nodes_.size());
  for (const Node& n : nodes_) {
    if (n.alive) steps.push_back(n.step);
  }
  std::sort(steps.begin(), steps.end());
  tp.min = Quantile(steps, 0);
  tp.p10 = Quantile(steps, 0.1);
  tp.median = Quantile(steps, 0.5);
  tp.p90 = Quantile(steps, 0.9);
  tp.max = Quantile(steps, 1);
  const TimeMs rel = now_ - t0_;
  const auto eval_ms = static_cast<TimeMs>(std::llround(std::max(0.001, o_.eval_every_s) * 1000));
  if (data_ && (rel % eval_ms == 0 || now_ >= end_)) {
    double sum = 0;
    size_t live = 0;
    Eigen::VectorXd avg = Eigen::VectorXd::Zero(eval_task_->params().size());
    for (const Node& n : nodes_) {
      if (!n.alive) continue;
      sum += n.task->Evaluate().loss;
      avg += n.task->params().cast<double>();
      ++live;
    }
    if (live > 0) {
      tp.error = sum / static_cast<double>(live);
      eval_task_->params() = (avg / static_cast<double>(live)).cast<float>();
      tp.error_avg_model = eval_task_->Evaluate().loss;
      if (!result_.time_to_target_s && *tp.error <= o_.target_error) {
        result_.time_to_target_s = tp.t_s;
      }
    }
  }
  result_.series.push_back(tp);
  if (o_.record_nodes) {
    std::vector<uint64_t> row(nodes_.size());
    for (size_t j = 0; j < nodes_.size(); ++j) row[j] = nodes_[j].step;
    result_.node_steps.push_back(std::move(row));
  }
  if (now_ < end_) Push(std::min(end_, now_ + 1000), Event::kSample, 0);
}

void PspSim::Handle(const Event& ev) {
  Node& n = nodes_[ev.to];
  switch (ev.kind) {
    case Event::kStepDone:
      if (n.alive && n.computing) FinishStep(ev.to);
      break;
    case Event::kRetry:
      if (n.alive && !n.computing && ev.aux == n.wake_token) TryStart(ev.to);
      break;
    case Event::kQuery: {
      // The network thread answers with the current step, computing or not. The query carries
      // the asker's step, which is progress news too (as the agent does).
      if (!n.alive) break;
      if (Knows(ev.to, ev.from) && n.core->OnProgress(names_[ev.from], ev.step, now_) &&
          !n.computing) {
        TryStart(ev.to);
      }
      TimeMs arrival;
      if (SendDatagram(ev.to, kReplyBytes, &arrival)) {
        Push(arrival, Event::kReply, ev.from, ev.to, n.step, ev.aux);
      }
      break;
    }
    case Event::kReply:
      if (n.alive && n.core->OnReply(names_[ev.from], ev.aux, ev.step, now_) && !n.computing) {
        TryStart(ev.to);
      }
      break;
    case Event::kAnnounce:
      if (n.alive && Knows(ev.to, ev.from) && n.core->OnProgress(names_[ev.from], ev.step, now_) &&
          !n.computing) {
        TryStart(ev.to);
      }
      break;
    case Event::kParams: {
      const bool has_payload = ev.aux != std::numeric_limits<uint32_t>::max();
      if (!n.alive) {
        if (has_payload) Release(ev.aux);
        break;
      }
      if (has_payload) n.inbox.push_back(ev.aux);
      // SPEC §6: progress piggybacks on every parameter transfer — from live peers only.
      if (Knows(ev.to, ev.from) && n.core->OnProgress(names_[ev.from], ev.step, now_) &&
          !n.computing) {
        TryStart(ev.to);
      }
      break;
    }
    case Event::kCrash:
      Crash(ev.aux);
      break;
    case Event::kSample:
      Sample();
      break;
  }
}

PspSimResult PspSim::Run() {
  for (uint32_t i = 0; i < nodes_.size(); ++i) TryStart(i);
  for (uint32_t c = 0; c < o_.crashes.size(); ++c) {
    Push(t0_ + static_cast<TimeMs>(std::llround(o_.crashes[c].at_s * 1000.0)), Event::kCrash, 0, 0,
         0, c);
  }
  Sample();  // t = 0; schedules the next sample

  VirtualClock* swim_clock = cluster_ ? &cluster_->clock() : nullptr;
  for (;;) {
    const TimeMs mine = queue_.empty() ? std::numeric_limits<TimeMs>::max() : queue_.top().at;
    // SWIM events run first at equal times (a fixed, reproducible interleaving).
    if (swim_clock && !swim_clock->empty() && swim_clock->next_time() <= mine &&
        swim_clock->next_time() <= end_) {
      now_ = std::max(now_, swim_clock->next_time());
      swim_clock->run_next();
      continue;
    }
    if (queue_.empty() || mine > end_) break;
    const Event ev = queue_.top();
    queue_.pop();
    now_ = ev.at;
    ++events_;
    Handle(ev);
  }
  now_ = end_;

  PspSimResult& r = result_;
  r.policy = o_.barrier.policy;
  r.sample = o_.barrier.sample;
  r.staleness = o_.barrier.staleness;
  r.nodes = nodes_.size();
  r.view = view_;
  r.duration_s = o_.duration_s;
  std::vector<uint64_t> live_steps;
  double wait = 0;
  uint64_t messages = 0, bytes = 0;
  for (const Node& n : nodes_) {
    r.final_steps.push_back(n.step);
    messages += n.messages;
    bytes += n.bytes;
    r.queries += n.core->stats().queries;
    r.replies += n.core->stats().replies;
    r.timeouts += n.core->stats().timeouts;
    if (!n.alive) continue;
    live_steps.push_back(n.step);
    wait += n.core->WaitSeconds(end_);
  }
  r.live_nodes = live_steps.size();
  std::sort(live_steps.begin(), live_steps.end());
  r.steps_min = Quantile(live_steps, 0);
  r.steps_median = Quantile(live_steps, 0.5);
  r.steps_max = Quantile(live_steps, 1);
  r.steps_p10 = Quantile(live_steps, 0.1);
  r.steps_p90 = Quantile(live_steps, 0.9);
  const double nodes = static_cast<double>(nodes_.size());
  if (r.live_nodes > 0) {
    r.wait_share = wait / static_cast<double>(r.live_nodes) / std::max(1e-9, o_.duration_s);
  }
  if (cluster_) {
    r.membership_messages = cluster_->net().stats().datagrams_sent - swim_datagrams_at_t0_;
    messages += r.membership_messages;
    bytes += cluster_->net().stats().bytes_sent - swim_bytes_at_t0_;
  }
  r.messages_per_node = static_cast<double>(messages) / nodes;
  r.bytes_per_node = static_cast<double>(bytes) / nodes;
  if (!r.series.empty() && r.series.back().error) {
    r.error = r.series.back().error;
    r.error_avg_model = r.series.back().error_avg_model;
  }
  for (const CrashTrack& c : crash_tracks_) {
    CrashReport cr;
    cr.node = names_[c.node];
    cr.crash_at_s = static_cast<double>(c.at - t0_) / 1000.0;
    TimeMs first = -1, last = -1;
    for (uint32_t j = 0; j < nodes_.size(); ++j) {
      if (j == c.node || !nodes_[j].alive) continue;
      if (!c.knew[j]) {
        ++cr.unaware;
        continue;
      }
      ++cr.observers;
      const TimeMs d = c.detected_at[j];
      if (d < 0) continue;
      ++cr.detected;
      first = first < 0 ? d : std::min(first, d);
      last = std::max(last, d);
    }
    if (first >= 0) cr.first_detect_s = static_cast<double>(first - c.at) / 1000.0;
    if (cr.detected == cr.observers && last >= 0) {
      cr.all_detect_s = static_cast<double>(last - c.at) / 1000.0;
    }
    r.crashes.push_back(cr);
  }
  r.events = events_;
  r.param_messages = param_messages_;
  r.datagrams_lost = datagrams_lost_;
  r.false_failures = false_failures_;
  return std::move(result_);
}

}  // namespace

std::optional<StepDist> ParseStepDist(const std::string& name) {
  if (name == "gamma") return StepDist::kGamma;
  if (name == "exp" || name == "exponential") return StepDist::kExponential;
  if (name == "const" || name == "constant") return StepDist::kConstant;
  return std::nullopt;
}

const char* StepDistName(StepDist dist) {
  switch (dist) {
    case StepDist::kGamma:
      return "gamma";
    case StepDist::kExponential:
      return "exp";
    case StepDist::kConstant:
      return "const";
  }
  return "unknown";
}

std::string PolicyLabel(sync::Policy policy, size_t sample, uint64_t staleness) {
  std::string label = sync::PolicyName(policy);
  if (sync::IsProbabilistic(policy)) label += ":b" + std::to_string(sample);
  if (policy == Policy::kSsp || policy == Policy::kPssp || policy == Policy::kDssp) {
    label += ":s" + std::to_string(staleness);
  }
  return label;
}

learn::Status ValidatePspSimOptions(const PspSimOptions& o) {
  using learn::Status;
  if (o.nodes < 1 || o.nodes > 1000000) return Status::InvalidArgument("--nodes must be 1..1e6");
  if (!(o.duration_s > 0) || o.duration_s > 1e7) {
    return Status::InvalidArgument("--duration must be positive");
  }
  if (NeedsFullView(o.barrier.policy) && o.nodes > kMaxFullViewNodes) {
    return Status::InvalidArgument(std::string(sync::PolicyName(o.barrier.policy)) +
                                   " needs every node to track every peer (" +
                                   "n² progress entries); use at most " +
                                   std::to_string(kMaxFullViewNodes) + " nodes, or pbsp/pssp");
  }
  if (!(o.compute.step_ms >= 1)) return Status::InvalidArgument("--step-time must be >= 1 ms");
  if (!(o.compute.step_cv >= 0) || !(o.compute.node_cv >= 0) || o.compute.step_cv > 10 ||
      o.compute.node_cv > 10) {
    return Status::InvalidArgument("--step-cv and --node-cv must be in [0, 10]");
  }
  if (!(o.compute.straggler_fraction >= 0 && o.compute.straggler_fraction <= 1) ||
      !(o.compute.straggler_factor > 0)) {
    return Status::InvalidArgument("--stragglers FRACTION:FACTOR needs 0<=FRACTION<=1, FACTOR>0");
  }
  if (!(o.net.latency_ms >= 0) || !(o.net.jitter_ms >= 0) || !(o.net.bandwidth_mbps > 0) ||
      !(o.net.loss >= 0 && o.net.loss < 1) || !(o.net.retransmit_ms >= 0)) {
    return Status::InvalidArgument(
        "network: latency and jitter >= 0, bandwidth > 0, loss in [0, 1)");
  }
  if (o.task != "none" && o.task != "synthetic") {
    return Status::InvalidArgument("--task must be none or synthetic");
  }
  if (o.task == "synthetic" && (o.task_dim < 1 || o.batch < 1 || !(o.lr > 0))) {
    return Status::InvalidArgument("task: dim, batch and lr must be positive");
  }
  if (o.membership && !membership::Config::Profile(o.profile)) {
    return Status::InvalidArgument("--profile must be lan, wan or local");
  }
  for (const CrashSpec& c : o.crashes) {
    if (!(c.at_s >= 0)) return Status::InvalidArgument("--crash time must be >= 0");
  }
  if (o.fanout == 0 && o.select != sync::SelectPolicy::kAll) {
    return Status::InvalidArgument("--fanout must be >= 1");
  }
  if (!(o.eval_every_s > 0)) return Status::InvalidArgument("--eval-every must be positive");
  return Status::OK();
}

learn::Result<PspSimResult> RunPspSim(const PspSimOptions& options) {
  if (learn::Status s = ValidatePspSimOptions(options); !s.ok()) return s;
  PspSim sim(options);
  if (learn::Status s = sim.Setup(); !s.ok()) return s;
  return sim.Run();
}

}  // namespace meshtrain::sim
