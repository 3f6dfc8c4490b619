// Unit tests of BarrierCore: policy semantics, equivalences the spec promises, probe timeouts,
// departures and wait accounting. All in virtual time.
#include "sync/barrier.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace meshtrain::sync {
namespace {

BarrierConfig Config(Policy p, uint64_t s = 0, size_t beta = 4) {
  BarrierConfig c;
  c.policy = p;
  c.staleness = s;
  c.sample = beta;
  c.probe_timeout = 500;
  return c;
}

TEST_CASE("Policy names parse and print", "[sync][barrier]") {
  for (Policy p :
       {Policy::kAsp, Policy::kBsp, Policy::kSsp, Policy::kPbsp, Policy::kPssp, Policy::kDssp}) {
    REQUIRE(ParsePolicy(PolicyName(p)) == p);
  }
  REQUIRE_FALSE(ParsePolicy("BSP").has_value());
  REQUIRE_FALSE(ParsePolicy("").has_value());
  REQUIRE(IsProbabilistic(Policy::kPssp));
  REQUIRE_FALSE(IsProbabilistic(Policy::kSsp));
}

TEST_CASE("bsp, ssp and asp decide from the view", "[sync][barrier]") {
  Rng rng(1);
  BarrierCore bsp(Config(Policy::kBsp)), ssp(Config(Policy::kSsp, 2)), asp(Config(Policy::kAsp));
  for (BarrierCore* c : {&bsp, &ssp, &asp}) {
    c->OnProgress("a", 5, 0);
    c->OnProgress("b", 3, 0);
  }
  REQUIRE(bsp.Check(3, 0, rng) == Decision::kPass);  // c_i − min = 0
  REQUIRE(bsp.Check(4, 0, rng) == Decision::kWait);
  REQUIRE(ssp.Check(5, 0, rng) == Decision::kPass);  // 5 − 3 = 2 ≤ s
  REQUIRE(ssp.Check(6, 0, rng) == Decision::kWait);
  REQUIRE(asp.Check(1000, 0, rng) == Decision::kPass);
  // New progress re-evaluates a waiting node.
  REQUIRE(bsp.OnProgress("b", 4, 10));
  REQUIRE(bsp.Check(4, 10, rng) == Decision::kPass);
  REQUIRE(ssp.OnProgress("b", 4, 10));
  REQUIRE(ssp.Check(6, 10, rng) == Decision::kPass);
  // Deterministic policies never query and never set deadlines.
  REQUIRE(bsp.TakeQueries().empty());
  REQUIRE(bsp.NextDeadline() == kNoDeadline);
}

TEST_CASE(
    "max peers (--max-peers): peers beyond N are observers nobody waits for, promoted on departure",
    "[sync][barrier]") {
  Rng rng(3);
  for (Policy p : {Policy::kBsp, Policy::kPbsp, Policy::kPssp}) {
    BarrierConfig c = Config(p, 0, 100);
    c.max_peers = 2;
    BarrierCore core(c, "me");
    REQUIRE(core.OnProgress("a", 10, 0));
    REQUIRE(core.OnProgress("b", 10, 0));
    REQUIRE_FALSE(core.OnProgress("late", 0, 0));  // the view is full: an observer
    REQUIRE_FALSE(core.OnProgress("me", 0, 0));    // never its own observer
    REQUIRE(core.view().size() == 2);
    REQUIRE(core.observers() == std::vector<std::string>{"late"});
    // A bsp-like barrier at step 10 passes although "late" is at step 0.
    REQUIRE(core.Check(10, 0, rng) == Decision::kPass);
    for (const auto& q : core.TakeQueries()) REQUIRE(q.to != "late");
    // The observer's progress is tracked; "a" leaves: "late" takes its place at its step.
    REQUIRE_FALSE(core.OnProgress("late", 7, 5));
    REQUIRE(core.OnPeerRemoved("a"));
    REQUIRE(core.observers().empty());
    REQUIRE(core.view().Contains("late"));
    REQUIRE(core.view().Find("late")->step == 7);
    REQUIRE(core.Check(11, 10, rng) == Decision::kWait);  // now it is waited for
    // An observer that stops training is simply dropped.
    REQUIRE_FALSE(core.OnProgress("x", 1, 10));
    REQUIRE_FALSE(core.OnPeerRemoved("x"));
    REQUIRE(core.observers().empty());
  }
  // Without a limit every training peer is in the view.
  BarrierCore all(Config(Policy::kBsp), "me");
  for (const char* n : {"a", "b", "c", "d"}) all.OnProgress(n, 1, 0);
  REQUIRE(all.view().size() == 4);
  REQUIRE(all.observers().empty());
}

TEST_CASE("a node alone, or with only finished peers, always passes", "[sync][barrier]") {
  Rng rng(2);
  for (Policy p : {Policy::kBsp, Policy::kSsp, Policy::kPbsp, Policy::kPssp, Policy::kDssp}) {
    BarrierCore core(Config(p, 1, 2), "me");
    REQUIRE(core.Check(100, 0, rng) == Decision::kPass);
    core.OnProgress("done", 1, 0);
    REQUIRE(core.Check(100, 0, rng) == Decision::kWait);
    core.OnPeerRemoved("done");  // training=false is a departure (docs/contract.md "Barriers")
    REQUIRE(core.Check(100, 0, rng) == Decision::kPass);
  }
}

// A randomized sequence of progress events, departures, joins, query answers and time; the
// probabilistic core with β ≥ live peers must decide exactly like its deterministic twin.
// `pool` peers may exist, `start` of them at first; with `watch` the probabilistic core runs as
// node::Node runs bsp/ssp (BarrierConfig::peers_watch), and a pool above 32 indexes its slots.
void RunEquivalence(Policy det_policy, Policy prob_policy, uint64_t s, uint64_t seed, int pool = 8,
                    int start = 5, bool watch = false) {
  Rng world(seed), rng_det(seed + 1), rng_prob(seed + 2);
  const size_t kPool = static_cast<size_t>(pool);
  BarrierCore det(Config(det_policy, s), "me");
  BarrierConfig prob_config = Config(prob_policy, s, kPool + seed % 3);
  prob_config.peers_watch = watch;
  BarrierCore prob(prob_config, "me");
  std::map<std::string, uint64_t> truth;  // live peers' real steps
  auto pick = [&](int n) { return static_cast<int>(world() % static_cast<uint64_t>(n)); };
  auto name = [](int i) { return "p" + std::to_string(i); };
  auto learn = [&](const std::string& n, uint64_t step, TimeMs now) {
    det.OnProgress(n, step, now);
    prob.OnProgress(n, step, now);
  };
  TimeMs now = 0;
  for (int i = 0; i < start; ++i) {
    truth[name(i)] = world() % 6;
    learn(name(i), truth[name(i)], now);
  }
  uint64_t my = world() % 6;
  std::vector<ProgressQuery> pending;
  int passes = 0, waits = 0;
  const int iterations = pool > 8 ? 1500 : 400;
  for (int iter = 0; iter < iterations; ++iter) {
    const int ev = pick(10);
    if (ev <= 2 && !truth.empty()) {  // a peer advances; sometimes the news arrives
      auto it = std::next(truth.begin(), pick(static_cast<int>(truth.size())));
      if (pool > 8 && world() % 2) {  // many peers: the slowest catches up, or nobody passes
        it = std::min_element(truth.begin(), truth.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
      }
      it->second += 1 + world() % 2;
      if (world() % 2) learn(it->first, it->second, now);
    } else if (ev == 3 && !truth.empty()) {  // stale gossip about some peer
      auto it = std::next(truth.begin(), pick(static_cast<int>(truth.size())));
      learn(it->first, it->second - std::min<uint64_t>(it->second, world() % 3), now);
    } else if (ev == 4 && truth.size() > 1) {  // a peer fails, leaves or finishes training
      auto it = std::next(truth.begin(), pick(static_cast<int>(truth.size())));
      REQUIRE(det.OnPeerRemoved(it->first) == prob.OnPeerRemoved(it->first));
      truth.erase(it);
    } else if (ev == 5 && truth.size() < kPool) {  // a peer joins
      const std::string n = name(pick(pool));
      if (!truth.count(n)) {
        truth[n] = my > 3 ? my - world() % 4 : my;
        learn(n, truth[n], now);
      }
    } else if (ev == 6) {  // answer some outstanding queries; drop others
      for (const ProgressQuery& q : pending) {
        if (!truth.count(q.to) || world() % 4 == 0) continue;
        prob.OnReply(q.to, q.seq, truth[q.to], now);
        det.OnProgress(q.to, truth[q.to], now);  // the same fact, learned by the twin
      }
      pending.clear();
    } else {
      now += static_cast<TimeMs>(world() % 700);
    }
    const Decision a = det.Check(my, now, rng_det);
    const Decision b = prob.Check(my, now, rng_prob);
    for (ProgressQuery& q : prob.TakeQueries()) pending.push_back(std::move(q));
    INFO("seed " << seed << " iter " << iter << " my " << my);
    REQUIRE(a == b);
    if (a == Decision::kPass) {
      ++passes;
      if (world() % 3 != 0) ++my;  // start the next step
    } else {
      ++waits;
    }
  }
  // The sequence must exercise both outcomes, or the comparison proves little.
  REQUIRE(passes > 20);
  REQUIRE(waits > 20);
}

TEST_CASE("pbsp with beta >= live peers behaves exactly as bsp", "[sync][barrier]") {
  for (uint64_t seed = 1; seed <= 40; ++seed) RunEquivalence(Policy::kBsp, Policy::kPbsp, 0, seed);
}

TEST_CASE("pssp with beta >= live peers behaves exactly as ssp", "[sync][barrier]") {
  for (uint64_t seed = 1; seed <= 40; ++seed) RunEquivalence(Policy::kSsp, Policy::kPssp, 2, seed);
}

TEST_CASE("with 40 peers, watched or not, pbsp and pssp still behave exactly as bsp and ssp",
          "[sync][barrier]") {
  // node::Node's bsp/ssp: every peer sampled, watched (no re-queries), the sample indexed and
  // decided on the view's minimum once every blocking peer is asked.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    RunEquivalence(Policy::kBsp, Policy::kPbsp, 0, seed, 44, 36, true);
    RunEquivalence(Policy::kSsp, Policy::kPssp, 2, seed, 44, 36, true);
    // Without watches (dssp's way): re-queries come from the heap of due answers.
    RunEquivalence(Policy::kBsp, Policy::kPbsp, 0, seed, 44, 36, false);
    RunEquivalence(Policy::kSsp, Policy::kPssp, 2, seed, 44, 36, false);
  }
}

TEST_CASE("with every peer sampled and watched, an answer costs no walk over the sample",
          "[sync][barrier]") {
  // Bsp in a mesh of N asks up to N peers a step; if each answer re-walked the sample
  // the step would cost N² (a 1000-node mesh N³). Here 100 answers cost O(1) each.
  Rng rng(5);
  BarrierConfig cfg = Config(Policy::kPbsp, 0, std::numeric_limits<size_t>::max());
  cfg.peers_watch = true;
  BarrierCore core(cfg, "me");
  constexpr int kPeers = 100;
  for (int i = 0; i < kPeers; ++i) core.OnProgress("p" + std::to_string(i), 3, 0);
  REQUIRE(core.Check(4, 0, rng) == Decision::kWait);
  std::vector<ProgressQuery> q = core.TakeQueries();
  REQUIRE(q.size() == kPeers);
  const uint64_t visits_after_asking = core.stats().sample_visits;
  // p0 answers behind (it watches), p1 goes away, the rest answer at need: still waiting on p0.
  REQUIRE(core.OnReply(q[0].to, q[0].seq, 3, 5));
  REQUIRE(core.Check(4, 5, rng) == Decision::kWait);
  REQUIRE(core.OnPeerRemoved(q[1].to));
  for (size_t i = 2; i < q.size(); ++i) {
    REQUIRE(core.OnReply(q[i].to, q[i].seq, 4, 10));
    REQUIRE(core.Check(4, 10, rng) == Decision::kWait);
  }
  CHECK(core.TakeQueries().empty());  // nobody asked again
  CHECK(core.NextDeadline() == 500);
  // The watcher's answer releases the node.
  REQUIRE(core.OnReply(q[0].to, q[0].seq, 4, 20));
  REQUIRE(core.Check(4, 20, rng) == Decision::kPass);
  CHECK(core.stats().replies == kPeers - 1);
  // About one slot lookup per answer (100), plus one walk of the sample after the removal's
  // refill check: far below the 100 × 100 / 2 of a walk per answer.
  CHECK(core.stats().sample_visits - visits_after_asking <= 3 * kPeers);
}

TEST_CASE("pbsp and pssp with beta = 0 behave as asp", "[sync][barrier]") {
  Rng rng(3);
  for (Policy p : {Policy::kPbsp, Policy::kPssp}) {
    BarrierCore core(Config(p, 1, 0));
    for (int i = 0; i < 10; ++i) core.OnProgress("p" + std::to_string(i), 0, 0);
    for (uint64_t step = 0; step < 100; ++step) {
      REQUIRE(core.Check(step, static_cast<TimeMs>(step), rng) == Decision::kPass);
    }
    REQUIRE(core.TakeQueries().empty());
    REQUIRE(core.stats().waits == 0);
  }
}

TEST_CASE("no policy waits on a removed peer", "[sync][barrier]") {
  for (Policy p : {Policy::kBsp, Policy::kSsp, Policy::kPbsp, Policy::kPssp, Policy::kDssp}) {
    INFO(PolicyName(p));
    Rng rng(4);
    BarrierConfig c = Config(p, 2, 3);
    c.r_max = 2;
    BarrierCore core(c, "me");
    core.OnProgress("slow", 0, 0);
    core.OnProgress("a", 10, 0);
    core.OnProgress("b", 10, 0);
    REQUIRE(core.Check(10, 0, rng) == Decision::kWait);
    REQUIRE(core.waiting());
    // Failure detected: released at the same instant, with no reply or timeout needed.
    REQUIRE(core.OnPeerRemoved("slow"));
    REQUIRE(core.Check(10, 0, rng) == Decision::kPass);
    REQUIRE_FALSE(core.waiting());
  }
}

TEST_CASE("a sampled peer that is removed is replaced at once", "[sync][barrier]") {
  int hits = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Rng rng(seed);
    BarrierCore core(Config(Policy::kPssp, 2, 1), "me");
    core.OnProgress("slow", 0, 0);
    core.OnProgress("a", 10, 0);
    core.OnProgress("b", 10, 0);
    if (core.Check(10, 0, rng) == Decision::kPass) continue;  // sampled a or b
    ++hits;
    REQUIRE(core.sample() == std::vector<std::string>{"slow"});
    auto q = core.TakeQueries();
    REQUIRE(q.size() == 1);
    REQUIRE(q[0].to == "slow");
    REQUIRE(core.OnPeerRemoved("slow"));
    REQUIRE(core.Check(10, 1, rng) == Decision::kPass);
    // A late reply from the removed peer must not bring it back.
    REQUIRE_FALSE(core.OnReply("slow", q[0].seq, 0, 2));
    REQUIRE_FALSE(core.view().Contains("slow"));
  }
  REQUIRE(hits > 3);
}

