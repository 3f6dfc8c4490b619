// Members behind NAT as the node core sees them, driven by hand: one public node
// hears of a public peer p1, a peer c2 behind a cone NAT and a peer r3 behind a symmetric NAT,
// reached through the relay p1. Parameters are pushed only to members that a connection can
// reach (the others pull), SELMCAST plans without them as receivers, and capacity-probe trains
// go on direct or punched paths only, never to an address that only a relay reaches.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "node/node.h"
#include "tests/node/hand_driver.h"

namespace meshtrain::node {
namespace {

namespace ms = ::meshtrain::membership;

constexpr const char* kP1 = "10.0.0.2:7950";
constexpr const char* kC2 = "203.0.113.3:7950";         // its cone router's mapping
constexpr const char* kR3 = "203.0.113.4:41000";        // where its relay p1 sees it
constexpr const char* kR3Direct = "203.0.113.4:45000";  // its NAT's mapping towards us

struct Hand : testing::HandDriver {
  // `peers_training` false: p1, c2 and r3 finished training at step 10 (consensus tests).
  explicit Hand(sync::SelectPolicy select, TimeMs probe_ms = 0, bool peers_training = true) {
    NodeConfig c = Config(5, select);
    c.membership.nat = true;
    c.membership.adopt_reflexive = true;
    c.capacity_probe_interval_ms = probe_ms;
    Start(std::move(c));
    // p1 tells us about itself, c2 and r3 (all training).
    ms::Packet p;
    p.from = "p1";
    p.from_addr = kP1;
    ms::Meta pub;
    pub.reach = ms::Reach::kPublic;
    pub.serves_relay = true;
    pub.training = peers_training;
    ms::Meta cone;
    cone.reach = ms::Reach::kNat;
    cone.training = peers_training;
    ms::Meta relayed = cone;
    relayed.relay = "p1";
    p.updates.push_back(ms::AliveMsg{"p1", kP1, 1, pub});
    p.updates.push_back(ms::AliveMsg{"c2", kC2, 2, cone});
    p.updates.push_back(ms::AliveMsg{"r3", kR3, 2, relayed});
    p.from_step = peers_training ? 0 : 10;
    Datagram(kP1, p);
    if (!peers_training) {
      // Their steps, straight from them.
      for (const auto& [name, from] :
           {std::pair{"p1", kP1}, std::pair{"c2", kC2}, std::pair{"r3", kR3Direct}}) {
        ms::Packet q;
        q.from = name;
        q.from_addr = name == std::string("r3") ? kR3 : from;
        q.from_step = 10;
        q.primary = ms::PingMsg{1, "n0"};
        Datagram(from, q);
      }
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

TEST_CASE("nat node: the consensus leader is not behind NAT; those behind NAT pull its result",
          "[node][nat][consensus]") {
  // Participants c2 < n0 < p1 < r3 (names): c2 and r3 are behind NAT, so n0 leads.
  Hand h(sync::SelectPolicy::kRandom, 0, false);
  h.n->Step(TrainerProgress{10, false, false, {}, 0}, h.now);
  h.n->Step(SnapshotIn{10, std::make_shared<const std::vector<float>>(8, 1.0f), true, {}}, h.now);
  h.RunUntil(h.now + 500);
  CHECK(h.n->consensus().participants == 4);
  CHECK(h.n->consensus().leader == "n0");
  CHECK(h.n->consensus().state == node::ConsensusPhase::kCollecting);
  // c2 asks for the result before there is one: closed, nothing sent.
  auto request = [&](ConnId conn) {
    bool closed = false;
    auto sent = h.StateRequest(conn, "c2", 10, &closed);
    CHECK(closed);
    return sent;
  };
  CHECK_FALSE(request(5).has_value());
  // The three final models come in (c2 and r3 connect out to us; p1 as anyone).
  ConnId conn = 10;
  for (const char* name : {"c2", "p1", "r3"}) {
    wire::ParamChunk c;
    c.round = 1;
    c.step = 10;
    c.chunks = 1;
    c.total = 8;
    c.count = 8;
    c.data.assign(8, 3.0f);
    c.final = true;
    wire::Frame f;
    f.sender = name;
    f.body = std::move(c);
    h.n->Step(FrameIn{conn++, std::move(f)}, h.now);
    h.Drain();
  }
  const ConsensusReduce* reduce = nullptr;
  for (const Output& o : h.out) {
    if (const auto* r = std::get_if<ConsensusReduce>(&o)) reduce = r;
  }
  REQUIRE(reduce != nullptr);
  CHECK(reduce->models.size() == 4);
  const uint64_t id = reduce->id;
  auto result = std::make_shared<const std::vector<float>>(8, 2.5f);
  h.out.clear();
  h.n->Step(ConsensusResult{id, result}, h.now);
  h.Drain();
  h.RunUntil(h.now + 100);
  CHECK(h.n->consensus().state == node::ConsensusPhase::kServing);
  // The result is pushed to p1 only (nothing connects to c2 or r3)...
  std::set<std::string> to;
  for (const Output& o : h.out) {
    if (const auto* c = std::get_if<Connect>(&o)) to.insert(c->to);
  }
  CHECK(to == std::set<std::string>{kP1});
  // ... and c2's request now gets it: the consensus model, marked so.
  auto sent = request(20);
  REQUIRE(sent.has_value());
  CHECK(sent->consensus);
  CHECK_FALSE(sent->final);
  REQUIRE(sent->params != nullptr);
  CHECK(*sent->params == *result);
  CHECK(h.n->stats().consensus_pulls_served == 1);
}

}  // namespace
}  // namespace meshtrain::node
