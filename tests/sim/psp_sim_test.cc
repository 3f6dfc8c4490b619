// The PSP simulator (sim/psp_sim.h): determinism, the published ordering of the barrier
// policies on a small preset, the β limits (0 = asp, ≥ peers = bsp), the synthetic task,
// crashes with the oracle and with SWIM membership, partial views, and the SVG plot.
// Every scenario is seeded and runs in virtual time; each prints what it measured.
#include "sim/psp_sim.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/sanitizer.h"
#include "sim/sim_random.h"
#include "sim/svg_plot.h"
#include "tests/sim/sim_test_util.h"

namespace meshtrain::sim {
namespace {

using sync::Policy;

// The small preset: 50 nodes for 60 virtual seconds, β = 5, s = 4, 1 s mean steps with
// persistent per-node speed differences and 5% stragglers 4× slower; re-sample every 100 ms.
PspSimOptions SmallPreset(Policy policy, size_t beta = 5, uint64_t seed = 1) {
  PspSimOptions o;
  o.nodes = 50;
  o.duration_s = 60;
  o.seed = seed;
  o.barrier.policy = policy;
  o.barrier.sample = beta;
  o.barrier.staleness = 4;
  o.barrier.probe_timeout = 100;
  o.compute.straggler_fraction = 0.05;  // 3 of 50 nodes
  o.compute.straggler_factor = 4;
  return o;
}

void Print(const char* tag, const PspSimResult& r) {
  std::printf(
      "[sim] %-8s %-14s steps min/median/max %llu/%llu/%llu spread %llu wait %.3f "
      "msgs/node %.0f\n",
      tag, PolicyLabel(r.policy, r.sample, r.staleness).c_str(),
      static_cast<unsigned long long>(r.steps_min), static_cast<unsigned long long>(r.steps_median),
      static_cast<unsigned long long>(r.steps_max), static_cast<unsigned long long>(r.spread()),
      r.wait_share, r.messages_per_node);
}

bool SameSeries(const std::vector<TimePoint>& a, const std::vector<TimePoint>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].t_s != b[i].t_s || a[i].min != b[i].min || a[i].median != b[i].median ||
        a[i].max != b[i].max || a[i].p10 != b[i].p10 || a[i].p90 != b[i].p90 ||
        a[i].error != b[i].error || a[i].error_avg_model != b[i].error_avg_model) {
      return false;
    }
  }
  return true;
}

// Every deterministic result of two runs is the same.
void CheckSameRun(const PspSimResult& a, const PspSimResult& b) {
  CHECK(a.final_steps == b.final_steps);
  CHECK(a.node_steps == b.node_steps);
  CHECK(SameSeries(a.series, b.series));
  CHECK(a.messages_per_node == b.messages_per_node);
  CHECK(a.bytes_per_node == b.bytes_per_node);
  CHECK(a.wait_share == b.wait_share);
  CHECK(a.queries == b.queries);
  CHECK(a.rounds == b.rounds);
  CHECK(a.events == b.events);
  CHECK(a.work == b.work);
  CHECK(a.datagrams_lost == b.datagrams_lost);
  CHECK(a.false_failures == b.false_failures);
  CHECK(a.error == b.error);
  REQUIRE(a.crashes.size() == b.crashes.size());
  for (size_t k = 0; k < a.crashes.size(); ++k) {
    CHECK(a.crashes[k].node == b.crashes[k].node);
    CHECK(a.crashes[k].first_detect_s == b.crashes[k].first_detect_s);
    CHECK(a.crashes[k].all_detect_s == b.crashes[k].all_detect_s);
    CHECK(a.crashes[k].detected == b.crashes[k].detected);
  }
}