TEST_CASE("pbsp queries blocking sampled peers and passes on their replies", "[sync][barrier]") {
  Rng rng(5);
  BarrierCore core(Config(Policy::kPbsp, 0, 2), "me");
  core.OnProgress("a", 1, 0);
  core.OnProgress("b", 1, 0);
  REQUIRE(core.Check(1, 0, rng) == Decision::kPass);  // the view already satisfies: no query
  REQUIRE(core.TakeQueries().empty());
  REQUIRE(core.Check(2, 100, rng) == Decision::kWait);
  auto q = core.TakeQueries();
  REQUIRE(q.size() == 2);
  REQUIRE(core.NextDeadline() == 600);
  // A wrong sequence number still carries progress, but does not count as an answer.
  REQUIRE(core.OnReply("a", 9999, 2, 150));
  REQUIRE(core.stats().replies == 0);
  REQUIRE(core.Check(2, 150, rng) == Decision::kWait);
  const ProgressQuery qb = q[0].to == "b" ? q[0] : q[1];
  REQUIRE(core.OnReply("b", qb.seq, 2, 200));
  REQUIRE(core.stats().replies == 1);
  REQUIRE(core.Check(2, 200, rng) == Decision::kPass);
  REQUIRE(core.wait_seconds() == Approx(0.1));
}

