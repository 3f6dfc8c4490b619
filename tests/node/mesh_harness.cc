#include "tests/node/mesh_harness.h"

#include <algorithm>
#include <variant>

#include "learn/mixing.h"
#include "node/endpoint.h"
#include "sync/selection.h"

namespace meshtrain::testing {

namespace {
constexpr int64_t kConnectTimeoutMs = 50;  // a connect to a dead host fails after this
}  // namespace

Mesh::Mesh(MeshOptions options) : opt_(std::move(options)), rng_(opt_.seed) {
  if (opt_.task == "synthetic") {
    learn::SyntheticOptions so;
    so.dim = 8;
    so.train_samples = 1024;
    so.test_samples = 256;
    data_ = learn::MakeSyntheticData(so);
  }
  for (size_t i = 0; i < opt_.nodes; ++i) {
    auto p = std::make_unique<Peer>();
    p->name = "n" + std::to_string(i);
    p->addr = "127.0.1." + std::to_string(i + 1) + ":7950";
    p->speed = (i == 0 ? opt_.straggler_factor : 1.0) *
               std::uniform_real_distribution<double>(0.9, 1.1)(rng_);
    node::NodeConfig c;
    c.name = p->name;
    c.addr = p->addr;
    c.data_addr = p->addr;
    c.membership = membership::Config::Local();
    c.membership.probe_interval = 200;
    c.membership.probe_timeout = 100;
    c.membership.gossip_interval = 50;
    c.membership.push_pull_interval = opt_.push_pull_ms;
    c.seed = opt_.seed * 1000 + i;
    c.training = true;
    c.barrier.policy = opt_.policy;
    c.barrier.sample = opt_.sample;
    c.barrier.staleness = opt_.staleness;
    c.barrier.lookahead = opt_.lookahead;
    c.select = opt_.select;
    c.fanout = opt_.fanout;
    c.compress = opt_.compress;
    c.join_state = opt_.join_state;
    c.overlap_barrier = opt_.overlap_barrier;
    c.consensus_hold_ms = opt_.consensus_hold_ms;
    c.chunk_floats = opt_.chunk_floats;
    c.capacity_probe_interval_ms = opt_.capacity_probe_ms;
    c.probe_loopback = true;  // the fake network's addresses are 127.0.1.x
    // With a late joiner the first nodes start without it; it waits for all of them.
    c.min_peers = opt_.late_join_ms > 0 && i + 1 < opt_.nodes ? opt_.nodes - 2 : opt_.nodes - 1;
    if (i > 0) c.join = {peers_[0]->addr};
    if (data_) {
      learn::TaskOptions to;
      to.synthetic_data = data_;
      to.batch_size = 16;
      to.lr = 0.02f;
      to.momentum = 0.9f;
      to.init_seed = 7;
      to.data_seed = c.seed;
      to.shard = learn::Shard{static_cast<uint32_t>(i), static_cast<uint32_t>(opt_.nodes)};
      auto task = learn::MakeTask("synthetic", to);
      if (task.ok()) p->task = std::move(task).value();
      c.expected_params = static_cast<uint32_t>(p->task->num_params());
    }
    p->node = std::make_unique<node::Node>(std::move(c), 0);
    peers_.push_back(std::move(p));
  }
}

Mesh::~Mesh() = default;

void Mesh::At(int64_t t, std::function<void()> fn) {
  events_.push(Event{std::max(t, now_), seq_++, std::move(fn)});
}

int64_t Mesh::Latency() {
  const double j = std::uniform_real_distribution<double>(0, opt_.jitter_ms)(rng_);
  return std::max<int64_t>(1, static_cast<int64_t>(opt_.latency_ms + j));
}

size_t Mesh::ByAddr(const std::string& addr) const {
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i]->addr == addr) return i;
  }
  return peers_.size();
}

void Mesh::Start() {
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (opt_.late_join_ms > 0 && i + 1 == peers_.size()) {
      At(opt_.late_join_ms, [this, i] { StartNode(i); });
    } else {
      StartNode(i);
    }
  }
}