TEST_CASE("the same seed gives the same simulation, bit for bit", "[sim][psp]") {
  PspSimOptions o = SmallPreset(Policy::kPssp);
  o.duration_s = 30;
  o.task = "synthetic";
  o.net.loss = 0.05;  // exercises lost queries, silent peers and retransmissions
  o.crashes.push_back(CrashSpec{2, 10});
  o.record_nodes = true;
  const PspSimResult a = Run(o);
  const PspSimResult b = Run(o);
  CheckSameRun(a, b);
  REQUIRE(a.error.has_value());
  CHECK(a.datagrams_lost > 0);
  CHECK(a.live_nodes == 48);
  CHECK(a.node_steps.size() == 31);  // t = 0..30 s

  o.seed = 2;
  const PspSimResult c = Run(o);
  CHECK(c.final_steps != a.final_steps);
}

TEST_CASE("progress reports the setup, the warm-up and every virtual second", "[sim][psp]") {
  using Phase = SimProgress::Phase;
  PspSimOptions o = SmallPreset(Policy::kPssp);
  o.duration_s = 12;
  o.membership = true;  // a warm-up to report
  const PspSimResult quiet = Run(o);
  std::vector<SimProgress> seen;
  o.progress = [&seen](const SimProgress& p) { seen.push_back(p); };
  const PspSimResult told = Run(o);
  CheckSameRun(quiet, told);  // reporting changes nothing

  REQUIRE(seen.size() > 2);
  CHECK(seen.front().phase == Phase::kSetup);
  CHECK(seen.front().nodes == 50);
  std::vector<SimProgress> warm, training;
  for (const SimProgress& p : seen) {
    if (p.phase == Phase::kWarmUp) warm.push_back(p);
    if (p.phase == Phase::kTraining) training.push_back(p);
  }
  CHECK(!warm.empty());
  CHECK(warm.size() + training.size() + 1 == seen.size());  // one setup report, then these
  // Training: t = 0, 1, ..., 12 (the samples of the step distribution), medians as in the
  // result's series.
  REQUIRE(training.size() == told.series.size());
  for (size_t k = 0; k < training.size(); ++k) {
    CHECK(training[k].t_s == static_cast<double>(k));
    CHECK(training[k].duration_s == 12);
    CHECK(training[k].median_step == told.series[k].median);
  }
  CHECK(training.back().median_step > 0);
}

TEST_CASE("two threads give the simulation of one, bit for bit", "[sim][psp][threads]") {
  // Dense events (short steps, many nodes) so that every millisecond has node cores to step
  // ahead; each scenario exercises a path of the look ahead: crashes (which end it at the
  // crash), lost datagrams and frames of a task, hosts (their compute completions end it too),
  // zero latency (events pushed into the current millisecond), SWIM, and bsp's full views.
  struct Scenario {
    const char* name;
    PspSimOptions o;
  };
  std::vector<Scenario> scenarios;
  // Under ASan + UBSan (about ten times slower) half the nodes in every scenario: the same
  // paths, half the events; the release build runs the full size.
  const size_t div = kAddressSanitizer ? 2 : 1;
  PspSimOptions dense = SmallPreset(Policy::kPssp);
  dense.nodes = 200 / div;
  dense.duration_s = 2;
  dense.compute.step_ms = 20;
  dense.barrier.probe_timeout = 20;
  dense.record_nodes = true;
  {
    PspSimOptions o = dense;
    o.net.loss = 0.05;
    o.crashes.push_back(CrashSpec{5, 1});
    o.crashes.push_back(CrashSpec{5, 1.5});
    scenarios.push_back({"pssp, loss, crashes", o});
  }
  {
    PspSimOptions o = dense;
    o.nodes = 60 / div;
    o.task = "synthetic";
    o.select = sync::SelectPolicy::kSelmcast;
    scenarios.push_back({"synthetic task, selmcast", o});
  }
  {
    PspSimOptions o = dense;
    o.nodes_per_host = 4;
    o.host_cores = 2;
    o.step_overhead_ms = 2;
    scenarios.push_back({"hosts", o});
  }
  {
    PspSimOptions o = dense;
    o.net.latency_ms = 0;
    o.net.jitter_ms = 0;
    o.barrier.policy = Policy::kDssp;
    o.view = 40;
    scenarios.push_back({"zero latency, dssp, partial views", o});
  }
  {
    PspSimOptions o = dense;
    o.nodes = 80 / div;
    o.membership = true;
    o.crashes.push_back(CrashSpec{2, 1});
    scenarios.push_back({"SWIM membership", o});
  }
  {
    PspSimOptions o = dense;
    o.barrier.policy = Policy::kBsp;
    o.nodes = 100 / div;
    scenarios.push_back({"bsp", o});
  }
  for (Scenario& sc : scenarios) {
    INFO(sc.name);
    sc.o.threads = 1;
    const PspSimResult one = Run(sc.o);
    sc.o.threads = 2;
    const PspSimResult two = Run(sc.o);
    std::printf("[sim] threads: %-34s %llu node-core calls posted, %llu stepped ahead\n", sc.name,
                static_cast<unsigned long long>(two.ahead_posted),
                static_cast<unsigned long long>(two.ahead_stepped));
    CHECK(one.threads == 1);
    CHECK(two.threads == 2);
    CHECK(one.ahead_posted == 0);
    CHECK(two.ahead_posted > 0);  // the look ahead was used
    CHECK(two.ahead_stepped <= two.ahead_posted);
    CheckSameRun(one, two);
  }
}

