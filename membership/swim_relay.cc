// Relays for members behind symmetric NAT: the half of Swim::Impl that chooses a
// relay and keeps the registration alive (as a relayed node), accepts registrations and judges
// relay frames (as a relay), and routes datagrams for relayed members through their relays.
// Pure like the rest of the core: time comes in, what to send goes out.
#include "membership/swim_impl.h"

namespace meshtrain::membership {

const char* RelayVerdictName(RelayVerdict v) {
  switch (v) {
    case RelayVerdict::kForward:
      return "forward";
    case RelayVerdict::kDeliver:
      return "deliver";
    case RelayVerdict::kNotServing:
      return "not_serving";
    case RelayVerdict::kNotMember:
      return "not_member";
    case RelayVerdict::kNotRegistered:
      return "not_registered";
    case RelayVerdict::kLoop:
      return "loop";
    case RelayVerdict::kOverRate:
      return "over_rate";
  }
  return "unknown";
}

// ---- routing ----------------------------------------------------------------------------------

void Swim::Impl::IndexNat(const NodeState& st, const std::string& old_addr) {
  if (auto it = nat_addr_.find(old_addr); it != nat_addr_.end() && it->second == st.m.name) {
    nat_addr_.erase(it);
  }
  if (&st != self_ && (!st.m.meta.relay.empty() || st.m.meta.reach == Reach::kNat)) {
    nat_addr_[st.m.addr] = st.m.name;
  }
}

std::optional<RelayRoute> Swim::Impl::RouteFor(const std::string& addr) const {
  if (nat_addr_.empty()) return std::nullopt;
  auto it = nat_addr_.find(addr);
  if (it == nat_addr_.end()) return std::nullopt;
  const auto st = map_.find(it->second);
  if (st == map_.end() || st->second->m.addr != addr) return std::nullopt;
  const Member& m = st->second->m;
  std::string via;
  if (!m.meta.relay.empty()) {
    // We are its relay: its address is the mapping its registrations opened towards us.
    if (m.meta.relay == cfg_.name) return std::nullopt;
    // It sent to us straight lately: its NAT lets us in where that came from.
    if (!no_direct_) {
      if (const RelayEntry* d = DirectPath(m)) return RelayRoute{d->addr, std::string()};
    }
    via = m.meta.relay;
  } else if (m.meta.reach == Reach::kNat && need_relay_ && relay_.registered) {
    // A member behind a cone NAT admits only addresses it sent to, and our NAT gives every
    // destination a new port: we reach it through our own relay, which it sends to.
    via = relay_.name;
  } else {
    return std::nullopt;
  }
  const auto relay = map_.find(via);
  if (relay == map_.end() || !IsLive(relay->second->m.status)) return std::nullopt;
  return RelayRoute{relay->second->m.addr, m.name};
}

std::optional<RelayRoute> Swim::Route(const std::string& addr) const {
  return impl_->RouteFor(addr);
}

namespace {
// The host part of "ip:port" (or "[v6]:port").
std::string_view HostOf(std::string_view addr) {
  const size_t colon = addr.rfind(':');
  return colon == std::string_view::npos ? addr : addr.substr(0, colon);
}
}  // namespace

void Swim::Impl::NoteDirectFrom(const NodeState* st, const std::string& from_addr) {
  // Only a relayed member's (not ours: we reach our clients at their registration's address),
  // from the IP it advertises (its NAT's; a datagram naming it from elsewhere is not its own).
  if (cfg_.direct_ttl <= 0 || st == nullptr || st == self_ || from_addr.empty() ||
      st->m.meta.relay.empty() || st->m.meta.relay == cfg_.name || !IsLive(st->m.status) ||
      HostOf(from_addr) != HostOf(st->m.addr)) {
    return;
  }
  RelayEntry& e = direct_[st->m.name];
  if (e.addr != from_addr || now_ - e.last > cfg_.direct_ttl) ++stats_.direct_paths;
  e.addr = from_addr;
  e.last = now_;
}

const Swim::Impl::RelayEntry* Swim::Impl::DirectPath(const Member& m) const {
  if (direct_.empty()) return nullptr;
  const auto it = direct_.find(m.name);
  if (it == direct_.end() || now_ - it->second.last > cfg_.direct_ttl ||
      HostOf(it->second.addr) != HostOf(m.addr)) {
    return nullptr;
  }
  return &it->second;
}

void Swim::NoteDirect(const std::string& name, const std::string& from_addr, TimeMs now) {
  impl_->now_ = now;
  impl_->NoteDirectFrom(impl_->FindState(name), from_addr);
}

// ---- as a relayed node --------------------------------------------------------------------------

void Swim::Impl::ChooseRelay(const std::string& avoid) {
  auto usable = [&](const NodeState* st) {
    return st != self_ && st->m.status == Status::kAlive && st->m.meta.reach == Reach::kPublic &&
           st->m.meta.serves_relay && st->m.meta.relay.empty() && st->m.name != avoid &&
           (cfg_.relay_mode != Config::RelayMode::kNamed || st->m.name == cfg_.relay_name);
  };
  const NodeState* pick = PickOne(usable);
  const bool failover = !relay_.name.empty() || !relay_.prev.empty();
  if (!relay_.name.empty()) {
    relay_.prev = relay_.name;
    // Frames the old relay still has in flight, and members that have not yet heard of the
    // new one, keep arriving through it for a moment.
    relay_.prev_until = now_ + cfg_.relay_ttl;
  }
  relay_.name = pick != nullptr ? pick->m.name : std::string();
  relay_.registered = false;
  relay_.awaiting = false;
  relay_.last_heard = now_;
  relay_.next_keepalive = now_;
  if (pick != nullptr && failover) ++stats_.relay_failovers;
}

void Swim::Impl::SendRegistration() {
  const NodeState* r = FindState(relay_.name);
  if (r == nullptr) return;
  relay_.awaiting = true;
  relay_.seq = NextSeq();
  relay_.next_keepalive = now_ + cfg_.relay_keepalive;
  ++stats_.relay_keepalives;
  SendPacket(r->m.addr, RelayRegisterMsg{relay_.seq}, {}, false);
}

void Swim::Impl::RelayTick() {
  // As a relay: forget registrations that were not renewed.
  for (auto* table : {&relay_clients_, &relay_returns_}) {
    for (auto it = table->begin(); it != table->end();) {
      it = now_ - it->second.last > cfg_.relay_ttl ? table->erase(it) : std::next(it);
    }
  }
  if (!need_relay_ || left_ || cfg_.relay_mode == Config::RelayMode::kOff) return;
  if (!relay_.name.empty()) {
    const NodeState* r = FindState(relay_.name);
    const bool gone = r == nullptr || r->m.status != Status::kAlive || !r->m.meta.relay.empty() ||
                      !r->m.meta.serves_relay;
    const TimeMs silent = now_ - relay_.last_heard;
    if (gone || silent >= cfg_.relay_keepalive * cfg_.relay_keepalive_misses) {
      ChooseRelay(relay_.name);
    }
  } else if (now_ >= relay_.next_keepalive) {
    // None yet, or none was left: rather another than the one that failed, but that one again
    // when it is the only one (it came back).
    ChooseRelay(relay_.prev);
    if (relay_.name.empty() && !relay_.prev.empty()) ChooseRelay(std::string());
    if (relay_.name.empty()) relay_.next_keepalive = now_ + cfg_.relay_keepalive;
  }
  if (!relay_.name.empty() && now_ >= relay_.next_keepalive) SendRegistration();
}

void Swim::Impl::OnRelayAck(const AckMsg& ack, const std::string& from) {
  if (from != relay_.name || ack.seq != relay_.seq) return;
  relay_.awaiting = false;
  const bool was = relay_.registered;
  relay_.registered = true;
  // The relay forwards to where it sees us: that is our address now (unique, and the one
  // address at which the relay reaches us).
  const std::string addr = ack.observed.empty() ? cfg_.addr : ack.observed;
  if (was && addr == cfg_.addr && self_->m.meta.relay == relay_.name) return;
  cfg_.addr = addr;
  self_->m.addr = addr;
  self_->m.meta.relay = relay_.name;
  PublishSelf();
  // Until now nobody reached us (gossip sent to our inner address, or to us through a relay
  // that had failed, was lost): a push-pull with the relay, which is public, brings the full
  // state now instead of at the next periodic round (15-60 s), as after a reflexive move.
  if (!was) {
    if (const NodeState* r = FindState(relay_.name)) PushPullWith(*r);
  }
}

void Swim::Impl::OnRelayNack(const std::string& from) {
  if (from != relay_.name) return;
  ChooseRelay(from);  // it refuses: try another at once
}

// ---- as a relay ---------------------------------------------------------------------------------

void Swim::Impl::OnRelayRegister(const RelayRegisterMsg& r, const Packet& p,
                                 const std::string& from_addr) {
  const NodeState* sender = FindState(p.from);
  if (sender == nullptr || sender == self_ || !IsLive(sender->m.status)) {
    ++stats_.relay_refused_not_member;  // no answer to strangers
    return;
  }
  if (!cfg_.serve_relay || left_) {
    ++stats_.relay_refused_not_serving;
    SendPacket(from_addr.empty() ? sender->m.addr : from_addr, NackMsg{r.seq}, {}, false);
    return;
  }
  // No loops: a relayed node does not relay, and a registration must come straight from the
  // member (one that came through a relay has no source address of its own).
  if (!self_->m.meta.relay.empty() || need_relay_ || from_addr.empty()) {
    ++stats_.relay_refused_loop;
    if (!from_addr.empty()) SendPacket(from_addr, NackMsg{r.seq}, {}, false);
    return;
  }
  RelayEntry& e = relay_clients_[p.from];
  if (e.addr != from_addr) ++stats_.relay_registrations;
  e.addr = from_addr;
  e.last = now_;
  SendPacket(from_addr, AckMsg{r.seq, from_addr}, {}, false);
}

RelayVerdict Swim::OnRelayFrame(const std::string& sender, const std::string& from_addr,
                                const std::string& dest, size_t bytes, TimeMs now,
                                std::string* to_addr) {
  Impl& s = *impl_;
  s.now_ = now;
  if (dest == s.cfg_.name) {
    // For us: a relayed node takes frames from the relay it registered with (or the one
    // before, for a moment); any other node from a member that serves as a relay (a relayed
    // node's answers come back through the relay it was sent through).
    const NodeState* from = s.FindState(sender);
    const bool ours = !sender.empty() && (sender == s.relay_.name ||
                                          (sender == s.relay_.prev && now < s.relay_.prev_until));
    const bool a_relay = !s.need_relay_ && from != nullptr && from != s.self_ &&
                         IsLive(from->m.status) && from->m.meta.serves_relay &&
                         from->m.meta.relay.empty();
    if (!ours && !a_relay) {
      ++s.stats_.relay_refused_loop;
      return RelayVerdict::kLoop;
    }
    ++s.stats_.relay_delivered;
    return RelayVerdict::kDeliver;
  }
  if (!s.cfg_.serve_relay) {
    ++s.stats_.relay_refused_not_serving;
    return RelayVerdict::kNotServing;
  }
  const NodeState* from = s.FindState(sender);
  if (from == nullptr || from == s.self_ || !IsLive(from->m.status)) {
    ++s.stats_.relay_refused_not_member;
    return RelayVerdict::kNotMember;
  }
  if (!s.self_->m.meta.relay.empty() || s.need_relay_) {
    ++s.stats_.relay_refused_loop;
    return RelayVerdict::kLoop;
  }
  // The sender's return path: where its frames come from (its registration, if it has one,
  // says where it is reached).
  if (!from_addr.empty() && s.relay_clients_.count(sender) == 0) {
    s.relay_returns_[sender] = Impl::RelayEntry{from_addr, now};
  }
  auto fresh = [&](const std::map<std::string, Impl::RelayEntry>& table) {
    auto e = table.find(dest);
    return e != table.end() && now - e->second.last <= s.cfg_.relay_ttl ? &e->second : nullptr;
  };
  const Impl::RelayEntry* entry = fresh(s.relay_clients_);
  if (entry == nullptr) entry = fresh(s.relay_returns_);
  if (entry == nullptr) {
    ++s.stats_.relay_refused_not_registered;
    return RelayVerdict::kNotRegistered;
  }
  const double rate = s.cfg_.relay_rate_bytes_per_s;
  if (rate > 0) {
    // Token bucket: one second of the rate at most.
    const double elapsed_s = static_cast<double>(std::max<TimeMs>(0, now - s.relay_refill_)) / 1e3;
    s.relay_tokens_ = std::min(rate, s.relay_tokens_ + elapsed_s * rate);
    s.relay_refill_ = now;
    if (s.relay_tokens_ < static_cast<double>(bytes)) {
      ++s.stats_.relay_refused_over_rate;
      return RelayVerdict::kOverRate;
    }
    s.relay_tokens_ -= static_cast<double>(bytes);
  }
  ++s.stats_.relay_frames;
  s.stats_.relay_bytes += bytes;
  if (to_addr != nullptr) *to_addr = entry->addr;
  return RelayVerdict::kForward;
}

const std::string& Swim::relay() const { return impl_->relay_.name; }

bool Swim::relay_registered() const { return impl_->relay_.registered; }

size_t Swim::relay_clients() const { return impl_->relay_clients_.size(); }

}  // namespace meshtrain::membership
