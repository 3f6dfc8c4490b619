#include "daemon/addressing.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace meshtrain::daemon {

using wire::NetAddr;

namespace {

bool ValidHostName(const std::string& h) {
  if (h.empty() || h.size() > 253 || h.front() == '-' || h.front() == '.') return false;
  for (char c : h) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// The first address of `family` (AF_UNSPEC: the first of any) in a getaddrinfo list.
std::optional<NetAddr> Pick(const addrinfo* list, int family, uint16_t port) {
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (family != AF_UNSPEC && ai->ai_family != family) continue;
    auto a = NetAddr::FromSockaddr(ai->ai_addr);
    if (!a) continue;
    a->set_port(port);
    return a;
  }
  return std::nullopt;
}

addrinfo Hints(int family) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_DGRAM;
  return hints;
}

std::string ResolveError(const std::string& host, int rc) {
  return "cannot resolve '" + host + "': " +
         (rc == 0 ? std::string("no address of a usable family") : std::string(gai_strerror(rc)));
}

}  // namespace

Result<HostPort> ParseHostPort(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) {
    return Status::InvalidArgument("expected HOST:PORT, IP:PORT or [IPv6]:PORT");
  }
  const std::string port_text = text.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::atol(port_text.c_str()) > 65535) {
    return Status::InvalidArgument("the port must be a number 1-65535");
  }
  HostPort hp;
  hp.port = static_cast<uint16_t>(std::atol(port_text.c_str()));
  if (hp.port == 0) return Status::InvalidArgument("port 0 is not allowed");
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return Status::InvalidArgument("an IPv6 address needs brackets: [ADDR]:PORT");
    }
    hp.host = host.substr(1, host.size() - 2);
    in6_addr a6{};
    if (inet_pton(AF_INET6, hp.host.c_str(), &a6) != 1) {
      return Status::InvalidArgument("invalid IPv6 address in brackets");
    }
    hp.literal = true;
    return hp;
  }
  if (host.find(':') != std::string::npos) {
    return Status::InvalidArgument("an IPv6 address needs brackets: [ADDR]:PORT");
  }
  hp.host = host;
  in_addr a4{};
  hp.literal = inet_pton(AF_INET, host.c_str(), &a4) == 1;
  if (!hp.literal && !ValidHostName(host)) {
    return Status::InvalidArgument("not an IP address or a valid host name");
  }
  return hp;
}

int ResolveFamily(const NetAddr& bind) {
  if (bind.family() == AF_INET) return AF_INET;
  return bind.IsAny() ? AF_UNSPEC : AF_INET6;
}

Result<NetAddr> ResolveBlocking(const HostPort& hp, int family) {
  if (hp.literal) {
    const std::string text = hp.host.find(':') != std::string::npos ? "[" + hp.host + "]" : hp.host;
    auto a = NetAddr::Parse(text + ":" + std::to_string(hp.port));
    if (!a) return Status::InvalidArgument("invalid address '" + hp.host + "'");
    return *a;
  }
  const addrinfo hints = Hints(family);
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(hp.host.c_str(), nullptr, &hints, &list);
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(list, freeaddrinfo);
  if (rc != 0) return Status::Unavailable(ResolveError(hp.host, rc));
  auto a = Pick(list, family, hp.port);
  if (!a) return Status::Unavailable(ResolveError(hp.host, 0));
  return *a;
}

std::optional<NetAddr> RouteSource(const NetAddr& peer) {
  const int fd = socket(peer.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<NetAddr> out;
  if (connect(fd, &peer.sa.base, peer.len()) == 0) {
    NetAddr local;
    socklen_t len = sizeof(local.sa);
    if (getsockname(fd, &local.sa.base, &len) == 0) out = NetAddr::FromSockaddr(&local.sa.base);
  }
  close(fd);
  if (out && out->IsAny()) return std::nullopt;
  return out;
}

std::optional<NetAddr> FirstInterfaceAddr(int family) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owned(list, freeifaddrs);
  for (int fam : {AF_INET, AF_INET6}) {
    if (family != AF_UNSPEC && fam != family) continue;
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != fam) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
      auto a = NetAddr::FromSockaddr(i->ifa_addr);
      if (!a || a->IsLoopback() || a->IsAny()) continue;
      if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&a->sa.v6.sin6_addr)) continue;
      return a;
    }
  }
  return std::nullopt;
}

