// Streams parameter snapshots (node::SendParams) on TCP connections chunk by chunk, as each
// connection drains. Memory follows the model once: every receiver of a round reads
// the one shared snapshot; chunks are encoded (compression, FlatBuffers, sealing) on libuv's
// thread pool, at most kEncodesInFlight at a time per round, up to kMaxCached chunks ahead of
// each stream, and each encoded chunk is kept while some stream of its round will queue it
// within its next kCacheBytes of chunks, so receivers that keep within that of each other get
// the same bytes from one encoding — a receiver further behind re-encodes its chunks. A connection
// holds at most about kHighWaterBytes queued in user space; the loop thread only moves buffers.
//
// Frames and a graceful close asked for on a connection while it streams go out after the
// stream (a joiner's state transfer ends with a close). A connection that closes ends its stream.
//
// Thread-safety: loop thread only (the encoders run on the pool and report back on the loop).
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "node/node.h"
#include "transport/transport.h"
#include "wire/codec.h"

namespace meshtrain::daemon {

class ParamStreamer {
 public:
  static constexpr size_t kHighWaterBytes = size_t{4} << 20;
  static constexpr size_t kMaxCached = 16;
  static constexpr uint64_t kCacheBytes = uint64_t{32} << 20;  // per round, see Evict
  static constexpr size_t kEncodesInFlight = 4;

  // Installs itself as `tcp`'s drain and close observer.
  ParamStreamer(uv_loop_t* loop, const wire::Codec* codec, transport::TcpHub* tcp);
  ~ParamStreamer();
  ParamStreamer(const ParamStreamer&) = delete;
  ParamStreamer& operator=(const ParamStreamer&) = delete;

  void Start(transport::TcpHub::ConnId hid, const node::SendParams& s);
  bool Streaming(transport::TcpHub::ConnId hid) const { return streams_.count(hid) > 0; }
  // While `hid` streams: a frame to send after it, or a graceful close after it.
  void After(transport::TcpHub::ConnId hid, transport::Bytes frame);
  void CloseAfter(transport::TcpHub::ConnId hid);
  // Drops the stream on `hid` (the connection is aborted or closed).
  void Cancel(transport::TcpHub::ConnId hid);

  size_t active() const { return streams_.size(); }
  uint64_t chunks_encoded() const { return encoded_; }
  uint64_t chunks_sent() const { return sent_; }
  uint64_t encode_failures() const { return failures_; }

 private:
  struct Round;
  struct Stream {
    transport::TcpHub::ConnId hid = 0;
    std::shared_ptr<Round> round;
    uint32_t next = 0;  // the next chunk to queue
    std::vector<transport::Bytes> after;
    bool close_after = false;
  };
  std::shared_ptr<Round> RoundFor(const node::SendParams& s);
  void Pump(transport::TcpHub::ConnId hid);
  void Encode(const std::shared_ptr<Round>& round, uint32_t index);
  void OnEncoded(const std::shared_ptr<Round>& round, uint32_t index, transport::OutFrame frame);
  // A plain chunk of a plaintext codec: its frame's head, built here on the loop (a few hundred
  // bytes; the floats are sent from the snapshot). False: encode it on the pool instead.
  bool EncodeHead(const std::shared_ptr<Round>& round, uint32_t index);
  void Evict(Round& round);
  void Finish(Stream& s);

  uv_loop_t* loop_;
  const wire::Codec* codec_;
  transport::TcpHub* tcp_;
  std::map<transport::TcpHub::ConnId, Stream> streams_;
  std::vector<std::weak_ptr<Round>> rounds_;  // rounds with streams, to share their encodings
  std::shared_ptr<int> life_ = std::make_shared<int>(0);  // expired once destroyed
  uint64_t encoded_ = 0, sent_ = 0, failures_ = 0;
};

}  // namespace meshtrain::daemon
