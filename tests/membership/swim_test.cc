// Unit tests of the Swim state machine, driven by hand: packets are passed between a few
// Swim instances by a tiny in-test wire with zero latency and a drop filter, and time moves
// in 1 ms steps. Deterministic (fixed seeds), no sleeps.
#include "membership/swim.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace meshtrain::membership {
namespace {

Config TestConfig(const std::string& name, Config base = Config::Local()) {
  base.name = name;
  base.addr = name + ":7950";
  return base;
}

// Instant delivery between Swims known by address; `drop(from_addr, to_addr)` loses packets.
class Wire {
 public:
  using Drop = std::function<bool(const std::string&, const std::string&)>;

  Swim& Add(const std::string& name, Config base = Config::Local(), uint64_t seed = 0) {
    Config c = TestConfig(name, base);
    auto s = std::make_unique<Swim>(c, seed ? seed : std::hash<std::string>()(name), now_);
    Swim& ref = *s;
    nodes_[c.addr] = std::move(s);
    return ref;
  }
  Swim& Get(const std::string& name) { return *nodes_.at(name + ":7950"); }

  // Lets `joiner` push-pull with `seed` synchronously.
  void JoinDirect(const std::string& joiner, const std::string& seed) {
    Swim& j = Get(joiner);
    j.Join({seed + ":7950"}, now_);
    Pump();
  }

  // Delivers every pending packet and push-pull until the wire is quiet.
  void Pump() {
    bool busy = true;
    while (busy) {
      busy = false;
      for (auto& [addr, swim] : nodes_) {
        for (OutPacket& out : swim->TakePackets()) {
          busy = true;
          sent.push_back(out);
          if (drop && drop(addr, out.to_addr)) continue;
          auto it = nodes_.find(out.to_addr);
          if (it != nodes_.end()) it->second->HandlePacket(addr, out.packet, now_);
        }
        for (OutPushPull& pp : swim->TakePushPulls()) {
          busy = true;
          auto it = nodes_.find(pp.to_addr);
          if (it == nodes_.end() || (drop && drop(addr, pp.to_addr))) {
            swim->PushPullFailed(pp.to_addr, now_);
            continue;
          }
          PushPull resp = it->second->HandlePushPullRequest(pp.request, now_);
          swim->HandlePushPullResponse(resp, now_);
        }
        for (Event& e : swim->TakeEvents()) events[addr].push_back(e);
      }
    }
  }

  // Advances time to `until` in 1 ms steps, ticking whoever is due (all nodes, or `only`).
  void RunUntil(TimeMs until, const std::vector<std::string>& only = {}) {
    for (; now_ <= until; ++now_) {
      for (auto& [addr, swim] : nodes_) {
        if (!only.empty() &&
            std::find(only.begin(), only.end(), addr.substr(0, addr.find(':'))) == only.end()) {
          continue;
        }
        if (swim->NextDeadline() <= now_) swim->Tick(now_);
      }
      Pump();
    }
    now_ = until;
  }

  TimeMs now() const { return now_; }
  void set_now(TimeMs t) { now_ = t; }

  Drop drop;
  std::vector<OutPacket> sent;
  std::map<std::string, std::vector<Event>> events;  // by observer address