TEST_CASE("pssp re-samples after a probe timeout when a sampled peer never answers",
          "[sync][barrier]") {
  int silent_first = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Rng rng(seed);
    BarrierCore core(Config(Policy::kPssp, 2, 1), "me");
    core.OnProgress("mute", 0, 0);  // alive (not yet failed) but never answers
    core.OnProgress("b", 4, 0);
    core.OnProgress("c", 4, 0);
    if (core.Check(5, 0, rng) == Decision::kPass) continue;
    ++silent_first;
    auto q = core.TakeQueries();
    REQUIRE(q.size() == 1);
    REQUIRE(q[0].to == "mute");
    REQUIRE(core.NextDeadline() == 500);
    REQUIRE(core.Check(5, 499, rng) == Decision::kWait);  // not yet timed out
    REQUIRE(core.TakeQueries().empty());
    // Timeout: the silent peer is replaced by another; b and c satisfy the bound.
    REQUIRE(core.Check(5, 500, rng) == Decision::kPass);
    REQUIRE(core.stats().timeouts == 1);
    REQUIRE(core.wait_seconds() == Approx(0.5));
    // It stays deprioritised in later steps until it shows signs of life.
    REQUIRE(core.Check(6, 600, rng) == Decision::kPass);
    REQUIRE(core.TakeQueries().empty());
  }
  REQUIRE(silent_first > 5);
}

