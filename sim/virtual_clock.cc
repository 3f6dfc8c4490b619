#include "sim/virtual_clock.h"

#include <utility>

namespace meshtrain::sim {

void VirtualClock::schedule(TimeMs at, Fn fn) {
  heap_.push(Entry{at < now_ ? now_ : at, next_seq_++, std::move(fn)});
}

bool VirtualClock::run_next() {
  if (heap_.empty()) return false;
  // priority_queue::top is const; moving only the callback out leaves the ordering fields
  // (at, seq) intact, so pop() still sees a valid heap.
  Entry e = std::move(const_cast<Entry&>(heap_.top()));
  heap_.pop();
  now_ = e.at;
  ++events_run_;
  e.fn();
  return true;
}

void VirtualClock::run_until(TimeMs until) {
  while (!heap_.empty() && heap_.top().at <= until) run_next();
  if (until > now_) now_ = until;
}

}  // namespace meshtrain::sim
