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

Swim::Impl::Impl(Config c, uint64_t seed, TimeMs now)
    : cfg_(std::move(c)), rng_(seed), now_(now), awareness_(cfg_.awareness_max_multiplier) {
  self_ = AddNode(cfg_.name);
  self_->m.addr = cfg_.addr;
  configured_addr_ = cfg_.addr;
  self_->m.meta.serves_relay = cfg_.nat && cfg_.serve_relay;
  relay_tokens_ = cfg_.relay_rate_bytes_per_s;
  relay_refill_ = now;
  self_->m.state_change = now;
  self_->m.step_learned = now;
  num_live_ = 1;
  // Random stagger so that nodes started together do not probe and gossip in lockstep
  // (memberlist schedule()).
  auto stagger = [&](TimeMs interval) {
    return interval > 0 ? static_cast<TimeMs>(rng_() % static_cast<uint64_t>(interval)) : 0;
  };
  next_probe_ = now + stagger(cfg_.probe_interval);
  next_gossip_ = now + stagger(cfg_.gossip_interval);
  next_push_pull_ = now + cfg_.push_pull_interval + stagger(cfg_.push_pull_interval);
  // Drawn only with a bounded view, so an unbounded node's random stream is as before.
  if (Bounded() && cfg_.shuffle_interval > 0 && cfg_.shuffle_length > 0) {
    next_shuffle_ = now + cfg_.shuffle_interval + stagger(cfg_.shuffle_interval);
  }
}

NodeState* Swim::Impl::AddNode(const std::string& name) {
  auto owned = std::make_unique<NodeState>();
  NodeState* st = owned.get();
  st->m.name = name;
  st->m.state_change = now_;
  st->admitted = admissions_++;
  map_.emplace(name, std::move(owned));
  // Insert at a random offset, not at the end, so a new member is probed after a random
  // fraction of the round, keeping the expected detection bound low (memberlist aliveNode).
  const size_t n = nodes_.size();
  if (Bounded()) {
    // A bounded view keeps replacing members (shuffles): the swap below would send the member
    // it displaces to the end of the round each time, and one displaced again and again would
    // go unprobed for many rounds (a crashed member went 45 s undetected by a holder with a
    // view of 20). Inserting shifts the rest by one place instead.
    const size_t pos = n > 0 ? rng_() % (n + 1) : 0;
    nodes_.insert(nodes_.begin() + static_cast<std::ptrdiff_t>(pos), st);
    if (pos < probe_index_) ++probe_index_;
    return st;
  }
  nodes_.push_back(st);
  if (n > 0) std::swap(nodes_[rng_() % n], nodes_[n]);
  return st;
}

void Swim::Impl::RemoveNode(NodeState* st) {
  ClearSuspicion(st);
  if (st->reap_at != kNever) reap_timers_.erase({st->reap_at, st->m.name});
  if (IsLive(st->m.status)) --num_live_;
  if (auto it = nat_addr_.find(st->m.addr); it != nat_addr_.end() && it->second == st->m.name) {
    nat_addr_.erase(it);
  }
  direct_.erase(st->m.name);
  auto it = std::find(nodes_.begin(), nodes_.end(), st);
  if (it != nodes_.end()) {
    const size_t idx = static_cast<size_t>(it - nodes_.begin());
    nodes_.erase(it);
    if (idx < probe_index_) --probe_index_;
  }
  map_.erase(st->m.name);  // destroys *st
}

void Swim::Impl::SetStatus(NodeState* st, Status s) {
  const Status old = st->m.status;
  if (old == s) return;
  if (IsLive(old) && !IsLive(s)) --num_live_;
  if (!IsLive(old) && IsLive(s)) ++num_live_;
  st->m.status = s;
  st->m.state_change = now_;
  if (st->reap_at != kNever) {
    reap_timers_.erase({st->reap_at, st->m.name});
    st->reap_at = kNever;
  }
  if (IsDeadOrLeft(s) && st != self_) {
    st->reap_at = now_ + cfg_.reap_timeout;
    reap_timers_.emplace(st->reap_at, st->m.name);
  }
}

