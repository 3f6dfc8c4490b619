// Membership over either source (the node's own SWIM core or the driver's external view):
// peer lookups, the incremental state that follows a peer's changes, the views status reads,
// and the link-capacity probes' choice of peers (node/link_probes.h).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "node/node.h"
#include "node/node_internal.h"

namespace meshtrain::node {

namespace ms = ::meshtrain::membership;
using internal::IsLive;

// ---- membership ---------------------------------------------------------------------------------

Node::PeerRef Node::RefOf(const ms::Member& m) {
  PeerRef r;
  r.name = &m.name;
  r.addr = &m.addr;
  r.data_addr = m.meta.data_addr.empty() ? &m.addr : &m.meta.data_addr;
  r.live = IsLive(m.status);
  r.alive = m.status == ms::Status::kAlive;
  r.training = m.meta.training;
  r.step = m.step;
  r.uplink_mbps = m.meta.uplink_mbps;
  r.downlink_mbps = m.meta.downlink_mbps;
  r.step_ms = m.step_ms;
  r.nat = m.meta.reach == ms::Reach::kNat;
  r.step_known = m.step_learned > 0;
  r.absent = m.meta.absent;
  return r;
}

Node::PeerRef Node::RefOf(const ExternalPeer& v) const {
  PeerRef r;
  r.name = &NameOf(v);
  r.addr = &AddrOf(v);
  r.data_addr = r.addr;
  r.live = r.alive = v.alive;
  r.training = v.training;
  r.step = v.step;
  r.uplink_mbps = v.uplink_mbps;
  r.downlink_mbps = v.downlink_mbps;
  return r;
}

std::optional<Node::PeerRef> Node::FindPeer(const std::string& name) const {
  if (swim_) {
    const ms::Member* m = swim_->Find(name);
    if (m == nullptr || name == config_.name) return std::nullopt;
    return RefOf(*m);
  }
  const ExternalPeer* found = FindExternal(name);
  if (found == nullptr) return std::nullopt;
  return RefOf(*found);
}

void Node::OnPeerChanged(const PeerRef& p, bool membership_changed, TimeMs now) {
  if (membership_changed) {
    candidates_stale_ = true;
    ++peers_version_;
  }
  // Joining's largest step: a peer that leaves the alive-training set while holding it (its
  // step now is at least what it was) makes it unknown until the next walk.
  if (p.alive && p.training) {
    peers_max_step_ = std::max(peers_max_step_, p.step);
  } else if (p.step >= peers_max_step_ && peers_max_step_ > 0) {
    peers_max_stale_ = true;  // (a largest step of 0 never makes anyone join: nothing to lose)
  }
  if (FinishedPeer(p)) {
    finished_max_step_ = std::max(finished_max_step_, p.step);
  } else if (p.step >= finished_max_step_ && finished_max_step_ > 0) {
    finished_max_stale_ = true;
  }
  if (barrier_) {
    // The barrier follows membership as it changes: live, training peers with their steps; the
    // others leave it at once (docs/contract.md "Barriers"). No walk over the view per barrier run.
    // The sampled policies (pbsp, pssp) also leave out a suspected peer until it refutes the
    // suspicion: a stopped or cut-off host then holds the others' barriers and syncs (which wait
    // for the barrier's peers' models, daemon/trainer) for the probe that suspects it, not for
    // the suspicion timeout that declares it failed.
    // As asked: bsp/ssp run as sampled policies with every peer in the sample.
    const bool sampled = sync::IsProbabilistic(config_.barrier.policy);
    const bool counted = p.training && (sampled ? p.alive : p.live);
    const bool changed =
        counted ? barrier_->OnProgress(*p.name, p.step, now) : barrier_->OnPeerRemoved(*p.name);
    if (changed) progress_dirty_ = true;
  }
}

ms::Stats Node::MembershipStats() const { return swim_ ? swim_->stats() : ms::Stats{}; }

std::vector<ms::Member> Node::Members() const {
  if (swim_) return swim_->Members();
  std::vector<ms::Member> out;
  ms::Member self;
  self.name = config_.name;
  self.addr = config_.addr;
  self.step = progress_.step;
  self.meta.training = training();
  out.push_back(self);
  for (const ExternalPeer& v : external_) {
    ms::Member m;
    m.name = NameOf(v);
    m.addr = AddrOf(v);
    m.status = v.alive ? ms::Status::kAlive : ms::Status::kFailed;
    m.step = v.step;
    m.meta.training = v.training;
    m.meta.uplink_mbps = v.uplink_mbps;
    m.meta.downlink_mbps = v.downlink_mbps;
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(),
            [](const ms::Member& a, const ms::Member& b) { return a.name < b.name; });
  return out;
}

size_t Node::PeersAlive() const {
  if (swim_) return swim_->NumAlive() - (swim_->HasLeft() ? 0 : 1);
  size_t n = 0;
  for (const ExternalPeer& v : external_) n += v.alive ? 1 : 0;
  return n;
}

int Node::HealthScore() const { return swim_ ? swim_->HealthScore() : 0; }

uint64_t Node::Incarnation() const {
  const ms::Member* self = swim_ ? swim_->Find(config_.name) : nullptr;
  return self ? self->incarnation : 0;
}

ms::Reach Node::Reach() const { return swim_ ? swim_->reach() : ms::Reach::kUnknown; }

std::string Node::AdvertisedAddr() const { return swim_ ? swim_->config().addr : config_.addr; }

double Node::BarrierWaitSeconds(TimeMs now) const {
  return barrier_ ? barrier_->WaitSeconds(now) : 0.0;
}

double Node::uplink_estimate_mbps() const {
  return probes_.Uplink(up_.estimate, config_.uplink_limit_mbps);
}
double Node::downlink_estimate_mbps() const {
  return probes_.Downlink(down_.estimate, config_.downlink_limit_mbps);
}

// Gathers the peers a probe train may go to and sends one (LinkProbes: when and to whom).
void Node::SendProbe(TimeMs now) {
  if (!probes_.Due(now, lifecycle_.leaving(), round_ != nullptr)) return;
  const auto loopback = [](const std::string& a) {
    return a.rfind("127.", 0) == 0 || a.rfind("[::1]", 0) == 0;
  };
  // Trains go on direct or punched paths only, never through a relay (they would measure the
  // relay's links, and load them): a relayed member is probed at its direct return path while
  // it has one (membership::Config::direct_ttl), else not; a member that only our relay
  // reaches (we are relayed, it is behind NAT) is not probed.
  std::vector<LinkProbes::Peer> peers;
  std::map<std::string, std::string> direct;  // name -> where its train goes, if not p.addr
  ForEachPeer([&](const PeerRef& p) {
    if (!p.alive || p.addr->empty() || (!config_.probe_loopback && loopback(*p.addr))) return;
    const std::string* to = p.addr;
    if (swim_ && p.nat) {
      auto route = swim_->Route(*p.addr);
      if (route && !route->dest.empty()) return;  // through a relay only
      if (route) to = &(direct[*p.name] = std::move(route->via));
    }
    peers.push_back(LinkProbes::Peer{p.name, to, p.downlink_mbps});
  });
  auto link = probes_.Send(std::move(peers), uplink_estimate_mbps(), stats_.probes_sent, rng_, now);
  if (!link) return;
  stats_.probes_sent++;
  // The train opens a NAT's way for the peer's datagrams: not unsolicited.
  if (swim_) swim_->NoteSent(link->to);
  Emit(std::move(*link));
}

void Node::OnPeerView(const PeerView& v, TimeMs now) {
  if (swim_ || v.name == config_.name) return;
  const auto name_at = [this](size_t pos) -> const std::string& { return NameOf(external_[pos]); };
  const size_t pos = external_index_.Find(v.name, name_at);
  ExternalPeer* known = pos == sync::NameIndex::kNone ? nullptr : &external_[pos];
  const bool was_alive = known != nullptr && known->alive;
  ms::Member m;
  m.name = v.name;
  m.addr = v.addr;
  m.status = v.alive ? ms::Status::kAlive : ms::Status::kFailed;
  if (v.alive && !was_alive) {
    Emit(MemberEvent{ms::Event::Kind::kJoined, std::move(m)});
  } else if (!v.alive && was_alive) {
    Emit(MemberEvent{ms::Event::Kind::kFailed, std::move(m)});
    AbortTransfersTo(v.name);
  }
  const bool membership_changed =
      known == nullptr || known->alive != v.alive || known->training != v.training ||
      known->uplink_mbps != v.uplink_mbps || known->downlink_mbps != v.downlink_mbps;
  const bool was_eligible = known != nullptr && known->alive && known->training;
  external_eligible_ += (v.alive && v.training ? 1 : 0);
  external_eligible_ -= (was_eligible ? 1 : 0);
  if (known == nullptr) {
    ExternalPeer peer;
    peer.name = names_->Intern(v.name);
    external_.push_back(peer);
    external_index_.Insert(v.name, external_.size() - 1, external_.size(), name_at);
    known = &external_.back();
  }
  known->step = v.step;
  known->uplink_mbps = v.uplink_mbps;
  known->downlink_mbps = v.downlink_mbps;
  known->alive = v.alive;
  known->training = v.training;
  if (v.addr != v.name) {
    if (known->addr == 0) {
      external_addrs_.push_back(v.addr);
      known->addr = static_cast<uint32_t>(external_addrs_.size());
    } else {
      external_addrs_[known->addr - 1] = v.addr;
    }
  } else if (known->addr != 0) {
    external_addrs_[known->addr - 1].clear();  // the slot stays (no compaction: rare)
    known->addr = 0;
  }
  OnPeerChanged(RefOf(*known), membership_changed, now);
  progress_dirty_ = true;
  Pump(now, 0);
}

}  // namespace meshtrain::node