TEST_CASE("pssp keeps re-querying when every live peer is behind and silent", "[sync][barrier]") {
  Rng rng(6);
  BarrierCore core(Config(Policy::kPssp, 1, 2), "me");
  core.OnProgress("x", 0, 0);
  core.OnProgress("y", 0, 0);
  TimeMs now = 0;
  REQUIRE(core.Check(5, now, rng) == Decision::kWait);
  REQUIRE(core.TakeQueries().size() == 2);
  for (int round = 0; round < 4; ++round) {
    now = core.NextDeadline();
    REQUIRE(now == 500 * (round + 1));
    REQUIRE(core.Check(5, now, rng) == Decision::kWait);
    REQUIRE(core.TakeQueries().size() == 2);  // fresh sample, asked again
  }
  // One answers with progress within the bound; the other is still behind: keep waiting.
  const uint64_t before = core.stats().queries;
  REQUIRE(core.OnReply("x", 0, 4, now + 10));
  REQUIRE(core.Check(5, now + 10, rng) == Decision::kWait);
  REQUIRE(core.stats().queries == before);
  REQUIRE(core.OnProgress("y", 4, now + 20));
  REQUIRE(core.Check(5, now + 20, rng) == Decision::kPass);
  REQUIRE(core.WaitSeconds(now + 1000) == Approx((now + 20) / 1000.0));
}

