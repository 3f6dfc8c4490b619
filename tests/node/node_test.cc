// Virtual-time tests of the node core: 4-8 node::Node instances with their own SWIM train the
// synthetic task over the fake network of mesh_harness.h, under every barrier policy and both
// selection policies. Deterministic by seed; no sleeps.
#include <catch2/catch.hpp>
#include <random>

#include "tests/node/mesh_harness.h"

using meshtrain::node::Output;
using meshtrain::sync::Policy;
using meshtrain::sync::SelectPolicy;
using meshtrain::testing::kSanitized;
using meshtrain::testing::Mesh;
using meshtrain::testing::MeshOptions;

namespace {

// The synthetic task's noise floor is 0.01 (noise stddev 0.1); the untrained loss is ~8.
constexpr double kLossBound = 0.05;

struct Run {
  std::vector<uint64_t> steps;
  std::vector<double> losses;
  uint64_t datagrams = 0;
  uint64_t worst_ssp_gap = 0;  // max over permits of c_i - c_j for live training peers j
};

// Runs a mesh and records, at every permit, how far the permitted node is ahead of the slowest
// live node (the SSP quantity c_i - c_j, c_i = completed steps).
Run RunMesh(MeshOptions o, int64_t ms, int crash = -1, int64_t crash_at = 0) {
  Mesh mesh(o);
  Run r;
  mesh.on_permit = [&](size_t i, uint64_t step) {
    const uint64_t ci = step - 1;
    for (size_t j = 0; j < mesh.size(); ++j) {
      if (j == i || mesh.crashed(j) || mesh.finished(j)) continue;
      if (ci > mesh.step(j)) r.worst_ssp_gap = std::max(r.worst_ssp_gap, ci - mesh.step(j));
    }
  };
  mesh.Start();
  if (crash >= 0) {
    mesh.RunUntil(crash_at);
    mesh.Crash(static_cast<size_t>(crash));
  }
  mesh.RunUntil(ms);
  for (size_t i = 0; i < mesh.size(); ++i) {
    r.steps.push_back(mesh.step(i));
    r.losses.push_back(mesh.crashed(i) ? 0.0 : mesh.loss(i));
  }
  r.datagrams = mesh.datagrams();
  return r;
}

}  // namespace

TEST_CASE("nodes train synthetic under every policy and selection", "[node]") {
  struct Case {
    Policy policy;
    const char* name;
  };
  for (Case c : {Case{Policy::kBsp, "bsp"}, Case{Policy::kSsp, "ssp"}, Case{Policy::kPssp, "pssp"},
                 Case{Policy::kAsp, "asp"}}) {
    for (SelectPolicy sel : {SelectPolicy::kRandom, SelectPolicy::kSelmcast}) {
      MeshOptions o;
      o.nodes = 5;
      o.policy = c.policy;
      o.select = sel;
      o.seed = 11;
      o.staleness = 2;
      o.sample = 2;
      const Run r = RunMesh(o, 20000);
      INFO(c.name << " select " << (sel == SelectPolicy::kRandom ? "random" : "selmcast"));
      for (size_t i = 0; i < r.steps.size(); ++i) {
        INFO("node " << i << " steps " << r.steps[i] << " loss " << r.losses[i]);
        CHECK(r.steps[i] > 100);
        CHECK(r.losses[i] < kLossBound);
      }
      if (c.policy == Policy::kBsp) CHECK(r.worst_ssp_gap == 0);
      if (c.policy == Policy::kSsp) CHECK(r.worst_ssp_gap <= o.staleness);
    }
  }
}

TEST_CASE("the SSP bound holds with a straggler", "[node]") {
  for (uint64_t s : {0, 1, 3}) {
    MeshOptions o;
    o.nodes = 6;
    o.policy = s == 0 ? Policy::kBsp : Policy::kSsp;
    o.staleness = s;
    o.straggler_factor = 3;
    o.seed = 5 + s;
    const Run r = RunMesh(o, 15000);
    INFO("s = " << s);
    CHECK(r.worst_ssp_gap <= s);
    // The straggler holds everyone back to within s steps of it.
    const uint64_t slow = r.steps[0];
    for (uint64_t st : r.steps) CHECK(st <= slow + s + 1);
  }
}

