#include "wire/compress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>

#include "base/finite.h"
#include "base/kernels.h"
#include "base/loop_guard.h"

namespace meshtrain::wire {

std::string CompressChoices() {
  std::string out;
  for (size_t i = 0; i < kEncodingNames.size(); ++i) {
    if (i > 0) out += i + 1 == kEncodingNames.size() ? " or " : ", ";
    out += kEncodingNames[i].first;
    if (kEncodingNames[i].second == Encoding::kTopK) out += ":F";
  }
  return out;
}

Result<CompressSpec> ParseCompress(const std::string& text) {
  CompressSpec spec;
  const size_t colon = text.find(':');
  const std::string_view head = std::string_view(text).substr(0, colon);
  for (const auto& [name, kind] : kEncodingNames) {
    if (head != name || (colon != std::string::npos) != (kind == Encoding::kTopK)) continue;
    spec.kind = kind;
    if (kind != Encoding::kTopK) return spec;
    const std::string f = text.substr(colon + 1);
    char* end = nullptr;
    const double v = f.empty() ? 0 : std::strtod(f.c_str(), &end);
    if (!f.empty() && end == f.c_str() + f.size() && std::isfinite(v) && v > 0 && v <= 0.5) {
      spec.topk_fraction = v;
      return spec;
    }
    return Status::InvalidArgument("invalid --compress \"" + text +
                                   "\": topk takes a fraction F with 0 < F <= 0.5 (topk:0.01)");
  }
  return Status::InvalidArgument("invalid --compress \"" + text + "\": expected " +
                                 CompressChoices());
}

std::string CompressName(const CompressSpec& spec) {
  std::string name = "none";
  for (const auto& [n, kind] : kEncodingNames) {
    if (kind == spec.kind) name = std::string(n);
  }
  if (spec.kind != Encoding::kTopK) return name;
  char buf[48];
  std::snprintf(buf, sizeof(buf), ":%g", spec.topk_fraction);
  return name + buf;
}

// ---- binary16 ---------------------------------------------------------------------------------

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x >= 0x477FF000u) {  // rounds to >= 65520 (or inf/NaN): saturate; NaN stays NaN
    return sign | (x > 0x7F800000u ? 0x7E00u : 0x7BFFu);
  }
  if (x < 0x38800000u) {
    // Below the smallest normal half: let the FPU round. Adding 0.5 (2^-1) puts the value's
    // subnormal-half bits (units of 2^-24) at the bottom of the mantissa of a float in [0.5, 1),
    // rounded to nearest even by the addition itself.
    float v;
    std::memcpy(&v, &x, sizeof(v));
    const float biased = v + 0.5f;
    uint32_t b;
    std::memcpy(&b, &biased, sizeof(b));
    return sign | static_cast<uint16_t>(b - 0x3F000000u);
  }
  // Normal: rebias the exponent (127 -> 15), round the mantissa from 23 to 10 bits to nearest
  // even (a carry into the exponent is correct, also up to the largest finite half).
  const uint32_t odd = (x >> 13) & 1u;
  return sign | static_cast<uint16_t>((x - (112u << 23) + 0xFFFu + odd) >> 13);
}

namespace {

float HalfToFloatSlow(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      x = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 0x1F) {
    x = sign | 0x7F800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

}  // namespace

// A table of all 65536 values (256 KiB, built once, thread-safe static): decoding a model of
// 235k halves costs a load each instead of a branchy conversion (small changes are subnormal
// halves, which need normalising).
float HalfToFloat(uint16_t h) {
  static const std::vector<float> kTable = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < t.size(); ++i) t[i] = HalfToFloatSlow(static_cast<uint16_t>(i));
    return t;
  }();
  return kTable[h];
}

// ---- encoding ---------------------------------------------------------------------------------