TEST_CASE("small preset shows the published ordering of the five policies",
          "[sim][psp][ordering]") {
  std::map<Policy, PspSimResult> r;
  for (Policy p : {Policy::kBsp, Policy::kSsp, Policy::kAsp, Policy::kPbsp, Policy::kPssp}) {
    r[p] = Run(SmallPreset(p));
    Print("ordering", r[p]);
  }
  const auto median = [&](Policy p) { return r[p].steps_median; };
  // BSP makes the least progress.
  for (Policy p : {Policy::kSsp, Policy::kAsp, Policy::kPbsp, Policy::kPssp}) {
    CHECK(median(Policy::kBsp) < median(p));
  }
  // pBSP and pSSP progress far more than BSP and SSP (stragglers hold the latter back) ...
  for (Policy p : {Policy::kPbsp, Policy::kPssp}) {
    CHECK(static_cast<double>(median(p)) > 1.5 * static_cast<double>(median(Policy::kSsp)));
  }
  CHECK(median(Policy::kPssp) >= median(Policy::kPbsp));
  // ... while their spread stays far below ASP's.
  for (Policy p : {Policy::kPbsp, Policy::kPssp}) {
    CHECK(static_cast<double>(r[p].spread()) < 0.6 * static_cast<double>(r[Policy::kAsp].spread()));
  }
  // The deterministic bounds hold exactly.
  CHECK(r[Policy::kBsp].spread() <= 1);
  CHECK(r[Policy::kSsp].spread() <= 4 + 1);
  CHECK(r[Policy::kAsp].wait_share == 0);
  // Deterministic barriers pay O(n) progress messages per step; PSP pays O(β) queries.
  const auto per_step = [&](Policy p) {
    return r[p].messages_per_node / static_cast<double>(r[p].steps_median);
  };
  CHECK(per_step(Policy::kPssp) < per_step(Policy::kSsp));
  // The middle 80% of pSSP nodes stay close together; ASP's drift apart.
  CHECK(r[Policy::kPssp].spread_p10_p90() * 3 < r[Policy::kAsp].spread_p10_p90());
}

