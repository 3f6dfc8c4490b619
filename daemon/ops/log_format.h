// Log line formats of the agent (--log-format): `text` (an spdlog pattern) and `json` (one JSON
// object per line: ts, level, node, msg), and the log level names (--log-level, `monitor`). The
// JSON formatter never throws: text that is not valid UTF-8 (a peer name, a path) becomes U+FFFD
// instead of aborting the logger. Thread-safety: a formatter is owned by one sink; spdlog locks the
// sink around format().
#pragma once

#include <spdlog/formatter.h>
#include <spdlog/logger.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace meshtrain::daemon {

enum class LogFormat : uint8_t { kText, kJson };

// --log-format's names.
inline constexpr std::array<std::pair<std::string_view, LogFormat>, 2> kLogFormatNames = {{
    {"text", LogFormat::kText},
    {"json", LogFormat::kJson},
}};

// --log-level's names (spdlog's).
inline constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 7>
    kLogLevelNames = {{
        {"trace", spdlog::level::trace},
        {"debug", spdlog::level::debug},
        {"info", spdlog::level::info},
        {"warn", spdlog::level::warn},
        {"error", spdlog::level::err},
        {"critical", spdlog::level::critical},
        {"off", spdlog::level::off},
    }};

// The levels `monitor` streams at: the first five (critical and off are not levels to stream
// at).
inline constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 5>
    kMonitorLevelNames = {{kLogLevelNames[0], kLogLevelNames[1], kLogLevelNames[2],
                           kLogLevelNames[3], kLogLevelNames[4]}};

// One log line as a JSON object: {"ts":"2026-01-02T03:04:05.678Z","level":"info",
// "node":"n1","msg":"..."} followed by '\n'. `ts` is UTC with milliseconds.
class JsonLogFormatter final : public spdlog::formatter {
 public:
  explicit JsonLogFormatter(std::string node) : node_(std::move(node)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;

 private:
  std::string node_;
};

// Applies `format` to `logger` for node `node`.
void SetLogFormat(spdlog::logger& logger, LogFormat format, const std::string& node);

}  // namespace meshtrain::daemon
