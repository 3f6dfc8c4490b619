// Link-capacity probes (docs/contract.md "Receiver selection", wire/link_probe.h): a train of
// datagrams to one live peer now and then measures the path's capacity, which a transfer's rate
// says little about. One concept, one type: it owns its schedule, the outstanding probe and the
// recent rates; the node (node/node.h) hands it the probe-able peers, executes the ProbeLink it
// returns, and reads the estimates it publishes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "node/io.h"
#include "sync/bandwidth_estimate.h"
#include "sync/barrier.h"

namespace meshtrain::node {

class LinkProbes {
 public:
  // A peer a train may go to: its name and where the train goes (its address, or its direct
  // return path when it is relayed), with the downlink it publishes.
  struct Peer {
    const std::string* name = nullptr;
    const std::string* to = nullptr;
    float downlink_mbps = 0;
  };

  // `interval_ms`: NodeConfig::capacity_probe_interval_ms (0 = off: never due).
  LinkProbes(TimeMs interval_ms, TimeMs now)
      : next_at_(interval_ms > 0 ? now + 1000 : sync::kNoDeadline), interval_ms_(interval_ms) {}

  // When the next probe is due (sync::kNoDeadline: off).
  TimeMs next_at() const { return next_at_; }
  // At next_at(): whether a probe goes out now. Not while one is outstanding (until it times
  // out), nor while we leave; while our own round runs, up to a second later.
  bool Due(TimeMs now, bool leaving, bool round_active);
  // After Due: the probe to `peers` (any order), or none when there is nobody. `sent` counts the
  // probes sent before this one (NodeStats::probes_sent); `uplink_mbps` is our estimate.
  std::optional<ProbeLink> Send(std::vector<Peer> peers, double uplink_mbps, uint64_t sent,
                                sync::Rng& rng, TimeMs now);
  // A report on our probe; true when it gave a rate (NodeStats::probes_measured).
  bool OnResult(const ProbeResult& r, const sync::BandwidthEstimate& up, TimeMs now);
  void OnReceived(const ProbeReceived& r, TimeMs now);
  // Drops rates older than kKeepIntervals intervals (at least a minute).
  void Age(TimeMs now);
  // The estimates: the best confirmed recent probe when there is one, else the transfer-based
  // capacity `e`; bounded by `cap` when > 0.
  double Uplink(const sync::BandwidthEstimate& e, double cap) const { return With(e, up_, cap); }
  double Downlink(const sync::BandwidthEstimate& e, double cap) const {
    return With(e, down_, cap);
  }

 private:
  struct Rate {
    double mbps = 0;
    TimeMs at = 0;
  };
  using Rates = std::map<std::string, std::vector<Rate>>;  // recent, per peer
  static constexpr TimeMs kTimeoutMs = 3000;  // no report by then: the probe is given up
  static constexpr int kKeepIntervals = 4;    // probed rates are kept this many intervals
  static constexpr int kFastProbes = 10;      // the first ones go 2 s apart
  static constexpr size_t kRatesPerPeer = 8;
  static double With(const sync::BandwidthEstimate& e, const Rates& probes, double cap);
  // The largest recent figure of our trains and the peer it came from (null when none).
  std::pair<double, const std::string*> LargestUp() const;
  size_t Pick(const std::vector<Peer>& peers, uint64_t sent) const;

  TimeMs next_at_;  // first: read with the node's other deadlines on every input
  TimeMs interval_ms_;
  uint64_t id_ = 0;  // the outstanding probe, 0 = none
  std::string peer_;
  TimeMs sent_at_ = 0;
  std::string last_peer_;
  std::string confirm_;           // probe this peer next (its figure awaits confirmation)
  TimeMs defer_from_ = -1;        // since when a due probe waits for our round to end
  std::set<std::string> probed_;  // peers probed at least once
  Rates up_;                      // peer name -> rates our trains to it arrived at
  Rates down_;                    // sender address -> rates its trains arrived here at
};

}  // namespace meshtrain::node