TEST_CASE("runs are deterministic by seed", "[node]") {
  MeshOptions o;
  o.nodes = 4;
  o.policy = Policy::kPssp;
  o.select = SelectPolicy::kSelmcast;
  o.seed = 3;
  o.loss = 0.05;
  const Run a = RunMesh(o, 8000);
  const Run b = RunMesh(o, 8000);
  CHECK(a.steps == b.steps);
  CHECK(a.losses == b.losses);
  CHECK(a.datagrams == b.datagrams);
  o.seed = 4;
  const Run c = RunMesh(o, 8000);
  CHECK((c.steps != a.steps || c.datagrams != a.datagrams));
}

TEST_CASE("a crashed node does not stop the rest", "[node]") {
  for (Policy p : {Policy::kBsp, Policy::kSsp, Policy::kPssp}) {
    MeshOptions o;
    o.nodes = 6;
    o.policy = p;
    o.seed = 21;
    Mesh mesh(o);
    mesh.Start();
    mesh.RunUntil(5000);
    mesh.Crash(3);
    // SWIM (probe 200 ms, local profile) detects the crash within a few seconds.
    mesh.RunUntil(10000);
    std::vector<uint64_t> at10;
    for (size_t i = 0; i < mesh.size(); ++i) at10.push_back(mesh.step(i));
    mesh.RunUntil(15000);
    for (size_t i = 0; i < mesh.size(); ++i) {
      if (i == 3) continue;
      INFO("policy " << meshtrain::sync::PolicyName(p) << " node " << i);
      // 5 s at ~20 ms a step: well over 100 steps once the crash is detected.
      CHECK(mesh.step(i) > at10[i] + 100);
      CHECK(mesh.loss(i) < kLossBound);
    }
  }
}

// docs/contract.md "Barriers": under pssp a suspected peer leaves the barrier until it refutes
// the suspicion, so a crashed node holds the others only until it is suspected; under ssp they
// wait until it is declared failed. With the sample covering every peer, pssp is ssp but for that.
TEST_CASE("pssp goes on without a suspected peer; ssp waits until it is failed", "[node]") {
  for (Policy p : {Policy::kPssp, Policy::kSsp}) {
    MeshOptions o;
    o.nodes = 4;
    o.policy = p;
    o.sample = 3;
    o.staleness = 2;
    o.seed = 31;
    Mesh mesh(o);
    mesh.Start();
    mesh.RunUntil(4000);
    mesh.Crash(3);
    const uint64_t crashed_step = mesh.step(3);
    // Until the first node declares n3 failed (virtual time, 10 ms at a time; bounded).
    auto failed_somewhere = [&] {
      for (size_t i = 0; i < 3; ++i) {
        for (const auto& m : mesh.node(i).Members()) {
          if (m.name == "n3" && m.status == meshtrain::membership::Status::kFailed) return true;
        }
      }
      return false;
    };
    int64_t guard = 0;
    while (!failed_somewhere() && guard++ < 2000) mesh.RunUntil(mesh.now() + 10);
    REQUIRE(failed_somewhere());
    INFO("policy " << meshtrain::sync::PolicyName(p) << ", n3 crashed at step " << crashed_step);
    for (size_t i = 0; i < 3; ++i) {
      INFO("node " << i << " at step " << mesh.step(i));
      if (p == Policy::kPssp) {
        CHECK(mesh.step(i) > crashed_step + o.staleness + 10);  // went on once it suspected
      } else {
        CHECK(mesh.step(i) <= crashed_step + o.staleness + 1);  // held to the bound
      }
    }
  }
}

