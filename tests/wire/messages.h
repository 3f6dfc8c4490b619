// Seeded generators of random wire messages and field-by-field comparisons, shared by the codec
// round-trip, size-bound and mutation tests.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "membership/types.h"
#include "wire/codec.h"

namespace meshtrain::wire::testing {

namespace ms = ::meshtrain::membership;

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  std::mt19937_64& rng() { return rng_; }
  uint64_t U(uint64_t lo, uint64_t hi) {  // inclusive
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_);
  }
  bool Coin() { return U(0, 1) == 1; }

  // Printable names of 1..max bytes, sometimes with a two-byte UTF-8 character ("é").
  std::string Name(size_t max = kMaxSenderBytes) {
    const size_t len = U(1, max);
    std::string s;
    while (s.size() < len) {
      if (s.size() + 2 <= len && U(0, 20) == 0) {
        s += "\xC3\xA9";
      } else {
        s.push_back(static_cast<char>(U('!', '~')));
      }
    }
    return s;
  }
  std::string Addr() {
    return std::to_string(U(0, 255)) + "." + std::to_string(U(0, 255)) + "." +
           std::to_string(U(0, 255)) + "." + std::to_string(U(0, 255)) + ":" +
           std::to_string(U(1, 65535));
  }
  float Mbps() { return std::uniform_real_distribution<float>(0, 1000)(rng_); }

  ms::Meta Meta() {
    ms::Meta m;
    if (Coin()) m.data_addr = Addr();
    m.training = Coin();
    if (Coin()) m.uplink_mbps = Mbps();
    if (Coin()) m.downlink_mbps = Mbps();
    if (Coin()) {  // sorted, unique keys within the limits of wire::ValidTags
      const uint64_t n = U(1, 8);
      for (uint64_t i = 0; i < n; ++i) {
        m.tags.emplace_back("k" + std::to_string(i), std::string(U(0, 20), 'v'));
      }
    }
    m.reach = static_cast<ms::Reach>(U(0, 2));
    if (Coin()) m.relay = Name();
    m.serves_relay = Coin();
    return m;
  }

  ms::Update Update(size_t max_name = kMaxSenderBytes) {
    switch (U(0, 3)) {
      case 0:
        return ms::AliveMsg{Name(max_name), Addr(), static_cast<uint32_t>(U(0, UINT32_MAX)),
                            Meta()};
      case 1:
        return ms::SuspectMsg{Name(max_name), static_cast<uint32_t>(U(0, 1000)),
                              Coin() ? Name(max_name) : std::string()};
      case 2:
        return ms::DeadMsg{Name(max_name), static_cast<uint32_t>(U(0, 1000)), Name(max_name)};
      default:
        return ms::ProgressMsg{
            Name(max_name), U(0, UINT64_MAX),
            U(0, 1) ? ms::Eval{U(0, UINT64_MAX), static_cast<float>(U(0, 1000)) / 1000.0f,
                               static_cast<float>(U(0, 100000)) / 1000.0f}
                    : ms::Eval{},
            static_cast<float>(U(0, 100000)) / 100.0f};
    }
  }

  ms::Primary Primary() {
    switch (U(0, 5)) {
      case 0:
        return std::monostate{};
      case 5:
        return ms::RelayRegisterMsg{static_cast<uint32_t>(U(0, UINT32_MAX))};
      case 1:
        return ms::PingMsg{static_cast<uint32_t>(U(0, UINT32_MAX)), Coin() ? Name() : ""};
      case 2:
        return ms::IndirectPingMsg{static_cast<uint32_t>(U(0, UINT32_MAX)), Name(), Addr(), Coin()};
      case 3:
        return ms::AckMsg{static_cast<uint32_t>(U(0, UINT32_MAX)), Coin() ? Addr() : ""};
      default:
        return ms::NackMsg{static_cast<uint32_t>(U(0, UINT32_MAX))};
    }
  }

  // A packet filled the way the membership core fills one: updates are added while the
  // estimated size stays within `budget` (the datagram limit minus the codec's overhead).
  ms::Packet Packet(const std::string& from, size_t budget, size_t max_name = kMaxSenderBytes) {
    ms::Packet p;
    p.from = from;
    p.from_addr = Addr();
    p.from_step = U(0, 1) ? U(0, 1000000) : U(0, UINT64_MAX);
    p.primary = Primary();
    size_t used = ms::EstimatePacketOverhead(p);
    const size_t want = U(0, kMaxUpdatesPerDatagram);
    for (size_t i = 0; i < want; ++i) {
      ms::Update u = Update(max_name);
      const size_t cost = ms::EstimateSize(u);
      if (used + cost > budget) break;
      used += cost;
      p.updates.push_back(std::move(u));
    }
    return p;
  }

  ms::MemberState Member() {
    ms::MemberState m;
    m.name = Name();
    m.addr = Addr();
    m.incarnation = static_cast<uint32_t>(U(0, 100000));
    m.status = static_cast<ms::Status>(U(0, 3));
    m.meta = Meta();
    m.step = U(0, 1000000);
    return m;
  }

  PushPullMsg PushPull(const std::string& from, size_t max_members) {
    PushPullMsg m;
    m.response = Coin();
    m.state.join = Coin();
    m.state.from = from;
    const size_t n = U(0, max_members);
    for (size_t i = 0; i < n; ++i) m.state.members.push_back(Member());
    m.state.shuffle = Coin();
    return m;
  }

  std::vector<float> Floats(size_t n) {
    std::normal_distribution<float> d(0, 1);
    std::vector<float> v(n);
    for (float& f : v) f = d(rng_);
    return v;
  }

  ParamChunk Chunk(size_t max_floats) {
    const std::vector<float> params = Floats(U(1, max_floats));
    const auto chunks =
        SplitParams(params, U(0, 1000), U(0, 1000000), static_cast<uint32_t>(U(1, params.size())));
    return chunks[U(0, chunks.size() - 1)];
  }

  Datagram RandomDatagram(const Codec& codec) {
    Datagram d;
    d.sender = Name();
    d.sent_ms = U(0, UINT64_MAX);
    switch (U(0, 4)) {
      case 4: {
        RelayFrame rf;
        rf.dest = Name();
        rf.inner.resize(U(kPlainOverhead + 8, kMaxRelayInnerBytes));
        for (auto& b : rf.inner) b = static_cast<uint8_t>(U(0, 255));
        d.body = std::move(rf);
        break;
      }
      case 0:
        d.body = ProgressQuery{static_cast<uint32_t>(U(0, UINT32_MAX)), U(0, UINT64_MAX),
                               U(0, UINT64_MAX)};
        break;
      case 1:
        d.body = ProgressReply{static_cast<uint32_t>(U(0, UINT32_MAX)), U(0, UINT64_MAX), Coin(),
                               Coin()};
        break;
      default:
        d.body = Packet(d.sender, kMaxDatagramBytes - codec.DatagramOverhead());
    }
    return d;
  }

  Key RandomKey() {
    Key k;
    for (auto& b : k) b = static_cast<uint8_t>(U(0, 255));
    return k;
  }

  KeyOpMsg KeyOp() {
    KeyOpMsg m;
    m.op = static_cast<KeyOpKind>(U(1, 4));
    if (m.op != KeyOpKind::kList) m.key = RandomKey();
    m.seq = static_cast<uint32_t>(U(0, UINT32_MAX));
    return m;
  }

  KeyOpReplyMsg KeyOpReply() {
    KeyOpReplyMsg m;
    m.seq = static_cast<uint32_t>(U(0, UINT32_MAX));
    m.ok = Coin();
    if (!m.ok) m.error = "key is not installed";
    const size_t n = U(0, 5);
    for (size_t i = 0; i < n; ++i) m.keys.push_back(KeyFingerprint(RandomKey()));
    if (!m.keys.empty() && Coin()) m.primary = m.keys[U(0, m.keys.size() - 1)];
    return m;
  }

  Frame RandomFrame(size_t max_members, size_t max_floats) {
    Frame f;
    f.sender = Name();
    f.sent_ms = U(0, UINT64_MAX);
    switch (U(0, 6)) {
      case 0:
      case 1:
        f.body = PushPull(f.sender, max_members);
        break;
      case 2:
      case 3:
        f.body = Chunk(max_floats);
        break;
      case 4:
        f.body = KeyOp();
        break;
      case 5:
        f.body = KeyOpReply();
        break;
      default:
        f.body = ParamAckMsg{U(1, UINT64_MAX), U(0, UINT64_MAX)};
    }
    return f;
  }

 private:
  std::mt19937_64 rng_;
};

