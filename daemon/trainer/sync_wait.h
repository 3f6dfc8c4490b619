// Which peers' models an external trainer's sync still waits for (docs/design.md "Mixing"):
// the decision of ExternalTrainer::TryGatedMix as a plain function of what the trainer knows,
// so that it is tested without a trainer, a loop or a clock.
#ifndef MESHTRAIN_DAEMON_TRAINER_SYNC_WAIT_H_
#define MESHTRAIN_DAEMON_TRAINER_SYNC_WAIT_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "daemon/trainer/trainer.h"

namespace meshtrain::daemon {

// A transfer of this exchange window, by sender, as far as the wait cares.
struct WindowTransfer {
  bool whole = false;  // its last chunk came, none dropped
  bool lost = false;   // a chunk was dropped: it will never be whole
};

struct SyncWaitInput {
  uint64_t step = 0;  // the sync's step
  // Seconds since this node's last mix plus a slack; < 0 before the first mix. A peer that came
  // back (Trainer::PeerStep::since_change_s) within it is not waited for.
  double returned_window_s = -1;
  Trainer::PeerSteps peers;
  // Each peer's step when the trainer attached: a peer already at or past the sync's step then
  // sent its model of that step before this trainer was here (it is not coming).
  std::map<std::string, uint64_t> at_attach;
  std::map<std::string, uint64_t> whole_step;  // sender -> step of its newest whole model
  std::map<std::string, uint64_t> held_whole;  // sender -> step of a whole model held for later
  std::map<std::string, WindowTransfer> window;
};

struct SyncWait {
  size_t waited = 0;  // peers whose model of this sync is waited for (come or not)
  // Empty when nothing is missing; else " name (why)" per peer, for the log line of a sync that
  // stops waiting.
  std::string missing;
  std::set<std::string> returned;  // peers not waited for because they came back
};

SyncWait DecideSyncWait(const SyncWaitInput& in);

}  // namespace meshtrain::daemon

#endif  // MESHTRAIN_DAEMON_TRAINER_SYNC_WAIT_H_
