// Multi-host addressing: `--join` and `--advertise` as host names or IP literals
// (IPv6 in brackets), the advertised address when bound to a wildcard, and the name resolution
// of join retries. Start-up resolution blocks (the loop is not running yet); retries resolve
// with uv_getaddrinfo so the loop never waits on DNS.
//
// Thread-safety: the free functions are reentrant; ResolveAsync runs on the loop thread.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "wire/net_addr.h"

namespace meshtrain::daemon {

// "host:port": host is an IPv4 literal, an IPv6 literal in brackets or a DNS name.
struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;
  bool literal = false;  // an IP literal (no resolution needed)
};

// The syntax only (no resolution): InvalidArgument naming what is wrong otherwise. Port 0 is
// refused. A name is 1-253 bytes of [A-Za-z0-9.-_] that does not start with '-' or '.'.
Result<HostPort> ParseHostPort(const std::string& text);

// The address family to resolve names in for a socket bound to `bind`: an IPv4 socket only
// talks IPv4, a wildcard IPv6 one is dual-stack (either), a specific IPv6 one only IPv6.
int ResolveFamily(const wire::NetAddr& bind);

// Resolves now (getaddrinfo; blocks): the first address of `family` (AF_UNSPEC: any).
Result<wire::NetAddr> ResolveBlocking(const HostPort& hp, int family);

// The local address the kernel would send from to reach `peer` (a connected UDP socket and
// getsockname; no packet is sent). Nullopt when there is no route.
std::optional<wire::NetAddr> RouteSource(const wire::NetAddr& peer);

// The first address of an interface that is up and not loopback, of `family` (AF_UNSPEC:
// IPv4 first, then IPv6; IPv6 link-local addresses are skipped).
std::optional<wire::NetAddr> FirstInterfaceAddr(int family);

// What the agent advertises: `advertise` when given (resolved), else the bind address when it
// is specific, else the source address routing to the first join peer, else the first
// interface address, else loopback. `how` says which (for the banner). Refuses (InvalidArgument)
// a wildcard or port-0 advertise address, and a loopback one when a join peer is not loopback.
Result<wire::NetAddr> ChooseAdvertise(const wire::NetAddr& bind,
                                      const std::optional<wire::NetAddr>& advertise,
                                      const std::vector<wire::NetAddr>& join, std::string* how);

// Resolves `texts` (ParseHostPort syntax) without blocking the loop: literals at once, names
// with uv_getaddrinfo; `done` runs on the loop thread with the addresses resolved ("ip:port",
// in the order given) and one error line per text that failed.
using ResolvedFn =
    std::function<void(std::vector<std::string> addrs, std::vector<std::string> errors)>;
void ResolveAsync(uv_loop_t* loop, const std::vector<std::string>& texts, int family,
                  ResolvedFn done);

// "30s", "500ms", "2m", "1h" or a plain number of seconds: milliseconds, or nullopt.
std::optional<int64_t> ParseDurationMs(const std::string& text);

}  // namespace meshtrain::daemon
