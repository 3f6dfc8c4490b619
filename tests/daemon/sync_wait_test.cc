// daemon::DecideSyncWait: which peers' models an external trainer's sync waits for.
#include "daemon/trainer/sync_wait.h"

#include <catch2/catch.hpp>

namespace meshtrain::daemon {
namespace {

SyncWaitInput AtStep(uint64_t step, Trainer::PeerSteps peers) {
  SyncWaitInput in;
  in.step = step;
  in.peers = std::move(peers);
  return in;
}

}  // namespace

TEST_CASE("sync wait: peers at or past the step, until their whole model of it came",
          "[daemon][sync_wait]") {
  SyncWaitInput in = AtStep(100, {{"a", 100}, {"b", 120}, {"c", 80}});
  SyncWait w = DecideSyncWait(in);
  CHECK(w.waited == 2);  // c is behind: its model is mixed when it comes
  CHECK(w.missing ==
        " a (at step 100, whole model of step none) b (at step 120, whole model of "
        "step none)");
  in.whole_step = {{"a", 100}, {"b", 50}};
  in.held_whole = {{"b", 150}};  // b's newer model is held: its model of 100 is not coming
  w = DecideSyncWait(in);
  CHECK(w.waited == 2);
  CHECK(w.missing.empty());
  in.window = {{"c", {false, false}}};  // half in: never mixed in part
  CHECK(DecideSyncWait(in).missing == " c (a transfer half in)");
  in.window = {{"c", {false, true}}};  // a chunk was dropped: it never will be whole
  CHECK(DecideSyncWait(in).missing.empty());
}

TEST_CASE("sync wait: a peer that came back since the last mix is not waited for",
          "[daemon][sync_wait]") {
  SyncWaitInput in = AtStep(100, {{"a", 100, 3.0}, {"b", 100, 12.0}});
  in.window = {{"a", {false, false}}};
  SyncWait w = DecideSyncWait(in);  // before the first mix: nobody counts as returned
  CHECK(w.returned.empty());
  CHECK(w.waited == 2);
  in.returned_window_s = 10;  // the last mix was 9 s ago
  w = DecideSyncWait(in);
  CHECK(w.returned == std::set<std::string>{"a"});
  CHECK(w.waited == 1);  // b came back before the last mix: waited for
  CHECK(w.missing == " b (at step 100, whole model of step none)");
}

TEST_CASE("sync wait: a peer past the step when the trainer attached is not waited for",
          "[daemon][sync_wait]") {
  // A restarted node resumes at step 2300 and syncs at 2350; a peer that was at 2400 when the
  // trainer attached (finishing: no newer model comes) sent its model of 2350 before.
  SyncWaitInput in = AtStep(2350, {{"n3", 2400}, {"n1", 2350}});
  in.at_attach = {{"n3", 2400}, {"n1", 2320}};
  SyncWait w = DecideSyncWait(in);
  CHECK(w.waited == 1);
  CHECK(w.missing == " n1 (at step 2350, whole model of step none)");
  // A transfer of it half in is still waited for: it is coming.
  in.whole_step = {{"n1", 2350}};
  in.window = {{"n3", {false, false}}};
  CHECK(DecideSyncWait(in).missing == " n3 (a transfer half in)");
  // The next sync, past what n3 was at when the trainer attached, waits for it again.
  in = AtStep(2450, {{"n3", 2450}});
  in.at_attach = {{"n3", 2400}};
  CHECK(DecideSyncWait(in).waited == 1);
}

}  // namespace meshtrain::daemon
