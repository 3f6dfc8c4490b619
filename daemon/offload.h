// Work that is not I/O — a SELMCAST solve, an fsync — runs on libuv's thread pool, off the loop
// thread; its completion comes back on the loop thread (libuv: handles belong to that thread).
// Thread-safety: Offload is called on the loop thread; `work` runs on a pool thread and must not
// touch loop-thread state; `done` runs on the loop thread.
#pragma once

#include <uv.h>

#include <functional>
#include <string>
#include <vector>

#include "node/node.h"

namespace meshtrain::daemon {

// Runs `work` on the thread pool, then `done` on the loop thread. If the request cannot be
// queued, both run at once on the calling thread. The pool's threads are SCHED_BATCH at the
// agent's priority (daemon::ThroughputThread): a round's chunk encodings run there, on the
// transfer's critical path.
void Offload(uv_loop_t* loop, std::function<void()> work, std::function<void()> done);
// The same for bulk work (a trainer's snapshot copy and mix, buffers made or freed at attach and
// detach): `work` runs on the agent's one bulk thread, at nice +kBulkNice (daemon::BulkThread),
// in the order given, while a pool thread waits for it; `done` on the loop thread.
void OffloadBulk(uv_loop_t* loop, std::function<void()> work, std::function<void()> done);

// One sender -> receiver flow of a global plan, at the sender's max-min fair rate (dashboard).
struct PlanEdge {
  std::string from, to;
  double mbps = 0;
};
struct PlanView {
  double rate_mbps = 0;  // the bottleneck rate the plan was built for
  std::vector<PlanEdge> edges;
};

// Solves a SELMCAST plan (sync::Select with the request's seed) on the thread pool; `done` gets
// the answer, and the whole plan for display, on the loop thread.
void SolvePlanOffLoop(uv_loop_t* loop, node::PlanRequest req,
                      std::function<void(node::PlanResult, PlanView)> done);

}  // namespace meshtrain::daemon
