// How responsive the event loop is (the loop never blocks on work proportional to the
// model). Two measures:
//   - lag: a timer due every kTickMs fires late by however long the loop was busy with something
//     else (Node.js's event-loop lag); kept as a histogram (Prometheus
//     meshtrain_loop_lag_seconds) and over the last kWindow ticks for p50/p99/max in `status`;
//   - the loop thread's CPU time between two ticks: at most a tick's worth plus the longest
//     callback in between. Unlike wall time it does not grow when the machine is busy with other
//     processes, so a test can bound it against the cost of one pass over the model without
//     depending on the machine's load.
// Thread-safety: loop thread only.
#pragma once

#include <uv.h>

#include <array>
#include <cstdint>
#include <deque>

#include "daemon/ops/histogram.h"

namespace meshtrain::daemon {

struct LagBounds {
  static constexpr std::array<double, 12> kValues = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,   0.25,   0.5,   1,    2.5};
};
using LagHistogram = BucketHistogram<LagBounds>;

struct LoopStats {
  double lag_p50_ms = 0, lag_p99_ms = 0, lag_max_ms = 0;  // over the last window
  double lag_max_ever_ms = 0;
  double tick_cpu_max_ms = 0;  // most loop-thread CPU between two ticks, since start
  uint64_t ticks = 0;
  uint64_t ticks_late_50ms = 0;  // ticks that fired more than 50 ms late
  // Passes over more than LoopGuard::kLoopFloatsMax parameters on the loop thread (should stay
  // 0: base/loop_guard.h), and the largest one's size in floats.
  uint64_t model_passes = 0;
  uint64_t model_pass_largest = 0;
  LagHistogram histogram;
};

class LoopMonitor {
 public:
  static constexpr int kTickMs = 20;
  static constexpr size_t kWindow = 3000;  // one minute of ticks

  explicit LoopMonitor(uv_loop_t* loop);
  ~LoopMonitor();
  LoopMonitor(const LoopMonitor&) = delete;
  LoopMonitor& operator=(const LoopMonitor&) = delete;
  void Close();  // idempotent; before the loop is drained

  LoopStats Stats() const;

 private:
  static void OnTimer(uv_timer_t* t);

  uv_timer_t* timer_ = nullptr;
  uint64_t due_ns_ = 0;        // when the timer should fire next
  uint64_t last_cpu_ns_ = 0;   // loop thread CPU at the last tick
  std::deque<double> window_;  // lags of the last kWindow ticks, ms
  LoopStats stats_;
};

}  // namespace meshtrain::daemon
