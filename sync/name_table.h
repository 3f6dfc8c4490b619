// NameTable: interned names. Each distinct name is stored once and named by a dense 32-bit id
// (0, 1, 2, ... in the order first seen). The simulator's node cores share one table, so a view
// of hundreds of peers per node holds 4-byte ids instead of a std::string per peer (and name
// comparisons read the shared, cache-resident strings); an agent's node keeps its own.
// References returned by operator[] stay valid for the table's lifetime (a deque).
//
// Thread-safety: none; the owner of the nodes that share it owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "sync/name_index.h"

namespace meshtrain::sync {

class NameTable {
 public:
  // The id of `name`, added if new.
  uint32_t Intern(const std::string& name) {
    const auto name_at = [this](size_t i) -> const std::string& { return names_[i]; };
    const size_t pos = index_.Find(name, name_at);
    if (pos != NameIndex::kNone) return static_cast<uint32_t>(pos);
    names_.push_back(name);
    index_.Insert(name, names_.size() - 1, names_.size(), name_at);
    return static_cast<uint32_t>(names_.size() - 1);
  }
  const std::string& operator[](uint32_t id) const { return names_[id]; }
  size_t size() const { return names_.size(); }

 private:
  std::deque<std::string> names_;
  NameIndex index_;
};

}  // namespace meshtrain::sync