 private:
  TimeMs now_ = 0;
  std::map<std::string, std::unique_ptr<Swim>> nodes_;
};

Packet From(const std::string& name, Primary primary, std::vector<Update> updates = {}) {
  Packet p;
  p.from = name;
  p.from_addr = name + ":7950";
  p.primary = std::move(primary);
  p.updates = std::move(updates);
  return p;
}

int CountEvents(const std::vector<Event>& events, Event::Kind kind, const std::string& name) {
  int n = 0;
  for (const Event& e : events) n += e.kind == kind && e.member.name == name;
  return n;
}

TEST_CASE("a ping is acked with its seq and records the sender's step", "[membership][swim]") {
  Swim a(TestConfig("a"), 1, 0);
  a.HandlePacket("b:7950", From("b", PingMsg{42, "b"}), 10);
  CHECK(a.TakePackets().empty());  // address guard: the ping was meant for "b"

  Packet ping = From("b", PingMsg{42, "a"});
  ping.from_step = 7;
  a.HandlePacket("1.2.3.4:9", ping, 10);
  auto out = a.TakePackets();
  REQUIRE(out.size() == 1);
  CHECK(out[0].to_addr == "b:7950");  // the advertised address, not the transport source
  REQUIRE(std::holds_alternative<AckMsg>(out[0].packet.primary));
  CHECK(std::get<AckMsg>(out[0].packet.primary).seq == 42);
  CHECK(out[0].packet.from == "a");
  CHECK(out[0].packet.from_addr == "a:7950");
}

TEST_CASE("join through a seed merges both views and spreads the joiner", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  CHECK(w.Get("a").NumAlive() == 3);
  CHECK(w.Get("c").NumAlive() == 3);  // learned b from a's state
  CHECK(w.Get("b").NumAlive() == 3);  // c announced itself to the members it learned
  w.RunUntil(2000);
  CHECK(w.Get("b").NumAlive() == 3);
  CHECK(CountEvents(w.events["b:7950"], Event::Kind::kJoined, "c") == 1);
  const auto members = w.Get("b").Members();
  REQUIRE(members.size() == 3);
  CHECK(members[0].name == "a");
  CHECK(members[2].name == "c");
}

TEST_CASE("direct probes succeed and carry progress", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.JoinDirect("b", "a");
  w.Get("b").SetStep(5);
  w.RunUntil(5000);
  CHECK(w.Get("a").stats().probes >= 3);
  CHECK(w.Get("a").stats().indirect_probes == 0);
  CHECK(w.Get("a").stats().suspicions_raised == 0);
  CHECK(w.Get("a").HealthScore() == 0);
  const Member* b = w.Get("a").Find("b");
  REQUIRE(b != nullptr);
  CHECK(b->status == Status::kAlive);
  CHECK(b->step == 5);
  CHECK(b->step_learned > 0);
}

TEST_CASE("an indirect probe through an intermediary relays the ack", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  // a and c cannot talk directly, but both reach b.
  w.drop = [](const std::string& f, const std::string& t) {
    return (f == "a:7950" && t == "c:7950") || (f == "c:7950" && t == "a:7950");
  };
  w.RunUntil(20000);
  CHECK(w.Get("a").stats().indirect_probes >= 3);
  CHECK(w.Get("a").stats().suspicions_raised == 0);
  CHECK(w.Get("c").stats().suspicions_raised == 0);
  CHECK(w.Get("a").Find("c")->status == Status::kAlive);
  CHECK(w.Get("c").Find("a")->status == Status::kAlive);
  CHECK(w.Get("a").HealthScore() == 0);
}

TEST_CASE("a dead target yields a nack, a suspicion and no health penalty", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  w.drop = [](const std::string& f, const std::string& t) {
    return f == "c:7950" || t == "c:7950";
  };
  // Only a and b run; c is gone. Count the nacks b sends to a.
  const size_t before = w.sent.size();
  w.RunUntil(6000, {"a", "b"});
  int nacks = 0;
  for (size_t i = before; i < w.sent.size(); ++i) {
    nacks += std::holds_alternative<NackMsg>(w.sent[i].packet.primary);
  }
  CHECK(nacks >= 1);
  CHECK(w.Get("a").Find("c")->status != Status::kAlive);
  CHECK(w.Get("a").HealthScore() == 0);  // the nacks prove our own path is fine
}

TEST_CASE("an isolated node blames itself: awareness rises, then recovers", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  CHECK(w.Get("a").HealthScore() == 0);
  // a's outbound traffic is lost: no acks, no nacks.
  w.drop = [](const std::string& f, const std::string&) { return f == "a:7950"; };
  w.RunUntil(9000, {"a"});
  const int raised = w.Get("a").HealthScore();
  CHECK(raised >= 2);
  const TimeMs before = w.now();
  const auto probes_before = w.Get("a").stats().probes;
  w.RunUntil(before + 10000, {"a"});
  // The probe interval stretched by (score + 1): far fewer than 10 probes in 10 s.
  CHECK(w.Get("a").stats().probes - probes_before < 6);
  CHECK(w.Get("a").HealthScore() <= Config::Local().awareness_max_multiplier - 1);
  w.drop = nullptr;
  w.RunUntil(w.now() + 60000);
  CHECK(w.Get("a").HealthScore() == 0);
  CHECK(w.Get("a").NumAlive() == 3);
}

TEST_CASE("suspicion about ourselves is refuted with a higher incarnation", "[membership][swim]") {
  Swim a(TestConfig("a"), 1, 0);
  a.HandlePacket("x:7950", From("x", std::monostate{}, {SuspectMsg{"a", 0, "x"}}), 5);
  CHECK(a.stats().refutations == 1);
  CHECK(a.Find("a")->incarnation == 1);
  CHECK(a.Find("a")->status == Status::kAlive);
  CHECK(a.HealthScore() == 1);
  a.HandlePacket("x:7950", From("x", std::monostate{}, {DeadMsg{"a", 4, "x"}}), 6);
  CHECK(a.stats().refutations == 2);
  CHECK(a.Find("a")->incarnation == 5);
  auto carries_alive = [](const OutPacket& p, const std::string& name, uint32_t inc) {
    for (const Update& u : p.packet.updates) {
      if (const auto* al = std::get_if<AliveMsg>(&u)) {
        if (al->name == name && al->incarnation == inc) return true;
      }
    }
    return false;
  };
  // The refutation rides the next packet we send.
  a.HandlePacket("x:7950", From("x", PingMsg{1, "a"}), 7);
  auto out = a.TakePackets();
  REQUIRE(out.size() == 1);
  CHECK(carries_alive(out[0], "a", 5));
  // Drain the retransmissions of the refutation.
  for (TimeMs t = 8; t < 5000; t += 10) a.Tick(t);
  a.TakePackets();
  // An old accusation does not refute again, but its sender missed our refutation: it gets a
  // direct correction.
  a.HandlePacket("x:7950", From("x", std::monostate{}, {SuspectMsg{"a", 3, "x"}}), 5000);
  CHECK(a.stats().refutations == 2);
  CHECK(a.Find("a")->incarnation == 5);
  out = a.TakePackets();
  REQUIRE(out.size() == 1);
  CHECK(out[0].to_addr == "x:7950");
  CHECK(carries_alive(out[0], "a", 5));
}

TEST_CASE("a stale accusation about a third member is corrected directly", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.JoinDirect("b", "a");
  Swim& a = w.Get("a");
  // a knows b at incarnation 2; x still suspects incarnation 1.
  a.HandlePacket("b:7950", From("b", std::monostate{}, {AliveMsg{"b", "b:7950", 2, {}}}), 1);
  a.TakePackets();
  a.HandlePacket("x:7950", From("x", PingMsg{9, "a"}, {SuspectMsg{"b", 1, "x"}}), 2);
  CHECK(a.Find("b")->status == Status::kAlive);
  auto out = a.TakePackets();
  REQUIRE(out.size() == 1);
  REQUIRE(std::holds_alternative<AckMsg>(out[0].packet.primary));
  bool corrected = false;
  for (const Update& u : out[0].packet.updates) {
    if (const auto* al = std::get_if<AliveMsg>(&u))
      corrected |= al->name == "b" && al->incarnation == 2;
  }
  CHECK(corrected);
}

TEST_CASE("a falsely suspected member refutes and is alive again everywhere",
          "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  Swim& a = w.Get("a");
  a.HandlePacket("x:7950", From("x", std::monostate{}, {SuspectMsg{"c", 0, "x"}}), w.now());
  CHECK(a.Find("c")->status == Status::kSuspect);
  w.RunUntil(w.now() + 3000);
  CHECK(w.Get("c").stats().refutations == 1);
  CHECK(a.Find("c")->status == Status::kAlive);
  CHECK(a.Find("c")->incarnation == 1);
  CHECK(w.Get("b").Find("c")->incarnation == 1);
  CHECK(CountEvents(w.events["a:7950"], Event::Kind::kSuspect, "c") == 1);
  CHECK(CountEvents(w.events["a:7950"], Event::Kind::kAlive, "c") == 1);
  CHECK(CountEvents(w.events["a:7950"], Event::Kind::kFailed, "c") == 0);
}

// A lone node that knows `n` members (by a merged push-pull) and hears nothing back.
std::unique_ptr<Swim> Loner(Config base, size_t n) {
  auto a = std::make_unique<Swim>(TestConfig("a", base), 3, 0);
  PushPull pp;
  pp.from = "m1";
  for (size_t i = 1; i < n; ++i) {
    pp.members.push_back(MemberState{
        "m" + std::to_string(i), "m" + std::to_string(i) + ":7950", 0, Status::kAlive, {}, 0});
  }
  a->HandlePushPullResponse(pp, 0);
  a->TakeEvents();
  return a;
}

TEST_CASE("an unrefuted suspicion turns into failed at the timeout", "[membership][swim]") {
  // 2 members: no confirmations expected (n - 2 < SuspicionMult - 2), so timeout = min.
  auto a = Loner(Config::Local(), 2);
  const TimeMs t0 = 100;
  a->HandlePacket("x:7950", From("x", std::monostate{}, {SuspectMsg{"m1", 0, "a"}}), t0);
  const TimeMs min = 3 * 1000;  // SuspicionMult 3 × max(1, log10 2) × 1 s
  a->Tick(t0 + min - 1);
  CHECK(a->Find("m1")->status == Status::kSuspect);
  a->Tick(t0 + min);
  CHECK(a->Find("m1")->status == Status::kFailed);
  CHECK(a->stats().failures_declared == 1);
  const auto events = a->TakeEvents();
  CHECK(CountEvents(events, Event::Kind::kSuspect, "m1") == 1);
  CHECK(CountEvents(events, Event::Kind::kFailed, "m1") == 1);
  // The declaration is gossiped as a dead message from us.
  bool dead_from_a = false;
  for (TimeMs t = t0 + min; t < t0 + min + 2000; t += 50) {
    a->Tick(t);
    for (const OutPacket& p : a->TakePackets()) {
      for (const Update& u : p.packet.updates) {
        if (const auto* d = std::get_if<DeadMsg>(&u))
          dead_from_a |= d->name == "m1" && d->from == "a";
      }
    }
  }
  CHECK(dead_from_a);
}

TEST_CASE("independent confirmations shorten the suspicion timeout", "[membership][swim]") {
  Config lan = Config::Lan();
  // n = 10: min = 4 × 1 × 1 s = 4 s, max = 24 s, K = SuspicionMult − 2 = 2.
  const TimeMs t0 = 50;
  const TimeMs one_conf =
      24000 - static_cast<TimeMs>(std::ceil(20000.0 * std::log(2.0) / std::log(3.0)));
  SECTION("no confirmation: max") {
    auto a = Loner(lan, 10);
    a->HandlePacket("m9:7950", From("m9", std::monostate{}, {SuspectMsg{"m1", 0, "a"}}), t0);
    a->Tick(t0 + 23999);
    CHECK(a->Find("m1")->status == Status::kSuspect);
    a->Tick(t0 + 24000);
    CHECK(a->Find("m1")->status == Status::kFailed);
  }
  SECTION("one confirmation, repeated: between min and max") {
    auto a = Loner(lan, 10);
    a->HandlePacket("m9:7950", From("m9", std::monostate{}, {SuspectMsg{"m1", 0, "a"}}), t0);
    for (int rep = 0; rep < 3; ++rep) {
      a->HandlePacket("m9:7950", From("m9", std::monostate{}, {SuspectMsg{"m1", 0, "m2"}}),
                      t0 + 1000 + rep);
    }
    a->Tick(t0 + one_conf - 1);
    CHECK(a->Find("m1")->status == Status::kSuspect);
    a->Tick(t0 + one_conf);
    CHECK(a->Find("m1")->status == Status::kFailed);
  }
  SECTION("K confirmations: min") {
    auto a = Loner(lan, 10);
    a->HandlePacket("m9:7950", From("m9", std::monostate{}, {SuspectMsg{"m1", 0, "a"}}), t0);
    a->HandlePacket(
        "m9:7950",
        From("m9", std::monostate{}, {SuspectMsg{"m1", 0, "m2"}, SuspectMsg{"m1", 0, "m3"}}),
        t0 + 1000);
    a->Tick(t0 + 3999);
    CHECK(a->Find("m1")->status == Status::kSuspect);
    a->Tick(t0 + 4000);
    CHECK(a->Find("m1")->status == Status::kFailed);
  }
}

TEST_CASE("an update is retransmitted RetransmitMult x ceil(log10(n+1)) times",
          "[membership][swim]") {
  // The local profile: 2 × ceil(log10(n + 1)) = 4 transmissions for n = 10 and n = 40. With
  // n = 10 every live member also fits in one direct announcement of the change (9 packets).
  for (const auto& [n, direct] : {std::pair<size_t, int>{40, 0}, {10, 9}}) {
    INFO("n = " << n);
    auto a = Loner(Config::Local(), n);
    a->TakePackets();  // introductions to the members it just learned about
    a->SetMeta(Meta{"a:7960", true, 1, 2, {}}, 0);
    int sent = 0;
    for (TimeMs t = 0; t < 30000; t += 10) {
      a->Tick(t);
      for (const OutPacket& p : a->TakePackets()) {
        for (const Update& u : p.packet.updates) {
          if (const auto* al = std::get_if<AliveMsg>(&u))
            sent += al->name == "a" && al->incarnation == 1;
        }
      }
    }
    CHECK(sent == 4 + direct);
  }
}

TEST_CASE("every packet respects the datagram budget", "[membership][swim]") {
  Config c = Config::Lan();
  c.max_packet_bytes = GENERATE(500, 1400);
  auto a = Loner(c, 1);
  // Learn 200 long-named members: 200 alive updates to piggyback.
  PushPull pp;
  for (int i = 0; i < 200; ++i) {
    pp.members.push_back(MemberState{"a-rather-long-member-name-" + std::to_string(i),
                                     "192.168.100." + std::to_string(i % 250) + ":7950", 3,
                                     Status::kAlive, Meta{"192.168.100.1:7960", true, 9, 9, {}},
                                     0});
  }
  pp.from = "m0";
  a->HandlePushPullRequest(pp, 0);  // news to gossip (a joiner's own first merge stays quiet)
  size_t max_seen = 0;
  size_t packets = 0;
  const size_t budget = c.max_packet_bytes - c.packet_overhead_bytes;
  for (TimeMs t = 0; t < 20000; t += 5) {
    a->Tick(t);
    for (const OutPacket& p : a->TakePackets()) {
      size_t size = EstimatePacketOverhead(p.packet);
      for (const Update& u : p.packet.updates) size += EstimateSize(u);
      CHECK(size <= budget);
      max_seen = std::max(max_seen, size);
      ++packets;
    }
  }
  CHECK(packets > 10);
  CHECK(max_seen > budget / 2);  // packets are actually filled, not trivially small
}

TEST_CASE("graceful leave is seen as left, not failed", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  w.Get("c").Leave(w.now());
  CHECK(w.Get("c").HasLeft());
  w.RunUntil(w.now() + 3000);
  const auto probes = w.Get("c").stats().probes;
  w.RunUntil(w.now() + 20000);
  CHECK(w.Get("c").stats().probes == probes);  // a left node stops probing
  for (const char* o : {"a", "b"}) {
    CHECK(w.Get(o).Find("c")->status == Status::kLeft);
    CHECK(CountEvents(w.events[std::string(o) + ":7950"], Event::Kind::kLeft, "c") == 1);
    CHECK(CountEvents(w.events[std::string(o) + ":7950"], Event::Kind::kFailed, "c") == 0);
    CHECK(w.Get(o).NumAlive() == 2);
  }
  CHECK(w.Get("c").PendingUpdates() == 0);
}

TEST_CASE("force-leave marks a failed member left and spreads it", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  CHECK_FALSE(w.Get("a").ForceLeave("c", w.now()));  // alive: refused
  CHECK_FALSE(w.Get("a").ForceLeave("nobody", w.now()));
  w.drop = [](const std::string& f, const std::string& t) {
    return f == "c:7950" || t == "c:7950";
  };
  w.RunUntil(w.now() + 30000, {"a", "b"});
  REQUIRE(w.Get("a").Find("c")->status == Status::kFailed);
  REQUIRE(w.Get("b").Find("c")->status == Status::kFailed);
  CHECK(w.Get("a").ForceLeave("c", w.now()));
  CHECK(w.Get("a").Find("c")->status == Status::kLeft);
  w.RunUntil(w.now() + 3000, {"a", "b"});
  CHECK(w.Get("b").Find("c")->status == Status::kLeft);
  CHECK(CountEvents(w.events["b:7950"], Event::Kind::kLeft, "c") == 1);
}

TEST_CASE("a force-leave is sent directly to every live member of a mostly dead table",
          "[membership][swim]") {
  // 100 failed members and two live ones: the announcement must reach both at once, not only
  // when sampling happens to draw them (3·n random draws missed one in ~10% of seeds).
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    INFO("seed " << seed);
    Wire w;
    Swim& a = w.Add("a", Config::Local(), seed);
    w.Add("b");
    w.Add("c");
    w.JoinDirect("b", "a");
    w.JoinDirect("c", "a");
    std::vector<Update> alive, dead;
    for (int i = 0; i < 100; ++i) {
      const std::string x = "x" + std::to_string(i);
      alive.push_back(AliveMsg{x, x + ":7950", 1, {}});
      dead.push_back(DeadMsg{x, 1, "b"});
    }
    a.HandlePacket("b:7950", From("b", std::monostate{}, alive), w.now());
    a.HandlePacket("b:7950", From("b", std::monostate{}, dead), w.now());
    REQUIRE(a.Find("x7")->status == Status::kFailed);
    REQUIRE(a.NumAlive() == 3);
    a.TakePackets();
    REQUIRE(a.ForceLeave("x7", w.now()));
    std::set<std::string> told;
    for (const OutPacket& out : a.TakePackets()) {
      for (const Update& u : out.packet.updates) {
        const auto* d = std::get_if<DeadMsg>(&u);
        if (d != nullptr && d->name == "x7") told.insert(out.to_addr);
      }
    }
    CHECK(told == std::set<std::string>{"b:7950", "c:7950"});
  }
}

