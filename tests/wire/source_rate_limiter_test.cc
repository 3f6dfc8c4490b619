// Per-source datagram rate limiting (wire/source_rate_limiter.h): burst, sustained rate,
// isolation between sources and the bounded source table, in virtual time.
#include "wire/source_rate_limiter.h"

#include <catch2/catch.hpp>
#include <string>

namespace meshtrain::wire {
namespace {

int Burst(SourceRateLimiter& l, const std::string& src, double now, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += l.Allow(src, now) ? 1 : 0;
  return ok;
}

TEST_CASE("rate limit: burst, then the sustained rate", "[gossip][ratelimit]") {
  SourceRateLimiter l;  // 2000/s, burst 500
  CHECK(Burst(l, "10.0.0.1:7950", 100.0, 1000) == 500);
  CHECK(l.stats().dropped == 500);
  // 125 ms later: 250 tokens.
  CHECK(Burst(l, "10.0.0.1:7950", 100.125, 1000) == 250);
  // A long pause refills to the burst, no more.
  CHECK(Burst(l, "10.0.0.1:7950", 200.0, 1000) == 500);
  // A flood of 10 000/s for 10 s gets the rate: 2000/s (plus nothing: the bucket starts empty).
  int allowed = 0;
  for (int ms = 1; ms <= 10000; ++ms) allowed += Burst(l, "10.0.0.1:7950", 200.0 + ms / 1000.0, 10);
  CHECK(allowed >= 19990);
  CHECK(allowed <= 20000);
}

TEST_CASE("rate limit: one flooding source does not starve another", "[gossip][ratelimit]") {
  SourceRateLimiter l({100, 10, 16});
  for (int ms = 0; ms < 1000; ++ms) Burst(l, "6.6.6.6:1", ms / 1000.0, 50);
  int good = 0;
  for (int t = 0; t < 100; ++t) good += l.Allow("10.0.0.2:7950", t / 100.0) ? 1 : 0;
  CHECK(good == 100);  // 100/s offered, 100/s allowed
  CHECK(l.stats().dropped >= 49000);
}

TEST_CASE("rate limit: the source table is bounded, least recently seen goes first",
          "[gossip][ratelimit]") {
  SourceRateLimiter l({1, 2, 4});
  for (int i = 0; i < 4; ++i) REQUIRE(Burst(l, "s" + std::to_string(i), 0, 2) == 2);
  CHECK(l.sources() == 4);
  CHECK_FALSE(l.Allow("s0", 0));  // s0 is now the most recently seen
  CHECK(l.Allow("s4", 0));        // evicts s1
  CHECK(l.sources() == 4);
  CHECK(l.stats().evicted == 1);
  CHECK_FALSE(l.Allow("s0", 0));     // still tracked, still empty
  CHECK(Burst(l, "s1", 0, 5) == 2);  // forgotten: back with a full bucket (evicts s2)
  CHECK(l.stats().evicted == 2);
  CHECK(l.sources() == 4);
  for (int i = 0; i < 1000; ++i) l.Allow("spoof" + std::to_string(i), 0);
  CHECK(l.sources() == 4);
}

TEST_CASE("rate limit: time going backwards refills nothing; rate 0 is unlimited",
          "[gossip][ratelimit]") {
  SourceRateLimiter l({10, 5, 8});
  CHECK(Burst(l, "a", 50, 10) == 5);
  CHECK(Burst(l, "a", 40, 10) == 0);
  CHECK(Burst(l, "a", 50.25, 10) == 2);  // 2.5 tokens
  SourceRateLimiter off({0, 1, 1});
  CHECK(Burst(off, "a", 0, 100000) == 100000);
  CHECK(off.sources() == 0);
}

}  // namespace
}  // namespace meshtrain::wire
