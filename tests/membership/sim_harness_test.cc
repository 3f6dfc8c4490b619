// Tests of the generic virtual-time harness: clock ordering and the simulated network's
// latency, loss, blocking, partitions, down endpoints and reproducibility.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sim/sim_network.h"
#include "sim/virtual_clock.h"

namespace meshtrain::sim {
namespace {

TEST_CASE("virtual clock runs events by deadline, then by scheduling order", "[sim][clock]") {
  VirtualClock clock(100);
  std::vector<int> order;
  clock.schedule(300, [&] { order.push_back(3); });
  clock.schedule(200, [&] { order.push_back(1); });
  clock.schedule(200, [&] { order.push_back(2); });
  clock.schedule(50, [&] {  // the past is clamped to now
    order.push_back(0);
    clock.schedule_after(150, [&] { order.push_back(4); });  // lands after the 200s
  });
  CHECK(clock.next_time() == 100);
  while (clock.run_next()) {
  }
  CHECK(order == std::vector<int>{0, 1, 2, 4, 3});
  CHECK(clock.now() == 300);
  CHECK(clock.events_run() == 5);
  clock.run_until(1000);
  CHECK(clock.now() == 1000);
}

TEST_CASE("sim network delivers after latency within the jitter bound", "[sim][network]") {
  VirtualClock clock;
  SimNetwork net(&clock, 7);
  net.set_default_latency({5, 10});
  std::vector<TimeMs> arrivals;
  for (int i = 0; i < 100; ++i) {
    CHECK(net.send_datagram("a", "b", 10, [&] { arrivals.push_back(clock.now()); }));
  }
  while (clock.run_next()) {
  }
  REQUIRE(arrivals.size() == 100);
  for (TimeMs t : arrivals) {
    CHECK(t >= 5);
    CHECK(t <= 15);
  }
  CHECK(net.stats().datagrams_delivered == 100);
}

TEST_CASE("sim network loss is seeded and close to the configured rate", "[sim][network]") {
  auto run = [](uint64_t seed) {
    VirtualClock clock;
    SimNetwork net(&clock, seed);
    net.set_loss(0.1);
    int delivered = 0;
    for (int i = 0; i < 10000; ++i) net.send_datagram("a", "b", 1, [&] { ++delivered; });
    while (clock.run_next()) {
    }
    return delivered;
  };
  const int d = run(42);
  CHECK(d == run(42));  // reproducible
  CHECK(d > 8800);
  CHECK(d < 9200);
  VirtualClock clock;
  SimNetwork net(&clock, 1);
  net.set_link_loss("a", "b", 1.0);
  int delivered = 0;
  for (int i = 0; i < 10; ++i) net.send_datagram("a", "b", 1, [&] { ++delivered; });
  for (int i = 0; i < 10; ++i) net.send_datagram("b", "a", 1, [&] { ++delivered; });
  while (clock.run_next()) {
  }
  CHECK(delivered == 10);
}

TEST_CASE("sim network blocks one way, partitions groups and drops down endpoints",
          "[sim][network]") {
  VirtualClock clock;
  SimNetwork net(&clock, 1);
  net.block("a", "b");
  CHECK_FALSE(net.reachable("a", "b"));
  CHECK(net.reachable("b", "a"));
  net.unblock("a", "b");
  net.partition({{"a", "b"}, {"c"}});
  CHECK(net.reachable("a", "b"));
  CHECK_FALSE(net.reachable("a", "c"));
  CHECK_FALSE(net.reachable("c", "b"));
  CHECK(net.reachable("c", "z"));  // unlisted endpoints reach everyone
  net.heal();
  CHECK(net.reachable("a", "c"));
  // A datagram in flight to an endpoint that goes down is lost.
  int delivered = 0;
  net.send_datagram("a", "c", 1, [&] { ++delivered; });
  net.set_down("c", true);
  while (clock.run_next()) {
  }
  CHECK(delivered == 0);
  CHECK(net.stats().datagrams_dropped == 1);
}

TEST_CASE("sim network streams are reliable but fail across partitions", "[sim][network]") {
  VirtualClock clock;
  SimNetwork net(&clock, 3);
  net.set_loss(1.0);  // streams ignore datagram loss
  int ok = 0;
  int failed = 0;
  net.send_stream(
      "a", "b", 100, [&] { ++ok; }, [&] { ++failed; });
  net.block("b", "a");  // a stream needs both directions
  net.send_stream(
      "a", "b", 100, [&] { ++ok; }, [&] { ++failed; });
  while (clock.run_next()) {
  }
  // The first stream's path broke while in flight, too.
  CHECK(ok == 0);
  CHECK(failed == 2);
  net.unblock_all();
  net.send_stream(
      "a", "b", 100, [&] { ++ok; }, [&] { ++failed; });
  while (clock.run_next()) {
  }
  CHECK(ok == 1);
}

}  // namespace
}  // namespace meshtrain::sim
