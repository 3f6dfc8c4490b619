// The node's small owned parts on their own: the parameter connections it keeps open
// (node/data_conns.h) and the join-with-state attempt (node/state_fetch.h).
#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "node/data_conns.h"
#include "node/state_fetch.h"

namespace meshtrain::node {
namespace {

TEST_CASE("data conns: one per peer, reused, the least recently used idle one evicted",
          "[node][parts]") {
  DataConns c;
  CHECK_FALSE(c.Find("a").has_value());
  const auto never_busy = [](ConnId) { return false; };
  CHECK_FALSE(c.EvictIdle(never_busy).has_value());  // below the limit: nothing goes
  for (size_t i = 0; i < DataConns::kMax; ++i) {
    c.Add("p" + std::to_string(100 + i), 1000 + i, 10 + i);
  }
  REQUIRE(c.Use("p100", 50) == ConnId{1000});  // p100 used last now; p101 is the oldest
  // p101 carries a transfer: the next oldest idle one, p102, goes.
  const auto busy = [](ConnId conn) { return conn == 1001; };
  CHECK(c.EvictIdle(busy) == ConnId{1002});
  CHECK_FALSE(c.Find("p102").has_value());
  CHECK(c.Find("p101") == ConnId{1001});
  CHECK_FALSE(c.EvictIdle(busy).has_value());  // below the limit again
  // A dropped connection is forgotten; dropping an old id for a peer that reconnected keeps
  // the new one.
  c.Add("p101", 2000, 60);
  c.Drop(1001);
  CHECK(c.Find("p101") == ConnId{2000});
  c.Drop(2000);
  CHECK_FALSE(c.Find("p101").has_value());
}

TEST_CASE(
    "state fetch: the most advanced peer, the slowest one's step, retries until the "
    "deadline",
    "[node][parts]") {
  StateFetch::Choice choice;
  CHECK(choice.best.empty());
  choice.Consider("b", "addr-b", 40, false);
  choice.Consider("a", "addr-a", 40, true);  // a tie goes to the first by name
  choice.Consider("c", "addr-c", 25, true);
  CHECK(choice.best == "a");
  CHECK(choice.best_addr == "addr-a");
  CHECK(choice.best_step == 40);
  CHECK(choice.min_step == 25);
  CHECK(choice.any_step_known);
  // A peer whose step is not learned yet (told of by gossip before any metadata) is not the
  // slowest: taken as 0, a node resumed at step 100 went on from there, thousands of steps behind
  // the model it took over (faults/test_elastic_restart).
  StateFetch::Choice unknown;
  unknown.Consider("er2", "addr-2", 2811, true);
  unknown.Consider("er3", "addr-3", 0, false);
  CHECK(unknown.min_step == 2811);
  StateFetch g;
  g.Begin(1, unknown, 100, 0, 1000);
  CHECK(g.adopt_step() == 2811);
  StateFetch::Choice none;  // no step learned at all: our own
  none.Consider("x", "addr-x", 0, false);
  g.Begin(2, none, 100, 0, 1000);
  CHECK(g.adopt_step() == 100);

  StateFetch f;
  f.Arm(1000, 5000);
  f.Arm(3000, 5000);  // the first call sets the deadline of the whole attempt
  CHECK(f.deadline() == 6000);
  f.Begin(7, choice, 30, 2000, 1000);  // the answer may take 1 s: within the deadline
  CHECK(f.deadline() == 6000);
  CHECK(f.conn() == 7);
  CHECK(f.from() == "a");
  CHECK(f.adopt_step() == 30);  // never below our own step
  f.Begin(8, choice, 10, 2000, 1000);
  CHECK(f.adopt_step() == 25);
  // Closed early: tried again after kRetryMs while the deadline leaves time for two more.
  CHECK(f.Closed(2000));
  CHECK(f.retry_at() == 2000 + StateFetch::kRetryMs);
  CHECK_FALSE(f.Closed(6000 - 2 * StateFetch::kRetryMs));
  CHECK(f.ClosedOnUs("a"));  // the next choice among finished peers prefers another
  CHECK_FALSE(f.ClosedOnUs("c"));
  // A peer that answers with its next snapshot, a sync interval away: the deadline moves out.
  f.Begin(9, choice, 10, 5500, 4000);
  CHECK(f.deadline() == 9500);
}

}  // namespace
}  // namespace meshtrain::node
