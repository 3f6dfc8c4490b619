// The simulator's clocks and memory gauge: what a run's cost measurements (PspSimResult's
// node_core_s, mem_bytes_per_node, the replay_alone timings) read. Wall-clock readings only;
// nothing here feeds back into the simulated behaviour.
#pragma once

#include <chrono>
#include <cstdint>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace meshtrain::sim {

// Resident set size of this process, bytes (0 where /proc is unavailable). `trim`: first hand
// memory freed by an earlier run back to the system, so that a run's growth is its own.
uint64_t ResidentBytes(bool trim = false);

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A cheap monotonic counter: the time-stamp counter where there is one (constant-rate on the
// x86 CPUs of the last decade), else nanoseconds. Inline: every node-core call is timed.
inline uint64_t Ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(NowNs());
#endif
}

}  // namespace meshtrain::sim