namespace {

uint32_t Blocks(uint32_t count) { return (count + kInt8Block - 1) / kInt8Block; }

// Payload bytes of the int8 form of n values: one a value and a float scale a block.
uint64_t Int8Bytes(uint32_t n) { return n + uint64_t{Blocks(n)} * sizeof(float); }

// Bytes of the LEB128 varint of v (7 bits a byte).
uint32_t VarintBytes(uint32_t v) {
  uint32_t bytes = 1;
  for (; v >= 0x80; v >>= 7) ++bytes;
  return bytes;
}

// The sparse form of v[0, n): false when the chunk does not fit it (more than kSparseBook
// distinct nonzero values, a value not finite, or a form no smaller than the int8 form). Both
// the encoder and the size of a streamed transfer (StreamWireBytes) ask this, so that they take
// the same choice. True: *bytes holds the form's payload bytes (ChunkWireBytes), and `c`, when
// given, its book, gaps and codes; `c` is left alone on false.
bool SparseForm(const float* v, uint32_t n, ParamChunk* c, uint64_t* bytes) {
  const uint64_t limit = Int8Bytes(n);
  std::vector<float> book;  // ascending: a binary search finds a value's code
  book.reserve(kSparseBook);
  uint64_t nonzero = 0, gap_bytes = 0;
  uint32_t next = 0;  // the position after the previous nonzero value
  for (uint32_t i = 0; i < n; ++i) {
    const float x = v[i];
    if (x == 0) continue;  // +0.0 and -0.0
    if (!std::isfinite(x)) return false;
    const auto at = std::lower_bound(book.begin(), book.end(), x);
    if (at == book.end() || *at != x) {
      if (book.size() == kSparseBook) return false;
      book.insert(at, x);
    }
    ++nonzero;
    gap_bytes += VarintBytes(i - next);
    next = i + 1;
    // Each nonzero value costs a gap byte and a bit at least: a dense chunk of few levels stops
    // here as soon as the sparse form cannot win.
    if (book.size() * sizeof(float) + gap_bytes + (nonzero + 7) / 8 >= limit) return false;
  }
  const uint32_t bits = SparseBits(book.size());
  const uint64_t code_bytes = (nonzero * bits + 7) / 8;
  const uint64_t total = book.size() * sizeof(float) + gap_bytes + code_bytes;
  if (total >= limit) return false;
  *bytes = total;
  if (c == nullptr) return true;
  c->book = std::move(book);
  c->gaps.clear();
  c->gaps.reserve(gap_bytes);
  c->codes.assign(code_bytes, 0);
  next = 0;
  uint64_t k = 0;  // the nonzero value's number: its code's place in `codes`
  for (uint32_t i = 0; i < n; ++i) {
    if (v[i] == 0) continue;
    uint32_t gap = i - next;
    for (; gap >= 0x80; gap >>= 7) c->gaps.push_back(static_cast<uint8_t>(gap | 0x80));
    c->gaps.push_back(static_cast<uint8_t>(gap));
    next = i + 1;
    const auto code = static_cast<uint32_t>(std::lower_bound(c->book.begin(), c->book.end(), v[i]) -
                                            c->book.begin());
    c->codes[k * bits / 8] |= static_cast<uint8_t>(code << (k * bits % 8));
    ++k;
  }
  return true;
}

// The int8 form: one scale a block of kInt8Block values.
void EncodeInt8(const float* v, uint32_t n, ParamChunk* c, float* decoded) {
  c->encoding = static_cast<uint8_t>(Encoding::kInt8);
  c->q.resize(n);
  c->scales.resize(Blocks(n));
  for (uint32_t b = 0; b < c->scales.size(); ++b) {
    const uint32_t lo = b * kInt8Block, len = std::min(n, lo + kInt8Block) - lo;
    const float scale = kernels::MaxAbs(v + lo, len) / 127.0f;
    c->scales[b] = scale;
    // A scale so small that its inverse overflows (values below ~1e-36): all zeros.
    const float inv = scale > 0 && std::isfinite(1.0f / scale) ? 1.0f / scale : 0.0f;
    kernels::QuantizeInt8(v + lo, len, inv, scale, c->q.data() + lo,
                          decoded != nullptr ? decoded + lo : nullptr);
  }
}

// One chunk's values v[0, n) with a scheme that encodes each chunk on its own (none, fp16, int8,
// sparse); `decoded`, when given, gets what the receiver will hold.
void EncodeDense(const float* v, uint32_t n, Encoding kind, ParamChunk* c, float* decoded) {
  c->encoding = static_cast<uint8_t>(kind);
  c->count = n;
  switch (kind) {
    case Encoding::kFp16:
      c->half.resize(n);
      for (uint32_t i = 0; i < n; ++i) c->half[i] = FloatToHalf(v[i]);
      if (decoded != nullptr) {
        for (uint32_t i = 0; i < n; ++i) decoded[i] = HalfToFloat(c->half[i]);
      }
      return;
    case Encoding::kInt8:
      EncodeInt8(v, n, c, decoded);
      return;
    case Encoding::kSparse: {
      uint64_t bytes = 0;
      if (!SparseForm(v, n, c, &bytes)) {
        EncodeInt8(v, n, c, decoded);
        return;
      }
      if (decoded != nullptr) {  // exact, but a -0.0 arrives as +0.0
        for (uint32_t i = 0; i < n; ++i) decoded[i] = v[i] == 0 ? 0.0f : v[i];
      }
      return;
    }
    default:
      c->encoding = static_cast<uint8_t>(Encoding::kNone);
      c->data.assign(v, v + n);
      if (decoded != nullptr) std::copy(v, v + n, decoded);
      return;
  }
}

}  // namespace