void Swim::Impl::ClearSuspicion(NodeState* st) {
  if (!st->suspicion) return;
  suspicion_timers_.erase({st->suspicion->deadline, st->m.name});
  refresh_timers_.erase({st->suspicion->refresh_at, st->m.name});
  st->suspicion.reset();
}

void Swim::Impl::RefreshSuspicion(NodeState* st) {
  // A suspicion is gossiped a bounded number of times, mostly before the suspect had a chance
  // to refute. A holder that then missed every copy of the refutation would declare a live
  // member failed. Gossiping the suspicion again halfway through the minimum timeout gets it
  // corrected by any peer that saw the refutation (NoteStale), and otherwise adds nothing:
  // it carries the original accuser, so it is no new confirmation.
  Suspicion& sp = *st->suspicion;
  refresh_timers_.erase({sp.refresh_at, st->m.name});
  if (!queue_.HasStateUpdate(st->m.name)) {
    queue_.Queue(SuspectMsg{st->m.name, st->m.incarnation, sp.accusers.front()});
  }
  sp.refresh_at = now_ + std::max<TimeMs>(1, sp.min / 2);
  refresh_timers_.emplace(sp.refresh_at, st->m.name);
}

void Swim::Impl::StartSuspicion(NodeState* st, const std::string& from) {
  // memberlist suspectNode: expect SuspicionMult − 2 confirmations, so the nominal timeout is
  // hit two probe intervals short of what the multiplier implies; none if the cluster is too
  // small to provide them (n − 2 excludes ourselves and the suspect).
  int k = cfg_.suspicion_mult - 2;
  const size_t n = nodes_.size();
  if (static_cast<int>(n) - 2 < k) k = 0;
  Suspicion sp;
  sp.start = now_;
  sp.min = SuspicionMinTimeout(cfg_.suspicion_mult, n, cfg_.probe_interval);
  sp.max = static_cast<TimeMs>(cfg_.suspicion_max_timeout_mult) * sp.min;
  sp.expected = k;
  sp.accusers.push_back(from);
  sp.deadline = now_ + (k < 1 ? sp.min : sp.max);
  sp.refresh_at = now_ + std::max<TimeMs>(1, sp.min / 2);
  suspicion_timers_.emplace(sp.deadline, st->m.name);
  refresh_timers_.emplace(sp.refresh_at, st->m.name);
  st->suspicion = std::move(sp);
}

bool Swim::Impl::Confirm(NodeState* st, const std::string& from) {
  Suspicion& sp = *st->suspicion;
  if (sp.confirmations >= sp.expected) return false;
  if (std::find(sp.accusers.begin(), sp.accusers.end(), from) != sp.accusers.end()) return false;
  sp.accusers.push_back(from);
  ++sp.confirmations;
  const TimeMs deadline =
      std::max(now_, sp.start + SuspicionTimeout(sp.confirmations, sp.expected, sp.min, sp.max));
  suspicion_timers_.erase({sp.deadline, st->m.name});
  sp.deadline = deadline;
  suspicion_timers_.emplace(sp.deadline, st->m.name);
  return true;
}

