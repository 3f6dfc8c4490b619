// ProgressView: what this node knows about the training progress of its live, training peers
// (docs/contract.md "Barriers") — the last known completed-step count of each peer, when it was
// learned, and an EWMA of each peer's step interval (used by the dssp policy to project arrival
// times).
//
// The view holds exactly the peers the caller puts in it. Contract with the caller:
//   - Update() only for peers that are alive (or suspect, where the policy waits for suspects)
//     and still training; it adds unknown peers, so feed it only from such peers;
//   - Remove() at once when a peer fails, leaves, or announces training=false — barriers must
//     never wait on a departed or finished node.
// Steps are monotone: Update() never lowers a known step (stale gossip is ignored).
//
// Peers are kept in a vector (index access for O(1) sampling) plus a NameIndex for lookups; the
// entries hold interned names (ids in a sync::NameTable, which the view may share with others:
// the simulator's nodes share one, so a view of hundreds of peers holds 4-byte ids instead of a
// std::string per peer; lookups hash the name and compare it with the table's copy). The
// vector's order depends only on the sequence of calls, so sampling driven by a seeded RNG is
// deterministic. Update/Remove/Find are O(1) expected, plus O(d) for the step counts, d = distinct
// steps in the view (a sorted vector: small when barriers keep peers within a few steps); the
// minimum and maximum step are O(1). Sized for simulations of 10 000 nodes with views of hundreds
// of peers: one lookup touches one index bucket and one entry.
//
// Thread-safety: none. One thread owns a ProgressView at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "membership/types.h"
#include "sync/name_index.h"
#include "sync/name_table.h"

namespace meshtrain::sync {

using membership::TimeMs;

struct PeerProgress {
  uint64_t step = 0;       // completed local SGD steps, as last learned
  TimeMs learned = 0;      // when `step` was learned (caller's clock)
  double interval_ms = 0;  // EWMA of milliseconds per step; 0 = not yet known
};

class ProgressView {
 public:
  struct Entry {
    uint32_t name = 0;  // id in names()
    PeerProgress progress;
  };

  // `self` (if non-empty) is never added: the node's own step is not a peer's.
  // `interval_alpha` is the EWMA weight of the newest step-interval sample, in (0, 1].
  // `names`: where peer names are interned (shared with other views); null: a table of its own.
  explicit ProgressView(std::string self = {}, double interval_alpha = 0.3,
                        std::shared_ptr<NameTable> names = nullptr);

  // Records that `name` has completed `step` as of `now`, adding the peer if unknown. A step
  // not above the known one is ignored (monotone; stale gossip). Returns true when
  // the view changed: the peer was added or its step advanced.
  // `added` (if given) is set to whether the peer was unknown.
  bool Update(const std::string& name, uint64_t step, TimeMs now, bool* added = nullptr);
  // As Update, but only for a peer already in the view (never adds one).
  bool UpdateKnown(const std::string& name, uint64_t step, TimeMs now);
  // Drops a peer (failed, left, or stopped training). Returns true if it was present.
  bool Remove(const std::string& name);
  void Clear();

  const PeerProgress* Find(const std::string& name) const;
  // As Find and UpdateKnown, with `*hint` a position where `name` was last seen: a hint still
  // right (no Remove moved the peer) skips the index; otherwise it is looked up and refreshed.
  const PeerProgress* Find(const std::string& name, size_t* hint) const;
  bool UpdateKnown(const std::string& name, uint64_t step, TimeMs now, size_t* hint);
  // By interned id (a peer's Entry::name): a hint still right is checked without reading the
  // name; otherwise the name is looked up and the hint refreshed. Null if the peer is not here.
  const PeerProgress* FindId(uint32_t id, size_t* hint) const;
  // Position of `name`, or NameIndex::kNone.
  size_t Position(const std::string& name) const;
  // As UpdateKnown, for the peer at `pos` (from Position or a hint still right).
  bool UpdateAt(size_t pos, uint64_t step, TimeMs now) { return Advance(pos, step, now); }
  bool Contains(const std::string& name) const { return Find(name) != nullptr; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  // All peers, in an order fixed by the call sequence (not sorted); indices are stable until
  // the next Remove (which moves the last entry into the hole).
  const std::vector<Entry>& entries() const { return entries_; }
  const std::string& name(const Entry& e) const { return (*names_)[e.name]; }
  const std::string& name_at(size_t pos) const { return name(entries_[pos]); }
  const std::string& name_of_id(uint32_t id) const { return (*names_)[id]; }
  std::vector<std::string> peers() const;  // sorted by name

  std::optional<uint64_t> MinStep() const;
  std::optional<uint64_t> MaxStep() const;

  const std::string& self() const { return self_; }

  // Cache hints for a coming lookup of `name` (no effect on behaviour): stage 0 requests its
  // index bucket, stage 1 (once that has arrived) its entry.
  void PrefetchAt(size_t pos) const {
    if (pos < entries_.size()) __builtin_prefetch(&entries_[pos]);
  }
  void Prefetch(const std::string& name, int stage) const {
    if (stage == 0) return index_.PrefetchBucket(name);
    const size_t pos = index_.Probe(name);
    if (pos < entries_.size()) __builtin_prefetch(&entries_[pos]);
  }

 private:
  bool Advance(size_t pos, uint64_t step, TimeMs now);
  size_t Locate(const std::string& name, size_t* hint) const;  // position or NameIndex::kNone
  // NameIndex's view of entries_.
  auto NameAt() const {
    return [this](size_t pos) -> const std::string& { return (*names_)[entries_[pos].name]; };
  }
  void CountStep(uint64_t step, int delta);

  std::string self_;
  double alpha_;
  std::shared_ptr<NameTable> names_;
  std::vector<Entry> entries_;
  NameIndex index_;  // name -> position in entries_
  // (step, number of peers at it), sorted by step: min/max in O(1).
  std::vector<std::pair<uint64_t, uint32_t>> step_counts_;
};

}  // namespace meshtrain::sync
