// Member state and its updates (memberlist state.go): the half of Swim::Impl that adds,
// removes and suspects members, applies alive/suspect/dead/progress news and merges full states.
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
  st->addr_since = now_;
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
    // or the member moved to the address its peers see it at behind a NAT (a newer
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
  if (st->m.addr != old_addr) {
    st->addr_since = now_;
    st->addr_confirmed = false;
  }
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

}  // namespace meshtrain::membership
