// Virtual-time tests of members behind NAT routers with latency and stalled processes: the
// routers of swim_nat_test.cc (cone: one public port per host; symmetric: one per destination;
// inbound admitted only from addresses the host sent to), but every datagram takes
// `one_way_ms` from host to host (a relay frame twice: to the relay, then on), and a host can be
// stalled (a process that gets no CPU): datagrams for it wait in its socket, and when it runs
// again its timers fire before it reads them, as in the agent's libuv loop (uv_run runs due
// timers, then polls for I/O). Push-pulls (TCP) complete at once. 1 ms steps, fixed seeds.
#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "membership/swim.h"
#include "tests/membership/nat_routers.h"

namespace meshtrain::membership {
namespace {

using testing::Nat;

class TimedWire {
 public:
  struct Delivery {
    TimeMs at = 0;
    std::string src;     // transport source as the receiver sees it
    std::string sender;  // frames: the member that sent the frame
    std::string dest;    // frames: the final destination's name ("" = a plain datagram)
    bool at_relay = false;
    Packet packet;
  };
  struct Host : testing::NatHost {
    std::unique_ptr<Swim> swim;
    std::deque<Delivery> inbox;  // in arrival order
    std::vector<Event> events;
    std::vector<std::pair<TimeMs, TimeMs>> stalls;  // [from, to): runs nothing
    bool Stalled(TimeMs t) const {
      for (const auto& [a, b] : stalls) {
        if (t >= a && t < b) return true;
      }
      return false;
    }
  };

  explicit TimedWire(TimeMs one_way_ms) : one_way_(one_way_ms) {}

  Swim& Add(const std::string& name, Nat nat, Config c) {
    auto h = std::make_unique<Host>();
    h->name = name;
    const size_t i = hosts_.size() + 1;
    h->Place(nat, i);
    c.name = name;
    c.addr = h->inner;
    c.nat = true;
    c.adopt_reflexive = true;
    h->swim = std::make_unique<Swim>(c, 1000 + i, now_);
    Swim& ref = *h->swim;
    hosts_.push_back(std::move(h));
    return ref;
  }
  Host* Find(const std::string& name) {
    for (auto& h : hosts_) {
      if (h->name == name) return h.get();
    }
    return nullptr;
  }
  Swim& Get(const std::string& name) { return *Find(name)->swim; }

  std::string SourceFor(Host& h, const std::string& to) { return h.SourceFor(to); }
  Host* Route(const std::string& addr, const std::string& src) {
    for (auto& h : hosts_) {
      if (h->Admits(addr, src)) return h.get();
    }
    return nullptr;
  }
  // Sends one datagram from `h` to `addr` through the routers (arriving one_way_ later).
  void Send(Host& h, const std::string& addr, Delivery d) {
    const std::string src = SourceFor(h, addr);
    if (h.nat != Nat::kNone) h.open.insert(addr);
    Host* to = Route(addr, src);
    if (to == nullptr) return;
    d.at = now_ + one_way_;
    d.src = src;
    to->inbox.push_back(std::move(d));
  }

  void Handle(Host& h, Delivery& d) {
    if (d.dest.empty()) {
      h.swim->HandlePacket(d.src, d.packet, now_);
      return;
    }
    if (d.at_relay) {
      std::string to_addr;
      if (h.swim->OnRelayFrame(d.sender, d.src, d.dest, 500, now_, &to_addr) !=
          RelayVerdict::kForward) {
        return;
      }
      Delivery on{0, "", h.name, d.dest, false, std::move(d.packet)};
      Send(h, to_addr, std::move(on));
      return;
    }
    if (h.swim->OnRelayFrame(d.sender, d.src, d.dest, 500, now_, nullptr) ==
        RelayVerdict::kDeliver) {
      h.swim->HandlePacket("", d.packet, now_);
    }
  }

