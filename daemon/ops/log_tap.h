// `meshtrain monitor`: a spdlog sink that copies log lines, at the level the
// attached monitors ask for, into a bounded queue the loop thread drains and streams over RPC.
// The console keeps its own level (--log-level); while a monitor wants debug lines the logger
// itself runs at debug and the console sink filters.
//
// Thread-safety: the sink is called from any logging thread (spdlog locks it); SetLevel and
// Take are called from the loop thread; the wake callback must be thread-safe (uv_async_send).
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace meshtrain::daemon {

struct TappedLine {
  spdlog::level::level_enum level;
  std::string text;  // formatted, without the trailing newline
};

class LogTap final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr size_t kMaxQueued = 4096;  // beyond this the oldest lines are dropped

  explicit LogTap(std::function<void()> wake);
  // The lowest level any monitor wants; spdlog::level::off when none is attached.
  void SetWanted(spdlog::level::level_enum level) { wanted_.store(level); }
  spdlog::level::level_enum wanted() const { return wanted_.load(); }
  std::vector<TappedLine> Take();
  // No more wake-ups (the loop is closing); lines are still queued and dropped on overflow.
  void Detach();
  uint64_t dropped() const { return dropped_.load(); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  std::function<void()> wake_;  // guarded by queue_mu_
  std::atomic<spdlog::level::level_enum> wanted_{spdlog::level::off};
  std::atomic<uint64_t> dropped_{0};
  std::mutex queue_mu_;
  std::deque<TappedLine> queue_;  // guarded by queue_mu_
};

}  // namespace meshtrain::daemon