void Swim::Impl::OnAlive(const AliveMsg& a, bool spread) {
  NodeState* st = FindState(a.name);
  // A leave must not be undone by an alive message about us still in flight (memberlist).
  if (left_ && a.name == cfg_.name) {
    NoteStale(st);
    return;
  }
  if (st == nullptr) {
    if (Bounded() && !Admit(source_ != nullptr && *source_ == a.name)) {
      // The refutation of a suspicion we passed on travels the same way.
      if (RelayNews(a.name, a.incarnation, kRelayAlive)) queue_.Queue(a);
      return;
    }
    st = AddNode(a.name);
    st->m.addr = a.addr;
    st->m.incarnation = a.incarnation;
    st->m.meta = a.meta;
    IndexNat(*st, std::string());
    ++num_live_;  // AddNode creates it alive
    if (spread) queue_.Queue(a);
    Emit(Event::Kind::kJoined, st);
    Introduce(*st);
    Punch(*st);
    return;
  }
  const bool local = st == self_;
  bool reclaim = false;
  if (st->m.addr != a.addr) {
    // A different address is a name conflict, unless the old owner is gone (memberlist lets a
    // left node be replaced; we also let a failed one be, so a restart on a new port rejoins),
    // or the member moved to the address its peers see it at behind a NAT (issue 34: a newer
    // incarnation that says so).
    const bool moved = !local && a.incarnation > st->m.incarnation && a.meta.reach == Reach::kNat;
    if (!moved && (local || IsLive(st->m.status))) return;
    reclaim = !moved;
  }
  if (!local && !reclaim && a.incarnation <= st->m.incarnation) {
    if (st->m.status == Status::kLeft) NoteStale(st);
    return;
  }
  if (local && a.incarnation < st->m.incarnation) return;
  ClearSuspicion(st);
  if (local) {
    // Same incarnation and same data is our own news echoed back. Anything else claims our
    // name with our incarnation or newer: out-vote it (SWIM §4.2).
    if (a.incarnation == st->m.incarnation && a.meta == st->m.meta) return;
    Refute(a.incarnation);
    return;
  }
  if (spread) queue_.Queue(a);
  const Status old_status = st->m.status;
  const bool meta_changed = st->m.meta != a.meta;
  const bool path_changed = st->m.addr != a.addr || st->m.meta.reach != a.meta.reach;
  st->m.incarnation = a.incarnation;
  const std::string old_addr = std::move(st->m.addr);
  st->m.meta = a.meta;
  st->m.addr = a.addr;
  IndexNat(*st, old_addr);
  SetStatus(st, Status::kAlive);
  if (path_changed) Punch(*st);
  if (old_status != Status::kAlive) {
    Emit(Event::Kind::kAlive, st);
    if (!IsLive(old_status)) Introduce(*st);
  } else if (meta_changed) {
    Emit(Event::Kind::kUpdated, st);
  }
}

bool Swim::Impl::Admit(bool direct) {
  if (nodes_.size() - 1 < cfg_.max_members) return true;
  const auto evictable = [&](const NodeState* st) {
    return st != self_ && st->m.status == Status::kAlive &&
           !(probe_.active && st->m.name == probe_.target);
  };
  // A shuffle's entries take the places of the entries sent in exchange (MergeShuffle).
  while (shuffle_pool_ != nullptr && !shuffle_pool_->empty()) {
    NodeState* st = FindState(shuffle_pool_->front());
    shuffle_pool_->erase(shuffle_pool_->begin());
    if (st == nullptr || !evictable(st)) continue;
    events_.push_back(Event{Event::Kind::kReaped, st->m});
    RemoveNode(st);
    return true;
  }
  if (!direct || shuffle_pool_ != nullptr) return false;
  // An alive member makes room; not a suspect (its suspicion runs to the end here) nor the
  // target of our probe in flight. A joiner admitted by its seed displaces the member held
  // longest: the seed hands its view to the next joiners, so each member then stays in it for
  // the same number of joins and is copied into about as many views (random eviction there
  // gave a geometric spread: in a 300-node test, one member held by 73 others). Otherwise a
  // random one (evicting the longest held would drop first the entries a node got from its
  // seed, the very copies that make a member held by others), preferably one heard from lately
  // (Fresh): a member that crashed a while ago is then kept until this node detects it.
  NodeState* victim = nullptr;
  if (admitting_joiner_) {
    for (NodeState* st : nodes_) {
      if (evictable(st) && (victim == nullptr || st->admitted < victim->admitted)) victim = st;
    }
  } else {
    auto picked = RandomNodes(1, [&](const NodeState* st) { return evictable(st) && Fresh(*st); });
    if (picked.empty()) picked = RandomNodes(1, evictable);
    if (!picked.empty()) victim = picked.front();
  }
  if (victim == nullptr) return false;
  events_.push_back(Event{Event::Kind::kReaped, victim->m});
  RemoveNode(victim);
  return true;
}

