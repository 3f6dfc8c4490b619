// Receiver selection: all/random basics, exact SELMCAST against a brute-force optimum, the
// greedy approximation's quality at 200 nodes, and the cost of planning for 1000 nodes.
#include "sync/selection.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace meshtrain::sync {
namespace {

std::vector<std::string> Names(size_t n) {
  std::vector<std::string> v;
  for (size_t i = 0; i < n; ++i) v.push_back("n" + std::to_string(i));
  return v;
}

// Random capacities; drawn from a small set half the time so ties are common.
std::vector<NodeCapacity> RandomCaps(size_t n, Rng& rng) {
  static const double kLevels[] = {1, 2, 3, 5, 10, 20, 50};
  const bool discrete = rng() % 2 == 0;
  std::vector<NodeCapacity> caps;
  for (size_t i = 0; i < n; ++i) {
    NodeCapacity c;
    c.name = "n" + std::to_string(i);
    auto draw = [&] {
      return discrete ? kLevels[rng() % 7]
                      : 0.5 + std::uniform_real_distribution<double>(0, 100)(rng);
    };
    c.uplink_mbps = draw();
    c.downlink_mbps = draw();
    caps.push_back(c);
  }
  return caps;
}

// The best bottleneck rate over every assignment in which each sender has exactly d receivers
// (more receivers never raise the rate), by exhaustive search with branch-and-bound.
double BruteForceRate(const std::vector<NodeCapacity>& caps, size_t d) {
  const size_t n = caps.size();
  if (n < 2 || d == 0) return 0;
  double up = caps[0].uplink_mbps / double(d);
  for (const auto& c : caps) up = std::min(up, c.uplink_mbps / double(d));
  std::vector<size_t> incoming(n, 0);
  double best = 0;
  std::function<void(size_t, double)> rec = [&](size_t i, double rate) {
    if (rate <= best) return;
    if (i == n) {
      best = rate;
      return;
    }
    // Every d-subset of the others, as bit masks.
    for (uint32_t mask = 0; mask < (1u << n); ++mask) {
      if (mask & (1u << i) || static_cast<size_t>(__builtin_popcount(mask)) != d) continue;
      double r = rate;
      for (size_t j = 0; j < n; ++j) {
        if (mask & (1u << j)) r = std::min(r, caps[j].downlink_mbps / double(++incoming[j]));
      }
      rec(i + 1, r);
      for (size_t j = 0; j < n; ++j) {
        if (mask & (1u << j)) --incoming[j];
      }
      if (best >= up) return;  // cannot do better than the tightest uplink
    }
  };
  rec(0, up);
  return best;
}

// Structural checks every plan must pass; returns the number of senders below demand.
size_t CheckPlan(const Assignment& plan, const std::vector<NodeCapacity>& caps) {
  const size_t n = caps.size();
  REQUIRE(plan.receivers.size() == n);
  std::vector<size_t> incoming(n, 0);
  size_t short_senders = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& rs = plan.receivers[i];
    REQUIRE(std::set<size_t>(rs.begin(), rs.end()).size() == rs.size());  // no duplicates
    REQUIRE(std::find(rs.begin(), rs.end(), i) == rs.end());              // no self-send
    if (rs.size() < plan.demand) ++short_senders;
    if (!rs.empty()) {
      REQUIRE(double(rs.size()) * plan.rate_mbps <= caps[i].uplink_mbps * (1 + 1e-9));
    }
    for (size_t j : rs) ++incoming[j];
  }
  for (size_t j = 0; j < n; ++j) {
    REQUIRE(double(incoming[j]) * plan.rate_mbps <= caps[j].downlink_mbps * (1 + 1e-9));
  }
  return short_senders;
}

TEST_CASE("selection policy names parse and print", "[sync][select]") {
  for (SelectPolicy p : {SelectPolicy::kAll, SelectPolicy::kRandom, SelectPolicy::kSelmcast}) {
    REQUIRE(ParseSelectPolicy(SelectPolicyName(p)) == p);
  }
  REQUIRE_FALSE(ParseSelectPolicy("mcast").has_value());
}

