#include "node/state_fetch.h"

#include <algorithm>

namespace meshtrain::node {

void StateFetch::Choice::Consider(const std::string& name, const std::string& addr, uint64_t step,
                                  bool step_known) {
  any_step_known = any_step_known || step_known;
  // A step not yet learned is no step: taken as 0 it would make the node go on from its own
  // (older) step, far behind the mesh it just took the model of.
  if (step_known) min_step = std::min(min_step, step);
  if (best.empty() || step > best_step || (step == best_step && name < best)) {
    best = name;
    best_addr = addr;
    best_step = step;
  }
}

void StateFetch::Begin(ConnId conn, const Choice& c, uint64_t own_step, TimeMs now,
                       TimeMs answer_wait) {
  deadline_ = std::max(deadline_, now + answer_wait);
  conn_ = conn;
  from_ = c.best;
  adopt_step_ = c.any_step_known ? std::max(own_step, c.min_step) : own_step;
  assembler_.Reset();
}

bool StateFetch::Closed(TimeMs now) {
  closed_on_us_.insert(from_);
  if (now + 2 * kRetryMs >= deadline_) return false;
  retry_at_ = now + kRetryMs;
  return true;
}

}  // namespace meshtrain::node