void Mesh::StartNode(size_t i) {
  peers_[i]->started = true;
  peers_[i]->node->Start(now_);
  Execute(i);
  Arm(i);
  Feed(i, node::TrainerProgress{0, true, true, {}, 0});
}

void Mesh::RunUntil(int64_t until_ms) {
  while (!events_.empty() && events_.top().at <= until_ms) {
    Event e = events_.top();
    events_.pop();
    now_ = e.at;
    e.fn();
  }
  now_ = until_ms;
}

void Mesh::Crash(size_t i) { peers_[i]->crashed = true; }

void Mesh::Inject(size_t i, node::Input input) {
  auto shared = std::make_shared<node::Input>(std::move(input));
  At(now_, [this, i, shared] { Feed(i, std::move(*shared)); });
}

double Mesh::loss(size_t i) const {
  return peers_[i]->task ? peers_[i]->task->Evaluate().loss : 0.0;
}

uint32_t Mesh::params_crc(size_t i) const {
  return peers_[i]->task ? learn::ParamsCrc32(peers_[i]->task->params()) : 0;
}

void Mesh::Feed(size_t i, node::Input in) {
  Peer& p = *peers_[i];
  if (p.crashed) return;
  p.node->Step(std::move(in), now_);
  Execute(i);
  Arm(i);
}

void Mesh::Arm(size_t i) {
  Peer& p = *peers_[i];
  const int64_t d = p.node->NextDeadline();
  if (d == sync::kNoDeadline || d == p.timer_at) return;
  p.timer_at = d;
  At(d, [this, i, d] {
    Peer& q = *peers_[i];
    if (q.crashed || q.timer_at != d) return;
    q.timer_at = -1;
    q.node->Tick(now_);
    Execute(i);
    Arm(i);
  });
}

void Mesh::MaybeCompute(size_t i) {
  Peer& p = *peers_[i];
  if (p.computing || p.crashed || p.finished || p.permitted < p.step + 1) return;
  p.computing = true;
  if (p.idle_since >= 0) p.idle_ms += static_cast<double>(now_ - p.idle_since);
  p.idle_since = -1;
  const double f = std::uniform_real_distribution<double>(0.8, 1.2)(rng_);
  At(now_ + static_cast<int64_t>(opt_.step_ms * p.speed * f), [this, i] {
    Peer& q = *peers_[i];
    if (q.crashed) return;
    // docs/contract.md "Barriers": what arrived since the last step is mixed at the step boundary.
    if (q.task && !q.inbox.empty()) {
      std::vector<const float*> others;
      std::vector<double> weights;
      for (size_t k = 0; k < q.inbox.size(); ++k) {
        others.push_back(q.inbox[k].data());
        weights.push_back(learn::MixWeight(q.step, q.inbox_steps[k]));
      }
      learn::MixWeighted(q.task->params(), others, weights);
      q.mixes += q.inbox.size();
    }
    q.inbox.clear();
    q.inbox_steps.clear();
    if (q.task) q.task->Step();
    q.step++;
    q.computing = false;
    q.idle_since = now_;
    if (opt_.max_steps > 0 && q.step >= opt_.max_steps) {
      q.finished = true;
      if (q.task) {
        q.final_params.assign(q.task->params().data(),
                              q.task->params().data() + q.task->params().size());
      }
    }
    auto params = std::make_shared<std::vector<float>>(
        q.task ? std::vector<float>(q.task->params().data(),
                                    q.task->params().data() + q.task->params().size())
               : std::vector<float>(16, 0.f));
    Feed(i, node::TrainerProgress{q.step, !q.finished, !q.finished, {}, 0});
    if (q.step % std::max<uint64_t>(1, opt_.sync_every) == 0 || q.finished) {
      Feed(i, node::SnapshotIn{q.step, params, q.finished, {}});
    }
    MaybeCompute(i);
  });
}

