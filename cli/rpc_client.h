// Blocking RPC client for the CLI: one JSON request frame to the agent's --rpc endpoint, one
// JSON reply frame back, with bounded connect and read timeouts.
// Thread-safety: stateless free function.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace meshtrain::cli {

struct RpcResult {
  bool ok = false;       // transport succeeded and a JSON object came back
  std::string error;     // one-line reason when !ok
  nlohmann::json reply;  // the agent's reply (may itself carry ok:false + error)
};

RpcResult CallAgent(const std::string& rpc_addr, const nlohmann::json& request,
                    int timeout_ms = 15000);

// A streaming request (`monitor`): sends `request`, then hands every reply frame to `on_frame`
// until it returns false or the agent closes the connection. Fails when no frame arrives for
// `idle_timeout_ms` (the agent sends heartbeats). Returns "" or a one-line error.
std::string StreamAgent(const std::string& rpc_addr, const nlohmann::json& request,
                        int idle_timeout_ms, const std::function<bool(nlohmann::json)>& on_frame);

}  // namespace meshtrain::cli
