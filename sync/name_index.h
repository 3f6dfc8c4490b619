// NameIndex: a flat open-addressing hash index from names to positions in a vector the caller
// owns (linear probing, load <= 1/2, backward-shift deletion). Each bucket holds a position and
// 32 bits of the name's hash, so a lookup touches one bucket and, on a hash match, the caller's
// element for the name comparison: far fewer cache misses than a node-based
// std::unordered_map<std::string, size_t>, which matters when thousands of simulated nodes each
// keep views of hundreds of peers.
//
// The caller passes `name_of(pos)` (the name stored at a position) to every call that compares
// or rehashes. Positions must fit in 32 bits.
//
// Thread-safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace meshtrain::sync {

class NameIndex {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // Position of `name`, or kNone.
  template <typename NameOf>
  size_t Find(const std::string& name, const NameOf& name_of) const {
    if (table_.empty()) return kNone;
    const Bucket& k = table_[Lookup(name, Hash(name), name_of)];
    return k.pos1 == 0 ? kNone : k.pos1 - 1;
  }

  // Records that the absent `name` is at `pos`; `count` = how many names the caller holds now,
  // this one included, at positions [0, count) (read back when the table grows).
  template <typename NameOf>
  void Insert(const std::string& name, size_t pos, size_t count, const NameOf& name_of) {
    if (2 * count > table_.size()) {
      size_t capacity = table_.empty() ? 16 : table_.size();
      while (2 * count > capacity) capacity *= 2;
      table_.assign(capacity, Bucket{});
      for (size_t i = 0; i < count; ++i) {
        if (i == pos) continue;
        const uint32_t tag = Hash(name_of(i));
        table_[Lookup(name_of(i), tag, name_of)] = Bucket{static_cast<uint32_t>(i + 1), tag};
      }
    }
    const uint32_t tag = Hash(name);
    table_[Lookup(name, tag, name_of)] = Bucket{static_cast<uint32_t>(pos + 1), tag};
  }

  // Forgets `name`; returns its position, or kNone if absent.
  template <typename NameOf>
  size_t Erase(const std::string& name, const NameOf& name_of) {
    if (table_.empty()) return kNone;
    const size_t b = Lookup(name, Hash(name), name_of);
    if (table_[b].pos1 == 0) return kNone;
    const size_t pos = table_[b].pos1 - 1;
    const size_t mask = table_.size() - 1;
    size_t hole = b;
    for (size_t j = (hole + 1) & mask; table_[j].pos1 != 0; j = (j + 1) & mask) {
      const size_t home = table_[j].tag & mask;
      // The entry at j may fill the hole when the hole lies on its probe path [home, j).
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        table_[hole] = table_[j];
        hole = j;
      }
    }
    table_[hole] = Bucket{};
    return pos;
  }

  // The present `name` (still readable through name_of at its old position) moves to `pos`.
  template <typename NameOf>
  void Relocate(const std::string& name, size_t pos, const NameOf& name_of) {
    table_[Lookup(name, Hash(name), name_of)].pos1 = static_cast<uint32_t>(pos + 1);
  }

  void Clear() { table_.clear(); }

  // Cache hints (no effect on behaviour). PrefetchBucket requests the bucket `name` hashes to;
  // once it has arrived, Probe returns the position of the first bucket on its probe path whose
  // tag matches (the name is not compared: almost always the right one), or kNone.
  void PrefetchBucket(const std::string& name) const {
    if (!table_.empty()) __builtin_prefetch(&table_[Hash(name) & (table_.size() - 1)]);
  }
  size_t Probe(const std::string& name) const {
    if (table_.empty()) return kNone;
    const uint32_t tag = Hash(name);
    const size_t mask = table_.size() - 1;
    for (size_t b = tag & mask;; b = (b + 1) & mask) {
      const Bucket& k = table_[b];
      if (k.pos1 == 0) return kNone;
      if (k.tag == tag) return k.pos1 - 1;
    }
  }

 private:
  struct Bucket {
    uint32_t pos1 = 0;  // position + 1; 0 = empty
    uint32_t tag = 0;   // low 32 bits of the name's hash (the home bucket derives from it)
  };

  static uint32_t Hash(const std::string& name) {
    return static_cast<uint32_t>(std::hash<std::string>{}(name));
  }

  // The bucket holding `name`, or the empty bucket where it would go. table_ is not empty.
  template <typename NameOf>
  size_t Lookup(const std::string& name, uint32_t tag, const NameOf& name_of) const {
    const size_t mask = table_.size() - 1;
    for (size_t b = tag & mask;; b = (b + 1) & mask) {
      const Bucket& k = table_[b];
      if (k.pos1 == 0) return b;
      if (k.tag == tag && name_of(k.pos1 - 1) == name) return b;
    }
  }

  std::vector<Bucket> table_;  // size a power of two, or 0
};

}  // namespace meshtrain::sync
