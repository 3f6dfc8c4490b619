// The end-of-training consensus (node/node_consensus.cc) in virtual time: nodes that
// stop at --steps end with one model, bit for bit the average of their final models; a node
// (the leader among them) failing during it leaves the others agreeing all the same.
#include "node/consensus.h"

#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <vector>

#include "learn/mixing.h"
#include "tests/node/mesh_harness.h"

using meshtrain::testing::Mesh;
using meshtrain::testing::MeshOptions;

namespace {

MeshOptions ConsensusMesh(uint64_t seed) {
  MeshOptions o;
  o.nodes = 4;
  o.seed = seed;
  o.max_steps = 60;
  o.policy = meshtrain::sync::Policy::kAsp;  // the nodes finish at different times
  o.straggler_factor = 3;                    // node 0 (n0, the leader) finishes last
  return o;
}

}  // namespace

TEST_CASE("consensus: every finished node ends with the average of the final models",
          "[node][consensus]") {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u}) {
    INFO("seed " << seed);
    Mesh mesh(ConsensusMesh(seed));
    mesh.Start();
    mesh.RunUntil(30000);
    std::set<uint32_t> crcs;
    std::vector<const std::vector<float>*> finals;
    for (size_t i = 0; i < mesh.size(); ++i) {
      REQUIRE(mesh.finished(i));
      CHECK(mesh.consensus_adoptions(i) >= 1);
      crcs.insert(mesh.params_crc(i));
      finals.push_back(&mesh.final_params(i));
      const auto v = mesh.node(i).consensus();
      CHECK(v.participants == 4);
      CHECK(v.leader == "n0");
      CHECK(v.state == (i == 0 ? meshtrain::node::ConsensusPhase::kServing
                               : meshtrain::node::ConsensusPhase::kAdopted));
    }
    CHECK(crcs.size() == 1);
    // Bit for bit the plain average of the four final models, in the leader's order (by name).
    CHECK(*crcs.begin() ==
          meshtrain::learn::ParamsCrc32(meshtrain::learn::AverageModels(finals).data(),
                                        finals.front()->size()));
    // The final models differed (the average is not one of them).
    std::set<uint32_t> own;
    for (auto* f : finals) own.insert(meshtrain::learn::ParamsCrc32(f->data(), f->size()));
    CHECK(own.size() == 4);
    CHECK(own.count(*crcs.begin()) == 0);
    CHECK(mesh.loss(1) < 0.05);
  }
}

TEST_CASE("consensus: the leader failing during it leaves the others agreeing",
          "[node][consensus]") {
  for (int64_t crash_after : {0, 5, 40, 200}) {
    INFO("leader crashes " << crash_after << " ms after the last node finished");
    Mesh mesh(ConsensusMesh(7));
    mesh.Start();
    // Until the leader (the straggler) finishes: then every node has and the consensus starts.
    for (int i = 0; i < 3000 && !mesh.finished(0); ++i) mesh.RunUntil(mesh.now() + 10);
    REQUIRE(mesh.finished(0));
    mesh.RunUntil(mesh.now() + crash_after);
    mesh.Crash(0);
    mesh.RunUntil(mesh.now() + 30000);  // SWIM declares n0 failed within a few seconds
    std::set<uint32_t> crcs;
    for (size_t i = 1; i < mesh.size(); ++i) {
      crcs.insert(mesh.params_crc(i));
      const auto v = mesh.node(i).consensus();
      CHECK(v.leader == "n1");
      CHECK(v.participants == 3);
      CHECK(v.state == (i == 1 ? meshtrain::node::ConsensusPhase::kServing
                               : meshtrain::node::ConsensusPhase::kAdopted));
    }
    CHECK(crcs.size() == 1);
  }
}

