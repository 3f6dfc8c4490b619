// Capacity probe datagrams and the receiver's rate arithmetic (wire/link_probe.h).
#include "wire/link_probe.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/wire/test_keys.h"
#include "wire/crypto.h"

namespace meshtrain::wire {
namespace {

using testing::NewKey;

ProbeHeader Train(uint64_t id, uint16_t seq, uint16_t count) {
  ProbeHeader h;
  h.cluster = "c1";
  h.id = id;
  h.seq = seq;
  h.count = count;
  return h;
}

TEST_CASE("link probe: datagrams round-trip, plain and sealed", "[gossip][probe]") {
  const ProbeHeader h = Train(0x1234567890abcdefULL, 7, 300);
  const auto plain = EncodeProbe(h, nullptr, kProbeDatagramBytes);
  CHECK(plain.size() == kProbeDatagramBytes);
  CHECK(IsProbeDatagram(plain.data(), plain.size()));
  auto back = DecodeProbe(plain.data(), plain.size(), nullptr, "c1");
  REQUIRE(back);
  CHECK(back->kind == ProbeHeader::Kind::kTrain);
  CHECK(back->id == h.id);
  CHECK(back->seq == 7);
  CHECK(back->count == 300);

  Keyring ring(NewKey());
  ProbeHeader rep = h;
  rep.kind = ProbeHeader::Kind::kReport;
  rep.received = 299;
  rep.rate_bps = 80'000'000;
  const auto sealed = EncodeProbe(rep, &ring, 0);
  CHECK(sealed.size() < 200);  // a report is small: no amplification
  back = DecodeProbe(sealed.data(), sealed.size(), &ring, "c1");
  REQUIRE(back);
  CHECK(back->kind == ProbeHeader::Kind::kReport);
  CHECK(back->received == 299);
  CHECK(back->rate_bps == 80'000'000);

  // No key, another key, unsealed to a keyed agent, another cluster: refused.
  CHECK_FALSE(DecodeProbe(sealed.data(), sealed.size(), nullptr, "c1"));
  Keyring other(NewKey());
  CHECK_FALSE(DecodeProbe(sealed.data(), sealed.size(), &other, "c1"));
  CHECK_FALSE(DecodeProbe(plain.data(), plain.size(), &ring, "c1"));
  CHECK_FALSE(DecodeProbe(plain.data(), plain.size(), nullptr, "c2"));
  CHECK_FALSE(DecodeProbe(sealed.data(), sealed.size(), &ring, "c2"));
  // A rotated-in key still opens what the old primary sealed.
  Keyring rotated(NewKey());
  rotated.Install(ring.Primary());
  CHECK(DecodeProbe(sealed.data(), sealed.size(), &rotated, "c1"));
}

TEST_CASE("link probe: malformed datagrams are refused, never crash", "[gossip][probe]") {
  const auto good = EncodeProbe(Train(1, 0, 10), nullptr, 64);
  CHECK_FALSE(DecodeProbe(nullptr, 0, nullptr, "c1"));
  CHECK_FALSE(DecodeProbe(good.data(), 2, nullptr, "c1"));
  auto bad = good;
  bad[0] = 0x4D;  // an envelope marker
  CHECK_FALSE(DecodeProbe(bad.data(), bad.size(), nullptr, "c1"));
  bad = good;
  bad[1] = 0xff;  // declared header longer than the datagram
  CHECK_FALSE(DecodeProbe(bad.data(), bad.size(), nullptr, "c1"));
  bad = good;
  bad[2] = 0;  // empty header
  bad[1] = 0;
  CHECK_FALSE(DecodeProbe(bad.data(), bad.size(), nullptr, "c1"));
  // Semantic checks.
  for (const ProbeHeader& h : {Train(1, 10, 10), Train(1, 0, 1), Train(1, 0, kProbeMaxCount + 1)}) {
    const auto d = EncodeProbe(h, nullptr, 0);
    CHECK_FALSE(DecodeProbe(d.data(), d.size(), nullptr, "c1"));
  }
  ProbeHeader rep = Train(1, 0, 10);
  rep.kind = ProbeHeader::Kind::kReport;
  rep.received = 11;
  auto d = EncodeProbe(rep, nullptr, 0);
  CHECK_FALSE(DecodeProbe(d.data(), d.size(), nullptr, "c1"));
  // Random bytes behind the marker, and every single-byte corruption of the header.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(1 + rng() % 300);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    junk[0] = kProbeMarker;
    (void)DecodeProbe(junk.data(), junk.size(), nullptr, "c1");
  }
  const size_t header_end = 3 + ((size_t{good[1]} << 8) | good[2]);
  for (size_t i = 1; i < header_end; ++i) {
    auto c = good;
    c[i] ^= 0x5a;
    (void)DecodeProbe(c.data(), c.size(), nullptr, "c1");
  }
}

TEST_CASE("link probe: a train's rate is its bytes over its dispersion", "[gossip][probe]") {
  TrainMeter meter;
  // 100 datagrams of 1242 bytes on the wire, 124.2 us apart: 10 MB/s (80 Mbit/s).
  int64_t t = 1'000'000'000;
  for (uint16_t s = 0; s < 100; ++s) {
    CHECK(meter.Add("a:1", 9, s, 100, 1242, t, 0));
    t += 124'200;
  }
  auto done = meter.Take(0);  // the last datagram finished it
  REQUIRE(done.size() == 1);
  CHECK(done[0].from == "a:1");
  CHECK(done[0].received == 100);
  CHECK(done[0].rate_bps == Approx(10e6).epsilon(1e-6));
  CHECK(meter.idle());

  // Other traffic in between or a sender pause only lowers the figure.
  std::vector<std::pair<int64_t, size_t>> arr;
  for (int i = 0; i < 100; ++i) arr.emplace_back(i * 124'200 + (i >= 50 ? 3'000'000 : 0), 1242);
  CHECK(TrainMeter::Rate(arr) < 10e6 * 0.9);
  // Batches released late (a forwarder's timer) do not raise it past the serialization rate
  // by more than the first datagram's lateness allows.
  arr.clear();
  for (int i = 0; i < 100; ++i) arr.emplace_back((i / 10) * 1'242'000 + (i % 10) * 1000, 1242);
  CHECK(TrainMeter::Rate(arr) <= 10e6 * 1.12);
  // Arrival order does not matter; too few datagrams measure nothing.
  arr.clear();
  for (int i = 9; i >= 0; --i) arr.emplace_back(i * 124'200, 1242);
  CHECK(TrainMeter::Rate(arr) == Approx(10e6).epsilon(1e-6));
}

TEST_CASE("link probe: lost tails finish on the quiet timeout; limits hold", "[gossip][probe]") {
  TrainMeter meter(200'000'000);
  for (uint16_t s = 0; s < 20; ++s) CHECK(meter.Add("a:1", 1, s, 50, 1242, s * 100'000, 0));
  CHECK_FALSE(meter.Add("a:1", 1, 3, 50, 1242, 0, 0));   // duplicate
  CHECK_FALSE(meter.Add("a:1", 1, 21, 60, 1242, 0, 0));  // count changed
  CHECK_FALSE(meter.Add("a:1", 1, 50, 50, 1242, 0, 0));  // seq out of range
  CHECK(meter.Take(100'000'000).empty());
  auto done = meter.Take(200'000'000);
  REQUIRE(done.size() == 1);
  CHECK(done[0].received == 20);
  CHECK(done[0].rate_bps > 0);
  // Fewer than kMinPackets: a report with no rate.
  for (uint16_t s = 0; s < 3; ++s) CHECK(meter.Add("b:1", 2, s, 50, 1242, s * 100'000, 0));
  done = meter.Take(1'000'000'000);
  REQUIRE(done.size() == 1);
  CHECK(done[0].rate_bps == 0);
  // At most kMaxTrains at once.
  for (uint64_t id = 0; id < TrainMeter::kMaxTrains; ++id)
    CHECK(meter.Add("c:1", id, 0, 10, 1, 0, 0));
  CHECK_FALSE(meter.Add("c:1", 99, 0, 10, 1, 0, 0));
}

}  // namespace
}  // namespace meshtrain::wire

namespace meshtrain::wire {
namespace {

// A train of n datagrams from `from`, 124.2 us apart after `first` (ns), sent at `sent`.
TrainMeter::Result Feed(TrainMeter& m, const std::string& from, uint64_t id, int64_t sent,
                        int64_t first, int64_t gap = 124'200, uint16_t n = 64) {
  for (uint16_t s = 0; s < n; ++s) m.Add(from, id, s, n, 1242, first + s * gap, 0, sent);
  auto done = m.Take(0);
  REQUIRE(done.size() == 1);
  return done[0];
}

TEST_CASE("link probe: a train that came late (queued behind a backlog) measures nothing",
          "[gossip][probe]") {
  TrainMeter m;
  // The sender's clock is 300 s ahead: only differences between its trains count.
  const int64_t skew = 300'000'000'000;
  auto r = Feed(m, "a:1", 1, 1'000'000'000 + skew, 1'010'000'000);  // one-way 10 ms
  CHECK_FALSE(r.queued);
  CHECK(r.rate_bps == Approx(10e6).epsilon(1e-6));
  r = Feed(m, "a:1", 2, 2'000'000'000 + skew, 2'011'000'000);  // 1 ms more: queueing noise
  CHECK_FALSE(r.queued);
  // 30 ms late, then squeezed to 4x the rate: a backlog drained in front of it.
  r = Feed(m, "a:1", 3, 3'000'000'000 + skew, 3'040'000'000, 31'050);
  CHECK(r.queued);
  CHECK(r.rate_bps == 0);
  // Another source has its own baseline; the first train of a source sets it.
  r = Feed(m, "b:1", 1, 4'000'000'000, 4'040'000'000);
  CHECK_FALSE(r.queued);
  // Back to normal delay for a: measured again.
  r = Feed(m, "a:1", 4, 5'000'000'000 + skew, 5'010'500'000);
  CHECK_FALSE(r.queued);
  CHECK(r.rate_bps > 0);
}

TEST_CASE("link probe: a train whose first datagrams were held up is measured at its rate",
          "[gossip][probe]") {
  TrainMeter m;
  const int64_t skew = -7'000'000'000;  // the sender's clock is 7 s behind
  auto r = Feed(m, "a:1", 1, 1'000'000'000 + skew, 1'010'000'000);  // one-way 10 ms: baseline
  CHECK(r.rate_bps == Approx(10e6).epsilon(1e-6));
  // A 2 ms backlog in front of a link 4x faster than the sender's, draining while the train
  // queues behind it: the first datagram comes 2 ms late, the next ones catch up (FIFO).
  const int64_t sent = 2'000'000'000;
  std::vector<int64_t> at(64);
  for (size_t k = 0; k < at.size(); ++k) {
    const int64_t unqueued = sent + 10'000'000 + static_cast<int64_t>(k) * 124'200;
    at[k] = k == 0 ? unqueued + 2'000'000 : std::max(unqueued, at[k - 1] + 31'050);
  }
  std::vector<std::pair<int64_t, size_t>> arr;
  for (int64_t a : at) arr.emplace_back(a, 1242);
  CHECK(TrainMeter::Rate(arr) > 10e6 * 1.3);  // the span alone reads it a third too fast
  for (uint16_t s = 0; s < 64; ++s) m.Add("a:1", 2, s, 64, 1242, at[s], 0, sent + skew);
  auto done = m.Take(0);
  REQUIRE(done.size() == 1);
  CHECK_FALSE(done[0].queued);
  CHECK(done[0].rate_bps == Approx(10e6).epsilon(1e-3));
  // A first datagram merely 1 ms slower (path jitter) only lowers the figure.
  r = Feed(m, "a:1", 3, 3'000'000'000 + skew, 3'011'000'000);
  CHECK_FALSE(r.queued);
  CHECK(r.rate_bps < 10e6);
  CHECK(r.rate_bps > 10e6 * 0.8);
}

}  // namespace
}  // namespace meshtrain::wire
