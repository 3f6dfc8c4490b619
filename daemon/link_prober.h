// The daemon's side of link-capacity probes (wire/link_probe.h): sends the trains the node
// asks for (node::ProbeLink) on the membership UDP socket, measures trains that arrive (kernel
// receive timestamps), answers each with a report to its sender, and turns reports on its own
// trains into node::ProbeResult inputs and trains it measured into node::ProbeReceived.
//
// Untrusted input: every probe datagram goes through wire::DecodeProbe (size limits, the seal
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

#include "node/node.h"
#include "transport/transport.h"
#include "wire/link_probe.h"
#include "wire/net_addr.h"

namespace meshtrain::daemon {

class LinkProber {
 public:
  // A report on our train to `to` (of `sent` datagrams).
  using OnMeasured = std::function<void(node::ProbeResult, const std::string& to, int sent)>;
  // A train from `from` measured here (`received` of `count` datagrams arrived); only trains
  // that gave a rate.
  using OnReceived = std::function<void(node::ProbeReceived, int received, int count)>;
  struct Stats {
    uint64_t trains_sent = 0;
    uint64_t reports_received = 0;  // on our trains, matched
    uint64_t trains_measured = 0;   // arrived here and answered
    uint64_t trains_contended = 0;  // of those, answered "unmeasurable": other traffic came in
    uint64_t trains_queued = 0;     // of those, answered "unmeasurable": the first came late
    uint64_t rejected = 0;          // probe datagrams dropped (bad, unexpected or rate-limited)
  };

  // `bytes_in`: bytes received so far on this agent's other connections (parameter transfers),
  // read while a train arrives; `downlink_mbps`: this agent's downlink estimate (MB/s, 0 =
  // unknown). Both for the contention rule in Poll (link_prober.cc).
  LinkProber(uv_loop_t* loop, transport::UdpEndpoint* udp,
             std::shared_ptr<const wire::Keyring> keyring, std::string cluster,
             std::function<uint64_t()> bytes_in, std::function<double()> downlink_mbps,
             OnMeasured on_measured, OnReceived on_received);
  ~LinkProber();
  LinkProber(const LinkProber&) = delete;
  LinkProber& operator=(const LinkProber&) = delete;

  void Send(const node::ProbeLink& probe);
  // A datagram that starts with wire::kProbeMarker; `arrival_ns` its kernel timestamp.
  void OnDatagram(const uint8_t* data, size_t len, const wire::NetAddr& from, int64_t arrival_ns);
  const Stats& stats() const { return stats_; }
  void Close();

 private:
  void Poll();
  void Arm();
  static int64_t MonoNs();

  transport::UdpEndpoint* udp_;
  std::shared_ptr<const wire::Keyring> keyring_;
  std::string cluster_;
  std::function<uint64_t()> bytes_in_;
  std::function<double()> downlink_mbps_;
  OnMeasured on_measured_;
  OnReceived on_received_;
  transport::Timer timer_;
  bool armed_ = false;
  wire::TrainMeter meter_;
  struct Pending {
    std::string to;
    int64_t at_ns = 0;
    int sent = 0;
  };
  std::map<uint64_t, Pending> pending_;  // our trains awaiting a report, by id
  struct Source {
    uint64_t id = 0;
    int64_t started_ns = 0;
    wire::NetAddr addr;
  };
  std::map<std::string, Source> sources_;  // the latest train per source address
  // Per train in progress: bytes_in_() at its first and at its latest datagram.
  std::map<std::pair<std::string, uint64_t>, std::pair<uint64_t, uint64_t>> other_in_;
  Stats stats_;
};

}  // namespace meshtrain::daemon
