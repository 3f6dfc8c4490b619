// libFuzzer target: SourceRateLimiter with a tiny source table, driven by an arbitrary schedule
// of sources and clock steps (backwards too).
// Input: 2-byte records: source (of 8), clock step (0..254 ms forward; 255: 50 ms back).
// Oracles: every call is counted once; the table never exceeds its bound; and no source gets
// more than (burst + rate x elapsed time) per time it was (re)admitted to the table.
#include <algorithm>
#include <string>

#include "tests/fuzz/fuzz_common.h"
#include "wire/source_rate_limiter.h"

namespace g = meshtrain::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const g::SourceRateLimiterConfig cfg{100, 5, 4};
  g::SourceRateLimiter limiter(cfg);
  uint64_t allowed[8] = {};
  uint64_t calls = 0;
  double now = 10, latest = 10;
  for (size_t pos = 0; pos + 2 <= size; pos += 2) {
    const uint8_t src = data[pos] % 8;
    if (data[pos + 1] != 255) {
      now += data[pos + 1] / 1000.0;
    } else if (now >= 10.05) {
      now -= 0.05;  // never before the start, which the bound below measures from
    }
    latest = std::max(latest, now);
    ++calls;
    if (limiter.Allow("10.0.0." + std::to_string(src) + ":7950", now)) ++allowed[src];
    FUZZ_CHECK(limiter.sources() <= cfg.max_sources);
    const double admissions = 1.0 + static_cast<double>(limiter.stats().evicted);
    for (uint64_t a : allowed) {
      FUZZ_CHECK(a <= admissions * (cfg.burst + (latest - 10) * cfg.rate) + 1e-6);
    }
  }
  FUZZ_CHECK(limiter.stats().allowed + limiter.stats().dropped == calls);
  return 0;
}