TEST_CASE("a connect that fails at once ends the transfer and rounds go on", "[node]") {
  // Regression: the agent's old StartRound reset the round inside a synchronous connect failure
  // and then wrote through the empty optional. In the node core a failed connect is an input
  // like any other.
  MeshOptions o;
  o.nodes = 4;
  o.policy = Policy::kAsp;
  o.seed = 9;
  Mesh mesh(o);
  mesh.Start();
  mesh.RunUntil(2000);  // joined and training
  const auto rounds0 = mesh.node(1).stats().rounds;
  const auto fanout0 = mesh.node(1).stats().fanout_sum;
  const auto step0 = mesh.step(1);
  mesh.RefuseConnectsFrom(1);
  mesh.ResetConnectionsOpenedBy(1);  // parameter connections stay open: every one is new now
  mesh.RunUntil(5000);
  CHECK(mesh.node(1).stats().rounds > rounds0 + 50);  // rounds end (every transfer lost) ...
  CHECK(mesh.node(1).stats().fanout_sum == fanout0);  // ... and none was delivered
  CHECK(mesh.node(0).stats().fanout_sum > 50);        // the others' transfers work
  CHECK(mesh.step(1) > step0 + 100);
}

TEST_CASE("parameter connections stay open between transfers", "[node]") {
  // A transfer reuses the open connection to its receiver: connects stay a handful (push-pulls,
  // one per receiver) while hundreds of rounds go out; before, every transfer opened its own.
  MeshOptions o;
  o.nodes = 4;
  o.seed = 4;
  Mesh mesh(o);
  uint64_t connects = 0, closes = 0;
  mesh.on_output = [&](size_t i, const Output& out) {
    if (i != 1) return;
    if (std::holds_alternative<meshtrain::node::Connect>(out)) connects++;
    if (std::holds_alternative<meshtrain::node::Close>(out)) closes++;
  };
  mesh.Start();
  mesh.RunUntil(10000);
  const auto& st = mesh.node(1).stats();
  INFO("rounds " << st.rounds << ", delivered " << st.fanout_sum << ", connects " << connects
                 << ", closes " << closes);
  CHECK(st.rounds > 200);
  CHECK(st.fanout_sum > 2 * 200 - 20);
  CHECK(connects < 20);  // 3 receivers + push-pulls every 2 s
}

TEST_CASE("the SSP check of these tests can fail: asp runs ahead of a straggler", "[node]") {
  MeshOptions o;
  o.nodes = 6;
  o.policy = Policy::kAsp;
  o.straggler_factor = 3;
  o.seed = 5;
  const Run r = RunMesh(o, 15000);
  CHECK(r.worst_ssp_gap > 10);
}

TEST_CASE("compressed exchange trains as well and sends fewer bytes", "[node][compress]") {
  // The synthetic model has 9 parameters, so a chunk's fixed frame overhead dominates the byte
  // figures here; the encoders' ratios are checked in tests/wire/compress_test.cc, the real
  // ones on fmnist-mlp by bench/compression.py. This checks the node's keyed transfers: every
  // node trains as well as uncompressed, references never disagree, fewer bytes go out.
  for (const char* spec : {"fp16", "int8", "topk:0.2"}) {
    MeshOptions o;
    o.nodes = 4;
    o.seed = 33;
    o.chunk_floats = 4;  // several chunks per transfer
    o.compress = *meshtrain::wire::ParseCompress(spec);
    Mesh mesh(o);
    mesh.Start();
    mesh.RunUntil(12000);
    uint64_t sent = 0, raw = 0, need_full = 0, received = 0;
    for (size_t i = 0; i < mesh.size(); ++i) {
      INFO(spec << " node " << i);
      CHECK(mesh.loss(i) < kLossBound);
      CHECK(mesh.step(i) > 200);
      const auto& s = mesh.node(i).stats();
      sent += s.params_bytes_sent;
      raw += s.params_bytes_raw;
      need_full += s.params_need_full;
      received += s.params_received;
    }
    INFO(spec << " raw " << raw << " sent " << sent);
    CHECK(received > 400);
    CHECK(need_full == 0);  // no restarts, no lost acks: the references always agree
    CHECK(sent < raw);
  }
}

