#include "node/data_conns.h"

namespace meshtrain::node {

std::optional<ConnId> DataConns::Find(const std::string& name) const {
  auto it = by_peer_.find(name);
  if (it == by_peer_.end()) return std::nullopt;
  return it->second.conn;
}

std::optional<ConnId> DataConns::Use(const std::string& name, uint64_t round) {
  auto it = by_peer_.find(name);
  if (it == by_peer_.end()) return std::nullopt;
  it->second.used = round;
  return it->second.conn;
}

void DataConns::Add(const std::string& name, ConnId conn, uint64_t round) {
  by_peer_[name] = Conn{conn, round};
  by_conn_[conn] = name;
}

void DataConns::Drop(ConnId conn) {
  auto it = by_conn_.find(conn);
  if (it == by_conn_.end()) return;
  auto open = by_peer_.find(it->second);
  if (open != by_peer_.end() && open->second.conn == conn) by_peer_.erase(open);
  by_conn_.erase(it);
}

}  // namespace meshtrain::node
