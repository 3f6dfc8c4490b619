// SWIM membership with the Lifeguard extensions (as shipped in HashiCorp memberlist), written as
// a sans-I/O state machine: the caller feeds it inbound messages and the current time, and takes
// from it the datagrams and push-pull streams to send, the events to report, and the next time
// it must be ticked. It never reads a clock, never touches a socket, and draws randomness only
// from the seed it was given, so the same inputs always give the same outputs.
//
// Thread-safety: none. One thread owns a Swim at a time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "membership/types.h"

namespace meshtrain::membership {

// Timing and sizing knobs. Profiles carry memberlist's values (docs/contract.md "Membership").
// The membership timing profiles (`--profile`), memberlist's values (docs/contract.md
// "Membership"), named by one table that the CLI, the config file and the banner share.
enum class TimingProfile : uint8_t { kLan, kWan, kLocal };
inline constexpr std::array<std::pair<std::string_view, TimingProfile>, 3> kTimingProfileNames = {{
    {"lan", TimingProfile::kLan},
    {"wan", TimingProfile::kWan},
    {"local", TimingProfile::kLocal},
}};

struct Config {
  std::string name;  // unique node name
  std::string addr;  // advertised "ip:port"

  TimeMs probe_interval = 1000;
  TimeMs probe_timeout = 500;
  int indirect_checks = 3;             // k
  int suspicion_mult = 4;              // SuspicionMult
  int suspicion_max_timeout_mult = 6;  // SuspicionMaxTimeoutMult
  int retransmit_mult = 4;             // RetransmitMult
  TimeMs push_pull_interval = 30000;   // 0 disables periodic push-pull
  TimeMs gossip_interval = 200;        // extra gossip rounds between probes
  int gossip_nodes = 3;                // peers per gossip round
  TimeMs gossip_to_dead_time = 30000;  // keep gossiping to recently-dead members this long
  TimeMs reap_timeout = 60000;         // forget failed/left members after this long
  int awareness_max_multiplier = 8;    // Lifeguard local health awareness cap
  size_t max_packet_bytes = 1400;      // UDP payload budget (docs/contract.md "Wire format")
  size_t packet_overhead_bytes = 120;  // reserved for envelope, framing and AEAD

  // NAT traversal. With `nat` on: acks tell the pinger the address its ping came from
  // (AckMsg::observed); replies (acks, nacks, corrections) go to the transport source of what
  // they answer, the one path known to work through a NAT, rather than the advertised address;
  // and the node finds and publishes its reachability (Meta::reach). With `adopt_reflexive`
  // also on, a node that kReflexiveQuorum peers see at one and the same other address than
  // its own moves there (a new incarnation): its address outside the NAT.
  bool nat = false;
  bool adopt_reflexive = false;
  // Unconfirmed addresses (with `nat`). A member that joins behind a NAT first announces its
  // inner address, which no peer reaches, and moves (or takes a relay) once acks say where
  // its peers see it. A failed probe of a member whose address is unconfirmed (it does not say
  // it is public, no ack came from that address and no datagram of the member's own from it
  // yet) within this many probe intervals of learning that address, or of a member that moved
  // while the probe was out, makes it no suspect and does not count against our own health:
  // the probe tested an address nobody has seen it answer at. For as long after its join, a
  // node that does not have two reports of where peers see it pings members not behind NAT
  // again every probe interval, so it settles its address well within this window. 0 = off
  // (probes decide at once).
  int unconfirmed_grace_intervals = 5;

  // Bounded view (0 = off: every member is known, as in memberlist). With a bound, the node
  // holds at most this many other members, a random subset of the cluster, so its memory and
  // its per-round work stay bounded however large the cluster grows. A member it does not hold
  // is admitted while there is room; when full, only a member that introduces itself (its own
  // alive message or join push-pull, straight from it) is admitted, in place of an alive member
  // (a random one; for a joiner at its seed, the one held longest), which is forgotten (a
  // kReaped event). News about members not held is dropped and not passed on, a sender not held
  // is no reason for a push-pull, and the small-cluster shortcuts that introduce a node to every
  // member it learns of are off (see docs/simulator.md).
  size_t max_members = 0;
  // Bounded views only: every `shuffle_interval` (0 = never) the node swaps up to
  // `shuffle_length` view entries with a random live member (Cyclon's shuffle, as a small
  // push-pull: PushPull::shuffle). It sends itself and shuffle_length − 1 random alive members;
  // the peer answers with up to shuffle_length of its own and each side takes the entries it
  // lacks, making room by dropping those it sent (the initiator also the peer it shuffled
  // with), so views keep mixing after the join while every member stays held by about as many
  // others, and a node's view does not stay the copy of its seed's it started from. Only
  // members heard from (a packet or push-pull straight from them) within a probe interval are
  // shuffled away, or evicted to make room (swim_impl.h, kFreshIntervals): a member that
  // crashed a while ago stays with its holders until they detect it, and is not handed on as
  // alive.
  TimeMs shuffle_interval = 2000;
  size_t shuffle_length = 8;

