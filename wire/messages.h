// Plain wire messages (docs/contract.md "Wire format") and the pure helpers around them: limits,
// the structs the codec (wire/codec.h) converts to and from bytes, rejection reasons, name/address
// syntax, parameter chunking and reassembly. No FlatBuffers, libuv or libsodium here: the node core
// (node/) and the simulator use these types without the transport.
//
// Thread-safety: plain values and pure functions; a ParamAssembler has one owner.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "membership/types.h"
#include "wire/crypto.h"

namespace meshtrain::wire {

// Envelope.version. Bumped only for incompatible changes; fields are appended without a bump.
constexpr uint16_t kProtocolVersion = 1;

// UDP payload limit after sealing (docs/contract.md "Wire format"): below the 1500-byte Ethernet
// MTU minus IP/UDP headers, so datagrams never fragment.
constexpr size_t kMaxDatagramBytes = 1400;
constexpr size_t MaxDatagramBytes = kMaxDatagramBytes;  // spelling used by the brief

// Semantic limits on decoded fields.
constexpr size_t kMaxSenderBytes = 64;   // node names (Envelope.sender)
constexpr size_t kMaxClusterBytes = 64;  // cluster labels
constexpr size_t kMaxStringBytes = 256;  // member names and addresses inside messages
constexpr size_t kMaxUpdatesPerDatagram = 64;
constexpr size_t kMaxPushPullMembers = 100000;

// Parameter transfers: a model of `total` floats travels as chunks of at most this many floats,
// so that each chunk fits in one frame together with its envelope and seal.
constexpr uint32_t kParamChunkFloats = 64 * 1024;
constexpr size_t kMaxParamFrameBytes = kParamChunkFloats * sizeof(float) + 1024;
// A push-pull carries the whole member list; memberlist caps its push-pull state at 20 MB.
constexpr size_t kMaxPushPullFrameBytes = size_t{16} << 20;
// The frame payload limit every TCP reader should give its FrameDecoder.
constexpr size_t kMaxFrameBytes =
    kMaxParamFrameBytes > kMaxPushPullFrameBytes ? kMaxParamFrameBytes : kMaxPushPullFrameBytes;

// Bytes of a datagram's envelope beyond what membership::EstimatePacketOverhead counts for the
// packet itself (which includes the sender name), excluding the cluster label and the
// marker/seal. Codec::DatagramOverhead() adds those; codec_test checks the bound.
constexpr size_t kEnvelopeOverhead = 64;

// ---- Message structs (besides membership::Packet and membership::PushPull) ----

// PSP barrier sampling (docs/contract.md "Barriers"): "what step are you at?" and its answer.
struct ProgressQuery {
  uint32_t seq = 0;
  uint64_t step = 0;  // the querier's own step
  uint64_t need = 0;  // the step it waits for (0 = none): a peer below it answers again there
};

struct ProgressReply {
  uint32_t seq = 0;  // echoes the query
  uint64_t step = 0;
  bool training = false;  // false: the replier finished training; barriers ignore it
                          // (docs/contract.md "Barriers")
  // Sent when the replier reached the query's `need` (a watcher's answer), not at once: no
  // round trip to measure.
  bool watched = false;
};

// Floats [offset, offset + data.size()) of a model of `total` floats, chunk `chunk` of `chunks`.
// A received chunk's values left in the frame buffer they arrived in (not on the wire): `hold`
// keeps that buffer alive; `f` points at `n` floats, or `q` at `n` int8 values with `ns` scales
// (one a block, once checked) at `s`. Empty (no hold) when the values are in the owner's vectors.
struct HeldValues {
  std::shared_ptr<const void> hold;
  const float* f = nullptr;
  const int8_t* q = nullptr;
  const float* s = nullptr;
  uint32_t n = 0;
  uint32_t ns = 0;
  explicit operator bool() const { return hold != nullptr; }
};

struct ParamChunk {
  uint64_t round = 0;  // sender's transfer counter; all chunks of one snapshot share it
  uint64_t step = 0;   // sender's step when it snapshotted the parameters
  uint32_t chunk = 0;
  uint32_t chunks = 0;
  uint32_t total = 0;
  uint32_t offset = 0;
  std::vector<float> data;
  // Compressed transfers (wire/compress.h; appended fields, absent in plain float chunks).
  uint8_t encoding = 0;        // wire::Encoding of this chunk
  uint64_t base = 0;           // 0: values of the model; else the change since the reference `base`
  uint32_t count = 0;          // values this chunk covers (== data.size() once expanded)
  std::vector<uint16_t> half;  // fp16
  std::vector<int8_t> q;       // int8, with one scale a block
  std::vector<float> scales;   // int8
  std::vector<uint32_t> idx;   // topk: indices into the chunk, with their values in `data`
  bool final = false;          // the sender's final model (appended field; every chunk of it)
  // The sender keeps a reference of this transfer (top-k); the receiver keeps one too. Unkeyed
  // full snapshots are mixed chunk by chunk (appended field).
  bool keyed = false;
  bool consensus = false;  // the consensus model at the end of training (appended field)
  // The transfer covers one fragment of the model, not all of it (streaming fragments; appended
  // field): its `chunks` cover less than `total`.
  bool fragment = false;
  // With `consensus`: how many participants' final models it averages (0: not said; appended).
  uint32_t covers = 0;
  // sparse (appended fields): the distinct nonzero values in ascending order, the positions of
  // the nonzero values as LEB128 gaps, and one index into `book` a position, packed.
  std::vector<float> book;
  std::vector<uint8_t> gaps;
  std::vector<uint8_t> codes;
  uint64_t wire_bytes = 0;  // set by the receiver's codec: payload bytes as received
  // Not on the wire: a sender's plain chunk may point at its values in a snapshot it holds until
  // the frame is encoded, instead of copying them into `data` (view[0, count); `data` empty).
  const float* view = nullptr;
  // Not on the wire: a receiver's codec that was handed the frame buffer leaves a plain chunk's
  // floats, or an int8 chunk's q and scales, there (`data`, `q` and `scales` then stay empty).
  HeldValues held;
  // Not on the wire: the receiver's codec checked this chunk (CheckChunk) and left it dense in
  // `data`, or int8 in `q` and `scales` with every value known finite; a second CheckChunk or
  // ExpandChunk does not scan the values again.
  bool expanded = false;
};

// Receipt of a whole parameter snapshot (all chunks of `round`), sent back by the receiver.
struct ParamAckMsg {
  uint64_t round = 0;
  uint64_t step = 0;
  // The transfer was a change against a reference this receiver does not hold (it restarted, or
  // an earlier acknowledgement was lost): nothing was mixed; the sender sends a full snapshot next.
  bool need_full = false;
};

// Join with state: a fresh node asks a peer for its current model over TCP; the peer
// answers on that connection with the chunks of a full snapshot, or closes.
struct StateRequestMsg {
  uint64_t step = 0;
};

struct PushPullMsg {
  bool response = false;  // false: a request (the receiver answers with its own state)
  membership::PushPull state;
};

// Cluster key rotation (`meshtrain keys`, memberlist/Serf style), TCP only. A KeyOp is applied by
// every agent that can open it: any holder of an installed key may rotate keys, as in Serf.
enum class KeyOpKind : uint8_t { kInstall = 1, kUse = 2, kRemove = 3, kList = 4 };
const char* KeyOpName(KeyOpKind op);  // "install", "use", "remove", "list"

struct KeyOpMsg {
  KeyOpKind op = KeyOpKind::kList;
  std::optional<Key> key;  // required for install/use/remove, absent for list
  uint32_t seq = 0;        // echoed by the reply
};

// A KeyOp's answer. Keys are reported as KeyFingerprint()s, never in the clear: unlike Serf's
// `keys -list`, a listing is then safe to print, log and send over the wire, and an operator can
// still compare it with `meshtrain keys --list` elsewhere to see which keys a node holds.
struct KeyOpReplyMsg {
  uint32_t seq = 0;
  bool ok = false;
  std::string error;              // empty when ok; at most kMaxStringBytes
  std::vector<std::string> keys;  // fingerprints of the installed keys, primary first
  std::string primary;            // fingerprint of the primary key; empty if keys is empty
};
constexpr size_t kMaxKeysInReply = 64;

// The semantic checks DecodeFrame applies (EncodeFrame refuses what they refuse): a known op, and
// a key exactly for install/use/remove; an error of at most kMaxStringBytes without control
// characters, at most kMaxKeysInReply unique well-formed fingerprints (kFingerprintChars
// lowercase hex), and a primary that is empty or one of them.
bool ValidKeyOp(const KeyOpMsg& m);
bool ValidKeyOpReply(const KeyOpReplyMsg& m);

// Relays: a datagram for member `dest`, carried through its relay. `inner` is a whole
// datagram (marker, envelope, seal) as its sender encoded it: a relay forwards it as it came,
// and with --encrypt cannot read it. A relay frame rides in an ordinary datagram (authenticated
// with the cluster key like any other), so `inner` is at most kMaxRelayInnerBytes, and never
// itself a relay frame (the receiver refuses nesting).
struct RelayFrame {
  std::string dest;
  std::vector<uint8_t> inner;
};
// The worst case of the wrapping: envelope, sender, cluster label and destination names (64
// bytes each), the inner vector's prefix and padding, and the seal.
constexpr size_t kRelayFrameOverhead = 384;
constexpr size_t kMaxRelayInnerBytes = kMaxDatagramBytes - kRelayFrameOverhead;

// A UDP datagram. For a Packet, the wire carries the sender name once, as `sender`: Packet::from
// is not encoded, and the decoder sets it to `sender`.
struct Datagram {
  std::string sender;
  std::variant<membership::Packet, ProgressQuery, ProgressReply, RelayFrame> body;
  // Sender's wall clock in ms since the Unix epoch. The encoder stamps it from the codec's wall
  // clock (Codec::set_wall_clock) when left 0. Receivers never compare it with their own clock:
  // a ReplayGuard only compares it with the same sender's earlier stamps, to order its sessions.
  uint64_t sent_ms = 0;
  // Replay protection (wire/replay_guard.h): the sender's session (chosen at start) and the
  // datagram's number in it (1, 2, ...). The encoder stamps the codec's session
  // (Codec::set_session) and its next counter when these are left 0. Sealed, both are
  // authenticated; in plaintext anybody can forge them.
  uint64_t session = 0;
  uint64_t counter = 0;

