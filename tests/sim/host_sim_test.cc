// The simulator's host model (nodes sharing a host's cores, the loop's and evaluator's CPU per
// step) and its Fashion-MNIST task (the agents' model on the real data, evaluated and timed as
// bench/policies.py times real agents). Every scenario is seeded and runs in virtual time.
#include <catch2/catch.hpp>
#include <cstdio>

#include "base/sanitizer.h"
#include "sim/psp_sim.h"
#include "tests/sim/sim_test_util.h"

namespace meshtrain::sim {
namespace {

using sync::Policy;

// asp (nobody waits), constant 100 ms steps, no speed differences, no task.
PspSimOptions ConstantSteps(size_t nodes) {
  PspSimOptions o;
  o.nodes = nodes;
  o.duration_s = 30;
  o.barrier.policy = Policy::kAsp;
  o.barrier.sample = 0;
  o.compute.step_ms = 100;
  o.compute.dist = StepDist::kConstant;
  o.compute.node_cv = 0;
  o.net.latency_ms = 1;
  o.net.jitter_ms = 0;
  return o;
}

TEST_CASE("nodes on one host share its cores", "[sim][host]") {
  PspSimOptions o = ConstantSteps(6);
  const PspSimResult alone = Run(o);  // a host each: 30 s / 100 ms
  o.nodes_per_host = 6;
  o.host_cores = 2;
  const PspSimResult shared = Run(o);  // six 100 ms steps on two cores: 300 ms each
  o.host_cores = 6;
  const PspSimResult enough = Run(o);
  std::printf("[host] steps alone %llu, 6 on 2 cores %llu..%llu, 6 on 6 cores %llu\n",
              static_cast<unsigned long long>(alone.steps_median),
              static_cast<unsigned long long>(shared.steps_min),
              static_cast<unsigned long long>(shared.steps_max),
              static_cast<unsigned long long>(enough.steps_median));
  CHECK(alone.steps_median == 300);
  CHECK(shared.steps_min >= 98);
  CHECK(shared.steps_max <= 100);
  CHECK(enough.steps_median == 300);
  CHECK(shared.compute_share > 0.99);  // computing (slowly) all the time
}

TEST_CASE("a slowed node's sleep leaves the host's core to the others", "[sim][host]") {
  // Two nodes on one core. Equal: each runs at half speed, 200 ms a step. With the second 4x
  // slower, three quarters of its step are a sleep (the agents' --slowdown), so the first node
  // has the core to itself then and steps faster than with an equal neighbour.
  PspSimOptions o = ConstantSteps(2);
  o.nodes_per_host = 2;
  o.host_cores = 1;
  o.compute.slowdowns = {1, 1};
  const PspSimResult equal = Run(o);
  o.compute.slowdowns = {1, 4};
  const PspSimResult slowed = Run(o);
  std::printf("[host] equal %llu/%llu steps, second 4x slower %llu/%llu\n",
              static_cast<unsigned long long>(equal.final_steps[0]),
              static_cast<unsigned long long>(equal.final_steps[1]),
              static_cast<unsigned long long>(slowed.final_steps[0]),
              static_cast<unsigned long long>(slowed.final_steps[1]));
  CHECK(equal.final_steps[0] >= 148);
  CHECK(equal.final_steps[0] <= 150);
  CHECK(slowed.final_steps[0] > equal.final_steps[0] + 30);
  // Its own 25 ms of compute never runs faster than alone: a step takes at least 100 ms.
  CHECK(slowed.final_steps[1] <= 300);
  CHECK(slowed.final_steps[1] < slowed.final_steps[0]);
}

TEST_CASE("the loop's CPU per step is host work the node waits for", "[sim][host]") {
  // One node alone on one core: 100 ms of compute and then 100 ms of loop work per step, all
  // on the same core, so at most one step per 200 ms whatever overlaps.
  PspSimOptions o = ConstantSteps(2);
  o.nodes_per_host = 1;
  o.host_cores = 1;
  const PspSimResult free_loop = Run(o);
  o.step_overhead_ms = 100;
  const PspSimResult busy_loop = Run(o);
  // With a second core the loop and the trainer can overlap only as far as permits allow.
  o.host_cores = 2;
  const PspSimResult two_cores = Run(o);
  std::printf("[host] steps: free loop %llu, 100 ms loop on 1 core %llu, on 2 cores %llu\n",
              static_cast<unsigned long long>(free_loop.steps_median),
              static_cast<unsigned long long>(busy_loop.steps_median),
              static_cast<unsigned long long>(two_cores.steps_median));
  CHECK(free_loop.steps_median == 300);
  CHECK(busy_loop.steps_median >= 145);
  CHECK(busy_loop.steps_median <= 150);
  CHECK(two_cores.steps_median >= busy_loop.steps_median);
  CHECK(two_cores.steps_median <= 300);
}

TEST_CASE("host options are checked", "[sim][host]") {
  PspSimOptions o = ConstantSteps(2);
  o.step_overhead_ms = 10;  // host CPU without hosts
  CHECK_FALSE(RunPspSim(o).ok());
  o = ConstantSteps(2);
  o.eval_cost_ms = 10;
  CHECK_FALSE(RunPspSim(o).ok());
  o = ConstantSteps(2);
  o.nodes_per_host = 2;
  o.host_cores = 0;
  CHECK_FALSE(RunPspSim(o).ok());
  o = ConstantSteps(2);
  o.eval_average = 1;
  CHECK_FALSE(RunPspSim(o).ok());
  o = ConstantSteps(2);
  o.stop_at_target = true;  // no task, no target
  CHECK_FALSE(RunPspSim(o).ok());
  o = ConstantSteps(2);
  o.task = "no-such-model";
  CHECK_FALSE(RunPspSim(o).ok());
}

// Six nodes with the bench's heterogeneity training fmnist-mlp on their sixth of the data.
PspSimOptions SixOnFashionMnist(Policy policy) {
  PspSimOptions o;
  o.nodes = 6;
  o.duration_s = 60;
  o.barrier.policy = policy;
  o.barrier.sample = 0;
  o.compute.step_ms = 20;
  o.compute.node_cv = 0;
  o.compute.slowdowns = {1, 1, 1, 2, 3, 4};
  o.net.latency_ms = 2;
  o.net.jitter_ms = 1;
  o.net.bandwidth_mbps = 200;
  o.task = "fmnist-mlp";
  o.shards = 6;
  o.batch = 64;
  o.lr = 0.05f;
  o.eval_samples = 500;
  o.eval_every_s = 5;
  o.eval_steps = 25;
  o.eval_average = 0.98;
  o.target_error = 0.25;  // accuracy 0.75
  o.stop_at_target = true;
  return o;
}

TEST_CASE("nodes train fmnist-mlp on the real data and stop once every node met the target",
          "[sim][host][task]") {
  const PspSimOptions o = SixOnFashionMnist(Policy::kBsp);
  const PspSimResult a = Run(o);
  REQUIRE(a.time_to_target_all_s.has_value());
  std::printf(
      "[task] bsp fmnist-mlp: every node at accuracy 0.75 after %.2f virtual s, "
      "steps %llu, final mean error %.3f\n",
      *a.time_to_target_all_s, static_cast<unsigned long long>(a.steps_median),
      a.error.value_or(-1));
  // Timed by the evaluations at every 25th step: bsp keeps the nodes together, so they all met
  // it at the same multiple of 25, and the run ended there.
  CHECK(a.steps_min % 25 == 0);
  CHECK(a.steps_max - a.steps_min <= 1);
  CHECK(a.duration_s == Approx(*a.time_to_target_all_s).margin(1e-9));
  CHECK(a.duration_s < o.duration_s);
  // The error is a rate: 1 - accuracy.
  REQUIRE(a.error.has_value());
  CHECK(*a.error > 0);
  CHECK(*a.error < 0.35);
  for (double e : a.node_errors) CHECK(e < 0.35);
  // Deterministic (checked by the release build; under ASan + UBSan, ten times slower, each run
  // takes a minute and the rerun adds no path), and the same on shared hosts with the agents'
  // CPU costs, only slower.
  if (!kAddressSanitizer) {
    const PspSimResult b = Run(o);
    CHECK(*b.time_to_target_all_s == *a.time_to_target_all_s);
  }
  PspSimOptions h = o;
  h.nodes_per_host = 6;
  h.host_cores = 2;
  h.step_overhead_ms = 25;
  h.eval_cost_ms = 600;
  const PspSimResult c = Run(h);
  REQUIRE(c.time_to_target_all_s.has_value());
  std::printf("[task] the same six on one 2-core host: %.2f virtual s\n", *c.time_to_target_all_s);
  CHECK(*c.time_to_target_all_s > *a.time_to_target_all_s);
}

}  // namespace
}  // namespace meshtrain::sim
