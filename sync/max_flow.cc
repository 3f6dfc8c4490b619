#include "sync/max_flow.h"

#include <algorithm>
#include <limits>

namespace meshtrain::sync {

MaxFlow::MaxFlow(size_t nodes) : adj_(nodes), level_(nodes), it_(nodes) {}

size_t MaxFlow::AddEdge(size_t u, size_t v, int64_t cap) {
  const size_t id = edges_.size() / 2;
  adj_[u].push_back(edges_.size());
  edges_.push_back(Arc{v, cap, 0});
  adj_[v].push_back(edges_.size());
  edges_.push_back(Arc{u, 0, 0});
  return id;
}

void MaxFlow::SetCapacity(size_t edge, int64_t cap) {
  edges_[2 * edge].cap = std::max(cap, edges_[2 * edge].flow);
}

bool MaxFlow::Bfs(size_t s, size_t t) {
  std::fill(level_.begin(), level_.end(), -1);
  std::vector<size_t> queue{s};
  level_[s] = 0;
  for (size_t head = 0; head < queue.size(); ++head) {
    const size_t u = queue[head];
    for (size_t a : adj_[u]) {
      const Arc& arc = edges_[a];
      if (arc.cap - arc.flow > 0 && level_[arc.to] < 0) {
        level_[arc.to] = level_[u] + 1;
        queue.push_back(arc.to);
      }
    }
  }
  return level_[t] >= 0;
}

int64_t MaxFlow::Dfs(size_t u, size_t t, int64_t pushed) {
  if (u == t || pushed == 0) return pushed;
  for (size_t& i = it_[u]; i < adj_[u].size(); ++i) {
    const size_t a = adj_[u][i];
    Arc& arc = edges_[a];
    if (level_[arc.to] != level_[u] + 1 || arc.cap - arc.flow <= 0) continue;
    const int64_t got = Dfs(arc.to, t, std::min(pushed, arc.cap - arc.flow));
    if (got > 0) {
      arc.flow += got;
      edges_[a ^ 1].flow -= got;
      return got;
    }
  }
  return 0;
}

int64_t MaxFlow::Run(size_t s, size_t t) {
  int64_t total = 0;
  while (Bfs(s, t)) {
    std::fill(it_.begin(), it_.end(), 0);
    while (int64_t f = Dfs(s, t, std::numeric_limits<int64_t>::max())) total += f;
  }
  return total;
}

}  // namespace meshtrain::sync
