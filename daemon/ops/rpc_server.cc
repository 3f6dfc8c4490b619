#include "daemon/ops/rpc_server.h"

#include "daemon/addressing.h"
#include "daemon/ops/json_text.h"

namespace meshtrain::daemon {

using nlohmann::json;

namespace {
constexpr size_t kMaxRpcFrame = 64 * 1024;
}  // namespace

RpcServer::RpcServer(uv_loop_t* loop, std::string token, RpcBackend* backend)
    : token_(std::move(token)), backend_(backend) {
  transport::TcpOptions opts;
  opts.max_frame_bytes = kMaxRpcFrame;
  opts.max_connections = 32;
  opts.idle_timeout_ms = 10000;
  hub_ = std::make_unique<transport::TcpHub>(loop, opts);
}

Status RpcServer::Listen(const wire::NetAddr& addr) {
  return hub_->Listen(
      addr,
      [this](transport::TcpHub::ConnId id, transport::Bytes&& f) { OnFrame(id, std::move(f)); },
      [this](transport::TcpHub::ConnId id, int) { OnClosed(id); });
}

void RpcServer::OnClosed(transport::TcpHub::ConnId id) {
  if (monitors_.erase(id) > 0) backend_->MonitorsChanged();
}

void RpcServer::StreamLog(spdlog::level::level_enum level, const std::string& line) {
  if (monitors_.empty()) return;
  const json frame = {{"level", spdlog::level::to_string_view(level).data()}, {"log", line}};
  const std::string s = JsonText(frame);
  for (const auto& [id, wanted] : monitors_) {
    if (level >= wanted) hub_->Send(id, transport::Bytes(s.begin(), s.end()));
  }
}

void RpcServer::Heartbeat() {
  static const std::string kBeat = R"({"heartbeat":true})";
  for (const auto& [id, wanted] : monitors_)
    hub_->Send(id, transport::Bytes(kBeat.begin(), kBeat.end()));
}

spdlog::level::level_enum RpcServer::MonitorLevel() const {
  auto lowest = spdlog::level::off;
  for (const auto& [id, wanted] : monitors_) lowest = std::min(lowest, wanted);
  return lowest;
}

void RpcServer::CloseAll() { hub_->CloseAll(); }

void RpcServer::Send(transport::TcpHub::ConnId id, const json& reply) {
  const std::string s = JsonText(reply);
  hub_->Send(id, transport::Bytes(s.begin(), s.end()));
  hub_->Close(id);
}

void RpcServer::Reply(uint64_t tag, const json& reply) {
  auto it = waiting_.find(tag);
  if (it == waiting_.end()) return;
  const transport::TcpHub::ConnId id = it->second;
  waiting_.erase(it);
  Send(id, reply);
}

void RpcServer::OnFrame(transport::TcpHub::ConnId id, transport::Bytes&& payload) {
  std::string error;
  auto req = ParseRpcRequest(payload.data(), payload.size(), &error);
  if (!req) {
    rejects_++;
    Send(id, {{"ok", false}, {"error", error}});
    return;
  }
  if (!token_.empty() && !TokenMatches(token_, req->token)) {
    rejects_++;
    Send(id, {{"ok", false},
              {"error",
               "permission denied: missing or wrong RPC token "
               "(set MESHTRAIN_RPC_TOKEN or --rpc-token)"}});
    return;
  }
  const std::string& cmd = req->cmd;
  if (cmd == "members" || cmd == "status") {
    json out = cmd == "members" ? backend_->Members() : backend_->Status();
    out["ok"] = true;
    Send(id, out);
    return;
  }
  if (cmd == "export") {
    Send(id, backend_->Export());
    return;
  }
  if (cmd == "monitor") {
    if (monitors_.size() >= kMaxMonitors || monitors_.count(id) > 0) {
      rejects_++;
      Send(id, {{"ok", false}, {"error", "too many monitors attached"}});
      return;
    }
    const json hello = {{"ok", true}, {"monitor", req->log_level}};
    const std::string s = JsonText(hello);
    hub_->Send(id, transport::Bytes(s.begin(), s.end()));
    monitors_[id] = spdlog::level::from_str(req->log_level);
    backend_->MonitorsChanged();
    return;
  }
  if (cmd == "leave") {
    Send(id, {{"ok", true}});
    backend_->Leave();
    return;
  }
  const uint64_t tag = next_tag_++;
  waiting_[tag] = id;
  if (cmd == "join") {
    std::vector<std::string> addrs;
    for (const auto& a : req->addrs) {
      if (auto parsed = ParseHostPort(a); !parsed.ok()) {
        Reply(tag, {{"ok", false},
                    {"error", "invalid address '" + a + "': " + parsed.status().message()}});
        return;
      }
      addrs.push_back(a);
    }
    backend_->Join(tag, addrs);
  } else if (cmd == "force-leave") {
    backend_->ForceLeave(tag, req->name);
  } else if (cmd == "keys") {
    backend_->Keys(tag, *req);
  } else {
    Reply(tag, {{"ok", false}, {"error", "unknown command"}});
  }
}

}  // namespace meshtrain::daemon
