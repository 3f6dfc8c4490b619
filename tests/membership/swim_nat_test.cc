// Unit tests of the membership core's NAT traversal: reflexive addresses from acks,
// reachability, and members behind NAT routers. A tiny in-test wire emulates each router as the
// netbed does (tests/netbed/bed.py): a datagram from an inner node leaves with the router's
// address (cone: one public port per node, as Linux masquerade keeps the port; symmetric: one per
// destination), and a datagram to a router reaches the inner node only from an address the node
// sent to before (inbound admitted for established flows only). Push-pulls (TCP) to a node
// behind NAT fail. A datagram the core routes through a relay (OutPacket::via) goes to the relay,
// which judges it (Swim::OnRelayFrame) and sends it on over the same routers; the destination
// judges it again and handles it with no source address, as the daemon does. Virtual time in
// 1 ms steps, fixed seeds, no sleeps.
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "membership/lifeguard.h"
#include "membership/swim.h"
#include "tests/membership/nat_routers.h"

namespace meshtrain::membership {
namespace {

using testing::Nat;

class NatWire {
 public:
  struct Host : testing::NatHost {
    std::unique_ptr<Swim> swim;
    std::vector<Event> events;
    bool dead = false;                // stopped: not ticked, receives nothing
    bool lose_registrations = false;  // its relay registrations are lost on the way
  };

  Swim& Add(const std::string& name, Nat nat, bool nat_on = true,
            const std::function<void(Config&)>& tweak = nullptr) {
    auto h = std::make_unique<Host>();
    h->name = name;
    const size_t i = hosts_.size() + 1;
    h->Place(nat, i);
    Config c = Config::Local();
    c.name = name;
    c.addr = h->inner;
    c.nat = nat_on;
    c.adopt_reflexive = nat_on;
    if (tweak) tweak(c);
    h->swim = std::make_unique<Swim>(c, 1000 + i, now_);
    Swim& ref = *h->swim;
    hosts_.push_back(std::move(h));
    return ref;
  }
  Swim& Get(const std::string& name) { return *Find(name)->swim; }
  Host* Find(const std::string& name) {
    for (auto& h : hosts_) {
      if (h->name == name) return h.get();
    }
    return nullptr;
  }
  // The address `h` is seen at by `to` (its router's mapping for a NATed host).
  std::string SourceFor(Host& h, const std::string& to) { return h.SourceFor(to); }
  // The host a datagram to `addr` from `src` reaches, or null (no route, filtered).
  Host* Route(const std::string& addr, const std::string& src) {
    for (auto& h : hosts_) {
      if (!h->dead && h->Admits(addr, src)) return h.get();
    }
    return nullptr;
  }

  void Pump() {
    for (int rounds = 0; rounds < 100; ++rounds) {
      bool busy = false;
      for (auto& h : hosts_) {
        if (h->dead) continue;
        for (OutPacket& out : h->swim->TakePackets()) {
          busy = true;
          ++datagrams;
          if (!out.via.empty()) {
            Relayed(*h, out);
            continue;
          }
          if (h->lose_registrations &&
              std::holds_alternative<RelayRegisterMsg>(out.packet.primary)) {
            continue;
          }
          Host* to = Send(*h, out.to_addr);
          if (to != nullptr) to->swim->HandlePacket(SourceFor(*h, out.to_addr), out.packet, now_);
        }
        for (OutPushPull& pp : h->swim->TakePushPulls()) {
          busy = true;
          Host* to = nullptr;
          for (auto& t : hosts_) {
            if (t->nat == Nat::kNone && !t->dead && t->inner == pp.to_addr) to = t.get();
          }
          if (to == nullptr) {
            h->swim->PushPullFailed(pp.to_addr, now_);
            continue;
          }
          PushPull resp = to->swim->HandlePushPullRequest(pp.request, now_);
          h->swim->HandlePushPullResponse(resp, now_);
        }
        for (Event& e : h->swim->TakeEvents()) h->events.push_back(e);
      }
      if (!busy) return;
    }
  }

  // One datagram from `h` to `addr` through the routers: the host it reaches, or null.
  Host* Send(Host& h, const std::string& addr) {
    const std::string src = SourceFor(h, addr);
    if (h.nat != Nat::kNone) h.open.insert(addr);
    return Route(addr, src);
  }
  // A packet for a relayed member: to its relay in a frame, judged there, sent on, judged at
  // the destination (bytes: a fixed frame size, for the relay's counters and cap).
  static constexpr size_t kFrameBytes = 500;
  void Relayed(Host& h, const OutPacket& out) {
    const std::string src = SourceFor(h, out.via);
    Host* relay = Send(h, out.via);
    if (relay == nullptr) return;
    std::string to_addr;
    if (relay->swim->OnRelayFrame(h.name, src, out.dest, kFrameBytes, now_, &to_addr) !=
        RelayVerdict::kForward) {
      return;
    }
    ++relayed;
    const std::string relay_src = SourceFor(*relay, to_addr);
    Host* dest = Send(*relay, to_addr);
    if (dest == nullptr) return;
    if (dest->swim->OnRelayFrame(relay->name, relay_src, out.dest, kFrameBytes, now_, nullptr) ==
        RelayVerdict::kDeliver) {
      dest->swim->HandlePacket("", out.packet, now_);
    }
  }

  void RunUntil(TimeMs until) {
    for (; now_ <= until; ++now_) {
      for (auto& h : hosts_) {
        if (!h->dead && h->swim->NextDeadline() <= now_) h->swim->Tick(now_);
      }
      Pump();
    }
    now_ = until;
  }

  // Events of `kind` (about anyone) seen by anyone since the last ClearEvents.
  int Count(Event::Kind kind) const {
    int n = 0;
    for (const auto& h : hosts_) {
      for (const Event& e : h->events) n += e.kind == kind;
    }
    return n;
  }
  void ClearEvents() {
    for (auto& h : hosts_) h->events.clear();
  }

  TimeMs now() const { return now_; }
  uint64_t datagrams = 0;
  uint64_t relayed = 0;
  std::vector<std::unique_ptr<Host>> hosts_;

