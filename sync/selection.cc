#include "sync/selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>

#include "sync/max_flow.h"

namespace meshtrain::sync {
namespace {

// How many unit transfers a link of `cap` MB/s carries at rate r, at most `limit`. The relative
// slack absorbs rounding when r is exactly cap/k (candidate rates are computed that way).
size_t Units(double cap, double r, size_t limit) {
  const double u = std::floor(cap / r * (1 + 1e-12));
  if (!(u >= 0)) return 0;
  return u >= static_cast<double>(limit) ? limit : static_cast<size_t>(u);
}

std::vector<size_t> ShuffledIndices(size_t n, Rng& rng) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

size_t SenderLimit(size_t n, size_t demand, const SelmcastOptions& options) {
  size_t limit = n - 1;
  if (options.max_fanout > 0) limit = std::min(limit, std::max(options.max_fanout, demand));
  return limit;
}

// The flow network of the exact algorithm at rate r. Node ids: source 0, senders 1..n,
// receivers n+1..2n, sink 2n+1. `order` permutes senders and each sender's receiver list, so
// Dinic's first-found flow differs between rounds (tie randomisation).
struct FlowModel {
  MaxFlow flow;
  std::vector<size_t> source_edges;  // per sender
  std::vector<size_t> pair_edges;    // sender -> receiver edges
  explicit FlowModel(size_t n) : flow(2 * n + 2) {}
};

// Builds the network; returns false without building the pair edges if some sender cannot
// carry `demand` units at rate r.
bool BuildModel(const std::vector<NodeCapacity>& caps, size_t demand, double r, FlowModel* m,
                Rng* rng) {
  const size_t n = caps.size();
  for (const NodeCapacity& c : caps) {
    if (Units(c.uplink_mbps, r, n - 1) < demand) return false;
  }
  const size_t source = 0, sink = 2 * n + 1;
  std::vector<size_t> senders(n), receivers(n);
  std::iota(senders.begin(), senders.end(), 0);
  std::iota(receivers.begin(), receivers.end(), 0);
  if (rng) std::shuffle(senders.begin(), senders.end(), *rng);
  m->source_edges.assign(n, 0);
  for (size_t i : senders) {
    m->source_edges[i] = m->flow.AddEdge(source, 1 + i, static_cast<int64_t>(demand));
  }
  for (size_t i : senders) {
    if (rng) std::shuffle(receivers.begin(), receivers.end(), *rng);
    for (size_t j : receivers) {
      if (j != i) m->pair_edges.push_back(m->flow.AddEdge(1 + i, 1 + n + j, 1));
    }
  }
  if (rng) std::shuffle(receivers.begin(), receivers.end(), *rng);
  for (size_t j : receivers) {
    m->flow.AddEdge(1 + n + j, sink, static_cast<int64_t>(Units(caps[j].downlink_mbps, r, n - 1)));
  }
  return true;
}

bool Feasible(const std::vector<NodeCapacity>& caps, size_t demand, double r) {
  const size_t n = caps.size();
  FlowModel m(n);
  if (!BuildModel(caps, demand, r, &m, nullptr)) return false;
  return m.flow.Run(0, 2 * n + 1) == static_cast<int64_t>(n * demand);
}

// Capacities the algorithms can divide by: non-positive or non-finite ones become tiny.
std::vector<NodeCapacity> Sanitized(const std::vector<NodeCapacity>& caps) {
  constexpr double kTiny = 1e-9;
  std::vector<NodeCapacity> out = caps;
  for (NodeCapacity& c : out) {
    if (!(c.uplink_mbps > kTiny) || !std::isfinite(c.uplink_mbps)) c.uplink_mbps = kTiny;
    if (!(c.downlink_mbps > kTiny) || !std::isfinite(c.downlink_mbps)) c.downlink_mbps = kTiny;
  }
  return out;
}

Assignment EmptyPlan(const std::vector<NodeCapacity>& caps, size_t fanout, bool exact) {
  Assignment plan;
  plan.exact = exact;
  for (const NodeCapacity& c : caps) plan.nodes.push_back(c.name);
  plan.receivers.assign(caps.size(), {});
  plan.demand = caps.size() < 2 ? 0 : std::min(fanout, caps.size() - 1);
  return plan;
}

}  // namespace

std::optional<SelectPolicy> ParseSelectPolicy(std::string_view name) {
  for (const auto& [n, p] : kSelectPolicyNames) {
    if (n == name) return p;
  }
  return std::nullopt;
}

const char* SelectPolicyName(SelectPolicy policy) {
  for (const auto& [n, p] : kSelectPolicyNames) {
    if (p == policy) return n.data();  // the table's names are string literals
  }
  return "unknown";
}

double Assignment::MeanFanout() const {
  if (receivers.empty()) return 0;
  size_t total = 0;
  for (const auto& r : receivers) total += r.size();
  return static_cast<double>(total) / static_cast<double>(receivers.size());
}

std::vector<std::string> Assignment::ReceiversOf(const std::string& name) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] != name) continue;
    for (size_t j : receivers[i]) out.push_back(nodes[j]);
    break;
  }
  return out;
}