// Regression (simulator): a sampled peer that answered "behind" was never asked again, so the
// waiter sat idle until the probe timeout even after the peer caught up, unless a parameter
// transfer happened to bring the news.
TEST_CASE("pbsp re-queries a blocking peer that answered and passes before the probe timeout",
          "[sync][barrier]") {
  Rng rng(7);
  BarrierCore core(Config(Policy::kPbsp, 0, 2), "me");  // requery_interval 0 = timeout / 5
  REQUIRE(core.config().requery_interval == 100);
  core.OnProgress("a", 3, 0);
  core.OnProgress("b", 3, 0);
  REQUIRE(core.Check(4, 0, rng) == Decision::kWait);
  auto q = core.TakeQueries();
  REQUIRE(q.size() == 2);
  REQUIRE(core.NextDeadline() == 500);  // answers outstanding: only the probe timeout
  // Both answer "still at 3": they block, so they are asked again after the interval.
  for (const ProgressQuery& query : q) REQUIRE(core.OnReply(query.to, query.seq, 3, 10));
  REQUIRE(core.Check(4, 10, rng) == Decision::kWait);
  REQUIRE(core.TakeQueries().empty());
  REQUIRE(core.NextDeadline() == 100);
  REQUIRE(core.Check(4, 99, rng) == Decision::kWait);
  REQUIRE(core.TakeQueries().empty());
  REQUIRE(core.Check(4, 100, rng) == Decision::kWait);
  q = core.TakeQueries();
  REQUIRE(q.size() == 2);
  CHECK(core.stats().requeries == 2);
  CHECK(core.NextDeadline() == 500);  // re-queries never extend the round
  // Both caught up meanwhile, with no other traffic: their answers release the waiter.
  for (const ProgressQuery& query : q) REQUIRE(core.OnReply(query.to, query.seq, 4, 120));
  REQUIRE(core.Check(4, 120, rng) == Decision::kPass);
  CHECK(core.wait_seconds() == Approx(0.12));
  CHECK(core.stats().timeouts == 0);
}

// With peers_watch (node::Node's queries carry `need` and a peer below it answers
// again when it gets there) a peer that answered "behind" is not re-queried: its own answer at
// `need` releases the waiter, and the probe timeout's new round stays the fallback.
TEST_CASE("pbsp with peers_watch waits for the watched peers' answers instead of re-querying",
          "[sync][barrier]") {
  Rng rng(7);
  BarrierConfig cfg = Config(Policy::kPbsp, 0, 2);
  cfg.peers_watch = true;
  BarrierCore core(cfg, "me");
  core.OnProgress("a", 3, 0);
  core.OnProgress("b", 3, 0);
  REQUIRE(core.Check(4, 0, rng) == Decision::kWait);
  auto q = core.TakeQueries();
  REQUIRE(q.size() == 2);
  // "a" answers below need (4): it watches for us. "b" answers at need: it no longer blocks.
  const ProgressQuery& qa = q[0].to == "a" ? q[0] : q[1];
  const ProgressQuery& qb = q[0].to == "a" ? q[1] : q[0];
  REQUIRE(core.OnReply(qa.to, qa.seq, 3, 10));
  REQUIRE(core.OnReply(qb.to, qb.seq, 4, 10));
  REQUIRE(core.Check(4, 10, rng) == Decision::kWait);
  CHECK(core.NextDeadline() == 500);  // no re-query: only the probe timeout
  REQUIRE(core.Check(4, 300, rng) == Decision::kWait);
  CHECK(core.TakeQueries().empty());
  CHECK(core.stats().requeries == 0);
  // The watcher's answer (the seq of the query it watches for) releases the waiter.
  REQUIRE(core.OnReply(qa.to, qa.seq, 4, 320));
  REQUIRE(core.Check(4, 320, rng) == Decision::kPass);
  CHECK(core.stats().timeouts == 0);
}

