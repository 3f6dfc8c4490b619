// IPv4 "ip:port" addresses as used on the command line, in membership metadata and on the wire.
// Thread-safety: plain value type.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <string>

namespace meshtrain::gossip {

struct NetAddr {
  sockaddr_in sa{};

  // Parses "a.b.c.d:port" (port 0-65535; "localhost" accepted as 127.0.0.1). Nullopt if malformed.
  static std::optional<NetAddr> Parse(const std::string& text);
  // Builds from a libuv/BSD sockaddr (IPv4 only; nullopt for other families).
  static std::optional<NetAddr> FromSockaddr(const sockaddr* sa);

  std::string ToString() const;  // "a.b.c.d:port"
  uint16_t port() const { return ntohs(sa.sin_port); }
  bool IsAny() const { return sa.sin_addr.s_addr == htonl(INADDR_ANY); }
  bool IsLoopback() const { return (ntohl(sa.sin_addr.s_addr) >> 24) == 127; }
};

}  // namespace meshtrain::gossip
