// Barrier control (docs/contract.md "Barriers"): decides, before a node starts local step c_i + 1,
// whether it may pass (c_i = completed local steps) under one of six policies — asp, bsp, ssp,
// pbsp, pssp, dssp — and counts the time it spends waiting (`barrier_wait_s`).
//
// BarrierCore is a sans-I/O state machine. It owns the node's ProgressView, never reads a clock
// and draws randomness only from the RNG passed to Check(). The caller:
//   1. feeds progress: OnProgress() for every step learned from membership/parameter traffic
//      of a live, training peer; OnPeerRemoved() when a peer fails, leaves or stops training;
//   2. before each step calls Check(c_i, now, rng); on kWait it sends the queries returned by
//      TakeQueries() (UDP progress queries) and calls Check() again whenever
//      OnProgress/OnReply/OnPeerRemoved return true, or when now >= NextDeadline();
//   3. feeds each query answer to OnReply(name, seq, step, now).
// Check() may be called more often than needed: that is harmless. Steps of peers are not
// assumed to be answered in order; a reply with a stale sequence number still counts as
// progress.
//
// Probabilistic policies (pbsp/pssp), our reading of the spec:
//   - A round samples k = min(β, live peers) peers uniformly without replacement. A sampled peer
//     whose known step already satisfies c_i − c_j ≤ bound needs no query (steps only grow, so
//     the view is a lower bound on its current step); every other sampled peer is queried.
//     Replies update the view, so with β ≥ live peers the decision is exactly bsp/ssp's.
//   - The node passes when every sampled peer satisfies the bound. Replies and view updates
//     re-evaluate the current sample.
//   - A sampled peer removed from the view is dropped from the sample at once and replaced by a
//     live peer not yet sampled in this round (queried if it blocks). A peer that joins while
//     the sample is short of β is taken in too.
//   - A sampled peer that answered but still blocks is queried again every `requery_interval`
//     (default probe_timeout / 5) while the node waits, so a node passes soon after the peer
//     catches up even when no other traffic brings the news. Each sampled peer has at most one
//     query outstanding and is asked at most once per interval, so a waiting node sends at most
//     β queries per interval. Re-queries never extend the round. With `peers_watch` (node::Node
//     for every sampled policy but dssp: its queries carry `need` and a peer below it answers again
//     when it gets there) a peer whose answer to its latest query was below `need` is not
//     re-queried: its own answer at `need` releases the node, and a lost answer is made up for by
//     the probe timeout's new round. node::Node's peers below `need` answer only then (not at
//     once), so with `peers_watch` an unanswered peer is not marked silent at the timeout.
//   - At the probe timeout the round ends and a new sample is drawn (SPEC: "re-samples after
//     each probe timeout"). Peers that did not answer a query and still block are marked silent
//     and are replaced by other peers: the next sample draws from non-silent peers first and
//     falls back to silent ones only when too few others are live (so with β ≥ live peers every
//     live peer, silent or not, stays in the sample: bsp/ssp semantics). A peer stops being
//     silent when it answers or its step advances.
//   - β = 0 passes at once (asp).
//   - Cost: a reply finds its slot in O(1) (an index for samples above 32 peers).
//     When the sample is the whole view (β >= live peers) and every peer that blocks has been
//     asked, a Check decides on the view's minimum step and re-asks only the peers due (a heap),
//     so with bsp/ssp/dssp in a mesh of N an answer costs O(log N), not a walk over N peers.
//
// dssp (Dynamic SSP, Zhao et al. 2019; pDSSP with fresh progress): decided on the same sampled
// rounds and queries as pssp — with β >= live peers (the node's default for dssp) the sample is
// every live peer, with a smaller β it is pDSSP. The node passes while every sampled peer is within
// s_L = staleness; when a sampled peer blocks at s_L but all are within s_L + r_max and the node is
// the fastest of its sample, the DSSP controller (DsspGrant) may grant r* extra steps. Blocking
// peers are queried at once, so the decision never waits for gossip to carry their progress.
//
// wbsp (worker-busy synchronous parallel, Yang et al., Parallel Computing 2024), decentralized:
// the barrier is bsp on the node's *global* step (the step it publishes and that peers' barriers
// see) over the sample: a node at global step c passes to c + 1 only once every sampled peer has
// reported c. What makes it wbsp happens beside the barrier, in the trainer: while the barrier
// holds, the node keeps taking local SGD steps on its own data, accumulating their update into
// its parameters; when the permit comes, the accumulated work goes out with the next snapshot and
// the global step advances by one. In the paper's parameter-server design the server's global
// iteration advances when the slowest worker's update arrives while fast workers keep computing
// local updates; here every node is its own server and "the slowest worker" is the slowest
// sampled peer, so the global step never runs ahead of the slowest sampled peer's report.
//
// Thread-safety: none. One thread owns a BarrierCore at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sync/progress_view.h"

