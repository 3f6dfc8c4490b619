// The agent's RPC request format: one JSON object per length-prefixed frame on the --rpc
// endpoint, e.g. {"cmd":"join","addrs":["127.0.0.1:7950"],"token":"..."}. The reply is one JSON
// object with "ok" and either the result or "error".
//
// ParseRpcRequest is the whole parser for untrusted RPC input: it never throws, bounds every
// field, and returns a plain struct whose strings are all valid UTF-8 (fuzzed by tests/fuzz).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::daemon {

struct RpcRequest {
  std::string cmd;  // members | status | join | leave | force-leave | keys | monitor | export
  std::vector<std::string> addrs;  // join: 1..64 "ip:port"
  std::string name;                // force-leave: member name
  std::string key_op;              // keys: install | use | remove | list
  std::string key;                 // keys: base64 key (install/use/remove)
  std::string token;               // --rpc-token, when the agent requires one
  std::string log_level;           // monitor: trace | debug | info | warn | error
};

// The levels `monitor` streams at (spdlog names).
bool ValidMonitorLevel(const std::string& level);

constexpr size_t kMaxRpcRequestBytes = 64 * 1024;

// Nullopt with a one-line reason in *error when the request is malformed or unknown.
std::optional<RpcRequest> ParseRpcRequest(const uint8_t* data, size_t len, std::string* error);

// Constant-time comparison for the RPC token.
bool TokenMatches(const std::string& expected, const std::string& given);

}  // namespace meshtrain::daemon