uint64_t ChunkWireBytes(const ParamChunk& c) {
  const HeldValues& h = c.held;
  const size_t floats = c.view != nullptr ? c.count : h.f != nullptr ? h.n : c.data.size();
  const size_t q = h.q != nullptr ? h.n : c.q.size();
  const size_t scales = h.q != nullptr ? h.ns : c.scales.size();
  return floats * sizeof(float) + c.half.size() * sizeof(uint16_t) + q + scales * sizeof(float) +
         c.idx.size() * sizeof(uint32_t) + c.book.size() * sizeof(float) + c.gaps.size() +
         c.codes.size();
}

void MaterializeChunk(ParamChunk* c) {
  if (!c->held) return;
  const HeldValues h = std::move(c->held);
  c->held = HeldValues{};
  if (h.f != nullptr) c->data.assign(h.f, h.f + h.n);
  if (h.q != nullptr) {
    c->q.assign(h.q, h.q + h.n);
    c->scales.assign(h.s, h.s + h.ns);
  }
}

EncodedTransfer EncodeTransfer(const std::vector<float>& values, const CompressSpec& spec,
                               uint64_t round, uint64_t step, uint64_t base,
                               uint32_t chunk_floats) {
  EncodedTransfer out;
  if (values.empty() || values.size() > UINT32_MAX) return out;
  chunk_floats = std::clamp<uint32_t>(chunk_floats, 1, kParamChunkFloats);
  const auto total = static_cast<uint32_t>(values.size());
  const uint32_t chunks =
      static_cast<uint32_t>((uint64_t{total} + chunk_floats - 1) / chunk_floats);
  LoopGuard::Note(total);
  out.decoded.assign(total, 0.0f);

  // Top-k: one threshold over the whole model (the k largest magnitudes), so that the budget goes
  // where the change is, whichever chunk it falls in.
  std::vector<uint8_t> keep;
  if (spec.kind == Encoding::kTopK) {
    const size_t k = std::clamp<size_t>(
        static_cast<size_t>(std::ceil(spec.topk_fraction * static_cast<double>(total))), 1, total);
    // The k-th largest magnitude by selection on a copy of the magnitudes; then every value
    // above it, and values equal to it from the lowest index on until k are taken.
    std::vector<float> mag(total);
    for (uint32_t i = 0; i < total; ++i) mag[i] = std::fabs(values[i]);
    std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(k - 1), mag.end(),
                     std::greater<float>());
    const float threshold = mag[k - 1];
    keep.assign(total, 0);
    size_t taken = 0;
    for (uint32_t i = 0; i < total; ++i) {
      if (std::fabs(values[i]) > threshold) keep[i] = 1, ++taken;
    }
    for (uint32_t i = 0; i < total && taken < k; ++i) {
      if (std::fabs(values[i]) == threshold) keep[i] = 1, ++taken;
    }
  }

  out.chunks.reserve(chunks);
  for (uint32_t i = 0; i < chunks; ++i) {
    uint32_t n = 0;
    ParamChunk c = ParamChunkHeader(round, step, i, total, chunk_floats, &n);
    c.base = base;
    const float* v = values.data() + c.offset;
    float* decoded = out.decoded.data() + c.offset;
    if (spec.kind == Encoding::kTopK) {
      size_t picked = 0;
      for (uint32_t j = 0; j < n; ++j) picked += keep[c.offset + j];
      if (picked * 2 < n) {  // (index, value) pairs are 8 bytes against 4 for a float
        c.encoding = static_cast<uint8_t>(Encoding::kTopK);
        c.count = n;
        c.idx.reserve(picked);
        c.data.reserve(picked);
        for (uint32_t j = 0; j < n; ++j) {
          if (!keep[c.offset + j]) continue;
          c.idx.push_back(j);
          c.data.push_back(v[j]);
          decoded[j] = v[j];
        }
      } else {
        EncodeDense(v, n, Encoding::kNone, &c, decoded);
      }
    } else {
      EncodeDense(v, n, spec.kind, &c, decoded);
    }
    if (c.encoding == static_cast<uint8_t>(Encoding::kNone)) c.count = n;
    out.wire_bytes += ChunkWireBytes(c);
    out.chunks.push_back(std::move(c));
  }
  return out;
}

