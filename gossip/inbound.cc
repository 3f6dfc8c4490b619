#include "gossip/inbound.h"

namespace meshtrain::gossip {

Inbound::Inbound(const Codec* codec) : codec_(codec) {}

std::optional<Datagram> Inbound::OnDatagram(const uint8_t* data, size_t len,
                                            const std::string& from_addr, double now_s,
                                            uint64_t wall_ms) {
  // Cheapest checks first: the per-source budget, then decoding, then replay.
  if (!source_limiter_.Allow(from_addr, now_s)) {
    rejects_.add(Reject::kRateLimited);
    return std::nullopt;
  }
  Reject why{};
  auto dg = codec_->DecodeDatagram(data, len, &why);
  if (!dg) {
    rejects_.add(why);
    return std::nullopt;
  }
  if (!replay_guard_.Check(*dg, wall_ms)) {
    rejects_.add(Reject::kReplay);
    return std::nullopt;
  }
  return dg;
}

std::optional<Frame> Inbound::OnFrame(const uint8_t* data, size_t len) {
  Reject why{};
  auto frame = codec_->DecodeFrame(data, len, &why);
  if (!frame) rejects_.add(why);
  return frame;
}

}  // namespace meshtrain::gossip
