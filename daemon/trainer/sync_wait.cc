#include "daemon/trainer/sync_wait.h"

namespace meshtrain::daemon {

SyncWait DecideSyncWait(const SyncWaitInput& in) {
  SyncWait out;
  const uint64_t s = in.step;
  for (const auto& [name, step, since_change_s] : in.peers) {
    if (step < s) continue;  // behind us: its model is mixed when it comes, by its age
    // A peer that came back from suspect or failed (or restarted) since our last mix may have
    // lost its model of this sync on the way (a transfer cut by the fault, or sent while it was
    // cut off): not waited for, and a transfer of it half in counts as broken off.
    if (since_change_s < in.returned_window_s) {
      out.returned.insert(name);
      continue;
    }
    // Past this step when the trainer attached: its model of the step went out before.
    if (auto a = in.at_attach.find(name); a != in.at_attach.end() && a->second >= s) continue;
    out.waited++;
    auto it = in.whole_step.find(name);
    // A newer model of that peer, held for the next window, is whole: the one of this step is
    // not coming (it went out before this node trained).
    auto later = in.held_whole.find(name);
    if ((it == in.whole_step.end() || it->second < s) &&
        (later == in.held_whole.end() || later->second <= s)) {
      out.missing +=
          " " + name + " (at step " + std::to_string(step) + ", whole model of step " +
          (it == in.whole_step.end() ? std::string("none") : std::to_string(it->second)) + ")";
    }
  }
  for (const auto& [from, t] : in.window) {
    // Half in: never mix part of a model.
    if (!t.whole && !t.lost && out.returned.count(from) == 0) {
      out.missing += " " + from + " (a transfer half in)";
    }
  }
  return out;
}

}  // namespace meshtrain::daemon