TEST_CASE(
    "pbsp with peers_watch: a watched peer whose answer is lost is asked again in a new round",
    "[sync][barrier]") {
  Rng rng(7);
  BarrierConfig cfg = Config(Policy::kPbsp, 0, 1);
  cfg.peers_watch = true;
  BarrierCore core(cfg, "me");
  core.OnProgress("a", 3, 0);
  REQUIRE(core.Check(4, 0, rng) == Decision::kWait);
  auto q = core.TakeQueries();
  REQUIRE(q.size() == 1);
  REQUIRE(core.OnReply(q[0].to, q[0].seq, 3, 10));  // behind: it watches
  REQUIRE(core.Check(4, 10, rng) == Decision::kWait);
  // Its answer at need is lost: the probe timeout draws a new round, which asks again.
  REQUIRE(core.NextDeadline() == 500);
  REQUIRE(core.Check(4, 500, rng) == Decision::kWait);
  q = core.TakeQueries();
  REQUIRE(q.size() == 1);
  CHECK(q[0].to == "a");
  CHECK(core.stats().timeouts == 1);
  REQUIRE(core.OnReply(q[0].to, q[0].seq, 4, 510));
  REQUIRE(core.Check(4, 510, rng) == Decision::kPass);
}

TEST_CASE("re-queries send at most beta queries per interval and still re-sample at the timeout",
          "[sync][barrier]") {
  Rng rng(8);
  BarrierConfig cfg = Config(Policy::kPssp, 1, 3);
  cfg.requery_interval = 50;
  BarrierCore core(cfg, "me");
  for (const char* peer : {"a", "b", "c", "d", "e", "f"}) core.OnProgress(peer, 0, 0);
  // Every peer answers at once and stays behind; the node is woken at each deadline and on
  // every answer, as the agent does.
  std::vector<TimeMs> sent_at;
  TimeMs now = 0;
  REQUIRE(core.Check(5, now, rng) == Decision::kWait);
  const uint64_t rounds_at_start = core.stats().rounds;
  for (;;) {
    for (auto q = core.TakeQueries(); !q.empty(); q = core.TakeQueries()) {
      for (const ProgressQuery& query : q) {
        sent_at.push_back(now);
        REQUIRE(core.OnReply(query.to, query.seq, 0, now));
      }
      REQUIRE(core.Check(5, now, rng) == Decision::kWait);
    }
    const TimeMs next = core.NextDeadline();
    REQUIRE(next > now);
    if (next > 1000) break;
    now = next;
    REQUIRE(core.Check(5, now, rng) == Decision::kWait);
  }
  // At most β = 3 queries in any window of one interval.
  for (size_t i = 0; i < sent_at.size(); ++i) {
    size_t in_window = 0;
    for (size_t j = i; j < sent_at.size() && sent_at[j] < sent_at[i] + cfg.requery_interval; ++j) {
      ++in_window;
    }
    CHECK(in_window <= 3);
  }
  // Re-queried every interval (3 per 50 ms over one second, about 60) ...
  CHECK(sent_at.size() >= 57);
  // ... and re-sampled at each probe timeout all the same.
  CHECK(core.stats().rounds - rounds_at_start == 2);
  CHECK(core.stats().timeouts == 2);
}

TEST_CASE("with beta >= live peers re-queries keep pbsp equal to bsp", "[sync][barrier]") {
  Rng rng(9);
  BarrierCore core(Config(Policy::kPbsp, 0, 8), "me");
  core.OnProgress("a", 2, 0);
  core.OnProgress("b", 1, 0);
  REQUIRE(core.Check(2, 0, rng) == Decision::kWait);
  auto q = core.TakeQueries();
  REQUIRE(q.size() == 1);  // only b blocks
  REQUIRE(q[0].to == "b");
  REQUIRE(core.OnReply("b", q[0].seq, 1, 5));
  REQUIRE(core.Check(2, 5, rng) == Decision::kWait);
  REQUIRE(core.Check(2, 100, rng) == Decision::kWait);
  q = core.TakeQueries();
  REQUIRE(q.size() == 1);
  REQUIRE(q[0].to == "b");  // a satisfies bsp's bound: never asked
  // Removal still releases at once, even with a re-query outstanding.
  REQUIRE(core.OnPeerRemoved("b"));
  REQUIRE(core.Check(2, 101, rng) == Decision::kPass);
}

