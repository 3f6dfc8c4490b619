// Enumerated options by name. Each enumerated option's names live in ONE table, owned by the
// module that defines the values (sync::kPolicyNames for --barrier, sync::kSelectPolicyNames,
// wire::kEncodingNames, learn::OuterStep::kKindNames, the log levels and formats in
// daemon/ops/log_format.h, the switches below); a table is a constexpr array of
// {name, value} pairs in the order help and error messages list them. These helpers read any
// such table: the CLI's checks (cli/option_choice.h), the configuration's messages and the
// banner and status output all go through them, so a name is spelled in one place.
// Thread-safety: pure functions on constant data.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace meshtrain::daemon {

// on | off (--overlap, --serve-relay, --join-state).
inline constexpr std::array<std::pair<std::string_view, bool>, 2> kOnOffNames = {{
    {"on", true},
    {"off", false},
}};

// auto | off (--nat).
inline constexpr std::array<std::pair<std::string_view, bool>, 2> kAutoOffNames = {{
    {"auto", true},
    {"off", false},
}};

// The value named `name` in `table`, or nullopt.
template <typename Table>
auto ParseName(const Table& table, std::string_view name)
    -> std::optional<typename Table::value_type::second_type> {
  for (const auto& [n, v] : table) {
    if (n == name) return v;
  }
  return std::nullopt;
}

// The name of `value` in `table` ("" when it has none).
template <typename Table>
std::string_view NameOf(const Table& table, typename Table::value_type::second_type value) {
  for (const auto& [n, v] : table) {
    if (v == value) return n;
  }
  return {};
}

// The names for a message: "a, b or c".
template <typename Table>
std::string ChoiceList(const Table& table) {
  std::string out;
  for (size_t i = 0; i < table.size(); ++i) {
    if (i > 0) out += i + 1 == table.size() ? " or " : ", ";
    out += table[i].first;
  }
  return out;
}

}  // namespace meshtrain::daemon
