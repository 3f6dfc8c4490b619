// A node receiving streamed parameter transfers (unkeyed full snapshots, mixed chunk by chunk):
// every chunk is mixed once, the transfer is acknowledged once when its last chunk comes, and
// duplicates are ignored, for transfers of up to 64 chunks (a bit mask) and of more.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <variant>
#include <vector>

#include "node/node.h"

namespace meshtrain::node {
namespace {

constexpr uint32_t kTotal = 70;

struct Counts {
  int mixed = 0;  // MixChunk outputs
  int acks = 0;   // ParamAck frames
};

Counts Feed(Node& node, uint64_t round, uint32_t chunks, const std::vector<uint32_t>& order) {
  Counts c;
  const uint32_t per = kTotal / chunks;
  for (uint32_t k : order) {
    wire::ParamChunk chunk;
    chunk.round = round;
    chunk.step = 3;
    chunk.chunk = k;
    chunk.chunks = chunks;
    chunk.total = kTotal;
    chunk.offset = k * per;
    chunk.data.assign(k + 1 == chunks ? kTotal - k * per : per, 1.0f);
    wire::Frame f;
    f.sender = "b";
    f.body = std::move(chunk);
    node.Step(FrameIn{7, std::move(f)}, 10);
    for (Output& o : node.TakeOutput()) {
      if (std::holds_alternative<MixChunk>(o)) ++c.mixed;
      if (auto* sf = std::get_if<SendFrame>(&o)) {
        if (std::holds_alternative<wire::ParamAckMsg>(sf->msg.body)) ++c.acks;
      }
    }
  }
  return c;
}

TEST_CASE("streamed transfers: each chunk mixed once, one ack, duplicates ignored", "[node]") {
  NodeConfig cfg;
  cfg.name = "a";
  cfg.addr = "a";
  cfg.external_membership = true;
  cfg.training = true;
  cfg.barrier.policy = sync::Policy::kAsp;
  cfg.expected_params = kTotal;
  Node node(cfg, 0);
  node.Start(0);
  node.TakeOutput();
  PeerView b;
  b.name = "b";
  b.addr = "b";
  node.Step(b, 0);
  node.TakeOutput();

  std::mt19937 rng(5);
  uint64_t round = 0;
  for (uint32_t chunks : {70u, 2u, 70u, 35u}) {  // more than 64 chunks, then a few, and back
    ++round;
    std::vector<uint32_t> order(chunks);
    for (uint32_t k = 0; k < chunks; ++k) order[k] = k;
    std::shuffle(order.begin() + 1, order.end(), rng);  // chunk 0 first, the rest in any order
    std::vector<uint32_t> with_dups = order;
    with_dups.insert(with_dups.begin() + chunks / 2, order.begin() + 1,
                     order.begin() + 1 + chunks / 4);
    const Counts c = Feed(node, round, chunks, with_dups);
    CHECK(c.mixed == static_cast<int>(chunks));
    CHECK(c.acks == 1);
    // Late duplicates of the completed round: nothing.
    const Counts late = Feed(node, round, chunks, {chunks - 1, 0});
    CHECK(late.mixed == 0);
    CHECK(late.acks == 0);
  }
}

}  // namespace
}  // namespace meshtrain::node