double BottleneckRate(const Assignment& plan, const std::vector<NodeCapacity>& caps) {
  const size_t n = caps.size();
  std::vector<size_t> incoming(n, 0);
  double rate = 0;
  bool any = false;
  for (size_t i = 0; i < n && i < plan.receivers.size(); ++i) {
    const auto& r = plan.receivers[i];
    if (r.empty()) continue;
    const double up = caps[i].uplink_mbps / static_cast<double>(r.size());
    rate = any ? std::min(rate, up) : up;
    any = true;
    for (size_t j : r) ++incoming[j];
  }
  for (size_t j = 0; j < n; ++j) {
    if (incoming[j] == 0) continue;
    rate = std::min(rate, caps[j].downlink_mbps / static_cast<double>(incoming[j]));
  }
  return any ? rate : 0;
}

std::vector<NodeCapacity> ResolveCapacities(const std::vector<std::string>& nodes,
                                            const BandwidthView& bandwidth,
                                            const SelmcastOptions& options) {
  const double fallback = options.default_mbps > 0 ? options.default_mbps : 10.0;
  const double share = std::clamp(options.min_available_share, 1e-6, 1.0);
  std::vector<NodeCapacity> out;
  out.reserve(nodes.size());
  for (const std::string& name : nodes) {
    NodeCapacity c;
    c.name = name;
    c.uplink_mbps = fallback;
    c.downlink_mbps = fallback;
    double load = 0;
    auto it = bandwidth.find(name);
    if (it != bandwidth.end()) {
      if (it->second.uplink_mbps > 0) c.uplink_mbps = it->second.uplink_mbps;
      if (it->second.downlink_mbps > 0) c.downlink_mbps = it->second.downlink_mbps;
      if (it->second.receive_load_mbps > 0) load = it->second.receive_load_mbps;
    }
    c.downlink_mbps = std::max(c.downlink_mbps - load, share * c.downlink_mbps);
    out.push_back(std::move(c));
  }
  return out;
}

