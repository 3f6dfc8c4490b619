#include "daemon/ops/log_format.h"

#include <spdlog/pattern_formatter.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "daemon/ops/json_text.h"

namespace meshtrain::daemon {

namespace {

// "YYYY-MM-DDTHH:MM:SS.mmmZ" of a system_clock time point.
std::string UtcTimestamp(spdlog::log_clock::time_point t) {
  const auto since = t.time_since_epoch();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since - secs).count();
  if (millis < 0) millis = 0;
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return buf;
}

}  // namespace

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const auto level = spdlog::level::to_string_view(msg.level);
  nlohmann::json j = {{"ts", UtcTimestamp(msg.time)},
                      {"level", std::string(level.data(), level.size())},
                      {"node", node_},
                      {"msg", std::string(msg.payload.data(), msg.payload.size())}};
  const std::string line = JsonText(j) + "\n";
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>(node_);
}

void SetLogFormat(spdlog::logger& logger, LogFormat format, const std::string& node) {
  if (format == LogFormat::kJson) {
    logger.set_formatter(std::make_unique<JsonLogFormatter>(node));
  } else {
    logger.set_pattern("%Y-%m-%dT%H:%M:%S.%e [%^%l%$] " + node + ": %v");
  }
}

}  // namespace meshtrain::daemon