void Swim::Impl::Introduce(const NodeState& st) {
  // The member learned about us from someone else (a push-pull with the seed, gossip), and that
  // copy of our metadata may predate our last change (the training flag flips right after a
  // join): it would keep the old one until a push-pull. Our own alive message, sent once when we
  // learn about the member, closes that gap; Announce covers the members we already knew.
  // Bounded views: the view's size says nothing about the cluster's, and a seed would
  // introduce itself to every joiner it admits (a hub held by nearly every node).
  if (left_ || &st == self_ || num_live_ > kAnnounceFanout + 1 || Bounded()) return;
  SendPacket(st.m.addr, std::monostate{},
             {AliveMsg{cfg_.name, cfg_.addr, self_->m.incarnation, self_->m.meta}}, false);
}

void Swim::Impl::NoteStale(const NodeState* st) {
  // The sender gossips news about `st` that is older than ours: it missed a refutation or a
  // leave (lost, or out of retransmissions before reaching it). Epidemic spreading misses a
  // node now and then, and a stale suspicion left alone would time out and declare a live
  // member failed, so answer the sender directly with what we know (anti-entropy on demand).
  if (!collecting_) return;
  if (st->m.status == Status::kLeft) {
    corrections_.push_back(DeadMsg{st->m.name, st->m.incarnation, st->m.name});
  } else if (IsLive(st->m.status)) {
    corrections_.push_back(AliveMsg{st->m.name, st->m.addr, st->m.incarnation, st->m.meta});
  }
}

bool Swim::Impl::RelayNews(const std::string& name, uint32_t incarnation, uint8_t kind) {
  if (!Bounded() || !collecting_ || left_ || name == cfg_.name) return false;
  const uint64_t rank = (uint64_t{incarnation} << 2) | kind;
  auto it = relayed_.find(name);
  if (it == relayed_.end()) {
    if (kind == kRelayAlive) return false;  // only a refutation of an accusation we relayed
    if (relayed_.size() >= kMaxRelayed) {
      for (auto r = relayed_.begin(); r != relayed_.end();) {
        r = now_ - r->second.at > cfg_.reap_timeout ? relayed_.erase(r) : std::next(r);
      }
      if (relayed_.size() >= kMaxRelayed) relayed_.clear();
    }
    relayed_.emplace(name, Relayed{rank, now_});
    return true;
  }
  if (rank <= it->second.rank) return false;
  it->second = Relayed{rank, now_};
  return true;
}

void Swim::Impl::OnSuspect(const SuspectMsg& s) {
  NodeState* st = FindState(s.name);
  if (st == nullptr) {
    if (RelayNews(s.name, s.incarnation, kRelaySuspect)) queue_.Queue(s);
    return;
  }
  if (s.incarnation < st->m.incarnation) {
    NoteStale(st);
    return;
  }
  // Lifeguard: a suspicion already running counts independent accusers; new information is
  // re-gossiped so that confirmations keep flowing to everyone.
  if (st->suspicion) {
    if (Confirm(st, s.from)) queue_.Queue(s);
    return;
  }
  if (st->m.status != Status::kAlive) {
    if (st->m.status == Status::kLeft) NoteStale(st);
    return;
  }
  if (st == self_) {
    Refute(s.incarnation);  // SWIM §4.2: refute with a higher incarnation
    return;
  }
  queue_.Queue(s);
  st->m.incarnation = s.incarnation;
  SetStatus(st, Status::kSuspect);
  StartSuspicion(st, s.from);
  Emit(Event::Kind::kSuspect, st);
}

void Swim::Impl::OnDead(const DeadMsg& d) {
  NodeState* st = FindState(d.name);
  if (st == nullptr) {
    if (RelayNews(d.name, d.incarnation, kRelayDead)) queue_.Queue(d);
    return;
  }
  if (d.incarnation < st->m.incarnation) {
    NoteStale(st);
    return;
  }
  ClearSuspicion(st);
  const bool leave = d.from == d.name;
  if (IsDeadOrLeft(st->m.status)) {
    if (!leave && st->m.status == Status::kLeft) NoteStale(st);
    // Serf force-leave semantics: a member already failed here that is announced as left is
    // reported as left, and the news passed on, so the whole cluster agrees.
    if (leave && st->m.status == Status::kFailed && st != self_) {
      queue_.Queue(d);
      st->m.incarnation = d.incarnation;
      SetStatus(st, Status::kLeft);
      Emit(Event::Kind::kLeft, st);
    }
    return;
  }
  if (st == self_ && !left_) {
    Refute(d.incarnation);  // we are alive: nobody else may declare us dead
    return;
  }
  queue_.Queue(d);
  st->m.incarnation = d.incarnation;
  SetStatus(st, leave ? Status::kLeft : Status::kFailed);
  Emit(leave ? Event::Kind::kLeft : Event::Kind::kFailed, st);
}

