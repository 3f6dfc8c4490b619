// MaxFlow: Dinic's algorithm on a directed graph with integer capacities. Used by SELMCAST
// receiver selection (docs/contract.md "Receiver selection") as the feasibility test "can every
// sender reach P receivers at rate r". Edges are explored in insertion order, so a caller that
// inserts edges in a shuffled order gets a randomly chosen maximum flow among the ties.
//
// Flow is kept between Run() calls: raising capacities (SetCapacity) and running again augments
// the existing flow, and an augmenting path never lowers the flow on an edge out of the source.
//
// Thread-safety: none; a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain::sync {

class MaxFlow {
 public:
  explicit MaxFlow(size_t nodes);

  // Adds edge u -> v with capacity `cap`; returns its id.
  size_t AddEdge(size_t u, size_t v, int64_t cap);
  void SetCapacity(size_t edge, int64_t cap);  // must not drop below the edge's current flow
  // Augments to a maximum s-t flow; returns the flow added by this call.
  int64_t Run(size_t s, size_t t);

  int64_t Flow(size_t edge) const { return edges_[2 * edge].flow; }
  int64_t Capacity(size_t edge) const { return edges_[2 * edge].cap; }
  size_t From(size_t edge) const { return edges_[2 * edge + 1].to; }
  size_t To(size_t edge) const { return edges_[2 * edge].to; }
  size_t num_edges() const { return edges_.size() / 2; }

 private:
  struct Arc {
    size_t to;
    int64_t cap;
    int64_t flow;
  };
  bool Bfs(size_t s, size_t t);
  int64_t Dfs(size_t u, size_t t, int64_t pushed);

  std::vector<Arc> edges_;                // arc 2e is edge e, arc 2e+1 its reverse
  std::vector<std::vector<size_t>> adj_;  // arc ids per node
  std::vector<int> level_;
  std::vector<size_t> it_;
};

}  // namespace meshtrain::sync
