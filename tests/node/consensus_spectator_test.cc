// A spectator at the end-of-training consensus (node/node_consensus.cc), driven by
// hand: a node that took a finished peer's final model over before its first step finishes at
// step 0. Its peers leave it out of the participants (they count members that stopped after at
// least one step), so it leaves itself out too: it sends the leader no final model, pulls the
// leader's result and adopts it; the leader serves it the result like a participant.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "node/node.h"
#include "tests/node/hand_driver.h"

namespace meshtrain::node {
// Named, not anonymous: the unity build compiles this file with nat_node_test.cc's `Hand`.
namespace spectator_test {

namespace ms = ::meshtrain::membership;

constexpr const char* kP1 = "10.0.0.2:7950";
constexpr const char* kP2 = "10.0.0.3:7950";
constexpr const char* kS3 = "10.0.0.4:7950";

// n0 hears of p1 and p2 (finished at step 10) and s3 (finished at step 0: a spectator).
struct Hand : testing::HandDriver {
  Hand() {
    Start(Config(3, sync::SelectPolicy::kAll));
    ms::Meta done;
    done.training = false;
    ms::Packet p;
    p.from = "p1";
    p.from_addr = kP1;
    p.updates.push_back(ms::AliveMsg{"p1", kP1, 1, done});
    p.updates.push_back(ms::AliveMsg{"p2", kP2, 1, done});
    p.updates.push_back(ms::AliveMsg{"s3", kS3, 1, done});
    p.from_step = 10;
    Datagram(kP1, p);
    for (const auto& [name, addr, step] :
         {std::tuple{"p1", kP1, 10}, std::tuple{"p2", kP2, 10}, std::tuple{"s3", kS3, 0}}) {
      ms::Packet q;
      q.from = name;
      q.from_addr = addr;
      q.from_step = step;
      q.primary = ms::PingMsg{1, "n0"};
      Datagram(addr, q);
    }
  }
  void Finish(uint64_t step, float value) {
    n->Step(TrainerProgress{step, false, false, {}, 0}, now);
    n->Step(SnapshotIn{step, std::make_shared<const std::vector<float>>(8, value), true, {}}, now);
    Drain();
  }
  // A model chunk from `sender` on connection `conn` (final or consensus as asked; a consensus
  // model averaging `covers` participants).
  void Chunk(ConnId conn, const char* sender, float value, bool final_model, bool consensus,
             uint32_t covers = 0) {
    wire::ParamChunk c;
    c.round = 1;
    c.step = 10;
    c.chunks = 1;
    c.total = 8;
    c.count = 8;
    c.data.assign(8, value);
    c.final = final_model;
    c.consensus = consensus;
    c.covers = covers;
    wire::Frame f;
    f.sender = sender;
    f.body = std::move(c);
    n->Step(FrameIn{conn, std::move(f)}, now);
    Drain();
  }
};

TEST_CASE("consensus spectator: a node that took no step pulls the leader's result",
          "[node][consensus]") {
  Hand h;
  h.Finish(0, 3.0f);  // took a finished peer's model over, never stepped
  h.RunUntil(h.now + 500);
  const auto v = h.n->consensus();
  CHECK(v.participants == 2);  // p1 and p2; not s3 (step 0), not ourselves
  CHECK(v.leader == "p1");
  // No final model goes to the leader (nothing pushed); a pull to p1 asks for the result.
  std::optional<ConnId> pull;
  for (const Output& o : h.out) {
    CHECK_FALSE(std::holds_alternative<SendParams>(o));
    if (const auto* c = std::get_if<Connect>(&o)) {
      CHECK(c->to == kP1);
      pull = c->conn;
    }
  }
  REQUIRE(pull.has_value());
  CHECK(h.n->stats().consensus_pulls >= 1);
  // p1 answers with the consensus model: adopted, from the leader.
  h.out.clear();
  h.Chunk(*pull, "p1", 2.5f, false, true);
  h.RunUntil(h.now + 10);
  const AdoptConsensus* adopted = nullptr;
  for (const Output& o : h.out) {
    if (const auto* a = std::get_if<AdoptConsensus>(&o)) adopted = a;
  }
  REQUIRE(adopted != nullptr);
  CHECK(adopted->leader == "p1");
  REQUIRE(adopted->params != nullptr);
  CHECK(*adopted->params == std::vector<float>(8, 2.5f));
  CHECK(h.n->consensus().state == node::ConsensusPhase::kAdopted);
}

TEST_CASE(
    "consensus spectator: a result that averages fewer participants than we see is pulled "
    "again",
    "[node][consensus]") {
  // The leader averaged before it saw p2 finish (p2 was training in its view); ours counts p1
  // and p2. The result it serves says it averages one participant: adopted, as the best there
  // is, and pulled again every retry interval until the leader's next result covers both.
  Hand h;
  h.Finish(0, 3.0f);
  h.RunUntil(h.now + 500);
  REQUIRE(h.n->consensus().participants == 2);
  const auto pull_to_leader = [&]() -> std::optional<ConnId> {
    std::optional<ConnId> pull;
    for (const Output& o : h.out) {
      if (const auto* c = std::get_if<Connect>(&o); c != nullptr && c->to == kP1) pull = c->conn;
    }
    h.out.clear();
    return pull;
  };
  const auto adopted = [&]() -> std::optional<float> {
    std::optional<float> v;
    for (const Output& o : h.out) {
      if (const auto* a = std::get_if<AdoptConsensus>(&o)) v = a->params->front();
    }
    return v;
  };
  std::optional<ConnId> pull = pull_to_leader();
  REQUIRE(pull.has_value());
  h.Chunk(*pull, "p1", 2.0f, false, true, 1);
  CHECK(adopted() == 2.0f);
  CHECK(h.n->consensus().state == node::ConsensusPhase::kAdopted);
  const uint64_t pulls = h.n->stats().consensus_pulls;
  h.out.clear();
  h.RunUntil(h.now + 2 * h.n->config().consensus_retry_ms);
  pull = pull_to_leader();
  REQUIRE(pull.has_value());
  CHECK(h.n->stats().consensus_pulls == pulls + 1);
  // The leader's next result averages both: adopted, and no pull after it.
  h.Chunk(*pull, "p1", 2.5f, false, true, 2);
  CHECK(adopted() == 2.5f);
  h.out.clear();
  h.RunUntil(h.now + 5 * h.n->config().consensus_retry_ms);
  CHECK_FALSE(pull_to_leader().has_value());
  CHECK(h.n->stats().consensus_pulls == pulls + 1);
}

TEST_CASE("consensus spectator: the leader averages the participants and serves a spectator",
          "[node][consensus]") {
  Hand h;
  h.Finish(10, 1.0f);  // n0 leads (n0 < p1 < p2; s3 took no step)
  h.RunUntil(h.now + 500);
  CHECK(h.n->consensus().participants == 3);
  CHECK(h.n->consensus().leader == "n0");
  // s3 asks for the result before there is one: closed, nothing sent.
  auto request = [&](ConnId conn) {
    bool closed = false;
    auto sent = h.StateRequest(conn, "s3", 0, &closed);
    CHECK(closed);
    return sent;
  };
  CHECK_FALSE(request(5).has_value());
  // p1's and p2's final models: the reduce covers the three participants, not s3.
  h.Chunk(10, "p1", 3.0f, true, false);
  h.Chunk(11, "p2", 5.0f, true, false);
  const ConsensusReduce* reduce = nullptr;
  for (const Output& o : h.out) {
    if (const auto* r = std::get_if<ConsensusReduce>(&o)) reduce = r;
  }
  REQUIRE(reduce != nullptr);
  CHECK(reduce->models.size() == 3);
  auto result = std::make_shared<const std::vector<float>>(8, 3.0f);
  h.n->Step(ConsensusResult{reduce->id, result}, h.now);
  h.Drain();
  h.RunUntil(h.now + 100);
  CHECK(h.n->consensus().state == node::ConsensusPhase::kServing);
  // Now s3's request gets the consensus model, marked so.
  auto sent = request(20);
  REQUIRE(sent.has_value());
  CHECK(sent->consensus);
  REQUIRE(sent->params != nullptr);
  CHECK(*sent->params == *result);
  CHECK(sent->covers == 3);  // it averages n0, p1 and p2
  CHECK(h.n->stats().consensus_pulls_served == 1);
}

}  // namespace spectator_test
}  // namespace meshtrain::node