TEST_CASE("all selects every live peer; random selects P distinct uniformly", "[sync][select]") {
  Rng rng(1);
  const std::vector<std::string> cands = {"a", "me", "b", "c", "b", "d", "e"};
  REQUIRE(Select(SelectPolicy::kAll, "me", cands, 2, {}, rng) ==
          std::vector<std::string>{"a", "b", "c", "d", "e"});
  std::map<std::string, int> counts;
  constexpr int kRounds = 5000;
  for (int r = 0; r < kRounds; ++r) {
    auto got = Select(SelectPolicy::kRandom, "me", cands, 2, {}, rng);
    REQUIRE(got.size() == 2);
    REQUIRE(got[0] != got[1]);
    for (const auto& g : got) {
      REQUIRE(g != "me");
      ++counts[g];
    }
  }
  REQUIRE(counts.size() == 5);
  for (const auto& [name, c] : counts) {
    INFO(name);
    REQUIRE(c == Approx(kRounds * 2 / 5.0).epsilon(0.1));  // 2000 ± 10%
  }
  REQUIRE(Select(SelectPolicy::kRandom, "me", {"a", "b"}, 5, {}, rng).size() == 2);  // min(P, n)
  REQUIRE(Select(SelectPolicy::kRandom, "me", {}, 3, {}, rng).empty());
}

TEST_CASE("exact selmcast matches a brute-force optimum on small instances", "[sync][select]") {
  Rng gen(42);
  size_t instances = 0, with_extras = 0;
  for (int t = 0; t < 300; ++t) {
    const size_t n = 1 + gen() % 6;
    const size_t p = 1 + gen() % 4;
    const auto caps = RandomCaps(n, gen);
    Rng rng(gen());
    const Assignment plan = SolveSelmcastExact(caps, p, rng);
    const size_t d = n < 2 ? 0 : std::min(p, n - 1);
    INFO("instance " << t << " n=" << n << " P=" << p);
    REQUIRE(plan.exact);
    REQUIRE(plan.demand == d);
    const double brute = BruteForceRate(caps, d);
    REQUIRE(plan.rate_mbps == Approx(brute).epsilon(1e-9));
    REQUIRE(CheckPlan(plan, caps) == 0);  // every sender reaches ≥ min(P, n − 1) receivers
    if (d > 0) REQUIRE(BottleneckRate(plan, caps) >= brute * (1 - 1e-9));
    // Extras are maximal: no missing pair still fits at the rate on both ends.
    std::vector<size_t> incoming(n, 0);
    for (const auto& rs : plan.receivers) {
      for (size_t j : rs) ++incoming[j];
    }
    for (size_t i = 0; i < n && d > 0; ++i) {
      const auto& rs = plan.receivers[i];
      const bool up_room =
          double(rs.size() + 1) * plan.rate_mbps <= caps[i].uplink_mbps * (1 - 1e-9);
      for (size_t j = 0; j < n; ++j) {
        if (j == i || std::find(rs.begin(), rs.end(), j) != rs.end()) continue;
        const bool down_room =
            double(incoming[j] + 1) * plan.rate_mbps <= caps[j].downlink_mbps * (1 - 1e-9);
        REQUIRE_FALSE((up_room && down_room));
      }
    }
    if (plan.MeanFanout() > double(d)) ++with_extras;
    ++instances;
  }
  std::printf("[sync] exact selmcast == brute force on %zu instances (%zu with extra pairs)\n",
              instances, with_extras);
  REQUIRE(with_extras > 10);
}

TEST_CASE("selmcast randomises ties between rounds at the same optimal rate", "[sync][select]") {
  std::vector<NodeCapacity> caps;
  for (const auto& n : Names(8)) caps.push_back(NodeCapacity{n, 10, 10});
  Rng rng(3);
  std::set<std::vector<std::vector<size_t>>> distinct;
  for (int round = 0; round < 10; ++round) {
    const Assignment exact = SolveSelmcastExact(caps, 2, rng);
    REQUIRE(exact.rate_mbps == Approx(5.0));  // uplink 10 over 2 receivers
    REQUIRE(CheckPlan(exact, caps) == 0);
    distinct.insert(exact.receivers);
  }
  REQUIRE(distinct.size() >= 5);
  distinct.clear();
  for (int round = 0; round < 10; ++round) {
    const Assignment greedy = SolveSelmcastGreedy(caps, 2, rng);
    REQUIRE(greedy.rate_mbps == Approx(5.0));
    REQUIRE(CheckPlan(greedy, caps) == 0);
    distinct.insert(greedy.receivers);
  }
  REQUIRE(distinct.size() >= 5);
}

