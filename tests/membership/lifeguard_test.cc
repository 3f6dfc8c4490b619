// Unit tests of the Lifeguard arithmetic, the dissemination queue and the size estimates.
#include "membership/lifeguard.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "gossip/broadcast_queue.h"
#include "membership/swim.h"
#include "membership/types.h"

namespace meshtrain::membership {
namespace {

using gossip::BroadcastQueue;

TEST_CASE("suspicion min timeout follows SuspicionMult x max(1, log10 n) x interval",
          "[membership][lifeguard]") {
  CHECK(SuspicionMinTimeout(4, 1, 1000) == 4000);
  CHECK(SuspicionMinTimeout(4, 5, 1000) == 4000);  // log10(5) < 1: floored at 1
  CHECK(SuspicionMinTimeout(4, 10, 1000) == 4000);
  CHECK(SuspicionMinTimeout(4, 100, 1000) == 8000);
  CHECK(SuspicionMinTimeout(3, 1000, 1000) == 9000);
  CHECK(SuspicionMinTimeout(6, 100, 5000) == 60000);
}

TEST_CASE("suspicion timeout shrinks from max to min with confirmations",
          "[membership][lifeguard]") {
  const TimeMs min = 8000;
  const TimeMs max = 6 * min;
  CHECK(SuspicionTimeout(0, 2, min, max) == max);
  // memberlist: max - (max - min) * log(c + 1) / log(K + 1)
  const auto one = static_cast<TimeMs>(
      std::floor(double(max) - double(max - min) * std::log(2.0) / std::log(3.0)));
  CHECK(SuspicionTimeout(1, 2, min, max) == one);
  CHECK(one < max);
  CHECK(one > min);
  CHECK(SuspicionTimeout(2, 2, min, max) == min);
  CHECK(SuspicionTimeout(5, 2, min, max) == min);  // floored at min
  CHECK(SuspicionTimeout(0, 0, min, max) == min);  // no confirmations expected
}

TEST_CASE("awareness score saturates in [0, max-1] and scales timeouts",
          "[membership][lifeguard]") {
  Awareness a(8);
  CHECK(a.score() == 0);
  a.ApplyDelta(-1);
  CHECK(a.score() == 0);
  a.ApplyDelta(3);
  CHECK(a.score() == 3);
  CHECK(a.Scale(1000) == 4000);
  a.ApplyDelta(100);
  CHECK(a.score() == 7);
  CHECK(a.Scale(500) == 4000);
  a.ApplyDelta(-2);
  CHECK(a.score() == 5);
}

TEST_CASE("broadcast queue keeps the newest update per member and slot", "[membership][queue]") {
  BroadcastQueue q;
  q.Queue(AliveMsg{"b", "b:1", 1, {}});
  q.Queue(SuspectMsg{"b", 1, "c"});
  q.Queue(ProgressMsg{"b", 10, {}});
  q.Queue(ProgressMsg{"b", 11, {}});
  CHECK(q.size() == 2);  // one membership update and one progress update about b
  std::vector<Update> out;
  q.Fill(10000, 5, &out);
  REQUIRE(out.size() == 2);
  // Newest first among equally transmitted updates.
  REQUIRE(std::holds_alternative<ProgressMsg>(out[0]));
  CHECK(std::get<ProgressMsg>(out[0]).step == 11);
  REQUIRE(std::holds_alternative<SuspectMsg>(out[1]));
}

TEST_CASE("broadcast queue transmits each update exactly `limit` times, least-sent first",
          "[membership][queue]") {
  BroadcastQueue q;
  q.Queue(AliveMsg{"x", "x:1", 0, {}});
  std::vector<Update> out;
  q.Fill(10000, 3, &out);
  q.Queue(AliveMsg{"y", "y:1", 0, {}});
  // Room for one update only: the never-sent y goes before x.
  out.clear();
  q.Fill(EstimateSize(AliveMsg{"y", "y:1", 0, {}}), 3, &out);
  REQUIRE(out.size() == 1);
  CHECK(std::get<AliveMsg>(out[0]).name == "y");
  int x_sent = 1;
  int y_sent = 1;
  for (int round = 0; round < 10; ++round) {
    out.clear();
    q.Fill(10000, 3, &out);
    for (const Update& u : out) {
      (std::get<AliveMsg>(u).name == "x" ? x_sent : y_sent)++;
    }
  }
  CHECK(x_sent == 3);
  CHECK(y_sent == 3);
  CHECK(q.empty());
}

TEST_CASE("broadcast queue never exceeds the byte budget", "[membership][queue]") {
  BroadcastQueue q;
  for (int i = 0; i < 200; ++i) {
    q.Queue(AliveMsg{"member-" + std::to_string(i), "10.1.2." + std::to_string(i) + ":7950",
                     static_cast<uint32_t>(i), Meta{"10.1.2.3:7960", true, 1.5f, 2.5f, {}}});
  }
  for (size_t budget : {0, 50, 200, 1000, 1280}) {
    std::vector<Update> out;
    const size_t used = q.Fill(budget, 4, &out);
    size_t sum = 0;
    for (const Update& u : out) sum += EstimateSize(u);
    CHECK(sum == used);
    CHECK(used <= budget);
    if (budget >= 1000) CHECK(out.size() >= 4);
  }
}

TEST_CASE("size estimates grow with string lengths", "[membership][types]") {
  const size_t small = EstimateSize(AliveMsg{"a", "a:1", 0, {}});
  const size_t large = EstimateSize(AliveMsg{std::string(100, 'a'), "a:1", 0, {}});
  CHECK(large == small + 99);
  CHECK(EstimateSize(ProgressMsg{"a", 5, {}}) < small);
  Packet p;
  p.from = "n1";
  p.from_addr = "10.0.0.1:7950";
  const size_t bare = EstimatePacketOverhead(p);
  p.primary = IndirectPingMsg{1, "target", "10.0.0.2:7950", true};
  CHECK(EstimatePacketOverhead(p) > bare + 6 + 13);
}

TEST_CASE("profiles carry memberlist's values", "[membership][config]") {
  const Config lan = Config::Lan();
  CHECK(lan.probe_interval == 1000);
  CHECK(lan.probe_timeout == 500);
  CHECK(lan.indirect_checks == 3);
  CHECK(lan.suspicion_mult == 4);
  CHECK(lan.retransmit_mult == 4);
  CHECK(lan.push_pull_interval == 30000);
  CHECK(lan.gossip_interval == 200);
  const Config wan = Config::Wan();
  CHECK(wan.probe_interval == 5000);
  CHECK(wan.probe_timeout == 3000);
  CHECK(wan.suspicion_mult == 6);
  CHECK(wan.push_pull_interval == 60000);
  CHECK(wan.gossip_interval == 500);
  const Config local = Config::Local();
  CHECK(local.probe_interval == 1000);
  CHECK(local.probe_timeout == 200);
  CHECK(local.indirect_checks == 1);
  CHECK(local.suspicion_mult == 3);
  CHECK(local.retransmit_mult == 2);
  CHECK(local.push_pull_interval == 15000);
  CHECK(local.gossip_interval == 100);
  for (const Config& c : {lan, wan, local}) CHECK(c.suspicion_max_timeout_mult == 6);
  REQUIRE(Config::Profile("wan").has_value());
  CHECK(Config::Profile("wan")->probe_interval == 5000);
  CHECK_FALSE(Config::Profile("moon").has_value());
  CHECK(std::string(StatusName(Status::kLeft)) == "left");
  CHECK(std::string(StatusName(Status::kFailed)) == "failed");
}

}  // namespace
}  // namespace meshtrain::membership
