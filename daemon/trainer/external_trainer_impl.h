// Internal declarations shared by the external trainer's two halves: external_trainer.cc (the
// socket protocol: connections, framing, attach, barrier waits, shared memory) and
// external_mixing.cc (publish, mix, eval, finish and the snapshots the node sends). Not part of
// the daemon's interface; include only from those two files.
#pragma once

#include <chrono>

namespace meshtrain::daemon::external_impl {

inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace meshtrain::daemon::external_impl
