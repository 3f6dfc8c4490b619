// A virtual clock for discrete-event simulation: a heap of callbacks ordered by (deadline,
// insertion sequence), so events at the same instant run in the order they were scheduled and
// every run is reproducible (Tarantool SWIM's fake event loop). Time only moves when run_next()
// pops an event. Generic: it knows nothing about SWIM or networks.
//
// Thread-safety: none; one thread drives a clock.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace meshtrain::sim {

using TimeMs = int64_t;

class VirtualClock {
 public:
  using Fn = std::function<void()>;

  explicit VirtualClock(TimeMs start = 0) : now_(start) {}
  VirtualClock(const VirtualClock&) = delete;
  VirtualClock& operator=(const VirtualClock&) = delete;

  TimeMs now() const { return now_; }

  // Runs `fn` at virtual time `at` (clamped to now: the past cannot be scheduled).
  void schedule(TimeMs at, Fn fn);
  void schedule_after(TimeMs delay, Fn fn) { schedule(now_ + delay, std::move(fn)); }

  // Pops the earliest event, advances now() to its time and runs it. False if none is pending.
  // The callback may schedule more events.
  bool run_next();
  // Runs every event due at or before `until`, then sets now() to `until`.
  void run_until(TimeMs until);

  bool empty() const { return heap_.empty(); }
  size_t pending() const { return heap_.size(); }
  // Time of the earliest pending event; only meaningful when !empty().
  TimeMs next_time() const { return heap_.top().at; }
  uint64_t events_run() const { return events_run_; }

 private:
  struct Entry {
    TimeMs at;
    uint64_t seq;
    Fn fn;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
  };

  TimeMs now_;
  uint64_t next_seq_ = 0;
  uint64_t events_run_ = 0;
  std::priority_queue<Entry, std::vector<Entry>, Later> heap_;
};

}  // namespace meshtrain::sim