void Swim::Impl::OnProgress(const ProgressMsg& p) {
  NodeState* st = FindState(p.name);
  if (st == nullptr || st == self_) return;
  const bool newer_step = p.step > st->m.step;
  const bool newer_eval = p.eval.valid() && (!st->m.eval.valid() || p.eval.step > st->m.eval.step);
  if (!newer_step && !newer_eval) return;
  if (newer_step) NoteStep(st, p.step, now_);
  if (newer_eval) st->m.eval = p.eval;
  if (newer_step && p.step_ms > 0) st->m.step_ms = p.step_ms;
  queue_.Queue(p);  // new to us: pass it on, so progress spreads transitively
}

void Swim::Impl::OnUpdate(const Update& u) {
  if (const auto* a = std::get_if<AliveMsg>(&u)) {
    OnAlive(*a);
  } else if (const auto* s = std::get_if<SuspectMsg>(&u)) {
    OnSuspect(*s);
  } else if (const auto* d = std::get_if<DeadMsg>(&u)) {
    OnDead(*d);
  } else if (const auto* p = std::get_if<ProgressMsg>(&u)) {
    OnProgress(*p);
  }
}

void Swim::Impl::Refute(uint32_t accused) {
  uint32_t inc = self_->m.incarnation + 1;
  if (accused >= inc) inc = accused + 1;
  self_->m.incarnation = inc;
  // Lifeguard: being accused suggests we are the slow one; probe less eagerly.
  awareness_.ApplyDelta(1);
  ++stats_.refutations;
  queue_.Queue(AliveMsg{cfg_.name, cfg_.addr, inc, self_->m.meta});
}

void Swim::Impl::MergeState(const std::vector<MemberState>& remote, bool spread) {
  // memberlist mergeState: a remote "dead" only makes us suspect (our own probes decide), and
  // a remote claim that we are dead goes through the refutation path.
  for (const MemberState& r : remote) {
    switch (r.status) {
      case Status::kAlive:
        OnAlive(AliveMsg{r.name, r.addr, r.incarnation, r.meta}, spread);
        break;
      case Status::kLeft:
        OnDead(DeadMsg{r.name, r.incarnation, r.name});
        break;
      case Status::kFailed:
      case Status::kSuspect:
        OnSuspect(SuspectMsg{r.name, r.incarnation, cfg_.name});
        break;
    }
    NodeState* st = FindState(r.name);
    if (st == nullptr || st == self_) continue;
    if (r.step > st->m.step) {
      NoteStep(st, r.step, now_);
    } else if (r.step == st->m.step && st->m.step_learned == 0) {
      st->m.step_learned = now_;  // a full state exchange confirms the step (0 in a fresh mesh)
    }
  }
}

void Swim::Impl::MergeShuffle(const std::vector<MemberState>& entries,
                              std::vector<std::string> pool) {
  // Only alive entries are taken (a shuffle sends no others), and they are not gossiped on:
  // they are old news to their holders, and a bounded view's gossip reaches holders only.
  shuffle_pool_ = &pool;
  for (const MemberState& r : entries) {
    if (r.status != Status::kAlive || r.name == cfg_.name) continue;
    OnAlive(AliveMsg{r.name, r.addr, r.incarnation, r.meta}, /*spread=*/false);
    NodeState* st = FindState(r.name);
    if (st != nullptr && st != self_ && r.step > st->m.step) NoteStep(st, r.step, now_);
  }
  shuffle_pool_ = nullptr;
}

std::vector<MemberState> Swim::Impl::LocalState(bool without_self) const {
  std::vector<MemberState> out;
  out.reserve(nodes_.size());
  for (const NodeState* st : nodes_) {
    if (without_self && st == self_) continue;
    out.push_back(MemberState{st->m.name, st->m.addr, st->m.incarnation, st->m.status, st->m.meta,
                              st->m.step});
  }
  return out;
}

