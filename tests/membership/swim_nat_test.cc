// Unit tests of the membership core's NAT traversal (issue 34): reflexive addresses from acks,
// reachability, and members behind NAT routers. A tiny in-test wire emulates each router as the
// netbed does (tests/netbed/bed.py): a datagram from an inner node leaves with the router's
// address (cone: one public port per node, as Linux masquerade keeps the port; symmetric: one per
// destination), and a datagram to a router reaches the inner node only from an address the node
// sent to before (inbound admitted for established flows only). Push-pulls (TCP) to a node
// behind NAT fail. Virtual time in 1 ms steps, fixed seeds, no sleeps.
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "membership/swim.h"

namespace meshtrain::membership {
namespace {

enum class Nat { kNone, kCone, kSymmetric };

class NatWire {
 public:
  struct Host {
    std::string name;
    std::string inner;   // the address the node is configured with
    std::string router;  // its router's public IP (NAT only)
    Nat nat = Nat::kNone;
    std::unique_ptr<Swim> swim;
    std::set<std::string> open;                // remote addresses it sent to (NAT only)
    std::map<std::string, std::string> ports;  // symmetric: destination -> public address
    std::vector<Event> events;
  };

  Swim& Add(const std::string& name, Nat nat, bool nat_on = true) {
    auto h = std::make_unique<Host>();
    h->name = name;
    h->nat = nat;
    const size_t i = hosts_.size() + 1;
    h->inner = (nat == Nat::kNone ? "10.0.0." : "192.168." + std::to_string(i) + ".") +
               std::to_string(nat == Nat::kNone ? i : 2) + ":7950";
    h->router = "203.0.113." + std::to_string(i);
    Config c = Config::Local();
    c.name = name;
    c.addr = h->inner;
    c.nat = nat_on;
    c.adopt_reflexive = nat_on;
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
  std::string SourceFor(Host& h, const std::string& to) {
    if (h.nat == Nat::kNone) return h.inner;
    if (h.nat == Nat::kCone) return h.router + ":7950";
    auto it = h.ports.find(to);
    if (it == h.ports.end()) {
      it = h.ports.emplace(to, h.router + ":" + std::to_string(40000 + h.ports.size())).first;
    }
    return it->second;
  }
  // The host a datagram to `addr` from `src` reaches, or null (no route, filtered).
  Host* Route(const std::string& addr, const std::string& src) {
    for (auto& h : hosts_) {
      if (h->nat == Nat::kNone && h->inner == addr) return h.get();
      if (h->nat == Nat::kCone && addr == h->router + ":7950") {
        return h->open.count(src) ? h.get() : nullptr;
      }
      if (h->nat == Nat::kSymmetric) {
        for (const auto& [dst, pub] : h->ports) {
          if (pub == addr && dst == src) return h.get();
        }
      }
    }
    return nullptr;  // inner addresses of NATed hosts are not routed
  }

  void Pump() {
    for (int rounds = 0; rounds < 100; ++rounds) {
      bool busy = false;
      for (auto& h : hosts_) {
        for (OutPacket& out : h->swim->TakePackets()) {
          busy = true;
          ++datagrams;
          const std::string src = SourceFor(*h, out.to_addr);
          if (h->nat != Nat::kNone) h->open.insert(out.to_addr);
          if (Host* to = Route(out.to_addr, src)) to->swim->HandlePacket(src, out.packet, now_);
        }
        for (OutPushPull& pp : h->swim->TakePushPulls()) {
          busy = true;
          Host* to = nullptr;
          for (auto& t : hosts_) {
            if (t->nat == Nat::kNone && t->inner == pp.to_addr) to = t.get();
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

  void RunUntil(TimeMs until) {
    for (; now_ <= until; ++now_) {
      for (auto& h : hosts_) {
        if (h->swim->NextDeadline() <= now_) h->swim->Tick(now_);
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

TEST_CASE("nat: without NAT traversal the NATed nodes flap, as issue 34 reported",
          "[membership][nat]") {
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
  Swim& n3 = w.Add("n3", Nat::kSymmetric);
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

}  // namespace
}  // namespace meshtrain::membership