namespace meshtrain::sync {

using Rng = std::mt19937_64;

inline constexpr TimeMs kNoDeadline = std::numeric_limits<TimeMs>::max();

enum class Policy : uint8_t { kAsp, kBsp, kSsp, kPbsp, kPssp, kDssp, kWbsp };

// The policies' names (the agent's and the simulator's --barrier, the config file, status and
// results), in the order help and error messages list them.
inline constexpr std::array<std::pair<std::string_view, Policy>, 7> kPolicyNames = {{
    {"asp", Policy::kAsp},
    {"bsp", Policy::kBsp},
    {"ssp", Policy::kSsp},
    {"pbsp", Policy::kPbsp},
    {"pssp", Policy::kPssp},
    {"dssp", Policy::kDssp},
    {"wbsp", Policy::kWbsp},
}};

// A name of kPolicyNames; nullopt for anything else.
std::optional<Policy> ParsePolicy(std::string_view name);
const char* PolicyName(Policy policy);
bool IsProbabilistic(Policy policy);  // pbsp, pssp
// Policies decided on a sample of peers with fresh progress queries (pbsp, pssp, dssp, wbsp;
// with β >= live peers the sample is everyone).
bool UsesSample(Policy policy);

struct BarrierConfig {
  Policy policy = Policy::kPssp;
  uint64_t staleness = 4;      // s for ssp/pssp; the lower bound s_L for dssp
  size_t sample = 4;           // β for pbsp/pssp; dssp/wbsp: 0 = every live peer
  uint64_t r_max = 4;          // dssp: at most this many extra steps beyond s_L
  TimeMs probe_timeout = 500;  // pbsp/pssp: wait this long for query answers before resampling
  // pbsp/pssp: re-query a sampled peer that answered but still blocks after this long;
  // 0 = probe_timeout / 5 (at least 1 ms).
  TimeMs requery_interval = 0;
  double interval_alpha = 0.3;  // EWMA weight of the newest step-interval sample
  // `--max-peers`: at most this many training peers in the view (0 = no limit).
  // Training peers learned while the view is full are observers: they keep syncing parameters
  // (selection is not the barrier's business) but no barrier waits for them. When a peer of
  // the view fails, leaves or stops training, the earliest observer takes its place, with the
  // step last learned about it.
  size_t max_peers = 0;
  // Prefetch also queries sampled peers that will block within one query round trip (see
  // Prefetch). Off only for A/B tests.
  bool lookahead = true;
  // The caller's queries carry `need` (the step the node waits for, episode step − bound) and a
  // peer below it answers again when it gets there (node::Node's watchers): a sampled peer whose
  // answer to the round's latest query was below `need` is then not re-queried every
  // requery_interval (it will tell), and a lost answer is recovered by the probe timeout's new
  // round instead.
  bool peers_watch = false;
};

enum class Decision { kPass, kWait };

// "Send a progress query with this sequence number to this peer."
struct ProgressQuery {
  std::string to;
  uint32_t seq = 0;
};

struct BarrierStats {
  uint64_t checks = 0;             // calls to Check
  uint64_t passes = 0;             // steps allowed
  uint64_t waits = 0;              // steps that had to wait at least once
  uint64_t rounds = 0;             // pbsp/pssp samples drawn
  uint64_t queries = 0;            // progress queries issued (re-queries included)
  uint64_t requeries = 0;          // of which re-queries of peers that answered but still block
  uint64_t lookahead_queries = 0;  // of which asked ahead of need by Prefetch (one RTT early)
  uint64_t replies = 0;            // replies matching an outstanding query
  uint64_t timeouts = 0;           // rounds ended by the probe timeout
  uint64_t dssp_grants = 0;        // dssp: times the fastest node was granted extra steps (r* > 0)
  uint64_t dssp_extra_passes = 0;  // dssp: passes beyond the s_L bound
  // Sampled policies: the largest c_i − c_j over the peers of the sample at a pass (how far
  // the node ever ran ahead of the slowest sampled peer's known step; 0 if never ahead).
  uint64_t max_sampled_lead = 0;
  // Work units (the simulator's cost counters): view entries visited by walks over the view (a
  // sample drawn while some peers are silent, a refill, dssp's projection) and sampled peers drawn.
  uint64_t visited = 0;
  // Sampled peers examined by walks over the sample (deciding, asking, replies matched against
  // it): O(β) per Check for pbsp/pssp; with every peer sampled (bsp/ssp/wbsp) a walk per Check
  // would be O(view) per message. Not part of the simulator's `work` (its figures predate it);
  // checked on its own (tests/sim/scale_test.cc). Mutable: const decisions count too.
  mutable uint64_t sample_visits = 0;
};

class BarrierCore {
 public:
  // `self` is this node's name; progress about it is ignored. `names`: where the view interns
  // peer names (ProgressView; null: a table of its own).
  explicit BarrierCore(BarrierConfig config, std::string self = {},
                       std::shared_ptr<NameTable> names = nullptr);
  BarrierCore(const BarrierCore&) = delete;
  BarrierCore& operator=(const BarrierCore&) = delete;

