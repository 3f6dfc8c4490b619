#include "daemon/ops/log_tap.h"

#include <spdlog/pattern_formatter.h>

namespace meshtrain::daemon {

LogTap::LogTap(std::function<void()> wake) : wake_(std::move(wake)) {
  set_formatter(std::make_unique<spdlog::pattern_formatter>("[%Y-%m-%d %H:%M:%S.%e] [%l] %v"));
}

void LogTap::sink_it_(const spdlog::details::log_msg& msg) {
  const auto wanted = wanted_.load();
  if (wanted == spdlog::level::off || msg.level < wanted) return;
  spdlog::memory_buf_t buf;
  formatter_->format(msg, buf);
  std::string text(buf.data(), buf.size());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (queue_.size() >= kMaxQueued) {
      queue_.pop_front();
      dropped_++;
    }
    queue_.push_back({msg.level, std::move(text)});
    if (wake_) wake_();
  }
}

void LogTap::Detach() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  wake_ = nullptr;
}

std::vector<TappedLine> LogTap::Take() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  std::vector<TappedLine> out(std::make_move_iterator(queue_.begin()),
                              std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

}  // namespace meshtrain::daemon
