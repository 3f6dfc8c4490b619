#include "wire/framing.h"

#include <algorithm>

namespace meshtrain::wire {

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
  if (big_ && big_have_ < big_len_) {  // the rest of a large frame first
    const size_t n = std::min(len, big_len_ - big_have_);
    std::copy(data, data + n, big_.get() + BigFrame::kLead + big_have_);
    big_have_ += n;
    data += n;
    len -= n;
    if (len == 0) return;
  }
  // Reclaim the consumed prefix once it dominates the buffer, so a long-lived connection keeps
  // at most about two frames of memory.
  if (start_ > 0 && start_ >= buf_.size() / 2) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  buf_.insert(buf_.end(), data, data + len);
}

uint8_t* FrameDecoder::Space(size_t* len) {
  if (error_ || !big_ || big_have_ >= big_len_) return nullptr;
  *len = big_len_ - big_have_;
  return big_.get() + BigFrame::kLead + big_have_;
}

void FrameDecoder::Commit(size_t n) { big_have_ = std::min(big_len_, big_have_ + n); }

BigFrame FrameDecoder::TakeBig() {
  if (!BigReady()) return {};
  BigFrame f{std::move(big_), big_len_};
  big_ = nullptr;
  big_len_ = 0;
  big_have_ = 0;
  return f;
}

std::optional<std::vector<uint8_t>> FrameDecoder::Next() {
  if (error_) return std::nullopt;
  if (big_) {
    if (big_have_ < big_len_) return std::nullopt;
    const BigFrame f = TakeBig();
    return std::vector<uint8_t>(f.data(), f.data() + f.len);
  }
  if (buffered() < kFrameHeaderBytes) return std::nullopt;
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
  if (buffered() < kFrameHeaderBytes + len) {
    // A large frame whose sender has sent a fair part of it (so that a header alone cannot make
    // us allocate the frame): its own buffer from now on. What came of it moves there (less
    // than one read), the rest arrives there (Feed, or a reader's direct read into Space()).
    if (len < kDirectBytes || buffered() - kFrameHeaderBytes < kDirectBytes / 4) {
      return std::nullopt;
    }
    big_.reset(new uint8_t[BigFrame::kLead + len]);  // not zero-filled: it is read into
    big_len_ = len;
    const auto first = buf_.begin() + static_cast<std::ptrdiff_t>(start_ + kFrameHeaderBytes);
    big_have_ = static_cast<size_t>(buf_.end() - first);
    std::copy(first, buf_.end(), big_.get() + BigFrame::kLead);
    buf_.clear();
    start_ = 0;
    return std::nullopt;
  }
  const auto first = buf_.begin() + static_cast<std::ptrdiff_t>(start_ + kFrameHeaderBytes);
  std::vector<uint8_t> payload(first, first + static_cast<std::ptrdiff_t>(len));
  start_ += kFrameHeaderBytes + len;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  }
  return payload;
}

}  // namespace meshtrain::wire