TEST_CASE("consensus: a node that failed while training is waited for up to the hold",
          "[node][consensus]") {
  // n3 crashes at step 10 of 60 and does not come back: the three others finish, wait for it
  // (it may be restarted with its --data-dir) until the hold has passed, then agree without it.
  // With no hold they agree as soon as they finished.
  for (int64_t hold : {0, 20000}) {
    INFO("hold " << hold << " ms");
    MeshOptions o = ConsensusMesh(3);
    o.straggler_factor = 1;
    o.consensus_hold_ms = hold;
    Mesh mesh(o);
    mesh.Start();
    for (int i = 0; i < 3000 && mesh.step(3) < 10; ++i) mesh.RunUntil(mesh.now() + 10);
    REQUIRE(mesh.step(3) >= 10);
    mesh.Crash(3);
    const int64_t crashed_at = mesh.now();
    auto all_finished = [&] { return mesh.finished(0) && mesh.finished(1) && mesh.finished(2); };
    for (int i = 0; i < 3000 && !all_finished(); ++i) mesh.RunUntil(mesh.now() + 10);
    REQUIRE(all_finished());
    mesh.RunUntil(mesh.now() + 5000);  // n3 is declared failed within a few seconds
    REQUIRE(mesh.now() < crashed_at + 19000);
    for (size_t i = 0; i < 3; ++i) {
      const auto v = mesh.node(i).consensus();
      if (hold == 0) {
        CHECK(v.awaiting.empty());
        CHECK(mesh.consensus_adoptions(i) == 1);
      } else {
        CHECK(v.awaiting == std::vector<std::string>{"n3"});
        CHECK(mesh.consensus_adoptions(i) == 0);
      }
    }
    mesh.RunUntil(crashed_at + hold + 10000);
    std::set<uint32_t> crcs;
    for (size_t i = 0; i < 3; ++i) {
      const auto v = mesh.node(i).consensus();
      CHECK(v.awaiting.empty());
      CHECK(v.participants == 3);
      CHECK(mesh.consensus_adoptions(i) == 1);
      crcs.insert(mesh.params_crc(i));
    }
    CHECK(crcs.size() == 1);
  }
}

TEST_CASE("consensus: a node alone adopts its own final model", "[node][consensus]") {
  MeshOptions o = ConsensusMesh(1);
  o.nodes = 1;
  Mesh mesh(o);
  mesh.Start();
  mesh.RunUntil(20000);
  REQUIRE(mesh.finished(0));
  // Alone: the average of one model is that model.
  CHECK(mesh.consensus_adoptions(0) == 1);
  CHECK(mesh.params_crc(0) ==
        meshtrain::learn::ParamsCrc32(mesh.final_params(0).data(), mesh.final_params(0).size()));
}

TEST_CASE("consensus: the status names of the phases stay as they were", "[node][consensus]") {
  using meshtrain::node::ConsensusPhase;
  using meshtrain::node::ConsensusPhaseName;
  CHECK(std::string(ConsensusPhaseName(ConsensusPhase::kOff)) == "off");
  CHECK(std::string(ConsensusPhaseName(ConsensusPhase::kTraining)) == "training");
  CHECK(std::string(ConsensusPhaseName(ConsensusPhase::kWaiting)) == "waiting");
  CHECK(std::string(ConsensusPhaseName(ConsensusPhase::kCollecting)) == "collecting");
  CHECK(std::string(ConsensusPhaseName(ConsensusPhase::kReducing)) == "reducing");
  CHECK(std::string(ConsensusPhaseName(ConsensusPhase::kServing)) == "serving");
  CHECK(std::string(ConsensusPhaseName(ConsensusPhase::kAdopted)) == "adopted");
}

TEST_CASE("consensus: a provisional result is settled once, or after the give-up",
          "[node][consensus]") {
  // finish() returns a result only once TakeSettled said so: the leader's result averages as
  // many participants as our view counts, or our view never agreed within the give-up.
  using meshtrain::node::Consensus;
  auto model = [](float v) { return std::make_shared<const std::vector<float>>(4, v); };
  Consensus cs;
  cs.SetParticipants({"a", "b", "c"}, {}, /*spectator=*/false, 0);  // we are b; a leads
  cs.OnOffer("a", model(1), /*covers=*/2);                          // the leader missed c
  REQUIRE(cs.AdoptOffer());
  CHECK_FALSE(cs.Settled());
  CHECK_FALSE(cs.TakeSettled(1000, 30000));
  CHECK_FALSE(cs.TakeSettled(30999, 30000));
  CHECK(cs.TakeSettled(31000, 30000));  // given up waiting: final as it stands
  CHECK_FALSE(cs.TakeSettled(31001, 30000));
  cs.OnOffer("a", model(2), /*covers=*/3);  // the leader's next result covers all three
  REQUIRE(cs.AdoptOffer());
  CHECK(cs.TakeSettled(31002, 30000));
  CHECK_FALSE(cs.TakeSettled(31003, 30000));  // once per result
  // A view that shrinks to the leader's settles the result it holds.
  Consensus later;
  later.SetParticipants({"a", "b", "c"}, {}, false, 0);
  later.OnOffer("a", model(3), 2);
  REQUIRE(later.AdoptOffer());
  CHECK_FALSE(later.TakeSettled(100, 30000));
  later.SetParticipants({"a", "b"}, {}, false, 200);
  CHECK(later.TakeSettled(300, 30000));
}
