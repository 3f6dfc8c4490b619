// The external trainer's parameters in --data-dir (docs/python.md "Restarts and --data-dir"): the
// model the trainer last published at every --checkpoint-every steps, its final model when it
// finishes and the consensus model once adopted, each written as a checkpoint (learn/checkpoint.h:
// atomic, the previous one kept; task "external") on a worker thread, never on the loop. An agent
// restarted with the same --data-dir loads the newest good one: the trainer that attaches resumes
// from it, at its step, and the node treats the start as a resume (no --min-peers gate; it fetches
// the mesh's model when the mesh has moved further on).
//
// Thread-safety: Save and Stop from the loop thread; the write runs on `mt-checkpoint`.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/trainer/trainer.h"
#include "learn/status.h"

namespace meshtrain::daemon {

class MetricsLog;

class ExternalCheckpoints {
 public:
  // `every`: steps between checkpoints of the published model (at least 1).
  ExternalCheckpoints(std::string dir, int every, std::string node, MetricsLog* metrics);
  ~ExternalCheckpoints() { Stop(); }
  ExternalCheckpoints(const ExternalCheckpoints&) = delete;
  ExternalCheckpoints& operator=(const ExternalCheckpoints&) = delete;

  struct Loaded {
    uint64_t step = 0;
    std::shared_ptr<const std::vector<float>> params;
    std::string what;  // "published", "final" or "consensus"
    std::string path;
  };
  // The newest good checkpoint of the directory (none in a fresh one). Errors: every checkpoint
  // there is corrupt, or it belongs to a built-in trainer's task.
  learn::Result<std::optional<Loaded>> Load() const;

  // A published model at `step` is written when the step is a multiple of `every` past the last
  // one written.
  bool Due(uint64_t step) const;
  // Writes `params` (shared, not modified by anyone: the writer copies it before writing) as the
  // checkpoint of `step`; replaces a write not started yet.
  void Save(uint64_t step, std::shared_ptr<const std::vector<float>> params, const char* what);
  // The checkpoint of `step` is on disk already (the one the agent resumed from).
  void MarkWritten(uint64_t step) { last_step_ = step; }
  // Lets a pending write finish, then joins the worker.
  void Stop() { worker_.Stop(); }
  uint64_t written() const { return written_; }

  static constexpr char kTask[] = "external";

 private:
  struct Job {
    uint64_t step = 0;
    std::shared_ptr<const std::vector<float>> params;
    std::string what;
  };
  void Write(Job& job);

  const std::string dir_;
  const uint64_t every_;
  const std::string node_;
  MetricsLog* metrics_;
  uint64_t last_step_ = 0;  // loop thread: the newest step posted
  std::atomic<uint64_t> written_{0};
  LatestJobWorker<Job> worker_;
};

}  // namespace meshtrain::daemon
