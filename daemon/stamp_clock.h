// The clock this agent stamps its messages with (Datagram/Frame sent_ms). Receivers
// never compare it with their own clock, only with this sender's earlier stamps: the replay
// guard refuses a new session whose first stamp is below the sender's previous session
// (wire/replay_guard.h). So the stamps must not go back across a restart, even when the wall
// clock does (a clock minutes ahead, corrected by NTP, then a restart: without this the host is
// locked out until its clock passes its old stamps).
//
// Stamps are max(wall clock, reserved floor) at start, then advance with the monotonic clock.
// With --data-dir the floor is persisted: at start the agent reserves the next kReserveMs of
// stamps in DIR/stamps (atomic write) and renews the reservation before it runs out, so a
// restarted agent starts above every stamp it may have sent. Without --data-dir the stamps only
// follow the wall clock at start.
//
// Thread-safety: Now() from any thread; Start() and Renew() on one thread (the loop thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace meshtrain::daemon {

class StampClock {
 public:
  static constexpr uint64_t kReserveMs = 10 * 60 * 1000;

  // `dir`: the data dir ("" = no persistence).
  explicit StampClock(std::string dir) : path_(dir.empty() ? "" : dir + "/stamps") {}

  // Reads the persisted floor and reserves the first interval. `wall_ms`: the wall clock now;
  // `mono_ms`: the monotonic clock now (any origin).
  Status Start(uint64_t wall_ms, uint64_t mono_ms);
  // The stamp for a message sent at monotonic time `mono_ms`.
  uint64_t Now(uint64_t mono_ms) const { return base_ + (mono_ms - mono0_); }
  // Extends the reservation when less than half of it is left (call periodically). A write
  // failure is returned (the agent logs it; stamps go on).
  Status Renew(uint64_t mono_ms);
  uint64_t reserved() const { return reserved_.load(); }

 private:
  Status Reserve(uint64_t until);

  std::string path_;
  uint64_t base_ = 0;
  uint64_t mono0_ = 0;
  std::atomic<uint64_t> reserved_{0};
};

}  // namespace meshtrain::daemon
