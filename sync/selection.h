// Receiver selection (docs/contract.md "Receiver selection"): to which peers a node multicasts its
// parameters each round.
//
//   all       every live peer;
//   random    P live peers uniformly at random (the bandwidth-agnostic baseline);
//   selmcast  a global, bandwidth-aware assignment for all senders at once. Every live node is a
//             sender. With uplink U_i, downlink D_j (MB/s) and demand d = min(P, n − 1), it first
//             maximises the bottleneck rate r such that every sender reaches ≥ d receivers with
//             |R_i|·r ≤ U_i and senders_j·r ≤ D_j, then adds every extra (sender, receiver) pair
//             that still fits at rate r (a larger mean fanout mixes faster).
//
// Exact SELMCAST (n ≤ SelmcastOptions::exact_max_nodes): the optimal r is one of the finite
// candidates U_i/k and D_j/k (some constraint is tight at the optimum). Feasibility is monotone
// in r, so we binary-search the sorted candidates with a max-flow test: source → sender i
// (capacity d), sender i → receiver j ≠ i (capacity 1), receiver j → sink (capacity
// ⌊D_j/r⌋), after checking ⌊U_i/r⌋ ≥ d for every sender; feasible iff the flow saturates n·d.
// At the best r the source capacities are raised to ⌊U_i/r⌋ and the flow is augmented, which
// adds the largest possible number of extra pairs without lowering r.
//
// Greedy SELMCAST (larger n): senders in random order each take the d receivers with the largest
// remaining downlink-per-load D_j/(senders_j + 1); r is the resulting bottleneck, and extra pairs
// that fit at r are added in random order. O(n·d·log n + extras).
//
// Ties are broken by the RNG (node order, edge order), so the mixing graph changes every round
// while the rate stays optimal. A node computes the whole assignment from its own view and keeps
// its own receiver set; nodes with slightly different views agree approximately.
//
// Receive load: `receive_load_mbps` is downlink bandwidth already busy with other transfers; the
// solver plans with D − load, floored at `min_available_share`·D so a busy node stays usable.
//
// Round-time refinement (Select(), up to SelmcastOptions::refine_max_nodes nodes): the rounds of
// the daemon are asynchronous — each sender's round lasts until its slowest receiver has the
// parameters — so "an extra receiver that costs no rate" is read per sender: in the plan's
// max-min fair share of the links (FairSenderRates), no sender may get slower. Starting from the
// exact plan at r* with d receivers each, RefineForRoundTime
//   1. moves receivers (local search) while the sum of the senders' round times (Σ 1/ρ_i)
//      falls and the bottleneck rate stays r*, so fast senders stop feeding slow downlinks;
//   2. gives every node d senders (as it has d receivers; the missing ones drawn at random
//      among the senders that can take it at r*), then makes the plan's graph strongly
//      connected (every node's parameters reach every node, as gossip averaging needs), adding
//      the pairs that cost the least round time and keep r*;
//   3. adds, in random order, every extra pair that lowers no sender's fair rate and keeps r*.
// Larger meshes use the plan as built (with the SPEC's extras at r*).
//
// Thread-safety: free functions on values; safe to call concurrently with distinct RNGs.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshtrain::sync {

using Rng = std::mt19937_64;

enum class SelectPolicy : uint8_t { kAll, kRandom, kSelmcast };

// The receiver selections' names (--select of the agent and the simulator, the config file,
// status), in the order help and error messages list them.
inline constexpr std::array<std::pair<std::string_view, SelectPolicy>, 3> kSelectPolicyNames = {{
    {"all", SelectPolicy::kAll},
    {"random", SelectPolicy::kRandom},
    {"selmcast", SelectPolicy::kSelmcast},
}};

// A name of kSelectPolicyNames; nullopt for anything else.
std::optional<SelectPolicy> ParseSelectPolicy(std::string_view name);
const char* SelectPolicyName(SelectPolicy policy);