namespace {

struct LateJoin {
  uint64_t adopted_step = 0;  // 0: it did not adopt
  std::string from;
  double joiner_loss_after_adopt = 0;
  double joiner_loss_first_step =
      -1;  // when its first step is permitted (the model it starts from)
  std::vector<uint64_t> at3, at6, at9;  // steps of the first nodes at 3, 6 and 9 s
  uint64_t joiner_at9 = 0;
  std::vector<double> losses;
};

// Steps per second of node 0 between 3 and 6 s in a mesh of `nodes` started together: the pace
// a mesh of that size keeps (under bsp a fourth member costs pace by itself: every step waits for
// the slowest of more nodes).
double SteadyRate(Policy policy, size_t nodes) {
  MeshOptions o;
  o.nodes = nodes;
  o.seed = 41;
  o.policy = policy;
  Mesh mesh(o);
  mesh.Start();
  mesh.RunUntil(3000);
  const uint64_t a = mesh.step(0);
  mesh.RunUntil(6000);
  return static_cast<double>(mesh.step(0) - a) / 3.0;
}

// Three nodes train from t = 0; a fourth starts fresh at 6 s.
LateJoin RunLateJoin(Policy policy, bool join_state) {
  MeshOptions o;
  o.nodes = 4;
  o.seed = 41;
  o.policy = policy;
  o.late_join_ms = 6000;
  o.join_state = join_state;
  Mesh mesh(o);
  LateJoin r;
  mesh.on_permit = [&](size_t i, uint64_t) {
    if (i == 3 && r.joiner_loss_first_step < 0) r.joiner_loss_first_step = mesh.loss(3);
  };
  mesh.on_output = [&](size_t i, const Output& out) {
    if (const auto* a = std::get_if<meshtrain::node::AdoptState>(&out)) {
      if (i == 3) {
        r.adopted_step = a->step;
        r.from = a->from;
      }
    }
  };
  mesh.Start();
  auto first = [&] {
    std::vector<uint64_t> s;
    for (size_t i = 0; i < 3; ++i) s.push_back(mesh.step(i));
    return s;
  };
  mesh.RunUntil(3000);
  r.at3 = first();
  mesh.RunUntil(6000);
  r.at6 = first();
  mesh.RunUntil(6600);
  r.joiner_loss_after_adopt = mesh.loss(3);
  mesh.RunUntil(9000);
  r.at9 = first();
  r.joiner_at9 = mesh.step(3);
  for (size_t i = 0; i < 4; ++i) r.losses.push_back(mesh.loss(i));
  return r;
}

}  // namespace

TEST_CASE("a late joiner starts from the mesh's model and step; nobody waits for it",
          "[node][elastic]") {
  for (Policy p : {Policy::kBsp, Policy::kPssp}) {
    INFO("policy " << meshtrain::sync::PolicyName(p));
    const LateJoin r = RunLateJoin(p, true);
    // It took over a running node's model at the slowest first node's step (> 100 steps by 6 s)…
    CHECK(r.adopted_step > 100);
    CHECK(r.adopted_step <= *std::max_element(r.at6.begin(), r.at6.end()) + 5);
    CHECK(!r.from.empty());
    // …so it is as good as the mesh from its first step on (the untrained loss is ~8).
    CHECK(r.joiner_loss_first_step >= 0);
    CHECK(r.joiner_loss_first_step < kLossBound);
    CHECK(r.joiner_loss_after_adopt < kLossBound);
    for (double l : r.losses) CHECK(l < kLossBound);
    // Nobody waits for a node at step 0: after the join the first three step at least 0.8x as
    // fast as a 4-node mesh does.
    const double pace = SteadyRate(p, 4);
    for (size_t i = 0; i < 3; ++i) {
      INFO("node " << i << " steps " << r.at3[i] << " " << r.at6[i] << " " << r.at9[i]
                   << ", 4-node pace " << pace << "/s");
      CHECK(static_cast<double>(r.at9[i] - r.at6[i]) / 3.0 >= 0.8 * pace);
    }
    CHECK(r.joiner_at9 + 10 >= *std::min_element(r.at9.begin(), r.at9.end()));
  }
}

