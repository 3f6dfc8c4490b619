// Peers waiting for this node's step: a ProgressQuery carries `need`, the step the querier waits
// for from us; a node below it answers again when it gets there (or stops training), so the
// querier's barrier ends its wait without polling (docs/contract.md "Barriers"). One concept,
// one type: the node (node/node.h) adds watchers on queries and sends the replies of the due ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sync/name_index.h"

namespace meshtrain::node {

class Watchers {
 public:
  struct Watcher {
    std::string name;
    std::string addr;
    uint32_t seq = 0;
    uint64_t need = 0;
  };
  // At most this many, or one per peer of the barrier's view if that is more (bsp in a mesh of
  // thousands: every peer may wait for us).
  static constexpr size_t kMax = 1024;

  bool empty() const { return watchers_.empty(); }
  // Adds or updates `name`'s watch; false if no place was left (the query is then answered at
  // once, and only at once). `view` is the size of the barrier's view.
  bool Add(const std::string& name, const std::string& addr, uint32_t seq, uint64_t need,
           size_t view);
  // The watchers due at `step` (all of them when `training` is false), removed and sorted by
  // name; empty at once when nobody is due.
  std::vector<Watcher> TakeDue(uint64_t step, bool training);

 private:
  // A flat vector with a hashed index (one lookup per query instead of a walk down a tree of
  // strings) and the smallest `need`, so a step that satisfies nobody costs no walk.
  std::vector<Watcher> watchers_;
  sync::NameIndex index_;  // name -> position in watchers_
  uint64_t min_need_ = 0;
};

}  // namespace meshtrain::node