TEST_CASE("selmcast avoids weak downlinks and gives spare uplink extra receivers",
          "[sync][select]") {
  // n0 has a huge uplink; n4's downlink is tiny. Demand 2 each.
  std::vector<NodeCapacity> caps = {
      {"n0", 100, 10}, {"n1", 10, 10}, {"n2", 10, 10}, {"n3", 10, 10}, {"n4", 10, 1}};
  Rng rng(4);
  const Assignment plan = SolveSelmcastExact(caps, 2, rng);
  // 5 senders × 2 = 10 receptions over downlinks 10,10,10,10,1: at r = 5 the four strong
  // receivers take 2 each = 8 < 10; at r = 10/3 they take 3 each = 12 ≥ 10 (n4 takes 0).
  REQUIRE(plan.rate_mbps == Approx(10.0 / 3));
  REQUIRE(CheckPlan(plan, caps) == 0);
  for (size_t i = 0; i < 5; ++i) {
    REQUIRE(std::count(plan.receivers[i].begin(), plan.receivers[i].end(), 4u) == 0);
  }
  // At r = 10/3 the strong receivers have room for 12 receptions in all and the senders for
  // 15: the max-flow extras fill all 12.
  size_t total = 0;
  for (const auto& rs : plan.receivers) total += rs.size();
  REQUIRE(total == 12);
}

TEST_CASE("selmcast survives zero and non-finite capacities", "[sync][select]") {
  const double nan = std::nan("");
  std::vector<NodeCapacity> caps = {
      {"a", 0, 10}, {"b", 10, nan}, {"c", -1, 10}, {"d", 10, 10}, {"e", 1e300, 0}};
  Rng rng(12);
  for (const Assignment& plan :
       {SolveSelmcastExact(caps, 2, rng), SolveSelmcastGreedy(caps, 2, rng)}) {
    REQUIRE(plan.receivers.size() == 5);
    for (const auto& rs : plan.receivers) REQUIRE(rs.size() >= 2);
    REQUIRE(plan.rate_mbps > 0);
    REQUIRE(std::isfinite(plan.rate_mbps));
  }
}

TEST_CASE("receive load lowers the downlink a node is planned with", "[sync][select]") {
  BandwidthView bw;
  bw["a"] = NodeBandwidth{20, 40, 30};
  bw["b"] = NodeBandwidth{0, 0, 0};     // unknown: defaults
  bw["c"] = NodeBandwidth{5, 10, 100};  // overloaded: floored share
  SelmcastOptions opt;
  opt.default_mbps = 12.5;
  const auto caps = ResolveCapacities({"a", "b", "c", "d"}, bw, opt);
  REQUIRE(caps[0].uplink_mbps == 20);
  REQUIRE(caps[0].downlink_mbps == Approx(10));
  REQUIRE(caps[1].uplink_mbps == 12.5);
  REQUIRE(caps[1].downlink_mbps == 12.5);
  REQUIRE(caps[2].downlink_mbps == Approx(10 * opt.min_available_share));
  REQUIRE(caps[3].downlink_mbps == 12.5);  // missing from the view
}

TEST_CASE("Select(selmcast) returns this node's share of the global plan", "[sync][select]") {
  BandwidthView bw;
  Rng gen(5);
  const auto names = Names(6);
  for (const auto& n : names) {
    bw[n] = NodeBandwidth{1 + double(gen() % 20), 1 + double(gen() % 20), 0};
  }
  for (int round = 0; round < 20; ++round) {
    Rng rng(gen());
    Assignment plan;
    const auto mine = Select(SelectPolicy::kSelmcast, "n3", names, 2, bw, rng, {}, &plan);
    REQUIRE(mine == plan.ReceiversOf("n3"));
    REQUIRE(mine.size() >= 2);
    REQUIRE(std::find(mine.begin(), mine.end(), "n3") == mine.end());
    REQUIRE(plan.nodes.size() == 6);
    REQUIRE(plan.exact);
  }
  Rng rng(6);
  REQUIRE(Select(SelectPolicy::kSelmcast, "solo", {}, 3, bw, rng).empty());
  REQUIRE(Select(SelectPolicy::kSelmcast, "n0", {"n1"}, 3, bw, rng) ==
          std::vector<std::string>{"n1"});
}

