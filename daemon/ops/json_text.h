// The one way meshtrain turns JSON into text. nlohmann::json::dump() throws
// type_error 316 on a string that is not valid UTF-8; a name that slipped past validation
// must never turn a log line, a metrics event or an RPC reply into an abort (an exception
// escaping a libuv callback). The non-throwing mode replaces invalid bytes with U+FFFD.
// Thread-safety: pure function.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace meshtrain::daemon {

// Compact JSON text of `j`; never throws (bar std::bad_alloc).
inline std::string JsonText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace meshtrain::daemon
