// Work that is not I/O — a SELMCAST solve, an fsync — runs on libuv's thread pool, off the loop
// thread; its completion comes back on the loop thread (STYLE.md: libuv ownership).
// Thread-safety: Offload is called on the loop thread; `work` runs on a pool thread and must not
// touch loop-thread state; `done` runs on the loop thread.
#pragma once

#include <uv.h>

#include <functional>

namespace meshtrain::daemon {

// Runs `work` on the thread pool, then `done` on the loop thread. If the request cannot be
// queued, both run at once on the calling thread.
void Offload(uv_loop_t* loop, std::function<void()> work, std::function<void()> done);

}  // namespace meshtrain::daemon