// Instances where receivers, not the weakest uplink, bound the rate: strong uplinks and
// small, uneven downlinks.
std::vector<NodeCapacity> DownlinkBoundCaps(size_t n, Rng& rng) {
  static const double kDown[] = {1, 2, 3, 5, 8, 13};
  std::vector<NodeCapacity> caps;
  for (size_t i = 0; i < n; ++i) {
    caps.push_back(NodeCapacity{"n" + std::to_string(i),
                                60 + std::uniform_real_distribution<double>(0, 40)(rng),
                                kDown[rng() % 6] * (1 + 0.01 * double(rng() % 10))});
  }
  return caps;
}

TEST_CASE("greedy selmcast stays close to the exact optimum on 200-node instances",
          "[sync][select]") {
  Rng gen(7);
  double worst = 1.0;
  for (int t = 0; t < 8; ++t) {
    const bool down_bound = t % 2 == 1;
    const auto caps = down_bound ? DownlinkBoundCaps(200, gen) : RandomCaps(200, gen);
    const size_t p = 2 + t % 3;
    Rng r1(gen()), r2(gen());
    const Assignment exact = SolveSelmcastExact(caps, p, r1);
    const Assignment greedy = SolveSelmcastGreedy(caps, p, r2);
    REQUIRE(CheckPlan(exact, caps) == 0);
    REQUIRE(CheckPlan(greedy, caps) == 0);
    REQUIRE(greedy.rate_mbps <= exact.rate_mbps * (1 + 1e-9));  // exact is optimal
    const double ratio = greedy.rate_mbps / exact.rate_mbps;
    std::printf("[sync] 200 nodes %s P=%zu: exact r=%.4f fanout %.2f, greedy r=%.4f fanout %.2f\n",
                down_bound ? "downlink-bound" : "mixed", p, exact.rate_mbps, exact.MeanFanout(),
                greedy.rate_mbps, greedy.MeanFanout());
    worst = std::min(worst, ratio);
  }
  std::printf("[sync] greedy/exact worst bottleneck ratio on 200 nodes: %.4f\n", worst);
  REQUIRE(worst >= 0.9);  // the stated factor (measured: 1.0 on these instances)
}

TEST_CASE("selmcast plans 1000 nodes", "[sync][select]") {
  Rng gen(8);
  const auto names = Names(1000);
  BandwidthView bw;
  for (const auto& n : names) {
    bw[n] = NodeBandwidth{1 + double(gen() % 100), 1 + double(gen() % 100), double(gen() % 10)};
  }
  Rng rng(9);
  Assignment plan;
  const auto start = std::chrono::steady_clock::now();
  const auto mine = Select(SelectPolicy::kSelmcast, "n17", names, 3, bw, rng, {}, &plan);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("[sync] selmcast for 1000 nodes: %.2f ms (rate %.3f MB/s, mean fanout %.2f)\n", ms,
              plan.rate_mbps, plan.MeanFanout());
  REQUIRE_FALSE(plan.exact);
  REQUIRE(mine.size() >= 3);
  REQUIRE(CheckPlan(plan, ResolveCapacities(plan.nodes, bw)) == 0);
  // No bounds on the times: a test must not fail because the machine is slow (a 500 ms bound
  // failed under ASan beside the netbed tests, at 673 ms); they are printed for reference.

  // The largest exact instance with the default threshold, for reference.
  const auto small = std::vector<std::string>(names.begin(), names.begin() + 64);
  const auto t0 = std::chrono::steady_clock::now();
  Select(SelectPolicy::kSelmcast, "n17", small, 3, bw, rng, {}, &plan);
  const double ms64 =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[sync] exact selmcast for 64 nodes: %.2f ms\n", ms64);
  REQUIRE(plan.exact);

  // The largest refined instance (round-time refinement, default threshold 24 nodes).
  const auto refined = std::vector<std::string>(names.begin(), names.begin() + 24);
  const auto t1 = std::chrono::steady_clock::now();
  Select(SelectPolicy::kSelmcast, "n17", refined, 3, bw, rng, {}, &plan);
  const double ms24 =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  std::printf("[sync] refined selmcast for 24 nodes: %.2f ms (mean fanout %.2f)\n", ms24,
              plan.MeanFanout());
  REQUIRE(CheckPlan(plan, ResolveCapacities(plan.nodes, bw)) == 0);
}

}  // namespace
}  // namespace meshtrain::sync

