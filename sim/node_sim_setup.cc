// The setup of a simulator run: the trainers' tasks and speeds, the node cores with their
// configuration and (without SWIM) their views, and the membership warm-up with SWIM.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "sim/node_sim.h"
#include "sim/sim_random.h"

namespace meshtrain::sim {
namespace {

constexpr size_t kParamHeaderBytes = 64;
constexpr size_t kDefaultParamBytes = 100000;
// Automatic partial views: full membership up to this many nodes, else this many peers.
constexpr size_t kAutoFullViewMax = 2000;
constexpr size_t kAutoPartialView = 500;
constexpr TimeMs kMembershipWarmupMaxMs = 300000;
constexpr TimeMs kWarmupCheckMs = 500;
// Without a task the snapshot is a token: the network charges param_bytes for it.
constexpr size_t kNoTaskFloats = 4;
// replay_alone: nodes traced.
constexpr size_t kTracedNodes = 4;

}  // namespace

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
  topts.init_seed =
      SubSeed(o_.seed, 9);  // the same for every node (docs/contract.md "Parameter exchange")
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
  const membership::Config profile = membership::Config::ForProfile(o_.profile);
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

}  // namespace meshtrain::sim
