// libFuzzer target: ReplayGuard with tiny caps, driven by an arbitrary schedule of deliveries,
// replays and receiver clock jumps (backwards too).
// Input: 4-byte records: sender (of 6), replay id (of 16), sent_ms relative to now (signed
// byte, x8 ms), clock step (0..254 ms forward; 255: 1000 ms back, never below 2 s).
// Oracles: a (sender, id, sent_ms) accepted once is never accepted again; the age and skew
// bounds hold against an independently tracked horizon; memory stays within the caps.
#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "bench/fuzz/fuzz_common.h"
#include "gossip/replay_guard.h"

namespace g = meshtrain::gossip;
using Verdict = g::ReplayGuard::Verdict;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g::ReplayGuardConfig cfg;
  cfg.max_age_ms = 500;
  cfg.max_skew_ms = 100;
  cfg.max_per_sender = 4;
  cfg.max_entries = 12;
  g::ReplayGuard guard(cfg);
  std::set<std::tuple<uint8_t, uint8_t, uint64_t>> accepted;
  uint64_t now = 1000000, horizon = 0;
  for (size_t pos = 0; pos + 4 <= size; pos += 4) {
    const uint8_t* r = data + pos;
    if (r[3] != 255) {
      now += r[3];
    } else if (now >= 2000) {
      now -= 1000;
    }
    horizon = std::max(horizon, now - cfg.max_age_ms);
    const uint8_t sender = r[0] % 6, id_byte = r[1] % 16;
    const uint64_t sent =
        now + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(r[2])) * 8);
    g::ReplayId id{};
    id[0] = id_byte;
    const Verdict v = guard.Admit("n" + std::to_string(sender), id, sent, now);
    if (sent < horizon) {
      FUZZ_CHECK(v == Verdict::kStale);
    } else if (sent > now + cfg.max_skew_ms) {
      FUZZ_CHECK(v == Verdict::kFuture);
    } else {
      FUZZ_CHECK(v != Verdict::kStale && v != Verdict::kFuture);
    }
    if (v == Verdict::kFresh) FUZZ_CHECK(accepted.emplace(sender, id_byte, sent).second);
    FUZZ_CHECK(guard.entries() <= cfg.max_entries);
    FUZZ_CHECK(guard.senders() <= guard.entries());
  }
  return 0;
}