namespace meshtrain::sync {
namespace {

// seen[v] == 1 when the plan's pairs lead from `start` to v.
std::vector<char> Reachable(const Assignment& plan, size_t start) {
  std::vector<char> seen(plan.receivers.size(), 0);
  std::vector<size_t> stack{start};
  seen[start] = 1;
  while (!stack.empty()) {
    const size_t v = stack.back();
    stack.pop_back();
    for (size_t u : plan.receivers[v]) {
      if (!seen[u]) seen[u] = 1, stack.push_back(u);
    }
  }
  return seen;
}

bool StronglyConnected(const Assignment& plan) {
  const size_t n = plan.receivers.size();
  for (size_t start = 0; start < n; ++start) {
    const auto seen = Reachable(plan, start);
    if (std::count(seen.begin(), seen.end(), 1) != static_cast<long>(n)) return false;
  }
  return true;
}

double MeanRoundTime(const Assignment& plan, const std::vector<NodeCapacity>& caps) {
  const auto rates = FairSenderRates(plan, caps);
  double sum = 0;
  size_t senders = 0;
  for (double r : rates) {
    if (r > 0) sum += 1.0 / r, ++senders;
  }
  return senders ? sum / double(senders) : 0;
}

std::vector<NodeCapacity> Symmetric(const std::vector<double>& links) {
  std::vector<NodeCapacity> caps;
  for (size_t i = 0; i < links.size(); ++i) {
    caps.push_back(NodeCapacity{"n" + std::to_string(i), links[i], links[i]});
  }
  return caps;
}

TEST_CASE("fair sender rates: progressive filling over uplinks and downlinks", "[sync][select]") {
  // n0 (up 10) -> n1, n2; n3 (up 100) -> n1. n1's downlink 6 is shared by n0 and n3: 3 each;
  // n0's other flow then takes the rest of its uplink (7), but n0's round rate is its slowest.
  std::vector<NodeCapacity> caps = {
      {"n0", 10, 100}, {"n1", 100, 6}, {"n2", 100, 100}, {"n3", 100, 100}};
  Assignment plan;
  plan.nodes = {"n0", "n1", "n2", "n3"};
  plan.receivers = {{1, 2}, {}, {}, {1}};
  const auto rates = FairSenderRates(plan, caps);
  REQUIRE(rates[0] == Approx(3));
  REQUIRE(rates[1] == 0);
  REQUIRE(rates[3] == Approx(3));
  plan.receivers = {{2, 3}, {}, {}, {1}};
  const auto free = FairSenderRates(plan, caps);
  REQUIRE(free[0] == Approx(5));  // uplink 10 over two uncongested receivers
  REQUIRE(free[3] == Approx(6));  // n1's downlink
}

TEST_CASE("round-time refinement on the bench layout beats random selection", "[sync][select]") {
  // The bench layout: links (up = down) of 5, 5, 20, 20, 80, 80 MB/s, P = 2. Random plans push
  // fast senders into slow downlinks; the refined plan keeps the optimal bottleneck, P receivers
  // and P senders for every node and a strongly connected graph, and its mean round time
  // (parameter size / slowest flow in the max-min fair model, mean over senders) is compared
  // with random selection's. (In the agent the fast nodes also run more rounds, which this
  // per-plan figure does not weigh: bench/selection.py measures 0.35-0.5x.)
  const auto caps = Symmetric({5, 5, 20, 20, 80, 80});
  std::vector<std::string> names;
  BandwidthView bw;
  for (const auto& c : caps) {
    names.push_back(c.name);
    bw[c.name] = NodeBandwidth{c.uplink_mbps, c.downlink_mbps, 0};
  }
  Rng gen(11);
  double refined = 0, random = 0;
  const int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    Rng rng(gen());
    Assignment plan;
    Select(SelectPolicy::kSelmcast, names[0], names, 2, bw, rng, {}, &plan);
    REQUIRE(CheckPlan(plan, caps) == 0);
    REQUIRE(plan.rate_mbps == Approx(2.5));
    REQUIRE(BottleneckRate(plan, caps) >= 2.5 * (1 - 1e-9));
    std::vector<size_t> incoming(caps.size(), 0);
    for (const auto& rs : plan.receivers) {
      for (size_t j : rs) ++incoming[j];
    }
    for (size_t j = 0; j < caps.size(); ++j) REQUIRE(incoming[j] >= 2);
    REQUIRE(StronglyConnected(plan));
    refined += MeanRoundTime(plan, caps);
    // Random: every node picks 2 others uniformly.
    Assignment rnd = plan;
    for (size_t i = 0; i < caps.size(); ++i) {
      const auto mine = Select(SelectPolicy::kRandom, names[i], names, 2, bw, rng);
      rnd.receivers[i].clear();
      for (const auto& m : mine) rnd.receivers[i].push_back(size_t(std::stoi(m.substr(1))));
    }
    random += MeanRoundTime(rnd, caps);
  }
  std::printf("[sync] bench layout: mean round time refined selmcast %.4f, random %.4f (x%.2f)\n",
              refined / kRounds, random / kRounds, refined / random);
  REQUIRE(refined < 0.9 * random);  // measured 0.75 (seed 11)
}

TEST_CASE("round-time refinement: never slower than the plan it starts from", "[sync][select]") {
  Rng gen(12);
  size_t connected = 0;
  for (int t = 0; t < 200; ++t) {
    const size_t n = 2 + gen() % 9;
    const size_t p = 1 + gen() % 3;
    const auto caps = RandomCaps(n, gen);
    Rng r1(t), r2(t), r3(t);
    SelmcastOptions base;
    base.extras_at_bottleneck = false;
    const Assignment start = SolveSelmcastExact(caps, p, r1, base);
    INFO("instance " << t << " n=" << n << " P=" << p);
    // Without the every-node-has-a-sender step, refinement only ever shortens rounds.
    SelmcastOptions pure;
    pure.refine_connect = false;
    Assignment plan = start;
    RefineForRoundTime(&plan, caps, r2, pure);
    REQUIRE(CheckPlan(plan, caps) == 0);
    REQUIRE(BottleneckRate(plan, caps) >= start.rate_mbps * (1 - 1e-9));
    REQUIRE(MeanRoundTime(plan, caps) <= MeanRoundTime(start, caps) * (1 + 1e-9));
    // With it (the default), the plan is strongly connected whenever pairs fit at r*.
    plan = start;
    RefineForRoundTime(&plan, caps, r3);
    REQUIRE(CheckPlan(plan, caps) == 0);
    REQUIRE(BottleneckRate(plan, caps) >= start.rate_mbps * (1 - 1e-9));
    if (StronglyConnected(plan)) {
      ++connected;
      continue;
    }
    // Not connected: then no pair from the part node 0 reaches to the rest fits at r* (or, if
    // node 0 reaches everyone, none from the rest into the part that reaches node 0).
    auto reaches = [&](size_t a, size_t b) { return Reachable(plan, a)[b] == 1; };
    bool out_ok = true;
    for (size_t v = 0; v < n; ++v) out_ok = out_ok && reaches(0, v);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const bool crosses =
            !out_ok ? (reaches(0, i) && !reaches(0, j)) : (!reaches(i, 0) && reaches(j, 0));
        if (i == j || !crosses) continue;
        Assignment more = plan;
        more.receivers[i].push_back(j);
        REQUIRE(BottleneckRate(more, caps) < start.rate_mbps * (1 - 1e-9));
      }
    }
  }
  std::printf(
      "[sync] refined plans strongly connected: %zu of 200 (the rest: no pair across the "
      "cut fits at r*)\n",
      connected);
}