// ---- Field-by-field equality (the membership structs define operator== only for Meta) ----

inline void CheckSame(const ms::Update& a, const ms::Update& b) {
  REQUIRE(a.index() == b.index());
  if (const auto* x = std::get_if<ms::AliveMsg>(&a)) {
    const auto& y = std::get<ms::AliveMsg>(b);
    CHECK(x->name == y.name);
    CHECK(x->addr == y.addr);
    CHECK(x->incarnation == y.incarnation);
    CHECK(x->meta == y.meta);
  } else if (const auto* x = std::get_if<ms::SuspectMsg>(&a)) {
    const auto& y = std::get<ms::SuspectMsg>(b);
    CHECK(x->name == y.name);
    CHECK(x->incarnation == y.incarnation);
    CHECK(x->from == y.from);
  } else if (const auto* x = std::get_if<ms::DeadMsg>(&a)) {
    const auto& y = std::get<ms::DeadMsg>(b);
    CHECK(x->name == y.name);
    CHECK(x->incarnation == y.incarnation);
    CHECK(x->from == y.from);
  } else {
    const auto& p = std::get<ms::ProgressMsg>(a);
    const auto& q = std::get<ms::ProgressMsg>(b);
    CHECK(p.name == q.name);
    CHECK(p.step == q.step);
    CHECK(p.eval == q.eval);
    CHECK(p.step_ms == q.step_ms);
  }
}