  // Relays (with `nat` and `adopt_reflexive`). A node behind NAT that peers see at
  // different addresses (symmetric NAT: it cannot move to one) registers with a relay: a live
  // member that is public, serves relays and is not itself relayed (kAuto: any such member;
  // kNamed: `relay_name` only; kOff: never). It repeats the registration every
  // `relay_keepalive` (the relay's answer says where it sees the node: the node advertises that
  // address and the relay's name), and fails over to another relay when its relay is no longer
  // alive in its view or it heard nothing from the relay for `relay_keepalive_misses`
  // keepalive periods. A relay keeps a registration for `relay_ttl` after the last one.
  enum class RelayMode : uint8_t { kAuto, kNamed, kOff };
  RelayMode relay_mode = RelayMode::kAuto;
  std::string relay_name;
  bool serve_relay = true;            // forward for registered members (--serve-relay)
  double relay_rate_bytes_per_s = 0;  // cap on the bytes forwarded (token bucket); 0 = none
  TimeMs relay_keepalive = 1000;
  int relay_keepalive_misses = 2;
  TimeMs relay_ttl = 10000;
  size_t relay_overhead_bytes = 384;  // datagram budget a relay frame's wrapping takes
  // Direct return paths to relayed members. A relayed member's own datagrams reach
  // us straight from its NAT (it sends to public members directly), and that NAT lets our
  // answers in at their source address while the member keeps sending to us. While a datagram
  // straight from it (HandlePacket with a source address, or NoteDirect) is at most
  // `direct_ttl` old and came from the IP it advertises, we send to it there instead of
  // through its relay. 10 s: a third of the shortest NAT mapping timeout in use (Linux
  // conntrack keeps an unreplied UDP mapping 30 s, a replied one 120 s), so the mapping
  // outlives our use of it by 20 s or more; and longer than the gap between two probes of one
  // member in a small mesh, so the path does not flap in a quiet mesh. A probe the member does
  // not answer on that path drops it at once (the ping is repeated through the relay).
  // 0 = never (always through the relay).
  TimeMs direct_ttl = 10000;

