// The NAT routers of the membership tests' in-test wires (swim_nat_test.cc,
// swim_nat_timing_test.cc), as the netbed builds them (tests/netbed/bed.py): host i's inner
// address, its router's public one, the source a datagram leaves with (cone: one public port per
// host, as Linux masquerade keeps the port; symmetric: one per destination), and whether a
// datagram to a public address from a source reaches the host (inbound admitted only for flows
// the host opened).
#pragma once

#include <map>
#include <set>
#include <string>

namespace meshtrain::membership::testing {

enum class Nat { kNone, kCone, kSymmetric };

struct NatHost {
  std::string name;
  std::string inner;   // the address the node is configured with
  std::string router;  // its router's public IP (NAT only)
  Nat nat = Nat::kNone;
  std::set<std::string> open;                // remote addresses it sent to (NAT only)
  std::map<std::string, std::string> ports;  // symmetric: destination -> public address

  // Host number i (from 1): 10.0.0.i public, 192.168.i.2 behind router 203.0.113.i.
  void Place(Nat kind, size_t i) {
    nat = kind;
    inner = (nat == Nat::kNone ? "10.0.0." : "192.168." + std::to_string(i) + ".") +
            std::to_string(nat == Nat::kNone ? i : 2) + ":7950";
    router = "203.0.113." + std::to_string(i);
  }
  // The address this host is seen at by `to` (its router's mapping for a NATed host).
  std::string SourceFor(const std::string& to) {
    if (nat == Nat::kNone) return inner;
    if (nat == Nat::kCone) return router + ":7950";
    auto it = ports.find(to);
    if (it == ports.end()) {
      it = ports.emplace(to, router + ":" + std::to_string(40000 + ports.size())).first;
    }
    return it->second;
  }
  // Whether a datagram to `addr` from `src` reaches this host (inner addresses of NATed hosts
  // are not routed).
  bool Admits(const std::string& addr, const std::string& src) const {
    if (nat == Nat::kNone) return inner == addr;
    if (nat == Nat::kCone) return addr == router + ":7950" && open.count(src) > 0;
    for (const auto& [dst, pub] : ports) {
      if (pub == addr && dst == src) return true;
    }
    return false;
  }
};

}  // namespace meshtrain::membership::testing
