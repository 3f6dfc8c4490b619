// Replay protection for datagrams (gossip/replay_guard.h): captured datagrams sent again are
// rejected, the age and skew bounds hold at their exact edges, and memory stays within the caps
// without ever letting a replay through.
#include "gossip/replay_guard.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gossip/codec.h"
#include "gossip/crypto.h"

namespace meshtrain::gossip {
namespace {

using Verdict = ReplayGuard::Verdict;
constexpr uint64_t kT0 = 1700000000000;  // a plausible wall clock, ms since the epoch

std::shared_ptr<Keyring> MakeKeyring() {
  return std::make_shared<Keyring>(*ParseKeyBase64(GenerateKeyBase64()));
}

ReplayId Id(uint64_t n) {
  ReplayId id{};
  for (size_t i = 0; i < 8; ++i) id[i] = static_cast<uint8_t>(n >> (8 * i));
  return id;
}

TEST_CASE("replay: a captured and replayed datagram is rejected", "[gossip][replay]") {
  for (const bool sealed : {false, true}) {
    CAPTURE(sealed);
    uint64_t clock = kT0;
    Codec sender("default", sealed ? MakeKeyring() : nullptr);
    sender.set_wall_clock([&clock] { return clock; });
    Codec receiver("default", sender.keyring());
    ReplayGuard guard;

    const Datagram query{"n1", ProgressQuery{7, 100}};  // sent_ms 0: stamped by the codec
    const auto wire = sender.EncodeDatagram(query);
    REQUIRE_FALSE(wire.empty());

    // Delivered 40 ms later: fresh.
    auto d = receiver.DecodeDatagram(wire.data(), wire.size(), nullptr);
    REQUIRE(d);
    CHECK(d->sent_ms == kT0);
    CHECK(d->sealed == sealed);
    CHECK(guard.Admit(*d, kT0 + 40) == Verdict::kFresh);

    // The attacker captured it and sends the same bytes again, now and later in the window.
    for (const uint64_t later : {uint64_t{41}, uint64_t{5000}, uint64_t{29999}}) {
      d = receiver.DecodeDatagram(wire.data(), wire.size(), nullptr);
      REQUIRE(d);  // the codec alone cannot tell
      CHECK(guard.Admit(*d, kT0 + later) == Verdict::kDuplicate);
    }
    // ...and after the window, when the guard has forgotten it: too old.
    d = receiver.DecodeDatagram(wire.data(), wire.size(), nullptr);
    CHECK(guard.Admit(*d, kT0 + 30001) == Verdict::kStale);
    CHECK(guard.entries() == 0);
    CHECK(guard.stats().duplicate == 3);
    CHECK(guard.stats().stale == 1);

    // The genuine sender asking again a millisecond later is not a replay.
    clock = kT0 + 30001;
    const auto again = sender.EncodeDatagram(query);
    d = receiver.DecodeDatagram(again.data(), again.size(), nullptr);
    REQUIRE(d);
    CHECK(guard.Admit(*d, kT0 + 30002) == Verdict::kFresh);
    if (sealed) {
      // A new seal has a new random nonce, even in the same millisecond.
      const auto twin = sender.EncodeDatagram(query);
      d = receiver.DecodeDatagram(twin.data(), twin.size(), nullptr);
      CHECK(guard.Admit(*d, kT0 + 30002) == Verdict::kFresh);
    }
  }
}

TEST_CASE("replay: a sealed replay cannot be disguised", "[gossip][replay]") {
  const auto keyring = MakeKeyring();
  Codec codec("default", keyring);
  ReplayGuard guard;
  const auto wire = codec.EncodeDatagram(Datagram{"n1", ProgressReply{3, 9, true}, kT0});
  auto d = codec.DecodeDatagram(wire.data(), wire.size(), nullptr);
  REQUIRE(d);
  // The replay id is the nonce that follows the marker.
  CHECK(std::equal(d->replay_id.begin(), d->replay_id.end(), wire.begin() + 1));
  REQUIRE(guard.Check(*d, kT0));
  // Changing the nonce (to get a new replay id) or the sealed sent_ms breaks authentication.
  for (size_t pos : {size_t{1}, size_t{12}, size_t{24}, wire.size() - 1}) {
    auto forged = wire;
    forged[pos] ^= 0x01;
    Reject why{};
    CHECK_FALSE(codec.DecodeDatagram(forged.data(), forged.size(), &why));
    CHECK(why == Reject::kAuth);
  }
}

TEST_CASE("replay: plaintext ids hash the whole envelope", "[gossip][replay]") {
  Codec codec("default", nullptr);
  auto id_of = [&](const Datagram& dg) {
    const auto wire = codec.EncodeDatagram(dg);
    auto d = codec.DecodeDatagram(wire.data(), wire.size(), nullptr);
    REQUIRE(d);
    CHECK_FALSE(d->sealed);
    return d->replay_id;
  };
  const ReplayId base = id_of(Datagram{"n1", ProgressQuery{1, 2}, kT0});
  CHECK(id_of(Datagram{"n1", ProgressQuery{1, 2}, kT0}) == base);  // deterministic
  CHECK(id_of(Datagram{"n2", ProgressQuery{1, 2}, kT0}) != base);
  CHECK(id_of(Datagram{"n1", ProgressQuery{1, 2}, kT0 + 1}) != base);
  CHECK(id_of(Datagram{"n1", ProgressQuery{2, 2}, kT0}) != base);
  CHECK(id_of(Datagram{"n1", ProgressReply{1, 2, false}, kT0}) != base);
}

TEST_CASE("replay: age and skew bounds at their edges", "[gossip][replay]") {
  ReplayGuardConfig cfg;
  cfg.max_age_ms = 30000;
  cfg.max_skew_ms = 10000;
  ReplayGuard guard(cfg);
  const uint64_t now = kT0;
  CHECK(guard.Admit("a", Id(1), now - 30000, now) == Verdict::kFresh);
  CHECK(guard.Admit("a", Id(2), now - 30001, now) == Verdict::kStale);
  CHECK(guard.Admit("a", Id(3), now + 10000, now) == Verdict::kFresh);
  CHECK(guard.Admit("a", Id(4), now + 10001, now) == Verdict::kFuture);
  CHECK(guard.Admit("a", Id(5), 0, now) == Verdict::kStale);  // an unstamped datagram
  CHECK(guard.Admit("a", Id(6), UINT64_MAX, now) == Verdict::kFuture);
  // A receiver clock near 0 or near the end of time does not wrap around.
  ReplayGuard early(cfg);
  CHECK(early.Admit("a", Id(1), 0, 5) == Verdict::kFresh);
  ReplayGuard late(cfg);
  CHECK(late.Admit("a", Id(1), UINT64_MAX, UINT64_MAX - 1) == Verdict::kFresh);
  CHECK(std::string(ReplayVerdictName(Verdict::kDuplicate)) == "duplicate");
}

TEST_CASE("replay: the same id from another sender or time is a different datagram",
          "[gossip][replay]") {
  ReplayGuard guard;
  CHECK(guard.Check("a", Id(1), kT0, kT0));
  CHECK(guard.Check("b", Id(1), kT0, kT0));
  CHECK(guard.Check("a", Id(1), kT0 + 1, kT0));
  CHECK_FALSE(guard.Check("a", Id(1), kT0, kT0 + 1));
  CHECK_FALSE(guard.Check("b", Id(1), kT0, kT0 + 2));
  CHECK(guard.entries() == 3);
  CHECK(guard.senders() == 2);
}

TEST_CASE("replay: a receiver clock stepping back does not reopen the window", "[gossip][replay]") {
  ReplayGuard guard;
  REQUIRE(guard.Check("a", Id(1), kT0, kT0));
  // 31 s later the entry is forgotten...
  CHECK_FALSE(guard.Check("a", Id(2), kT0, kT0 + 31000));
  CHECK(guard.entries() == 0);
  // ...and when the clock is then set back, the horizon stays where it was.
  CHECK(guard.Admit("a", Id(1), kT0, kT0 + 100) == Verdict::kStale);
}

TEST_CASE("replay: memory expires with the window", "[gossip][replay]") {
  ReplayGuard guard;
  for (uint64_t i = 0; i < 1000; ++i) {
    REQUIRE(guard.Check("n" + std::to_string(i % 50), Id(i), kT0 + i, kT0 + i));
  }
  CHECK(guard.entries() == 1000);
  CHECK(guard.senders() == 50);
  CHECK(guard.Check("late", Id(0), kT0 + 40000, kT0 + 40000));
  CHECK(guard.entries() == 1);
  CHECK(guard.senders() == 1);
}

TEST_CASE("replay: the per-sender cap forgets the oldest and keeps rejecting its replays",
          "[gossip][replay]") {
  ReplayGuardConfig cfg;
  cfg.max_per_sender = 8;
  ReplayGuard guard(cfg);
  for (uint64_t i = 0; i < 20; ++i) REQUIRE(guard.Check("a", Id(i), kT0 + i, kT0 + 20));
  CHECK(guard.entries() == 8);
  CHECK(guard.stats().evictions == 12);
  // Replays of forgotten datagrams fall below the sender's floor; remembered ones are duplicates.
  for (uint64_t i = 0; i < 12; ++i) {
    CHECK(guard.Admit("a", Id(i), kT0 + i, kT0 + 21) == Verdict::kEvictedFloor);
  }
  for (uint64_t i = 12; i < 20; ++i) {
    CHECK(guard.Admit("a", Id(i), kT0 + i, kT0 + 21) == Verdict::kDuplicate);
  }
  // The price: a genuine late datagram older than the floor is refused too...
  CHECK(guard.Admit("a", Id(100), kT0 + 5, kT0 + 21) == Verdict::kEvictedFloor);
  // ...but another sender is not affected, and a new one from "a" is fine.
  CHECK(guard.Admit("b", Id(100), kT0 + 5, kT0 + 21) == Verdict::kFresh);
  CHECK(guard.Admit("a", Id(100), kT0 + 25, kT0 + 25) == Verdict::kFresh);
  // (Admitting kT0 + 25 evicted kT0 + 12: the floor is now kT0 + 13.) A new datagram as old as
  // the oldest a full sender holds is accepted once; its copies are then below the floor.
  CHECK(guard.Admit("a", Id(101), kT0 + 12, kT0 + 25) == Verdict::kEvictedFloor);
  CHECK(guard.Admit("a", Id(101), kT0 + 13, kT0 + 25) == Verdict::kFresh);
  CHECK(guard.Admit("a", Id(101), kT0 + 13, kT0 + 25) == Verdict::kEvictedFloor);
  CHECK(guard.entries() == 8 + 1);  // "a" is full, "b" holds one
}

// Random traffic with random replays under small caps: no replay is ever accepted, memory stays
// within the caps, and the genuine datagrams the floors refuse are counted.
TEST_CASE("replay: property — no replay passes under cap pressure", "[gossip][replay]") {
  for (const size_t max_entries : {size_t{64}, size_t{512}, size_t{1} << 16}) {
    CAPTURE(max_entries);
    ReplayGuardConfig cfg;
    cfg.max_age_ms = 2000;
    cfg.max_skew_ms = 500;
    cfg.max_per_sender = 32;
    cfg.max_entries = max_entries;
    ReplayGuard guard(cfg);
    std::mt19937_64 rng(0xBEEF + max_entries);
    struct Sent {
      std::string sender;
      ReplayId id;
      uint64_t sent_ms;
    };
    std::vector<Sent> accepted;
    std::set<std::tuple<std::string, ReplayId, uint64_t>> seen;
    uint64_t now = kT0, genuine = 0, genuine_refused = 0, replays = 0, replays_accepted = 0;
    uint64_t next_id = 0;
    for (int i = 0; i < 50000; ++i) {
      now += rng() % 3;
      if (!accepted.empty() && rng() % 3 == 0) {
        const Sent& s = accepted[rng() % accepted.size()];
        ++replays;
        if (guard.Check(s.sender, s.id, s.sent_ms, now)) ++replays_accepted;
      } else {
        // Senders' clocks are off by up to +-400 ms and datagrams are delayed up to 300 ms.
        Sent s{"n" + std::to_string(rng() % 40), Id(next_id++), now - 300 + rng() % 700};
        ++genuine;
        if (guard.Check(s.sender, s.id, s.sent_ms, now)) {
          REQUIRE(seen.emplace(s.sender, s.id, s.sent_ms).second);
          accepted.push_back(s);
        } else {
          ++genuine_refused;
        }
      }
      REQUIRE(guard.entries() <= max_entries);
      REQUIRE(guard.senders() <= guard.entries() + 1);
    }
    CHECK(replays > 10000);
    CHECK(replays_accepted == 0);
    std::printf(
        "replay property: cap %6zu: %llu genuine, %llu refused by floors, %llu replays, "
        "0 accepted, %llu evictions\n",
        max_entries, static_cast<unsigned long long>(genuine),
        static_cast<unsigned long long>(genuine_refused), static_cast<unsigned long long>(replays),
        static_cast<unsigned long long>(guard.stats().evictions));
    // Genuine datagrams are at most 300 ms late and 400 ms early, well within the age and skew
    // bounds, and younger than what the per-sender cap evicts (a sender's 32 entries span about
    // 2 s at ~ 16 datagrams/s): with room for everyone's window nothing genuine is refused.
    if (max_entries == (size_t{1} << 16)) CHECK(genuine_refused == 0);
  }
}

}  // namespace
}  // namespace meshtrain::gossip
