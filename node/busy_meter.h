// A link's throughput as this node's own transfers measure it (docs/contract.md "Receiver
// selection"): bytes moved over the time at least one transfer was active, sampled into a
// decaying estimate. The node keeps one for its uplink (rounds) and one for its downlink
// (incoming transfers).
#pragma once

#include <cstdint>

#include "node/io.h"
#include "sync/bandwidth_estimate.h"

namespace meshtrain::node {

struct BusyMeter {
  int active = 0;  // transfers under way
  TimeMs since = 0;
  TimeMs busy_ms = 0;
  uint64_t bytes = 0;
  sync::BandwidthEstimate estimate;
  // A transfer starts.
  void Begin(TimeMs now) {
    if (active++ == 0) since = now;
  }
  // A transfer ends, having moved `moved` bytes.
  void End(TimeMs now, uint64_t moved) {
    bytes += moved;
    if (active > 0 && --active == 0) busy_ms += now - since;
  }
  // The busy time and bytes since the last sample go into the estimate.
  void Sample() {
    if (busy_ms > 0 && bytes > 0) estimate.Add(static_cast<double>(bytes), busy_ms / 1000.0);
    busy_ms = 0;
    bytes = 0;
  }
};

}  // namespace meshtrain::node