TEST_CASE("without join-state a late joiner starts at step 0 and bsp waits for it",
          "[node][elastic]") {
  // The contrast that shows the test above can fail: the fresh node is at step 0, bsp holds
  // the others until it catches up, and its first step starts from its untrained model (mixing
  // then pulls it towards the received models within a few rounds).
  const LateJoin r = RunLateJoin(Policy::kBsp, false);
  CHECK(r.adopted_step == 0);
  CHECK(r.joiner_loss_first_step > kLossBound);
  const double pace = SteadyRate(Policy::kBsp, 4);
  for (size_t i = 0; i < 3; ++i) {
    INFO("node " << i << " steps " << r.at6[i] << " " << r.at9[i] << ", 4-node pace " << pace);
    CHECK(static_cast<double>(r.at9[i] - r.at6[i]) / 3.0 < 0.8 * pace);
  }
}

TEST_CASE("OSP: prefetched barrier queries cut the wait of a homogeneous pssp mesh",
          "[node][barrier]") {
  // Node-to-node latency of 5 ms against 20 ms steps: without overlap every blocked check
  // pays a round trip after the step; with it the answers arrive while the step computes.
  auto run = [](bool overlap) {
    MeshOptions o;
    o.nodes = 4;
    o.seed = 7;
    o.policy = Policy::kPssp;
    o.sample = 3;
    o.staleness = 0;  // every step checks its sample: the effect is largest and easy to see
    o.latency_ms = 5;
    o.overlap_barrier = overlap;
    Mesh mesh(o);
    mesh.Start();
    mesh.RunUntil(8000);
    double wait = 0;
    uint64_t steps = 0;
    for (size_t i = 0; i < o.nodes; ++i) {
      wait += mesh.node(i).BarrierWaitSeconds(8000);
      steps += mesh.step(i);
    }
    return std::make_pair(wait / o.nodes / 8.0, steps);
  };
  const auto [share_on, steps_on] = run(true);
  const auto [share_off, steps_off] = run(false);
  INFO("wait share with overlap " << share_on << " (" << steps_on << " steps), without "
                                  << share_off << " (" << steps_off << " steps)");
  CHECK(share_on < share_off);
  CHECK(steps_on > steps_off);
}

TEST_CASE("OSP: early permits spare the trainer the driver's hop, within the staleness bound",
          "[node][barrier]") {
  // Each permit reaches the trainer 3 ms after the node grants it (the daemon's loop thread);
  // 20 ms steps. Without overlap the trainer idles that hop after every step; with it the
  // permit for step c + 2 is granted while c + 1 computes, as soon as the sample allows.
  struct Out {
    double idle_share;
    uint64_t steps, early, worst_gap;
  };
  auto run = [](bool overlap, Policy policy, size_t sample) {
    MeshOptions o;
    o.nodes = 4;
    o.seed = 5;
    o.policy = policy;
    o.sample = sample;
    o.staleness = 2;
    o.latency_ms = 1;
    o.jitter_ms = 0.5;
    o.permit_delay_ms = 3;
    o.overlap_barrier = overlap;
    Mesh mesh(o);
    Out out{0, 0, 0, 0};
    mesh.on_permit = [&](size_t i, uint64_t step) {
      // c_i = step - 1: the permit lets node i complete `step`; with an early permit it has not
      // completed step - 1 yet, so this over-states its lead (conservative).
      const uint64_t ci = step - 1;
      for (size_t j = 0; j < mesh.size(); ++j) {
        if (j != i && ci > mesh.step(j)) out.worst_gap = std::max(out.worst_gap, ci - mesh.step(j));
      }
    };
    mesh.Start();
    const int64_t t0 = 2000;
    mesh.RunUntil(t0);
    double idle0 = 0;
    for (size_t i = 0; i < o.nodes; ++i) idle0 += mesh.idle_ms(i);
    mesh.RunUntil(t0 + 8000);
    double idle = -idle0;
    for (size_t i = 0; i < o.nodes; ++i) {
      idle += mesh.idle_ms(i);
      out.steps += mesh.step(i);
      out.early += mesh.node(i).stats().early_permits;
    }
    out.idle_share = idle / o.nodes / 8000.0;
    return out;
  };
  for (Policy policy : {Policy::kPssp, Policy::kSsp}) {
    const Out on = run(true, policy, 2);
    const Out off = run(false, policy, 2);
    INFO((policy == Policy::kPssp ? "pssp" : "ssp")
         << ": idle share with overlap " << on.idle_share << " (" << on.steps << " steps, "
         << on.early << " early permits), without " << off.idle_share << " (" << off.steps
         << " steps)");
    CHECK(off.early == 0);
    CHECK(on.early > on.steps / 2);
    CHECK(on.idle_share < 0.5 * off.idle_share);
    CHECK(on.steps > off.steps);
  }
  // The bound with every peer in the sample: early or not, no permit puts a node more than the
  // staleness ahead of any peer.
  const Out full = run(true, Policy::kPssp, 3);
  const Out ssp = run(true, Policy::kSsp, 2);
  INFO("worst lead at a permit: pssp full sample " << full.worst_gap << ", ssp " << ssp.worst_gap);
  CHECK(full.worst_gap <= 2);
  CHECK(ssp.worst_gap <= 2);
}