inline void CheckSame(const ms::Primary& a, const ms::Primary& b) {
  REQUIRE(a.index() == b.index());
  if (const auto* x = std::get_if<ms::PingMsg>(&a)) {
    CHECK(x->seq == std::get<ms::PingMsg>(b).seq);
    CHECK(x->target == std::get<ms::PingMsg>(b).target);
  } else if (const auto* x = std::get_if<ms::IndirectPingMsg>(&a)) {
    const auto& y = std::get<ms::IndirectPingMsg>(b);
    CHECK(x->seq == y.seq);
    CHECK(x->target == y.target);
    CHECK(x->target_addr == y.target_addr);
    CHECK(x->want_nack == y.want_nack);
  } else if (const auto* x = std::get_if<ms::AckMsg>(&a)) {
    CHECK(x->seq == std::get<ms::AckMsg>(b).seq);
    CHECK(x->observed == std::get<ms::AckMsg>(b).observed);
  } else if (const auto* x = std::get_if<ms::NackMsg>(&a)) {
    CHECK(x->seq == std::get<ms::NackMsg>(b).seq);
  } else if (const auto* x = std::get_if<ms::RelayRegisterMsg>(&a)) {
    CHECK(x->seq == std::get<ms::RelayRegisterMsg>(b).seq);
  }
}

inline void CheckSame(const ms::Packet& a, const ms::Packet& b) {
  CHECK(a.from == b.from);
  CHECK(a.from_addr == b.from_addr);
  CHECK(a.from_step == b.from_step);
  CheckSame(a.primary, b.primary);
  REQUIRE(a.updates.size() == b.updates.size());
  for (size_t i = 0; i < a.updates.size(); ++i) CheckSame(a.updates[i], b.updates[i]);
}

