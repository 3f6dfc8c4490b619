// The simulator runs real node::Node cores (sim/node_sim.h): a handful of nodes train the
// synthetic task in virtual time under bsp, ssp, pssp and asp with random and selmcast receiver
// selection. Each scenario checks determinism (two runs, identical results), that every node's
// model converged, the deterministic barriers' bounds at every event, and that a crash does not
// stop the others. Everything is seeded; nothing sleeps.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/psp_sim.h"
#include "tests/sim/sim_test_util.h"

namespace meshtrain::sim {
namespace {

using sync::Policy;
using sync::SelectPolicy;

constexpr size_t kNodes = 6;
constexpr uint64_t kStaleness = 2;
// Every node's final test MSE must be below this. With this preset the synthetic task starts
// near 20 (the first sample) and the nodes end near 0.01 after 80–170 steps; mixing keeps every
// node near the consensus model, stragglers included.
constexpr double kErrorBound = 0.1;

PspSimOptions Preset(Policy policy, SelectPolicy select, uint64_t seed = 7) {
  PspSimOptions o;
  o.nodes = kNodes;
  o.duration_s = 60;
  o.seed = seed;
  o.barrier.policy = policy;
  o.barrier.sample = 2;
  o.barrier.staleness = kStaleness;
  o.barrier.probe_timeout = 100;
  o.compute.step_ms = 500;
  o.select = select;
  o.fanout = 2;
  o.task = "synthetic";
  o.record_nodes = true;
  return o;
}

// The largest step difference between live nodes ever seen, checked after every event.
struct SpreadWatch {
  uint64_t max_spread = 0;
  uint64_t events = 0;
  void Attach(PspSimOptions* o) {
    o->observer = [this](const std::vector<uint64_t>& steps, const std::vector<uint8_t>& live) {
      ++events;
      uint64_t lo = UINT64_MAX, hi = 0;
      for (size_t i = 0; i < steps.size(); ++i) {
        if (!live[i]) continue;
        lo = std::min(lo, steps[i]);
        hi = std::max(hi, steps[i]);
      }
      if (hi >= lo) max_spread = std::max(max_spread, hi - lo);
    };
  }
};

bool SameErrors(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  }
  return true;
}

TEST_CASE("nodes train the synthetic task under every barrier and selection, deterministically",
          "[sim][node]") {
  for (Policy policy : {Policy::kBsp, Policy::kSsp, Policy::kPssp, Policy::kAsp}) {
    for (SelectPolicy select : {SelectPolicy::kRandom, SelectPolicy::kSelmcast}) {
      INFO(sync::PolicyName(policy) << " " << sync::SelectPolicyName(select));
      PspSimOptions o = Preset(policy, select);
      SpreadWatch watch;
      watch.Attach(&o);
      const PspSimResult a = Run(o);
      o.observer = nullptr;
      const PspSimResult b = Run(o);
      std::printf(
          "[node-sim] %-4s %-8s steps %llu/%llu/%llu max spread %llu error %.4f (from %.3g) "
          "msgs/node %.0f\n",
          sync::PolicyName(policy), sync::SelectPolicyName(select),
          static_cast<unsigned long long>(a.steps_min),
          static_cast<unsigned long long>(a.steps_median),
          static_cast<unsigned long long>(a.steps_max),
          static_cast<unsigned long long>(watch.max_spread), a.error.value_or(-1),
          a.series.front().error.value_or(-1), a.messages_per_node);

      // Deterministic by seed.
      CHECK(a.final_steps == b.final_steps);
      CHECK(a.node_steps == b.node_steps);
      CHECK(SameErrors(a.node_errors, b.node_errors));
      CHECK(a.messages_per_node == b.messages_per_node);
      CHECK(a.bytes_per_node == b.bytes_per_node);
      CHECK(a.events == b.events);
      CHECK(a.wait_share == b.wait_share);

      // Everyone trained and converged (mixing spread the model to every node).
      CHECK(watch.events > 0);
      CHECK(a.steps_min >= 40);
      CHECK(a.param_messages > 0);
      REQUIRE(a.node_errors.size() == kNodes);
      REQUIRE(a.series.front().error.has_value());
      for (double e : a.node_errors) CHECK(e < kErrorBound);
      CHECK(*a.series.front().error > 20 * kErrorBound);

      // The deterministic bounds hold at every event (completed steps: a node may finish the
      // step it was allowed to start, hence + 1).
      if (policy == Policy::kBsp) CHECK(watch.max_spread <= 1);
      if (policy == Policy::kSsp) CHECK(watch.max_spread <= kStaleness + 1);
      if (policy == Policy::kAsp) CHECK(a.wait_share == 0);
    }
  }
}

TEST_CASE("a different seed gives a different run", "[sim][node]") {
  const PspSimResult a = Run(Preset(Policy::kPssp, SelectPolicy::kRandom, 7));
  const PspSimResult b = Run(Preset(Policy::kPssp, SelectPolicy::kRandom, 8));
  CHECK(a.node_steps != b.node_steps);
}

TEST_CASE("the survivors keep stepping after a node crashes mid-run", "[sim][node]") {
  for (Policy policy : {Policy::kBsp, Policy::kSsp, Policy::kPssp, Policy::kAsp}) {
    for (bool swim : {false, true}) {
      INFO(sync::PolicyName(policy) << (swim ? " with SWIM" : " with the oracle"));
      PspSimOptions o = Preset(policy, SelectPolicy::kRandom);
      o.crashes.push_back(CrashSpec{1, 20});
      o.membership = swim;
      o.profile =
          membership::TimingProfile::kLocal;  // SWIM: 1 s probes, detection within a few seconds
      SpreadWatch watch;
      watch.Attach(&o);
      const PspSimResult r = Run(o);
      REQUIRE(r.crashes.size() == 1);
      const CrashReport& c = r.crashes[0];
      const size_t victim = std::stoul(c.node.substr(1));
      CHECK(r.live_nodes == kNodes - 1);
      CHECK(c.observers == kNodes - 1);
      CHECK(c.detected == c.observers);
      REQUIRE(c.all_detect_s.has_value());
      if (swim) {
        CHECK(*c.all_detect_s < 20);
      } else {
        CHECK(*c.all_detect_s == 0);
      }
      CHECK(r.false_failures == 0);
      // Every survivor made progress in the 40 s after the crash (≈ 80 steps of 500 ms without
      // waiting; bsp/ssp lose the detection time), and converged.
      REQUIRE(r.node_steps.size() == 61);
      const std::vector<uint64_t>& at_crash = r.node_steps[20];
      std::printf("[node-sim] crash %-4s %-6s detected after %.2f s, survivors %llu..%llu steps\n",
                  sync::PolicyName(policy), swim ? "swim" : "oracle", *c.all_detect_s,
                  static_cast<unsigned long long>(r.steps_min),
                  static_cast<unsigned long long>(r.steps_max));
      for (size_t i = 0; i < kNodes; ++i) {
        if (i == victim) {
          CHECK(r.final_steps[i] == at_crash[i]);
          continue;
        }
        CHECK(r.final_steps[i] >= at_crash[i] + 30);
        CHECK(r.node_errors[i] < kErrorBound);
      }
      CHECK(std::isnan(r.node_errors[victim]));
      if (policy == Policy::kBsp) CHECK(watch.max_spread <= 1);
      if (policy == Policy::kSsp) CHECK(watch.max_spread <= kStaleness + 1);
    }
  }
}

TEST_CASE("with SWIM membership bsp and ssp keep their bounds at every event, over 40 seeds",
          "[sim][node]") {
  // Each node's barrier waits for the members SWIM shows as live and training. A node's training
  // flag flips when its join completes and travels in its alive message; a member that learned
  // about the node earlier from someone else's state (stale flag), and that gossip's two
  // transmissions missed, left it out of its barrier and ran ahead: 20 of these 80 runs broke
  // the bound before 2026-11-23. Announce + Introduce tell every member directly.
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    for (Policy policy : {Policy::kBsp, Policy::kSsp}) {
      INFO("seed " << seed << " " << sync::PolicyName(policy));
      PspSimOptions o = Preset(policy, SelectPolicy::kRandom, seed);
      o.crashes.push_back(CrashSpec{1, 20});
      o.membership = true;
      o.profile = membership::TimingProfile::kLocal;
      o.duration_s = 30;
      SpreadWatch watch;
      watch.Attach(&o);
      const PspSimResult r = Run(o);
      CHECK(watch.max_spread <= (policy == Policy::kBsp ? 1 : kStaleness + 1));
      CHECK(r.steps_min >= 20);
    }
  }
}

}  // namespace
}  // namespace meshtrain::sim
