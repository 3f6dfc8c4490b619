// NAT traversal: the half of Swim::Impl that learns whether this node is reachable from
// outside (the addresses its peers see it at, unsolicited traffic), moves it to its reflexive
// address, punches holes towards members behind NAT and decides when a relay is needed
// (swim_relay.cc runs the relays).
#include "membership/swim_impl.h"

namespace meshtrain::membership {

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

void Swim::Impl::Discover(bool retry) {
  next_discover_ = kNever;
  if (!cfg_.nat || left_ || self_->m.meta.reach == Reach::kPublic || need_relay_ || discovered_) {
    return;
  }
  if (now_ + cfg_.probe_interval < discover_until_) next_discover_ = now_ + cfg_.probe_interval;
  if (retry) {
    // Still no two reports. Members that joined meanwhile told us nothing (their news went to
    // an address nobody reaches): a push-pull, which we open, brings them; and members that
    // did not answer our last pings no longer count towards the quorum.
    const NodeState* peer = PickOne([&](const NodeState* st) {
      return st != self_ && st->m.status == Status::kAlive && st->m.meta.relay.empty() &&
             st->m.meta.reach != Reach::kNat &&
             (st->m.meta.reach == Reach::kPublic || st->addr_confirmed);
    });
    if (peer != nullptr) PushPullWith(*peer);
    if (!observed_.empty()) WeighObserved(last_observed_);
    if (discovered_ || need_relay_) return;
  }
  discovery_.clear();
  // Members that have not said where they see us yet.
  for (NodeState* st : RandomNodes(kReflexiveQuorum + 1, [&](const NodeState* st) {
         return st != self_ && st->m.status == Status::kAlive && st->m.meta.reach != Reach::kNat &&
                observed_.count(st->m.name) == 0;
       })) {
    const uint32_t seq = NextSeq();
    discovery_[seq] = st->m.name;
    st->discovery_ping = now_;
    SendPacket(st->m.addr, PingMsg{seq, st->m.name}, {}, false);
  }
}

bool Swim::Impl::CanReport(const NodeState& st) const {
  if (&st == self_ || !IsLive(st.m.status) || st.m.meta.reach == Reach::kNat) return false;
  return st.m.meta.reach == Reach::kPublic || st.addr_confirmed ||
         now_ - st.discovery_ping < cfg_.probe_interval;
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
  last_observed_ = addr;
  WeighObserved(addr);
}

void Swim::Impl::WeighObserved(const std::string& addr) {
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
  // address of ours reaches us from everywhere: we need a relay. (A peer behind the
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
  for (const NodeState* o : nodes_) peers += CanReport(*o);
  const size_t quorum = std::min(kReflexiveQuorum, std::max<size_t>(peers, 1));
  // Two reports settle where we are (one, from our only peer, may be followed by a second that
  // disagrees: a symmetric NAT).
  if (reports >= kReflexiveQuorum) discovered_ = true;
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
