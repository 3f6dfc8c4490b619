#include "daemon/ops/log_format.h"

#include <spdlog/sinks/ostream_sink.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/option_names.h"

using meshtrain::daemon::kLogFormatNames;
using meshtrain::daemon::ParseName;
using meshtrain::daemon::SetLogFormat;

namespace {

// Logs `line` at `level` through a logger using `format`, returns what the sink received.
std::string LogOnce(const std::string& format, spdlog::level::level_enum level,
                    const std::string& line) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("log_format_test", sink);
  logger.set_level(spdlog::level::trace);
  const auto parsed = ParseName(kLogFormatNames, format);
  REQUIRE(parsed);
  SetLogFormat(logger, *parsed, "n\"1");
  logger.log(level, "{}", line);
  logger.flush();
  return out.str();
}

}  // namespace

TEST_CASE("json log format: one parseable object per line", "[daemon][log]") {
  const std::string text = LogOnce("json", spdlog::level::debug, "joined \"b\"\nnext line");
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');
  CHECK(text.find('\n') == text.size() - 1);  // the payload's newline is escaped
  const auto j = nlohmann::json::parse(text);
  CHECK(j.at("level") == "debug");
  CHECK(j.at("node") == "n\"1");
  CHECK(j.at("msg") == "joined \"b\"\nnext line");
  const std::string ts = j.at("ts");
  REQUIRE(ts.size() == 24);
  CHECK(ts[10] == 'T');
  CHECK(ts[19] == '.');
  CHECK(ts.back() == 'Z');
}

TEST_CASE("json log format never throws on invalid UTF-8", "[daemon][log]") {
  const std::string text = LogOnce("json", spdlog::level::warn, std::string("bad \xff\xfe name"));
  const auto j = nlohmann::json::parse(text);
  CHECK(j.at("level") == "warning");
  CHECK(j.at("msg") == "bad \xEF\xBF\xBD\xEF\xBF\xBD name");
}

TEST_CASE("text log format keeps the pattern; unknown formats are refused", "[daemon][log]") {
  const std::string text = LogOnce("text", spdlog::level::info, "hello");
  CHECK(text.find("[info] n\"1: hello") != std::string::npos);
  CHECK_FALSE(ParseName(kLogFormatNames, "xml"));
  CHECK(ParseName(kLogFormatNames, "json") == meshtrain::daemon::LogFormat::kJson);
}