  static Config Lan();
  static Config Wan();
  static Config Local();
  static Config ForProfile(TimingProfile profile);
  // A name of kTimingProfileNames; nullopt for an unknown name.
  static std::optional<Config> Profile(const std::string& name);
};

// A member as the application sees it.
struct Member {
  std::string name;
  std::string addr;
  Status status = Status::kAlive;
  uint32_t incarnation = 0;
  Meta meta;
  uint64_t step = 0;
  Eval eval;                // last evaluation it published (ProgressMsg)
  float step_ms = 0;        // its compute time per step as published (0 = unknown)
  TimeMs state_change = 0;  // when status last changed
  TimeMs step_learned = 0;  // when `step` was last learned (for progress views)
  // A relayed member we reach straight at the source of its own recent datagrams
  // (Config::direct_ttl) instead of through its relay. Set in the copies Members() returns
  // only (Find and ForEachMember leave it false).
  bool direct = false;
};

// Something the application may want to know about.
struct Event {
  enum class Kind { kJoined, kUpdated, kSuspect, kAlive, kFailed, kLeft, kReaped };
  Kind kind;
  Member member;
};

struct OutPacket {
  std::string to_addr;
  Packet packet;
  // Non-empty: `to_addr` is a member behind a relay; send the datagram to `via` (the
  // relay's address) wrapped in a relay frame for member `dest`.
  std::string via{};
  std::string dest{};
};

// Where a datagram for a relayed member goes (Swim::Route).
struct RelayRoute {
  std::string via;   // the relay's address; with `dest` empty, the member's direct return path
  std::string dest;  // the member's name; empty: send the datagram plainly to `via`
};

// What to do with a relay frame (Swim::OnRelayFrame). kForward and kDeliver accept it; the
// rest refuse it (counted in Stats).
enum class RelayVerdict : uint8_t {
  kForward,        // we relay for `dest`: send the inner datagram on to *to_addr
  kDeliver,        // for us, from our relay: handle the inner datagram
  kNotServing,     // --serve-relay off
  kNotMember,      // the sender is not a live member
  kNotRegistered,  // `dest` has no live registration with us
  kLoop,           // we are relayed ourselves (or the frame for us came from another node)
  kOverRate,       // over the bandwidth cap
};
const char* RelayVerdictName(RelayVerdict v);

// A push-pull exchange to start over TCP: send `request` to `to_addr`, read one PushPull back
// and pass it to HandlePushPullResponse. If the connection fails, call PushPullFailed.
struct OutPushPull {
  std::string to_addr;
  PushPull request;
};

struct Stats {
  uint64_t probes = 0;
  uint64_t indirect_probes = 0;
  uint64_t suspicions_raised = 0;  // times this node's own failed probe started a suspicion
  uint64_t refutations = 0;        // times this node refuted suspicion about itself
  uint64_t failures_declared = 0;  // times this node's suspicion timer expired
  uint64_t packets_sent = 0;
  uint64_t pushpulls = 0;
  uint64_t shuffles = 0;         // view shuffles this node started (bounded views)
  uint64_t reflexive_moves = 0;  // times this node moved to an address its peers see it at
  uint64_t punches = 0;          // alive messages sent to open our NAT towards a NATed member
  // Failed probes that made no suspicion: the target's address was unconfirmed, or it moved
  // while the probe was out (Config::unconfirmed_grace_intervals).
  uint64_t unconfirmed_holds = 0;
  // Failed probes of a relayed member that made no suspicion: its relay, asked to ping it too,
  // did not answer (Swim::Impl::ProbeFailed).
  uint64_t relay_holds = 0;
  // Relays. As a relay: registrations accepted, frames and their bytes forwarded,
  // refusals by reason (RelayVerdict, and registrations refused: kNotServing, kNotMember, kLoop).
  uint64_t relay_registrations = 0;
  uint64_t relay_frames = 0;
  uint64_t relay_bytes = 0;
  uint64_t relay_refused_not_serving = 0;
  uint64_t relay_refused_not_member = 0;
  uint64_t relay_refused_not_registered = 0;
  uint64_t relay_refused_loop = 0;
  uint64_t relay_refused_over_rate = 0;
  // As a relayed node: frames delivered to us, registrations (keepalives) sent, relays chosen
  // after the first (failovers).
  uint64_t relay_delivered = 0;
  uint64_t relay_keepalives = 0;
  uint64_t relay_failovers = 0;
  // Direct return paths (Config::direct_ttl): datagrams sent straight to a relayed member
  // instead of through its relay, paths learned (a relayed member's first direct datagram
  // after none or a lapse), and paths dropped because a probe on one went unanswered.
  uint64_t direct_packets = 0;
  uint64_t direct_paths = 0;
  uint64_t direct_dropped = 0;
  uint64_t relay_refused() const {
    return relay_refused_not_serving + relay_refused_not_member + relay_refused_not_registered +
           relay_refused_loop + relay_refused_over_rate;
  }
};

class Swim {
 public:
  Swim(Config config, uint64_t seed, TimeMs now);
  ~Swim();
  Swim(const Swim&) = delete;
  Swim& operator=(const Swim&) = delete;

  // Contact these addresses ("ip:port") with a join push-pull.
  void Join(const std::vector<std::string>& addrs, TimeMs now);

  // Inbound UDP packet; `from_addr` is the transport source address (empty: a relay delivered
  // it). The caller hands in only packets that decoded (and, with encryption, authenticated):
  // the source of one from a relayed member may become its direct return path.
  void HandlePacket(const std::string& from_addr, const Packet& packet, TimeMs now);
  // Inbound push-pull request (TCP): merges it and returns our state for the reply.
  PushPull HandlePushPullRequest(const PushPull& request, TimeMs now);
  // Reply to a push-pull we started.
  void HandlePushPullResponse(const PushPull& response, TimeMs now);
  void PushPullFailed(const std::string& to_addr, TimeMs now);
  // An extra anti-entropy push-pull with one random live member now, at most once per probe
  // interval (else ignored): for a caller that suspects its view is stale — the node waiting for
  // --min-peers while it knows enough live members, some of them not (yet) seen training.
  void RequestPushPull(TimeMs now);