bool Streamable(const CompressSpec& spec) { return spec.kind != Encoding::kTopK; }

namespace {

// The scheme a streamed chunk is encoded with: top-k's full snapshots go as int8.
Encoding StreamKind(const CompressSpec& spec) {
  return Streamable(spec) ? spec.kind : Encoding::kInt8;
}

// The span's range within a model of `total` floats ([0, total) when it names none).
std::pair<uint32_t, uint32_t> SpanRange(uint32_t total, StreamSpan span) {
  if (span.end == 0 || span.end > total || span.begin >= span.end) return {0, total};
  return {span.begin, span.end};
}

}  // namespace

uint32_t StreamChunks(uint32_t total, uint32_t chunk_floats, StreamSpan span) {
  chunk_floats = std::clamp<uint32_t>(chunk_floats, 1, kParamChunkFloats);
  const auto [begin, end] = SpanRange(total, span);
  return static_cast<uint32_t>((uint64_t{end - begin} + chunk_floats - 1) / chunk_floats);
}

ParamChunk EncodeStreamChunk(const float* params, uint32_t total, uint32_t index,
                             const CompressSpec& spec, uint64_t round, uint64_t step,
                             uint32_t chunk_floats, StreamSpan span) {
  chunk_floats = std::clamp<uint32_t>(chunk_floats, 1, kParamChunkFloats);
  uint32_t n = 0;
  const auto [begin, end] = SpanRange(total, span);
  ParamChunk c = ParamChunkHeader(round, step, index, total, chunk_floats, &n, begin, end);
  const Encoding kind = StreamKind(spec);
  if (kind == Encoding::kNone) {  // floats as they are: the codec reads them from the snapshot
    c.encoding = static_cast<uint8_t>(Encoding::kNone);
    c.count = n;
    c.view = params + c.offset;
    return c;
  }
  EncodeDense(params + c.offset, n, kind, &c, nullptr);
  if (c.encoding == static_cast<uint8_t>(Encoding::kNone)) c.count = n;
  return c;
}