Assignment SolveSelmcastExact(const std::vector<NodeCapacity>& given, size_t fanout, Rng& rng,
                              const SelmcastOptions& options) {
  const std::vector<NodeCapacity> caps = Sanitized(given);
  Assignment plan = EmptyPlan(caps, fanout, /*exact=*/true);
  const size_t n = caps.size();
  const size_t d = plan.demand;
  if (d == 0) return plan;

  // Candidate rates: some sender or receiver constraint is tight at the optimum, so r* is
  // U_i/k (k ≥ d receivers) or D_j/k (k ≤ n − 1 senders). Rates above min_i U_i/d are
  // infeasible for the tightest sender and are skipped.
  double r_up = caps[0].uplink_mbps / static_cast<double>(d);
  for (const NodeCapacity& c : caps) r_up = std::min(r_up, c.uplink_mbps / static_cast<double>(d));
  std::vector<double> cands;
  cands.reserve(2 * n * (n - 1));
  for (const NodeCapacity& c : caps) {
    for (size_t k = d; k <= n - 1; ++k) {
      const double r = c.uplink_mbps / static_cast<double>(k);
      if (r <= r_up) cands.push_back(r);
    }
    for (size_t k = 1; k <= n - 1; ++k) {
      const double r = c.downlink_mbps / static_cast<double>(k);
      if (r <= r_up) cands.push_back(r);
    }
  }
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  // The smallest candidate min(U, D)/(n − 1) admits the complete graph, so it is feasible.
  size_t lo = 0, hi = cands.size() - 1;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (Feasible(caps, d, cands[mid])) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const double r = cands[lo];

  // Final plan at r*: randomised edge order picks one of the optimal assignments, then raising
  // each sender's source capacity to what its uplink carries at r* adds the maximum number of
  // extra pairs (augmenting paths never reduce a sender's flow, so each keeps ≥ d receivers).
  FlowModel m(n);
  BuildModel(caps, d, r, &m, &rng);
  m.flow.Run(0, 2 * n + 1);
  if (options.extras_at_bottleneck) {
    const size_t limit = SenderLimit(n, d, options);
    for (size_t i = 0; i < n; ++i) {
      m.flow.SetCapacity(m.source_edges[i],
                         static_cast<int64_t>(Units(caps[i].uplink_mbps, r, limit)));
    }
    m.flow.Run(0, 2 * n + 1);
  }
  for (size_t e : m.pair_edges) {
    if (m.flow.Flow(e) > 0) plan.receivers[m.flow.From(e) - 1].push_back(m.flow.To(e) - 1 - n);
  }
  for (auto& rs : plan.receivers) std::sort(rs.begin(), rs.end());
  plan.rate_mbps = r;
  return plan;
}

namespace {

// Greedy phase 1: each sender (random order) takes the d receivers with the largest remaining
// downlink-per-load D_j/(senders_j + 1) — water-filling the receive side; the random
// tie-breaker keeps equal receivers from always being chosen in the same order. Returns the
// senders each receiver got.
std::vector<size_t> GreedyFillReceivers(const std::vector<NodeCapacity>& caps, size_t d, Rng& rng,
                                        Assignment& plan) {
  const size_t n = caps.size();
  using Key = std::tuple<double, uint64_t, size_t>;  // (D/(load+1), tie-breaker, receiver)
  std::vector<size_t> incoming(n, 0);
  std::vector<Key> heap;
  heap.reserve(n);
  for (size_t j = 0; j < n; ++j) heap.emplace_back(caps[j].downlink_mbps, rng(), j);
  std::make_heap(heap.begin(), heap.end());
  std::vector<Key> held;
  for (size_t i : ShuffledIndices(n, rng)) {
    held.clear();
    std::vector<size_t>& mine = plan.receivers[i];
    while (mine.size() < d) {
      std::pop_heap(heap.begin(), heap.end());
      const Key top = heap.back();
      heap.pop_back();
      held.push_back(top);
      if (std::get<2>(top) != i) mine.push_back(std::get<2>(top));
    }
    for (const Key& k : held) {
      const size_t j = std::get<2>(k);
      if (j != i) ++incoming[j];
      heap.emplace_back(caps[j].downlink_mbps / static_cast<double>(incoming[j] + 1), rng(), j);
      std::push_heap(heap.begin(), heap.end());
    }
  }
  return incoming;
}

// Greedy phase 1b: a sender may not pick itself, so the last senders can be forced onto loaded
// receivers. Move pairs off the bottleneck receiver while that strictly helps: the moved
// pair's new receiver must end above the current bottleneck. Each move raises the sorted
// vector of receiver rates lexicographically, so this terminates; it is also capped.
void RelieveBottleneck(const std::vector<NodeCapacity>& caps, size_t d, Assignment& plan,
                       std::vector<size_t>& incoming) {
  const size_t n = caps.size();
  double r_up = caps[0].uplink_mbps / static_cast<double>(d);
  for (const NodeCapacity& c : caps) r_up = std::min(r_up, c.uplink_mbps / static_cast<double>(d));
  std::vector<std::vector<size_t>> senders_of(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j : plan.receivers[i]) senders_of[j].push_back(i);
  }
  std::vector<size_t> mark(n, n);  // mark[k] == i: k already receives from i
  for (size_t moves = 0; moves < 2 * n; ++moves) {
    size_t jb = n;
    double worst = 0;
    for (size_t j = 0; j < n; ++j) {
      if (incoming[j] == 0) continue;
      const double v = caps[j].downlink_mbps / static_cast<double>(incoming[j]);
      if (jb == n || v < worst) jb = j, worst = v;
    }
    if (jb == n || worst >= r_up) break;  // the tightest uplink already bounds r
    size_t best_i = n, best_k = n;
    double best_v = worst;
    for (size_t i : senders_of[jb]) {
      for (size_t k : plan.receivers[i]) mark[k] = i;
      for (size_t k = 0; k < n; ++k) {
        if (k == i || mark[k] == i) continue;
        const double v = caps[k].downlink_mbps / static_cast<double>(incoming[k] + 1);
        if (v > best_v) best_i = i, best_k = k, best_v = v;
      }
    }
    if (best_i == n) break;
    std::vector<size_t>& rs = plan.receivers[best_i];
    *std::find(rs.begin(), rs.end(), jb) = best_k;
    auto& from = senders_of[jb];
    from.erase(std::find(from.begin(), from.end(), best_i));
    senders_of[best_k].push_back(best_i);
    --incoming[jb];
    ++incoming[best_k];
    std::fill(mark.begin(), mark.end(), n);
  }
}