  // Advance timers: probes, probe timeouts, suspicion timeouts, gossip, push-pull, reaping.
  void Tick(TimeMs now);
  // Earliest time Tick must be called again.
  TimeMs NextDeadline() const;

  // Graceful leave: announce kLeft about ourselves; keep ticking a few seconds so it spreads.
  void Leave(TimeMs now);
  bool HasLeft() const;
  // Updates still queued for retransmission (0 = everything queued has been sent its full
  // retransmit budget). The agent waits on this after Leave() so the news spreads.
  size_t PendingUpdates() const;
  // Mark a failed member as left (Serf force-leave). False if unknown or not failed/suspect.
  bool ForceLeave(const std::string& name, TimeMs now);

  // Update our metadata (new incarnation, gossiped) and our progress (piggybacked, cheap).
  void SetMeta(const Meta& meta, TimeMs now);
  void SetStep(uint64_t step);
  // Our latest test evaluation, published with our progress.
  void SetEval(const Eval& eval);
  // Our compute time per step (ms), published with our progress (--batch auto).
  void SetStepMs(float step_ms);

  // Drain outputs.
  std::vector<OutPacket> TakePackets();
  std::vector<OutPushPull> TakePushPulls();
  std::vector<Event> TakeEvents();
  // Progress news: with tracking on, the names of members whose step rose (drained here), so a
  // driver keeps its own per-member state incrementally instead of re-reading Members().
  void TrackProgress(bool on);
  std::vector<std::string> TakeProgressNews();

  // Views.
  std::vector<Member> Members() const;  // includes self, sorted by name
  // Visits every member (self included) in no particular order, without copying.
  void ForEachMember(const std::function<void(const Member&)>& fn) const;
  size_t NumMembers() const;  // every member known, any status, self included
  const Member* Find(const std::string& name) const;
  size_t NumAlive() const;  // alive or suspect, including self
  int HealthScore() const;  // Lifeguard awareness score (0 = healthy)
  const Stats& stats() const;
  const Config& config() const;  // config().addr: the address advertised now
  // This node's reachability as published, and the address it was configured with
  // (config().addr differs after a move to the reflexive address).
  Reach reach() const;
  const std::string& configured_addr() const;
  // A datagram the caller sent to `addr` outside the core (barrier queries and replies on the
  // same socket): a NAT now lets that address answer, so what comes from it is not unsolicited.
  void NoteSent(const std::string& addr);  // stamped with the last time the core was given

  // Relays. The route of a datagram the caller sends to `addr` outside the core
  // (barrier queries and replies): nullopt = straight there. Through a relayed member's relay;
  // from a relayed node to a member behind (cone) NAT, through its own relay.
  // A relayed member with a fresh direct return path (Config::direct_ttl) is sent to there:
  // RelayRoute{that address, ""}.
  std::optional<RelayRoute> Route(const std::string& addr) const;
  // An authenticated datagram from member `name` arrived straight (not through a relay) from
  // `from_addr`, outside the core (barrier queries and replies): as HandlePacket does for
  // membership datagrams, a relayed member's direct return path is refreshed.
  void NoteDirect(const std::string& name, const std::string& from_addr, TimeMs now);
  // A relay frame from member `sender`, arriving from `from_addr`, for member `dest`, carrying
  // `bytes`: what to do with it (counted; *to_addr set for kForward). A relay forwards to
  // members registered with it, and to members that sent frames through it within relay_ttl
  // (at the address they came from: their return path).
  RelayVerdict OnRelayFrame(const std::string& sender, const std::string& from_addr,
                            const std::string& dest, size_t bytes, TimeMs now,
                            std::string* to_addr);
  // The relay this node is registered with ("" = none; registered() false while waiting for
  // its first answer), and the members registered with this node as their relay.
  const std::string& relay() const;
  bool relay_registered() const;
  size_t relay_clients() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshtrain::membership