TEST_CASE("in a small mesh a declared failure is sent directly to every live member",
          "[membership][swim]") {
  // Only a runs its timers: it probes e (cut off), suspects it, and with no confirmations
  // declares it failed at its maximum timeout. b, c and d must hear that from a directly, not
  // by the two gossip transmissions a small mesh allows (shared with e itself).
  Wire w;
  for (const char* n : {"a", "b", "c", "d", "e"}) w.Add(n);
  for (const char* n : {"b", "c", "d", "e"}) w.JoinDirect(n, "a");
  w.RunUntil(2000);
  w.drop = [](const std::string& f, const std::string& t) {
    return f == "e:7950" || t == "e:7950";
  };
  w.sent.clear();
  w.RunUntil(w.now() + 40000, {"a"});
  REQUIRE(w.Get("a").Find("e")->status == Status::kFailed);
  REQUIRE(w.Get("a").stats().failures_declared == 1);
  std::set<std::string> told;
  for (const OutPacket& out : w.sent) {
    for (const Update& u : out.packet.updates) {
      const auto* d = std::get_if<DeadMsg>(&u);
      if (d != nullptr && d->name == "e" && d->from == "a") told.insert(out.to_addr);
    }
  }
  CHECK(told.count("b:7950") == 1);
  CHECK(told.count("c:7950") == 1);
  CHECK(told.count("d:7950") == 1);
  for (const char* o : {"b", "c", "d"}) CHECK(w.Get(o).Find("e")->status == Status::kFailed);
}

