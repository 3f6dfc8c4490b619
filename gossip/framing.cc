#include "gossip/framing.h"

#include <algorithm>

namespace meshtrain::gossip {

void EncodeFrameHeader(size_t len, uint8_t* header) {
  const uint32_t n = static_cast<uint32_t>(len);
  header[0] = static_cast<uint8_t>(n >> 24);
  header[1] = static_cast<uint8_t>(n >> 16);
  header[2] = static_cast<uint8_t>(n >> 8);
  header[3] = static_cast<uint8_t>(n);
}

std::vector<uint8_t> EncodeFramed(const uint8_t* payload, size_t len) {
  std::vector<uint8_t> out;
  out.reserve(kFrameHeaderBytes + len);
  out.resize(kFrameHeaderBytes);
  EncodeFrameHeader(len, out.data());
  out.insert(out.end(), payload, payload + len);
  return out;
}

std::vector<uint8_t> EncodeFramed(const std::vector<uint8_t>& payload) {
  return EncodeFramed(payload.data(), payload.size());
}

FrameDecoder::FrameDecoder(size_t max_frame) : max_frame_(max_frame) {}

void FrameDecoder::Feed(const uint8_t* data, size_t len) {
  if (error_ || len == 0) return;
  // Reclaim the consumed prefix once it dominates the buffer, so a long-lived connection keeps
  // at most about two frames of memory.
  if (start_ > 0 && start_ >= buf_.size() / 2) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  buf_.insert(buf_.end(), data, data + len);
}

std::optional<std::vector<uint8_t>> FrameDecoder::Next() {
  if (error_ || buffered() < kFrameHeaderBytes) return std::nullopt;
  const uint8_t* p = buf_.data() + start_;
  const size_t len = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
  if (len == 0 || len > max_frame_) {
    // The stream cannot be resynchronized: drop everything and make the caller close it.
    error_ = true;
    buf_.clear();
    buf_.shrink_to_fit();
    start_ = 0;
    return std::nullopt;
  }
  if (buffered() < kFrameHeaderBytes + len) return std::nullopt;
  const auto first = buf_.begin() + static_cast<std::ptrdiff_t>(start_ + kFrameHeaderBytes);
  std::vector<uint8_t> payload(first, first + static_cast<std::ptrdiff_t>(len));
  start_ += kFrameHeaderBytes + len;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  }
  return payload;
}

}  // namespace meshtrain::gossip