  // May the node, having completed `my_step` steps, start step my_step + 1 now?
  Decision Check(uint64_t my_step, TimeMs now, Rng& rng);

  // Progress of a live, training peer learned from any traffic. True if the view changed (the
  // caller should re-Check a waiting node).
  bool OnProgress(const std::string& name, uint64_t step, TimeMs now);
  // Same, but only for a peer already in the view (e.g. news carried by a progress query, whose
  // sender membership may not have vouched for): an unknown peer is ignored.
  bool OnKnownProgress(const std::string& name, uint64_t step, TimeMs now);
  // Answer to ProgressQuery `seq`. The step is used even when `seq` is stale (progress is
  // progress), but only for peers still in the view. True if anything changed.
  // `round_trip`: answered at once (false: a watcher's answer, node::Node), so the time since
  // the query is a round trip (Prefetch's look-ahead estimates it).
  bool OnReply(const std::string& name, uint32_t seq, uint64_t step, TimeMs now,
               bool round_trip = true);
  // The peer failed, left or stopped training: it leaves the view and the sample at once.
  // True if it was known (re-Check).
  bool OnPeerRemoved(const std::string& name);

  // Earliest time Check must be called again while waiting; kNoDeadline if none.
  TimeMs NextDeadline() const;
  // Queries to send now (drains).
  std::vector<ProgressQuery> TakeQueries();

  bool waiting() const { return waiting_; }
  // Total time spent in completed waits, in seconds.
  double wait_seconds() const { return static_cast<double>(wait_ms_) / 1000.0; }
  // Same, including a wait still in progress at `now`.
  double WaitSeconds(TimeMs now) const;

  const ProgressView& view() const { return view_; }
  // Training peers beyond --max-peers, in the order they were learned (empty without a limit).
  std::vector<std::string> observers() const;
  // How far a sampled peer may be behind (0, or the staleness; dssp: s_L): a node at step c
  // waits for sampled peers below c - SampledBound().
  uint64_t SampledBound() const {
    return config_.policy == Policy::kPssp || config_.policy == Policy::kDssp ? config_.staleness
                                                                              : 0;
  }
  // Overlap (OSP, computation/communication overlap): right after passing to step c + 1, open the
  // episode of step c + 2 and send its queries, so the answers arrive while step c + 1 computes and
  // the next Check finds fresh progress. No wait is counted for a prefetch.
  void Prefetch(uint64_t next_step, TimeMs now, Rng& rng);
  // Would a node that has completed `next_step` steps pass already, on what is known now? A
  // function of the peers' known progress (which only grows), so a yes stays a yes: the node
  // may grant the permit for next_step + 1 before the step ends. Sends nothing, draws nothing
  // and spends no dssp grant (the Check at the step's end does all that). Sampled policies
  // answer only inside the episode Prefetch opened for `next_step`, with a full sample.
  bool PassesAhead(uint64_t next_step) const;
  const BarrierConfig& config() const { return config_; }
  // Cache hints for news about `name` (no effect on behaviour): stage 0 the view's index bucket
  // and the sample, stage 1 the view's entry.
  void Prefetch(const std::string& name, int stage) const {
    view_.Prefetch(name, stage);
    if (stage == 0 && !slots_.empty()) __builtin_prefetch(slots_.data());
  }
  const BarrierStats& stats() const { return stats_; }
  // Peers in the current pbsp/pssp sample (empty when not waiting on a sample).
  std::vector<std::string> sample() const;
  // EWMA of this node's own compute time per step (pass to next Check), ms; 0 = unknown.
  double own_interval_ms() const { return own_interval_ms_; }

 private:
  struct Slot {
    uint32_t id = 0;                // the peer's interned name (ProgressView::Entry::name)
    uint32_t seq = 0;               // latest query in this round; 0 = not queried in this round
    bool answered = false;          // answered a query in this round (so it is not silent)
    bool awaiting = false;          // query `seq` is still unanswered
    bool watching = false;          // peers_watch: answered `seq` below need (it will tell)
    TimeMs asked_at = 0;            // when query `seq` was sent
    size_t pos = NameIndex::kNone;  // where the peer was last seen in view_ (a lookup hint)
  };

