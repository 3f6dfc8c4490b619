// libFuzzer target: ReplayGuard (wire/replay_guard.h) with tiny caps, driven by an arbitrary
// schedule of deliveries, replays, restarts (new sessions) and receiver time steps.
// Input: 4-byte records:
//   [0] sender (of 6); [1] low 3 bits: session 1..8 (>= 0xF8: session 0, unstamped), bits 4-5:
//   counter high part (x1024, to reach below the window); [2] counter low byte (0 with high
//   part 0: unstamped); [3] low nibble: sent_ms offset within the session (x10 ms; sessions are
//   1 s apart on the sender's clock), high nibble: receiver time step (x0.5 s).
// Oracles: a datagram (sender, session, counter, sent_ms: an exact copy is a replay) is
// accepted at most once; unstamped datagrams are refused
// as such; caps hold; and clock independence: a second guard that sees every sender's stamps
// shifted by its own constant (the sender's clock minutes ahead or behind) gives the same
// verdict every time.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <list>
#include <set>
#include <string>
#include <tuple>

#include "tests/fuzz/fuzz_common.h"
#include "wire/replay_guard.h"

namespace g = meshtrain::wire;
using Verdict = g::ReplayGuard::Verdict;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g::ReplayGuardConfig cfg;
  cfg.max_senders = 4;
  cfg.max_sessions_per_sender = 2;
  cfg.supersede_grace_s = 2;
  cfg.session_idle_s = 20;
  g::ReplayGuard guard(cfg), skewed(cfg);
  constexpr uint64_t kBase = 1700000000000;
  constexpr uint64_t kMinute = 60000;
  std::set<std::tuple<uint8_t, uint64_t, uint64_t, uint64_t>> accepted;
  std::list<uint8_t> lru;  // a model of the guard's sender table, most recent first
  double now = 100;
  for (size_t pos = 0; pos + 4 <= size; pos += 4) {
    const uint8_t* r = data + pos;
    const uint8_t sender = r[0] % 6;
    const uint64_t session = r[1] >= 0xF8 ? 0 : 1 + (r[1] & 7);
    const uint64_t counter = uint64_t{r[2]} + 1024 * ((r[1] >> 4) & 3);
    const uint64_t sent = kBase + 1000 * session + 10 * (r[3] & 0x0f);
    now += 0.5 * (r[3] >> 4);
    const std::string name = "n" + std::to_string(sender);
    const Verdict v = guard.Admit(name, session, counter, sent, now);
    // Sender k's clock runs (k - 3) minutes off: some ahead, some behind.
    const uint64_t shifted = sent + sender * kMinute - 3 * kMinute;
    const Verdict w = skewed.Admit(name, session, counter, shifted, now);
    FUZZ_CHECK(v == w);
    if (session == 0 || counter == 0) FUZZ_CHECK(v == Verdict::kUnstamped);
    if (v != Verdict::kUnstamped) {
      // Forgetting a whole sender (max_senders, LRU) loses its floor, so its datagrams may be
      // accepted again: a residual risk the header states. Track the table to allow exactly that.
      auto at = std::find(lru.begin(), lru.end(), sender);
      if (at != lru.end()) {
        lru.erase(at);
      } else if (lru.size() >= cfg.max_senders) {
        const uint8_t gone = lru.back();
        lru.pop_back();
        for (auto it = accepted.begin(); it != accepted.end();) {
          it = std::get<0>(*it) == gone ? accepted.erase(it) : std::next(it);
        }
      }
      lru.push_front(sender);
    }
    if (v == Verdict::kFresh) FUZZ_CHECK(accepted.emplace(sender, session, counter, sent).second);
    FUZZ_CHECK(guard.senders() <= cfg.max_senders);
    FUZZ_CHECK(guard.sessions() <= cfg.max_senders * cfg.max_sessions_per_sender);
  }
  return 0;
}