 private:
  TimeMs now_ = 0;
};

void ExpectAllAliveAt(NatWire& w, const std::map<std::string, std::string>& addrs) {
  for (auto& h : w.hosts_) {
    CAPTURE(h->name);
    for (const auto& [name, addr] : addrs) {
      CAPTURE(name);
      const Member* m = h->swim->Find(name);
      REQUIRE(m != nullptr);
      CHECK(m->status == Status::kAlive);
      CHECK(m->addr == addr);
    }
  }
}

TEST_CASE("nat: a node behind a cone NAT moves to its reflexive address and stays alive",
          "[membership][nat]") {
  NatWire w;
  w.Add("p1", Nat::kNone);
  w.Add("p2", Nat::kNone);
  Swim& n3 = w.Add("n3", Nat::kCone);
  Swim& n4 = w.Add("n4", Nat::kCone);
  for (const char* j : {"p2", "n3", "n4"}) w.Get(j).Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(15000);
  CHECK(n3.config().addr == "203.0.113.3:7950");
  CHECK(n3.configured_addr() == "192.168.3.2:7950");
  CHECK(n4.config().addr == "203.0.113.4:7950");
  CHECK(n3.reach() == Reach::kNat);
  CHECK(n4.reach() == Reach::kNat);
  CHECK(n3.stats().reflexive_moves == 1);
  // The seed got a push-pull, p2 pings from addresses it never sent to: both reachable.
  CHECK(w.Get("p1").reach() == Reach::kPublic);
  CHECK(w.Get("p2").reach() == Reach::kPublic);
  CHECK(w.Get("p1").config().addr == "10.0.0.1:7950");
  ExpectAllAliveAt(w, {{"p1", "10.0.0.1:7950"},
                       {"p2", "10.0.0.2:7950"},
                       {"n3", "203.0.113.3:7950"},
                       {"n4", "203.0.113.4:7950"}});
  for (auto& h : w.hosts_) {
    CHECK(h->swim->Find("n3")->meta.reach == Reach::kNat);
    CHECK(h->swim->Find("p1")->meta.reach == Reach::kPublic);
  }
  // The two NATed nodes punched towards each other when they learned the other's mapped
  // address (both routers now pass the other's datagrams); public members never punch.
  CHECK(n3.stats().punches > 0);
  CHECK(n4.stats().punches > 0);
  CHECK(w.Find("n3")->open.count("203.0.113.4:7950") == 1);
  CHECK(w.Find("n4")->open.count("203.0.113.3:7950") == 1);
  CHECK(w.Get("p1").stats().punches == 0);
  CHECK(w.Get("p2").stats().punches == 0);
  // From then on nobody is suspected: the two NATed nodes reach each other because each sends
  // to the other's mapped address (their probes punch the holes).
  w.ClearEvents();
  w.RunUntil(75000);
  CHECK(w.Count(Event::Kind::kSuspect) == 0);
  CHECK(w.Count(Event::Kind::kFailed) == 0);
  ExpectAllAliveAt(w, {{"n3", "203.0.113.3:7950"}, {"n4", "203.0.113.4:7950"}});
}

TEST_CASE("nat: a NATed node whose other peers are one public and one NATed member still moves",
          "[membership][nat]") {
  // n4 joins knowing p1 and n3 (at n3's inner address); n3's router drops n4's pings until n4
  // advertises an address n3 sends to, so p1's report alone has to do. p2 joins later.
  NatWire w;
  w.Add("p1", Nat::kNone);
  w.Add("p2", Nat::kNone);
  Swim& n3 = w.Add("n3", Nat::kCone);
  Swim& n4 = w.Add("n4", Nat::kCone);
  n3.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  n4.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(5000);
  w.Get("p2").Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(30000);
  CHECK(n4.config().addr == "203.0.113.4:7950");
  CHECK(n3.config().addr == "203.0.113.3:7950");
  ExpectAllAliveAt(w, {{"p1", "10.0.0.1:7950"},
                       {"p2", "10.0.0.2:7950"},
                       {"n3", "203.0.113.3:7950"},
                       {"n4", "203.0.113.4:7950"}});
  w.ClearEvents();
  w.RunUntil(60000);
  CHECK(w.Count(Event::Kind::kSuspect) == 0);
}

TEST_CASE("nat: without NAT traversal the NATed nodes flap", "[membership][nat]") {
  NatWire w;
  w.Add("p1", Nat::kNone, false);
  w.Add("p2", Nat::kNone, false);
  w.Add("n3", Nat::kCone, false);
  for (const char* j : {"p2", "n3"}) w.Get(j).Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(40000);
  CHECK(w.Get("n3").config().addr == "192.168.3.2:7950");
  CHECK(w.Get("n3").reach() == Reach::kUnknown);
  CHECK(w.Count(Event::Kind::kSuspect) > 0);
}

TEST_CASE("nat: behind a symmetric NAT peers disagree: the node says nat and does not move",
          "[membership][nat]") {
  NatWire w;
  w.Add("p1", Nat::kNone);
  w.Add("p2", Nat::kNone);
  Swim& n3 =
      w.Add("n3", Nat::kSymmetric, true, [](Config& c) { c.relay_mode = Config::RelayMode::kOff; });
  for (const char* j : {"p2", "n3"}) w.Get(j).Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(10000);
  CHECK(n3.reach() == Reach::kNat);
  CHECK(n3.config().addr == "192.168.3.2:7950");
  CHECK(n3.stats().reflexive_moves == 0);
}

// A node with two live peers, driven by hand: `a` probes whoever it picks; the test answers.
struct HandProbe {
  Swim a{[] {
           Config c = Config::Local();
           c.name = "a";
           c.addr = "10.0.0.1:7950";
           c.nat = true;
           c.adopt_reflexive = true;
           return c;
         }(),
         7, 0};
  TimeMs now = 0;
  HandProbe() {
    // `a` joins through b (its own connection: no evidence of reachability).
    a.Join({"10.0.0.2:7950"}, 0);
    REQUIRE(a.TakePushPulls().size() == 1);
    PushPull pp;
    pp.from = "b";
    pp.members = {{"b", "10.0.0.2:7950", 1, Status::kAlive, {}, 0},
                  {"c", "10.0.0.3:7950", 1, Status::kAlive, {}, 0}};
    a.HandlePushPullResponse(pp, 0);
    // Both answer the join's discovery pings as older agents do (no observed address): they
    // are reachable peers, but say nothing about where they see `a`.
    for (OutPacket& out : a.TakePackets()) {
      const auto* ping = std::get_if<PingMsg>(&out.packet.primary);
      if (ping == nullptr) continue;
      Packet ack;
      ack.from = ping->target;
      ack.from_addr = out.to_addr;
      ack.primary = AckMsg{ping->seq, std::string()};
      a.HandlePacket(out.to_addr, ack, 0);
    }
    a.TakePackets();
  }
  std::string AnswerNextProbe(const std::string& observed) {
    return AnswerNextProbeBy([&](const std::string&) { return observed; });
  }
  // Runs until `a` pings someone; answers with an ack that says `observed(target)`. Returns the
  // target.
  std::string AnswerNextProbeBy(const std::function<std::string(const std::string&)>& observed) {
    for (int i = 0; i < 100000; ++i, ++now) {
      if (a.NextDeadline() <= now) a.Tick(now);
      for (OutPacket& out : a.TakePackets()) {
        const auto* ping = std::get_if<PingMsg>(&out.packet.primary);
        if (ping == nullptr) continue;
        Packet ack;
        ack.from = ping->target;
        ack.from_addr = out.to_addr;
        ack.primary = AckMsg{ping->seq, observed(ping->target)};
        a.HandlePacket(out.to_addr, ack, now);
        return ping->target;
      }
    }
    return "";
  }
};

TEST_CASE("nat: one peer alone cannot move a node; two that agree do", "[membership][nat]") {
  HandProbe h;
  const std::string x = "198.51.100.9:4000";
  const std::string first = h.AnswerNextProbe(x);
  CHECK(h.a.config().addr == "10.0.0.1:7950");
  CHECK(h.a.reach() == Reach::kUnknown);
  // The same peer repeating itself is still one peer; the other (an older peer) says nothing.
  for (int i = 0; i < 6; ++i) {
    h.AnswerNextProbeBy([&](const std::string& t) { return t == first ? x : std::string(); });
  }
  CHECK(h.a.config().addr == "10.0.0.1:7950");
  CHECK(h.a.reach() == Reach::kUnknown);
  for (int i = 0; i < 10 && h.AnswerNextProbe(x) == first; ++i) {
  }
  CHECK(h.a.config().addr == "198.51.100.9:4000");
  CHECK(h.a.reach() == Reach::kNat);
  CHECK(h.a.configured_addr() == "10.0.0.1:7950");
  const Member* self = h.a.Find("a");
  REQUIRE(self != nullptr);
  CHECK(self->addr == "198.51.100.9:4000");
  CHECK(self->incarnation >= 1);
}

TEST_CASE("nat: a ping from an address never sent to proves the node reachable",
          "[membership][nat]") {
  HandProbe h;
  // Answering an address we sent to proves nothing.
  h.AnswerNextProbe("10.0.0.1:7950");
  CHECK(h.a.reach() == Reach::kUnknown);
  Packet ping;
  ping.from = "c";
  ping.from_addr = "10.0.0.3:7950";
  ping.primary = PingMsg{5, "a"};
  h.a.HandlePacket("10.0.0.33:7950", ping, h.now);  // a source `a` never sent to
  CHECK(h.a.reach() == Reach::kPublic);
  auto out = h.a.TakePackets();
  bool acked = false;
  for (const OutPacket& o : out) {
    if (const auto* ack = std::get_if<AckMsg>(&o.packet.primary)) {
      acked = true;
      CHECK(o.to_addr == "10.0.0.33:7950");  // answered where it came from
      CHECK(ack->observed == "10.0.0.33:7950");
    }
  }
  CHECK(acked);
  // Public is sticky: later agreement on another address does not make it nat again.
  h.AnswerNextProbe("198.51.100.9:4000");
  h.AnswerNextProbe("198.51.100.9:4000");
  h.AnswerNextProbe("198.51.100.9:4000");
  CHECK(h.a.reach() == Reach::kPublic);
}

TEST_CASE("nat: a member's move is accepted only as a newer incarnation that says nat",
          "[membership][nat]") {
  HandProbe h;
  auto alive = [&](uint32_t inc, const std::string& addr, Reach r) {
    Packet p;
    p.from = "c";
    p.from_addr = "10.0.0.3:7950";
    Meta m;
    m.reach = r;
    p.updates.push_back(AliveMsg{"b", addr, inc, m});
    h.a.HandlePacket("10.0.0.3:7950", p, h.now);
  };
  alive(2, "198.51.100.2:7950", Reach::kPublic);  // a name conflict, not a move
  CHECK(h.a.Find("b")->addr == "10.0.0.2:7950");
  alive(1, "198.51.100.2:7950", Reach::kNat);  // not newer
  CHECK(h.a.Find("b")->addr == "10.0.0.2:7950");
  alive(2, "198.51.100.2:7950", Reach::kNat);
  CHECK(h.a.Find("b")->addr == "198.51.100.2:7950");
  CHECK(h.a.Find("b")->status == Status::kAlive);
}

TEST_CASE("nat: a joining node behind NAT moves within a round trip, before peers probe it",
          "[membership][nat]") {
  // Its join pings a few members not behind NAT (Discover); their acks carry where they see
  // it. Without that, it would move only after probing two of them in turn (probe periods),
  // while they probe its unreachable inner address and suspect it.
  NatWire w;
  w.Add("p1", Nat::kNone);
  w.Add("p2", Nat::kNone);
  w.Add("p3", Nat::kNone);
  w.Get("p2").Join({"10.0.0.1:7950"}, w.now());
  w.Get("p3").Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(3000);
  w.ClearEvents();
  Swim& n4 = w.Add("n4", Nat::kCone);
  n4.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();  // the join's push-pull, its pings and their acks, all at once on this wire
  CHECK(n4.config().addr == "203.0.113.4:7950");
  CHECK(n4.reach() == Reach::kNat);
  w.RunUntil(w.now() + 30000);
  CHECK(w.Count(Event::Kind::kSuspect) == 0);
  ExpectAllAliveAt(w, {{"n4", "203.0.113.4:7950"}});
}

// ---- Relays ----------------------------------------------------------------------

// Two public members and two behind symmetric NAT, formed (the NATed ones registered).
struct RelayMesh {
  NatWire w;
  Swim* n3 = nullptr;
  Swim* n4 = nullptr;
  // `all_tweak` first, then p1's or n4's.
  explicit RelayMesh(const std::function<void(Config&)>& p1_tweak = nullptr,
                     const std::function<void(Config&)>& n4_tweak = nullptr,
                     const std::function<void(Config&)>& all_tweak = nullptr) {
    auto both = [&](const std::function<void(Config&)>& one) {
      return [&all_tweak, &one](Config& c) {
        if (all_tweak) all_tweak(c);
        if (one) one(c);
      };
    };
    w.Add("p1", Nat::kNone, true, both(p1_tweak));
    w.Add("p2", Nat::kNone, true, both(nullptr));
    n3 = &w.Add("n3", Nat::kSymmetric, true, both(nullptr));
    n4 = &w.Add("n4", Nat::kSymmetric, true, both(n4_tweak));
    for (const char* j : {"p2", "n3", "n4"}) w.Get(j).Join({"10.0.0.1:7950"}, w.now());
    w.Pump();
    w.RunUntil(15000);
  }
  // Every live host sees `name` alive at its advertised address, through its relay.
  void ExpectRelayedEverywhere(const std::string& name) {
    const Swim& n = w.Get(name);
    for (auto& h : w.hosts_) {
      if (h->dead) continue;
      CAPTURE(h->name, name);
      const Member* m = h->swim->Find(name);
      REQUIRE(m != nullptr);
      CHECK(m->status == Status::kAlive);
      CHECK(m->addr == n.config().addr);
      CHECK(m->meta.relay == n.relay());
      CHECK(m->meta.reach == Reach::kNat);
    }
  }
  bool SeenEverywhereVia(const std::string& name, const std::string& relay) {
    for (auto& h : w.hosts_) {
      if (h->dead || h->name == name) continue;
      const Member* m = h->swim->Find(name);
      if (m == nullptr || m->meta.relay != relay || m->status != Status::kAlive) return false;
    }
    return true;
  }
};

// Suspicions (or, with `failed_only`, failures) of `name` in anyone's events.
int SuspectEventsAbout(const NatWire& w, const std::string& name, bool failed_only = false) {
  int n = 0;
  for (const auto& h : w.hosts_) {
    for (const Event& e : h->events) {
      n += e.member.name == name &&
           (e.kind == Event::Kind::kFailed || (!failed_only && e.kind == Event::Kind::kSuspect));
    }
  }
  return n;
}

// Events of `kind` about `name` that `host` reported since the last ClearEvents.
int EventsAbout(const NatWire& w, const std::string& host, const std::string& name,
                Event::Kind kind) {
  int n = 0;
  for (const auto& h : w.hosts_) {
    if (h->name != host) continue;
    for (const Event& e : h->events) n += e.member.name == name && e.kind == kind;
  }
  return n;
}

TEST_CASE("nat: hosts behind NAT that start together are not suspected while they find out where",
          "[membership][nat]") {
  // Everyone starts within a second: n3 and n4 (cone) and n5 (symmetric) join the seed p1 at
  // one instant, p2 a moment later. n4 and n5 learn n3 at its inner address (unreachable) and
  // not p2, so the first acks do not make a quorum; meanwhile p1 and n3 probe their inner
  // addresses, which no ack can come back from. Those probes must not make anyone suspect
  // them (docs/design.md "NAT and relays", unconfirmed addresses).
  for (const TimeMs late : {0, 300, 700, 1000}) {
    CAPTURE(late);
    NatWire w;
    w.Add("p1", Nat::kNone);
    Swim& p2 = w.Add("p2", Nat::kNone);
    Swim& n3 = w.Add("n3", Nat::kCone);
    Swim& n4 = w.Add("n4", Nat::kCone);
    Swim& n5 = w.Add("n5", Nat::kSymmetric);
    for (Swim* j : {&n3, &n4, &n5}) j->Join({"10.0.0.1:7950"}, w.now());
    w.Pump();
    w.RunUntil(late);
    p2.Join({"10.0.0.1:7950"}, w.now());
    w.Pump();
    w.RunUntil(60000);
    CHECK(w.Count(Event::Kind::kSuspect) == 0);
    CHECK(w.Count(Event::Kind::kFailed) == 0);
    CHECK(n3.config().addr == "203.0.113.3:7950");
    CHECK(n4.config().addr == "203.0.113.4:7950");
    CHECK(n5.relay_registered());
    ExpectAllAliveAt(w, {{"p1", "10.0.0.1:7950"},
                         {"p2", "10.0.0.2:7950"},
                         {"n3", "203.0.113.3:7950"},
                         {"n4", "203.0.113.4:7950"},
                         {"n5", n5.config().addr}});
  }
}

TEST_CASE("nat: a member that dies before its address is confirmed is still found failed",
          "[membership][nat]") {
  // n4's join reached the seed and then n4 died: nobody ever hears from it at the address it
  // announced. Its peers hold their probes' verdict only for the grace (5 probe intervals of
  // learning that address), then suspect it and declare it failed as usual. A member heard
  // from at its address (p3) is suspected at its first failed probe, with no grace.
  NatWire w;
  w.Add("p1", Nat::kNone);
  w.Add("p2", Nat::kNone);
  w.Add("p3", Nat::kNone);
  w.Get("p2").Join({"10.0.0.1:7950"}, w.now());
  w.Get("p3").Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(3000);
  w.ClearEvents();
  Swim& n4 = w.Add("n4", Nat::kCone);
  n4.Join({"10.0.0.1:7950"}, w.now());
  std::vector<OutPushPull> join = n4.TakePushPulls();
  REQUIRE(join.size() == 1);
  w.Find("n4")->dead = true;
  w.Get("p1").HandlePushPullRequest(join[0].request, w.now());
  const TimeMs joined = w.now();
  const TimeMs grace = Config::Local().unconfirmed_grace_intervals * 1000;
  w.RunUntil(joined + grace - 1);
  CHECK(SuspectEventsAbout(w, "n4") == 0);
  uint64_t holds = 0;
  for (const char* p : {"p1", "p2", "p3"}) holds += w.Get(p).stats().unconfirmed_holds;
  CHECK(holds > 0);  // they did probe it, and held
  // Then as without the grace: every probe round reaches it (3 peers each, 1 s apart) and its
  // suspicion times out (at most 6 x the minimum timeout of the local profile).
  w.RunUntil(joined + grace + 4000);
  CHECK(SuspectEventsAbout(w, "n4") > 0);
  w.RunUntil(joined + grace + 30000);
  CHECK(EventsAbout(w, "p1", "n4", Event::Kind::kFailed) == 1);
  for (const char* p : {"p1", "p2", "p3"}) {
    CAPTURE(p);
    const Member* m = w.Get(p).Find("n4");
    CHECK((m == nullptr || !(m->status == Status::kAlive || m->status == Status::kSuspect)));
  }
  w.ClearEvents();
  w.Find("p3")->dead = true;
  const TimeMs died = w.now();
  w.RunUntil(died + 4000);
  CHECK(SuspectEventsAbout(w, "p3") > 0);
}

TEST_CASE("relay: members behind symmetric NAT register with a public relay and stay alive",
          "[membership][nat][relay]") {
  RelayMesh r;
  NatWire& w = r.w;
  for (Swim* n : {r.n3, r.n4}) {
    CAPTURE(n->config().name);
    CHECK(n->reach() == Reach::kNat);
    CHECK((n->relay() == "p1" || n->relay() == "p2"));
    CHECK(n->relay_registered());
    CHECK(n->stats().reflexive_moves == 0);
    // It advertises where its relay sees it: its router's mapping towards the relay.
    const std::string& router = w.Find(n->config().name)->router;
    CHECK(n->config().addr.rfind(router + ":", 0) == 0);
    CHECK(w.Find(n->config().name)->ports.at(w.Get(n->relay()).config().addr) == n->config().addr);
    r.ExpectRelayedEverywhere(n->config().name);
  }
  CHECK(w.Get("p1").relay().empty());
  CHECK(w.Get("p1").Find("p2")->meta.relay.empty());
  CHECK(w.Get("p1").Find("p2")->meta.serves_relay);
  // From then on nobody is suspected; datagrams for n3 and n4 go through their relays.
  w.ClearEvents();
  const uint64_t relayed = w.relayed;
  w.RunUntil(75000);
  CHECK(w.Count(Event::Kind::kSuspect) == 0);
  CHECK(w.Count(Event::Kind::kFailed) == 0);
  // (p1's and p2's datagrams to the member whose relay they are not take its direct return
  // path instead: see the "direct:" tests.)
  CHECK(w.relayed > relayed + 50);
  uint64_t frames = 0, refused = 0;
  for (const char* p : {"p1", "p2"}) {
    frames += w.Get(p).stats().relay_frames;
    refused += w.Get(p).stats().relay_refused();
  }
  CHECK(frames == w.relayed);
  CHECK(refused == 0);
  CHECK(r.n3->stats().relay_delivered > 0);
  // A relayed node relays for nobody (no loops): it refuses a frame and a registration.
  std::string to;
  CHECK(r.n3->OnRelayFrame("p1", "", "n4", 100, w.now(), &to) == RelayVerdict::kLoop);
  Packet reg;
  reg.from = "n4";
  reg.from_addr = r.n4->config().addr;
  reg.primary = RelayRegisterMsg{77};
  const uint64_t loops = r.n3->stats().relay_refused_loop;
  r.n3->HandlePacket("203.0.113.4:45000", reg, w.now());
  CHECK(r.n3->stats().relay_refused_loop == loops + 1);
  bool nacked = false;
  for (const OutPacket& o : r.n3->TakePackets()) {
    if (const auto* n = std::get_if<NackMsg>(&o.packet.primary)) nacked |= n->seq == 77;
  }
  CHECK(nacked);
}

TEST_CASE(
    "relay: a node behind symmetric NAT that moved while it had one peer takes a relay "
    "once a second peer sees it elsewhere",
    "[membership][nat][relay]") {
  // With only p1 to ask, n3 moves to where p1 sees it (a quorum of one); p2 joins later and
  // sees it at another port: the NAT is symmetric after all.
  NatWire w;
  w.Add("p1", Nat::kNone);
  Swim& n3 = w.Add("n3", Nat::kSymmetric);
  n3.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(3000);
  CHECK(n3.stats().reflexive_moves == 1);
  CHECK(n3.relay().empty());
  Swim& p2 = w.Add("p2", Nat::kNone);
  p2.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(20000);
  CHECK(n3.relay_registered());
  CHECK(n3.Find("n3")->meta.relay == n3.relay());
  CHECK(p2.Find("n3")->meta.relay == n3.relay());
  CHECK(p2.Find("n3")->addr == n3.config().addr);
  w.ClearEvents();
  w.RunUntil(50000);
  CHECK(w.Count(Event::Kind::kSuspect) == 0);
}

TEST_CASE("relay: a node joining behind symmetric NAT takes a relay within a round trip",
          "[membership][nat][relay]") {
  // Its join's discovery pings go to two public members, which see it at different ports.
  NatWire w;
  w.Add("p1", Nat::kNone);
  w.Add("p2", Nat::kNone);
  w.Get("p2").Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(5000);
  Swim& n3 = w.Add("n3", Nat::kSymmetric);
  n3.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();  // the join, the discovery pings, their acks, the registration and its answer
  CHECK(n3.reach() == Reach::kNat);
  CHECK(n3.relay_registered());
  w.ClearEvents();
  w.RunUntil(30000);
  CHECK(w.Count(Event::Kind::kSuspect) == 0);
}

TEST_CASE("relay: a node that registers pulls the state it missed while nobody reached it",
          "[membership][nat][relay]") {
  // Until its relay answers, a node behind symmetric NAT advertises its inner address, where
  // gossip sent to it is lost (netbed test_nat once saw a public host's reach announced in that
  // window, and the relayed host listed it as "unknown" for 45 s). Here n3's registrations are
  // lost for a while, and p2's news spreads meanwhile. With periodic push-pulls off, only the
  // push-pull that follows the registration brings the news to n3.
  NatWire w;
  auto no_periodic = [](Config& c) { c.push_pull_interval = 0; };
  w.Add("p1", Nat::kNone, true, no_periodic);
  Swim& p2 = w.Add("p2", Nat::kNone, true, no_periodic);
  p2.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(3000);
  Swim& n3 = w.Add("n3", Nat::kSymmetric, true, no_periodic);
  w.Find("n3")->lose_registrations = true;
  n3.Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  REQUIRE(n3.reach() == Reach::kNat);
  REQUIRE_FALSE(n3.relay_registered());
  Meta news = p2.Find("p2")->meta;
  news.tags = {{"zone", "b"}};
  p2.SetMeta(news, w.now());
  for (int i = 0; i < 5000 && p2.PendingUpdates() > 0; ++i) w.RunUntil(w.now() + 1);
  REQUIRE(p2.PendingUpdates() == 0);  // its news went out as often as it goes
  REQUIRE(w.Get("p1").Find("p2")->meta.tags == news.tags);
  REQUIRE(n3.Find("p2")->meta.tags.empty());  // and never reached n3
  REQUIRE_FALSE(n3.relay_registered());
  w.Find("n3")->lose_registrations = false;
  const uint64_t pushpulls = n3.stats().pushpulls;
  for (int i = 0; i < 10000 && !n3.relay_registered(); ++i) w.RunUntil(w.now() + 1);
  REQUIRE(n3.relay_registered());
  CHECK(n3.Find("p2")->meta.tags == news.tags);
  CHECK(n3.stats().pushpulls == pushpulls + 1);  // the one that came with the registration
}

TEST_CASE("relay: a relayed node and one behind a cone NAT reach each other through the relay",
          "[membership][nat][relay]") {
  // n3 is behind a cone NAT: its router admits only addresses n3 sent to, and n4's symmetric
  // NAT has a new port for each destination, so n4 cannot reach n3 directly. n4 sends to n3
  // through its own relay (n3 sends to n4 through that relay: its return path is open).
  NatWire w;
  w.Add("p1", Nat::kNone);
  w.Add("p2", Nat::kNone);
  Swim& n3 = w.Add("n3", Nat::kCone);
  Swim& n4 = w.Add("n4", Nat::kSymmetric);
  for (const char* j : {"p2", "n3", "n4"}) w.Get(j).Join({"10.0.0.1:7950"}, w.now());
  w.Pump();
  w.RunUntil(15000);
  REQUIRE(n4.relay_registered());
  CHECK(n3.config().addr == "203.0.113.3:7950");
  auto route = n4.Route("203.0.113.3:7950");
  REQUIRE(route.has_value());
  CHECK(route->via == w.Get(n4.relay()).config().addr);
  CHECK(route->dest == "n3");
  CHECK_FALSE(w.Get("p1").Route("203.0.113.3:7950").has_value());  // public: straight there
  w.ClearEvents();
  const uint64_t indirect = n3.stats().indirect_probes + n4.stats().indirect_probes;
  w.RunUntil(60000);
  CHECK(w.Count(Event::Kind::kSuspect) == 0);
  // Their probes of each other succeed directly (through the relay): no ping-reqs needed.
  CHECK(n3.stats().indirect_probes + n4.stats().indirect_probes == indirect);
}

TEST_CASE("relay: without relays a node behind symmetric NAT is suspected",
          "[membership][nat][relay]") {
  // The same mesh with --relay off on n4: nobody reaches it at its inner address.
  RelayMesh r(nullptr, [](Config& c) { c.relay_mode = Config::RelayMode::kOff; });
  r.w.ClearEvents();
  r.w.RunUntil(45000);
  CHECK(r.n4->relay().empty());
  CHECK(SuspectEventsAbout(r.w, "n4") > 0);
  CHECK(SuspectEventsAbout(r.w, "n3") == 0);
}

TEST_CASE("relay: the choice skips members that do not serve; --relay NAME picks that one",
          "[membership][nat][relay]") {
  RelayMesh r([](Config& c) { c.serve_relay = false; },
              [](Config& c) {
                c.relay_mode = Config::RelayMode::kNamed;
                c.relay_name = "p2";
              });
  CHECK(r.n3->relay() == "p2");
  CHECK(r.n4->relay() == "p2");
  CHECK(r.w.Get("p1").Find("p1")->meta.serves_relay == false);
  CHECK(r.w.Get("p2").relay_clients() == 2);
  CHECK(r.w.Get("p1").relay_clients() == 0);
  r.ExpectRelayedEverywhere("n3");
}

TEST_CASE(
    "relay: when the relay dies the node fails over to another within the suspicion "
    "timeout",
    "[membership][nat][relay]") {
  RelayMesh r;
  NatWire& w = r.w;
  const std::string first = r.n3->relay();
  const std::string other = first == "p1" ? "p2" : "p1";
  const uint32_t inc = r.n3->Find("n3")->incarnation;
  w.ClearEvents();
  w.Find(first)->dead = true;
  const TimeMs killed = w.now();
  TimeMs moved = -1;
  for (TimeMs t = killed; t < killed + 30000 && moved < 0; t += 10) {
    w.RunUntil(t);
    if (r.n3->relay() == other && r.n3->relay_registered() && r.SeenEverywhereVia("n3", other)) {
      moved = w.now();
    }
  }
  REQUIRE(moved >= 0);
  const Config cfg = Config::Local();
  const TimeMs suspicion = SuspicionMinTimeout(cfg.suspicion_mult, 4, cfg.probe_interval);
  CAPTURE(moved - killed, suspicion);
  // Re-advertised (a new incarnation) through the other relay, everywhere, within the minimum
  // suspicion timeout.
  CHECK(moved - killed <= suspicion);
  CHECK(r.n3->Find("n3")->incarnation > inc);
  CHECK(r.n3->stats().relay_failovers >= 1);
  if (r.n4->relay() == first) CHECK(r.n4->stats().relay_failovers >= 1);
  w.RunUntil(moved + 30000);
  CHECK(r.n4->relay() == other);
  // The dead relay was declared failed; no live member was. (Peers whose probes of n3 or n4
  // went to the dead relay before the failover may have suspected them; the new incarnation
  // refuted that.)
  CHECK(SuspectEventsAbout(w, first, true) > 0);
  for (const char* n : {"n3", "n4", other.c_str()}) {
    CAPTURE(n);
    CHECK(SuspectEventsAbout(w, n, true) == 0);
    CHECK(w.Get(first == "p1" ? "p2" : "p1").Find(n)->status == Status::kAlive);
  }
  CHECK(SuspectEventsAbout(w, other) == 0);
  r.ExpectRelayedEverywhere("n3");
  r.ExpectRelayedEverywhere("n4");
}

// A public relay driven by hand, with members m1 and m2.
struct HandRelay {
  Swim r;
  explicit HandRelay(const std::function<void(Config&)>& tweak = nullptr)
      : r(
            [&] {
              Config c = Config::Local();
              c.name = "r";
              c.addr = "10.0.0.1:7950";
              c.nat = true;
              c.adopt_reflexive = true;
              if (tweak) tweak(c);
              return c;
            }(),
            7, 0) {
    r.Join({"10.0.0.2:7950"}, 0);
    r.TakePushPulls();
    PushPull pp;
    pp.from = "m1";
    pp.members = {{"m1", "10.0.0.2:7950", 1, Status::kAlive, {}, 0},
                  {"m2", "192.168.3.2:7950", 1, Status::kAlive, {}, 0}};
    r.HandlePushPullResponse(pp, 0);
    r.TakePackets();
  }
  // A registration from `name` arriving from `src`; the answer's primary to `src`, if any.
  Primary Register(const std::string& name, const std::string& src, uint32_t seq, TimeMs now) {
    Packet reg;
    reg.from = name;
    reg.from_addr = "192.168.3.2:7950";
    reg.primary = RelayRegisterMsg{seq};
    r.HandlePacket(src, reg, now);
    Primary answer;
    for (OutPacket& o : r.TakePackets()) {
      if (o.to_addr == src && !std::holds_alternative<std::monostate>(o.packet.primary)) {
        answer = o.packet.primary;
      }
    }
    return answer;
  }
};

TEST_CASE("relay: a relay serves registered members only and counts every refusal",
          "[membership][nat][relay]") {
  HandRelay h([](Config& c) { c.relay_rate_bytes_per_s = 1000; });
  Swim& r = h.r;
  std::string to;
  // A stranger's registration: counted, not answered.
  CHECK(std::holds_alternative<std::monostate>(h.Register("x", "198.51.100.7:40001", 9, 10)));
  CHECK(r.stats().relay_refused_not_member == 1);
  CHECK(r.relay_clients() == 0);
  // Nobody registered: a frame for m2 is refused; so is one from a stranger.
  CHECK(r.OnRelayFrame("m1", "", "m2", 100, 20, &to) == RelayVerdict::kNotRegistered);
  CHECK(r.OnRelayFrame("x", "", "m2", 100, 20, &to) == RelayVerdict::kNotMember);
  // m2 registers from its router's mapping: the ack says where the relay sees it.
  const Primary ack = h.Register("m2", "203.0.113.3:40002", 10, 30);
  REQUIRE(std::holds_alternative<AckMsg>(ack));
  CHECK(std::get<AckMsg>(ack).seq == 10);
  CHECK(std::get<AckMsg>(ack).observed == "203.0.113.3:40002");
  CHECK(r.relay_clients() == 1);
  CHECK(r.stats().relay_registrations == 1);
  CHECK(r.OnRelayFrame("m1", "", "m2", 400, 40, &to) == RelayVerdict::kForward);
  CHECK(to == "203.0.113.3:40002");
  CHECK(r.OnRelayFrame("x", "", "m2", 100, 40, &to) == RelayVerdict::kNotMember);
  CHECK(r.OnRelayFrame("m1", "", "m9", 100, 40, &to) == RelayVerdict::kNotRegistered);
  // The cap (1000 B/s, a second's burst): 400 + 400 pass, the third 400 does not, a second
  // later it does.
  CHECK(r.OnRelayFrame("m1", "", "m2", 400, 40, &to) == RelayVerdict::kForward);
  CHECK(r.OnRelayFrame("m1", "", "m2", 400, 40, &to) == RelayVerdict::kOverRate);
  CHECK(r.OnRelayFrame("m1", "", "m2", 400, 1040, &to) == RelayVerdict::kForward);
  // A frame for the relay itself from a member it did not register with: refused (the node
  // accepts frames from its own relay only).
  CHECK(r.OnRelayFrame("m1", "", "r", 100, 1040, &to) == RelayVerdict::kLoop);
  const Stats& s = r.stats();
  CHECK(s.relay_frames == 3);
  CHECK(s.relay_bytes == 1200);
  CHECK(s.relay_refused_not_member == 3);
  CHECK(s.relay_refused_not_registered == 2);
  CHECK(s.relay_refused_over_rate == 1);
  CHECK(s.relay_refused_loop == 1);
  CHECK(s.relay_refused() == 7);
  // A member that sends frames through the relay can be answered through it: its return path
  // is where its frames come from (a cone NAT admits the relay there), for relay_ttl.
  CHECK(r.OnRelayFrame("m1", "10.0.0.2:7950", "m2", 10, 1040, &to) == RelayVerdict::kForward);
  CHECK(r.OnRelayFrame("m2", "203.0.113.3:40002", "m1", 10, 1040, &to) == RelayVerdict::kForward);
  CHECK(to == "10.0.0.2:7950");
  CHECK(r.OnRelayFrame("m2", "203.0.113.3:40002", "m1", 10, 1040 + Config::Local().relay_ttl + 1,
                       &to) == RelayVerdict::kNotRegistered);
  // Without renewal the registration lapses.
  const TimeMs ttl = Config::Local().relay_ttl;
  CHECK(r.OnRelayFrame("m1", "", "m2", 10, 1040 + ttl + 2, &to) == RelayVerdict::kNotRegistered);
}

TEST_CASE("relay: a node with --serve-relay off refuses registrations and frames",
          "[membership][nat][relay]") {
  HandRelay h([](Config& c) { c.serve_relay = false; });
  CHECK(h.r.Find("r")->meta.serves_relay == false);
  const Primary nack = h.Register("m2", "203.0.113.3:40002", 11, 30);
  REQUIRE(std::holds_alternative<NackMsg>(nack));
  CHECK(std::get<NackMsg>(nack).seq == 11);
  std::string to;
  CHECK(h.r.OnRelayFrame("m1", "", "m2", 100, 40, &to) == RelayVerdict::kNotServing);
  CHECK(h.r.stats().relay_refused_not_serving == 2);
  CHECK(h.r.relay_clients() == 0);
}

TEST_CASE("relay: datagrams for a relayed member are routed through its relay, smaller",
          "[membership][nat][relay]") {
  HandRelay h;
  Swim& r = h.r;
  // m2 advertises p9 as its relay; a new member p9 is public.
  Packet p;
  p.from = "m1";
  p.from_addr = "10.0.0.2:7950";
  Meta relayed;
  relayed.reach = Reach::kNat;
  relayed.relay = "p9";
  Meta pub;
  pub.reach = Reach::kPublic;
  pub.serves_relay = true;
  p.updates.push_back(AliveMsg{"p9", "10.0.0.9:7950", 1, pub});
  p.updates.push_back(AliveMsg{"m2", "203.0.113.3:41000", 2, relayed});
  r.HandlePacket("10.0.0.2:7950", p, 50);
  REQUIRE(r.Find("m2")->addr == "203.0.113.3:41000");
  auto route = r.Route("203.0.113.3:41000");
  REQUIRE(route.has_value());
  CHECK(route->via == "10.0.0.9:7950");
  CHECK(route->dest == "m2");
  CHECK_FALSE(r.Route("10.0.0.2:7950").has_value());
  CHECK_FALSE(r.Route("192.168.3.2:7950").has_value());
  // Every packet the core sends m2 goes through p9, within the budget less the frame's share.
  bool seen = false;
  for (TimeMs t = 50; t < 20000 && !seen; ++t) {
    if (r.NextDeadline() <= t) r.Tick(t);
    for (const OutPacket& o : r.TakePackets()) {
      if (o.to_addr != "203.0.113.3:41000") continue;
      seen = true;
      CHECK(o.via == "10.0.0.9:7950");
      CHECK(o.dest == "m2");
      size_t bytes = EstimatePacketOverhead(o.packet);
      for (const Update& u : o.packet.updates) bytes += EstimateSize(u);
      const Config& c = r.config();
      CHECK(bytes <= c.max_packet_bytes - c.packet_overhead_bytes - c.relay_overhead_bytes);
    }
  }
  CHECK(seen);
  // Once p9 is dead there is no route (a direct attempt is all that is left).
  Packet d;
  d.from = "m1";
  d.from_addr = "10.0.0.2:7950";
  d.updates.push_back(DeadMsg{"p9", 1, "m1"});
  r.HandlePacket("10.0.0.2:7950", d, 20000);
  CHECK_FALSE(r.Route("203.0.113.3:41000").has_value());
}

// The relay mesh's view at p of n: the route of a datagram to n's advertised address.
std::optional<RelayRoute> RouteAt(NatWire& w, const std::string& at, const std::string& n) {
  return w.Get(at).Route(w.Get(n).config().addr);
}

bool DirectIn(const Swim& s, const std::string& name) {
  for (const Member& m : s.Members()) {
    if (m.name == name) return m.direct;
  }
  return false;
}

// The relay mesh run for 60 s once formed: relay frames, datagrams p1 and p2 sent on direct
// paths, paths dropped, suspicions.
struct DirectRun {
  uint64_t frames = 0, direct = 0, dropped = 0;
  int suspects = 0;
};
DirectRun RunRelayMesh(RelayMesh* r) {
  NatWire& w = r->w;
  w.ClearEvents();
  const uint64_t relayed = w.relayed;
  DirectRun out;
  uint64_t direct_before = 0;
  for (const char* p : {"p1", "p2"}) direct_before += w.Get(p).stats().direct_packets;
  w.RunUntil(w.now() + 60000);
  out.suspects = w.Count(Event::Kind::kSuspect);
  for (const char* p : {"p1", "p2"}) {
    out.direct += w.Get(p).stats().direct_packets;
    out.dropped += w.Get(p).stats().direct_dropped;
  }
  out.direct -= direct_before;
  out.frames = w.relayed - relayed;
  return out;
}

TEST_CASE("direct: a public member sends to a relayed one where its own datagrams come from",
          "[membership][nat][relay][direct]") {
  // n3 and n4 behind symmetric NATs send straight to p1 and p2 (public); their NATs let p1
  // and p2 answer at those sources, so the public member that is not n's relay sends to n
  // there, not through the relay.
  RelayMesh r;
  NatWire& w = r.w;
  for (Swim* n : {r.n3, r.n4}) {
    const std::string name = n->config().name;
    const std::string other = n->relay() == "p1" ? "p2" : "p1";
    CAPTURE(name, other);
    auto route = RouteAt(w, other, name);
    REQUIRE(route.has_value());
    CHECK(route->dest.empty());
    // Its NAT's mapping towards `other` (not the advertised one, towards its relay).
    CHECK(route->via == w.Find(name)->ports.at(w.Get(other).config().addr));
    CHECK(route->via != n->config().addr);
    CHECK(DirectIn(w.Get(other), name));
    // Its relay reaches it at its registration's address anyway (no route, not "direct").
    CHECK_FALSE(RouteAt(w, n->relay(), name).has_value());
    CHECK_FALSE(DirectIn(w.Get(n->relay()), name));
    // The other relayed member cannot: its datagrams to n go through n's relay.
    const std::string peer = name == "n3" ? "n4" : "n3";
    auto via = RouteAt(w, peer, name);
    REQUIRE(via.has_value());
    CHECK(via->dest == name);
    CHECK_FALSE(DirectIn(w.Get(peer), name));
  }
  const DirectRun on = RunRelayMesh(&r);
  // The comparison: the same mesh (same seeds) with direct paths off (direct_ttl 0) sends p1's
  // and p2's datagrams for n3 and n4 through the relays.
  RelayMesh off(nullptr, nullptr, [](Config& c) { c.direct_ttl = 0; });
  for (const char* n : {"n3", "n4"}) {
    const std::string other = off.w.Get(n).relay() == "p1" ? "p2" : "p1";
    CHECK(RouteAt(off.w, other, n)->dest == n);
    CHECK_FALSE(DirectIn(off.w.Get(other), n));
  }
  const DirectRun without = RunRelayMesh(&off);
  CAPTURE(on.frames, on.direct, without.frames, without.direct);
  CHECK(on.suspects == 0);
  CHECK(without.suspects == 0);
  CHECK(on.dropped == 0);  // nothing flaps: no probe on a direct path went unanswered
  CHECK(without.direct == 0);
  CHECK(on.direct > 20);
  // What went on direct paths no longer went through a relay (n3 <-> n4 still does).
  CHECK(on.frames + on.direct / 2 <= without.frames);
}

TEST_CASE(
    "direct: the path lapses after direct_ttl; only a relayed member's own datagrams "
    "from its advertised IP make one",
    "[membership][nat][relay][direct]") {
  HandRelay h;
  Swim& r = h.r;  // public, not m2's relay
  Packet p;
  p.from = "m1";
  p.from_addr = "10.0.0.2:7950";
  Meta relayed;
  relayed.reach = Reach::kNat;
  relayed.relay = "p9";
  Meta pub;
  pub.reach = Reach::kPublic;
  pub.serves_relay = true;
  p.updates.push_back(AliveMsg{"p9", "10.0.0.9:7950", 1, pub});
  p.updates.push_back(AliveMsg{"m2", "203.0.113.3:41000", 2, relayed});
  r.HandlePacket("10.0.0.2:7950", p, 50);
  r.TakePackets();
  const std::string adv = "203.0.113.3:41000";
  auto through_relay = [&] {
    auto route = r.Route(adv);
    return route.has_value() && route->via == "10.0.0.9:7950" && route->dest == "m2";
  };
  REQUIRE(through_relay());
  Packet from_m2;
  from_m2.from = "m2";
  from_m2.from_addr = adv;
  from_m2.primary = PingMsg{5, "r"};
  // Delivered by a relay (no source address): no direct path.
  r.HandlePacket("", from_m2, 100);
  CHECK(through_relay());
  // Naming m2 but from another IP (spoofed, or not m2's NAT): ignored.
  r.HandlePacket("198.51.100.7:41001", from_m2, 110);
  CHECK(through_relay());
  CHECK(r.stats().direct_paths == 0);
  CHECK_FALSE(DirectIn(r, "m2"));
  // Straight from m2's NAT (its mapping towards us): used while fresh.
  r.HandlePacket("203.0.113.3:45000", from_m2, 120);
  r.TakePackets();
  auto route = r.Route(adv);
  REQUIRE(route.has_value());
  CHECK(route->via == "203.0.113.3:45000");
  CHECK(route->dest.empty());
  CHECK(r.stats().direct_paths == 1);
  CHECK(DirectIn(r, "m2"));
  const TimeMs ttl = r.config().direct_ttl;
  REQUIRE(ttl > 0);
  // The core's own datagrams to m2 go there as plain datagrams (no frame).
  r.Tick(120 + ttl / 2);
  bool plain = false;
  for (TimeMs t = 120 + ttl / 2; t < 120 + ttl && !plain; t += 10) {
    if (r.NextDeadline() <= t) r.Tick(t);
    for (const OutPacket& o : r.TakePackets()) {
      if (o.to_addr == "203.0.113.3:45000") {
        plain = true;
        CHECK(o.via.empty());
        CHECK(o.dest.empty());
      }
      CHECK(o.to_addr != adv);  // nothing goes to the advertised address plainly
    }
  }
  CHECK(plain);
  // Barrier traffic outside the core refreshes it too (NoteDirect), but only from m2's IP.
  r.NoteDirect("m2", "198.51.100.7:41001", 120 + ttl);
  r.NoteDirect("m2", "203.0.113.3:45000", 120 + ttl);
  r.Tick(120 + 2 * ttl);
  CHECK(r.Route(adv)->dest.empty());
  CHECK(r.Route(adv)->via == "203.0.113.3:45000");
  // Nothing from m2 for longer than direct_ttl: back through the relay.
  r.Tick(120 + 2 * ttl + 1);
  CHECK(through_relay());
  CHECK_FALSE(DirectIn(r, "m2"));
  // A stranger's datagram (not a member) makes nothing either.
  Packet x = from_m2;
  x.from = "x";
  r.HandlePacket("203.0.113.3:45000", x, 120 + 2 * ttl + 2);
  CHECK(through_relay());
  CHECK(r.stats().direct_paths == 1);
}

TEST_CASE("direct: a probe unanswered on the direct path drops it and pings through the relay",
          "[membership][nat][relay][direct]") {
  // m2's NAT forgot its mapping towards r (a router restart): r's probe on the direct path
  // goes unanswered; at the probe timeout r drops the path and pings again through m2's relay
  // (besides the indirect pings), so m2 is not suspected for a path that broke.
  HandRelay h;
  Swim& r = h.r;
  Packet p;
  p.from = "m1";
  p.from_addr = "10.0.0.2:7950";
  Meta relayed;
  relayed.reach = Reach::kNat;
  relayed.relay = "p9";
  Meta pub;
  pub.reach = Reach::kPublic;
  pub.serves_relay = true;
  p.updates.push_back(AliveMsg{"p9", "10.0.0.9:7950", 1, pub});
  p.updates.push_back(AliveMsg{"m2", "203.0.113.3:41000", 2, relayed});
  r.HandlePacket("10.0.0.2:7950", p, 50);
  r.TakePackets();
  Packet from_m2;
  from_m2.from = "m2";
  from_m2.from_addr = "203.0.113.3:41000";
  // m2 keeps talking to r until r's probe of m2 goes out on the direct path.
  std::optional<uint32_t> seq;
  TimeMs sent = 0;
  for (TimeMs t = 60; t < 60000 && !seq; t += 10) {
    from_m2.primary = PingMsg{static_cast<uint32_t>(t), "r"};
    r.HandlePacket("203.0.113.3:45000", from_m2, t);
    if (r.NextDeadline() <= t) r.Tick(t);
    for (const OutPacket& o : r.TakePackets()) {
      const auto* ping = std::get_if<PingMsg>(&o.packet.primary);
      if (ping != nullptr && ping->target == "m2") {
        CHECK(o.to_addr == "203.0.113.3:45000");
        CHECK(o.via.empty());
        seq = ping->seq;
        sent = t;
      }
    }
  }
  REQUIRE(seq.has_value());
  // Silence from m2; past the probe timeout the same ping goes through p9.
  bool through_relay = false;
  // (Its probe timeout stretches with its health score: nobody answers its other probes.)
  TimeMs t = sent + 1;
  for (; t <= sent + 8 * r.config().probe_interval && !through_relay; ++t) {
    if (r.NextDeadline() <= t) r.Tick(t);
    for (const OutPacket& o : r.TakePackets()) {
      const auto* ping = std::get_if<PingMsg>(&o.packet.primary);
      if (ping != nullptr && ping->seq == *seq) {
        through_relay = true;
        CHECK(o.via == "10.0.0.9:7950");
        CHECK(o.dest == "m2");
      }
    }
  }
  CHECK(through_relay);
  CHECK(r.stats().direct_dropped == 1);
  CHECK(r.Route("203.0.113.3:41000")->dest == "m2");
  // Its ack (straight from m2, whose NAT opened a new mapping towards r) is taken: no
  // suspicion, and the new source is the path from then on.
  Packet ack;
  ack.from = "m2";
  ack.from_addr = "203.0.113.3:41000";
  ack.primary = AckMsg{*seq, ""};
  r.HandlePacket("203.0.113.3:45123", ack, t);
  r.Tick(t + 1);
  CHECK(r.Find("m2")->status == Status::kAlive);
  CHECK(r.Route("203.0.113.3:41000")->via == "203.0.113.3:45123");
}

}  // namespace
}  // namespace meshtrain::membership
