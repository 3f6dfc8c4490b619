// Peers waiting for this node's step (ProgressQuery.need) are watchers: answered once, when the
// node gets there, instead of at once. bsp/ssp/wbsp rely on that answer as pbsp/pssp
// do, and in a mesh of more than 1024 every peer may wait for one node, so the watchers are
// bounded by the barrier's view (at least 1024), and a query that finds no place is answered at
// once: its sender is never left with neither answer.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "node/node.h"

namespace meshtrain::node {
namespace {

struct Replies {
  size_t at_once = 0;
  size_t watched = 0;
};

Replies Count(Node& n) {
  Replies r;
  for (const Output& o : n.TakeOutput()) {
    const auto* sd = std::get_if<SendDatagram>(&o);
    if (sd == nullptr) continue;
    if (const auto* rep = std::get_if<wire::ProgressReply>(&sd->msg.body)) {
      (rep->watched ? r.watched : r.at_once)++;
    }
  }
  return r;
}

std::string Addr(size_t i) {
  return "10.1." + std::to_string(i / 250) + "." + std::to_string(1 + i % 250) + ":7950";
}

// A training node at step 0 with an external view of `view` training peers p0..; then `askers`
// peers (the view's first ones, then strangers) ask it for need 1. Returns the answers sent at
// once, then those sent when it completes step 1.
std::pair<Replies, Replies> Ask(sync::Policy policy, size_t view, size_t askers) {
  NodeConfig c;
  c.name = "n0";
  c.addr = "10.0.0.1:7950";
  c.data_addr = c.addr;
  c.external_membership = true;
  c.training = true;
  c.barrier.policy = policy;
  c.barrier.sample = 10;
  c.min_peers = 0;
  c.seed = 3;
  Node n(c, 0);
  n.Start(0);
  TimeMs now = 1;
  for (size_t i = 0; i < view; ++i) {
    n.Step(PeerView{"p" + std::to_string(i), Addr(i)}, now);
  }
  n.TakeOutput();
  for (size_t i = 0; i < askers; ++i) {
    wire::Datagram dg;
    dg.sender = "p" + std::to_string(i);
    dg.body = wire::ProgressQuery{static_cast<uint32_t>(i + 1), 1, 1};
    n.Step(DatagramIn{Addr(i), std::move(dg)}, now);
  }
  const Replies first = Count(n);
  TrainerProgress p;
  p.step = 1;
  n.Step(p, ++now);
  return {first, Count(n)};
}

TEST_CASE("watchers: a query below need is answered when the node gets there, not at once",
          "[node][barrier][watchers]") {
  for (sync::Policy policy : {sync::Policy::kPbsp, sync::Policy::kBsp, sync::Policy::kWbsp}) {
    INFO(sync::PolicyName(policy));
    const auto [first, later] = Ask(policy, 20, 20);
    CHECK(first.at_once == 0);
    CHECK(later.watched == 20);
  }
  // dssp's controller needs the steps below s_L as they come: answered at once, and again.
  const auto [first, later] = Ask(sync::Policy::kDssp, 20, 20);
  CHECK(first.at_once == 20);
  CHECK(later.watched == 20);
}

TEST_CASE("watchers: beyond 1024 the view bounds them, and a query finding no place is answered",
          "[node][barrier][watchers]") {
  // A small view: 1024 places; the 6 queries beyond them are answered at once.
  {
    const auto [first, later] = Ask(sync::Policy::kPbsp, 3, 1030);
    CHECK(first.at_once == 6);
    CHECK(later.watched == 1024);
  }
  // bsp in a mesh of 1101: each of the 1100 peers may wait for this node, and each is answered
  // when it gets there (with 1024 places 76 of them would wait for the probe timeout).
  {
    const auto [first, later] = Ask(sync::Policy::kBsp, 1100, 1100);
    CHECK(first.at_once == 0);
    CHECK(later.watched == 1100);
  }
}

}  // namespace
}  // namespace meshtrain::node
