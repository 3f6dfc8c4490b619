// Enumerated command-line options from their names tables (daemon/option_names.h): the option
// takes a name of the table and stores its value; --help shows the names ("{a,b,c}") and the
// default's name; any other value is a usage error (exit 2, cli/exit_codes.h) naming the
// accepted values. The same tables name the values in config files (which become command-line
// arguments, daemon/config_file.h), the banner and the status output.
// Thread-safety: call from the main thread while building the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "daemon/option_names.h"

namespace meshtrain::cli {

enum class OutputFormat : uint8_t { kTable, kJson };

// --format of members, status, simulate, train and evaluate.
inline constexpr std::array<std::pair<std::string_view, OutputFormat>, 2> kOutputFormatNames = {{
    {"table", OutputFormat::kTable},
    {"json", OutputFormat::kJson},
}};

// "{a,b,c}" for --help.
template <typename Table>
std::string ChoiceBraces(const Table& table) {
  std::string out = "{";
  for (const auto& entry : table) out += (out.size() > 1 ? "," : "") + std::string(entry.first);
  return out + "}";
}

// The message of a value not in `table` (CLI11 puts the option's name in front).
template <typename Table>
std::string NotAChoice(const Table& table, const std::string& value) {
  return "'" + value + "': expected " + daemon::ChoiceList(table);
}

// A CLI11 transform from a name of `table` to its value (as the integer CLI11 converts enums
// and bools from).
template <typename Table>
CLI::Validator ChoiceTransform(const Table& table) {
  return CLI::Validator(
      [&table](std::string& value) -> std::string {
        const auto parsed = daemon::ParseName(table, value);
        if (!parsed) return NotAChoice(table, value);
        value = std::to_string(static_cast<long long>(*parsed));
        return {};
      },
      ChoiceBraces(table));
}

// A CLI11 check that every comma-separated item of the value is a name of `table` (the
// simulator's sweeps, e.g. --barrier pssp,dssp); empty items are skipped.
template <typename Table>
CLI::Validator ChoiceListCheck(const Table& table) {
  return CLI::Validator(
      [&table](const std::string& value) -> std::string {
        size_t from = 0;
        while (from <= value.size()) {
          const size_t comma = std::min(value.find(',', from), value.size());
          const std::string item = value.substr(from, comma - from);
          if (!item.empty() && !daemon::ParseName(table, item)) return NotAChoice(table, item);
          from = comma + 1;
        }
        return {};
      },
      ChoiceBraces(table) + ",...");
}

// Adds `--name` taking a name of `table` into `value`, its default shown by name.
template <typename T, typename Table>
CLI::Option* AddChoice(CLI::App* app, const std::string& name, T& value, const Table& table,
                       const std::string& help) {
  return app->add_option(name, value, help)
      ->transform(ChoiceTransform(table))
      ->type_name("TEXT")
      ->default_str(std::string(daemon::NameOf(table, value)));
}

}  // namespace meshtrain::cli
