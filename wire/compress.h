// Compressed parameter transfers (`--compress`): pure encoders and decoders between a float vector
// and the ParamChunks of one transfer. No I/O, no clocks; the node core (node/) keys transfers by
// the last snapshot each receiver acknowledged, the codec (wire/codec.cc) verifies what arrives.
//
// Schemes (ParamChunk::encoding, per chunk):
//   none  - 32-bit floats (4 bytes a value).
//   fp16  - IEEE binary16, round to nearest even, saturating at +-65504 (2 bytes a value).
//   int8  - blockwise: each block of kInt8Block values of a chunk has one float scale
//           (max |v| / 127); a value is round(v / scale) in [-127, 127] (1 byte a value plus
//           4 bytes a block). Error per value <= scale / 2.
//   sparse - lossless, for chunks whose values are mostly exactly 0 and whose nonzero values
//           take few distinct floats (e.g. top-k pseudo-gradients quantized to a few levels,
//           written by an external trainer): `book` holds the distinct nonzero values in
//           ascending order (finite, at most kSparseBook; none in a chunk of zeros, which sends
//           no field at all), `gaps` the positions of the nonzero values as LEB128 varints (the
//           first position itself, then each position minus the previous one minus 1), and
//           `codes` one index into `book` a nonzero value, packed at SparseBits() bits from the
//           lowest bit of each byte up (unused bits of the last byte 0). -0.0 counts as zero: it
//           arrives as +0.0. 4 bytes a book value, 1 to 3 a position and 1 to 8 bits a code. A
//           chunk that does not fit (more distinct values, a value not finite, or a sparse form
//           no smaller than its int8 form) goes as int8, so that ordinary models cost what int8
//           costs.
//   topk  - the k = ceil(F * n) values of largest magnitude as (index, float) pairs; the rest is 0.
//           Error feedback comes from keying: what was not sent stays in the difference between
//           the sender's model and the receiver's reference, so a later round sends it.
// A transfer is either a full snapshot (base 0) or the change since the reference `base` (the
// round id of the last transfer the receiver acknowledged); the receiver adds the decoded change to
// its copy of that reference. Both sides hold the same reference: the sender keeps exactly what
// the receiver reconstructs (the decoded values, not its own exact ones).
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "wire/messages.h"

namespace meshtrain::wire {

enum class Encoding : uint8_t { kNone = 0, kFp16 = 1, kInt8 = 2, kTopK = 3, kSparse = 4 };
constexpr uint8_t kMaxEncoding = 4;
constexpr uint32_t kInt8Block = 256;
// sparse: at most this many distinct nonzero values a chunk (a code fits one byte).
constexpr uint32_t kSparseBook = 256;
// sparse: the bits of a code for a book of `book` values (1, 2, 4 or 8).
constexpr uint32_t SparseBits(size_t book) {
  return book <= 2 ? 1 : book <= 4 ? 2 : book <= 16 ? 4 : 8;
}

struct CompressSpec {
  Encoding kind = Encoding::kNone;
  double topk_fraction = 0.01;  // topk: share of values sent, in (0, 0.5]
};

// The schemes' names (--compress, the config file, status), in the order help and errors list
// them; topk takes its fraction after a colon: "topk:F".
inline constexpr std::array<std::pair<std::string_view, Encoding>, 5> kEncodingNames = {{
    {"none", Encoding::kNone},
    {"fp16", Encoding::kFp16},
    {"int8", Encoding::kInt8},
    {"sparse", Encoding::kSparse},
    {"topk", Encoding::kTopK},
}};

// "none", "fp16", "int8", "sparse" or "topk:F" (0 < F <= 0.5); the error names the accepted
// values.
Result<CompressSpec> ParseCompress(const std::string& text);
// The inverse of ParseCompress (topk's fraction as %g).
std::string CompressName(const CompressSpec& spec);
// The accepted values for a message or --help: "none, fp16, int8, sparse or topk:F".
std::string CompressChoices();

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

// One transfer's chunks, and what the receiver will hold after decoding them (`decoded`: the
// values added to the reference, or the full model when base == 0).
struct EncodedTransfer {
  std::vector<ParamChunk> chunks;
  std::vector<float> decoded;
  uint64_t wire_bytes = 0;  // payload bytes of all chunks (values, scales, indices)
};

// Encodes `values` (a full model, or the change since a reference when base != 0) with `spec`.
// Chunks carry round, step and base; a top-k chunk whose (index, value) pairs would be larger than
// its float form is sent as floats, a sparse chunk that does not fit as int8. Empty when `values`
// is empty or longer than 2^32-1.
EncodedTransfer EncodeTransfer(const std::vector<float>& values, const CompressSpec& spec,
                               uint64_t round, uint64_t step, uint64_t base,
                               uint32_t chunk_floats = kParamChunkFloats);

// Streamed full snapshots: a transfer whose chunks are encoded one at a time, as the
// connection drains, from one shared snapshot, so no encoded copy of the whole model exists and
// every receiver gets the same bytes. none, fp16, int8 and sparse stream (each chunk is encoded
// on its own); top-k does not (its threshold is over the whole change, against a per-receiver
// reference: EncodeTransfer). Streamed chunks are unkeyed: the receiver keeps no reference and
// mixes them as they arrive; quantization error does not accumulate, as every transfer carries
// the whole model rather than a change.
bool Streamable(const CompressSpec& spec);
// A transfer may carry one fragment [begin, end) of the model (DiLoCo's streaming fragments);
// end = 0: the whole model.
struct StreamSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
};
uint32_t StreamChunks(uint32_t total, uint32_t chunk_floats = kParamChunkFloats,
                      StreamSpan span = {});
