// The end of training when a trainer dies or a node restarts late (node/node_consensus.cc,
// node/node_state.cc), driven by hand in virtual time:
// - a member whose metadata says `absent` (its external trainer left before it finished and
//   none came back within --trainer-grace) is no consensus participant, and is named as left out;
//   our own trainer's absence goes into our metadata;
// - a node that starts when every live peer has finished (restarted as the mesh ended) passes
//   the --min-peers gate and takes the finished peers' model and step.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "node/node.h"
#include "tests/node/hand_driver.h"

namespace meshtrain::node {
// Named, not anonymous: the unity build compiles this file with the other hand-driven tests.
namespace absent_test {

namespace ms = ::meshtrain::membership;

constexpr const char* kP1 = "10.0.0.2:7950";
constexpr const char* kP2 = "10.0.0.3:7950";
constexpr const char* kD3 = "10.0.0.4:7950";

// n0 hears of p1 and p2, finished at `step`, and d3 at step 5, not training (absent or not).
struct Hand : testing::HandDriver {
  explicit Hand(bool d3_absent, uint64_t step = 10,
                NodeConfig c = Config(3, sync::SelectPolicy::kAll)) {
    Start(std::move(c));
    now = 100;  // a step learned at time 0 reads as never learned
    ms::Meta done;
    done.training = false;
    ms::Meta gone = done;
    gone.absent = d3_absent;
    ms::Packet p;
    p.from = "p1";
    p.from_addr = kP1;
    p.updates.push_back(ms::AliveMsg{"p1", kP1, 1, done});
    p.updates.push_back(ms::AliveMsg{"p2", kP2, 1, done});
    p.updates.push_back(ms::AliveMsg{"d3", kD3, 1, gone});
    p.from_step = step;
    Datagram(kP1, p);
    for (const auto& [name, addr, s] : {std::tuple{"p1", kP1, step}, std::tuple{"p2", kP2, step},
                                        std::tuple{"d3", kD3, uint64_t{5}}}) {
      ms::Packet q;
      q.from = name;
      q.from_addr = addr;
      q.from_step = s;
      q.primary = ms::PingMsg{1, "n0"};
      Datagram(addr, q);
    }
  }
  void Finish(uint64_t step, float value) {
    n->Step(TrainerProgress{step, false, false, {}, 0}, now);
    n->Step(SnapshotIn{step, std::make_shared<const std::vector<float>>(8, value), true, {}}, now);
    Drain();
  }
};

TEST_CASE("consensus: a member whose trainer is absent is left out", "[node][consensus]") {
  Hand h(/*d3_absent=*/true);
  h.Finish(10, 1.0f);
  h.RunUntil(h.now + 500);
  const auto v = h.n->consensus();
  CHECK(v.participants == 3);  // n0, p1, p2
  CHECK(v.left_out == std::vector<std::string>{"d3"});
  CHECK(v.leader == "n0");
}

TEST_CASE("consensus: a member not training, not absent, still takes part", "[node][consensus]") {
  // Within the grace its trainer may come back: the consensus waits for its final model.
  Hand h(/*d3_absent=*/false);
  h.Finish(10, 1.0f);
  h.RunUntil(h.now + 500);
  CHECK(h.n->consensus().participants == 4);
  CHECK(h.n->consensus().left_out.empty());
}

TEST_CASE("consensus: our trainer's absence goes into our metadata", "[node][consensus]") {
  Hand h(/*d3_absent=*/false);
  const auto self_absent = [&] {
    for (const auto& m : h.n->Members()) {
      if (m.name == "n0") return m.meta.absent;
    }
    return false;
  };
  h.n->Step(TrainerProgress{7, false, false, {}, 0, /*absent=*/true}, h.now);
  h.Drain();
  CHECK(h.n->absent());
  CHECK(self_absent());
  // A trainer attached again: training, no longer absent.
  h.n->Step(TrainerProgress{7, true, false, {}, 0, false}, h.now);
  h.Drain();
  CHECK_FALSE(h.n->absent());
  CHECK_FALSE(self_absent());
}

TEST_CASE("a node starting after every peer finished takes their model and step", "[node][join]") {
  NodeConfig c = testing::HandDriver::Config(3, sync::SelectPolicy::kAll);
  c.min_peers = 2;  // nobody will ever train again: the gate must not hold the node
  c.join = {kP1};
  Hand h(/*d3_absent=*/true, 600, std::move(c));
  h.n->Step(TrainerProgress{0, true, true, {}, 0}, h.now);  // waits for the permit of step 1
  h.Drain();
  h.RunUntil(h.now + 200);
  std::optional<ConnId> fetch;
  for (const Output& o : h.out) {  // the connection a StateRequest goes out on
    if (const auto* sf = std::get_if<SendFrame>(&o);
        sf && std::holds_alternative<wire::StateRequestMsg>(sf->msg.body)) {
      fetch = sf->conn;
    }
  }
  REQUIRE(fetch.has_value());
  CHECK_FALSE(h.n->training());  // joining: nobody waits for it meanwhile
  h.out.clear();
  wire::ParamChunk chunk;
  chunk.round = 1;
  chunk.step = 600;
  chunk.chunks = 1;
  chunk.total = 8;
  chunk.count = 8;
  chunk.data.assign(8, 4.0f);
  wire::Frame f;
  f.sender = "p1";
  f.body = std::move(chunk);
  h.n->Step(FrameIn{*fetch, std::move(f)}, h.now);
  h.Drain();
  h.RunUntil(h.now + 50);
  const AdoptState* adopted = nullptr;
  std::vector<uint64_t> permits;  // 601, and with OSP the early one for 602
  for (const Output& o : h.out) {
    if (const auto* a = std::get_if<AdoptState>(&o)) adopted = a;
    if (const auto* p = std::get_if<Permit>(&o)) permits.push_back(p->step);
  }
  REQUIRE(adopted != nullptr);
  CHECK(adopted->step == 600);
  CHECK(adopted->params == std::vector<float>(8, 4.0f));
  REQUIRE_FALSE(permits.empty());
  CHECK(permits.front() == 601);
}

}  // namespace absent_test
}  // namespace meshtrain::node
