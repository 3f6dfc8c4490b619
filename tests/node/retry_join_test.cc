// Retry-join in the node core: a retry asks the driver to resolve the peers again
// (RetryJoin), the answer (JoinCmd tag 0) starts push-pulls without a CommandDone, and
// --retry-max ends in JoinGaveUp. Virtual time; no sockets.
#include <catch2/catch.hpp>

#include "node/node.h"

namespace meshtrain::node {
namespace {

NodeConfig Config(int retry_max) {
  NodeConfig c;
  c.name = "a";
  c.addr = "127.0.1.1:7950";
  c.data_addr = c.addr;
  c.membership = membership::Config::Local();
  c.seed = 1;
  c.training = false;
  c.join = {"127.0.1.2:7950"};
  c.retry_join = true;
  c.retry_join_interval_ms = 1000;
  c.retry_join_max = retry_max;
  return c;
}

template <typename T>
std::vector<T> Take(Node& n) {
  std::vector<T> out;
  for (auto& o : n.TakeOutput()) {
    if (auto* t = std::get_if<T>(&o)) out.push_back(*t);
  }
  return out;
}

// Runs the node's deadlines up to `until` and returns the outputs of type T.
template <typename T>
std::vector<T> RunUntil(Node& n, TimeMs* now, TimeMs until) {
  std::vector<T> out;
  for (int guard = 0; guard < 100000 && *now < until; ++guard) {
    *now = std::min(until, std::max(*now + 1, n.NextDeadline()));
    n.Tick(*now);
    for (auto& t : Take<T>(n)) out.push_back(t);
  }
  return out;
}

}  // namespace

TEST_CASE("retry-join asks the driver to resolve again, then gives up at --retry-max",
          "[node][retry]") {
  TimeMs now = 0;
  Node n(Config(3), now);
  n.Start(now);
  n.TakeOutput();
  auto retries = RunUntil<RetryJoin>(n, &now, 2500);
  REQUIRE(retries.size() == 2);
  CHECK(retries[0].attempt == 2);
  CHECK_FALSE(retries[0].last);
  CHECK(retries[1].attempt == 3);
  CHECK(retries[1].last);
  // The driver's answer: push-pulls start, and nobody gets a CommandDone for tag 0.
  n.Step(JoinCmd{0, {"127.0.1.2:7950", "127.0.1.3:7950"}}, now);
  int connects = 0, dones = 0;
  for (auto& o : n.TakeOutput()) {
    connects += std::holds_alternative<Connect>(o);
    dones += std::holds_alternative<CommandDone>(o);
  }
  CHECK(connects >= 2);
  CHECK(dones == 0);
  auto gave_up = RunUntil<JoinGaveUp>(n, &now, 4000);
  REQUIRE(gave_up.size() == 1);
  CHECK(gave_up[0].attempts == 3);
  CHECK(RunUntil<RetryJoin>(n, &now, 10000).empty());
}

TEST_CASE("retry-join without a limit keeps going; a leave stops it", "[node][retry]") {
  TimeMs now = 0;
  Node n(Config(0), now);
  n.Start(now);
  n.TakeOutput();
  CHECK(RunUntil<RetryJoin>(n, &now, 10500).size() == 10);
  n.Step(LeaveCmd{}, now);
  n.TakeOutput();
  n.Step(JoinCmd{0, {"127.0.1.2:7950"}}, now);  // a late answer while leaving: ignored
  for (auto& o : n.TakeOutput()) CHECK_FALSE(std::holds_alternative<CommandDone>(o));
  CHECK(RunUntil<RetryJoin>(n, &now, 20000).empty());
}

}  // namespace meshtrain::node