TEST_CASE("look-ahead queries: on a 40 ms RTT the fresh steps arrive before the bound is reached",
          "[node][barrier]") {
  // 20 ms each way against 20 ms steps, s = 4: a peer whose known step is about to block is
  // asked one round trip early, so the node rarely stops at the bound to ask. Parameters every
  // 8 steps (--sync-every 8): transfers and their acks carry steps too, and when they go out
  // every step on kept-open connections they are about as fresh as a look-ahead answer.
  auto run = [](bool lookahead) {
    MeshOptions o;
    o.nodes = 4;
    o.seed = 9;
    o.sync_every = 8;
    o.policy = Policy::kPssp;
    o.sample = 2;
    o.staleness = 4;
    o.latency_ms = 20;
    o.jitter_ms = 2;
    o.lookahead = lookahead;
    Mesh mesh(o);
    mesh.Start();
    mesh.RunUntil(10000);
    double wait = 0;
    uint64_t steps = 0, ahead = 0;
    for (size_t i = 0; i < o.nodes; ++i) {
      wait += mesh.node(i).BarrierWaitSeconds(10000);
      steps += mesh.step(i);
      ahead += mesh.node(i).barrier()->stats().lookahead_queries;
    }
    return std::make_tuple(wait / o.nodes / 10.0, steps, ahead);
  };
  const auto [share_on, steps_on, ahead_on] = run(true);
  const auto [share_off, steps_off, ahead_off] = run(false);
  INFO("wait share with look-ahead " << share_on << " (" << steps_on << " steps, " << ahead_on
                                     << " look-ahead queries), without " << share_off << " ("
                                     << steps_off << " steps)");
  CHECK(ahead_off == 0);
  CHECK(ahead_on > 0);
  CHECK(share_on < 0.7 * share_off);
  CHECK(steps_on > steps_off);
}

TEST_CASE(
    "a blocked query is answered when the peer gets there: bsp keeps its pace with more nodes",
    "[node][barrier]") {
  // Without the push (ProgressQuery.need), a waiting node re-asks only every requery interval
  // and a bsp mesh of 4 stepped at ~0.74x the pace of 3 (31 vs 42 steps/s here); each extra
  // member made it likelier that someone was still computing when asked.
  const double three = SteadyRate(Policy::kBsp, 3);
  const double five = SteadyRate(Policy::kBsp, 5);
  INFO("bsp pace 3 nodes " << three << "/s, 5 nodes " << five << "/s");
  CHECK(five >= 0.9 * three);
}

