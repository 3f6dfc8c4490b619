// A simulated network between named endpoints (any strings: "10.0.0.3:7950", "n17"), driven by
// a VirtualClock. Datagrams get per-link latency (base + seeded uniform jitter) and may be lost
// (global or per-link rate); links can be blocked one way; partitions split endpoints into
// groups that cannot reach each other; endpoints can be taken down. Reliable streams (TCP-like)
// are never lost but fail when the path is blocked, partitioned or an endpoint is down.
// Everything random comes from one seeded generator, so runs are reproducible. Generic: the
// payload is whatever the caller's callback captures.
//
// Thread-safety: none; shares the single thread that drives the clock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sim/virtual_clock.h"

namespace meshtrain::sim {

struct LinkLatency {
  TimeMs base = 1;
  TimeMs jitter = 0;  // uniform extra delay in [0, jitter]
};

struct NetworkStats {
  uint64_t datagrams_sent = 0;
  uint64_t datagrams_delivered = 0;
  uint64_t datagrams_dropped = 0;  // lost, blocked, partitioned or to/from a down endpoint
  uint64_t bytes_sent = 0;
  uint64_t streams_opened = 0;
  uint64_t streams_failed = 0;
};

class SimNetwork {
 public:
  using Deliver = std::function<void()>;

  SimNetwork(VirtualClock* clock, uint64_t seed);
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // ---- configuration ----
  void set_default_latency(LinkLatency l) { default_latency_ = l; }
  void set_link_latency(const std::string& from, const std::string& to, LinkLatency l);
  void set_loss(double rate) { loss_ = rate; }  // every link, unless overridden per link
  void set_link_loss(const std::string& from, const std::string& to, double rate);
  void clear_link_loss() { link_loss_.clear(); }
  void block(const std::string& from, const std::string& to);  // one way
  void unblock(const std::string& from, const std::string& to);
  void unblock_all() { blocked_.clear(); }
  // Splits the listed endpoints into groups; traffic between different groups is dropped.
  // Endpoints not listed can reach everyone.
  void partition(const std::vector<std::vector<std::string>>& groups);
  void heal() { group_.clear(); }
  // A down endpoint neither sends nor receives (a crashed or stopped host).
  void set_down(const std::string& endpoint, bool down);
  bool is_down(const std::string& endpoint) const { return down_.count(endpoint) > 0; }
  // Time a stream connect to an unreachable endpoint takes to fail.
  void set_stream_failure_delay(TimeMs d) { stream_failure_delay_ = d; }

  // ---- traffic ----
  // Whether `from` can currently reach `to` (ignoring random loss).
  bool reachable(const std::string& from, const std::string& to) const;
  // Samples one-way latency for the link.
  TimeMs sample_latency(const std::string& from, const std::string& to);

  // Sends a datagram: unless lost or unreachable now, `deliver` runs after the link latency, if
  // `to` is still up and reachable then. Returns whether it was put on the wire.
  bool send_datagram(const std::string& from, const std::string& to, size_t bytes, Deliver deliver);
  // Reliable one-way stream transfer: `deliver` runs after the link latency if the path is
  // usable now and at arrival; otherwise `fail` runs (after the failure delay, or at arrival).
  void send_stream(const std::string& from, const std::string& to, size_t bytes, Deliver deliver,
                   Deliver fail);

  const NetworkStats& stats() const { return stats_; }
  VirtualClock& clock() { return *clock_; }

 private:
  using Link = std::pair<std::string, std::string>;
  double loss_for(const std::string& from, const std::string& to) const;

  VirtualClock* clock_;
  std::mt19937_64 rng_;
  LinkLatency default_latency_;
  std::map<Link, LinkLatency> link_latency_;
  double loss_ = 0;
  std::map<Link, double> link_loss_;
  std::set<Link> blocked_;
  std::unordered_map<std::string, int> group_;
  std::unordered_set<std::string> down_;
  TimeMs stream_failure_delay_ = 1000;
  NetworkStats stats_;
};

}  // namespace meshtrain::sim
