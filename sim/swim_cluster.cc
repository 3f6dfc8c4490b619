#include "sim/swim_cluster.h"

#include <utility>

#include "sim/sim_random.h"

namespace meshtrain::sim {

namespace membership = ::meshtrain::membership;

namespace {

// Independent, reproducible per-node seeds from (cluster seed, node, generation).
uint64_t Mix(uint64_t x) { return SplitMix(x); }

size_t PacketBytes(const membership::Packet& p, const membership::Config& c) {
  size_t bytes = c.packet_overhead_bytes + membership::EstimatePacketOverhead(p);
  for (const auto& u : p.updates) bytes += membership::EstimateSize(u);
  return bytes;
}

size_t PushPullBytes(const membership::PushPull& pp) {
  size_t bytes = 64 + pp.from.size();
  for (const auto& m : pp.members) bytes += 96 + m.name.size() + m.addr.size();
  return bytes;
}

}  // namespace

SwimCluster::SwimCluster(SwimClusterOptions opts)
    : opts_(std::move(opts)), net_(&clock_, Mix(opts_.seed ^ 0x6e6574ULL)) {
  net_.set_default_latency(opts_.latency);
  procs_.resize(opts_.nodes);
  for (size_t i = 0; i < procs_.size(); ++i) {
    procs_[i].name = "n" + std::to_string(i);
    procs_[i].addr = "10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256) + ":7950";
    by_addr_[procs_[i].addr] = i;
  }
}

SwimCluster::~SwimCluster() = default;

int SwimCluster::IndexOf(const std::string& addr) const {
  auto it = by_addr_.find(addr);
  return it == by_addr_.end() ? -1 : static_cast<int>(it->second);
}

bool SwimCluster::has_left(size_t i) const {
  return procs_[i].swim != nullptr && procs_[i].swim->HasLeft();
}

void SwimCluster::Boot(size_t i, const std::vector<size_t>& join) {
  Proc& p = procs_[i];
  membership::Config cfg = opts_.config;
  cfg.name = p.name;
  cfg.addr = p.addr;
  ++p.generation;
  p.swim = std::make_unique<membership::Swim>(
      std::move(cfg), Mix(opts_.seed * 1000003ULL + i * 7919ULL + p.generation), clock_.now());
  p.up = true;
  p.paused = false;
  p.scheduled = std::numeric_limits<TimeMs>::max();
  net_.set_down(p.addr, false);
  if (!join.empty()) {
    std::vector<std::string> addrs;
    for (size_t j : join) addrs.push_back(procs_[j].addr);
    p.swim->Join(addrs, clock_.now());
  }
  flush(i);
}

void SwimCluster::start(size_t i, const std::vector<size_t>& join) { Boot(i, join); }

void SwimCluster::start_all_via(size_t seed_node, TimeMs stagger) {
  start(seed_node);
  TimeMs at = clock_.now();
  for (size_t i = 0; i < procs_.size(); ++i) {
    if (i == seed_node) continue;
    at += stagger;
    clock_.schedule(at, [this, i, seed_node] { start(i, {seed_node}); });
  }
}

void SwimCluster::crash(size_t i) {
  Proc& p = procs_[i];
  p.up = false;
  net_.set_down(p.addr, true);
}

void SwimCluster::restart(size_t i, const std::vector<size_t>& join) { Boot(i, join); }

void SwimCluster::pause(size_t i) { procs_[i].paused = true; }

void SwimCluster::resume(size_t i) {
  procs_[i].paused = false;
  procs_[i].scheduled = std::numeric_limits<TimeMs>::max();
  flush(i);
}

void SwimCluster::leave(size_t i) {
  procs_[i].swim->Leave(clock_.now());
  flush(i);
}

void SwimCluster::flush(size_t i) {
  Proc& p = procs_[i];
  if (!is_running(i)) return;
  for (const membership::Event& e : p.swim->TakeEvents()) {
    if (hook_) hook_(i, clock_.now(), e);
  }
  SendPackets(i);
  SendPushPulls(i);
  Reschedule(i);
}

void SwimCluster::Reschedule(size_t i) {
  Proc& p = procs_[i];
  const TimeMs next = std::max(p.swim->NextDeadline(), clock_.now());
  // Only ever pull the wake-up earlier; a stale later event finds `scheduled` changed and
  // does nothing, so at most one live timer exists per node.
  if (next >= p.scheduled) return;
  p.scheduled = next;
  const uint64_t gen = p.generation;
  clock_.schedule(next, [this, i, gen, next] { OnTimer(i, gen, next); });
}

void SwimCluster::OnTimer(size_t i, uint64_t generation, TimeMs at) {
  Proc& p = procs_[i];
  if (p.generation != generation || p.scheduled != at) return;
  p.scheduled = std::numeric_limits<TimeMs>::max();
  if (!is_running(i)) return;
  p.swim->Tick(clock_.now());
  flush(i);
}

void SwimCluster::SendPackets(size_t i) {
  Proc& p = procs_[i];
  const membership::Config& cfg = p.swim->config();
  for (membership::OutPacket& out : p.swim->TakePackets()) {
    const int to = IndexOf(out.to_addr);
    if (to < 0) continue;
    const size_t bytes = PacketBytes(out.packet, cfg);
    net_.send_datagram(p.addr, out.to_addr, bytes,
                       [this, to, from = p.addr, packet = std::move(out.packet)] {
                         DeliverPacket(static_cast<size_t>(to), from, packet);
                       });
  }
}

void SwimCluster::DeliverPacket(size_t to, std::string from_addr,
                                const membership::Packet& packet) {
  if (!is_running(to)) return;  // a paused process loses what arrives meanwhile
  if (tap_) {
    const int from = IndexOf(from_addr);
    if (from >= 0) tap_(static_cast<size_t>(from), to, packet);
  }
  procs_[to].swim->HandlePacket(from_addr, packet, clock_.now());
  flush(to);
}

void SwimCluster::SendPushPulls(size_t i) {
  Proc& p = procs_[i];
  const uint64_t gen = p.generation;
  for (membership::OutPushPull& out : p.swim->TakePushPulls()) {
    const int to_index = IndexOf(out.to_addr);
    auto failed = [this, i, gen, addr = out.to_addr] {
      if (!Current(i, gen)) return;
      procs_[i].swim->PushPullFailed(addr, clock_.now());
      flush(i);
    };
    if (to_index < 0) {
      clock_.schedule_after(0, failed);
      continue;
    }
    const auto to = static_cast<size_t>(to_index);
    const size_t bytes = PushPullBytes(out.request);
    net_.send_stream(
        p.addr, out.to_addr, bytes,
        [this, i, gen, to, from = p.addr, to_addr = out.to_addr, request = std::move(out.request),
         failed] {
          // A stopped process accepts no connection: the requester times out.
          if (!is_running(to)) {
            clock_.schedule_after(0, failed);
            return;
          }
          membership::PushPull response =
              procs_[to].swim->HandlePushPullRequest(request, clock_.now());
          flush(to);
          const size_t reply_bytes = PushPullBytes(response);
          net_.send_stream(
              to_addr, from, reply_bytes,
              [this, i, gen, response = std::move(response)] {
                if (!Current(i, gen)) return;
                procs_[i].swim->HandlePushPullResponse(response, clock_.now());
                flush(i);
              },
              failed);
        },
        failed);
  }
}

SwimCluster::RunResult SwimCluster::run_until(const std::function<bool()>& pred,
                                              TimeMs max_virtual_ms, uint64_t max_events,
                                              TimeMs poll_ms) {
  RunResult r;
  const TimeMs deadline = clock_.now() + max_virtual_ms;
  if (pred()) {
    r.ok = true;
    r.at = clock_.now();
    return r;
  }
  TimeMs last_check = clock_.now();
  while (!clock_.empty() && clock_.next_time() <= deadline && r.events < max_events) {
    clock_.run_next();
    ++r.events;
    if (clock_.now() - last_check >= poll_ms) {
      last_check = clock_.now();
      if (pred()) {
        r.ok = true;
        r.at = clock_.now();
        return r;
      }
    }
  }
  if (r.events < max_events) clock_.run_until(deadline);
  r.ok = pred();
  r.at = clock_.now();
  return r;
}

const membership::Member* SwimCluster::view(size_t observer, size_t target) const {
  const Proc& o = procs_[observer];
  if (!o.up || o.swim == nullptr) return nullptr;
  return o.swim->Find(procs_[target].name);
}

size_t SwimCluster::count_observers(size_t target) const {
  size_t n = 0;
  for (size_t o = 0; o < procs_.size(); ++o) {
    if (o != target && is_running(o) && !has_left(o)) ++n;
  }
  return n;
}

size_t SwimCluster::count_seeing(size_t target, membership::Status s) const {
  size_t n = 0;
  for (size_t o = 0; o < procs_.size(); ++o) {
    if (o == target || !is_running(o) || has_left(o)) continue;
    const membership::Member* m = view(o, target);
    if (m != nullptr && m->status == s) ++n;
  }
  return n;
}

bool SwimCluster::converged() const {
  std::vector<size_t> live;
  for (size_t i = 0; i < procs_.size(); ++i) {
    if (is_running(i) && !has_left(i)) live.push_back(i);
  }
  // Cheap O(n) screen first; the O(n²) check only runs once the counts agree.
  for (size_t o : live) {
    if (procs_[o].swim->NumAlive() != live.size()) return false;
  }
  for (size_t o : live) {
    for (size_t t : live) {
      const membership::Member* m = view(o, t);
      if (m == nullptr || m->status != membership::Status::kAlive) return false;
    }
  }
  return true;
}

}  // namespace meshtrain::sim
