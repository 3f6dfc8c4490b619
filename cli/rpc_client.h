// Blocking RPC client for the CLI: one JSON request frame to the agent's --rpc endpoint, one
// JSON reply frame back, with bounded connect and read timeouts.
// Thread-safety: stateless free function.
#pragma once

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

}  // namespace meshtrain::cli