// --min-peers with a mesh started at once: every node starts training within a second, not at
// the next push-pull. A node's `training` flag (false while it has no peers to fetch state from,
// true once it knows them) travels by gossip, whose budget in a small mesh is two packets
// (RetransmitMult 2 x ceil(log10(n + 1))) and is spent before the node knows the later joiners:
// one of them could keep seeing it as not training until the push-pull 15 s later — and every
// bsp peer waited for that one (a bench saw a node start 17 s after the rest; seed 2 here never
// started within 20 s). A node waiting for min-peers while it knows enough live members now asks
// one of them for a push-pull (at most once per probe interval).
TEST_CASE("min-peers: a mesh started at once starts training within a second",
          "[node][elastic][min-peers]") {
  int64_t worst = 0;
  for (uint64_t seed = 1; seed <= (kSanitized ? 8 : 30); ++seed) {
    MeshOptions o;
    o.nodes = 6;
    o.policy = Policy::kBsp;
    o.task = "none";
    o.seed = seed;
    o.push_pull_ms = 15000;  // the agents' local profile
    Mesh mesh(o);
    std::vector<int64_t> first(o.nodes, -1);
    mesh.on_permit = [&](size_t i, uint64_t) {
      if (first[i] < 0) first[i] = mesh.now();
    };
    mesh.Start();
    mesh.RunUntil(20000);
    for (size_t i = 0; i < o.nodes; ++i) {
      INFO("seed " << seed << " node " << i);
      if (first[i] < 0) {
        for (size_t j = 0; j < o.nodes; ++j) {
          std::string v;
          for (const auto& m : mesh.node(j).Members())
            v += m.name + ":" + std::to_string(int(m.status)) + "/" +
                 std::to_string(m.meta.training) + "/" + std::to_string(m.incarnation) + " ";
          WARN("node " << j << " step " << mesh.step(j) << " first " << first[j] << " sees " << v);
        }
      }
      REQUIRE(first[i] >= 0);
      worst = std::max(worst, first[i]);
    }
  }
  WARN("latest first permit over 30 seeds: " << worst << " ms");
  CHECK(worst < 1000);
}

TEST_CASE("capacity probes: every node publishes its own link's capacity", "[node][probe]") {
  MeshOptions o;
  o.nodes = 5;
  o.seed = 3;
  o.capacity_probe_ms = 10000;
  // MB/s both ways: a train measures min(sender, receiver); the two fastest find each other.
  o.link_mbps = {5, 20, 20, 80, 80};
  Mesh mesh(o);
  uint64_t trains = 0;
  mesh.on_output = [&](size_t, const Output& out) {
    if (std::holds_alternative<meshtrain::node::ProbeLink>(out)) trains++;
  };
  mesh.Start();
  mesh.RunUntil(30000);
  for (size_t i = 0; i < mesh.size(); ++i) {
    INFO("node " << i);
    CHECK(mesh.node(i).uplink_estimate_mbps() == Approx(o.link_mbps[i]));
    CHECK(mesh.node(i).stats().probes_measured > 0);
    // A node's downlink is at least what trains brought it (here: its own link, or less when
    // only slower senders probed it).
    CHECK(mesh.node(i).downlink_estimate_mbps() <= o.link_mbps[i] + 1e-9);
    // What the others see: the published metadata.
    for (const auto& m : mesh.node((i + 1) % mesh.size()).Members()) {
      if (m.name == "n" + std::to_string(i)) CHECK(m.meta.uplink_mbps == Approx(o.link_mbps[i]));
    }
  }
  // Ten fast probes per node (2 s apart), then one per 10 s interval: 30 s gives ~11 each.
  CHECK(trains >= 10 * mesh.size());
  CHECK(trains <= 13 * mesh.size());
}

// One node per link (MB/s both ways), probing every 5 s after the ten fast probes.
MeshOptions ProbeMeshOptions(uint64_t seed, std::vector<double> link_mbps) {
  MeshOptions o;
  o.nodes = link_mbps.size();
  o.seed = seed;
  o.capacity_probe_ms = 5000;
  o.link_mbps = std::move(link_mbps);
  return o;
}