  void Outputs(Host& h) {
    for (OutPacket& out : h.swim->TakePackets()) {
      if (!out.via.empty()) {
        Send(h, out.via, Delivery{0, "", h.name, out.dest, true, std::move(out.packet)});
      } else {
        Send(h, out.to_addr, Delivery{0, "", "", "", false, std::move(out.packet)});
      }
    }
    for (OutPushPull& pp : h.swim->TakePushPulls()) {
      Host* to = nullptr;
      for (auto& t : hosts_) {
        if (t->nat == Nat::kNone && t->inner == pp.to_addr && !t->Stalled(now_)) to = t.get();
      }
      if (to == nullptr) {
        h.swim->PushPullFailed(pp.to_addr, now_);
        continue;
      }
      PushPull resp = to->swim->HandlePushPullRequest(pp.request, now_);
      Outputs(*to);
      h.swim->HandlePushPullResponse(resp, now_);
    }
    for (Event& e : h.swim->TakeEvents()) h.events.push_back(e);
  }

  // One host's turn in this millisecond, as the agent's loop: due timers, then the socket.
  void Turn(Host& h) {
    if (!h.swim || h.Stalled(now_)) return;
    if (h.swim->NextDeadline() <= now_) h.swim->Tick(now_);
    Outputs(h);
    while (!h.inbox.empty() && h.inbox.front().at <= now_) {
      Delivery d = std::move(h.inbox.front());
      h.inbox.pop_front();
      Handle(h, d);
      Outputs(h);
    }
  }

  void RunUntil(TimeMs until) {
    for (; now_ <= until; ++now_) {
      for (auto& h : hosts_) Turn(*h);
    }
    now_ = until;
  }

  int EventsAbout(const std::string& name, Event::Kind kind) const {
    int n = 0;
    for (const auto& h : hosts_) {
      for (const Event& e : h->events) n += e.member.name == name && e.kind == kind;
    }
    return n;
  }
  void ClearEvents() {
    for (auto& h : hosts_) h->events.clear();
  }
  TimeMs now() const { return now_; }
  std::vector<std::unique_ptr<Host>> hosts_;

 private:
  TimeMs one_way_;
  TimeMs now_ = 0;
};

// The netbed_nat_joins layout: p1, p2 public, n3, n4 behind cone NAT, n5 behind symmetric NAT,
// lan profile, 10 ms one way; everyone joins p1 within the first second (seeded order).
struct Bed {
  TimedWire w{10};
  explicit Bed(uint64_t seed) {
    std::mt19937_64 rng(seed);
    w.Add("p1", Nat::kNone, Config::Lan());
    w.Add("p2", Nat::kNone, Config::Lan());
    w.Add("n3", Nat::kCone, Config::Lan());
    w.Add("n4", Nat::kCone, Config::Lan());
    w.Add("n5", Nat::kSymmetric, Config::Lan());
    std::map<TimeMs, std::string> starts;
    for (const char* n : {"p2", "n3", "n4", "n5"}) starts[static_cast<TimeMs>(rng() % 1000)] = n;
    for (const auto& [at, name] : starts) {
      w.RunUntil(at);
      w.Get(name).Join({"10.0.0.1:7950"}, w.now());
      w.Outputs(*w.Find(name));
    }
  }
};

// Stalls on every host from 2 s on: in each 200 ms slot with probability pct %, one of 50 to
// 50 + max_ms ms (then the next slot after it).
void Stalls(Bed* b, uint64_t seed, uint64_t pct, TimeMs max_ms) {
  std::mt19937_64 rng(seed * 7919);
  for (auto& h : b->w.hosts_) {
    for (TimeMs t = 2000; t < 60000; t += 200) {
      if (rng() % 100 < pct) {
        const TimeMs len = 50 + static_cast<TimeMs>(rng() % static_cast<uint64_t>(max_ms));
        h->stalls.emplace_back(t, t + len);
        t += len;
      }
    }
  }
}

// Suspect and failed events about anyone (or about `name`), with who reported them.
std::vector<std::string> Flaps(const TimedWire& w, const std::string& name = "") {
  std::vector<std::string> out;
  for (const auto& h : w.hosts_) {
    for (const Event& e : h->events) {
      if ((e.kind == Event::Kind::kSuspect || e.kind == Event::Kind::kFailed) &&
          (name.empty() || e.member.name == name)) {
        out.push_back(h->name + (e.kind == Event::Kind::kFailed ? " failed " : " suspects ") +
                      e.member.name + " at " + std::to_string(e.member.state_change));
      }
    }
  }
  return out;
}

TEST_CASE("nat timing: hosts behind NAT that start within a second, 20 ms apart, stay unsuspected",
          "[membership][nat][timing]") {
  // With a round trip of 20 ms, a member behind NAT can miss another's move (to its reflexive
  // address, or to a relay): the news went out while it sat at its own inner address, or
  // gossip's budget was spent first. It then probes the old address, and once the unconfirmed
  // grace is over (5 probe intervals) it suspected a live member, 7-13 s after the start (7 of
  // 200 seeds here; 1 of 10 runs on the namespace bed). Intermediaries now ping the target where
  // they know it and send the origin their newer alive message for it.
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    CAPTURE(seed);
    Bed b(seed);
    b.w.RunUntil(60000);
    CHECK(Flaps(b.w).empty());
    for (auto& h : b.w.hosts_) {
      for (auto& o : b.w.hosts_) {
        const Member* m = h->swim->Find(o->name);
        REQUIRE(m != nullptr);
        CHECK(m->addr == o->swim->config().addr);
        CHECK(m->meta.relay == o->swim->Find(o->name)->meta.relay);
      }
    }
  }
}

TEST_CASE("nat timing: processes stalled for up to 0.8 s make no one suspect anyone",
          "[membership][nat][timing]") {
  // Every host gets no CPU for 50-800 ms now and then (2 % of 200 ms slots): what a busy
  // machine does to the agents. A stalled prober's timers fire late, before it reads the acks
  // that came meanwhile; a stalled relay holds every probe of its member. Neither is evidence
  // that the probed member is down.
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    Bed b(seed);
    Stalls(&b, seed, 2, 750);
    b.w.RunUntil(60000);
    const std::vector<std::string> flaps = Flaps(b.w);
    CAPTURE(flaps);
    CHECK(flaps.empty());
  }
}