// ---- Swim ----------------------------------------------------------------------------------

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
  // Behind a NAT only the path the packet came over leads back (issue 34); without NAT
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
    const uint32_t seq = s.NextSeq();
    Relay r;
    r.origin_addr = reply_to;
    r.origin_seq = ind->seq;
    r.want_nack = ind->want_nack;
    r.nack_at =
        now + static_cast<TimeMs>(kNackFraction * static_cast<double>(s.cfg_.probe_timeout));
    r.expire_at = now + s.cfg_.probe_timeout;
    s.relays_.emplace(seq, std::move(r));
    s.no_direct_ = true;
    s.SendPacket(ind->target_addr, PingMsg{seq, ind->target});
    s.no_direct_ = false;
  } else if (const auto* reg = std::get_if<RelayRegisterMsg>(&packet.primary)) {
    s.OnRelayRegister(*reg, packet, from_addr);
  } else if (const auto* ack = std::get_if<AckMsg>(&packet.primary)) {
    if (s.relay_.awaiting && ack->seq == s.relay_.seq) {
      s.OnRelayAck(*ack, packet.from);
    } else if (s.probe_.active && ack->seq == s.probe_.seq) {
      if (s.cfg_.nat && !ack->observed.empty()) s.NoteObserved(packet.from, ack->observed);
      s.ProbeSucceeded();
    } else if (auto d = s.discovery_.find(ack->seq); d != s.discovery_.end()) {
      if (s.cfg_.nat && !ack->observed.empty() && d->second == packet.from) {
        s.NoteObserved(packet.from, ack->observed);
      }
      s.discovery_.erase(d);
    } else if (auto it = s.relays_.find(ack->seq); it != s.relays_.end()) {
      if (s.cfg_.nat && !ack->observed.empty()) s.NoteObserved(packet.from, ack->observed);
      const Relay r = std::move(it->second);
      s.relays_.erase(it);
      s.SendPacket(r.origin_addr, AckMsg{r.origin_seq, std::string()});
    }
  } else if (const auto* nack = std::get_if<NackMsg>(&packet.primary)) {
    if (s.relay_.awaiting && nack->seq == s.relay_.seq) {
      s.OnRelayNack(packet.from);
    } else if (s.probe_.active && nack->seq == s.probe_.seq) {
      ++s.probe_.nacks;
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
      r.nack_sent = true;
      s.SendPacket(r.origin_addr, NackMsg{r.origin_seq});
    }
    it = now >= r.expire_at ? s.relays_.erase(it) : std::next(it);
  }
  if (s.probe_.active && !s.probe_.indirect_sent && now >= s.probe_.timeout_at) {
    s.SendIndirectPings();
  }
  if (s.probe_.active && now >= s.probe_.deadline) s.ProbeFailed();
  if (!s.left_ && now >= s.next_probe_) s.StartProbe();
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

// ---- NAT traversal (issue 34) -----------------------------------------------------------------

void Swim::Impl::NoteSentTo(const std::string& addr) {
  if (sent_to_.size() >= kMaxSentTo && sent_to_.count(addr) == 0) {
    for (auto it = sent_to_.begin(); it != sent_to_.end();) {
      it = it->second < now_ - kSentToMemoryMs ? sent_to_.erase(it) : std::next(it);
    }
    if (sent_to_.size() >= kMaxSentTo) {
      auto oldest = std::min_element(sent_to_.begin(), sent_to_.end(),
                                     [](auto& a, auto& b) { return a.second < b.second; });
      sent_to_.erase(oldest);
    }
  }
  sent_to_[addr] = now_;
}

void Swim::Impl::Punch(const NodeState& st) {
  if (!cfg_.nat || left_ || &st == self_ || !IsLive(st.m.status)) return;
  if (self_->m.meta.reach != Reach::kNat || st.m.meta.reach != Reach::kNat) return;
  // A relayed member is reached through its relay; a relayed node's NAT opens a new mapping
  // per destination, which no punch can predict.
  if (!st.m.meta.relay.empty() || need_relay_) return;
  ++stats_.punches;
  SendPacket(st.m.addr, std::monostate{},
             {AliveMsg{cfg_.name, cfg_.addr, self_->m.incarnation, self_->m.meta}}, false);
}