TEST_CASE("pssp samples beta distinct peers uniformly, reproducibly per seed", "[sync][barrier]") {
  constexpr int kPeers = 10, kRounds = 2000;
  BarrierCore a(Config(Policy::kPssp, 0, 3), "me"), b(Config(Policy::kPssp, 0, 3), "me");
  Rng ra(11), rb(11);
  for (int i = 0; i < kPeers; ++i) {
    a.OnProgress("p" + std::to_string(i), 0, 0);
    b.OnProgress("p" + std::to_string(i), 0, 0);
  }
  std::map<std::string, int> counts;
  TimeMs now = 0;
  REQUIRE(a.Check(1, now, ra) == Decision::kWait);
  REQUIRE(b.Check(1, now, rb) == Decision::kWait);
  for (int round = 0; round < kRounds; ++round) {
    // Every peer answers (so none is deprioritised as silent) but stays behind.
    const auto qa = a.TakeQueries();
    const auto qb = b.TakeQueries();
    REQUIRE(qa.size() == 3);
    std::set<std::string> distinct;
    for (size_t i = 0; i < qa.size(); ++i) {
      REQUIRE(qa[i].to == qb[i].to);  // same seed, same inputs: same sample
      distinct.insert(qa[i].to);
      ++counts[qa[i].to];
      a.OnReply(qa[i].to, qa[i].seq, 0, now);
      b.OnReply(qb[i].to, qb[i].seq, 0, now);
    }
    REQUIRE(distinct.size() == 3);  // without replacement
    now = a.NextDeadline();
    REQUIRE(a.Check(1, now, ra) == Decision::kWait);
    REQUIRE(b.Check(1, now, rb) == Decision::kWait);
  }
  REQUIRE(counts.size() == kPeers);
  for (const auto& [name, c] : counts) {
    INFO(name);
    REQUIRE(c == Approx(kRounds * 3.0 / kPeers).epsilon(0.1));
  }
}

TEST_CASE("barrier wait time accumulates across waits", "[sync][barrier]") {
  Rng rng(7);
  BarrierCore core(Config(Policy::kBsp));
  core.OnProgress("a", 0, 0);
  REQUIRE(core.Check(1, 100, rng) == Decision::kWait);
  REQUIRE(core.Check(1, 200, rng) == Decision::kWait);  // same wait continues
  REQUIRE(core.WaitSeconds(300) == Approx(0.2));
  core.OnProgress("a", 1, 350);
  REQUIRE(core.Check(1, 350, rng) == Decision::kPass);
  REQUIRE(core.Check(2, 1000, rng) == Decision::kWait);
  core.OnProgress("a", 2, 1500);
  REQUIRE(core.Check(2, 1500, rng) == Decision::kPass);
  REQUIRE(core.wait_seconds() == Approx(0.75));
  REQUIRE(core.stats().waits == 2);
  REQUIRE(core.stats().passes == 2);
}

TEST_CASE("dssp grants the fastest node extra steps that match the straggler's arrival",
          "[sync][barrier]") {
  Rng rng(8);
  BarrierConfig c = Config(Policy::kDssp, 2);
  c.r_max = 3;
  c.interval_alpha = 1.0;  // newest sample only: keeps the arithmetic exact
  BarrierCore core(c, "me");
  core.OnProgress("slow", 0, 0);
  core.OnProgress("slow", 1, 1000);  // 1000 ms per step, next arrival projected at 2000
  // This node computes a step every 100 ms.
  TimeMs now = 1000;
  for (uint64_t step = 0; step <= 3; ++step, now += 100) {
    REQUIRE(core.Check(step, now, rng) == Decision::kPass);  // within s_L = 2 of step 1
  }
  REQUIRE(core.own_interval_ms() == Approx(100));
  // At step 4 (3 ahead) SSP(s_L) would block. Projected: (2000 − 1400)/100 = 6 extra steps
  // would match the straggler; r_max caps it at 3, so the limit is 1 + 2 + 3 = 6.
  for (uint64_t step = 4; step <= 6; ++step, now += 100) {
    REQUIRE(core.Check(step, now, rng) == Decision::kPass);
  }
  REQUIRE(core.stats().dssp_grants == 1);
  REQUIRE(core.stats().dssp_extra_passes == 3);
  REQUIRE(core.Check(7, now, rng) == Decision::kWait);  // grant spent, straggler unchanged
  // The straggler arrives: a fresh decision. Projected next arrival 3000; at now = 2000 that
  // is 10 steps away, capped at 3: limit 2 + 2 + 3 = 7.
  REQUIRE(core.OnProgress("slow", 2, 2000));
  REQUIRE(core.Check(7, 2000, rng) == Decision::kPass);
  REQUIRE(core.Check(8, 2100, rng) == Decision::kWait);
}

