// The running weighted sum of peers' parameter chunks (docs/design.md "The parameter path"): a
// receiver folds each chunk of a peer's snapshot in as it arrives — S[i] += w · x_j[i] over the
// chunk's range, w added to the weight of that range — and at its step boundary mixes
//   x[i] <- (x[i] + S[i]) / (1 + W(i))
// over every range some chunk covered (docs/contract.md "Parameter exchange": gossip averaging with
// the progress-aware weights of learn::MixWeight), then starts over. Ranges no chunk covered keep
// x. A transfer broken off half-way leaves only its chunks' ranges mixed, which is still an average
// per coordinate.
//
// Memory: one array of the model's size (allocated at the first fold, never zero-filled: the
// first fold of a range in a window sets it, later ones add) plus one segment per
// distinct covered range; never a model per sender. Within one window (between two Apply()s) a
// sender's range is folded once: a second snapshot of the same sender before the step boundary
// would count that sender twice, so its chunks are dropped (the newer snapshot goes out again in
// the sender's next round).
//
// Thread-safety: none (daemon/trainer/chunk_mixer.h puts it behind a mutex on its own thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace meshtrain::learn {

class RunningSum {
 public:
  // Folds floats [offset, offset + n) of a model of `total` floats from `from` with weight w.
  // False (nothing folded) when the geometry disagrees with earlier folds or the model, w is not
  // positive and finite, or `from` already had that offset folded in this window.
  bool Fold(const std::string& from, uint32_t total, uint32_t offset, const float* data, size_t n,
            double w);
  // The same for an int8 chunk of n values: q[i] * scales[i / block] (gossip's int8 encoding,
  // checked by the codec: |q| <= 127 and scales small enough that every product is finite).
  bool FoldInt8(const std::string& from, uint32_t total, uint32_t offset, const int8_t* q,
                const float* scales, uint32_t block, size_t n, double w);
  // Mixes into x[0, n) (n must be the folded models' total; otherwise nothing is mixed) and
  // starts a new window. Returns how many senders contributed.
  size_t Apply(float* x, size_t n);
  // Drops what was folded (the model was replaced: a join, a finished peer's model).
  void Clear();
  // Allocates the sum for a model of `total` floats now (if it has no sum of that size) and
  // touches its pages, so that the first folds do not take the page faults.
  void Reserve(uint32_t total);
  bool empty() const { return segments_.empty(); }
  size_t senders() const { return folded_.size(); }
  size_t total() const { return total_; }
  // Floats folded in so far in this window (a whole model from one sender: total()).
  uint64_t window_floats() const { return window_floats_; }

 private:
  struct Segment {
    uint32_t end = 0;
    double weight = 0;
  };
  // Checks, then calls fold(pos, len, add) over [offset, offset + n) in pieces: add is false
  // where no segment of this window covers the piece (the sum holds an older window's values
  // there and is set), true where one does.
  template <typename F>
  bool FoldWith(const std::string& from, uint32_t total, uint32_t offset, size_t n, double w,
                F fold);
  // Adds w to the weight of [a, b), splitting segments at a and b.
  void AddWeight(uint32_t a, uint32_t b, double w);
  void SplitAt(uint32_t at);

  std::unique_ptr<float[]> sum_;  // total_ floats; only ranges in segments_ are meaningful
  uint32_t total_ = 0;
  std::map<uint32_t, Segment> segments_;              // start -> [start, end) and its summed weight
  std::map<std::string, std::set<uint32_t>> folded_;  // sender -> offsets folded this window
  uint64_t window_floats_ = 0;
};

}  // namespace meshtrain::learn
