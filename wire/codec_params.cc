// The parameter-exchange and key-management bodies of the wire codec: parameter chunks (plain,
// half, int8, top-k and sparse encodings, held in the receive buffer or copied out) and cluster key
// operations with their replies, to and from their FlatBuffers tables.
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "wire/codec_bodies.h"
#include "wire/compress.h"

namespace meshtrain::wire::codec_detail {

// `slot` non-null (a chunk with a view): its floats are left uninitialized in the builder, and
// *slot points at them (Codec::EncodeChunkHead sends them from the view instead).
std::pair<w::Body, fb::Offset<void>> EncodeParamChunk(fb::FlatBufferBuilder& b, const ParamChunk& c,
                                                      float** slot) {
  // Plain float chunks of a full model keep the original layout (no appended fields).
  const bool plain = c.encoding == 0 && c.base == 0;
  // data: the values of a none chunk, the picked values of a top-k chunk; a chunk decoded
  // earlier (expanded to dense floats, its encoding kept as a record) re-encodes as such.
  const auto data = c.view != nullptr && slot != nullptr
                        ? b.CreateUninitializedVector(c.count, slot)
                    : c.view != nullptr ? b.CreateVector(c.view, c.count)
                    : c.data.empty() && c.encoding != static_cast<uint8_t>(Encoding::kNone)
                        ? fb::Offset<fb::Vector<float>>()
                        : b.CreateVector(c.data.data(), c.data.size());
  const auto half = c.half.empty() ? 0 : b.CreateVector(c.half.data(), c.half.size());
  const auto q = c.q.empty() ? 0 : b.CreateVector(c.q.data(), c.q.size());
  const auto scales = c.scales.empty() ? 0 : b.CreateVector(c.scales.data(), c.scales.size());
  const auto idx = c.idx.empty() ? 0 : b.CreateVector(c.idx.data(), c.idx.size());
  const auto book = c.book.empty() ? 0 : b.CreateVector(c.book.data(), c.book.size());
  const auto gaps = c.gaps.empty() ? 0 : b.CreateVector(c.gaps.data(), c.gaps.size());
  const auto codes = c.codes.empty() ? 0 : b.CreateVector(c.codes.data(), c.codes.size());
  return {
      w::Body::ParamChunk,
      w::CreateParamChunk(b, c.round, c.step, c.chunk, c.chunks, c.total, c.offset, data,
                          c.encoding, c.base, plain ? 0 : c.count, half, q, scales, idx, c.final,
                          c.keyed, c.consensus, c.fragment, c.covers, book, gaps, codes)
          .Union()};
}

std::pair<w::Body, fb::Offset<void>> EncodeKeyOp(fb::FlatBufferBuilder& b, const KeyOpMsg& m) {
  fb::Offset<fb::Vector<uint8_t>> key = 0;
  if (m.key) key = b.CreateVector(m.key->data(), m.key->size());
  return {w::Body::KeyOp, w::CreateKeyOp(b, static_cast<uint8_t>(m.op), key, m.seq).Union()};
}

std::pair<w::Body, fb::Offset<void>> EncodeKeyOpReply(fb::FlatBufferBuilder& b,
                                                      const KeyOpReplyMsg& m) {
  std::vector<fb::Offset<w::KeyHash>> keys;
  keys.reserve(m.keys.size());
  for (const std::string& k : m.keys) {
    keys.push_back(w::CreateKeyHash(b, b.CreateString(k), k == m.primary));
  }
  const auto error = m.error.empty() ? 0 : b.CreateString(m.error);
  const auto vec = keys.empty() ? 0 : b.CreateVector(keys);
  return {w::Body::KeyOpReply, w::CreateKeyOpReply(b, m.seq, m.ok, error, vec).Union()};
}

namespace {

template <typename T, typename V>
void CopyVector(const fb::Vector<V>* v, std::vector<T>* out) {
  out->clear();
  if (v == nullptr) return;
#if FLATBUFFERS_LITTLEENDIAN
  if constexpr (std::is_same_v<T, V> && std::is_arithmetic_v<T>) {
    // The wire layout is the host's: one copy, no zero-fill (parameter chunks, every receive).
    out->assign(v->data(), v->data() + v->size());
    return;
  }
#endif
  out->resize(v->size());
  for (fb::uoffset_t i = 0; i < v->size(); ++i) (*out)[i] = static_cast<T>(v->Get(i));
}

template <typename V>
size_t SizeOf(const fb::Vector<V>* v) {
  return v == nullptr ? 0 : v->size();
}

}  // namespace

// `hold` (the buffer `c` lies in) non-null: plain floats, or an int8 chunk's q and scales, are
// left there (ParamChunk::held) instead of copied out.
bool DecodeParamChunk(const w::ParamChunk* c, uint32_t expected, ParamChunk* out, Reject* why,
                      std::shared_ptr<const void> hold) {
  out->round = c->round();
  out->step = c->step();
  out->chunk = c->chunk();
  out->chunks = c->chunks();
  out->total = c->total();
  out->offset = c->offset();
  out->encoding = c->encoding();
  out->base = c->base();
  const bool others = SizeOf(c->half()) != 0 || SizeOf(c->idx()) != 0 || SizeOf(c->book()) != 0 ||
                      SizeOf(c->gaps()) != 0 || SizeOf(c->codes()) != 0;
  const bool plain = !others && SizeOf(c->q()) == 0 && SizeOf(c->scales()) == 0 &&
                     SizeOf(c->data()) != 0 && SizeOf(c->data()) <= kParamChunkFloats;
  const bool int8 = !others && SizeOf(c->data()) == 0 && SizeOf(c->q()) != 0 &&
                    SizeOf(c->q()) <= kParamChunkFloats && SizeOf(c->scales()) != 0;
  if (hold != nullptr && (plain || int8)) {
    out->held.hold = std::move(hold);
    out->held.n = static_cast<uint32_t>(plain ? c->data()->size() : c->q()->size());
    if (plain) {
      out->held.f = c->data()->data();
    } else {
      out->held.q = c->q()->data();
      out->held.s = c->scales()->data();
      out->held.ns = static_cast<uint32_t>(std::min<size_t>(c->scales()->size(), UINT32_MAX));
    }
  } else {
    CopyVector(c->data(), &out->data);
    CopyVector(c->half(), &out->half);
    CopyVector(c->q(), &out->q);
    CopyVector(c->scales(), &out->scales);
    CopyVector(c->idx(), &out->idx);
    CopyVector(c->book(), &out->book);
    CopyVector(c->gaps(), &out->gaps);
    CopyVector(c->codes(), &out->codes);
  }
  out->final = c->final();
  out->keyed = c->keyed();
  out->consensus = c->consensus();
  out->fragment = c->fragment();
  out->covers = c->covers();
  out->wire_bytes = ChunkWireBytes(*out);
  out->count = c->count();
  if (out->count == 0 && out->encoding == 0) {
    if (c->data() == nullptr) return Fail(Reject::kVerify, why);
    out->count = static_cast<uint32_t>(std::min<size_t>(SizeOf(c->data()), UINT32_MAX));
  }
  const uint64_t len = out->count;
  // Chunk geometry: a non-empty slice inside a model of `total` floats, and the model size the
  // local trainer uses (a different architecture must never be mixed in). Then the encoded values:
  // counts that match, finite scales and values, indices in range, sparse chunks' book, gaps and
  // codes well formed (CheckChunk); afterwards `data` holds `count` dense floats, or an int8
  // chunk stays in `q` and `scales`.
  if (len == 0 || len > kParamChunkFloats || out->total == 0 || out->chunks == 0 ||
      out->chunk >= out->chunks || out->chunks > out->total ||
      uint64_t{out->offset} + len > out->total || (expected != 0 && out->total != expected) ||
      out->encoding > kMaxEncoding || !CheckChunk(out)) {
    return Fail(Reject::kSemantic, why);
  }
  out->expanded = true;
  return true;
}

bool DecodeKeyOp(const w::KeyOp* k, KeyOpMsg* out, Reject* why) {
  out->seq = k->seq();
  out->op = static_cast<KeyOpKind>(k->op());
  const auto* key = k->key();
  if (key != nullptr) {
    if (key->size() != kKeyBytes) return Fail(Reject::kSemantic, why);
    Key v;
    std::memcpy(v.data(), key->data(), kKeyBytes);
    out->key = v;
    sodium_memzero(v.data(), v.size());
  }
  if (!ValidKeyOp(*out)) {
    // An install/use/remove without its key lacks a required field; the rest is semantic.
    const bool missing_key = !out->key && k->op() >= 1 && k->op() <= 3;
    return Fail(missing_key ? Reject::kVerify : Reject::kSemantic, why);
  }
  return true;
}

bool DecodeKeyOpReply(const w::KeyOpReply* r, KeyOpReplyMsg* out, Reject* why) {
  out->seq = r->seq();
  out->ok = r->ok();
  out->error = ToString(r->error());
  const auto* keys = r->keys();
  if (keys != nullptr) {
    if (keys->size() > kMaxKeysInReply) return Fail(Reject::kSemantic, why);
    size_t primaries = 0;
    for (fb::uoffset_t i = 0; i < keys->size(); ++i) {
      const w::KeyHash* h = keys->Get(i);
      if (h == nullptr || h->fingerprint() == nullptr) return Fail(Reject::kVerify, why);
      out->keys.push_back(ToString(h->fingerprint()));
      if (h->primary()) {
        ++primaries;
        out->primary = out->keys.back();
      }
    }
    if (primaries > 1) return Fail(Reject::kSemantic, why);
  }
  if (!ValidKeyOpReply(*out)) return Fail(Reject::kSemantic, why);
  return true;
}

}  // namespace meshtrain::wire::codec_detail