  // Set by the decoder only (the encoder ignores it): the datagram was sealed and opened.
  bool sealed = false;
};

// A TCP frame payload. As for datagrams, PushPull::from travels as `sender`. Frames need no
// replay guard: a stream is authenticated frame by frame and bound to its connection.
struct Frame {
  std::string sender;
  std::variant<PushPullMsg, ParamChunk, KeyOpMsg, KeyOpReplyMsg, ParamAckMsg, StateRequestMsg> body;
  uint64_t sent_ms = 0;  // stamped like Datagram::sent_ms; informational
  uint64_t session = 0;  // stamped like Datagram::session; informational
};

// ---- Rejections ----

enum class Reject : uint8_t {
  kTooLarge = 0,  // above the datagram or frame limit
  kTooSmall,      // cannot even hold a marker and an envelope header
  kAuth,          // wrong marker (plaintext vs. sealed) or AEAD failure (wrong key/cluster)
  kVerify,        // FlatBuffers verification failed, or a required field is missing
  kVersion,       // Envelope.version != kProtocolVersion
  kCluster,       // another cluster's label
  kSemantic,      // well-formed but meaningless or out of range
  // Appended; the codec itself never returns these, its callers count them.
  kReplay,       // a repeated datagram, or one of a closed or older session (replay_guard.h)
  kRateLimited,  // the source exceeded its datagram rate (wire/source_rate_limiter.h)
};
constexpr size_t kNumRejects = 9;

// "too_large", "too_small", "auth", "verify", "version", "cluster", "semantic", "replay",
// "rate_limited".
const char* RejectName(Reject r);

// Per-reason counts of dropped inbound buffers (docs/contract.md "Output formats":
// `rejected_packets` is total()).
struct RejectCounters {
  uint64_t count[kNumRejects] = {};