namespace {

// Payload bytes of a streamed chunk of the n values at v, encoded with `kind` as
// EncodeStreamChunk encodes it; v null (values not known): sparse counts its int8 form.
uint64_t StreamChunkBytes(const float* v, uint32_t n, Encoding kind) {
  uint64_t bytes = 0;
  switch (kind) {
    case Encoding::kFp16:
      return uint64_t{n} * sizeof(uint16_t);
    case Encoding::kSparse:
      return v != nullptr && SparseForm(v, n, nullptr, &bytes) ? bytes : Int8Bytes(n);
    case Encoding::kInt8:
      return Int8Bytes(n);
    default:
      return uint64_t{n} * sizeof(float);
  }
}

uint64_t StreamBytes(const float* params, uint32_t total, const CompressSpec& spec,
                     uint32_t chunk_floats, StreamSpan span) {
  chunk_floats = std::clamp<uint32_t>(chunk_floats, 1, kParamChunkFloats);
  const auto [begin, end] = SpanRange(total, span);
  const uint32_t chunks = StreamChunks(total, chunk_floats, span);
  const Encoding kind = StreamKind(spec);
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < chunks; ++i) {
    const uint32_t lo = begin + i * chunk_floats;
    const uint32_t n = std::min(chunk_floats, end - lo);
    bytes += StreamChunkBytes(params != nullptr ? params + lo : nullptr, n, kind);
  }
  return bytes;
}

}  // namespace

uint64_t StreamWireBytes(const float* params, uint32_t total, const CompressSpec& spec,
                         uint32_t chunk_floats, StreamSpan span) {
  return StreamBytes(params, total, spec, chunk_floats, span);
}

uint64_t StreamWireBytes(uint32_t total, const CompressSpec& spec, uint32_t chunk_floats,
                         StreamSpan span) {
  return StreamBytes(nullptr, total, spec, chunk_floats, span);
}

namespace {

bool AllFinite(const std::vector<float>& v) { return ScanFinite(v.data(), nullptr, v.size()); }

bool HasSparseFields(const ParamChunk& c) {
  return !c.book.empty() || !c.gaps.empty() || !c.codes.empty();
}

// A sparse chunk's values into dense[0, n) (zeroed by the caller). False: the fields are
// malformed. The checks also leave one encoding for one set of values (a strictly ascending
// book, shortest varints, unused bits 0), and the work is one pass over the book, the gaps and
// the codes.
bool ExpandSparse(const ParamChunk& c, uint32_t n, float* dense) {
  const std::vector<float>& book = c.book;
  if (book.size() > kSparseBook) return false;
  for (size_t i = 0; i < book.size(); ++i) {
    if (!std::isfinite(book[i]) || book[i] == 0 || (i > 0 && !(book[i - 1] < book[i]))) {
      return false;
    }
  }
  // Each varint ends in its one byte below 0x80: that many positions, and as many codes.
  const auto positions = static_cast<uint64_t>(
      std::count_if(c.gaps.begin(), c.gaps.end(), [](uint8_t b) { return b < 0x80; }));
  const uint32_t bits = SparseBits(book.size());
  if (positions > n || c.codes.size() != (positions * bits + 7) / 8) return false;
  const uint32_t mask = (1u << bits) - 1;
  uint64_t next = 0;  // the lowest position the next varint may name
  size_t at = 0;
  for (uint64_t k = 0; k < positions; ++k) {
    // A varint's last byte lies ahead (one of `positions` not yet read), so `at` stays in range.
    uint32_t gap = 0;
    for (uint32_t shift = 0;; shift += 7) {
      const uint8_t b = c.gaps[at++];
      if (shift == 28 && b > 0x0F) return false;  // beyond 32 bits, or a sixth byte
      gap |= uint32_t{b & 0x7Fu} << shift;
      if (b >= 0x80) continue;
      if (b == 0 && shift > 0) return false;  // not the shortest form
      break;
    }
    const uint64_t pos = next + gap;
    if (pos >= n) return false;
    const uint32_t code = (c.codes[k * bits / 8] >> (k * bits % 8)) & mask;
    if (code >= book.size()) return false;
    dense[pos] = book[code];
    next = pos + 1;
  }
  // Bytes past the last varint's end: a varint cut off.
  if (at != c.gaps.size()) return false;
  // The bits of the last code byte past the last code are 0.
  const auto used = static_cast<uint32_t>(positions * bits % 8);
  return used == 0 || (c.codes.back() >> used) == 0;
}

}  // namespace

