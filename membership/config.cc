#include "membership/swim.h"

namespace meshtrain::membership {

// Values are memberlist's DefaultLANConfig / DefaultWANConfig / DefaultLocalConfig
// (docs/contract.md "Membership").

Config Config::Lan() {
  Config c;
  c.probe_interval = 1000;
  c.probe_timeout = 500;
  c.indirect_checks = 3;
  c.suspicion_mult = 4;
  c.suspicion_max_timeout_mult = 6;
  c.retransmit_mult = 4;
  c.push_pull_interval = 30000;
  c.gossip_interval = 200;
  c.gossip_nodes = 3;
  c.gossip_to_dead_time = 30000;
  return c;
}

Config Config::Wan() {
  Config c = Lan();
  c.probe_interval = 5000;
  c.probe_timeout = 3000;
  c.indirect_checks = 3;
  c.suspicion_mult = 6;
  c.retransmit_mult = 4;
  c.push_pull_interval = 60000;
  c.gossip_interval = 500;
  c.gossip_nodes = 4;
  c.gossip_to_dead_time = 60000;
  return c;
}

Config Config::Local() {
  Config c = Lan();
  c.probe_interval = 1000;
  c.probe_timeout = 200;
  c.indirect_checks = 1;
  c.suspicion_mult = 3;
  c.retransmit_mult = 2;
  c.push_pull_interval = 15000;
  c.gossip_interval = 100;
  c.gossip_to_dead_time = 15000;
  return c;
}

Config Config::ForProfile(TimingProfile profile) {
  switch (profile) {
    case TimingProfile::kWan:
      return Wan();
    case TimingProfile::kLocal:
      return Local();
    case TimingProfile::kLan:
      break;
  }
  return Lan();
}

std::optional<Config> Config::Profile(const std::string& name) {
  for (const auto& [n, profile] : kTimingProfileNames) {
    if (n == name) return ForProfile(profile);
  }
  return std::nullopt;
}

}  // namespace meshtrain::membership
