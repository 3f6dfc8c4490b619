// Members behind NAT as the node core sees them (issue 34), driven by hand: one public node
// hears of a public peer p1, a peer c2 behind a cone NAT and a peer r3 behind a symmetric NAT,
// reached through the relay p1. Parameters are pushed only to members that a connection can
// reach (the others pull), SELMCAST plans without them as receivers, and capacity-probe trains
// go on direct or punched paths only, never to an address that only a relay reaches.
#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "node/node.h"

namespace meshtrain::node {
namespace {

namespace ms = ::meshtrain::membership;

constexpr const char* kP1 = "10.0.0.2:7950";
constexpr const char* kC2 = "203.0.113.3:7950";         // its cone router's mapping
constexpr const char* kR3 = "203.0.113.4:41000";        // where its relay p1 sees it
constexpr const char* kR3Direct = "203.0.113.4:45000";  // its NAT's mapping towards us

struct Hand {
  std::unique_ptr<Node> n;
  TimeMs now = 0;
  std::vector<Output> out;

  explicit Hand(sync::SelectPolicy select, TimeMs probe_ms = 0) {
    NodeConfig c;
    c.name = "n0";
    c.addr = "10.0.0.1:7950";
    c.data_addr = c.addr;
    c.membership = ms::Config::Local();
    c.membership.name = c.name;
    c.membership.addr = c.addr;
    c.membership.nat = true;
    c.membership.adopt_reflexive = true;
    // Nobody here answers SWIM probes: none go out during a test (no suspicions).
    c.membership.probe_interval = 10 * 60 * 1000;
    c.seed = 5;
    c.training = true;
    c.select = select;
    c.fanout = 3;
    c.min_peers = 0;
    c.capacity_probe_interval_ms = probe_ms;
    n = std::make_unique<Node>(std::move(c), 0);
    n->Start(0);
    Drain();
    // p1 tells us about itself, c2 and r3 (all training).
    ms::Packet p;
    p.from = "p1";
    p.from_addr = kP1;
    ms::Meta pub;
    pub.reach = ms::Reach::kPublic;
    pub.serves_relay = true;
    pub.training = true;
    ms::Meta cone;
    cone.reach = ms::Reach::kNat;
    cone.training = true;
    ms::Meta relayed = cone;
    relayed.relay = "p1";
    p.updates.push_back(ms::AliveMsg{"p1", kP1, 1, pub});
    p.updates.push_back(ms::AliveMsg{"c2", kC2, 2, cone});
    p.updates.push_back(ms::AliveMsg{"r3", kR3, 2, relayed});
    Datagram(kP1, p);
  }
  void Datagram(const std::string& from, const ms::Packet& p) {
    gossip::Datagram dg;
    dg.sender = p.from;
    dg.body = p;
    n->Step(DatagramIn{from, std::move(dg)}, now);
    Drain();
  }
  void Drain() {
    for (Output& o : n->TakeOutput()) out.push_back(std::move(o));
  }
  void RunUntil(TimeMs until) {
    for (; now <= until; ++now) {
      if (n->NextDeadline() <= now) n->Tick(now);
      Drain();
    }
  }
  void Snapshot(uint64_t step) {
    n->Step(TrainerProgress{step, true, false, {}, 0}, now);
    n->Step(SnapshotIn{step, std::make_shared<const std::vector<float>>(8, 1.0f), false, {}}, now);
    Drain();
  }
};

TEST_CASE("nat node: pushes go to members a connection reaches; the others pull", "[node][nat]") {
  for (auto select : {sync::SelectPolicy::kAll, sync::SelectPolicy::kRandom}) {
    Hand h(select);
    REQUIRE(h.n->Members().size() == 4);
    h.out.clear();
    h.Snapshot(1);
    h.RunUntil(h.now + 50);
    std::set<std::string> to;
    for (const Output& o : h.out) {
      if (const auto* c = std::get_if<Connect>(&o)) to.insert(c->to);
    }
    // Only p1 (fanout 3 would have taken all three).
    CHECK(to == std::set<std::string>{kP1});
  }
}

TEST_CASE("nat node: SELMCAST plans without members behind NAT as receivers", "[node][nat]") {
  Hand h(sync::SelectPolicy::kSelmcast);
  h.out.clear();
  h.Snapshot(1);
  const PlanRequest* req = nullptr;
  for (const Output& o : h.out) {
    if (const auto* r = std::get_if<PlanRequest>(&o)) req = r;
  }
  REQUIRE(req != nullptr);
  CHECK(req->candidates == std::vector<std::string>{"p1"});
  CHECK(req->bandwidth.count("c2") == 0);
  CHECK(req->bandwidth.count("r3") == 0);
  CHECK(req->bandwidth.count("n0") == 1);
}

TEST_CASE("nat node: probe trains go on direct or punched paths, never to a relayed address",
          "[node][nat][probe]") {
  Hand h(sync::SelectPolicy::kRandom, 1000);
  std::multiset<std::string> to;
  auto collect = [&] {
    for (const Output& o : h.out) {
      if (const auto* p = std::get_if<ProbeLink>(&o)) to.insert(p->to);
    }
    h.out.clear();
  };
  h.RunUntil(12000);
  collect();
  // p1 (public) and c2 (punched: its router admits us once it sent to us) are probed; r3 only
  // through its relay: not at all.
  CHECK(to.count(kP1) > 0);
  CHECK(to.count(kC2) > 0);
  CHECK(to.count(kR3) == 0);
  CHECK(to.count(kR3Direct) == 0);
  // r3 sends to us straight (from its NAT's IP): its direct return path is probed, while it is
  // fresh.
  to.clear();
  ms::Packet p;
  p.from = "r3";
  p.from_addr = kR3;
  const TimeMs start = h.now;
  for (TimeMs t = start; t < start + 30000; t += 500) {
    p.primary = ms::PingMsg{static_cast<uint32_t>(t), "n0"};
    h.Datagram(kR3Direct, p);
    if (t == start) {
      for (const ms::Member& m : h.n->Members()) {
        if (m.name == "r3") CHECK(m.direct);
      }
    }
    h.RunUntil(t + 500);
    collect();
  }
  CHECK(to.count(kR3Direct) > 0);
  CHECK(to.count(kR3) == 0);
}

}  // namespace
}  // namespace meshtrain::node