TEST_CASE("failed members are reaped after reap_timeout", "[membership][swim]") {
  Config c = Config::Local();
  c.reap_timeout = 20000;
  Wire w;
  w.Add("a", c);
  w.Add("b", c);
  w.Add("c", c);
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  w.drop = [](const std::string& f, const std::string& t) {
    return f == "c:7950" || t == "c:7950";
  };
  w.RunUntil(w.now() + 12000, {"a", "b"});
  const Member* m = w.Get("a").Find("c");
  REQUIRE(m != nullptr);
  REQUIRE(m->status == Status::kFailed);
  const TimeMs failed_at = m->state_change;
  w.RunUntil(failed_at + 20000 - 1, {"a", "b"});
  CHECK(w.Get("a").Find("c") != nullptr);
  w.RunUntil(failed_at + 20000, {"a", "b"});
  CHECK(w.Get("a").Find("c") == nullptr);
  CHECK(w.Get("a").Members().size() == 2);
  CHECK(CountEvents(w.events["a:7950"], Event::Kind::kReaped, "c") == 1);
}

TEST_CASE("a failed node that comes back refutes and is alive again", "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.Add("c");
  w.JoinDirect("b", "a");
  w.JoinDirect("c", "a");
  w.RunUntil(2000);
  w.drop = [](const std::string& f, const std::string& t) {
    return f == "c:7950" || t == "c:7950";
  };
  w.RunUntil(w.now() + 15000, {"a", "b"});
  REQUIRE(w.Get("a").Find("c")->status == Status::kFailed);
  const uint32_t dead_inc = w.Get("a").Find("c")->incarnation;
  // c rejoins through a; a's state tells c it was declared dead, so c refutes.
  w.drop = nullptr;
  w.JoinDirect("c", "a");
  CHECK(w.Get("c").stats().refutations >= 1);
  w.RunUntil(w.now() + 3000);
  for (const char* o : {"a", "b"}) {
    CHECK(w.Get(o).Find("c")->status == Status::kAlive);
    CHECK(w.Get(o).Find("c")->incarnation > dead_inc);
  }
}