void Mesh::NetDatagram(size_t i, const std::string& to, const wire::Datagram& msg) {
  datagrams_++;
  const size_t j = ByAddr(to);
  if (j == peers_.size()) return;
  if (std::uniform_real_distribution<double>(0, 1)(rng_) < opt_.loss) return;
  auto in = std::make_shared<node::DatagramIn>(node::DatagramIn{peers_[i]->addr, msg});
  At(now_ + Latency(), [this, j, in] { Feed(j, std::move(*in)); });
}

void Mesh::NetProbe(size_t i, const node::ProbeLink& probe) {
  const size_t j = ByAddr(probe.to);
  if (j == peers_.size() || peers_[j]->crashed || opt_.link_mbps.size() <= std::max(i, j)) return;
  double rate = std::min(opt_.link_mbps[i], opt_.link_mbps[j]);
  if (probe_rate) rate = std::max(0.0, probe_rate(i, j, rate));
  const int64_t there = now_ + Latency();
  if (rate > 0) {
    At(there, [this, i, j, rate] { Feed(j, node::ProbeReceived{peers_[i]->addr, rate}); });
  }
  At(there + Latency(), [this, i, rate, id = probe.id, n = probe.packets] {
    Feed(i, node::ProbeResult{id, rate, n});
  });
}

void Mesh::NetConnect(size_t i, node::ConnId conn, const std::string& to) {
  const size_t j = ByAddr(to);
  const uint64_t serial = next_conn_++;
  const Conn link{i, j, conn, next_accept_id_++};
  conns_[serial] = link;
  conn_of_[{i, conn}] = serial;
  if (j < peers_.size()) conn_of_[{j, link.id_b}] = serial;
  if (i == opt_.refuse_connects_from) {
    conns_[serial].closed = true;
    At(now_, [this, i, id = conn] { Feed(i, node::ConnClosed{id, false}); });
  } else if (j == peers_.size() || peers_[j]->crashed) {
    conns_[serial].closed = true;
    At(now_ + kConnectTimeoutMs, [this, i, id = conn] { Feed(i, node::ConnClosed{id, false}); });
  }
}

void Mesh::NetFrame(size_t i, node::ConnId conn, const wire::Frame& msg) {
  auto it = conn_of_.find({i, conn});
  if (it == conn_of_.end()) return;
  Conn& cn = conns_[it->second];
  if (cn.closed || cn.closing) return;
  const bool forward = cn.a == i && cn.id_a == conn;
  const size_t to = forward ? cn.b : cn.a;
  const node::ConnId to_id = forward ? cn.id_b : cn.id_a;
  size_t bytes = 64;
  if (auto* ch = std::get_if<wire::ParamChunk>(&msg.body)) bytes += wire::ChunkWireBytes(*ch);
  int64_t& last = forward ? cn.last_a_to_b : cn.last_b_to_a;
  const auto transfer = static_cast<int64_t>(bytes / (opt_.bandwidth_mbps * 1e3));
  last = std::max(last, now_ + Latency()) + transfer;
  auto in = std::make_shared<node::FrameIn>(node::FrameIn{to_id, msg});
  const uint64_t serial = it->second;
  At(last, [this, to, in, serial, i, from_id = conn] {
    if (peers_[to]->crashed) {  // the sender learns it from a reset, later
      Conn& k = conns_[serial];
      if (!k.closed) {
        k.closed = true;
        At(now_ + kConnectTimeoutMs, [this, i, from_id] {
          Feed(i, node::ConnClosed{from_id, false});
        });
      }
      return;
    }
    if (!conns_[serial].closed) Feed(to, std::move(*in));
  });
}

void Mesh::ResetConnectionsOpenedBy(size_t i) {
  for (auto& [key, serial] : conn_of_) {
    const Conn& cn = conns_[serial];
    if (key.first == i && cn.a == i && cn.id_a == key.second) NetClose(i, key.second, true);
  }
}