TEST_CASE("round-time refinement with unconstrained downlinks keeps fanout P", "[sync][select]") {
  // Uplinks 5..80, downlinks huge: every extra receiver would lengthen its sender's round, so
  // none is added (the SPEC's extras at r* would give the fast senders 5 receivers each).
  std::vector<NodeCapacity> caps = Symmetric({5, 5, 20, 20, 80, 80});
  for (auto& c : caps) c.downlink_mbps = 1000;
  Rng rng(13);
  const Assignment spec = SolveSelmcastExact(caps, 2, rng);
  Assignment plan = spec;
  SelmcastOptions base;
  base.extras_at_bottleneck = false;
  plan = SolveSelmcastExact(caps, 2, rng, base);
  RefineForRoundTime(&plan, caps, rng);
  // At most a pair or two more than P, added to make the plan strongly connected.
  REQUIRE(plan.MeanFanout() <= 2.0 + 2.0 / 6 + 1e-9);
  REQUIRE(StronglyConnected(plan));
  REQUIRE(spec.MeanFanout() >= 4.0);  // 2, 2, then 5 for each sender at 20 and 80 MB/s
  REQUIRE(MeanRoundTime(plan, caps) < MeanRoundTime(spec, caps));
}

}  // namespace
}  // namespace meshtrain::sync
