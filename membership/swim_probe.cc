// SWIM probing (direct ping, indirect ping-reqs, Lifeguard nacks), piggybacked gossip and the
// push-pull schedule: the half of Swim::Impl that decides what to send when.
#include "membership/swim_impl.h"

namespace meshtrain::membership {

NodeState* Swim::Impl::NextProbeTarget() {
  // Randomized round-robin (SWIM §4.3): walk a shuffled list, reshuffle after each pass.
  for (size_t checked = 0; checked < nodes_.size(); ++checked) {
    if (probe_index_ >= nodes_.size()) {
      std::shuffle(nodes_.begin(), nodes_.end(), rng_);
      probe_index_ = 0;
    }
    NodeState* st = nodes_[probe_index_++];
    if (st == self_ || IsDeadOrLeft(st->m.status)) continue;
    return st;
  }
  return nullptr;
}

void Swim::Impl::StartProbe() {
  // Lifeguard: the interval and the timeout stretch with our own health score.
  const TimeMs interval = awareness_.Scale(cfg_.probe_interval);
  next_probe_ = now_ + interval;
  NodeState* target = NextProbeTarget();
  if (target == nullptr) return;
  probe_ = Probe{};
  probe_.active = true;
  probe_.seq = NextSeq();
  probe_.target = target->m.name;
  probe_.timeout_at = now_ + awareness_.Scale(cfg_.probe_timeout);
  probe_.deadline = now_ + interval;
  probe_.addr = target->m.addr;
  probe_.relay = target->m.meta.relay;
  probe_.unconfirmed = Unconfirmed(*target);
  ++stats_.probes;
  std::vector<Update> extra;
  // Tell a suspect it is suspected, so it can refute at once (memberlist probeNode).
  if (target->m.status == Status::kSuspect) {
    extra.push_back(SuspectMsg{target->m.name, target->m.incarnation, cfg_.name});
  }
  SendPacket(target->m.addr, PingMsg{probe_.seq, target->m.name}, std::move(extra));
}

void Swim::Impl::SendIndirectPings() {
  probe_.indirect_sent = true;
  // Late (we were not running at the timeout): the indirect phase still gets its full length.
  if (Late(probe_.timeout_at)) DelayProbe(now_ + (probe_.deadline - probe_.timeout_at));
  NodeState* target = FindState(probe_.target);
  if (target == nullptr) {
    probe_.active = false;
    return;
  }
  const size_t k = static_cast<size_t>(std::max(0, cfg_.indirect_checks));
  auto peers = RandomNodes(k, [&](const NodeState* st) {
    return st != self_ && st != target && st->m.status == Status::kAlive;
  });
  // A relayed target (not ours), or one we reach through our own relay: every path to it but a
  // direct return path crosses that relay, so the relay is always one of the intermediaries,
  // and only its nack (it is up and did not hear from the target either) makes the probe
  // count (ProbeFailed).
  if (NodeState* relay = RelayOf(*target); relay != nullptr && k > 0) {
    probe_.via_relay = relay->m.name;
    if (std::find(peers.begin(), peers.end(), relay) == peers.end()) {
      if (peers.size() == k) peers.pop_back();
      peers.push_back(relay);
    }
  }
  // The direct return path to a relayed target went unanswered: drop it, and ping again
  // through the target's relay (its ack comes straight back to us).
  if (direct_.erase(target->m.name) > 0) {
    ++stats_.direct_dropped;
    SendPacket(target->m.addr, PingMsg{probe_.seq, target->m.name});
  }
  for (NodeState* peer : peers) {
    SendPacket(peer->m.addr, IndirectPingMsg{probe_.seq, target->m.name, target->m.addr, true});
    ++probe_.expected_nacks;
    ++stats_.indirect_probes;
  }
}

void Swim::Impl::OnIndirectPing(const IndirectPingMsg& ind, const std::string& reply_to) {
  auto ping = [&](const std::string& addr, bool want_nack) {
    Relay r;
    r.origin_addr = reply_to;
    r.origin_seq = ind.seq;
    r.want_nack = want_nack;
    r.nack_at = now_ + static_cast<TimeMs>(kNackFraction * static_cast<double>(cfg_.probe_timeout));
    r.expire_at = now_ + cfg_.probe_timeout;
    const uint32_t seq = NextSeq();
    relays_.emplace(seq, std::move(r));
    // Through a relayed target's relay, even when a direct path to it is fresh (the path the
    // origin's probe failed on may be the one that broke).
    no_direct_ = true;
    SendPacket(addr, PingMsg{seq, ind.target});
    no_direct_ = false;
  };
  ping(ind.target_addr, ind.want_nack);
  // The origin's address for the target is not ours. A member that moved behind NAT (to its
  // reflexive address, or to a relay) announced it while the origin, or we, sat at an address
  // nobody reached (its own inner one, before it moved), and gossip's budget may be spent before
  // it gets there; a member that missed the news keeps probing the old address, and once the
  // unconfirmed grace is over it would suspect a live member. Our copy may be the newer one:
  // the target answers there, and our alive message corrects the origin's view (it takes it
  // only as a newer incarnation). If ours is the older one, both are ignored.
  std::vector<Update> news = TargetNews(ind.target);
  if (news.empty() || std::get<AliveMsg>(news.front()).addr == ind.target_addr) return;
  ping(std::get<AliveMsg>(news.front()).addr, false);
  SendPacket(reply_to, std::monostate{}, std::move(news), false);
}

std::vector<Update> Swim::Impl::TargetNews(const std::string& target) const {
  const auto it = map_.find(target);
  if (!cfg_.nat || it == map_.end() || it->second.get() == self_ ||
      it->second->m.status != Status::kAlive) {
    return {};
  }
  const Member& m = it->second->m;
  return {AliveMsg{m.name, m.addr, m.incarnation, m.meta}};
}

void Swim::Impl::EndIndirectPing(const Relay& r) {
  for (auto it = relays_.begin(); it != relays_.end();) {
    const bool sibling =
        it->second.origin_seq == r.origin_seq && it->second.origin_addr == r.origin_addr;
    it = sibling ? relays_.erase(it) : std::next(it);
  }
}

bool Swim::Impl::Unconfirmed(const NodeState& st) const {
  if (!cfg_.nat || cfg_.unconfirmed_grace_intervals <= 0) return false;
  const TimeMs grace = cfg_.unconfirmed_grace_intervals * cfg_.probe_interval;
  // A member that says it is public was reached unsolicited: its address works.
  return st.m.meta.reach != Reach::kPublic && !st.addr_confirmed && now_ - st.addr_since < grace;
}

bool Swim::Impl::HoldProbe(const NodeState& st) const {
  if (!cfg_.nat || cfg_.unconfirmed_grace_intervals <= 0) return false;
  // An answer that arrives while the probe is out (a punch through its NAT) does not make
  // the probe's path a tested one.
  return probe_.unconfirmed || st.m.addr != probe_.addr || st.m.meta.relay != probe_.relay;
}

void Swim::Impl::DelayProbe(TimeMs deadline) {
  probe_.deadline = std::max(probe_.deadline, deadline);
  next_probe_ = std::max(next_probe_, probe_.deadline);
}

void Swim::Impl::ProbeDue() {
  if (!probe_.waited && Late(probe_.deadline)) {
    probe_.waited = true;
    DelayProbe(now_ + 1);
    return;
  }
  ProbeFailed();
}

NodeState* Swim::Impl::RelayOf(const NodeState& st) {
  if (!cfg_.nat || st.m.meta.relay == cfg_.name) return nullptr;
  std::string name = st.m.meta.relay;
  // We are relayed, and reach a member behind (cone) NAT through our own relay (RouteFor).
  if (name.empty() && st.m.meta.reach == Reach::kNat && need_relay_ && relay_.registered) {
    name = relay_.name;
  }
  if (name.empty()) return nullptr;
  NodeState* relay = FindState(name);
  return relay != nullptr && relay != self_ && relay != &st && IsLive(relay->m.status) ? relay
                                                                                       : nullptr;
}

void Swim::Impl::ProbeFailed() {
  probe_.active = false;
  if (const NodeState* target = FindState(probe_.target);
      target != nullptr && target->m.status == Status::kAlive && HoldProbe(*target)) {
    // The probe tested an address the member has not confirmed: no evidence about it, or us.
    ++stats_.unconfirmed_holds;
    return;
  }
  if (const NodeState* relay = FindState(probe_.via_relay);
      relay != nullptr && IsLive(relay->m.status) && !probe_.relay_nacked) {
    // The relayed target's relay, not failed as far as we know, said nothing (it is slow: a
    // process starved of CPU; or it died, and the target takes another relay within two
    // keepalive periods): no evidence about the target. Once the relay is found failed, probes
    // count again.
    ++stats_.relay_holds;
    return;
  }
  // Lifeguard: missing nacks mean our own network path is suspect, not only the target; with
  // nobody to send nacks we blame ourselves by one.
  int delta = 1;
  if (probe_.expected_nacks > 0) delta = std::max(0, probe_.expected_nacks - probe_.nacks);
  awareness_.ApplyDelta(delta);
  NodeState* target = FindState(probe_.target);
  if (target == nullptr) return;
  const bool was_alive = target->m.status == Status::kAlive;
  OnSuspect(SuspectMsg{target->m.name, target->m.incarnation, cfg_.name});
  if (was_alive && target->m.status == Status::kSuspect) ++stats_.suspicions_raised;
}

void Swim::Impl::ProbeSucceeded(bool direct) {
  probe_.active = false;
  if (NodeState* target = FindState(probe_.target);
      direct && target != nullptr && target->m.addr == probe_.addr) {
    target->addr_confirmed = true;
  }
  awareness_.ApplyDelta(-1);
}

void Swim::Impl::SendPacket(const std::string& to, Primary primary, std::vector<Update> extra,
                            bool piggyback) {
  Packet p;
  p.from = cfg_.name;
  p.from_addr = cfg_.addr;
  p.from_step = self_->m.step;
  p.primary = std::move(primary);
  // A datagram for a relayed member travels inside a relay frame: less room.
  std::optional<RelayRoute> route = RouteFor(to);
  const bool framed = route && !route->dest.empty();
  const size_t overhead =
      cfg_.packet_overhead_bytes + (framed ? cfg_.relay_overhead_bytes : size_t{0});
  const size_t limit = cfg_.max_packet_bytes > overhead ? cfg_.max_packet_bytes - overhead : 0;
  const size_t header = EstimatePacketOverhead(p);
  size_t budget = limit > header ? limit - header : 0;
  for (Update& u : extra) {
    const size_t bytes = EstimateSize(u);
    if (bytes > budget) continue;
    budget -= bytes;
    p.updates.push_back(std::move(u));
  }
  if (piggyback) queue_.Fill(budget, RetransmitLimit(), &p.updates);
  if (std::holds_alternative<std::monostate>(p.primary) && p.updates.empty()) return;
  ++stats_.packets_sent;
  if (cfg_.nat) NoteSentTo(route ? route->via : to);
  if (route && route->dest.empty()) {
    // A relayed member's direct return path: a plain datagram there.
    ++stats_.direct_packets;
    out_packets_.push_back(OutPacket{std::move(route->via), std::move(p), {}, {}});
  } else if (route) {
    out_packets_.push_back(
        OutPacket{to, std::move(p), std::move(route->via), std::move(route->dest)});
  } else {
    out_packets_.push_back(OutPacket{to, std::move(p), {}, {}});
  }
}

void Swim::Impl::Announce(const Update& u) {
  auto live_peer = [&](const NodeState* st) { return st != self_ && IsLive(st->m.status); };
  std::vector<NodeState*> targets;
  if (num_live_ <= kAnnounceFanout + 1) {
    // Every live peer fits in the fanout: a full scan reaches them all. Rejection sampling
    // (3·n draws) can miss the few live members of a table that is mostly dead (measured: a
    // force-leave missed one of two live peers in ~3.5% of runs of a 4-node mesh).
    for (NodeState* st : nodes_) {
      if (live_peer(st)) targets.push_back(st);
    }
  } else {
    targets = RandomNodes(kAnnounceFanout, live_peer);
  }
  for (NodeState* t : targets) SendPacket(t->m.addr, std::monostate{}, {u}, false);
}

void Swim::Impl::Gossip() {
  // Gossip to live members and to the recently dead, so a wrongly declared node still hears
  // about it and can refute (memberlist gossip, GossipToTheDeadTime).
  auto targets =
      RandomNodes(static_cast<size_t>(std::max(0, cfg_.gossip_nodes)), [&](const NodeState* st) {
        if (st == self_) return false;
        if (IsLive(st->m.status)) return true;
        return now_ - st->m.state_change <= cfg_.gossip_to_dead_time;
      });
  for (NodeState* t : targets) {
    if (queue_.empty()) break;
    SendPacket(t->m.addr, std::monostate{});
  }
}

TimeMs Swim::Impl::NextGossip() const {
  if (next_gossip_ > now_ || cfg_.gossip_interval <= 0) return next_gossip_;
  // Keep the gossip cadence while idle: the next slot on the original grid after now.
  return next_gossip_ + ((now_ - next_gossip_) / cfg_.gossip_interval + 1) * cfg_.gossip_interval;
}

void Swim::Impl::StartPushPulls() {
  next_push_pull_ = now_ + PushPullScale(cfg_.push_pull_interval, nodes_.size());
  // Anti-entropy with one random live member (memberlist pushPull), and — like Serf's
  // reconnect — with one random failed member: after a partition heals, each side learns
  // that it was declared dead and refutes, which merges the two views again.
  NodeState* live = PickAlivePeer();
  NodeState* failed = PickOne([](const NodeState* st) { return st->m.status == Status::kFailed; });
  for (NodeState* st : {live, failed}) {
    if (st != nullptr) PushPullWith(*st);
  }
}

void Swim::Impl::StartShuffle() {
  next_shuffle_ = now_ + cfg_.shuffle_interval;
  // Push-pull is TCP: a member behind a relay accepts no connections.
  const auto peers = RandomNodes(1, [&](const NodeState* st) {
    return st != self_ && st->m.status == Status::kAlive && st->m.meta.relay.empty();
  });
  if (peers.empty()) return;
  const NodeState& peer = *peers.front();
  std::vector<MemberState> entries = ShuffleEntries(cfg_.shuffle_length - 1, peer.m.name, nullptr);
  PendingShuffle pending{peer.m.name, {}};
  pending.sent.reserve(entries.size());
  for (const MemberState& m : entries) pending.sent.push_back(m.name);
  // Ourselves first: the peer makes room for us before the others.
  const Member& me = self_->m;
  entries.insert(entries.begin(),
                 MemberState{me.name, me.addr, me.incarnation, me.status, me.meta, me.step});
  shuffle_ = std::move(pending);
  PushPull request{false, cfg_.name, std::move(entries)};
  request.shuffle = true;
  out_push_pulls_.push_back(OutPushPull{peer.m.addr, std::move(request)});
  ++stats_.shuffles;
}

std::vector<MemberState> Swim::Impl::ShuffleEntries(size_t k, const std::string& skip,
                                                    const std::vector<MemberState>* not_in) {
  // Only members heard from lately (Fresh): one that crashed since is not handed on to nodes
  // that would take it for alive (and hold it until their own probe finds it dead), and a
  // holder keeps it, so the holders at a crash detect it (nearly: one heard from just before
  // the crash may still go, within a probe interval of it). Few members are fresh at a time,
  // so they are found by one walk over the view (rejection sampling would spend its 3·n
  // draws), then k of them drawn.
  std::vector<NodeState*> fresh;
  for (NodeState* st : nodes_) {
    if (st == self_ || st->m.status != Status::kAlive || !Fresh(*st) || st->m.name == skip) {
      continue;
    }
    if (not_in != nullptr && std::any_of(not_in->begin(), not_in->end(), [&](const MemberState& m) {
          return m.name == st->m.name;
        })) {
      continue;
    }
    fresh.push_back(st);
  }
  const size_t take = std::min(k, fresh.size());
  std::vector<MemberState> out;
  out.reserve(take);
  for (size_t i = 0; i < take; ++i) {
    std::swap(fresh[i], fresh[i + rng_() % (fresh.size() - i)]);
    const Member& m = fresh[i]->m;
    out.push_back(MemberState{m.name, m.addr, m.incarnation, m.status, m.meta, m.step});
  }
  return out;
}

NodeState* Swim::Impl::PickAlivePeer() {
  // Push-pull is TCP: a member behind a relay accepts no connections.
  return PickOne([&](const NodeState* st) {
    return st != self_ && st->m.status == Status::kAlive && st->m.meta.relay.empty();
  });
}

void Swim::Impl::PushPullWith(const NodeState& st) {
  out_push_pulls_.push_back(OutPushPull{st.m.addr, PushPull{false, cfg_.name, LocalState()}});
  ++stats_.pushpulls;
}

void Swim::Impl::QueueProgress() {
  queue_.Queue(ProgressMsg{cfg_.name, self_->m.step, self_->m.eval, self_->m.step_ms});
  last_progress_queued_ = now_;
  progress_dirty_ = false;
}

}  // namespace meshtrain::membership
