#include "daemon/ops/rpc.h"

#include <nlohmann/json.hpp>

#include "daemon/ops/log_format.h"
#include "daemon/option_names.h"
#include "wire/messages.h"

namespace meshtrain::daemon {
namespace {

constexpr size_t kMaxField = 256;

// At most `max` bytes of `s`, cut at a character boundary so the result stays valid UTF-8 (it
// goes back in the error reply, which is JSON).
std::string Prefix(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  return s.substr(0, n);
}

bool GetString(const nlohmann::json& j, const char* field, std::string* out, std::string* error,
               bool required) {
  auto it = j.find(field);
  if (it == j.end()) {
    if (required) *error = std::string("missing field '") + field + "'";
    return !required;
  }
  if (!it->is_string()) {
    *error = std::string("field '") + field + "' must be a string";
    return false;
  }
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > kMaxField) {
    *error = std::string("field '") + field + "' is too long";
    return false;
  }
  // The JSON parser already refuses ill-formed UTF-8 and lone surrogate escapes; checked here
  // too so that the guarantee does not rest on a library detail.
  if (!wire::ValidUtf8(s)) {
    *error = std::string("field '") + field + "' is not valid UTF-8";
    return false;
  }
  *out = s;
  return true;
}

}  // namespace

std::optional<RpcRequest> ParseRpcRequest(const uint8_t* data, size_t len, std::string* error) {
  std::string scratch;
  if (error == nullptr) error = &scratch;
  if (len > kMaxRpcRequestBytes) {
    *error = "request too large";
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(data, data + len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "malformed RPC request: expected a JSON object";
    return std::nullopt;
  }
  RpcRequest r;
  if (!GetString(j, "cmd", &r.cmd, error, true)) return std::nullopt;
  if (!GetString(j, "token", &r.token, error, false)) return std::nullopt;
  if (r.cmd == "members" || r.cmd == "status" || r.cmd == "leave" || r.cmd == "export") return r;
  if (r.cmd == "monitor") {
    r.log_level = "info";
    if (!GetString(j, "level", &r.log_level, error, false)) return std::nullopt;
    if (!ValidMonitorLevel(r.log_level)) {
      *error = "monitor: unknown log level '" + Prefix(r.log_level, 32) + "' (" +
               ChoiceList(kMonitorLevelNames) + ")";
      return std::nullopt;
    }
    return r;
  }
  if (r.cmd == "force-leave") {
    if (!GetString(j, "name", &r.name, error, true)) return std::nullopt;
    if (r.name.empty()) {
      *error = "force-leave needs a member name";
      return std::nullopt;
    }
    if (!wire::NoControlChars(r.name)) {
      *error = "force-leave: the member name has control characters";
      return std::nullopt;
    }
    return r;
  }
  if (r.cmd == "join") {
    auto it = j.find("addrs");
    if (it == j.end() || !it->is_array() || it->empty() || it->size() > 64) {
      *error = "join needs 'addrs': an array of 1-64 addresses";
      return std::nullopt;
    }
    for (const auto& a : *it) {
      if (!a.is_string() || a.get_ref<const std::string&>().size() > kMaxField ||
          !wire::NoControlChars(a.get_ref<const std::string&>())) {
        *error =
            "join addresses must be UTF-8 strings of at most 256 bytes without control "
            "characters";
        return std::nullopt;
      }
      r.addrs.push_back(a.get<std::string>());
    }
    return r;
  }
  if (r.cmd == "keys") {
    if (!GetString(j, "op", &r.key_op, error, true)) return std::nullopt;
    if (r.key_op != "install" && r.key_op != "use" && r.key_op != "remove" && r.key_op != "list") {
      *error = "keys: unknown operation '" + r.key_op + "'";
      return std::nullopt;
    }
    if (!GetString(j, "key", &r.key, error, r.key_op != "list")) return std::nullopt;
    return r;
  }
  *error = "unknown command '" + Prefix(r.cmd, 64) + "'";
  return std::nullopt;
}

bool ValidMonitorLevel(const std::string& level) {
  return ParseName(kMonitorLevelNames, level).has_value();
}

bool TokenMatches(const std::string& expected, const std::string& given) {
  // Length is not secret; the bytes are compared without an early exit.
  if (expected.size() != given.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i] ^ given[i]);
  }
  return diff == 0;
}

}  // namespace meshtrain::daemon