void Swim::Impl::Discover() {
  if (!cfg_.nat || left_ || self_->m.meta.reach != Reach::kUnknown) return;
  discovery_.clear();
  for (NodeState* st : RandomNodes(kReflexiveQuorum + 1, [&](const NodeState* st) {
         return st != self_ && st->m.status == Status::kAlive && st->m.meta.reach != Reach::kNat;
       })) {
    const uint32_t seq = NextSeq();
    discovery_[seq] = st->m.name;
    SendPacket(st->m.addr, PingMsg{seq, st->m.name}, {}, false);
  }
}

void Swim::Impl::PunchAll() {
  for (const NodeState* st : nodes_) Punch(*st);
}

void Swim::Impl::NoteUnsolicited() {
  if (left_ || self_->m.meta.reach == Reach::kPublic) return;
  self_->m.meta.reach = Reach::kPublic;
  PublishSelf();
}

void Swim::Impl::NoteObserved(const std::string& peer, const std::string& addr) {
  const NodeState* st = FindState(peer);
  if (st == nullptr || st == self_ || !IsLive(st->m.status) || left_) return;
  observed_[peer] = addr;
  // Only live members' reports count (and are kept).
  size_t agree = 0, elsewhere = 0, reports = 0;
  std::set<std::string> outside;  // addresses seen other than our own inner one
  for (auto it = observed_.begin(); it != observed_.end();) {
    const NodeState* o = FindState(it->first);
    if (o == nullptr || !IsLive(o->m.status)) {
      it = observed_.erase(it);
      continue;
    }
    ++reports;
    agree += it->second == addr;
    elsewhere += it->second != cfg_.addr;
    if (it->second != configured_addr_) outside.insert(it->second);
    ++it;
  }
  // Peers see us at different outside addresses: a symmetric NAT (a new mapping per
  // destination), even when we moved to where our first peer saw us (it was alone then). No
  // address of ours reaches us from everywhere: we need a relay (issue 34). (A peer behind the
  // same NAT sees our inner address: no evidence.)
  if (outside.size() >= 2 && cfg_.adopt_reflexive && cfg_.relay_mode != Config::RelayMode::kOff &&
      !need_relay_ && self_->m.meta.reach != Reach::kPublic) {
    need_relay_ = true;
    if (self_->m.meta.reach == Reach::kUnknown) {
      self_->m.meta.reach = Reach::kNat;
      PublishSelf();
    }
    RelayTick();
    return;
  }
  // Peers that can answer before we moved: a member behind NAT drops our pings until we
  // advertise an address it sends to, so only the others count towards the quorum.
  size_t peers = 0;
  for (const NodeState* o : nodes_) {
    peers += o != self_ && IsLive(o->m.status) && o->m.meta.reach != Reach::kNat;
  }
  const size_t quorum = std::min(kReflexiveQuorum, std::max<size_t>(peers, 1));
  if (quorum == 0 || reports < quorum || elsewhere < quorum) return;
  bool changed = false;
  if (self_->m.meta.reach == Reach::kUnknown) {
    // Seen elsewhere than where we are: behind a NAT, until something reaches us unsolicited.
    self_->m.meta.reach = Reach::kNat;
    changed = true;
  }
  bool moved = false;
  if (cfg_.adopt_reflexive && !need_relay_ && addr != cfg_.addr && agree >= quorum) {
    cfg_.addr = addr;
    self_->m.addr = addr;
    ++stats_.reflexive_moves;
    changed = moved = true;
  }
  if (changed) {
    PublishSelf();
    PunchAll();
  }
  // Until now nobody could reach us: gossip sent our way was lost. A push-pull with one peer
  // brings the full state now instead of at the next periodic round (15-60 s).
  if (moved) {
    const NodeState* peer = PickOne([&](const NodeState* st) {
      return st != self_ && st->m.status == Status::kAlive && st->m.meta.reach != Reach::kNat;
    });
    if (peer != nullptr) PushPullWith(*peer);
  }
}

}  // namespace meshtrain::membership
