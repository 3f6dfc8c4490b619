// The meshtrain agent: wires the SWIM core, the wire codec and the libuv transports together on
// one event loop, serves the CLI's RPC, and (with a task) runs training beside the loop.
//
// Thread-safety: Run() owns the calling thread as the loop thread. RequestStop() may be called
// from any thread.
#pragma once

#include <memory>
#include <string>

#include "daemon/config.h"
#include "learn/task.h"

namespace meshtrain::daemon {

class Agent {
 public:
  explicit Agent(AgentConfig config);  // config must have passed Finalize()
  // The embedding API: the agent trains `task` (any learn::Task subclass: your model
  // and data) with the built-in trainer instead of config.task; see examples/embed_agent.cc.
  Agent(AgentConfig config, std::unique_ptr<learn::Task> task);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Binds, prints the banner, joins, and runs until a graceful leave completes (exit code 0)
  // or start-up fails (non-zero, with the reason logged).
  int Run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshtrain::daemon