// Chunk `index` of the snapshot `params[0, total)` (or of its fragment `span`), encoded with
// spec (top-k: int8). A plain (none) chunk points into `params` (ParamChunk::view): encode it
// while they live.
ParamChunk EncodeStreamChunk(const float* params, uint32_t total, uint32_t index,
                             const CompressSpec& spec, uint64_t round, uint64_t step,
                             uint32_t chunk_floats = kParamChunkFloats, StreamSpan span = {});
// Payload bytes (ChunkWireBytes) of all the chunks EncodeStreamChunk makes of the snapshot
// `params[0, total)` (or of its fragment `span`). A sparse chunk's size depends on its values:
// they are scanned as EncodeStreamChunk scans them (one pass over the span), the other schemes'
// sizes follow from the counts alone.
uint64_t StreamWireBytes(const float* params, uint32_t total, const CompressSpec& spec,
                         uint32_t chunk_floats = kParamChunkFloats, StreamSpan span = {});
// The same without the values: exact for none, fp16 and int8; for sparse, the int8 size, which
// bounds it (a chunk is sent sparse only when that is smaller).
uint64_t StreamWireBytes(uint32_t total, const CompressSpec& spec,
                         uint32_t chunk_floats = kParamChunkFloats, StreamSpan span = {});

// Payload bytes of one chunk as sent (what the codec writes besides the fixed header fields).
uint64_t ChunkWireBytes(const ParamChunk& c);
// Copies values the codec left in their frame (ParamChunk::held) into the chunk's vectors and
// drops the frame; nothing for a chunk without held values.
void MaterializeChunk(ParamChunk* c);

// Checks a received chunk's encoded fields (counts, block scales finite and >= 0, fp16 values
// finite, top-k indices strictly ascending and below `count`, values finite; sparse: a book of at
// most kSparseBook finite nonzero values in strictly ascending order, canonical varints of at most
// 5 bytes, positions below `count`, one code a position, each below the book's size, unused bits
// 0) and replaces them by `count` dense floats in `data`; `encoding` stays as a record. A chunk
// that is already dense is only checked, so calling it twice is harmless. False: the chunk is
// malformed.
bool ExpandChunk(ParamChunk* c);
// The same checks, but an int8 chunk whose every scale is at most kMaxCompactScale (so that no
// value q * scale can overflow) stays int8 in `q` and `scales`: the receiver folds it from its
// quarter-size form (learn::RunningSum::FoldInt8) instead of writing and reading four bytes a
// value. Other chunks are expanded as by ExpandChunk. Sets `expanded` when true.
constexpr float kMaxCompactScale = std::numeric_limits<float>::max() / 128;  // exact
bool CheckChunk(ParamChunk* c);
// out[i] = q[i] * scales[i / kInt8Block] for i < q.size(): an int8 chunk's values; false if
// some q[i] is -128 (outside what the encoder makes; a checked chunk has none).
bool DequantizeInt8Chunk(const std::vector<int8_t>& q, const std::vector<float>& scales,
                         float* out);
// The same for n values at q with (n + kInt8Block - 1) / kInt8Block scales at `scales`.
bool DequantizeInt8Chunk(const int8_t* q, const float* scales, uint32_t n, float* out);

}  // namespace meshtrain::wire
