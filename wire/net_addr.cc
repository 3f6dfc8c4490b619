#include "wire/net_addr.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>

namespace meshtrain::wire {

std::optional<NetAddr> NetAddr::Parse(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) return std::nullopt;
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (port_text.size() > 5) return std::nullopt;
  for (char c : port_text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const long port = std::strtol(port_text.c_str(), nullptr, 10);
  if (port < 0 || port > 65535) return std::nullopt;
  NetAddr out;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    out.sa.v6.sin6_family = AF_INET6;
    if (inet_pton(AF_INET6, host.c_str(), &out.sa.v6.sin6_addr) != 1) return std::nullopt;
  } else {
    if (host == "localhost") host = "127.0.0.1";
    out.sa.v4.sin_family = AF_INET;
    if (inet_pton(AF_INET, host.c_str(), &out.sa.v4.sin_addr) != 1) return std::nullopt;
  }
  out.set_port(static_cast<uint16_t>(port));
  return out;
}

std::optional<NetAddr> NetAddr::FromSockaddr(const sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  NetAddr out;
  if (sa->sa_family == AF_INET) {
    std::memcpy(&out.sa.v4, sa, sizeof(sockaddr_in));
    return out;
  }
  if (sa->sa_family != AF_INET6) return std::nullopt;
  std::memcpy(&out.sa.v6, sa, sizeof(sockaddr_in6));
  if (IN6_IS_ADDR_V4MAPPED(&out.sa.v6.sin6_addr)) {
    NetAddr v4;
    v4.sa.v4.sin_family = AF_INET;
    v4.sa.v4.sin_port = out.sa.v6.sin6_port;
    std::memcpy(&v4.sa.v4.sin_addr, &out.sa.v6.sin6_addr.s6_addr[12], 4);
    return v4;
  }
  out.sa.v6.sin6_flowinfo = 0;
  return out;
}

void NetAddr::set_port(uint16_t port) {
  if (family() == AF_INET6) {
    sa.v6.sin6_port = htons(port);
  } else {
    sa.v4.sin_port = htons(port);
  }
}

std::string NetAddr::Host() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &sa.v6.sin6_addr, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET, &sa.v4.sin_addr, buf, sizeof(buf));
  }
  return buf;
}

std::string NetAddr::ToString() const {
  const std::string port_text = ":" + std::to_string(port());
  return family() == AF_INET6 ? "[" + Host() + "]" + port_text : Host() + port_text;
}

bool NetAddr::IsAny() const {
  if (family() == AF_INET6) return IN6_IS_ADDR_UNSPECIFIED(&sa.v6.sin6_addr);
  return sa.v4.sin_addr.s_addr == htonl(INADDR_ANY);
}

bool NetAddr::IsLoopback() const {
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&sa.v6.sin6_addr);
  return (ntohl(sa.v4.sin_addr.s_addr) >> 24) == 127;
}

NetAddr NetAddr::MappedV6() const {
  if (family() == AF_INET6) return *this;
  NetAddr out;
  out.sa.v6.sin6_family = AF_INET6;
  out.sa.v6.sin6_port = sa.v4.sin_port;
  out.sa.v6.sin6_addr.s6_addr[10] = 0xff;
  out.sa.v6.sin6_addr.s6_addr[11] = 0xff;
  std::memcpy(&out.sa.v6.sin6_addr.s6_addr[12], &sa.v4.sin_addr, 4);
  return out;
}

}  // namespace meshtrain::wire
