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
  NodeState* target = FindState(probe_.target);
  if (target == nullptr) {
    probe_.active = false;
    return;
  }
  auto peers =
      RandomNodes(static_cast<size_t>(std::max(0, cfg_.indirect_checks)), [&](const NodeState* st) {
        return st != self_ && st != target && st->m.status == Status::kAlive;
      });
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

void Swim::Impl::ProbeFailed() {
  probe_.active = false;
  if (const NodeState* target = FindState(probe_.target);
      target != nullptr && target->m.status == Status::kAlive && HoldProbe(*target)) {
    // The probe tested an address the member has not confirmed: no evidence about it, or us.
    ++stats_.unconfirmed_holds;
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