  // Sends a progress query to `slot` now.
  void Query(Slot& slot, TimeMs now);

  void StartEpisode(uint64_t my_step, TimeMs now);
  bool Evaluate(uint64_t my_step, TimeMs now, Rng& rng);
  bool EvaluateBound(uint64_t my_step, uint64_t bound) const;
  // The DSSP controller over the peers in `steps` (their known steps): may the node pass beyond
  // s_L? `min` and `max` are the smallest and largest of them.
  bool DsspGrant(uint64_t my_step, uint64_t min, uint64_t max, TimeMs now);
  uint64_t ChooseDsspExtra(TimeMs now, uint64_t min);
  bool EvaluateSampled(uint64_t my_step, TimeMs now, Rng& rng);
  // EvaluateSampled's walk over the sample: asks the sampled peers that block and were not asked
  // in this round, re-asks those due, sets requery_at_; true if none blocks.
  bool WalkSample(uint64_t my_step, TimeMs now);
  void RequeryDue(uint64_t my_step, TimeMs now);
  // The sample is full (min(β, live peers)) and every sampled peer's known step is within
  // SampledBound() of `my_step`.
  bool SampleWithin(uint64_t my_step) const;
  // Every peer of the view is sampled (β >= live peers: bsp/ssp in node::Node, dssp/wbsp by
  // default). Slots are distinct peers of the view, so then the sample is the view, and what
  // holds for all sampled peers is read from the view's step counts in O(1) (no walk).
  bool SampleIsView() const { return !slots_.empty() && slots_.size() == view_.size(); }
  // The slot of the peer with interned name `id`, or null. Linear over a small sample; a sample
  // of more than kSlotIndexMin peers is indexed (slot_of_), so a reply costs O(1), not O(β).
  Slot* FindSlot(uint32_t id);
  // Rebuilds slot_of_ after slots_ changed (callers that add slots also reset slots_asked_).
  void IndexSlots();
  static constexpr size_t kSlotIndexMin = 32;
  void NewRound(Rng& rng);
  void Refill(Rng& rng);
  void EndEpisode();

  // Records progress of a training peer that is not in the view while it is full.
  void Observe(const std::string& name, uint64_t step, TimeMs now);
  bool Full() const { return config_.max_peers > 0 && view_.size() >= config_.max_peers; }

  BarrierConfig config_;
  ProgressView view_;
  BarrierStats stats_;
  struct Observer {
    std::string name;
    uint64_t step = 0;
    TimeMs learned = 0;
  };
  std::vector<Observer> observers_;  // arrival order; only with max_peers

  // Current episode (one per step: from the first Check for my_step until it passes).
  bool in_episode_ = false;
  bool prefetched_ = false;  // the episode was opened by Prefetch, before its first Check
  uint64_t episode_step_ = 0;
  bool waiting_ = false;
  TimeMs wait_start_ = 0;
  int64_t wait_ms_ = 0;

  // Own pace, for dssp projections.
  bool have_last_pass_ = false;
  uint64_t last_pass_step_ = 0;
  TimeMs last_pass_time_ = 0;
  double own_interval_ms_ = 0;
  double rtt_ms_ = 0;  // EWMA of matched query round trips

  // pbsp/pssp round state.
  bool round_active_ = false;
  TimeMs round_deadline_ = kNoDeadline;
  TimeMs requery_at_ = kNoDeadline;  // earliest re-query of a sampled peer that still blocks
  std::vector<Slot> slots_;
  // Re-queries to come (without peers_watch): a min-heap by time of the answers to the sampled
  // peers' latest queries; an entry whose slot was asked again, left, or stopped blocking is
  // dropped when it comes up.
  struct Due {
    TimeMs at = 0;
    uint32_t id = 0;
    uint32_t seq = 0;
    // std::push_heap/pop_heap order: the earliest at the front.
    static bool Later(const Due& a, const Due& b) { return a.at > b.at; }
  };
  std::vector<Due> due_;
  std::unordered_map<uint32_t, uint32_t> slot_of_;  // id -> index in slots_ (large samples only)
  // With peers_watch: every sampled peer that blocks has been queried since slots_ last changed,
  // so a Check finds nothing to send and only has to decide (see EvaluateSampled).
  bool slots_asked_ = false;
  std::set<std::string> silent_;  // did not answer a query; sampled last
  uint32_t next_seq_ = 1;
  std::vector<ProgressQuery> queries_;

  // dssp grant: the fastest node may pass up to `grant_limit_` while the slowest peer is still
  // at `grant_base_`.
  bool has_grant_ = false;
  uint64_t grant_base_ = 0;
  uint64_t grant_limit_ = 0;
};

}  // namespace meshtrain::sync