TEST_CASE("progress spreads by gossip and only moves forward", "[membership][swim]") {
  Wire w;
  for (const char* n : {"a", "b", "c", "d"}) w.Add(n);
  for (const char* n : {"b", "c", "d"}) w.JoinDirect(n, "a");
  w.RunUntil(3000);
  w.Get("d").SetStep(100);
  w.Get("d").SetStep(101);
  w.RunUntil(w.now() + 3000);
  for (const char* o : {"a", "b", "c"}) CHECK(w.Get(o).Find("d")->step == 101);
  Swim& a = w.Get("a");
  a.HandlePacket("b:7950", From("b", std::monostate{}, {ProgressMsg{"d", 50, {}}}), w.now());
  CHECK(a.Find("d")->step == 101);
}

TEST_CASE("a published evaluation spreads with progress; only a newer one replaces it",
          "[membership][swim]") {
  Wire w;
  for (const char* n : {"a", "b", "c", "d"}) w.Add(n);
  for (const char* n : {"b", "c", "d"}) w.JoinDirect(n, "a");
  w.RunUntil(3000);
  w.Get("d").SetStep(40);
  w.Get("d").SetEval(Eval{40, 0.75f, 0.6f});
  w.RunUntil(w.now() + 3000);
  for (const char* o : {"a", "b", "c"}) {
    CHECK(w.Get(o).Find("d")->eval == Eval{40, 0.75f, 0.6f});
    CHECK(w.Get(o).Find("d")->step == 40);
  }
  // Peers already know step 45; the evaluation at 45 still travels (it does not move the step).
  w.Get("d").SetStep(45);
  w.RunUntil(w.now() + 3000);
  w.Get("d").SetEval(Eval{45, 0.8f, 0.5f});
  // Dissemination is probabilistic; a training node re-queues its progress (and so its last
  // evaluation) as its step moves on.
  for (uint64_t step = 46; step <= 49; ++step) {
    w.Get("d").SetStep(step);
    w.RunUntil(w.now() + 1000);
  }
  for (const char* o : {"a", "b", "c"}) {
    CAPTURE(o);
    CHECK(w.Get(o).Find("d")->eval.accuracy == 0.8f);
    CHECK(w.Get(o).Find("d")->eval.step == 45);
  }
  Swim& a = w.Get("a");
  const uint64_t known = a.Find("d")->step;
  CHECK(known >= 45);
  a.HandlePacket("b:7950", From("b", std::monostate{}, {ProgressMsg{"d", 41, Eval{20, 0.1f, 2}}}),
                 w.now());
  CHECK(a.Find("d")->step == known);    // older step ignored
  CHECK(a.Find("d")->eval.step == 45);  // older eval ignored
  a.HandlePacket("b:7950", From("b", std::monostate{}, {ProgressMsg{"d", 60, Eval{}}}), w.now());
  CHECK(a.Find("d")->step == 60);       // newer step taken,
  CHECK(a.Find("d")->eval.step == 45);  // a message without an eval keeps the last one
}