  void add(Reject r) { ++count[static_cast<size_t>(r)]; }
  uint64_t get(Reject r) const { return count[static_cast<size_t>(r)]; }
  uint64_t total() const;
};

// Strict UTF-8 (RFC 3629 / Unicode 15 Table 3-7): every sequence is the shortest encoding of a
// code point in U+0000..U+10FFFF other than the surrogates U+D800..U+DFFF; no overlongs
// (C0, C1, E0 80..9F, F0 80..8F), no truncated or stray continuation bytes, no F5..FF. Every
// string that arrives from the network, the RPC or a config file must pass it: such strings end
// up in logs and JSON (metrics, RPC replies), and a JSON serializer rejects invalid UTF-8.
bool ValidUtf8(std::string_view s);

// Building blocks of the checks below, for every string that arrives from the network.
// NoControlChars: ValidUtf8, and no control characters (ASCII C0, DEL, and the C1 range
// U+0080..U+009F, which terminals interpret as escape sequences too).
bool NoControlChars(std::string_view s);
bool ValidName(std::string_view s, size_t max);  // 1..max bytes, NoControlChars
bool ValidAddr(std::string_view a);              // ValidWireAddr
bool ValidFingerprint(std::string_view f);       // kFingerprintChars lowercase hex

// Name and label syntax the decoders accept: 1..max bytes, NoControlChars (so valid UTF-8).
bool ValidNodeName(const std::string& name);       // max kMaxSenderBytes
bool ValidClusterLabel(const std::string& label);  // max kMaxClusterBytes
// Operator tags: at most kMaxTags, keys 1..kMaxTagKeyBytes of [A-Za-z0-9_.-], values
// 0..kMaxTagValueBytes NoControlChars, at most kMaxTagTotalBytes of keys and values together
// (they ride in alive updates, which must fit a datagram), sorted by key with no duplicates.
constexpr size_t kMaxTags = 8;
constexpr size_t kMaxTagKeyBytes = 32;
constexpr size_t kMaxTagValueBytes = 64;
constexpr size_t kMaxTagTotalBytes = 256;
bool ValidTags(const std::vector<std::pair<std::string, std::string>>& tags);
// "a.b.c.d:port" or "[ipv6]:port" with a numeric address and port 1..65535.
bool ValidWireAddr(const std::string& addr);

// ---- Parameter chunking ----

// Splits a model into ParamChunks of at most `chunk_floats` floats (clamped to
// 1..kParamChunkFloats). Empty when `params` is empty or longer than 2^32-1 floats.
// The header of chunk `i` of a model of `total` floats cut into chunks of `chunk_floats`
// (offset i * chunk_floats); `*len` = the floats it covers. With a fragment [begin, end) of the
// model (end > 0; streaming fragments) only that range is cut: offset
// begin + i * chunk_floats, `chunks` of the range, and ParamChunk::fragment set.
ParamChunk ParamChunkHeader(uint64_t round, uint64_t step, uint32_t i, uint32_t total,
                            uint32_t chunk_floats, uint32_t* len, uint32_t begin = 0,
                            uint32_t end = 0);
std::vector<ParamChunk> SplitParams(const std::vector<float>& params, uint64_t round, uint64_t step,
                                    uint32_t chunk_floats = kParamChunkFloats);

// Reassembles the chunks of one sender's transfers into whole models. A chunk of a newer round
// discards an unfinished older round (the sender moved on). Chunk 0 of an older round starts a
// new transfer too (the sender restarted and counts rounds from 0 again); other chunks of older
// rounds, duplicates, and chunks whose geometry disagrees with the first chunk of their round
// are ignored. A model completes only if its chunks tile [0, total) exactly.
// Thread-safety: none; one per sender, owned by the loop thread.
class ParamAssembler {
 public:
  struct Model {
    uint64_t round = 0;
    uint64_t step = 0;
    uint64_t base = 0;   // ParamChunk::base shared by every chunk of the round
    bool keyed = false;  // some chunk was compressed or a change: the sender keeps a reference
    std::vector<float> params;
    bool final = false;      // the sender's final model (ParamChunk::final of its chunks)
    bool consensus = false;  // the consensus model (ParamChunk::consensus of its chunks)
    uint32_t covers = 0;     // ParamChunk::covers of its chunks (the largest)
  };

  // The complete model once `chunk` was its last missing piece; nullopt otherwise.
  std::optional<Model> Add(const ParamChunk& chunk);
  // Drops a partial transfer (e.g. when the connection it came on closed).
  void Reset();
  bool in_progress() const { return active_; }

 private:
  bool active_ = false;
  bool have_round_ = false;
  uint64_t round_ = 0;
  uint64_t step_ = 0;
  uint64_t base_ = 0;
  bool keyed_ = false;
  bool final_ = false;
  bool consensus_ = false;
  uint32_t covers_ = 0;
  uint32_t chunks_ = 0;
  uint32_t total_ = 0;
  uint32_t received_ = 0;
  std::vector<bool> seen_;                            // by chunk index
  std::vector<std::pair<uint32_t, uint32_t>> spans_;  // (offset, len) of received chunks
  std::vector<float> params_;
};

}  // namespace meshtrain::wire
