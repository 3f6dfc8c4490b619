#include "daemon/rpc_server.h"

#include "daemon/json_text.h"

namespace meshtrain::daemon {

using nlohmann::json;

namespace {
constexpr size_t kMaxRpcFrame = 64 * 1024;
}  // namespace

RpcServer::RpcServer(uv_loop_t* loop, std::string token, RpcBackend* backend)
    : token_(std::move(token)), backend_(backend) {
  gossip::TcpOptions opts;
  opts.max_frame_bytes = kMaxRpcFrame;
  opts.max_connections = 32;
  opts.idle_timeout_ms = 10000;
  hub_ = std::make_unique<gossip::TcpHub>(loop, opts);
}

int RpcServer::Listen(const gossip::NetAddr& addr) {
  return hub_->Listen(addr, [this](gossip::TcpHub::ConnId id, gossip::Bytes&& f) {
    OnFrame(id, std::move(f));
  });
}

void RpcServer::CloseAll() { hub_->CloseAll(); }

void RpcServer::Send(gossip::TcpHub::ConnId id, const json& reply) {
  const std::string s = JsonText(reply);
  hub_->Send(id, gossip::Bytes(s.begin(), s.end()));
  hub_->Close(id);
}

void RpcServer::Reply(uint64_t tag, const json& reply) {
  auto it = waiting_.find(tag);
  if (it == waiting_.end()) return;
  const gossip::TcpHub::ConnId id = it->second;
  waiting_.erase(it);
  Send(id, reply);
}

void RpcServer::OnFrame(gossip::TcpHub::ConnId id, gossip::Bytes&& payload) {
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
      auto parsed = gossip::NetAddr::Parse(a);
      if (!parsed || parsed->port() == 0) {
        Reply(tag, {{"ok", false}, {"error", "invalid address '" + a + "'"}});
        return;
      }
      addrs.push_back(parsed->ToString());
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