TEST_CASE("metadata changes travel with a new incarnation and raise kUpdated",
          "[membership][swim]") {
  Wire w;
  w.Add("a");
  w.Add("b");
  w.JoinDirect("b", "a");
  w.RunUntil(1000);
  const Meta meta{"b:7960", true, 12.5f, 40.0f, {{"rack", "r7"}}};
  w.Get("b").SetMeta(meta, w.now());
  CHECK(w.Get("b").Find("b")->incarnation == 1);
  w.RunUntil(w.now() + 2000);
  const Member* b = w.Get("a").Find("b");
  REQUIRE(b != nullptr);
  CHECK(b->meta == meta);
  CHECK(b->incarnation == 1);
  CHECK(CountEvents(w.events["a:7950"], Event::Kind::kUpdated, "b") == 1);
  CHECK(CountEvents(w.events["a:7950"], Event::Kind::kJoined, "b") == 1);
}

}  // namespace
}  // namespace meshtrain::membership

namespace meshtrain::membership {
namespace {

MemberState AliveState(const std::string& name) {
  MemberState m;
  m.name = name;
  m.addr = name + ":7950";
  m.status = Status::kAlive;
  return m;
}

TEST_CASE("a bounded view admits strangers while there is room, then only self-introductions",
          "[membership][swim]") {
  Config c = TestConfig("a");
  c.max_members = 2;
  Swim s(c, 1, 0);
  // A push-pull from x carrying y, z and x itself: y and z fill the view; x introduces itself
  // and takes the place of one of them, which is forgotten with a kReaped event.
  s.HandlePushPullRequest(PushPull{false, "x", {AliveState("y"), AliveState("z"), AliveState("x")}},
                          10);
  CHECK(s.NumMembers() == 3);
  CHECK(s.Find("x") != nullptr);
  CHECK((s.Find("y") == nullptr) != (s.Find("z") == nullptr));
  size_t reaped = 0;
  for (const Event& e : s.TakeEvents()) {
    if (e.kind != Event::Kind::kReaped) continue;
    ++reaped;
    CHECK(s.Find(e.member.name) == nullptr);
  }
  CHECK(reaped == 1);

  // News about a stranger from a third party is dropped (and not passed on); the sender's own
  // alive message is admitted.
  Packet p;
  p.from = "q";
  p.from_addr = "q:7950";
  p.updates.push_back(AliveMsg{"r", "r:7950", 1, {}});
  const size_t pending = s.PendingUpdates();
  s.HandlePacket("q:7950", p, 20);
  CHECK(s.Find("r") == nullptr);
  CHECK(s.PendingUpdates() == pending);
  p.updates = {AliveMsg{"q", "q:7950", 1, {}}};
  s.HandlePacket("q:7950", p, 30);
  CHECK(s.Find("q") != nullptr);
  CHECK(s.NumMembers() == 3);

  // Without a bound (the default) every member is held.
  Swim full(TestConfig("b"), 1, 0);
  full.HandlePushPullRequest(
      PushPull{false, "x", {AliveState("y"), AliveState("z"), AliveState("x")}}, 10);
  CHECK(full.NumMembers() == 4);
}

TEST_CASE("a bounded view's shuffle swaps entries with a peer", "[membership][swim]") {
  Config c = TestConfig("a");
  c.max_members = 4;
  c.shuffle_interval = 1000;
  c.shuffle_length = 3;
  c.probe_interval = 1000000;  // no probe (and no suspicion) of these silent members
  Swim a(c, 7, 0);
  a.HandlePushPullRequest(
      PushPull{
          false, "p1", {AliveState("p1"), AliveState("p2"), AliveState("p3"), AliveState("p4")}},
      10);
  REQUIRE(a.NumMembers() == 5);
  a.TakeEvents();
  // Only members heard from lately are shuffled: these talk to the node all the time.
  const auto hear = [](Swim& s, const std::string& from, TimeMs t) {
    Packet p;
    p.from = from;
    p.from_addr = from + ":7950";
    s.HandlePacket(p.from_addr, p, t);
  };
  // Within two intervals a shuffle goes to one member: the node itself and two others.
  std::optional<OutPushPull> shuffle;
  for (TimeMs t = 20; t <= 2100 && !shuffle; t += 10) {
    for (const char* n : {"p1", "p2", "p3", "p4"}) hear(a, n, t);
    a.Tick(t);
    for (OutPushPull& pp : a.TakePushPulls()) {
      if (pp.request.shuffle) shuffle = std::move(pp);
    }
    a.TakePackets();
  }
  REQUIRE(shuffle.has_value());
  CHECK(a.stats().shuffles == 1);
  const std::string peer = shuffle->to_addr.substr(0, shuffle->to_addr.find(':'));
  std::set<std::string> sent;
  for (const MemberState& m : shuffle->request.members) sent.insert(m.name);
  CHECK(sent.size() == 3);
  CHECK(sent.count("a") == 1);
  CHECK(sent.count(peer) == 0);
  // Three new members come back: they take the places of the two sent and of the peer.
  PushPull reply{false, peer, {AliveState("n1"), AliveState("n2"), AliveState("n3")}};
  reply.shuffle = true;
  a.HandlePushPullResponse(reply, 2200);
  CHECK(a.NumMembers() == 5);
  for (const char* n : {"n1", "n2", "n3"}) CHECK(a.Find(n) != nullptr);
  CHECK(a.Find(peer) == nullptr);
  for (const std::string& n : sent) {
    if (n != "a") CHECK(a.Find(n) == nullptr);
  }
  size_t reaped = 0;
  for (const Event& e : a.TakeEvents()) reaped += e.kind == Event::Kind::kReaped;
  CHECK(reaped == 3);

  // The receiving side answers with members the requester did not send and takes the
  // requester's entries in their place.
  Config cb = TestConfig("b");
  cb.max_members = 4;
  cb.shuffle_length = 3;
  Swim b(cb, 8, 0);
  b.HandlePushPullRequest(
      PushPull{
          false, "q1", {AliveState("q1"), AliveState("q2"), AliveState("q3"), AliveState("x")}},
      10);
  REQUIRE(b.NumMembers() == 5);
  for (const char* n : {"q1", "q2", "q3", "x"}) hear(b, n, 15);
  PushPull request{false, "r", {AliveState("x"), AliveState("y"), AliveState("r")}};
  request.shuffle = true;
  const PushPull answer = b.HandlePushPullRequest(request, 20);
  CHECK(answer.shuffle);
  CHECK(answer.members.size() == 3);
  size_t given = 0;  // y and r need two places: two of the answer's members make them
  for (const MemberState& m : answer.members) {
    CHECK(m.name != "x");
    CHECK(m.name != "b");
    given += b.Find(m.name) == nullptr;
  }
  CHECK(given == 2);
  CHECK(b.NumMembers() == 5);
  for (const char* n : {"x", "y", "r"}) CHECK(b.Find(n) != nullptr);

  // Without a bound nothing is shuffled: an unbounded node never starts one and treats a
  // shuffle as an ordinary push-pull (its whole state back).
  Swim full(TestConfig("f"), 1, 0);
  for (TimeMs t = 0; t <= 10000; t += 100) full.Tick(t);
  CHECK(full.stats().shuffles == 0);
  const PushPull whole = full.HandlePushPullRequest(request, 10100);
  CHECK_FALSE(whole.shuffle);
  CHECK(whole.members.size() == 4);  // f, x, y and r
}

}  // namespace
}  // namespace meshtrain::membership
