#include "gossip/net_addr.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>

namespace meshtrain::gossip {

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
  if (host == "localhost") host = "127.0.0.1";
  NetAddr out;
  out.sa.sin_family = AF_INET;
  out.sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &out.sa.sin_addr) != 1) return std::nullopt;
  return out;
}

std::optional<NetAddr> NetAddr::FromSockaddr(const sockaddr* sa) {
  if (sa == nullptr || sa->sa_family != AF_INET) return std::nullopt;
  NetAddr out;
  std::memcpy(&out.sa, sa, sizeof(sockaddr_in));
  return out;
}

std::string NetAddr::ToString() const {
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(port());
}

}  // namespace meshtrain::gossip