bool DequantizeInt8Chunk(const int8_t* q, const float* scales, uint32_t n, float* out) {
  bool ok = true;
  for (uint32_t b = 0; b * kInt8Block < n; ++b) {
    const uint32_t lo = b * kInt8Block, len = std::min(n, lo + kInt8Block) - lo;
    ok &= kernels::DequantizeInt8(q + lo, len, scales[b], out + lo);
  }
  return ok;
}

bool DequantizeInt8Chunk(const std::vector<int8_t>& q, const std::vector<float>& scales,
                         float* out) {
  const auto n = static_cast<uint32_t>(
      std::min<size_t>(q.size(), std::min<size_t>(scales.size() * size_t{kInt8Block}, UINT32_MAX)));
  return DequantizeInt8Chunk(q.data(), scales.data(), n, out);
}

namespace {

// CheckChunk of a chunk whose values the codec left in the frame (ParamChunk::held): plain
// floats, or int8 with scales that cannot overflow, are checked where they are; anything else is
// copied out and checked as usual.
bool CheckHeld(ParamChunk* c) {
  const HeldValues& h = c->held;
  const uint32_t n = c->count;
  const bool geometry = n > 0 && n == h.n && n <= kParamChunkFloats &&
                        uint64_t{c->offset} + n <= c->total && c->half.empty() && c->idx.empty() &&
                        c->data.empty() && c->q.empty() && c->scales.empty() &&
                        !HasSparseFields(*c);
  bool fast = false;
  if (geometry && h.f != nullptr && c->encoding == static_cast<uint8_t>(Encoding::kNone)) {
    if (!ScanFinite(h.f, nullptr, n)) return false;
    fast = true;
  } else if (geometry && h.q != nullptr && c->encoding == static_cast<uint8_t>(Encoding::kInt8) &&
             h.ns == Blocks(n)) {
    bool small = true;
    for (uint32_t b = 0; b < h.ns; ++b) {
      if (!std::isfinite(h.s[b]) || h.s[b] < 0) return false;
      small &= h.s[b] <= kMaxCompactScale;
    }
    if (small && !kernels::NoInt8Min(h.q, n)) return false;
    fast = small;
  }
  if (!fast) {
    MaterializeChunk(c);
    return CheckChunk(c);
  }
  c->expanded = true;
  return true;
}

}  // namespace

bool CheckChunk(ParamChunk* c) {
  if (c->held) return c->expanded ? c->count == c->held.n : CheckHeld(c);
  if (c->expanded) return c->q.empty() ? c->count == c->data.size() : c->count == c->q.size();
  const uint32_t n = c->count;
  const bool compact = c->encoding == static_cast<uint8_t>(Encoding::kInt8) && n > 0 &&
                       n <= kParamChunkFloats && uint64_t{c->offset} + n <= c->total &&
                       c->q.size() == n && c->scales.size() == Blocks(n) && c->data.empty() &&
                       c->half.empty() && c->idx.empty() && !HasSparseFields(*c);
  if (!compact) {
    if (!ExpandChunk(c)) return false;
    c->expanded = true;
    return true;
  }
  bool small = true;
  for (float s : c->scales) {
    if (!std::isfinite(s) || s < 0) return false;
    small &= s <= kMaxCompactScale;
  }
  if (!small) {  // values near FLT_MAX: expand, and scan what the products give
    if (!ExpandChunk(c)) return false;
    c->expanded = true;
    return true;
  }
  // The encoder uses [-127, 127]: -128 is refused. The products are then finite.
  if (!kernels::NoInt8Min(c->q.data(), n)) return false;
  c->expanded = true;
  return true;
}

