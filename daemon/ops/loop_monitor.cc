#include "daemon/ops/loop_monitor.h"

#include <time.h>

#include <algorithm>
#include <vector>

#include "base/loop_guard.h"

namespace meshtrain::daemon {

namespace {

uint64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

template <typename H>
void CloseAndFree(H*& h) {
  if (h == nullptr) return;
  h->data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t*>(h),
           [](uv_handle_t* x) { delete reinterpret_cast<H*>(x); });
  h = nullptr;
}

}  // namespace

LoopMonitor::LoopMonitor(uv_loop_t* loop) {
  timer_ = new uv_timer_t;
  uv_timer_init(loop, timer_);
  timer_->data = this;
  // The monitor's timer must not keep a loop alive that has nothing else to do.
  uv_unref(reinterpret_cast<uv_handle_t*>(timer_));
  due_ns_ = uv_hrtime() + kTickMs * 1000000ULL;
  last_cpu_ns_ = ThreadCpuNs();
  uv_timer_start(timer_, OnTimer, kTickMs, kTickMs);
}

LoopMonitor::~LoopMonitor() { Close(); }

void LoopMonitor::Close() { CloseAndFree(timer_); }

void LoopMonitor::OnTimer(uv_timer_t* t) {
  auto* self = static_cast<LoopMonitor*>(t->data);
  if (self == nullptr) return;
  const uint64_t now = uv_hrtime();
  const double lag_ms = now > self->due_ns_ ? static_cast<double>(now - self->due_ns_) / 1e6 : 0.0;
  // The next tick is due a period after this one fired (a repeating uv timer re-arms from the
  // time it ran), so a stall counts once, not again for every tick it swallowed.
  self->due_ns_ = now + kTickMs * 1000000ULL;
  self->stats_.histogram.Observe(lag_ms / 1000.0);
  self->stats_.lag_max_ever_ms = std::max(self->stats_.lag_max_ever_ms, lag_ms);
  self->window_.push_back(lag_ms);
  if (self->window_.size() > kWindow) self->window_.pop_front();
  const uint64_t cpu = ThreadCpuNs();
  LoopStats& s = self->stats_;
  s.tick_cpu_max_ms =
      std::max(s.tick_cpu_max_ms, static_cast<double>(cpu - self->last_cpu_ns_) / 1e6);
  self->last_cpu_ns_ = cpu;
  s.ticks++;
  if (lag_ms > 50) s.ticks_late_50ms++;
}

LoopStats LoopMonitor::Stats() const {
  LoopStats s = stats_;
  s.model_passes = LoopGuard::passes();
  s.model_pass_largest = LoopGuard::largest();
  if (!window_.empty()) {
    std::vector<double> v(window_.begin(), window_.end());
    auto at = [&](double q) {
      const size_t k =
          std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
      return v[k];
    };
    s.lag_p50_ms = at(0.5);
    s.lag_p99_ms = at(0.99);
    s.lag_max_ms = *std::max_element(v.begin(), v.end());
  }
  return s;
}

}  // namespace meshtrain::daemon
