// Counts work proportional to the model that runs on the event loop's thread (the loop moves
// buffers only; every pass over a whole model runs on the thread pool, the mixer or the trainer
// thread: docs/design.md "The parameter path"). The agent marks its loop thread once; the functions
// that pass over parameter vectors (the finite scan, mixing, the running sum, compression,
// checksums) report how many floats they touch, and a pass over more than kLoopFloatsMax floats on
// the marked thread is counted. A parameter chunk (wire::kParamChunkFloats = 64 Ki floats) stays
// well below the bound, a whole model of a few million parameters does not. `status` shows the
// count (loop.model_passes), and the test suite asserts it stays 0 while large models move.
//
// Thread-safety: any thread; the mark is per thread, the counters are atomics.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace meshtrain {

class LoopGuard {
 public:
  static constexpr size_t kLoopFloatsMax = size_t{1} << 20;  // 16 chunks of 64 Ki floats

  // Marks (or unmarks) the calling thread as the event loop's.
  static void MarkLoopThread(bool on = true) { on_loop_ = on; }
  static bool OnLoopThread() { return on_loop_; }

  // A pass over `floats` parameter values is about to run on this thread.
  static void Note(size_t floats) {
    if (!on_loop_ || floats <= kLoopFloatsMax) return;
    passes_.fetch_add(1, std::memory_order_relaxed);
    uint64_t seen = largest_.load(std::memory_order_relaxed);
    while (floats > seen &&
           !largest_.compare_exchange_weak(seen, floats, std::memory_order_relaxed)) {
    }
  }

  // Passes over more than kLoopFloatsMax floats on a marked thread, and the largest one's size.
  static uint64_t passes() { return passes_.load(std::memory_order_relaxed); }
  static uint64_t largest() { return largest_.load(std::memory_order_relaxed); }

 private:
  static inline thread_local bool on_loop_ = false;
  static inline std::atomic<uint64_t> passes_{0};
  static inline std::atomic<uint64_t> largest_{0};
};

}  // namespace meshtrain
