// A node restarted from its checkpoint rejoins a mesh that has moved on: it must fetch the mesh's
// model, also when gossip tells it of the members before anything tells their steps.
// faults/test_elastic_restart once failed that way under load: the restarted agent's first
// packet was a ping from a peer that still suspected it, whose gossip named both peers (step 0:
// unknown), and the agent went on from its checkpoint at step 100 while the mesh was at ~1500.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <variant>

#include "tests/node/hand_driver.h"

namespace meshtrain::node {
namespace {

namespace ms = ::meshtrain::membership;

struct Restarted : testing::HandDriver {
  Restarted() {
    NodeConfig c = Config(11, sync::SelectPolicy::kRandom);
    c.start_step = 100;
    c.resumed = true;
    c.join = {"10.0.0.2:7950"};
    Start(std::move(c));
  }
  // A packet from p1 (at `step`) that names p1 and p2, both training.
  void Packet(uint64_t step) {
    ms::Packet p;
    p.from = "p1";
    p.from_addr = "10.0.0.2:7950";
    p.from_step = step;
    ms::Meta meta;
    meta.training = true;
    p.updates.push_back(ms::AliveMsg{"p1", "10.0.0.2:7950", 1, meta});
    p.updates.push_back(ms::AliveMsg{"p2", "10.0.0.3:7950", 1, meta});
    Datagram("10.0.0.2:7950", p);
  }
  // The trainer, at the checkpoint's step, asks for its next step.
  void AskToStep() {
    TrainerProgress t;
    t.step = 100;
    t.waiting = true;
    n->Step(t, now);
    Drain();
  }
  bool Permitted() const {
    for (const Output& o : out) {
      if (std::holds_alternative<Permit>(o)) return true;
    }
    return false;
  }
  bool Fetching() const {
    for (const Output& o : out) {
      const auto* log = std::get_if<LogLine>(&o);
      if (log && log->text.find("joining a running mesh: fetching the model of p1") == 0) {
        return true;
      }
    }
    return false;
  }
};

TEST_CASE("a restarted node waits for its peers' steps before it keeps its checkpoint",
          "[node][elastic]") {
  Restarted r;
  r.now = 10;
  // First news: from p1 before the node knows it (the sender's step is not taken from a
  // stranger), so p1 and p2 are members of unknown step.
  r.Packet(1500);
  r.AskToStep();
  r.RunUntil(200);
  CHECK_FALSE(r.Permitted());
  CHECK_FALSE(r.Fetching());
  // p1 again, now a member: its step is learned, the mesh is 1400 steps ahead, fetch its model.
  r.out.clear();
  r.Packet(1500);
  r.RunUntil(400);
  CHECK(r.Fetching());
  CHECK_FALSE(r.Permitted());
}

}  // namespace
}  // namespace meshtrain::node