// What a node knows about one node's bandwidth (from membership metadata). 0 = unknown.
struct NodeBandwidth {
  double uplink_mbps = 0;
  double downlink_mbps = 0;
  double receive_load_mbps = 0;
};
using BandwidthView = std::map<std::string, NodeBandwidth>;

struct SelmcastOptions {
  double default_mbps = 10.0;            // assumed for unknown (0 or missing) uplink/downlink
  size_t exact_max_nodes = 64;           // exact max-flow up to this many nodes, greedy above
  size_t max_fanout = 0;                 // cap on |R_i| including extras; 0 = no cap
  double min_available_share = 0.05;     // a loaded downlink still offers this share of D
  bool extras_at_bottleneck = true;      // Solve*: add every extra pair that fits at r*
  size_t refine_max_nodes = 24;          // Select(): round-time refinement up to this size; 0 = off
  size_t refine_max_evaluations = 3000;  // budget of plan evaluations for the local search
  bool refine_connect = true;            // refinement step 2: a strongly connected plan
};

// Effective capacities the solver plans with (MB/s, > 0).
struct NodeCapacity {
  std::string name;
  double uplink_mbps = 0;
  double downlink_mbps = 0;
};

// A global SELMCAST plan.
struct Assignment {
  std::vector<std::string> nodes;              // the senders (= all nodes), as given
  std::vector<std::vector<size_t>> receivers;  // receivers[i]: indices into `nodes`, ascending
  double rate_mbps = 0;  // the bottleneck rate r the plan was built for (0 when n < 2)
  size_t demand = 0;     // d = min(P, n − 1)
  bool exact = false;    // built by the exact algorithm

  double MeanFanout() const;
  // Receivers of `name` (names); empty if unknown.
  std::vector<std::string> ReceiversOf(const std::string& name) const;
};

// min over senders of U_i/|R_i| and over receivers of D_j/senders_j for a plan (0 if no pairs).
double BottleneckRate(const Assignment& plan, const std::vector<NodeCapacity>& caps);

// Per sender: the rate of its slowest flow when every flow of the plan shares the links max-min
// fairly (progressive filling over the uplinks U_i and downlinks D_j). 0 for a sender without
// receivers. The sender's round time is proportional to 1 / rate.
std::vector<double> FairSenderRates(const Assignment& plan, const std::vector<NodeCapacity>& caps);

// The round-time refinement described above, in place. `plan` must have been built for `caps`
// (its rate_mbps is kept as the floor of the bottleneck rate).
void RefineForRoundTime(Assignment* plan, const std::vector<NodeCapacity>& caps, Rng& rng,
                        const SelmcastOptions& options = {});

// Applies defaults and receive load to the view for these nodes.
std::vector<NodeCapacity> ResolveCapacities(const std::vector<std::string>& nodes,
                                            const BandwidthView& bandwidth,
                                            const SelmcastOptions& options = {});

// The algorithms on resolved capacities. `caps` names must be distinct; capacities that are not
// positive and finite are treated as tiny (such a node still sends and receives, slowly).
Assignment SolveSelmcastExact(const std::vector<NodeCapacity>& caps, size_t fanout, Rng& rng,
                              const SelmcastOptions& options = {});
Assignment SolveSelmcastGreedy(const std::vector<NodeCapacity>& caps, size_t fanout, Rng& rng,
                               const SelmcastOptions& options = {});
// Exact up to options.exact_max_nodes, greedy above.
Assignment SolveSelmcast(const std::vector<NodeCapacity>& caps, size_t fanout, Rng& rng,
                         const SelmcastOptions& options = {});

// The receivers `self` should send to this round. `candidates` are the live peers (self, if
// present, is ignored; duplicates are ignored). For selmcast the plan covers self and all
// candidates; `plan_out`, if given, receives it.
std::vector<std::string> Select(SelectPolicy policy, const std::string& self,
                                const std::vector<std::string>& candidates, size_t fanout,
                                const BandwidthView& bandwidth, Rng& rng,
                                const SelmcastOptions& options = {},
                                Assignment* plan_out = nullptr);

}  // namespace meshtrain::sync