Result<NetAddr> ChooseAdvertise(const NetAddr& bind, const std::optional<NetAddr>& advertise,
                                const std::vector<NetAddr>& join, std::string* how) {
  NetAddr chosen = bind;
  if (advertise) {
    chosen = *advertise;
    *how = "given";
  } else if (!bind.IsAny()) {
    *how = "bind address";
  } else {
    const int family = ResolveFamily(bind);
    std::optional<NetAddr> found;
    if (!join.empty()) {
      found = RouteSource(join.front());
      if (found) *how = "route to " + join.front().ToString();
    }
    if (!found) {
      found = FirstInterfaceAddr(family);
      if (found) *how = "first interface address";
    }
    if (!found) {
      found = NetAddr::Parse(bind.family() == AF_INET6 ? "[::1]:0" : "127.0.0.1:0");
      *how = "no other interface: loopback";
    }
    chosen = *found;
    chosen.set_port(bind.port());
  }
  if (chosen.IsAny() || chosen.port() == 0) {
    return Status::InvalidArgument("invalid --advertise " + chosen.ToString() +
                                   ": expected a routable address and a port");
  }
  if (chosen.IsLoopback()) {
    for (const NetAddr& j : join) {
      if (!j.IsLoopback()) {
        return Status::InvalidArgument(
            "refusing to advertise the loopback address " + chosen.ToString() +
            " to the non-loopback peer " + j.ToString() +
            ": peers could not reach this agent; give --advertise IP:PORT or --bind IP:PORT");
      }
    }
  }
  return chosen;
}

namespace {

struct AsyncResolve {
  std::vector<std::optional<std::string>> addrs;
  std::vector<std::string> errors;
  size_t pending = 0;
  ResolvedFn done;

  void Finish() {
    if (--pending > 0) return;
    std::vector<std::string> out;
    for (auto& a : addrs) {
      if (a) out.push_back(std::move(*a));
    }
    done(std::move(out), std::move(errors));
  }
};

struct NameRequest {
  uv_getaddrinfo_t req{};
  std::shared_ptr<AsyncResolve> state;
  size_t index = 0;
  int family = AF_UNSPEC;
  HostPort hp;
};

}  // namespace

void ResolveAsync(uv_loop_t* loop, const std::vector<std::string>& texts, int family,
                  ResolvedFn done) {
  auto state = std::make_shared<AsyncResolve>();
  state->addrs.resize(texts.size());
  state->done = std::move(done);
  state->pending = 1;  // released below, after every request has been started
  for (size_t i = 0; i < texts.size(); ++i) {
    auto hp = ParseHostPort(texts[i]);
    if (!hp.ok()) {
      state->errors.push_back("invalid address '" + texts[i] + "': " + hp.status().message());
      continue;
    }
    if (hp->literal) {
      if (auto a = ResolveBlocking(*hp, family); a.ok()) state->addrs[i] = a->ToString();
      continue;
    }
    auto* r = new NameRequest;
    r->state = state;
    r->index = i;
    r->family = family;
    r->hp = *hp;
    const addrinfo hints = Hints(family);
    state->pending++;
    r->req.data = r;
    const int rc = uv_getaddrinfo(
        loop, &r->req,
        [](uv_getaddrinfo_t* req, int status, addrinfo* res) {
          std::unique_ptr<NameRequest> r(static_cast<NameRequest*>(req->data));
          std::optional<NetAddr> a;
          if (status == 0) a = Pick(res, r->family, r->hp.port);
          uv_freeaddrinfo(res);
          if (a) {
            r->state->addrs[r->index] = a->ToString();
          } else {
            r->state->errors.push_back(
                "cannot resolve '" + r->hp.host + "': " +
                (status == 0 ? "no address of a usable family" : std::string(uv_strerror(status))));
          }
          r->state->Finish();
        },
        r->hp.host.c_str(), nullptr, &hints);
    if (rc != 0) {
      state->errors.push_back("cannot resolve '" + r->hp.host + "': " + uv_strerror(rc));
      state->pending--;
      delete r;
    }
  }
  state->Finish();
}

std::optional<int64_t> ParseDurationMs(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() &&
         ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) {
    digits++;
  }
  if (digits == 0 || digits > 12) return std::nullopt;
  char* end = nullptr;
  const std::string number = text.substr(0, digits);
  const double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v)) return std::nullopt;
  const std::string unit = text.substr(digits);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60000;
  } else if (unit == "h") {
    scale = 3600000;
  } else {
    return std::nullopt;
  }
  const double ms = v * scale;
  if (ms > 1e12) return std::nullopt;
  return static_cast<int64_t>(std::llround(ms));
}

}  // namespace meshtrain::daemon