TEST_CASE("beta sweep: progress falls and the spread tightens as beta grows",
          "[sim][psp][ordering]") {
  std::vector<PspSimResult> sweep;
  for (size_t beta : {0, 1, 2, 4, 8, 49}) {
    sweep.push_back(Run(SmallPreset(Policy::kPbsp, beta)));
    Print("sweep", sweep.back());
  }
  // β = 0 is asp, exactly (same seed: same speeds, no barrier randomness used).
  const PspSimResult asp = Run(SmallPreset(Policy::kAsp));
  CHECK(sweep[0].final_steps == asp.final_steps);
  // β ≥ live peers is bsp: lock step.
  CHECK(sweep.back().spread() <= 1);
  const PspSimResult bsp = Run(SmallPreset(Policy::kBsp));
  CHECK(sweep.back().steps_median <= bsp.steps_median + 1);
  // Monotone trend (allowing one step of noise between neighbours).
  for (size_t k = 1; k < sweep.size(); ++k) {
    CHECK(sweep[k].steps_median <= sweep[k - 1].steps_median + 1);
  }
  CHECK(sweep[1].spread() < sweep[0].spread());
  CHECK(sweep.back().spread() < sweep[2].spread());
  // Small β already removes most of ASP's spread (stragglers aside: they are rarely sampled,
  // so max − min keeps them; the middle 80% shows it plainly).
  CHECK(static_cast<double>(sweep[2].spread()) < 0.6 * static_cast<double>(sweep[0].spread()));
  CHECK(sweep[2].spread_p10_p90() * 4 < sweep[0].spread_p10_p90());
}

TEST_CASE("with stragglers, pssp reaches the error target before bsp", "[sim][psp][task]") {
  std::map<Policy, PspSimResult> r;
  for (Policy p : {Policy::kBsp, Policy::kPssp}) {
    PspSimOptions o = SmallPreset(p);
    o.task = "synthetic";
    r[p] = Run(o);
    const PspSimResult& x = r[p];
    std::printf(
        "[sim] task %-5s final error %.4g (averaged model %.4g), target %.3g reached at "
        "%s s\n",
        sync::PolicyName(p), x.error.value_or(-1), x.error_avg_model.value_or(-1), o.target_error,
        x.time_to_target_s ? std::to_string(*x.time_to_target_s).c_str() : "never");
  }
  const PspSimResult& bsp = r[Policy::kBsp];
  const PspSimResult& pssp = r[Policy::kPssp];
  REQUIRE(pssp.time_to_target_s.has_value());
  // The error really fell (the initial error of the synthetic task is orders of magnitude above).
  REQUIRE(pssp.series.front().error.has_value());
  CHECK(*pssp.series.front().error > 20 * *pssp.error);
  if (bsp.time_to_target_s) {
    CHECK(*pssp.time_to_target_s < *bsp.time_to_target_s);
  }
  CHECK(*pssp.error < *bsp.error);
  // Every node at the target comes no sooner than the mean at it, and the worst node's error
  // bounds the mean at every evaluation.
  REQUIRE(pssp.time_to_target_all_s.has_value());
  CHECK(*pssp.time_to_target_all_s >= *pssp.time_to_target_s);
  for (const auto& tp : pssp.series) {
    if (!tp.error) continue;
    REQUIRE(tp.error_max.has_value());
    CHECK(*tp.error_max >= *tp.error);
  }
}

TEST_CASE("barriers stop waiting on a crashed node (oracle failure detector)", "[sim][psp]") {
  for (Policy p : {Policy::kBsp, Policy::kSsp, Policy::kPssp}) {
    PspSimOptions o = SmallPreset(p);
    o.compute.straggler_fraction = 0;
    o.crashes.push_back(CrashSpec{3, 20});
    const PspSimResult r = Run(o);
    INFO(sync::PolicyName(p));
    REQUIRE(r.crashes.size() == 3);
    CHECK(r.live_nodes == 47);
    uint64_t crashed_max = 0;
    for (const CrashReport& c : r.crashes) {
      CHECK(c.first_detect_s == Approx(0));
      CHECK(c.detected == c.observers);
    }
    for (const CrashReport& c : r.crashes) {
      crashed_max = std::max(crashed_max, r.final_steps[std::stoul(c.node.substr(1))]);
    }
    // The survivors kept going for 40 more seconds (≈ 20+ steps even for bsp).
    CHECK(r.steps_min > crashed_max + 10);
  }
}