bool ExpandChunk(ParamChunk* c) {
  MaterializeChunk(c);
  if (c->expanded && c->q.empty()) return c->count == c->data.size();
  if (c->encoding == 0 && c->count == 0 && c->data.size() <= kParamChunkFloats) {
    c->count = static_cast<uint32_t>(c->data.size());  // a plain chunk (no appended fields)
  }
  const uint32_t n = c->count;
  if (n == 0 || n > kParamChunkFloats || c->encoding > kMaxEncoding ||
      uint64_t{c->offset} + n > c->total) {
    return false;
  }
  const bool sparse_fields = HasSparseFields(*c);
  if (c->half.empty() && c->q.empty() && c->scales.empty() && c->idx.empty() && !sparse_fields &&
      c->data.size() == n) {
    // Already dense (expanded by the codec, or plain floats).
    return AllFinite(c->data);
  }
  if (sparse_fields && c->encoding != static_cast<uint8_t>(Encoding::kSparse)) return false;
  switch (static_cast<Encoding>(c->encoding)) {
    case Encoding::kNone:
      if (c->data.size() != n || !c->half.empty() || !c->q.empty() || !c->scales.empty() ||
          !c->idx.empty()) {
        return false;
      }
      break;
    case Encoding::kFp16: {
      if (c->half.size() != n || !c->data.empty() || !c->q.empty() || !c->scales.empty() ||
          !c->idx.empty()) {
        return false;
      }
      c->data.resize(n);
      for (uint32_t i = 0; i < n; ++i) {
        if ((c->half[i] & 0x7C00u) == 0x7C00u) return false;  // inf or NaN
        c->data[i] = HalfToFloat(c->half[i]);
      }
      c->half.clear();
      break;
    }
    case Encoding::kInt8: {
      if (c->q.size() != n || c->scales.size() != Blocks(n) || !c->data.empty() ||
          !c->half.empty() || !c->idx.empty()) {
        return false;
      }
      // A scale of at most kMaxCompactScale (every honest one short of values within 1 % of
      // FLT_MAX) cannot overflow times 127, so the decoded floats need no second scan.
      bool scan = false;
      for (float s : c->scales) {
        if (!std::isfinite(s) || s < 0) return false;
        scan |= s > kMaxCompactScale;
      }
      c->data.resize(n);
      // The encoder uses [-127, 127]: -128 is refused.
      if (!DequantizeInt8Chunk(c->q, c->scales, c->data.data())) return false;
      if (scan && !AllFinite(c->data)) return false;
      c->q.clear();
      c->scales.clear();
      return true;
    }
    case Encoding::kTopK: {
      if (c->idx.size() != c->data.size() || c->idx.size() > n || !c->half.empty() ||
          !c->q.empty() || !c->scales.empty()) {
        return false;
      }
      std::vector<float> dense(n, 0.0f);
      for (size_t i = 0; i < c->idx.size(); ++i) {
        if (c->idx[i] >= n || (i > 0 && c->idx[i] <= c->idx[i - 1])) return false;
        dense[c->idx[i]] = c->data[i];
      }
      c->data = std::move(dense);
      c->idx.clear();
      break;
    }
    case Encoding::kSparse: {
      if (!c->data.empty() || !c->half.empty() || !c->q.empty() || !c->scales.empty() ||
          !c->idx.empty()) {
        return false;
      }
      std::vector<float> dense(n, 0.0f);
      if (!ExpandSparse(*c, n, dense.data())) return false;
      c->data = std::move(dense);
      c->book.clear();
      c->gaps.clear();
      c->codes.clear();
      return true;  // the book's values are finite
    }
    default:
      return false;
  }
  return AllFinite(c->data);
}

}  // namespace meshtrain::wire