TEST_CASE("dssp picks the r that best matches, and non-fastest nodes obey SSP(s_L)",
          "[sync][barrier]") {
  Rng rng(9);
  BarrierConfig c = Config(Policy::kDssp, 1);
  c.r_max = 10;
  c.interval_alpha = 1.0;
  BarrierCore core(c, "me");
  core.OnProgress("slow", 0, 0);
  core.OnProgress("slow", 1, 1000);  // next arrival projected at 1000 + 1000 = 2000
  REQUIRE(core.Check(0, 550, rng) == Decision::kPass);
  REQUIRE(core.Check(1, 850, rng) == Decision::kPass);   // own interval 300 ms
  REQUIRE(core.Check(2, 1150, rng) == Decision::kPass);  // 2 − 1 = 1 = s_L
  // Blocked at 1450: (2000 − 1450)/300 = 1.83; r = 2 finishes at 2050 (50 ms off), r = 1 at
  // 1750 (250 ms off), so r* = 2 and the limit is 1 + 1 + 2 = 4.
  REQUIRE(core.Check(3, 1450, rng) == Decision::kPass);
  REQUIRE(core.Check(4, 1750, rng) == Decision::kPass);
  REQUIRE(core.Check(5, 2050, rng) == Decision::kWait);
  REQUIRE(core.stats().dssp_grants == 1);

  BarrierCore other(c, "me");
  other.OnProgress("slow", 0, 0);
  other.OnProgress("slow", 1, 1000);
  REQUIRE(other.Check(0, 1000, rng) == Decision::kPass);
  REQUIRE(other.Check(1, 1300, rng) == Decision::kPass);  // interval 300
  REQUIRE(other.Check(2, 1600, rng) == Decision::kPass);  // interval 300, within s_L
  // Blocked at 1900: (2000 − 1900)/300 = 0.33 → r* = 0: wait for the straggler.
  REQUIRE(other.Check(3, 1900, rng) == Decision::kWait);
  REQUIRE(other.stats().dssp_grants == 0);

  BarrierCore follower(c, "me");
  follower.OnProgress("slow", 0, 0);
  follower.OnProgress("slow", 1, 1000);
  follower.OnProgress("fast", 9, 1000);
  REQUIRE(follower.Check(0, 1000, rng) == Decision::kPass);
  REQUIRE(follower.Check(1, 1100, rng) == Decision::kPass);
  REQUIRE(follower.Check(2, 1200, rng) == Decision::kPass);
  REQUIRE(follower.Check(3, 1300, rng) == Decision::kWait);  // not the fastest: SSP(s_L = 1)
}

}  // namespace

// A prefetched sample (OSP) whose answers came in while the step computed still passes when
// the step ends after its probe timeout: it is kept, with no new sample and no new queries (a
// new one would cost another round of queries and could block where this one passes). A
// sample that still blocks at its timeout is replaced as before.
TEST_CASE("a prefetched sample that passes is kept past its probe timeout", "[sync][barrier]") {
  Rng rng(11);
  BarrierConfig cfg = Config(Policy::kPssp, 1, 2);
  cfg.peers_watch = true;
  BarrierCore core(cfg, "me");
  for (const char* p : {"a", "b", "c", "d"}) core.OnProgress(p, 0, 0);
  REQUIRE(core.Check(0, 0, rng) == Decision::kPass);
  core.Prefetch(3, 0, rng);  // the sampled peers (step 0) block step 4: both are asked
  auto q = core.TakeQueries();
  REQUIRE(q.size() == 2);
  const uint64_t rounds = core.stats().rounds;
  for (const ProgressQuery& x : q) REQUIRE(core.OnReply(x.to, x.seq, 2, 20));
  // The step ends long after the probe timeout (500): the sample passes, and is kept.
  REQUIRE(core.Check(3, 1200, rng) == Decision::kPass);
  CHECK(core.stats().rounds == rounds);
  CHECK(core.stats().timeouts == 0);
  CHECK(core.TakeQueries().empty());

  // Next step: the prefetched sample blocks at the end (a peer at 1 < need 3), so the timeout
  // draws a new sample as before.
  core.Prefetch(4, 1200, rng);
  q = core.TakeQueries();
  REQUIRE(!q.empty());
  REQUIRE(core.stats().rounds == rounds + 1);
  for (const ProgressQuery& x : q) core.OnReply(x.to, x.seq, 1, 1210);  // behind: watching
  REQUIRE(core.Check(4, 2400, rng) == Decision::kWait);
  CHECK(core.stats().rounds == rounds + 2);
  CHECK(core.stats().timeouts == 1);
}

}  // namespace meshtrain::sync
