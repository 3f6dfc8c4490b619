// JSON text that cannot throw: strings that are not valid UTF-8 (which nlohmann's default dump
// rejects with type_error 316) are written with U+FFFD in place of the bad bytes. Every JSON
// writer of the daemon and the CLI goes through this.
// Thread-safety: pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace meshtrain::daemon {

inline std::string JsonText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace meshtrain::daemon