void Mesh::NetClose(size_t i, node::ConnId conn, bool abort) {
  auto it = conn_of_.find({i, conn});
  if (it == conn_of_.end()) return;
  const uint64_t serial = it->second;
  Conn& cn = conns_[serial];
  if (cn.closed || cn.closing) return;
  cn.closing = true;
  const bool forward = cn.a == i && cn.id_a == conn;
  const size_t other = forward ? cn.b : cn.a;
  const node::ConnId other_id = forward ? cn.id_b : cn.id_a;
  const int64_t after = std::max(forward ? cn.last_a_to_b : cn.last_b_to_a, now_) + Latency();
  const bool clean = !abort;
  // Both ends see the close after everything sent before it has arrived.
  At(after, [this, serial, i, self_id = conn, other, other_id, clean] {
    conns_[serial].closed = true;
    Feed(i, node::ConnClosed{self_id, clean});
    if (other < peers_.size()) Feed(other, node::ConnClosed{other_id, clean});
  });
}

void Mesh::Execute(size_t i) {
  std::vector<node::Output> outs = peers_[i]->node->TakeOutput();
  if (on_output) {
    for (const auto& o : outs) on_output(i, o);
  }
  NodeEndpoint ep(this, i);
  for (auto& o : wholes_[i].Apply(node::RouteNetwork(std::move(outs), ep))) {
    if (auto* pm = std::get_if<node::Permit>(&o)) {
      if (on_permit) on_permit(i, pm->step);
      const uint64_t step = pm->step;
      if (opt_.permit_delay_ms > 0) {
        At(now_ + opt_.permit_delay_ms, [this, i, step] {
          peers_[i]->permitted = std::max(peers_[i]->permitted, step);
          MaybeCompute(i);
        });
        continue;
      }
      peers_[i]->permitted = std::max(peers_[i]->permitted, step);
      MaybeCompute(i);
    } else if (auto* m = std::get_if<node::Mix>(&o)) {
      peers_[i]->inbox.push_back(std::move(m->params));
      peers_[i]->inbox_steps.push_back(m->step);
    } else if (auto* a = std::get_if<node::AdoptState>(&o)) {
      // As the daemon's trainer: the model and step are taken over before the first step.
      Peer& p = *peers_[i];
      if (p.task && a->params.size() == static_cast<size_t>(p.task->params().size())) {
        p.task->params() = Eigen::Map<const Eigen::VectorXf>(
            a->params.data(), static_cast<Eigen::Index>(a->params.size()));
      }
      p.step = a->step;
      p.adopted_from = a->from;
      p.inbox.clear();
      p.inbox_steps.clear();
    } else if (auto* red = std::get_if<node::ConsensusReduce>(&o)) {
      std::vector<const std::vector<float>*> models;
      for (const auto& m : red->models) models.push_back(m.get());
      auto in = std::make_shared<node::Input>(node::ConsensusResult{
          red->id, std::make_shared<const std::vector<float>>(learn::AverageModels(models))});
      At(now_ + 1, [this, i, in] { Feed(i, std::move(*in)); });
    } else if (auto* ac = std::get_if<node::AdoptConsensus>(&o)) {
      Peer& p = *peers_[i];
      if (ac->params.get() == p.consensus_params) continue;  // the same result, now settled
      p.consensus_params = ac->params.get();
      if (p.task && ac->params->size() == static_cast<size_t>(p.task->params().size())) {
        p.task->params() = Eigen::Map<const Eigen::VectorXf>(
            ac->params->data(), static_cast<Eigen::Index>(ac->params->size()));
      }
      p.consensus_adoptions++;
    } else if (auto* req = std::get_if<node::PlanRequest>(&o)) {
      sync::Rng rng(req->seed);
      node::PlanResult r{req->id, sync::Select(sync::SelectPolicy::kSelmcast, req->self,
                                               req->candidates, req->fanout, req->bandwidth, rng)};
      auto in = std::make_shared<node::Input>(std::move(r));
      At(now_, [this, i, in] { Feed(i, std::move(*in)); });
    }
  }
}

}  // namespace meshtrain::testing