TEST_CASE("SWIM membership detects a crash and the barriers move on", "[sim][psp][membership]") {
  PspSimOptions o = SmallPreset(Policy::kBsp);
  o.nodes = 30;
  o.duration_s = 60;
  o.compute.straggler_fraction = 0;
  o.membership = true;
  o.profile = membership::TimingProfile::kLan;
  o.crashes.push_back(CrashSpec{1, 10});
  const PspSimResult r = Run(o);
  Print("swim", r);
  REQUIRE(r.crashes.size() == 1);
  const CrashReport& c = r.crashes[0];
  std::printf(
      "[sim] swim: %s crashed at %.1f s; first detection after %.2f s, all %zu/%zu after "
      "%.2f s; false failures %llu; membership datagrams %llu\n",
      c.node.c_str(), c.crash_at_s, c.first_detect_s.value_or(-1), c.detected, c.observers,
      c.all_detect_s.value_or(-1), static_cast<unsigned long long>(r.false_failures),
      static_cast<unsigned long long>(r.membership_messages));
  REQUIRE(c.first_detect_s.has_value());
  REQUIRE(c.all_detect_s.has_value());
  CHECK(*c.first_detect_s <= *c.all_detect_s);
  // lan: probe 1 s, suspicion ≥ 4 × log10(30) × 1 s ≈ 5.9 s (max 6× that); detection well
  // within 45 s.
  CHECK(*c.first_detect_s > 1);
  CHECK(*c.all_detect_s < 45);
  CHECK(r.false_failures == 0);
  CHECK(r.membership_messages > 0);
  // bsp was blocked by the crashed node until detection, then continued.
  CHECK(r.steps_min > 25);
}

TEST_CASE("SWIM with bounded views: 300 nodes holding 30 members each train and detect crashes",
          "[sim][psp][membership]") {
  // Beyond 2000 nodes (or with --view) --membership runs every node's SWIM on a bounded view
  // (membership::Config::max_members): the barrier samples from it and a crash is detected by
  // the nodes that held the victim.
  PspSimOptions o = SmallPreset(Policy::kPssp, 10);
  o.nodes = 300;
  o.view = 30;
  o.duration_s = 30;
  o.membership = true;
  o.profile = membership::TimingProfile::kLan;
  o.crashes.push_back(CrashSpec{2, 5});
  const PspSimResult r = Run(o);
  Print("swim-30", r);
  CHECK(r.view == 30);
  REQUIRE(r.crashes.size() == 2);
  for (const CrashReport& c : r.crashes) {
    std::printf("[sim] swim-30: %s held by %zu live nodes, %zu detected, first after %.2f s\n",
                c.node.c_str(), c.observers, c.detected, c.first_detect_s.value_or(-1));
    // Held by some, not by everyone (about 30 of 299).
    CHECK(c.observers >= 3);
    CHECK(c.observers <= 120);
    CHECK(c.unaware >= 150);
    // lan: suspicion min 4 × log10(31) × 1 s ≈ 6 s after the first failed probe; all of the
    // holders that still hold it by 25 s after the crash.
    REQUIRE(c.first_detect_s.has_value());
    CHECK(*c.first_detect_s < 20);
    CHECK(c.detected * 10 >= c.observers * 8);
  }
  CHECK(r.false_failures == 0);
  // Training went on: about 1 step a second for 30 s, the stragglers at a quarter of that.
  CHECK(r.steps_median > 15);
  CHECK(r.steps_min > 2);
}

