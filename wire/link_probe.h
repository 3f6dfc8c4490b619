// Link-capacity probes (docs/contract.md "Receiver selection"): what a train datagram and a report
// look like on the wire, and the receiver's arithmetic, without any I/O.
//
// Why trains: a parameter transfer of a few hundred KB over a path with a 20 ms RTT is limited by
// TCP's window growth, not by the link, so the rate it achieves says little about a fast link. A
// train of datagrams sent back to back leaves the sender's bottleneck spaced by that link's
// serialization time; the receiver, timestamping arrivals in the kernel, measures
// bytes / dispersion = the path's capacity (min of the sender's uplink and its own downlink).
// The sender keeps the largest recent figure over several peers as its uplink capacity.
//
// Thread-safety: none; one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::wire {

class Keyring;

constexpr uint8_t kProbeMarker = 0x50;        // 'P'; envelopes start with 0x4D or 0xA1
constexpr size_t kProbeDatagramBytes = 1200;  // a train datagram's UDP payload
constexpr size_t kProbeMaxHeaderBytes = 256;  // larger declared headers are dropped
constexpr uint16_t kProbeMaxCount = 1024;     // datagrams per train
constexpr size_t kProbeIpUdpOverheadV4 = 42;  // Ethernet + IPv4 + UDP headers: on-wire size
constexpr size_t kProbeIpUdpOverheadV6 = 62;

struct ProbeHeader {
  enum class Kind : uint8_t { kTrain = 1, kReport = 2 };
  Kind kind = Kind::kTrain;
  std::string cluster;
  uint64_t id = 0;
  uint16_t seq = 0;
  uint16_t count = 0;
  uint16_t received = 0;  // report
  uint64_t rate_bps = 0;  // report: bytes/s on the wire, 0 = unmeasurable
  int64_t sent_ns = 0;    // train: the sender's wall clock as it left
};

// True if `data` starts like a probe datagram (the caller then hands it to DecodeProbe instead
// of the envelope codec).
inline bool IsProbeDatagram(const uint8_t* data, size_t len) {
  return len > 0 && data != nullptr && data[0] == kProbeMarker;
}

// Encodes a probe datagram; the header is sealed with the primary key when `keyring` is set
// (additional data binds it to the cluster label). Train datagrams are zero-padded to `pad_to`.
std::vector<uint8_t> EncodeProbe(const ProbeHeader& h, const Keyring* keyring, size_t pad_to);

// Decodes an untrusted datagram: size limits, the seal (when `keyring` is set: unsealed ones are
// refused), the FlatBuffers verifier, then semantic checks (kind, count 2..kProbeMaxCount,
// seq < count, received <= count, cluster == `cluster`). Nullopt for anything else.
std::optional<ProbeHeader> DecodeProbe(const uint8_t* data, size_t len, const Keyring* keyring,
                                       const std::string& cluster);

// The receiver side: groups train datagrams by (source, id) and turns each finished train into a
// rate. A train is finished when its last datagram (seq == count - 1) arrives or `quiet_ns`
// after its latest arrival. The rate is the train's bytes after the first datagram over the time
// from the first to the last arrival. Whatever else happens on the path only lowers it: the
// sender's thread descheduled mid-train, other traffic sharing the link, losses. (Leaving out
// long gaps as "pauses" was tried: when a forwarder releases a late batch at once, the gap
// before it is dropped and the squeezed batch kept, and the rate came out 30 % high.) So the
// node keeps the largest recent rate, never an average. The one thing that raises it is a
// first datagram held up while the rest were not (a backlog in front of the receiver's link that
// drains during the train, or a forwarder running late when the train began): the datagrams
// behind it catch up and the span comes out short. So the span starts where the first datagram
// would have arrived on this path's quickest one-way delay (see Add), not where it did (a
// 40 Mbit/s sender was once published as 53 on the bed). Path jitter on the first datagram only
// lowers a figure, like the rest.
class TrainMeter {
 public:
  struct Result {
    std::string from;
    uint64_t id = 0;
    uint16_t count = 0;
    uint16_t received = 0;
    double rate_bps = 0;  // 0 when fewer than kMinPackets arrived, no time elapsed, or queued
    bool queued = false;  // the first datagram came late: rate_bps is 0 (see Add)
  };
  static constexpr size_t kMaxTrains = 8;   // in progress at once; more are refused
  static constexpr size_t kMinPackets = 8;  // fewer measure nothing

  explicit TrainMeter(int64_t quiet_ns = 200'000'000) : quiet_ns_(quiet_ns) {}

  // One datagram of a train: `wire_bytes` its size on the link, `arrival_ns` its arrival time
  // (kernel timestamp, wall clock), `sent_ns` the sender's wall clock as the train left, `now_ns`
  // the meter's clock (for the quiet timeout). False if refused (too many trains in progress, a
  // duplicate seq, a count that changed).
  //
  // Queued trains: a backlog in front of a link squeezes a train that queues behind it (its
  // datagrams leave back to back at that link's rate, faster than the sender's link spaced
  // them) and delays the train's first datagram by the backlog. So per source the meter keeps
  // the one-way delay of the first datagram of its last kDelayHistory trains (arrival − sent_ns:
  // the two clocks' offset is the same in every one, so no agreement is needed); a train whose
  // delay exceeds the smallest of them by more than max(2 ms, half its own span) measures
  // nothing; one held up by less is measured over its span plus the hold-up. A clock step on
  // either host makes the baseline wrong until it has rolled over (a drift between the two
  // clocks over those trains can only lower figures, by at most the drift).
  bool Add(const std::string& from, uint64_t id, uint16_t seq, uint16_t count, size_t wire_bytes,
           int64_t arrival_ns, int64_t now_ns, int64_t sent_ns = 0);
  static constexpr size_t kDelayHistory = 8;
  static constexpr size_t kMaxSources = 256;
  // Finished trains (their last datagram arrived, or quiet for quiet_ns at `now_ns`).
  std::vector<Result> Take(int64_t now_ns);
  bool idle() const { return trains_.empty() && done_.empty(); }

  // The rate of one train from its arrivals (ns) and on-wire sizes, by the rule above;
  // `held_ns`: how much later than it could have the first datagram arrived (lengthens the span).
  static double Rate(std::vector<std::pair<int64_t, size_t>> arrivals, int64_t held_ns = 0);

 private:
  struct Train {
    uint16_t count = 0;
    int64_t sent_ns = 0;
    int64_t last_seen_ns = 0;
    std::vector<bool> seen;
    std::vector<std::pair<int64_t, size_t>> arrivals;
  };
  Result Finish(const std::pair<std::string, uint64_t>& key, Train& t);
  std::map<std::string, std::vector<int64_t>> delays_;  // per source: first-datagram delays

  int64_t quiet_ns_;
  std::map<std::pair<std::string, uint64_t>, Train> trains_;
  std::vector<Result> done_;
};

}  // namespace meshtrain::wire