// Greedy phase 2: extra pairs that fit at r, senders and receivers in random order.
void AddPairsAtRate(const std::vector<NodeCapacity>& caps, size_t d, double r, Rng& rng,
                    const SelmcastOptions& options, Assignment& plan,
                    const std::vector<size_t>& incoming) {
  const size_t n = caps.size();
  const size_t limit = SenderLimit(n, d, options);
  std::vector<size_t> spare_in(n);
  std::vector<size_t> open;  // receivers with spare downlink
  for (size_t j = 0; j < n; ++j) {
    const size_t u = Units(caps[j].downlink_mbps, r, n - 1);
    spare_in[j] = u > incoming[j] ? u - incoming[j] : 0;
    if (spare_in[j] > 0) open.push_back(j);
  }
  std::vector<size_t> stamp(n, n);  // stamp[j] == i: j already receives from i
  for (size_t i : ShuffledIndices(n, rng)) {
    if (open.empty()) break;
    std::vector<size_t>& mine = plan.receivers[i];
    const size_t cap_out = Units(caps[i].uplink_mbps, r, limit);
    if (cap_out <= mine.size()) continue;
    size_t spare_out = cap_out - mine.size();
    for (size_t j : mine) stamp[j] = i;
    const size_t start = std::uniform_int_distribution<size_t>(0, open.size() - 1)(rng);
    bool exhausted = false;
    for (size_t s = 0; s < open.size() && spare_out > 0; ++s) {
      const size_t j = open[(start + s) % open.size()];
      if (j == i || stamp[j] == i || spare_in[j] == 0) continue;
      mine.push_back(j);
      stamp[j] = i;
      --spare_out;
      if (--spare_in[j] == 0) exhausted = true;
    }
    if (exhausted) {
      open.erase(
          std::remove_if(open.begin(), open.end(), [&](size_t j) { return spare_in[j] == 0; }),
          open.end());
    }
  }
}

}  // namespace

Assignment SolveSelmcastGreedy(const std::vector<NodeCapacity>& given, size_t fanout, Rng& rng,
                               const SelmcastOptions& options) {
  const std::vector<NodeCapacity> caps = Sanitized(given);
  Assignment plan = EmptyPlan(caps, fanout, /*exact=*/false);
  const size_t d = plan.demand;
  if (d == 0) return plan;
  std::vector<size_t> incoming = GreedyFillReceivers(caps, d, rng, plan);
  RelieveBottleneck(caps, d, plan, incoming);
  const double r = BottleneckRate(plan, caps);
  plan.rate_mbps = r;
  if (options.extras_at_bottleneck) AddPairsAtRate(caps, d, r, rng, options, plan, incoming);
  for (auto& rs : plan.receivers) std::sort(rs.begin(), rs.end());
  return plan;
}

