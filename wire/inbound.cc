#include "wire/inbound.h"

namespace meshtrain::wire {

Inbound::Inbound(const Codec* codec, InboundOptions options)
    : codec_(codec),
      options_(options),
      rate_limiter_(options.rate_limit),
      replay_guard_(options.replay) {}

std::optional<Datagram> Inbound::OnDatagram(const uint8_t* data, size_t len,
                                            const std::string& from_addr, double now_s) {
  // Cheapest checks first: a flooding source costs a size test and a hash lookup.
  if (len > options_.max_datagram_bytes) {
    rejects_.add(Reject::kTooLarge);
    return std::nullopt;
  }
  if (!rate_limiter_.Allow(from_addr, now_s)) {
    rejects_.add(Reject::kRateLimited);
    return std::nullopt;
  }
  Reject why = Reject::kVerify;
  auto d = codec_->DecodeDatagram(data, len, &why);
  if (!d) {
    rejects_.add(why);
    return std::nullopt;
  }
  if (!replay_guard_.Check(*d, now_s)) {
    rejects_.add(Reject::kReplay);
    return std::nullopt;
  }
  return d;
}

std::optional<Datagram> Inbound::OnRelayed(const uint8_t* data, size_t len,
                                           const std::string& via_addr, double now_s) {
  if (len > kMaxRelayInnerBytes) {
    rejects_.add(Reject::kTooLarge);
    return std::nullopt;
  }
  auto d = OnDatagram(data, len, via_addr + "/relayed", now_s);
  if (d && std::holds_alternative<RelayFrame>(d->body)) {
    rejects_.add(Reject::kSemantic);
    ++nested_;
    return std::nullopt;
  }
  return d;
}

std::optional<Frame> Inbound::OnFrame(const uint8_t* data, size_t len) {
  if (len > options_.max_frame_bytes) {
    rejects_.add(Reject::kTooLarge);
    return std::nullopt;
  }
  Reject why = Reject::kVerify;
  auto f = codec_->DecodeFrame(data, len, &why);
  if (!f) rejects_.add(why);
  return f;
}

std::optional<Frame> Inbound::OnFrameHeld(std::shared_ptr<const void> owner, uint8_t* data,
                                          size_t len) {
  if (len > options_.max_frame_bytes) {
    rejects_.add(Reject::kTooLarge);
    return std::nullopt;
  }
  Reject why = Reject::kVerify;
  auto f = codec_->DecodeFrameHeld(std::move(owner), data, len, &why);
  if (!f) rejects_.add(why);
  return f;
}

}  // namespace meshtrain::wire
