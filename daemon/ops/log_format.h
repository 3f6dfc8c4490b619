// Log line formats of the agent (issue 19): `text` (the spdlog pattern used so far) and `json`
// (one JSON object per line: ts, level, node, msg). The JSON formatter never throws: text that
// is not valid UTF-8 (a peer name, a path) becomes U+FFFD instead of aborting the logger.
// Thread-safety: a formatter is owned by one sink; spdlog locks the sink around format().
#pragma once

#include <spdlog/formatter.h>
#include <spdlog/logger.h>

#include <memory>
#include <string>

namespace meshtrain::daemon {

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

// Applies `format` ("text" or "json") to `logger` for node `node`; false for an unknown format.
bool SetLogFormat(spdlog::logger& logger, const std::string& format, const std::string& node);

}  // namespace meshtrain::daemon