std::vector<double> FairSenderRates(const Assignment& plan,
                                    const std::vector<NodeCapacity>& given) {
  const std::vector<NodeCapacity> caps = Sanitized(given);
  const size_t n = caps.size();
  // Flows (i, j); links 0..n-1 are uplinks, n..2n-1 downlinks.
  struct Flow {
    size_t up, down;
    double rate = 0;
    bool fixed = false;
  };
  std::vector<Flow> flows;
  for (size_t i = 0; i < n && i < plan.receivers.size(); ++i) {
    for (size_t j : plan.receivers[i]) {
      if (j < n && j != i) flows.push_back(Flow{i, n + j});
    }
  }
  std::vector<double> remaining(2 * n);
  for (size_t i = 0; i < n; ++i) {
    remaining[i] = caps[i].uplink_mbps;
    remaining[n + i] = caps[i].downlink_mbps;
  }
  std::vector<size_t> active(2 * n, 0);
  for (const Flow& f : flows) ++active[f.up], ++active[f.down];
  // Progressive filling: all unfixed flows grow together; the link with the smallest fair share
  // saturates first and fixes its flows at that share.
  size_t unfixed = flows.size();
  while (unfixed > 0) {
    size_t best = 2 * n;
    double share = 0;
    for (size_t l = 0; l < 2 * n; ++l) {
      if (active[l] == 0) continue;
      const double s = std::max(0.0, remaining[l]) / static_cast<double>(active[l]);
      if (best == 2 * n || s < share) best = l, share = s;
    }
    if (best == 2 * n) break;
    for (Flow& f : flows) {
      if (f.fixed || (f.up != best && f.down != best)) continue;
      f.fixed = true;
      f.rate = share;
      --unfixed;
      remaining[f.up] -= share;
      remaining[f.down] -= share;
      --active[f.up];
      --active[f.down];
    }
  }
  std::vector<double> out(n, 0);
  std::vector<bool> seen(n, false);
  for (const Flow& f : flows) {
    out[f.up] = seen[f.up] ? std::min(out[f.up], f.rate) : f.rate;
    seen[f.up] = true;
  }
  return out;
}