TEST_CASE("capacity probes: two fast hosts find each other after their first train was squeezed",
          "[node][probe]") {
  // The bed's failure: six hosts 5, 5, 20, 20, 80, 80 MB/s; the first train between the two
  // fast ones came in squeezed (a tenth), so each published about the downlink of the 20 MB/s
  // hosts, and figures carry a little noise. Within a minute (10 fast probes, then one per
  // 5 s) both must have probed each other again and publish 80.
  int failures = 0;
  for (uint64_t seed = 1; seed <= (kSanitized ? 5 : 20); ++seed) {
    Mesh mesh(ProbeMeshOptions(seed, {5, 5, 20, 20, 80, 80}));
    std::mt19937_64 noise(seed);
    bool squeezed = false;
    mesh.probe_rate = [&](size_t i, size_t j, double rate) {
      if (i >= 4 && j >= 4 && !squeezed) {
        squeezed = true;
        return rate / 10;
      }
      return rate * std::uniform_real_distribution<double>(0.99, 1.01)(noise);
    };
    mesh.Start();
    mesh.RunUntil(60000);
    for (size_t i = 4; i < 6; ++i) {
      const double up = mesh.node(i).uplink_estimate_mbps();
      if (up < 0.75 * 80) {
        WARN("seed " << seed << " node " << i << " uplink " << up);
        failures++;
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("capacity probes: a fast path read slowly for a while is probed again until confirmed",
          "[node][probe]") {
  // A CI run's failure on the bed: a 640 Mbit/s host's trains to the other fast host came in at
  // 634 and 455 (the second short of confirming the first), then, the receiver short of CPU, at
  // 167 and 168; the host published 168 (the figures of the 160 Mbit/s peers confirm it) until
  // its fast figures aged out. Its largest figure, unconfirmed, must keep that path probed.
  int failures = 0;
  for (uint64_t seed = 1; seed <= (kSanitized ? 5 : 20); ++seed) {
    Mesh mesh(ProbeMeshOptions(seed, {5, 5, 20, 20, 80, 80}));
    size_t fast = 0;  // node 5's trains to node 4 so far
    mesh.probe_rate = [&](size_t i, size_t j, double rate) {
      if (i != 5 || j != 4) return rate;
      fast++;
      if (fast == 2) return 0.71 * rate;
      return fast <= 4 ? rate / 3.8 : rate;
    };
    mesh.Start();
    mesh.RunUntil(60000);
    const double up = mesh.node(5).uplink_estimate_mbps();
    if (fast >= 1 && up < 0.75 * 80) {
      WARN("seed " << seed << ": node 5 published " << up << " after " << fast
                   << " trains to node 4");
      failures++;
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("capacity probes: the first figure, unconfirmed, is checked on the same path next",
          "[node][probe]") {
  int first_fast = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Mesh mesh(ProbeMeshOptions(seed, {80, 80, 5, 5}));
    std::vector<size_t> to;  // node 0's trains, by receiver
    mesh.probe_rate = [&](size_t i, size_t j, double rate) {
      if (i == 0) to.push_back(j);
      return rate;
    };
    mesh.Start();
    mesh.RunUntil(8000);
    INFO("seed " << seed);
    REQUIRE(to.size() >= 2);
    if (to[0] != 1) continue;  // the first train went to a slow peer: nothing to confirm
    first_fast++;
    CHECK(to[1] == 1);
    CHECK(mesh.node(0).uplink_estimate_mbps() == Approx(80));
  }
  REQUIRE(first_fast > 0);
}

TEST_CASE("capacity probes: off by default; unanswered ones are given up", "[node][probe]") {
  MeshOptions o;
  o.nodes = 3;
  uint64_t trains = 0;
  {
    Mesh mesh(o);
    mesh.on_output = [&](size_t, const Output& out) {
      if (std::holds_alternative<meshtrain::node::ProbeLink>(out)) trains++;
    };
    mesh.Start();
    mesh.RunUntil(10000);
  }
  CHECK(trains == 0);
  // On, but no report ever comes back (link_mbps empty): probing goes on, estimates stay
  // transfer-based, and a late report for a given-up probe is ignored.
  o.capacity_probe_ms = 4000;
  Mesh mesh(o);
  std::vector<uint64_t> ids;
  mesh.on_output = [&](size_t i, const Output& out) {
    if (auto* p = std::get_if<meshtrain::node::ProbeLink>(&out); p && i == 0) ids.push_back(p->id);
  };
  mesh.Start();
  mesh.RunUntil(20000);
  REQUIRE(ids.size() >= 5);
  CHECK(mesh.node(0).stats().probes_measured == 0);
  const double before = mesh.node(0).uplink_estimate_mbps();
  mesh.Inject(0, meshtrain::node::ProbeResult{ids.front(), 999, 64});
  mesh.RunUntil(20001);
  CHECK(mesh.node(0).stats().probes_measured == 0);
  CHECK(mesh.node(0).uplink_estimate_mbps() == before);
}