inline void CheckSame(const ms::MemberState& a, const ms::MemberState& b) {
  CHECK(a.name == b.name);
  CHECK(a.addr == b.addr);
  CHECK(a.incarnation == b.incarnation);
  CHECK(a.status == b.status);
  CHECK(a.meta == b.meta);
  CHECK(a.step == b.step);
}

inline void CheckSame(const Datagram& a, const Datagram& b) {
  CHECK(a.sender == b.sender);
  CHECK(a.sent_ms == b.sent_ms);
  REQUIRE(a.body.index() == b.body.index());
  if (const auto* p = std::get_if<ms::Packet>(&a.body)) {
    CheckSame(*p, std::get<ms::Packet>(b.body));
  } else if (const auto* q = std::get_if<ProgressQuery>(&a.body)) {
    CHECK(q->seq == std::get<ProgressQuery>(b.body).seq);
    CHECK(q->need == std::get<ProgressQuery>(b.body).need);
    CHECK(q->step == std::get<ProgressQuery>(b.body).step);
  } else if (const auto* r = std::get_if<RelayFrame>(&a.body)) {
    CHECK(r->dest == std::get<RelayFrame>(b.body).dest);
    CHECK(r->inner == std::get<RelayFrame>(b.body).inner);
  } else {
    const auto& x = std::get<ProgressReply>(a.body);
    const auto& y = std::get<ProgressReply>(b.body);
    CHECK(x.seq == y.seq);
    CHECK(x.step == y.step);
    CHECK(x.training == y.training);
    CHECK(x.watched == y.watched);
  }
}

inline void CheckSame(const Frame& a, const Frame& b) {
  CHECK(a.sender == b.sender);
  CHECK(a.sent_ms == b.sent_ms);
  REQUIRE(a.body.index() == b.body.index());
  if (const auto* x = std::get_if<PushPullMsg>(&a.body)) {
    const auto& y = std::get<PushPullMsg>(b.body);
    CHECK(x->response == y.response);
    CHECK(x->state.join == y.state.join);
    CHECK(x->state.shuffle == y.state.shuffle);
    CHECK(x->state.from == y.state.from);
    REQUIRE(x->state.members.size() == y.state.members.size());
    for (size_t i = 0; i < x->state.members.size(); ++i) {
      CheckSame(x->state.members[i], y.state.members[i]);
    }
  } else if (const auto* x = std::get_if<KeyOpMsg>(&a.body)) {
    const auto& y = std::get<KeyOpMsg>(b.body);
    CHECK(x->op == y.op);
    CHECK(x->key == y.key);
    CHECK(x->seq == y.seq);
  } else if (const auto* x = std::get_if<KeyOpReplyMsg>(&a.body)) {
    const auto& y = std::get<KeyOpReplyMsg>(b.body);
    CHECK(x->seq == y.seq);
    CHECK(x->ok == y.ok);
    CHECK(x->error == y.error);
    CHECK(x->keys == y.keys);
    CHECK(x->primary == y.primary);
  } else if (const auto* x = std::get_if<ParamAckMsg>(&a.body)) {
    const auto& y = std::get<ParamAckMsg>(b.body);
    CHECK(x->round == y.round);
    CHECK(x->step == y.step);
    CHECK(x->need_full == y.need_full);
  } else if (const auto* x = std::get_if<StateRequestMsg>(&a.body)) {
    CHECK(x->step == std::get<StateRequestMsg>(b.body).step);
  } else {
    const auto& p = std::get<ParamChunk>(a.body);
    const auto& q = std::get<ParamChunk>(b.body);
    CHECK(p.round == q.round);
    CHECK(p.step == q.step);
    CHECK(p.chunk == q.chunk);
    CHECK(p.chunks == q.chunks);
    CHECK(p.total == q.total);
    CHECK(p.offset == q.offset);
    CHECK(p.data == q.data);
  }
}

}  // namespace meshtrain::wire::testing
