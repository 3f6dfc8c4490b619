// The node's lifecycle: where one agent stands between its start and its exit, as one value
// whose transitions are all written here (node/node.h composes it).
//
// Three axes, each a small state machine of its own, since they change independently (a node
// may finish training before its first permit, or leave while it still fetches a model):
//
//   start:     kAwaitingPeers --PeersReached--> kCheckingState --BeginFetch--> kFetchingState
//                                                    |  ^--------RetryFetch--------|
//                                                    +--Started--> kReady <--Started--+
//              The first step of a run waits for --min-peers training peers (kAwaitingPeers;
//              skipped when resuming or without the gate), then for join with state
//              (node_state.cc): a node behind a running mesh fetches a peer's model
//              (kFetchingState) before it trains (kReady).
//   finished:  false --Finish--> true: the trainer sent its final model (docs/contract.md
//              "Training"); the node offers it to peers still training and takes part in the
//              end-of-training consensus.
//   presence:  kMember --BeginLeave--> kLeaving --LeaveDone--> kLeft: the graceful leave
//              (docs/contract.md "Command line": announce "left", wait up to leave_max_ms for
//              the news to spread, then let the driver exit).
//
// Each transition is valid from the states named above only (asserted); the flags it replaces
// could also say "left but not leaving" or "fetching before the peers are there".
#pragma once

#include <cassert>
#include <cstdint>

namespace meshtrain::node {

class Lifecycle {
 public:
  enum class Start : uint8_t { kAwaitingPeers, kCheckingState, kFetchingState, kReady };
  enum class Presence : uint8_t { kMember, kLeaving, kLeft };

  // `gated`: the first step waits for --min-peers training peers.
  explicit Lifecycle(bool gated) : start_(gated ? Start::kAwaitingPeers : Start::kCheckingState) {}

  Start start() const { return start_; }
  Presence presence() const { return presence_; }
  bool min_peers_reached() const { return start_ != Start::kAwaitingPeers; }
  bool fetching_state() const { return start_ == Start::kFetchingState; }
  bool ready() const { return start_ == Start::kReady; }  // join with state is behind us
  bool finished() const { return finished_; }
  bool leaving() const { return presence_ != Presence::kMember; }  // started, maybe done
  bool leave_pending() const { return presence_ == Presence::kLeaving; }
  int64_t leave_started() const { return leave_started_; }

  // ---- start ----
  void PeersReached() {
    assert(start_ == Start::kAwaitingPeers);
    start_ = Start::kCheckingState;
  }
  void BeginFetch() {
    assert(start_ == Start::kCheckingState);
    start_ = Start::kFetchingState;
  }
  // The fetch failed early: check again (maybe another peer) after a pause.
  void RetryFetch() {
    assert(start_ == Start::kFetchingState);
    start_ = Start::kCheckingState;
  }
  // Our own model (nobody is further on, or the fetch gave up) or the adopted one: train.
  void Started() {
    assert(start_ == Start::kCheckingState || start_ == Start::kFetchingState);
    start_ = Start::kReady;
  }

  // ---- finished ----
  // False when already finished (a later final snapshot changes nothing here).
  bool Finish() {
    if (finished_) return false;
    finished_ = true;
    return true;
  }

  // ---- presence ----
  // False when a leave already started.
  bool BeginLeave(int64_t now) {
    if (presence_ != Presence::kMember) return false;
    presence_ = Presence::kLeaving;
    leave_started_ = now;
    return true;
  }
  void LeaveDone() {
    assert(presence_ == Presence::kLeaving);
    presence_ = Presence::kLeft;
  }

 private:
  Start start_;
  Presence presence_ = Presence::kMember;
  bool finished_ = false;
  int64_t leave_started_ = 0;
};

}  // namespace meshtrain::node
