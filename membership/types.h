// Plain value types shared by the SWIM/Lifeguard core, the wire codec (wire/), the agent
// (daemon/) and the simulator (sim/). Nothing here depends on FlatBuffers, sockets or clocks:
// the codec converts wire bytes to these structs at the edge, and the core only sees these.
//
// Times are milliseconds on a monotonic clock chosen by the caller (real or virtual).
// Thread-safety: plain values, no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace meshtrain::membership {

using TimeMs = int64_t;

// Member status as users see it. memberlist calls kFailed "dead"; kLeft is a dead state that the
// member announced itself (graceful leave), so it is never reported as a failure.
enum class Status : uint8_t { kAlive = 0, kSuspect = 1, kFailed = 2, kLeft = 3 };

const char* StatusName(Status s);  // "alive", "suspect", "failed", "left"

// Whether a member can be reached from outside, as it found out itself: kPublic once
// something reached it unsolicited (a push-pull connection, or a ping from an address it never
// sent to); kNat when its peers agree it is seen at another address than its own and nothing
// reached it unsolicited (it is behind NAT: peers reach it only over paths its own traffic
// opened); kUnknown until either.
enum class Reach : uint8_t { kUnknown = 0, kPublic = 1, kNat = 2 };
const char* ReachName(Reach r);  // "unknown", "public", "nat"

// Application metadata a member publishes about itself. Changing it requires a new incarnation
// (it travels in alive messages), so it holds slowly-changing fields; the fast-changing training
// step travels separately as progress (see Progress below).
struct Meta {
  std::string data_addr;  // "ip:port" for parameter transfers (TCP); empty = same as addr
  // Still taking SGD steps (docs/contract.md "Barriers": finished nodes leave barriers).
  bool training = false;
  float uplink_mbps = 0;    // measured available uplink, MB/s (0 = unknown)
  float downlink_mbps = 0;  // measured available downlink, MB/s (0 = unknown)
  // Operator tags (--tag KEY=VALUE): sorted by key, keys unique; limits in
  // wire::ValidTags.
  std::vector<std::pair<std::string, std::string>> tags;
  Reach reach = Reach::kUnknown;  // set by the membership core itself (Swim), not the caller
  // Relays, set by the core too: `relay` names the member this one is reached
  // through (empty: reached at its address); `serves_relay`: it forwards for members behind
  // symmetric NAT (--serve-relay on).
  std::string relay{};
  bool serves_relay = false;
  // Not training, and no trainer came back within --trainer-grace: the end-of-training
  // consensus goes on without this member (docs/design.md "One model at the end").
  bool absent = false;

  bool operator==(const Meta& o) const {
    return data_addr == o.data_addr && training == o.training && uplink_mbps == o.uplink_mbps &&
           downlink_mbps == o.downlink_mbps && tags == o.tags && reach == o.reach &&
           relay == o.relay && serves_relay == o.serves_relay && absent == o.absent;
  }
  bool operator!=(const Meta& o) const { return !(*this == o); }
};

// ---- Piggybacked state updates (SWIM §4.3 dissemination) ------------------------------------

struct AliveMsg {
  std::string name;
  std::string addr;  // "ip:port" the member is reached at for membership (UDP) and push-pull (TCP)
  uint32_t incarnation = 0;
  Meta meta;
};

struct SuspectMsg {
  std::string name;
  uint32_t incarnation = 0;
  std::string from;  // who suspects (Lifeguard counts independent confirmations)
};

// A dead message from the member itself (from == name) is a graceful leave: status kLeft.
struct DeadMsg {
  std::string name;
  uint32_t incarnation = 0;
  std::string from;
};

// A member's last test evaluation, as it published it (the dashboard's curves of
// peers). accuracy < 0: none yet. Newer eval step wins.
struct Eval {
  uint64_t step = 0;
  float accuracy = -1;  // in [0, 1]
  float loss = -1;      // >= 0
  bool valid() const { return accuracy >= 0; }
  bool operator==(const Eval& o) const {
    return step == o.step && accuracy == o.accuracy && loss == o.loss;
  }
  bool operator!=(const Eval& o) const { return !(*this == o); }
};

// Training progress of a member, as last learned. Spread by piggybacking; newer step wins, and
// independently a newer evaluation.
struct ProgressMsg {
  std::string name;
  uint64_t step = 0;
  Eval eval;
  float step_ms = 0;  // the member's compute time per step (EWMA, ms; 0 = unknown): --batch auto
};

using Update = std::variant<AliveMsg, SuspectMsg, DeadMsg, ProgressMsg>;

// ---- Failure-detector messages ----------------------------------------------------------------

struct PingMsg {
  uint32_t seq = 0;
  std::string target;  // name the sender expects at this address (guards against stale addrs)
};

// Ask the receiver to ping `target` at `target_addr` on our behalf (SWIM §3.1 ping-req).
struct IndirectPingMsg {
  uint32_t seq = 0;
  std::string target;
  std::string target_addr;
  bool want_nack = true;  // Lifeguard: answer with a nack if the target does not ack in time
};

struct AckMsg {
  uint32_t seq = 0;
  // The transport source address the acknowledged ping came from, as the acker saw it ("ip:port";
  // empty = not told): the pinger's address outside its NAT, if any.
  std::string observed;
};

struct NackMsg {
  uint32_t seq = 0;
};

// Relays: a member behind symmetric NAT asks a reachable member to relay for it, and
// repeats the request as a keepalive that holds its NAT's mapping towards the relay open. The
// relay answers with an AckMsg (seq echoed, `observed`: where it sees the requester, the
// mapping it forwards over) or a NackMsg when it refuses (not serving, itself relayed).
struct RelayRegisterMsg {
  uint32_t seq = 0;
};

using Primary =
    std::variant<std::monostate, PingMsg, IndirectPingMsg, AckMsg, NackMsg, RelayRegisterMsg>;

// One UDP datagram worth of membership traffic: at most one primary message plus piggybacked
// updates (a "compound" packet in memberlist terms). Every packet carries the sender's own
// progress, so peers learn steps from all membership traffic.
struct Packet {
  std::string from;       // sender name (also in the wire envelope)
  std::string from_addr;  // sender's advertised addr, so replies go to it and not a NAT'd source
  uint64_t from_step = 0;
  Primary primary;
  std::vector<Update> updates;
};

// ---- Push-pull anti-entropy (TCP) ------------------------------------------------------------

struct MemberState {
  std::string name;
  std::string addr;
  uint32_t incarnation = 0;
  Status status = Status::kAlive;
  Meta meta;
  uint64_t step = 0;
};

struct PushPull {
  bool join = false;  // the sender is joining: its first contact with this cluster
  std::string from;
  std::vector<MemberState> members;
  // A view shuffle (bounded views, Config::shuffle_interval): `members` is a few random entries
  // of the sender's view, not its whole state, and the reply is a few of the receiver's; each
  // side takes the entries it lacks in place of those it sent (Cyclon). A receiver that does
  // not know shuffles treats it as an ordinary push-pull.
  bool shuffle = false;
};

// Conservative upper bound on the encoded size of one update / packet header, in bytes. The
// codec guarantees encoded sizes never exceed these, so the core can fill a datagram budget
// without encoding.
size_t EstimateSize(const Update& u);
size_t EstimatePacketOverhead(const Packet& p);

}  // namespace meshtrain::membership
