// The public API of membership::Swim: packets, push-pulls and ticks in; packets, push-pulls
// and events out. The state machine behind it is Swim::Impl (membership/swim_impl.h), spread
// over swim_state.cc, swim_probe.cc, swim_relay.cc and swim_nat.cc.
#include "membership/swim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>

#include "gossip/broadcast_queue.h"
#include "membership/lifeguard.h"
#include "membership/swim_impl.h"

namespace meshtrain::membership {

Swim::Swim(Config config, uint64_t seed, TimeMs now)
    : impl_(std::make_unique<Impl>(std::move(config), seed, now)) {}

Swim::~Swim() = default;

void Swim::Join(const std::vector<std::string>& addrs, TimeMs now) {
  impl_->now_ = now;
  for (const std::string& addr : addrs) {
    impl_->out_push_pulls_.push_back(
        OutPushPull{addr, PushPull{true, impl_->cfg_.name, impl_->LocalState()}});
    ++impl_->stats_.pushpulls;
  }
}

void Swim::HandlePacket(const std::string& from_addr, const Packet& packet, TimeMs now) {
  Impl& s = *impl_;
  s.now_ = now;
  NodeState* sender = s.FindState(packet.from);
  if (!s.relay_.name.empty() && packet.from == s.relay_.name) s.relay_.last_heard = now;
  if (sender != nullptr && sender != s.self_) {
    sender->heard = now;
    if (!from_addr.empty() && from_addr == sender->m.addr) sender->addr_confirmed = true;
    // Straight from the source: authoritative.
    if (packet.from_step != sender->m.step) {
      s.NoteStep(sender, packet.from_step, now);
    } else {
      sender->m.step_learned = now;
    }
  } else if (sender == nullptr && !packet.from.empty() && !s.left_ && !s.Bounded() &&
             s.unknown_senders_.size() < kMaxUnknownSenders) {
    s.unknown_senders_.emplace(
        packet.from, std::make_pair(packet.from_addr.empty() ? from_addr : packet.from_addr, now));
  }
  // Updates first, so a reply piggybacks whatever they made us say (e.g. a refutation).
  s.collecting_ = true;
  s.source_ = &packet.from;
  for (const Update& u : packet.updates) s.OnUpdate(u);
  s.source_ = nullptr;
  s.collecting_ = false;
  if (sender == nullptr && s.Bounded()) {
    // Admitted by its own alive message just now.
    if (NodeState* st = s.FindState(packet.from); st != nullptr && st != s.self_) st->heard = now;
  }
  std::vector<Update> corrections = std::move(s.corrections_);
  s.corrections_.clear();
  // Behind a NAT only the path the packet came over leads back; without NAT
  // traversal, the address the sender advertises.
  const std::string& reply_to =
      (s.cfg_.nat && !from_addr.empty()) || packet.from_addr.empty() ? from_addr : packet.from_addr;
  if (s.cfg_.nat && !from_addr.empty() && s.sent_to_.count(from_addr) == 0) {
    s.NoteUnsolicited();
  }
  // Straight from a relayed member: its NAT lets us answer there for a while.
  if (s.cfg_.nat && !from_addr.empty()) s.NoteDirectFrom(s.FindState(packet.from), from_addr);
  const auto* ping = std::get_if<PingMsg>(&packet.primary);
  // A ping for another name reached us at a stale address: stay silent.
  if (ping != nullptr && !ping->target.empty() && ping->target != s.cfg_.name) return;
  if (ping != nullptr) {
    // Whoever still probes us after we left missed the news: tell it again.
    if (s.left_) {
      corrections.push_back(DeadMsg{s.cfg_.name, s.self_->m.incarnation, s.cfg_.name});
    }
    s.SendPacket(reply_to, AckMsg{ping->seq, s.cfg_.nat ? from_addr : std::string()},
                 std::move(corrections));
    return;
  }
  if (!corrections.empty()) s.SendPacket(reply_to, std::monostate{}, std::move(corrections));
  if (const auto* ind = std::get_if<IndirectPingMsg>(&packet.primary)) {
    s.OnIndirectPing(*ind, reply_to);
  } else if (const auto* reg = std::get_if<RelayRegisterMsg>(&packet.primary)) {
    s.OnRelayRegister(*reg, packet, from_addr);
  } else if (const auto* ack = std::get_if<AckMsg>(&packet.primary)) {
    if (s.relay_.awaiting && ack->seq == s.relay_.seq) {
      s.OnRelayAck(*ack, packet.from);
    } else if (s.probe_.active && ack->seq == s.probe_.seq) {
      if (s.cfg_.nat && !ack->observed.empty()) s.NoteObserved(packet.from, ack->observed);
      s.ProbeSucceeded(packet.from == s.probe_.target);
    } else if (auto d = s.discovery_.find(ack->seq); d != s.discovery_.end()) {
      if (s.cfg_.nat && !ack->observed.empty() && d->second == packet.from) {
        s.NoteObserved(packet.from, ack->observed);
      }
      s.discovery_.erase(d);
    } else if (auto it = s.relays_.find(ack->seq); it != s.relays_.end()) {
      if (s.cfg_.nat && !ack->observed.empty()) s.NoteObserved(packet.from, ack->observed);
      const Relay r = std::move(it->second);
      s.relays_.erase(it);
      s.EndIndirectPing(r);
      s.SendPacket(r.origin_addr, AckMsg{r.origin_seq, std::string()}, s.TargetNews(packet.from));
    }
  } else if (const auto* nack = std::get_if<NackMsg>(&packet.primary)) {
    if (s.relay_.awaiting && nack->seq == s.relay_.seq) {
      s.OnRelayNack(packet.from);
    } else if (s.probe_.active && nack->seq == s.probe_.seq) {
      ++s.probe_.nacks;
      if (packet.from == s.probe_.via_relay) s.probe_.relay_nacked = true;
    }
  }
}

PushPull Swim::HandlePushPullRequest(const PushPull& request, TimeMs now) {
  impl_->now_ = now;
  // A connection we did not open: nothing between us and the requester filters inbound.
  if (impl_->cfg_.nat) impl_->NoteUnsolicited();
  if (impl_->Bounded()) {
    if (NodeState* st = impl_->FindState(request.from); st != nullptr) st->heard = now;
  }
  if (request.shuffle && impl_->Bounded() && !request.join) {
    // A view shuffle (Cyclon): answer with a few of our alive members that the requester did
    // not send, and take its entries (the requester itself among them) in their place.
    Impl& s = *impl_;
    std::vector<MemberState> reply = s.ShuffleEntries(std::max<size_t>(1, s.cfg_.shuffle_length),
                                                      request.from, &request.members);
    std::vector<std::string> pool;
    pool.reserve(reply.size());
    for (const MemberState& m : reply) pool.push_back(m.name);
    s.source_ = &request.from;
    s.MergeShuffle(request.members, std::move(pool));
    s.source_ = nullptr;
    if (NodeState* st = s.FindState(request.from); st != nullptr && st != s.self_) st->heard = now;
    PushPull out{false, s.cfg_.name, std::move(reply)};
    out.shuffle = true;
    return out;
  }
  impl_->source_ = &request.from;
  impl_->admitting_joiner_ = request.join;
  impl_->MergeState(request.members);
  impl_->admitting_joiner_ = false;
  impl_->source_ = nullptr;
  // Reply with the merged state: it then carries any refutation the request provoked, so the
  // requester learns at once that we are alive (this is what heals partitions).
  // Bounded views: once its view is full, a seed's reply to a joiner leaves the seed out, or
  // nearly every node would hold the seed, a hub that every probe round and barrier sample hits
  // (the first joiners, while there is room, still get it).
  const bool without_self =
      impl_->Bounded() && request.join && impl_->nodes_.size() - 1 >= impl_->cfg_.max_members;
  return PushPull{false, impl_->cfg_.name, impl_->LocalState(without_self)};
}

void Swim::HandlePushPullResponse(const PushPull& response, TimeMs now) {
  impl_->now_ = now;
  if (impl_->Bounded()) {
    if (NodeState* st = impl_->FindState(response.from); st != nullptr) st->heard = now;
  }
  if (response.shuffle && impl_->Bounded()) {
    // The answer to our shuffle: its entries replace those we sent, then the peer itself.
    Impl& s = *impl_;
    std::vector<std::string> pool;
    if (s.shuffle_ && s.shuffle_->peer == response.from) {
      pool = std::move(s.shuffle_->sent);
      pool.push_back(s.shuffle_->peer);
      s.shuffle_.reset();
    }
    s.MergeShuffle(response.members, std::move(pool));
    return;
  }
  // A node that knows nobody yet is joining: the state it receives is what the cluster already
  // knows, so re-gossiping all of it would only cost O(n) updates per joiner (O(n²) for a mass
  // join). Everything else — suspicions, leaves, refutations about ourselves — still applies.
  const bool joining = impl_->nodes_.size() == 1;
  impl_->source_ = &response.from;
  impl_->MergeState(response.members, /*spread=*/!joining);
  impl_->source_ = nullptr;
  if (joining && impl_->nodes_.size() > 1) {
    // Tell the members we just learned about that we are here, rather than waiting for the
    // seed's gossip of our alive message to reach them.
    const Member& self = impl_->self_->m;
    impl_->Announce(AliveMsg{self.name, self.addr, self.incarnation, self.meta});
    impl_->discover_until_ =
        now + impl_->cfg_.unconfirmed_grace_intervals * impl_->cfg_.probe_interval;
    impl_->Discover();
  }
}

void Swim::PushPullFailed(const std::string& to_addr, TimeMs now) {
  // Nothing to undo: the failure detector, not the stream, decides liveness, and the next
  // push-pull round picks another peer (a shuffle in flight with it is dropped).
  impl_->now_ = now;
  if (impl_->shuffle_) {
    const NodeState* st = impl_->FindState(impl_->shuffle_->peer);
    if (st == nullptr || st->m.addr == to_addr) impl_->shuffle_.reset();
  }
}

void Swim::Tick(TimeMs now) {
  Impl& s = *impl_;
  s.now_ = now;
  for (auto it = s.relays_.begin(); it != s.relays_.end();) {
    Relay& r = it->second;
    if (r.want_nack && !r.nack_sent && now >= r.nack_at) {
      if (s.Late(r.nack_at)) {
        // We were not running when it was due: the target's ack may be waiting unread.
        r.nack_at = now + 1;
        r.expire_at = std::max(r.expire_at, now + 1);
      } else {
        r.nack_sent = true;
        s.SendPacket(r.origin_addr, NackMsg{r.origin_seq});
      }
    }
    it = now >= r.expire_at ? s.relays_.erase(it) : std::next(it);
  }
  if (s.probe_.active && !s.probe_.indirect_sent && now >= s.probe_.timeout_at) {
    s.SendIndirectPings();
  }
  if (s.probe_.active && now >= s.probe_.deadline) s.ProbeDue();
  if (!s.left_ && now >= s.next_probe_) s.StartProbe();
  if (now >= s.next_discover_) s.Discover(/*retry=*/true);
  s.RelayTick();

  while (!s.suspicion_timers_.empty() && s.suspicion_timers_.begin()->first <= now) {
    const std::string name = s.suspicion_timers_.begin()->second;
    NodeState* st = s.FindState(name);
    if (st == nullptr) {
      s.suspicion_timers_.erase(s.suspicion_timers_.begin());
      continue;
    }
    s.ClearSuspicion(st);
    if (st->m.status != Status::kSuspect) continue;
    ++s.stats_.failures_declared;
    const DeadMsg dead{name, st->m.incarnation, s.cfg_.name};
    s.OnDead(dead);
    // In a small mesh the gossip budget (RetransmitMult × ceil(log10(n+1)) = 2 for n < 10) is
    // shared with the dead member itself (gossip to the dead), and a member that saw only one
    // suspicion has no confirmations to shorten its timer to the minimum: it could learn of the
    // failure only at its own maximum timeout (18 s in the local profile). Tell every live
    // member directly while they all fit in one announcement.
    if (s.num_live_ <= Impl::kAnnounceFanout + 1) s.Announce(dead);
  }
  while (!s.refresh_timers_.empty() && s.refresh_timers_.begin()->first <= now) {
    NodeState* st = s.FindState(s.refresh_timers_.begin()->second);
    if (st == nullptr || !st->suspicion) {
      s.refresh_timers_.erase(s.refresh_timers_.begin());
      continue;
    }
    s.RefreshSuspicion(st);
  }
  while (!s.reap_timers_.empty() && s.reap_timers_.begin()->first <= now) {
    NodeState* st = s.FindState(s.reap_timers_.begin()->second);
    s.reap_timers_.erase(s.reap_timers_.begin());
    if (st == nullptr) continue;
    st->reap_at = kNever;
    s.events_.push_back(Event{Event::Kind::kReaped, st->m});
    s.RemoveNode(st);
  }
  if (now >= s.next_gossip_) {
    if (!s.queue_.empty()) s.Gossip();
    s.next_gossip_ = s.NextGossip();
  }
  if (s.cfg_.push_pull_interval > 0 && !s.left_ && now >= s.next_push_pull_) s.StartPushPulls();
  if (!s.left_ && now >= s.next_shuffle_) s.StartShuffle();
  // Anti-entropy on demand: a member that talks to us but is still unknown after the grace
  // period was missed by gossip (or reaped while cut off); a push-pull with it merges both
  // views, which also makes it learn that it may have been declared dead and refute.
  const TimeMs grace = kUnknownSenderGraceIntervals * s.cfg_.probe_interval;
  for (auto it = s.unknown_senders_.begin(); it != s.unknown_senders_.end();) {
    if (s.FindState(it->first) != nullptr || s.left_) {
      it = s.unknown_senders_.erase(it);
    } else if (now >= it->second.second + grace) {
      s.out_push_pulls_.push_back(
          OutPushPull{it->second.first, PushPull{false, s.cfg_.name, s.LocalState()}});
      ++s.stats_.pushpulls;
      it = s.unknown_senders_.erase(it);
    } else {
      ++it;
    }
  }
  if (s.progress_dirty_ && now >= s.last_progress_queued_ + s.cfg_.probe_interval) {
    s.QueueProgress();
  }
}

TimeMs Swim::NextDeadline() const {
  const Impl& s = *impl_;
  TimeMs d = kNever;
  if (!s.left_) d = std::min(d, s.next_probe_);
  d = std::min(d, s.next_discover_);
  if (s.need_relay_ && !s.left_) d = std::min(d, s.relay_.next_keepalive);
  if (!s.relay_clients_.empty()) d = std::min(d, s.now_ + s.cfg_.relay_keepalive);
  if (s.probe_.active) {
    d = std::min(d, s.probe_.deadline);
    if (!s.probe_.indirect_sent) d = std::min(d, s.probe_.timeout_at);
  }
  for (const auto& [seq, r] : s.relays_) {
    d = std::min(d, r.expire_at);
    if (r.want_nack && !r.nack_sent) d = std::min(d, r.nack_at);
  }
  if (!s.suspicion_timers_.empty()) d = std::min(d, s.suspicion_timers_.begin()->first);
  if (!s.refresh_timers_.empty()) d = std::min(d, s.refresh_timers_.begin()->first);
  if (!s.reap_timers_.empty()) d = std::min(d, s.reap_timers_.begin()->first);
  // Idle gossip rounds do nothing, so they need no wake-up.
  if (!s.queue_.empty()) d = std::min(d, s.NextGossip());
  if (s.cfg_.push_pull_interval > 0 && !s.left_) d = std::min(d, s.next_push_pull_);
  if (!s.left_) d = std::min(d, s.next_shuffle_);
  if (s.progress_dirty_) d = std::min(d, s.last_progress_queued_ + s.cfg_.probe_interval);
  for (const auto& [name, entry] : s.unknown_senders_) {
    d = std::min(d, entry.second + kUnknownSenderGraceIntervals * s.cfg_.probe_interval);
  }
  return d;
}

void Swim::Leave(TimeMs now) {
  Impl& s = *impl_;
  s.now_ = now;
  if (s.left_) return;
  s.left_ = true;
  s.probe_.active = false;
  // A dead message from ourselves about ourselves is a graceful leave (memberlist Leave).
  s.OnDead(DeadMsg{s.cfg_.name, s.self_->m.incarnation, s.cfg_.name});
  s.Announce(DeadMsg{s.cfg_.name, s.self_->m.incarnation, s.cfg_.name});
}

bool Swim::HasLeft() const { return impl_->left_; }

size_t Swim::PendingUpdates() const { return impl_->queue_.size(); }

bool Swim::ForceLeave(const std::string& name, TimeMs now) {
  Impl& s = *impl_;
  s.now_ = now;
  NodeState* st = s.FindState(name);
  if (st == nullptr || st == s.self_) return false;
  if (st->m.status != Status::kFailed && st->m.status != Status::kSuspect) return false;
  s.ClearSuspicion(st);
  s.queue_.Queue(DeadMsg{name, st->m.incarnation, name});
  s.SetStatus(st, Status::kLeft);
  s.Emit(Event::Kind::kLeft, st);
  s.Announce(DeadMsg{name, st->m.incarnation, name});
  return true;
}

void Swim::RequestPushPull(TimeMs now) {
  Impl& s = *impl_;
  s.now_ = now;
  if (s.left_ || now - s.last_extra_push_pull_ < s.cfg_.probe_interval) return;
  NodeState* live = s.PickAlivePeer();
  if (live == nullptr) return;
  s.last_extra_push_pull_ = now;
  s.PushPullWith(*live);
}

void Swim::SetMeta(const Meta& meta, TimeMs now) {
  Impl& s = *impl_;
  s.now_ = now;
  if (s.left_) return;
  Meta mine = meta;  // reachability and relay fields are ours to set, not the caller's
  mine.reach = s.self_->m.meta.reach;
  mine.relay = s.self_->m.meta.relay;
  mine.serves_relay = s.self_->m.meta.serves_relay;
  s.self_->m.meta = std::move(mine);
  s.PublishSelf();
}

void Swim::Impl::PublishSelf() {
  Swim::Impl& s = *this;
  ++s.self_->m.incarnation;  // metadata travels in alive messages, which need a new incarnation
  const AliveMsg alive{s.cfg_.name, s.cfg_.addr, s.self_->m.incarnation, s.self_->m.meta};
  s.queue_.Queue(alive);
  // A member that misses the change keeps the old metadata until the next push-pull (15-60 s):
  // a peer that missed our training flag leaves us out of its barrier and runs ahead of us under
  // bsp/ssp. Gossip's small-mesh budget (2 transmissions) misses members often enough to matter,
  // so while every live member fits in one announcement, each is told directly.
  if (s.num_live_ <= Impl::kAnnounceFanout + 1) s.Announce(alive);
}

void Swim::SetEval(const Eval& eval) {
  Impl& s = *impl_;
  s.self_->m.eval = eval;
  s.progress_dirty_ = true;
}

void Swim::SetStepMs(float step_ms) { impl_->self_->m.step_ms = step_ms; }

void Swim::SetStep(uint64_t step) {
  Impl& s = *impl_;
  s.self_->m.step = step;
  s.self_->m.step_learned = s.now_;
  s.progress_dirty_ = true;
  // Every packet carries our step anyway; a gossiped progress update at most once per probe
  // interval lets it reach members we do not talk to directly.
  if (s.now_ >= s.last_progress_queued_ + s.cfg_.probe_interval) s.QueueProgress();
}

std::vector<OutPacket> Swim::TakePackets() { return std::exchange(impl_->out_packets_, {}); }

std::vector<OutPushPull> Swim::TakePushPulls() { return std::exchange(impl_->out_push_pulls_, {}); }

std::vector<Event> Swim::TakeEvents() { return std::exchange(impl_->events_, {}); }

void Swim::TrackProgress(bool on) {
  impl_->track_progress_ = on;
  if (!on) impl_->progress_news_.clear();
}

std::vector<std::string> Swim::TakeProgressNews() {
  return std::exchange(impl_->progress_news_, {});
}

void Swim::ForEachMember(const std::function<void(const Member&)>& fn) const {
  for (const NodeState* st : impl_->nodes_) fn(st->m);
}

size_t Swim::NumMembers() const { return impl_->nodes_.size(); }

std::vector<Member> Swim::Members() const {
  std::vector<Member> out;
  out.reserve(impl_->nodes_.size());
  for (const NodeState* st : impl_->nodes_) {
    out.push_back(st->m);
    out.back().direct = st != impl_->self_ && st->m.meta.relay != impl_->cfg_.name &&
                        impl_->DirectPath(st->m) != nullptr;
  }
  std::sort(out.begin(), out.end(),
            [](const Member& a, const Member& b) { return a.name < b.name; });
  return out;
}

const Member* Swim::Find(const std::string& name) const {
  const NodeState* st = impl_->FindState(name);
  return st == nullptr ? nullptr : &st->m;
}

size_t Swim::NumAlive() const { return impl_->num_live_; }

int Swim::HealthScore() const { return impl_->awareness_.score(); }

const Stats& Swim::stats() const { return impl_->stats_; }

const Config& Swim::config() const { return impl_->cfg_; }

void Swim::NoteSent(const std::string& addr) {
  if (impl_->cfg_.nat) impl_->NoteSentTo(addr);
}

Reach Swim::reach() const { return impl_->self_->m.meta.reach; }

const std::string& Swim::configured_addr() const { return impl_->configured_addr_; }

}  // namespace meshtrain::membership
