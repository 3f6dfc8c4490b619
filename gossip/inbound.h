// The one inbound path of the agent (SPEC §4): every datagram passes the size limit, the
// per-source rate limit, decoding (authentication, FlatBuffers Verifier, semantic checks) and
// the replay guard; every frame the size limit and decoding. What fails is counted by reason and
// dropped; what passes is a plain struct.
// Thread-safety: none; owned by the loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "gossip/codec.h"
#include "gossip/replay_guard.h"
#include "gossip/source_rate_limiter.h"

namespace meshtrain::gossip {

class Inbound {
 public:
  // `codec` must outlive this object. `wall_ms` is the receiver's wall clock for the replay
  // guard.
  explicit Inbound(const Codec* codec);
  Inbound(const Inbound&) = delete;
  Inbound& operator=(const Inbound&) = delete;

  // `now_s`: monotonic seconds (rate limit); `wall_ms`: the receiver's wall clock.
  std::optional<Datagram> OnDatagram(const uint8_t* data, size_t len, const std::string& from_addr,
                                     double now_s, uint64_t wall_ms);
  std::optional<Frame> OnFrame(const uint8_t* data, size_t len);
  // Counts a rejection decided by a later check.
  void Count(Reject why) { rejects_.add(why); }
  const RejectCounters& rejects() const { return rejects_; }

 private:
  const Codec* codec_;
  RejectCounters rejects_;
  ReplayGuard replay_guard_;
  SourceRateLimiter source_limiter_;
};

}  // namespace meshtrain::gossip
