// The parameter connections this node opened to its receivers (node/node_rounds.cc). They stay
// open between transfers (one transfer at a time on each), so a transfer skips TCP's handshake
// and slow start; the driver's idle timeout closes unused ones, and at most kMax stay open (the
// least recently used idle one goes first). The node opens, closes and routes; this type keeps
// which connection serves which peer and when it was used last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "node/io.h"

namespace meshtrain::node {

class DataConns {
 public:
  static constexpr size_t kMax = 32;

  // The open connection to `name`, if any.
  std::optional<ConnId> Find(const std::string& name) const;
  // The same, marked as used by `round`.
  std::optional<ConnId> Use(const std::string& name, uint64_t round);
  // With kMax open: the least recently used one that `busy(conn)` does not claim (the first by
  // name among equals), forgotten here for the caller to close; nullopt otherwise.
  template <typename Busy>
  std::optional<ConnId> EvictIdle(Busy&& busy);
  // `conn`, just opened to `name` for `round`.
  void Add(const std::string& name, ConnId conn, uint64_t round);
  // Forgets `conn` (closing, closed or broken): no transfer reuses it.
  void Drop(ConnId conn);

 private:
  struct Conn {
    ConnId conn = 0;
    uint64_t used = 0;  // round that used it last
  };
  std::map<std::string, Conn> by_peer_;
  std::map<ConnId, std::string> by_conn_;
};

template <typename Busy>
std::optional<ConnId> DataConns::EvictIdle(Busy&& busy) {
  if (by_peer_.size() < kMax) return std::nullopt;
  auto lru = by_peer_.end();
  for (auto it = by_peer_.begin(); it != by_peer_.end(); ++it) {
    if (!busy(it->second.conn) && (lru == by_peer_.end() || it->second.used < lru->second.used)) {
      lru = it;
    }
  }
  if (lru == by_peer_.end()) return std::nullopt;
  const ConnId old = lru->second.conn;
  Drop(old);
  return old;
}

}  // namespace meshtrain::node
