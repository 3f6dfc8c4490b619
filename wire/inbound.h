// The one inbound path for untrusted bytes (docs/contract.md "Wire format"). Every datagram passes,
// in this order: size limit -> per-source rate limit (wire/source_rate_limiter.h) -> decode
// (Codec::DecodeDatagram: marker/AEAD, Verifier, version, cluster, semantic checks including
// UTF-8) -> replay guard (wire/replay_guard.h) -> a plain Datagram. Every frame: size limit ->
// Codec::DecodeFrame -> a plain Frame. Each rejection is counted by reason in this object's
// RejectCounters; checks the caller makes later (a frame of the wrong kind for its connection,
// parameters from a non-member) are counted through Count() so that one object holds the total
// (docs/contract.md "Output formats", `rejected_packets`).
//
// Pure apart from the codec it borrows: time is an input (monotonic seconds, used by the rate
// limiter and to expire replay-guard sessions). Never throws. Thread-safety: none; one owner
// (the loop thread). The codec must outlive this object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "wire/codec.h"
#include "wire/messages.h"
#include "wire/replay_guard.h"
#include "wire/source_rate_limiter.h"

namespace meshtrain::wire {

struct InboundOptions {
  size_t max_datagram_bytes = kMaxDatagramBytes;
  size_t max_frame_bytes = kMaxFrameBytes;
  SourceRateLimiterConfig rate_limit;
  ReplayGuardConfig replay;
};

class Inbound {
 public:
  explicit Inbound(const Codec* codec, InboundOptions options = {});
  Inbound(const Inbound&) = delete;
  Inbound& operator=(const Inbound&) = delete;

  // A datagram from `from_addr` ("ip:port", the rate limiter's key) received at `now_s`
  // (monotonic seconds). Nullopt, counted, when any check refuses it.
  std::optional<Datagram> OnDatagram(const uint8_t* data, size_t len, const std::string& from_addr,
                                     double now_s);
  // The inner datagram of a relay frame our relay delivered (`via_addr`: where the
  // frame came from): the same checks (at most kMaxRelayInnerBytes; the rate limiter's key is
  // the relay's address marked as relayed), and a relay frame inside is refused (kSemantic,
  // counted in nested()): frames do not nest.
  std::optional<Datagram> OnRelayed(const uint8_t* data, size_t len, const std::string& via_addr,
                                    double now_s);
  uint64_t nested() const { return nested_; }

  // One frame payload (without its length prefix). Nullopt, counted, when refused.
  std::optional<Frame> OnFrame(const uint8_t* data, size_t len);
  // The same for a payload in a buffer `owner` keeps alive (Codec::DecodeFrameHeld: a parameter
  // chunk's values stay there instead of being copied).
  std::optional<Frame> OnFrameHeld(std::shared_ptr<const void> owner, uint8_t* data, size_t len);

  // Counts a rejection decided by the caller after decoding.
  void Count(Reject why) { rejects_.add(why); }

  const RejectCounters& rejects() const { return rejects_; }
  const ReplayGuard& replay_guard() const { return replay_guard_; }
  const SourceRateLimiter& rate_limiter() const { return rate_limiter_; }

 private:
  const Codec* codec_;
  InboundOptions options_;
  SourceRateLimiter rate_limiter_;
  ReplayGuard replay_guard_;
  RejectCounters rejects_;
  uint64_t nested_ = 0;
};

}  // namespace meshtrain::wire
