// JSON-lines metrics log (docs/contract.md "Output formats"): one object per line, each with `t`
// (seconds since the agent started) and `event`. Lines are flushed as they are written so that a
// crash loses at most the line being written. Thread-safety: Write may be called from any thread
// (internally serialized).
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace meshtrain::daemon {

class MetricsLog {
 public:
  MetricsLog() : start_(std::chrono::steady_clock::now()) {}
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Opens (appends to) `path`. An empty path disables it.
  Status Open(const std::string& path);
  // Adds "t" and "event" to `fields` and appends it as one line.
  void Write(const std::string& event, nlohmann::json fields);
  double Elapsed() const;

 private:
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::FILE* file_ = nullptr;  // guarded by mu_
};

}  // namespace meshtrain::daemon