namespace {

bool Contains(const std::vector<size_t>& v, size_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// seen[v] == 1 when v is reachable from `start` along the pairs (forward) or `start` is
// reachable from v (backward).
std::vector<char> Reach(const std::vector<std::vector<size_t>>& recv, size_t start, bool forward) {
  const size_t n = recv.size();
  std::vector<char> seen(n, 0);
  std::vector<size_t> stack{start};
  seen[start] = 1;
  while (!stack.empty()) {
    const size_t v = stack.back();
    stack.pop_back();
    for (size_t u = 0; u < n; ++u) {
      if (!seen[u] && (forward ? Contains(recv[v], u) : Contains(recv[u], v))) {
        seen[u] = 1;
        stack.push_back(u);
      }
    }
  }
  return seen;
}

// Sum of the senders' round times, in units of (parameter bytes) / (MB/s).
double RoundTimeCost(const std::vector<double>& rates) {
  double cost = 0;
  for (double r : rates) {
    if (r > 0) cost += 1.0 / r;
  }
  return cost;
}

// RefineForRoundTime's steps and the state they share: the plan being refined (its receiver
// lists `recv`), the sanitized capacities, the rate r* every change must keep, the senders'
// pair limit and the evaluation budget left.
struct Refinement {
  Assignment* plan;
  const std::vector<NodeCapacity>& caps;
  std::vector<std::vector<size_t>>& recv;
  Rng& rng;
  size_t n;
  size_t limit;
  double floor_rate;
  size_t budget;

  bool KeepsRate() const { return BottleneckRate(*plan, caps) >= floor_rate; }
  void MoveSingleReceivers();
  void BalanceIncoming();
  void ConnectStrongly();
  void AddFreePairs();
};

// Refinement step 1: local search over single receiver moves.
void Refinement::MoveSingleReceivers() {
  std::vector<double> rates = FairSenderRates(*plan, caps);
  double cost = RoundTimeCost(rates);
  std::vector<size_t> others;
  for (int pass = 0; pass < 8 && budget > 0; ++pass) {
    bool improved = false;
    for (size_t i : ShuffledIndices(n, rng)) {
      for (size_t slot : ShuffledIndices(recv[i].size(), rng)) {
        others.clear();
        for (size_t k = 0; k < n; ++k) {
          if (k != i && !Contains(recv[i], k)) others.push_back(k);
        }
        std::shuffle(others.begin(), others.end(), rng);
        const size_t old = recv[i][slot];
        for (size_t k : others) {
          if (budget == 0) break;
          --budget;
          recv[i][slot] = k;
          if (KeepsRate()) {
            auto trial = FairSenderRates(*plan, caps);
            const double c = RoundTimeCost(trial);
            if (c < cost * (1 - 1e-9)) {
              cost = c;
              rates = std::move(trial);
              improved = true;
              break;
            }
          }
          recv[i][slot] = old;
        }
      }
    }
    if (!improved) break;
  }
}

// Refinement step 2a: every node hears from d senders, as every node sends to d: a node that only
// sends (a slow downlink every fast sender avoids) would drift from the consensus. The missing
// senders are drawn at random among those that can take the node at r*, as random selection
// would: the cheapest in round time would be the other slow nodes, whose models lag as much
// as its own (measured: the slow nodes then reached the target last, 1.5x later).
void Refinement::BalanceIncoming() {
  std::vector<size_t> incoming(n, 0);
  for (const auto& rs : recv) {
    for (size_t j : rs) ++incoming[j];
  }
  for (size_t j : ShuffledIndices(n, rng)) {
    for (size_t i : ShuffledIndices(n, rng)) {
      if (incoming[j] >= plan->demand) break;
      if (i == j || recv[i].size() >= limit || Contains(recv[i], j)) continue;
      recv[i].push_back(j);
      if (KeepsRate()) {
        ++incoming[j];
      } else {
        recv[i].pop_back();
      }
    }
  }
}

// Refinement step 2b, strong connectivity: while some node is not reachable from node 0, or cannot
// reach it, the pair crossing that cut that adds the least round time (and keeps r*) is added; ties
// in random order. Each pair grows one of the two sets, so this ends after at most 2n pairs.
void Refinement::ConnectStrongly() {
  auto add_cheapest = [&](const std::vector<size_t>& senders, size_t j) {
    size_t best_i = n;
    double best_cost = 0;
    for (size_t i : senders) {
      if (i == j || recv[i].size() >= limit || budget == 0 || Contains(recv[i], j)) continue;
      --budget;
      recv[i].push_back(j);
      if (KeepsRate()) {
        const double c = RoundTimeCost(FairSenderRates(*plan, caps));
        if (best_i == n || c < best_cost) best_i = i, best_cost = c;
      }
      recv[i].pop_back();
    }
    if (best_i == n) return false;
    recv[best_i].push_back(j);
    return true;
  };
  for (size_t step = 0; step < 2 * n; ++step) {
    const std::vector<char> from0 = Reach(recv, 0, true), to0 = Reach(recv, 0, false);
    const bool out_ok = std::count(from0.begin(), from0.end(), 1) == static_cast<long>(n);
    const bool in_ok = std::count(to0.begin(), to0.end(), 1) == static_cast<long>(n);
    if (out_ok && in_ok) break;
    // Cross the first missing cut: from the reached side to the rest, or into the side that
    // reaches node 0 from the rest.
    const std::vector<char>& side = !out_ok ? from0 : to0;
    std::vector<size_t> senders;
    for (size_t i : ShuffledIndices(n, rng)) {
      if (!out_ok ? side[i] : !side[i]) senders.push_back(i);
    }
    bool added = false;
    for (size_t j : ShuffledIndices(n, rng)) {
      if ((!out_ok ? !side[j] : side[j]) && add_cheapest(senders, j)) {
        added = true;
        break;
      }
    }
    if (!added) break;  // no pair across the cut fits at r*: leave the plan as it is
  }
}

// Refinement step 3: extra pairs that slow no sender down (and keep r*), in random order.
void Refinement::AddFreePairs() {
  std::vector<double> rates = FairSenderRates(*plan, caps);
  for (size_t i : ShuffledIndices(n, rng)) {
    for (size_t k : ShuffledIndices(n, rng)) {
      if (budget == 0 || recv[i].size() >= limit) break;
      if (k == i || Contains(recv[i], k)) continue;
      --budget;
      recv[i].push_back(k);
      bool ok = KeepsRate();
      std::vector<double> trial;
      if (ok) {
        trial = FairSenderRates(*plan, caps);
        for (size_t s = 0; s < n && ok; ++s) ok = trial[s] >= rates[s] * (1 - 1e-9);
      }
      if (ok) {
        rates = std::move(trial);
      } else {
        recv[i].pop_back();
      }
    }
  }
}

}  // namespace

void RefineForRoundTime(Assignment* plan, const std::vector<NodeCapacity>& given, Rng& rng,
                        const SelmcastOptions& options) {
  const std::vector<NodeCapacity> caps = Sanitized(given);
  const size_t n = caps.size();
  if (n < 2 || plan->receivers.size() != n || plan->demand == 0) return;
  const double floor_rate = plan->rate_mbps * (1 - 1e-9);
  const size_t limit = SenderLimit(n, plan->demand, options);
  const size_t budget = options.refine_max_evaluations;
  Refinement f{plan, caps, plan->receivers, rng, n, limit, floor_rate, budget};
  f.MoveSingleReceivers();
  // 2. Mixing. Gossip averaging only reaches consensus if every node's parameters reach every
  // other node.
  if (options.refine_connect) {
    f.BalanceIncoming();
    f.ConnectStrongly();
  }
  f.AddFreePairs();
  for (auto& rs : plan->receivers) std::sort(rs.begin(), rs.end());
}

Assignment SolveSelmcast(const std::vector<NodeCapacity>& caps, size_t fanout, Rng& rng,
                         const SelmcastOptions& options) {
  if (caps.size() <= options.exact_max_nodes) {
    return SolveSelmcastExact(caps, fanout, rng, options);
  }
  return SolveSelmcastGreedy(caps, fanout, rng, options);
}

std::vector<std::string> Select(SelectPolicy policy, const std::string& self,
                                const std::vector<std::string>& candidates, size_t fanout,
                                const BandwidthView& bandwidth, Rng& rng,
                                const SelmcastOptions& options, Assignment* plan_out) {
  std::vector<std::string> peers;
  peers.reserve(candidates.size());
  std::set<std::string> seen{self};
  for (const std::string& c : candidates) {
    if (seen.insert(c).second) peers.push_back(c);
  }
  switch (policy) {
    case SelectPolicy::kAll:
      return peers;
    case SelectPolicy::kRandom: {
      const size_t k = std::min(fanout, peers.size());
      for (size_t i = 0; i < k; ++i) {
        std::swap(peers[i], peers[std::uniform_int_distribution<size_t>(i, peers.size() - 1)(rng)]);
      }
      peers.resize(k);
      return peers;
    }
    case SelectPolicy::kSelmcast: {
      // Canonical (sorted) node order, so nodes with the same view build the same network.
      std::vector<std::string> nodes(seen.begin(), seen.end());
      const std::vector<NodeCapacity> caps = ResolveCapacities(nodes, bandwidth, options);
      Assignment plan;
      if (nodes.size() <= options.refine_max_nodes) {
        SelmcastOptions base = options;
        base.extras_at_bottleneck = false;
        plan = SolveSelmcast(caps, fanout, rng, base);
        RefineForRoundTime(&plan, caps, rng, options);
      } else {
        plan = SolveSelmcast(caps, fanout, rng, options);
      }
      std::vector<std::string> mine = plan.ReceiversOf(self);
      if (plan_out) *plan_out = plan;
      return mine;
    }
  }
  return {};
}

}  // namespace meshtrain::sync
