// The agent's control endpoint (docs/contract.md "Command line", --rpc): one request frame per
// connection, parsed by ParseRpcRequest (daemon/ops/rpc.h), checked against the RPC token, and
// dispatched to a backend; every reply is one JSON object written with JsonText (never throws).
//
// Commands that finish later (join, force-leave, keys) get a tag; the backend completes them with
// Reply(tag, json). Thread-safety: loop thread only.
#pragma once

#include <spdlog/common.h>
#include <uv.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/ops/rpc.h"
#include "transport/transport.h"
#include "wire/net_addr.h"

namespace meshtrain::daemon {

class RpcBackend {
 public:
  virtual ~RpcBackend() = default;
  virtual nlohmann::json Status() = 0;
  virtual nlohmann::json Members() = 0;
  // The newest model snapshot: {"ok":true,"spec","input_shape":[C,H,W],"step","params"
  // (base64 of little-endian float32)} or {"ok":false,"error"}.
  virtual nlohmann::json Export() = 0;
  // Deferred commands: answer with RpcServer::Reply(tag, ...).
  virtual void Join(uint64_t tag, const std::vector<std::string>& addrs) = 0;
  virtual void ForceLeave(uint64_t tag, const std::string& name) = 0;
  virtual void Keys(uint64_t tag, const RpcRequest& req) = 0;
  // Replied to at once with {"ok":true}; the agent then leaves.
  virtual void Leave() = 0;
  // A monitor attached or went away: RpcServer::MonitorLevel() changed.
  virtual void MonitorsChanged() {}
};

class RpcServer {
 public:
  RpcServer(uv_loop_t* loop, std::string token, RpcBackend* backend);
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  Status Listen(const wire::NetAddr& addr);
  void Reply(uint64_t tag, const nlohmann::json& reply);
  void CloseAll();
  uint64_t rejects() const { return rejects_; }

  // `monitor` connections stay open: the first frame is {"ok":true,"monitor":LEVEL},
  // then one {"level":..,"log":..} frame per line at or above LEVEL, and {"heartbeat":true}
  // when Heartbeat() is called (keeps the idle timeout away, and finds dead clients).
  static constexpr size_t kMaxMonitors = 8;
  void StreamLog(spdlog::level::level_enum level, const std::string& line);
  void Heartbeat();
  // The lowest level a monitor wants; spdlog::level::off when none is attached.
  spdlog::level::level_enum MonitorLevel() const;

 private:
  void OnFrame(transport::TcpHub::ConnId id, transport::Bytes&& payload);
  void Send(transport::TcpHub::ConnId id, const nlohmann::json& reply);

  std::string token_;
  RpcBackend* backend_;
  std::unique_ptr<transport::TcpHub> hub_;
  void OnClosed(transport::TcpHub::ConnId id);

  std::map<uint64_t, transport::TcpHub::ConnId> waiting_;  // tag -> connection
  std::map<transport::TcpHub::ConnId, spdlog::level::level_enum> monitors_;
  uint64_t next_tag_ = 1;
  uint64_t rejects_ = 0;
};

}  // namespace meshtrain::daemon
