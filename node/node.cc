#include "node/node.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include "node/node_internal.h"

namespace meshtrain::node {

namespace ms = ::meshtrain::membership;
using internal::IsLive;
using internal::kFrameOverheadBytes;

namespace {

const char* KindName(ms::Event::Kind k) {
  using K = ms::Event::Kind;
  switch (k) {
    case K::kJoined:
      return "joined";
    case K::kUpdated:
      return "updated";
    case K::kSuspect:
      return "suspect";
    case K::kAlive:
      return "alive again";
    case K::kFailed:
      return "failed";
    case K::kLeft:
      return "left";
    case K::kReaped:
      return "reaped";
  }
  return "?";
}

}  // namespace

void Node::BusyMeter::Begin(TimeMs now) {
  if (active++ == 0) since = now;
}
void Node::BusyMeter::End(TimeMs now, uint64_t moved) {
  bytes += moved;
  if (active > 0 && --active == 0) busy_ms += now - since;
}
void Node::BusyMeter::Sample() {
  if (busy_ms > 0 && bytes > 0) estimate.Add(static_cast<double>(bytes), busy_ms / 1000.0);
  busy_ms = 0;
  bytes = 0;
}

Node::Node(NodeConfig config, TimeMs now) : config_(std::move(config)), rng_(config_.seed) {
  names_ = config_.names ? config_.names : std::make_shared<sync::NameTable>();
  if (!config_.external_membership) {
    ms::Config m = config_.membership;
    m.name = config_.name;
    m.addr = config_.addr;
    swim_ = std::make_unique<ms::Swim>(m, rng_(), now);
    logged_addr_ = swim_->config().addr;
    swim_->TrackProgress(true);
  }
  progress_.step = config_.start_step;
  progress_.training = config_.training && config_.trainer_attached;
  published_step_ = config_.start_step;
  if (config_.training) {
    sync::BarrierConfig bc = config_.barrier;
    bc.probe_timeout = config_.membership.probe_timeout;
    // bsp/ssp need every peer's current step. Gossiped progress arrives about once per probe
    // interval, which would make each step wait up to a second; asking the peers directly is
    // pbsp/pssp with β >= live peers, which SPEC §6 defines to be exactly bsp/ssp.
    if (bc.policy == sync::Policy::kBsp || bc.policy == sync::Policy::kSsp) {
      bc.policy = bc.policy == sync::Policy::kBsp ? sync::Policy::kPbsp : sync::Policy::kPssp;
      bc.sample = std::numeric_limits<size_t>::max();
    }
    // Issue 33: our queries carry `need`, and a peer below it answers again when it gets there
    // (AddWatcher), so the barrier re-queries nobody who is watching for us. With every peer
    // sampled (bsp, ssp, wbsp) re-queries would ask every blocking peer each requery interval
    // while the node waits: N² queries a second over the mesh, and (each answer re-deciding
    // over every peer) N³ work. Not for dssp, whose controller needs the steps of peers below
    // s_L (a watcher answers only at need).
    if (WatchesPeers()) bc.peers_watch = true;
    barrier_ = std::make_unique<sync::BarrierCore>(bc, config_.name, names_);
    // --min-peers gates the first step of a fresh run only: a node resuming from its checkpoint
    // rejoins a mesh that is already training (or finished: waiting would then be forever).
    min_peers_reached_ = config_.resumed || config_.min_peers == 0;
  }
  bandwidth_at_ = now + config_.bandwidth_interval_ms;
  if (config_.capacity_probe_interval_ms > 0) probe_at_ = now + 1000;
}

Node::~Node() = default;

void Node::Start(TimeMs now) {
  if (swim_) {
    if (config_.training) {
      published_training_ = training();
      swim_->SetStep(progress_.step);
      SetOwnMeta(now);  // training and the bandwidth caps travel in the alive message
    } else if (!config_.tags.empty()) {
      SetOwnMeta(now);  // operator tags (issue 19) travel in the alive message too
    }
    if (!config_.join.empty() || config_.retry_join) {
      join_attempts_ = 1;
      if (!config_.join.empty()) swim_->Join(config_.join, now);
      if (config_.retry_join) retry_join_at_ = now + config_.retry_join_interval_ms;
    }
  }
  Pump(now, 0);
}

void Node::SetOwnMeta(TimeMs now) {
  if (!swim_) return;
  const ms::Member* self = swim_->Find(config_.name);
  ms::Meta meta = self ? self->meta : ms::Meta{};
  meta.data_addr = config_.data_addr == config_.addr ? std::string() : config_.data_addr;
  meta.training = training();
  meta.tags = config_.tags;
  if (self == nullptr || (meta.uplink_mbps == 0 && meta.downlink_mbps == 0)) {
    meta.uplink_mbps = static_cast<float>(uplink_estimate_mbps());
    meta.downlink_mbps = static_cast<float>(downlink_estimate_mbps());
  }
  swim_->SetMeta(meta, now);
}

void Node::StepIn(Input& input, TimeMs now) {
  ++stats_.inputs;
  std::visit(
      [&](auto& in) {
        using T = std::decay_t<decltype(in)>;
        if constexpr (std::is_same_v<T, DatagramIn>) {
          OnDatagram(in, now);
        } else if constexpr (std::is_same_v<T, FrameIn>) {
          OnFrame(in, now);
        } else if constexpr (std::is_same_v<T, ConnClosed>) {
          OnClosed(in, now);
        } else if constexpr (std::is_same_v<T, TrainerProgress>) {
          OnTrainer(in, now);
        } else if constexpr (std::is_same_v<T, SnapshotIn>) {
          OnSnapshot(std::move(in), now);
        } else if constexpr (std::is_same_v<T, PlanResult>) {
          OnPlan(std::move(in), now);
        } else if constexpr (std::is_same_v<T, JoinCmd>) {
          OnJoin(in, now);
        } else if constexpr (std::is_same_v<T, LeaveCmd>) {
          OnLeave(now);
        } else if constexpr (std::is_same_v<T, ForceLeaveCmd>) {
          OnForceLeave(in, now);
        } else if constexpr (std::is_same_v<T, PeerView>) {
          OnPeerView(in, now);
        } else if constexpr (std::is_same_v<T, ProbeResult>) {
          OnProbeResult(in, now);
        } else if constexpr (std::is_same_v<T, ProbeReceived>) {
          OnProbeReceived(in, now);
        } else if constexpr (std::is_same_v<T, ConsensusResult>) {
          OnConsensusResult(std::move(in), now);
        }
      },
      input);
}

void Node::Tick(TimeMs now) {
  ++stats_.inputs;
  if (swim_ && now >= swim_->NextDeadline()) swim_->Tick(now);
  if (now >= bandwidth_at_) {
    bandwidth_at_ = now + config_.bandwidth_interval_ms;
    UpdateBandwidth(now);
  }
  if (now >= probe_at_) SendProbe(now);
  if (now >= retry_join_at_) {
    retry_join_at_ = sync::kNoDeadline;
    if (swim_ && !leaving_ && swim_->NumAlive() <= 1) {
      const int max = config_.retry_join_max;
      if (max > 0 && join_attempts_ >= max) {
        Emit(JoinGaveUp{join_attempts_});
      } else {
        join_attempts_++;
        Emit(LogLine{false, "retry-join: contacting the configured peers (attempt " +
                                std::to_string(join_attempts_) + ")"});
        // The driver resolves the names again and answers with JoinCmd{0, ...}.
        Emit(RetryJoin{join_attempts_, max > 0 && join_attempts_ >= max});
        retry_join_at_ = now + config_.retry_join_interval_ms;
      }
    }
  }
  if (leaving_ && !left_) {
    const bool others = swim_ ? swim_->NumAlive() > 1 : false;
    const bool spread = swim_ ? swim_->PendingUpdates() == 0 : true;
    // SPEC §3: announce "left", wait up to leave_max_ms for the news to spread, then exit.
    if (!others || spread || now - leave_started_ >= config_.leave_max_ms) {
      left_ = true;
      Emit(LeaveDone{now - leave_started_});
    }
  }
  if (barrier_waiting_ && now >= barrier_deadline_) RunBarrier(now);
  ServeFinal(now);
  Pump(now, 0);
}

TimeMs Node::NextDeadline() const {
  TimeMs d = std::min({bandwidth_at_, retry_join_at_, probe_at_});
  if (swim_) d = std::min(d, swim_->NextDeadline());
  if (barrier_waiting_) d = std::min(d, barrier_deadline_);
  if (leaving_ && !left_) d = std::min(d, leave_started_ + 50);
  if (final_) d = std::min(d, final_serve_at_);
  return d;
}

std::vector<Output> Node::TakeOutput() {
  std::vector<Output> out;
  out.swap(out_);
  return out;
}

void Node::TakeOutput(std::vector<Output>* out) {
  out->clear();
  out->swap(out_);
}

void Node::Reject() { stats_.rejected++; }

void Node::SendTo(std::string addr, wire::Datagram dg) {
  if (!swim_) {
    Emit(SendDatagram{std::move(addr), std::move(dg), {}, {}});
    return;
  }
  auto route = swim_->Route(addr);
  swim_->NoteSent(route ? route->via : addr);
  if (route && route->dest.empty()) {
    // A relayed member's direct return path (membership::Config::direct_ttl).
    Emit(SendDatagram{std::move(route->via), std::move(dg), {}, {}});
  } else if (route) {
    Emit(SendDatagram{std::move(addr), std::move(dg), std::move(route->via),
                      std::move(route->dest)});
  } else {
    Emit(SendDatagram{std::move(addr), std::move(dg), {}, {}});
  }
}

void Node::OnRelayFrame(const DatagramIn& in, const wire::RelayFrame& rf, TimeMs now) {
  // Frames come straight from their sender or relay: one delivered through a relay is nested.
  if (!swim_ || in.from.empty()) return Reject();
  std::string to;
  const ms::RelayVerdict v =
      swim_->OnRelayFrame(in.msg.sender, in.from, rf.dest, rf.inner.size(), now, &to);
  if (v == ms::RelayVerdict::kDeliver) {
    Emit(RelayedIn{in.msg.sender, in.from, rf.inner});
  } else if (v == ms::RelayVerdict::kForward) {
    // The inner bytes as they came, in a frame of ours: the receiver accepts frames from the
    // relay it registered with.
    wire::Datagram dg;
    dg.sender = config_.name;
    dg.body = rf;
    swim_->NoteSent(to);
    Emit(SendDatagram{std::move(to), std::move(dg), {}, {}});
  }
}

void Node::Prefetch(int stage, const Input* in) const {
  if (stage == 0) {
    // The deadlines and flags read on every input sit together after the barrier state (node.h).
    const void* hot[] = {
        this,       &config_.training,  &swim_,  &external_index_, &out_,  &stats_, &barrier_,
        &progress_, &barrier_deadline_, &fetch_, &watchers_,       &round_};
    for (const void* p : hot) __builtin_prefetch(p);
    return;
  }
  if (stage == 1) {
    if (barrier_) {
      const char* b = reinterpret_cast<const char*>(barrier_.get());
      for (size_t off = 0; off < sizeof(sync::BarrierCore); off += 64) __builtin_prefetch(b + off);
    }
    return;
  }
  // Stages 2 and 3: the sender of a datagram (progress news for the barrier) or of a frame
  // (parameter chunks and acknowledgements: the external view and the barrier).
  const std::string* sender = nullptr;
  bool frame = false;
  if (const auto* d = std::get_if<DatagramIn>(in)) {
    sender = &d->msg.sender;
  } else if (const auto* f = std::get_if<FrameIn>(in)) {
    sender = &f->msg.sender;
    frame = true;
  }
  if (sender == nullptr || sender->empty()) return;
  if (barrier_) barrier_->Prefetch(*sender, stage - 2);
  if (frame && !swim_) {
    if (stage == 2) {
      external_index_.PrefetchBucket(*sender);
    } else {
      const size_t pos = external_index_.Probe(*sender);
      if (pos < external_.size()) __builtin_prefetch(&external_[pos]);
    }
  }
}

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
  if (barrier_) {
    // The barrier follows membership as it changes: live, training peers with their steps; the
    // others leave it at once (SPEC §6). No walk over the view per barrier run.
    const bool changed = p.live && p.training ? barrier_->OnProgress(*p.name, p.step, now)
                                              : barrier_->OnPeerRemoved(*p.name);
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
  return WithProbes(up_.estimate, probe_up_, config_.uplink_limit_mbps);
}
double Node::downlink_estimate_mbps() const {
  return WithProbes(down_.estimate, probe_down_, config_.downlink_limit_mbps);
}

double Node::WithProbes(const sync::BandwidthEstimate& e, const ProbeRates& probes, double cap) {
  std::vector<double> all;
  for (const auto& [who, rates] : probes) {
    for (const ProbeRate& r : rates) all.push_back(r.mbps);
  }
  if (all.empty()) return e.CapacityMbps(cap);
  const double probed = sync::ConfirmedRate(std::move(all));  // see the comment at SendProbe
  return cap > 0 ? std::min(probed, cap) : probed;
}

// ---- Link-capacity probes ----------------------------------------------------------------------
// A transfer's rate says little about the link (TCP's window, the receiver's loop, a short
// transfer hold it back; a burst read after a busy spell inflates it); a probe train measures
// the path's capacity (wire/link_probe.h): the smaller of our uplink and the receiver's
// downlink, or less while other traffic shares the link; more only when a backlog in front of
// the receiver's downlink drains while the train queues behind it and the train leaves at the
// receiver's rate (a 40 Mbit/s sender once read 160 on the bed). The receiver answers such a
// train "queued" when its first datagram came much later than that sender's quickest of the
// last 8 (wire/link_probe.h), and "contended" when it arrived at about its own downlink rate
// while other traffic came in; what slips through is rare, so the estimate is the largest
// recent figure that a second probe confirms within 25 % (the same squeeze twice is rarer
// still), and transfers count only until the first probe result. The first
// probes go to peers not probed yet; then every other probe goes to a peer publishing about the
// largest downlink (the one most likely not to be the narrower end), the others to a random live
// peer.
void Node::SendProbe(TimeMs now) {
  probe_at_ = now + 1000;
  if (leaving_ || (probe_id_ != 0 && now - probe_sent_at_ < kProbeTimeoutMs)) return;
  // Our own parameter transfer would queue in front of the train on our uplink (and make the
  // receiver see it late: wire/link_probe.h, queued trains): wait for the round to end, up
  // to a second.
  if (round_) {
    if (probe_defer_from_ < 0) probe_defer_from_ = now;
    if (now - probe_defer_from_ < 1000) {
      probe_at_ = now + 20;
      return;
    }
  }
  probe_defer_from_ = -1;
  probe_id_ = 0;
  const auto loopback = [](const std::string& a) {
    return a.rfind("127.", 0) == 0 || a.rfind("[::1]", 0) == 0;
  };
  // Issue 34: trains go on direct or punched paths only, never through a relay (they would
  // measure the relay's links, and load them): a relayed member is probed at its direct return
  // path while it has one (membership::Config::direct_ttl), else not; a member that only our
  // relay reaches (we are relayed, it is behind NAT) is not probed.
  std::vector<PeerRef> peers;
  std::map<std::string, std::string> direct;  // name -> where its train goes, if not p.addr
  ForEachPeer([&](const PeerRef& p) {
    if (!p.alive || p.addr->empty() || (!config_.probe_loopback && loopback(*p.addr))) return;
    if (swim_ && p.nat) {
      auto route = swim_->Route(*p.addr);
      if (route && !route->dest.empty()) return;  // through a relay only
      if (route) direct[*p.name] = std::move(route->via);
    }
    peers.push_back(p);
  });
  // The order SWIM's sorted member list gave (the shuffle below draws the same numbers).
  std::sort(peers.begin(), peers.end(),
            [](const PeerRef& a, const PeerRef& b) { return *a.name < *b.name; });
  if (peers.empty()) return;
  std::shuffle(peers.begin(), peers.end(), rng_);
  size_t pick = 0;
  const auto unprobed = std::find_if(peers.begin(), peers.end(),
                                     [&](const PeerRef& p) { return probed_.count(*p.name) == 0; });
  const auto recheck = std::find_if(peers.begin(), peers.end(),
                                    [&](const PeerRef& p) { return *p.name == probe_confirm_; });
  if (recheck != peers.end()) {
    // Our highest figure is unconfirmed: probe that path again to confirm or refute it.
    pick = static_cast<size_t>(recheck - peers.begin());
  } else if (stats_.probes_sent < static_cast<uint64_t>(kProbeFastProbes) &&
             unprobed != peers.end()) {
    // The first probes go to peers not probed yet: on a small mesh every path is measured
    // within the first seconds (the fast peer that confirms a fast uplink is among them).
    pick = static_cast<size_t>(unprobed - peers.begin());
  } else if (stats_.probes_sent % 2 == 0) {
    // Peers within 20 % of the largest published downlink count as equal (the first of them in
    // the shuffled order): downlink figures carry noise, and the strict largest kept a peer out
    // for good (on the bed a 640 Mbit/s host whose only 640 Mbit/s peer published about 160, as
    // two 160 Mbit/s peers did, probed one of those every other time for a minute, never the
    // fast one again, and published 160).
    const auto usable = [&](size_t i) {
      return peers.size() == 1 || *peers[i].name != probe_last_peer_;
    };
    double best = 0;
    for (size_t i = 0; i < peers.size(); ++i) {
      if (usable(i)) best = std::max(best, static_cast<double>(peers[i].downlink_mbps));
    }
    for (size_t i = 0; i < peers.size(); ++i) {
      if (usable(i) && peers[i].downlink_mbps >= 0.8 * best) {
        pick = i;
        break;
      }
    }
  }
  // Long enough to span ~20 ms at the largest rate this path might show (the estimate, or a
  // higher figure awaiting confirmation), so that timer and scheduling noise stay small beside
  // it: 256 to 1024 datagrams (0.3 to 1.3 MB). (Sized by a low estimate alone, a fast host's
  // trains lasted 1 ms and mostly measured noise.)
  double size_mbps = uplink_estimate_mbps();
  for (const auto& [who, rates] : probe_up_) {
    for (const ProbeRate& r : rates) size_mbps = std::max(size_mbps, r.mbps);
  }
  const int packets =
      static_cast<int>(std::clamp(std::ceil(size_mbps * 1e6 * 0.020 / 1242.0), 256.0, 1024.0));
  probe_id_ = rng_() | 1;
  probe_peer_ = *peers[pick].name;
  probe_confirm_.clear();
  probed_.insert(probe_peer_);
  if (probed_.size() > 4096) probed_.clear();
  probe_sent_at_ = now;
  stats_.probes_sent++;
  const auto d = direct.find(probe_peer_);
  const std::string& to = d != direct.end() ? d->second : *peers[pick].addr;
  // The train opens a NAT's way for the peer's datagrams: not unsolicited (issue 34).
  if (swim_) swim_->NoteSent(to);
  Emit(ProbeLink{probe_id_, to, packets});
  const TimeMs base = stats_.probes_sent <= static_cast<uint64_t>(kProbeFastProbes)
                          ? 2000
                          : config_.capacity_probe_interval_ms;
  probe_at_ = now + base + static_cast<TimeMs>(rng_() % static_cast<uint64_t>(base / 10 + 1));
}

void Node::OnProbeResult(const ProbeResult& r, TimeMs now) {
  if (probe_id_ == 0 || r.id != probe_id_) return;  // given up, or not ours: nothing to learn
  probe_id_ = 0;
  probe_last_peer_ = probe_peer_;
  if (!(r.mbps > 0) || !std::isfinite(r.mbps) || r.mbps > 1e6) return;
  const double before = WithProbes(up_.estimate, probe_up_, 0);
  auto& rates = probe_up_[probe_peer_];
  rates.push_back(ProbeRate{r.mbps, now});
  if (rates.size() > kProbeRatesPerPeer) rates.erase(rates.begin());
  stats_.probes_measured++;
  // A figure well above the estimate that nothing confirms yet: check that path again soon
  // (once per such figure), rather than wait for chance to pick it. The very first figure is
  // the estimate on its own, confirmed by nothing: it is checked too (unchecked, a 640 Mbit/s
  // host's first train, 638, was confirmed only 47 s later, by chance).
  size_t figures = 0;
  for (const auto& [who, rs] : probe_up_) figures += rs.size();
  if (r.mbps > 1.33 * before && (figures == 1 || WithProbes(up_.estimate, probe_up_, 0) < r.mbps)) {
    probe_confirm_ = probe_peer_;
    probe_at_ = std::min(probe_at_, now + 2000);
  }
}

void Node::OnProbeReceived(const ProbeReceived& r, TimeMs now) {
  if (!(r.mbps > 0) || !std::isfinite(r.mbps) || r.mbps > 1e6 || r.from.empty()) return;
  auto& rates = probe_down_[r.from];
  rates.push_back(ProbeRate{r.mbps, now});
  if (rates.size() > kProbeRatesPerPeer) rates.erase(rates.begin());
  if (probe_down_.size() > 64) {  // senders are addresses: bounded against churn and spoofing
    auto oldest = std::min_element(
        probe_down_.begin(), probe_down_.end(),
        [](const auto& a, const auto& b) { return a.second.back().at < b.second.back().at; });
    probe_down_.erase(oldest);
  }
}

void Node::AgeProbes(TimeMs now) {
  const TimeMs keep =
      std::max<TimeMs>(kProbeKeepIntervals * config_.capacity_probe_interval_ms, 60000);
  for (ProbeRates* m : {&probe_up_, &probe_down_}) {
    for (auto it = m->begin(); it != m->end();) {
      auto& rates = it->second;
      rates.erase(std::remove_if(rates.begin(), rates.end(),
                                 [&](const ProbeRate& r) { return now - r.at > keep; }),
                  rates.end());
      it = rates.empty() ? m->erase(it) : std::next(it);
    }
  }
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

// Sends what the membership core wants sent, reports its events, and re-runs the barrier when
// membership or progress changed. `join_tag` tags new push-pulls with the join that caused them.
void Node::Pump(TimeMs now, uint64_t join_tag) {
  bool changed = false;
  if (swim_) {
    for (auto& p : swim_->TakePackets()) {
      wire::Datagram dg;
      dg.sender = config_.name;
      dg.body = std::move(p.packet);
      Emit(SendDatagram{std::move(p.to_addr), std::move(dg), std::move(p.via), std::move(p.dest)});
    }
    for (auto& pp : swim_->TakePushPulls()) StartPushPull(pp, join_tag, now);
    if (swim_->reach() != logged_reach_ || swim_->config().addr != logged_addr_) {
      // Issue 34: what the node found out about its reachability, once per change.
      logged_reach_ = swim_->reach();
      const bool moved = !logged_addr_.empty() && swim_->config().addr != logged_addr_;
      logged_addr_ = swim_->config().addr;
      Emit(LogLine{
          false,
          std::string("reachability: ") + ms::ReachName(logged_reach_) +
              (moved ? ", advertising " + logged_addr_ + " (where peers see this node)" : "")});
    }
    const std::string relay = swim_->relay_registered() ? swim_->relay() : std::string();
    if (relay != logged_relay_) {
      // Issue 34: behind symmetric NAT, the relay this node is reached through.
      Emit(LogLine{false, relay.empty() ? "relay: none (looking for one)"
                                        : "relay: reached through " + relay + ", advertising " +
                                              swim_->config().addr});
      logged_relay_ = relay;
    }
    for (const std::string& name : swim_->TakeProgressNews()) {
      const ms::Member* m = swim_->Find(name);
      if (m != nullptr && name != config_.name) OnPeerChanged(RefOf(*m), false, now);
    }
    for (auto& ev : swim_->TakeEvents()) {
      if (ev.member.name != config_.name) {
        // The event carries a copy; the record may have changed since (and a reaped member is
        // gone: the copy says how it left).
        const ms::Member* m = swim_->Find(ev.member.name);
        PeerRef ref = RefOf(m != nullptr ? *m : ev.member);
        // A member the core no longer holds (reaped, or evicted from a bounded view while
        // alive) leaves the barrier and the candidates.
        if (m == nullptr) ref.live = ref.alive = false;
        OnPeerChanged(ref, true, now);
      }
      if (ev.kind == ms::Event::Kind::kUpdated) continue;
      changed = true;
      if (ev.kind == ms::Event::Kind::kFailed || ev.kind == ms::Event::Kind::kLeft) {
        AbortTransfersTo(ev.member.name);
      }
      if (ev.kind == ms::Event::Kind::kLeft || ev.kind == ms::Event::Kind::kReaped) {
        // Compressed-transfer references (a failed member may come back and still hold its
        // copy; one that left or was reaped starts over with a full snapshot).
        tx_refs_.erase(ev.member.name);
        rx_refs_.erase(ev.member.name);
      }
      Emit(LogLine{ev.kind == ms::Event::Kind::kFailed,
                   "member " + ev.member.name + " " + KindName(ev.kind) +
                       (ev.kind == ms::Event::Kind::kJoined ? " at " + ev.member.addr : "")});
      Emit(MemberEvent{ev.kind, std::move(ev.member)});
    }
  }
  if (changed) Emit(MembershipChanged{});
  if (changed && fetch_.phase != Fetch::kDone) PublishTraining(now);
  if (changed || progress_dirty_) {
    if (barrier_waiting_) {
      progress_dirty_ = false;
      RunBarrier(now);
    } else if (early_permit_ < progress_.step + 2) {
      progress_dirty_ = false;
      TryEarlyPermit(now);
    }
  }
}

void Node::OnDatagram(DatagramIn& in, TimeMs now) {
  wire::Datagram& dg = in.msg;
  if (auto* pkt = std::get_if<ms::Packet>(&dg.body)) {
    if (!swim_) return Reject();
    swim_->HandlePacket(in.from, *pkt, now);
    progress_dirty_ = true;
  } else if (auto* rf = std::get_if<wire::RelayFrame>(&dg.body)) {
    OnRelayFrame(in, *rf, now);
  } else if (auto* q = std::get_if<wire::ProgressQuery>(&dg.body)) {
    if (swim_ && !in.from.empty()) swim_->NoteDirect(dg.sender, in.from, now);
    if (in.from.empty()) {
      // Delivered by our relay: the answer goes to the querier's advertised address (through
      // its relay, if it has one).
      // A member that learned of us first queries before we know it: nothing says where to
      // answer (a well-formed query: dropped, not counted as refused), and it asks again.
      const ms::Member* m = swim_ ? swim_->Find(dg.sender) : nullptr;
      if (m == nullptr) return;
      in.from = m->addr;
    }
    wire::Datagram reply;
    reply.sender = config_.name;
    reply.body = wire::ProgressReply{q->seq, progress_.step, training()};
    const bool below = training() && q->need > progress_.step;
    const bool watched = below && AddWatcher(dg.sender, in.from, q->seq, q->need);
    // The query carries the querier's step: progress news, but only about a peer the barrier
    // already tracks (membership put it there as live and training, SPEC §6). A stranger would
    // stay in the barrier's view, where nothing removes it.
    if (barrier_ && training()) barrier_->OnKnownProgress(dg.sender, q->step, now);
    // Where barriers watch (WatchesPeers: a mesh runs one policy) a peer below the query's
    // need answers only when it gets there. Its answer at once could not let the querier pass
    // (it is below need) and is not waited for (the round ends at the probe timeout either
    // way): at 200 nodes it was a fifth of pbsp's messages.
    if (watched && WatchesPeers()) return Pump(now, 0);
    SendTo(in.from, std::move(reply));
  } else if (auto* rep = std::get_if<wire::ProgressReply>(&dg.body)) {
    if (swim_ && !in.from.empty()) swim_->NoteDirect(dg.sender, in.from, now);
    if (!barrier_) return;
    const bool changed = rep->training
                             ? barrier_->OnReply(dg.sender, rep->seq, rep->step, now, !rep->watched)
                             : barrier_->OnPeerRemoved(dg.sender);
    if (changed) OnBarrierNews(now);
    return;
  }
  Pump(now, 0);
}

void Node::OnFrame(FrameIn& in, TimeMs now) {
  wire::Frame& f = in.msg;
  // Replies on connections this node opened.
  if (auto pull = pulls_.find(in.conn); pull != pulls_.end()) {
    auto* chunk = std::get_if<wire::ParamChunk>(&f.body);
    // A snapshot as a whole; the consensus model only from the consensus leader we asked.
    const bool consensus_ok = chunk != nullptr && chunk->consensus && config_.consensus &&
                              !consensus_.leader.empty() && f.sender == consensus_.leader;
    if (chunk == nullptr || f.sender != pull->second || chunk->base != 0 || chunk->keyed ||
        chunk->final || (chunk->consensus && !consensus_ok) || chunk->fragment) {
      Reject();
      pulls_.erase(pull);
      Emit(Close{in.conn, true});
      return;
    }
    return OnParamChunk(in.conn, f.sender, *chunk, now);
  }
  if (in.conn >= kFirstOutgoingConn) {
    if (fetch_.phase == Fetch::kWaiting && in.conn == fetch_.conn) {
      return OnStateChunk(in.conn, f, now);
    }
    if (auto pp = pushpulls_.find(in.conn); pp != pushpulls_.end()) {
      auto* msg = std::get_if<wire::PushPullMsg>(&f.body);
      if (msg == nullptr || !msg->response || pp->second->done) {
        Reject();
        Emit(Close{in.conn, true});
        return;
      }
      return OnPushPullReply(in.conn, *msg, now);
    }
    const auto* ack = std::get_if<wire::ParamAckMsg>(&f.body);
    auto t = round_ ? round_->transfers.find(in.conn) : decltype(round_->transfers)::iterator{};
    if (!round_ || t == round_->transfers.end() || ack == nullptr ||
        f.sender != t->second.receiver || ack->round != round_->id) {
      Reject();
      DropDataConn(in.conn);
      Emit(Close{in.conn, true});
      return;
    }
    if (ack->need_full) {
      // The receiver lacks the reference this change was against: nothing was mixed, the
      // transfer is lost and the next one to it is a full snapshot.
      tx_refs_.erase(f.sender);
      FinishTransfer(in.conn, false, now);
      return;
    }
    // Delivered; the connection stays open for the next transfer to this receiver.
    FinishTransfer(in.conn, true, now);
    if (barrier_ && barrier_->OnProgress(f.sender, ack->step, now)) OnBarrierNews(now);
    return;
  }
  // Requests on accepted connections.
  if (auto* pp = std::get_if<wire::PushPullMsg>(&f.body)) {
    if (pp->response || !swim_ || serving_.count(in.conn) > 0) {
      Reject();
      Emit(Close{in.conn, true});
      return;
    }
    wire::Frame reply;
    reply.sender = config_.name;
    reply.body = wire::PushPullMsg{true, swim_->HandlePushPullRequest(pp->state, now)};
    serving_.insert(in.conn);
    Emit(SendFrame{in.conn, std::move(reply)});
    Emit(Close{in.conn, false});
    Pump(now, 0);
  } else if (auto* chunk = std::get_if<wire::ParamChunk>(&f.body)) {
    OnParamChunk(in.conn, f.sender, *chunk, now);
  } else if (std::holds_alternative<wire::StateRequestMsg>(f.body) &&
             serving_.count(in.conn) == 0) {
    serving_.insert(in.conn);
    ServeState(in.conn, f.sender);
  } else {
    Reject();
    Emit(Close{in.conn, true});
  }
}

void Node::OnClosed(const ConnClosed& in, TimeMs now) {
  serving_.erase(in.conn);
  pulls_.erase(in.conn);
  state_waiters_.erase(std::remove(state_waiters_.begin(), state_waiters_.end(), in.conn),
                       state_waiters_.end());
  if (fetch_.phase == Fetch::kWaiting && in.conn == fetch_.conn) return OnStateClosed(now);
  if (incoming_.count(in.conn) > 0) return EndIncoming(in.conn, now);
  if (auto it = pushpulls_.find(in.conn); it != pushpulls_.end()) {
    std::unique_ptr<PushPull> pp = std::move(it->second);
    pushpulls_.erase(it);
    if (!pp->done) {
      if (pp->join) {
        Emit(LogLine{true, "could not join through " + pp->addr +
                               (config_.retry_join ? " (will retry)"
                                                   : " (use --retry-join to keep trying)")});
      }
      if (swim_) swim_->PushPullFailed(pp->addr, now);
    }
    FinishJoinPart(pp->join_tag, pp->done);
    Pump(now, 0);
    return;
  }
  DropDataConn(in.conn);
  // Closed before the receiver acknowledged: the transfer on it is lost.
  if (round_ && round_->transfers.count(in.conn) > 0) FinishTransfer(in.conn, false, now);
}

// ---- training: barrier ----------------------------------------------------------------------

// Peers that wait for our step (their ProgressQuery.need) hear it when we get there, or that we
// stopped training: one ProgressReply each, with the seq of their query.
bool Node::AddWatcher(const std::string& name, const std::string& addr, uint32_t seq,
                      uint64_t need) {
  const auto name_at = [this](size_t i) -> const std::string& { return watchers_[i].name; };
  const size_t pos = watcher_index_.Find(name, name_at);
  if (pos != sync::NameIndex::kNone) {
    Watcher& w = watchers_[pos];
    w.addr = addr;
    w.seq = seq;
    w.need = need;
  } else {
    const size_t view = barrier_ ? barrier_->view().size() : 0;
    if (watchers_.size() >= std::max(kMaxWatchers, view + 1)) return false;
    watchers_.push_back(Watcher{name, addr, seq, need});
    watcher_index_.Insert(name, watchers_.size() - 1, watchers_.size(), name_at);
  }
  // The smallest need only falls here (a replaced watcher's larger need is caught by the walk).
  watchers_min_need_ = watchers_.size() == 1 ? need : std::min(watchers_min_need_, need);
  return true;
}

void Node::NotifyWatchers() {
  if (training() && progress_.step < watchers_min_need_) return;  // nobody is due
  const auto name_at = [this](size_t i) -> const std::string& { return watchers_[i].name; };
  // The due watchers leave the vector (the last one fills each hole) and are answered in name
  // order, as the sorted map this replaced did.
  std::vector<Watcher> due;
  uint64_t min_need = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < watchers_.size();) {
    if (training() && progress_.step < watchers_[i].need) {
      min_need = std::min(min_need, watchers_[i].need);
      ++i;
      continue;
    }
    watcher_index_.Erase(watchers_[i].name, name_at);
    due.push_back(std::move(watchers_[i]));
    if (i + 1 != watchers_.size()) {
      watcher_index_.Relocate(watchers_.back().name, i, name_at);
      watchers_[i] = std::move(watchers_.back());
    }
    watchers_.pop_back();
  }
  watchers_min_need_ = min_need;
  std::sort(due.begin(), due.end(),
            [](const Watcher& a, const Watcher& b) { return a.name < b.name; });
  for (Watcher& w : due) {
    wire::Datagram reply;
    reply.sender = config_.name;
    reply.body = wire::ProgressReply{w.seq, progress_.step, training(), true};
    SendTo(std::move(w.addr), std::move(reply));
  }
}

void Node::OnTrainer(const TrainerProgress& p, TimeMs now) {
  if (!config_.training) return;
  const bool step_changed = p.step != progress_.step;
  const bool eval_changed = p.eval != progress_.eval;
  progress_ = p;
  if (swim_ && step_changed) swim_->SetStep(p.step);
  if (swim_ && eval_changed) swim_->SetEval(p.eval);
  if (swim_ && p.step_ms > 0) swim_->SetStepMs(p.step_ms);
  if (!watchers_.empty() && (step_changed || !training())) NotifyWatchers();
  PublishTraining(now);  // peers' barriers stop waiting on us when we stop (SPEC §6)
  if (p.training && (p.waiting || (config_.overlap_barrier && step_changed))) {
    // With overlap a completed step starts the next Check at once, before the trainer asks:
    // it passes (and prefetches) while the trainer still holds an early permit or is on its
    // way to wait.
    barrier_waiting_ = true;
    RunBarrier(now);
  } else if (!p.training || !config_.overlap_barrier) {
    barrier_waiting_ = false;
  }
  Pump(now, 0);
}

// The median of the compute times per step that live training peers publish (their step
// intervals would not do: a barrier makes everyone's interval the straggler's). A walk over the
// view, so it is recomputed at most once a second: the mesh's pace changes slowly.
double Node::MeshStepMs(TimeMs now) {
  if (!swim_) return 0;
  if (mesh_step_at_ && now - *mesh_step_at_ < 1000) return mesh_step_ms_;
  mesh_step_at_ = now;
  std::vector<double> intervals;
  ForEachPeer([&](const PeerRef& p) {
    if (p.alive && p.training && p.step_ms > 0) intervals.push_back(p.step_ms);
  });
  mesh_step_ms_ = 0;
  if (intervals.empty()) return 0;
  auto mid = intervals.begin() + static_cast<std::ptrdiff_t>(intervals.size() / 2);
  std::nth_element(intervals.begin(), mid, intervals.end());
  mesh_step_ms_ = *mid;
  return mesh_step_ms_;
}

// Sends the barrier's queries for passing from `step` (completed steps) to step + 1.
void Node::SendBarrierQueries(uint64_t step) {
  const std::vector<sync::ProgressQuery> queries = barrier_->TakeQueries();
  if (!swim_ && queries.size() > 1) {
    // The external view's index buckets, then entries, of every receiver, requested together
    // (no effect on behaviour): with thousands of simulated nodes each lookup below is a chain
    // of cache misses, which would otherwise come one receiver after the other.
    for (const auto& q : queries) external_index_.PrefetchBucket(q.to);
    for (const auto& q : queries) {
      const size_t pos = external_index_.Probe(q.to);
      if (pos < external_.size()) __builtin_prefetch(&external_[pos]);
    }
  }
  for (const auto& q : queries) {
    const std::string* addr = PeerAddr(q.to);
    if (addr == nullptr) continue;
    wire::Datagram dg;
    dg.sender = config_.name;
    // `need`: the step this node waits for from the peer; a peer below it answers again when it
    // gets there, so the wait ends without polling (re-queries stay as the fallback).
    const uint64_t bound = barrier_->SampledBound();
    const uint64_t need = step > bound ? step - bound : 0;
    // Our own step is what we completed (a prefetch runs ahead of it, the report never does).
    dg.body = wire::ProgressQuery{q.seq, progress_.step, need};
    SendTo(*addr, std::move(dg));
  }
}

// OSP: while the trainer computes step c + 1 (permitted, not yet reported), the permit for
// c + 2 is granted as soon as what is known shows the barrier would let a node at c + 1 pass.
// Peers' progress only grows, so the bound holds when the step ends; the trainer then goes on
// without a round trip through the node for the permit (the daemon's loop thread may be busy
// with parameter transfers). The Check at the step's end still runs and opens the next episode.
void Node::TryEarlyPermit(TimeMs now) {
  if (!config_.overlap_barrier || !barrier_ || barrier_waiting_ || !min_peers_reached_ ||
      !training() || fetch_.phase != Fetch::kDone || early_permit_ >= progress_.step + 2) {
    return;
  }
  if (!barrier_->PassesAhead(progress_.step + 1)) return;
  early_permit_ = progress_.step + 2;
  ++stats_.early_permits;
  Emit(Permit{early_permit_, MeshStepMs(now)});
}

// New progress news for the barrier: a waiting Check runs again; otherwise an early permit may
// have become possible.
void Node::OnBarrierNews(TimeMs now) {
  if (barrier_waiting_) {
    RunBarrier(now);
  } else {
    TryEarlyPermit(now);
  }
}

void Node::RunBarrier(TimeMs now) {
  if (!barrier_waiting_ || !barrier_) return;
  barrier_deadline_ = sync::kNoDeadline;
  if (!min_peers_reached_) {
    // --min-peers: the mesh forms before anyone trains, so no node races ahead alone.
    if (barrier_->view().size() < config_.min_peers) {
      // Enough live members but too few seen training: a peer's change of `training` may have
      // missed us (gossip's budget is small in a small mesh, and it went out before that peer
      // knew us); a push-pull fetches the current view instead of waiting for the periodic one.
      if (swim_ && PeersAlive() >= config_.min_peers) swim_->RequestPushPull(now);
      barrier_deadline_ = now + config_.min_peers_poll_ms;
      return;
    }
    min_peers_reached_ = true;
    Emit(LogLine{false, std::to_string(barrier_->view().size()) +
                            " training peers alive: starting to train"});
  }
  if (!StateReady(now)) return;  // a fresh node joining a running mesh fetches its model first
  const sync::Decision d = barrier_->Check(progress_.step, now, rng_);
  SendBarrierQueries(progress_.step);
  if (d == sync::Decision::kPass) {
    barrier_waiting_ = false;
    Emit(Permit{progress_.step + 1, MeshStepMs(now)});
    if (config_.overlap_barrier) {
      // OSP: the queries for the next step go out while this one computes.
      barrier_->Prefetch(progress_.step + 1, now, rng_);
      SendBarrierQueries(progress_.step + 1);
      TryEarlyPermit(now);
    }
    return;
  }
  const sync::TimeMs deadline = barrier_->NextDeadline();
  barrier_deadline_ = deadline == sync::kNoDeadline ? now + 1000 : std::max(deadline, now + 1);
}

// ---- push-pull, joins, leave ------------------------------------------------------------------

void Node::StartPushPull(const ms::OutPushPull& pp, uint64_t join_tag, TimeMs now) {
  (void)now;
  const ConnId conn = next_conn_++;
  auto ctx = std::make_unique<PushPull>();
  ctx->addr = pp.to_addr;
  ctx->join = pp.request.join;
  ctx->join_tag = join_tag;
  pushpulls_[conn] = std::move(ctx);
  if (join_tag != 0) {
    if (auto j = joins_.find(join_tag); j != joins_.end()) j->second.outstanding++;
  }
  wire::Frame f;
  f.sender = config_.name;
  f.body = wire::PushPullMsg{false, pp.request};
  Emit(Connect{conn, pp.to_addr});
  Emit(SendFrame{conn, std::move(f)});
}

void Node::OnPushPullReply(ConnId conn, wire::PushPullMsg& msg, TimeMs now) {
  pushpulls_[conn]->done = true;
  swim_->HandlePushPullResponse(msg.state, now);
  Emit(Close{conn, false});
  Pump(now, 0);
}

void Node::FinishJoinPart(uint64_t tag, bool ok) {
  if (tag == 0) return;
  auto it = joins_.find(tag);
  if (it == joins_.end()) return;
  it->second.outstanding--;
  if (ok) it->second.joined++;
  if (it->second.outstanding > 0) return;
  CommandDone done{tag, it->second.joined > 0, it->second.joined, ""};
  if (!done.ok) done.error = "could not contact any of the given peers";
  joins_.erase(it);
  Emit(std::move(done));
}

void Node::OnJoin(const JoinCmd& c, TimeMs now) {
  if (c.tag == 0) {  // a retry-join's resolved addresses: nobody waits for an answer
    if (leaving_ || !swim_) return;
    if (!c.addrs.empty()) swim_->Join(c.addrs, now);
    Pump(now, 0);
    return;
  }
  if (leaving_ || !swim_) {
    Emit(CommandDone{c.tag, false, 0, leaving_ ? "agent is leaving" : "no membership"});
    return;
  }
  joins_[c.tag] = JoinWait{};
  swim_->Join(c.addrs, now);
  Pump(now, c.tag);
  auto it = joins_.find(c.tag);
  if (it != joins_.end() && it->second.outstanding == 0) {
    joins_.erase(it);
    Emit(CommandDone{c.tag, false, 0, "no push-pull could be started"});
  }
}

void Node::OnLeave(TimeMs now) {
  if (leaving_) return;
  leaving_ = true;
  leave_started_ = now;
  retry_join_at_ = sync::kNoDeadline;
  barrier_waiting_ = false;
  pending_.reset();
  if (swim_) swim_->Leave(now);
  Pump(now, 0);
}

void Node::OnForceLeave(const ForceLeaveCmd& c, TimeMs now) {
  if (swim_ && swim_->ForceLeave(c.name, now)) {
    Pump(now, 0);
    Emit(CommandDone{c.tag, true, 0, ""});
    return;
  }
  const ms::Member* m = swim_ ? swim_->Find(c.name) : nullptr;
  Emit(CommandDone{
      c.tag, false, 0,
      m == nullptr ? "no member named '" + c.name + "'"
                   : "member '" + c.name + "' is " + ms::StatusName(m->status) + ", not failed"});
}

// Every bandwidth_interval_ms: measurements become estimates, published when they moved > 10 %.
void Node::UpdateBandwidth(TimeMs now) {
  up_.Sample();
  down_.Sample();
  // Capacity estimates age with a half-life of about 30 s (15 ticks of 2 s).
  up_.estimate.Decay(0.955);
  down_.estimate.Decay(0.955);
  AgeProbes(now);
  if (!swim_ || leaving_) return;
  const ms::Member* self = swim_->Find(config_.name);
  if (self == nullptr) return;
  const float up = static_cast<float>(uplink_estimate_mbps());
  const float down = static_cast<float>(downlink_estimate_mbps());
  auto moved = [](float a, float b) { return std::abs(a - b) > 0.1f * std::max(a, b); };
  if (moved(up, self->meta.uplink_mbps) || moved(down, self->meta.downlink_mbps)) {
    ms::Meta meta = self->meta;
    meta.uplink_mbps = up;
    meta.downlink_mbps = down;
    swim_->SetMeta(meta, now);
  }
}

}  // namespace meshtrain::node
