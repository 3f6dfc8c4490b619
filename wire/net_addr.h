// "ip:port" addresses as used on the command line, in membership metadata and on the wire:
// IPv4 "a.b.c.d:port" or IPv6 in brackets "[x:y::z]:port". Host names are resolved
// by the daemon (daemon/addressing.h), never here. Thread-safety: plain value type.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

namespace meshtrain::wire {

struct NetAddr {
  // The largest member first: `sa{}` zero-fills what it initializes, and a union's value
  // initialization covers its first member only (an IPv6 address built field by field, as
  // MappedV6 does, must find the rest of its 16 bytes zero).
  union {
    sockaddr_in6 v6;
    sockaddr base;
    sockaddr_in v4;
  } sa{};

  // Parses "a.b.c.d:port" or "[v6]:port" (port 0-65535; "localhost" accepted as 127.0.0.1).
  // Nullopt if malformed.
  static std::optional<NetAddr> Parse(const std::string& text);
  // Builds from a libuv/BSD sockaddr (IPv4 or IPv6; an IPv4-mapped IPv6 address, as a
  // dual-stack socket reports IPv4 senders, becomes the IPv4 address). Nullopt otherwise.
  static std::optional<NetAddr> FromSockaddr(const sockaddr* sa);

  std::string ToString() const;  // "a.b.c.d:port" or "[v6]:port"
  std::string Host() const;      // the address without the port and brackets
  int family() const { return sa.base.sa_family; }
  socklen_t len() const {
    return family() == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  }
  uint16_t port() const { return ntohs(family() == AF_INET6 ? sa.v6.sin6_port : sa.v4.sin_port); }
  void set_port(uint16_t port);
  bool IsAny() const;
  bool IsLoopback() const;
  // This IPv4 address as an IPv4-mapped IPv6 one (for sending from a dual-stack socket).
  NetAddr MappedV6() const;
};

}  // namespace meshtrain::wire