TEST_CASE("nat timing: a stalled relay makes no one suspect its member; a dead member is found",
          "[membership][nat][relay][timing]") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    Bed b(seed);
    b.w.RunUntil(15000);
    const std::string relay = b.w.Get("n5").relay();
    REQUIRE(!relay.empty());
    // 1.5 s without CPU: its own peers may suspect the relay, but not the member behind it
    // (whose probes through the relay go unanswered, and which may take another relay).
    b.w.Find(relay)->stalls.emplace_back(20000, 21500);
    b.w.RunUntil(40000);
    const std::vector<std::string> flaps = Flaps(b.w, "n5");
    CAPTURE(relay, flaps);
    CHECK(flaps.empty());
    // The member stops for good: its relay, which every probe of it asks too, does not hear
    // from it either and says so; everyone suspects it and declares it failed.
    b.w.Find("n5")->stalls.emplace_back(40000, 1000000);
    b.w.RunUntil(60000);
    for (auto& h : b.w.hosts_) {
      if (h->name == "n5") continue;
      CAPTURE(h->name);
      CHECK(h->swim->Find("n5")->status == Status::kFailed);
    }
  }
}

TEST_CASE("nat timing: a relayed member whose relay died too is still found failed",
          "[membership][nat][relay][timing]") {
  Bed b(3);
  b.w.RunUntil(15000);
  const std::string relay = b.w.Get("n5").relay();
  REQUIRE(!relay.empty());
  for (const std::string& name : {relay, std::string("n5")}) {
    b.w.Find(name)->stalls.emplace_back(20000, 1000000);
  }
  // The relay is found failed first (its suspicion times out); from then on probes of n5 count.
  b.w.RunUntil(80000);
  for (auto& h : b.w.hosts_) {
    if (h->name == "n5" || h->name == relay) continue;
    CAPTURE(h->name);
    CHECK(h->swim->Find(relay)->status == Status::kFailed);
    CHECK(h->swim->Find("n5")->status == Status::kFailed);
  }
}

}  // namespace
}  // namespace meshtrain::membership
