// Bandwidth estimates from transfers and the probe-rate rule (sync/bandwidth_estimate.h).
#include "sync/bandwidth_estimate.h"

#include <catch2/catch.hpp>

namespace meshtrain::sync {
namespace {

TEST_CASE("ConfirmedRate: the largest rate another one confirms", "[sync][bandwidth]") {
  CHECK(ConfirmedRate({}) == 0);
  CHECK(ConfirmedRate({5}) == 5);
  // A 40 Mbit/s host (5 MB/s) whose one train was squeezed to a 160 receiver's rate (20 MB/s).
  CHECK(ConfirmedRate({5, 4.8, 20, 2.3, 4.9}) == 5);
  // A 640 host: two probes to the other 640 host agree; the slower peers bound it lower.
  CHECK(ConfirmedRate({20, 80, 5, 76, 20}) == 80);
  // One fast probe so far, not yet confirmed: the confirmed slower figure stands.
  CHECK(ConfirmedRate({20, 80, 5, 20}) == 20);
  // Nothing confirmed: the smallest.
  CHECK(ConfirmedRate({80, 20}) == 20);
  // At most 1.25x the confirming rate confirms; 1.33x does not (a squeezed train on a
  // 40 Mbit/s host read 53 against the 40 of every other train: CI, test_capacity).
  CHECK(ConfirmedRate({100, 80}) == 100);
  CHECK(ConfirmedRate({53.1, 40.1, 40.0, 39.9}) == 40.1);
  CHECK(ConfirmedRate({100, 75}) == 75);
}

TEST_CASE("BandwidthEstimate: recent peak bounded by the cap", "[sync][bandwidth]") {
  BandwidthEstimate e;
  CHECK(e.CapacityMbps(0) == 0);
  CHECK(e.CapacityMbps(7) == 7);
  e.Add(1e6, 1.0);  // 1 MB/s
  e.Add(4e6, 1.0);  // 4 MB/s
  CHECK(e.CapacityMbps(0) == Approx(4));
  CHECK(e.CapacityMbps(2) == Approx(2));
  e.Add(100, 0.001);  // too small to say anything
  CHECK(e.samples() == 2);
  for (int i = 0; i < 200; ++i) e.Decay(0.9);
  CHECK(e.CapacityMbps(0) == Approx(e.Mbps(0)));
}

}  // namespace
}  // namespace meshtrain::sync