TEST_CASE("partial views bound each node's knowledge", "[sim][psp]") {
  PspSimOptions o = SmallPreset(Policy::kPssp);
  o.nodes = 200;
  o.duration_s = 20;
  o.view = 20;
  const PspSimResult r = Run(o);
  CHECK(r.view == 20);
  CHECK(r.steps_min > 0);
  // bsp/ssp always need the full view.
  PspSimOptions b = o;
  b.barrier.policy = Policy::kSsp;
  CHECK(Run(b).view == 199);
}

TEST_CASE("invalid options are errors, not crashes", "[sim][psp]") {
  PspSimOptions o;
  o.nodes = 0;
  CHECK_FALSE(RunPspSim(o).ok());
  o = PspSimOptions();
  o.duration_s = 0;
  CHECK_FALSE(RunPspSim(o).ok());
  o = PspSimOptions();
  o.task = "no-such-task";  // neither synthetic, a preset nor a layer spec
  CHECK_FALSE(RunPspSim(o).ok());
  o = PspSimOptions();
  o.net.loss = 1.0;
  CHECK_FALSE(RunPspSim(o).ok());
  o = PspSimOptions();
  o.barrier.policy = Policy::kBsp;
  o.nodes = 10000;
  CHECK_FALSE(RunPspSim(o).ok());
  o = PspSimOptions();
  o.nodes = 1;  // alone: every policy passes at once
  o.duration_s = 5;
  auto one = RunPspSim(o);
  REQUIRE(one.ok());
  CHECK(one.value().steps_min >= 3);
}

TEST_CASE("the SVG plot has one line per run and an error panel with a task", "[sim][plot]") {
  PspSimOptions o = SmallPreset(Policy::kPssp);
  o.duration_s = 10;
  o.task = "synthetic";
  const PspSimResult a = Run(o);
  o.barrier.policy = Policy::kBsp;
  const PspSimResult b = Run(o);
  const std::vector<PlotRun> runs = {{"pssp", a.series}, {"bsp", b.series}};
  const std::string svg = RenderProgressSvg(runs, "test <plot>");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("test &lt;plot&gt;") != std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    ++lines;
  }
  CHECK(lines == 4);  // a median line and an error line per run
  CHECK(svg == RenderProgressSvg(runs, "test <plot>"));
  // Without a task: progress only.
  const std::vector<PlotRun> plain = {{"x", Run(SmallPreset(Policy::kAsp)).series}};
  CHECK(RenderProgressSvg(plain, "t").find("model error") == std::string::npos);
}

}  // namespace
}  // namespace meshtrain::sim

namespace meshtrain::sim {
namespace {

// Floyd's algorithm with an ordered set: the reference for both of SampleDistinct's paths.
std::vector<uint32_t> FloydReference(learn::Rng& rng, uint32_t n, uint32_t k) {
  std::set<uint32_t> chosen;
  for (uint32_t j = n - k; j < n; ++j) {
    const auto t = static_cast<uint32_t>(rng.UniformInt(uint64_t{j} + 1));
    chosen.insert(chosen.count(t) != 0 ? j : t);
  }
  return {chosen.begin(), chosen.end()};
}

TEST_CASE("SampleDistinct draws the sample of Floyd's algorithm in ascending order") {
  // (n, k): the hashed path (k * 8 < n) and the flags' path, and the edges between them.
  const std::vector<std::pair<uint32_t, uint32_t>> cases = {{100000, 200}, {10000, 500}, {801, 100},
                                                            {800, 100},    {1000, 999},  {64, 1}};
  for (const auto& [n, k] : cases) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      learn::Rng a(seed), b(seed);
      const std::vector<uint32_t> got = SampleDistinct(a, n, k);
      const std::vector<uint32_t> want = FloydReference(b, n, k);
      INFO("n " << n << " k " << k << " seed " << seed);
      REQUIRE(got == want);
      REQUIRE(got.size() == k);
      REQUIRE(a.UniformInt(1000000) == b.UniformInt(1000000));  // the same draws were used
    }
  }
}

}  // namespace
}  // namespace meshtrain::sim
