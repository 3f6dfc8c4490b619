// The wire codec (docs/contract.md "Wire format"): converts the plain message structs of
// membership/types.h and of this header to and from the bytes of one UDP datagram or one TCP frame
// payload (no length prefix; see wire/framing.h), sealing and opening them when a keyring is set
// (wire/crypto.h).
//
// Every inbound buffer passes, in this order, and is rejected with the first failing reason:
//   size limit (kTooLarge / kTooSmall) -> format marker and AEAD (kAuth) -> FlatBuffers Verifier
//   with tight depth/table limits and the "MSHT" file identifier, then null checks of required
//   fields (kVerify) -> version (kVersion) -> cluster label (kCluster) -> semantic checks: known
//   enum and union values, name/address syntax and lengths, vector counts, chunk geometry,
//   finite floats (kSemantic) -> conversion to plain structs.
// Decoders never throw, abort or read outside the buffer; FlatBuffers types stay in the codec*.cc
// files.
// Every string of a decoded message is valid UTF-8 without control characters (NoControlChars)
// or a numeric address (ValidAddr). Around DecodeDatagram the receiver adds two checks of its
// own: a per-source rate limit before it (wire/source_rate_limiter.h, kRateLimited) and a
// replay guard after it (wire/replay_guard.h, kReplay), which needs the session, counter and
// sent_ms the decoder reports; wire/inbound.h runs the whole chain.
//
// Thread-safety: Encode*/Decode* are const and may run concurrently on several threads (the
// keyring is internally synchronized; expected_params and the datagram counter are atomic; the
// wall clock and the session are set before sharing). RejectCounters is a plain value owned by
// one thread (the loop thread).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "membership/types.h"
#include "wire/crypto.h"
#include "wire/messages.h"

namespace meshtrain::wire {

// ---- Codec ----

class Codec {
 public:
  // `keyring` null: plaintext mode. Otherwise every buffer is sealed, and unsealed input is
  // rejected. `cluster` should satisfy ValidClusterLabel.
  Codec(std::string cluster, std::shared_ptr<Keyring> keyring);
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  // The datagram bytes, sealed when a keyring is set; empty if the result would exceed
  // kMaxDatagramBytes (the caller put too much in it).
  std::vector<uint8_t> EncodeDatagram(const Datagram& d) const;
  // One frame payload (without the length prefix), sealed when a keyring is set; empty if the
  // result would exceed max_frame_bytes() or a KeyOp/KeyOpReply fails ValidKeyOp/ValidKeyOpReply.
  std::vector<uint8_t> EncodeFrame(const Frame& f) const;
  // For a plaintext codec and a ParamChunk whose values are a view (ParamChunk::view): the
  // frame's bytes up to those values, so that head + the view's count floats (as bytes) ==
  // EncodeFrame(f); the values are then sent from where they are. Empty otherwise (sealed, no
  // view): use EncodeFrame.
  std::vector<uint8_t> EncodeChunkHead(const Frame& f) const;

  // Nullopt and *why (if non-null) set when the buffer is rejected. `data` need not be aligned.
  std::optional<Datagram> DecodeDatagram(const uint8_t* data, size_t len, Reject* why) const;
  std::optional<Frame> DecodeFrame(const uint8_t* data, size_t len, Reject* why) const;
  // The same for a payload in a buffer `owner` keeps alive: a plaintext envelope suitably
  // aligned there (data + 1 at 8 bytes) is read in place, and a ParamChunk's plain floats or int8
  // values stay in the buffer (ParamChunk::held shares `owner`) instead of being copied out.
  // `data` is wiped where it held a cluster key (a KeyOp).
  std::optional<Frame> DecodeFrameHeld(std::shared_ptr<const void> owner, uint8_t* data, size_t len,
                                       Reject* why) const;

  // Number of floats of the local model; 0 = unknown. When set, a ParamChunk whose total
  // differs is rejected (docs/contract.md "Wire format": tensor sizes must match the local model).
  void set_expected_params(uint32_t n) { expected_params_.store(n, std::memory_order_relaxed); }
  uint32_t expected_params() const { return expected_params_.load(std::memory_order_relaxed); }

  size_t max_frame_bytes() const { return kMaxFrameBytes; }
  // Upper bound of a datagram's bytes beyond EstimatePacketOverhead + sum of EstimateSize:
  // envelope, cluster label and marker/seal. The membership core's
  // Config::packet_overhead_bytes must be at least this.
  size_t DatagramOverhead() const;

  const std::string& cluster() const { return cluster_; }
  bool encrypted() const { return keyring_ != nullptr; }
  const std::shared_ptr<Keyring>& keyring() const { return keyring_; }

  // Envelope.version written by the encoders. Only tests change it, to play a peer that speaks
  // another protocol version.
  void set_send_version(uint16_t v) { send_version_ = v; }

  // Wall clock (ms since the Unix epoch) the encoders stamp into messages whose sent_ms is 0.
  // Receivers only compare it with this sender's earlier stamps (ReplayGuard orders a sender's
  // sessions by it), never with their own clock. Set it before the codec is shared between
  // threads; the clock itself must be thread-safe.
  void set_wall_clock(std::function<uint64_t()> clock) { wall_clock_ = std::move(clock); }

  // This process's session id (non-zero; the agent draws it at random when it starts: the
  // codec never reads a random device). The encoders stamp it into every datagram and frame
  // whose session is 0, and number datagrams 1, 2, ... within it (Datagram::counter). Setting
  // a session restarts the numbering. Unset (0): datagrams go out without a session and a
  // ReplayGuard refuses them. Set it before the codec is shared between threads.
  void set_session(uint64_t session) {
    session_ = session;
    next_counter_.store(1, std::memory_order_relaxed);
  }
  uint64_t session() const { return session_; }

 private:
  std::vector<uint8_t> Wrap(const uint8_t* fb, size_t len) const;
  uint64_t Stamp(uint64_t sent_ms) const;
  // Size, marker/AEAD checks; copies (or decrypts) the envelope into `*storage`, which is
  // suitably aligned for FlatBuffers accessors.
  bool Unwrap(const uint8_t* data, size_t len, size_t max_len, std::vector<uint8_t>* storage,
              Reject* why) const;
  // The frame in the envelope at `env` (len bytes; checked, aligned). `owner` non-null: it keeps
  // the envelope alive and a ParamChunk's values stay there (see DecodeFrameHeld).
  std::optional<Frame> DecodeEnvelope(uint8_t* env, size_t len, std::shared_ptr<const void> owner,
                                      Reject* why) const;

  std::string cluster_;
  std::shared_ptr<Keyring> keyring_;
  std::atomic<uint32_t> expected_params_{0};
  uint16_t send_version_ = kProtocolVersion;
  std::function<uint64_t()> wall_clock_;
  uint64_t session_ = 0;
  mutable std::atomic<uint64_t> next_counter_{1};  // the next datagram's counter
};

}  // namespace meshtrain::wire
