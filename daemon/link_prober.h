// The daemon's side of link-capacity probes (gossip/link_probe.h): sends the trains the node
// asks for (node::ProbeLink) on the membership UDP socket, measures trains that arrive (kernel
// receive timestamps), answers each with a report to its sender, and turns reports on its own
// trains into node::ProbeResult inputs and trains it measured into node::ProbeReceived.
//
// Untrusted input: every probe datagram goes through gossip::DecodeProbe (size limits, the seal
// when a key is set, the FlatBuffers verifier, semantic checks); a report counts only for a
// train this agent sent to that address in the last 5 s; at most one new train per source per
// 500 ms and TrainMeter::kMaxTrains at once are measured. Anything else is dropped and counted.
// A report is one small datagram per train to the train's source: no amplification.
//
// Thread-safety: loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "gossip/link_probe.h"
#include "gossip/net_addr.h"
#include "gossip/transport.h"
#include "node/node.h"

namespace meshtrain::daemon {

class LinkProber {
 public:
  using OnMeasured = std::function<void(node::ProbeResult)>;
  using OnReceived = std::function<void(node::ProbeReceived)>;
  struct Stats {
    uint64_t trains_sent = 0;
    uint64_t reports_received = 0;  // on our trains, matched
    uint64_t trains_measured = 0;   // arrived here and answered
    uint64_t rejected = 0;          // probe datagrams dropped (bad, unexpected or rate-limited)
  };

  LinkProber(uv_loop_t* loop, gossip::UdpEndpoint* udp,
             std::shared_ptr<const gossip::Keyring> keyring, std::string cluster,
             OnMeasured on_measured, OnReceived on_received);
  ~LinkProber();
  LinkProber(const LinkProber&) = delete;
  LinkProber& operator=(const LinkProber&) = delete;

  void Send(const node::ProbeLink& probe);
  // A datagram that starts with gossip::kProbeMarker; `arrival_ns` its kernel timestamp.
  void OnDatagram(const uint8_t* data, size_t len, const gossip::NetAddr& from, int64_t arrival_ns);
  const Stats& stats() const { return stats_; }
  void Close();

 private:
  void Poll();
  void Arm();
  static int64_t MonoNs();

  gossip::UdpEndpoint* udp_;
  std::shared_ptr<const gossip::Keyring> keyring_;
  std::string cluster_;
  OnMeasured on_measured_;
  OnReceived on_received_;
  gossip::Timer timer_;
  bool armed_ = false;
  gossip::TrainMeter meter_;
  struct Pending {
    std::string to;
    int64_t at_ns = 0;
  };
  std::map<uint64_t, Pending> pending_;  // our trains awaiting a report, by id
  struct Source {
    uint64_t id = 0;
    int64_t started_ns = 0;
    gossip::NetAddr addr;
  };
  std::map<std::string, Source> sources_;  // the latest train per source address
  Stats stats_;
};

}  // namespace meshtrain::daemon
