// TCP stream framing (docs/contract.md "Wire format"): every message on a stream is a 4-byte
// big-endian payload length followed by the payload. FrameDecoder reassembles payloads from
// arbitrary read boundaries and refuses a length prefix of 0 or above its limit, so a peer cannot
// make it buffer more than one maximal frame; after such an error the stream is unusable and must
// be closed.
//
// Thread-safety: EncodeFramed is a pure function; a FrameDecoder belongs to one connection and
// one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace meshtrain::wire {

constexpr size_t kFrameHeaderBytes = 4;

// Writes the 4-byte big-endian length prefix of a `len`-byte payload to header[0..3].
void EncodeFrameHeader(size_t len, uint8_t* header);
// Length prefix + payload. The payload must be non-empty and shorter than 4 GiB.
std::vector<uint8_t> EncodeFramed(const uint8_t* payload, size_t len);
std::vector<uint8_t> EncodeFramed(const std::vector<uint8_t>& payload);

// A large frame's payload in the buffer it was read into (never zero-filled, never copied). The
// payload starts kLead bytes in, so that payload + 1 (a plaintext envelope after the codec's
// marker byte) is 16-byte aligned.
struct BigFrame {
  static constexpr size_t kLead = 15;
  std::shared_ptr<uint8_t[]> storage;
  size_t len = 0;
  uint8_t* data() const { return storage.get() + kLead; }
};

class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_frame);

  // Appends bytes read from the stream. Ignored once error() is set.
  void Feed(const uint8_t* data, size_t len);
  // A frame of at least kDirectBytes is assembled in a buffer of its own, which Next() hands over
  // without copying; while one is incomplete, Space() is where the rest of its payload goes (a
  // reader may read straight into it, then Commit() what it wrote: no copy at all), else null.
  static constexpr size_t kDirectBytes = 64 * 1024;
  uint8_t* Space(size_t* len);
  void Commit(size_t n);
  void Feed(const std::vector<uint8_t>& data) { Feed(data.data(), data.size()); }
  // The next complete payload, or nullopt if more bytes are needed or the stream is in error.
  // A large frame is copied out of its buffer here: a reader that can take it as is asks
  // BigReady() first and takes it with TakeBig().
  std::optional<std::vector<uint8_t>> Next();
  bool BigReady() const { return !error_ && big_ && big_have_ == big_len_; }
  BigFrame TakeBig();
  // Sticky: a length prefix was 0 or exceeded max_frame. The connection must be closed.
  bool error() const { return error_; }
  // Bytes received but not yet returned by Next().
  size_t buffered() const { return buf_.size() - start_ + big_have_; }
  size_t max_frame() const { return max_frame_; }

 private:
  size_t max_frame_;
  std::vector<uint8_t> buf_;
  size_t start_ = 0;  // first unconsumed byte of buf_
  bool error_ = false;
  std::shared_ptr<uint8_t[]> big_;  // a large frame (BigFrame layout) while it arrives
  size_t big_len_ = 0;              // its payload's length
  size_t big_have_ = 0;             // bytes of it received
};

}  // namespace meshtrain::wire
