#include "wire/codec.h"

#include <arpa/inet.h>
#include <flatbuffers/flatbuffers.h>
#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

#include "wire/compress.h"
#include "wire/schema/meshtrain_generated.h"

namespace meshtrain::wire {
namespace {

namespace fb = ::flatbuffers;
namespace w = ::meshtrain::wire::schema;
namespace ms = ::meshtrain::membership;

// Verifier limits. An envelope nests at most Envelope > body > update > Meta (depth 4).
// A datagram holds at most kMaxUpdatesPerDatagram updates with a Meta each; a push-pull
// frame at most kMaxPushPullMembers members with a Meta each.
constexpr fb::uoffset_t kMaxDepth = 8;
constexpr fb::uoffset_t kMaxDatagramTables = 2 * kMaxUpdatesPerDatagram + 8;
constexpr fb::uoffset_t kMaxFrameTables = 2 * kMaxPushPullMembers + 8;
// Root offset plus file identifier: a shorter FlatBuffer cannot be an envelope.
constexpr size_t kMinEnvelopeBytes = 8;

bool Fail(Reject r, Reject* why) {
  if (why != nullptr) *why = r;
  return false;
}

std::string ToString(const fb::String* s) {
  return s == nullptr ? std::string() : std::string(s->data(), s->size());
}

// ---- Encoding -------------------------------------------------------------------------------

// Default metadata is left out (the decoder reads an absent Meta as defaults).
fb::Offset<w::Meta> EncodeMeta(fb::FlatBufferBuilder& b, const ms::Meta& m) {
  if (m == ms::Meta{}) return 0;
  const auto data_addr = m.data_addr.empty() ? 0 : b.CreateString(m.data_addr);
  fb::Offset<fb::Vector<fb::Offset<fb::String>>> keys = 0, values = 0;
  if (!m.tags.empty()) {
    std::vector<fb::Offset<fb::String>> k, v;
    for (const auto& [key, value] : m.tags) {
      k.push_back(b.CreateString(key));
      v.push_back(b.CreateString(value));
    }
    keys = b.CreateVector(k);
    values = b.CreateVector(v);
  }
  const auto relay = m.relay.empty() ? 0 : b.CreateString(m.relay);
  return w::CreateMeta(b, data_addr, m.training, m.uplink_mbps, m.downlink_mbps, keys, values,
                       static_cast<uint8_t>(m.reach), relay, m.serves_relay);
}

struct UpdateEncoder {
  fb::FlatBufferBuilder& b;

  std::pair<w::Update, fb::Offset<void>> operator()(const ms::AliveMsg& u) const {
    const auto name = b.CreateString(u.name);
    const auto addr = b.CreateString(u.addr);
    const auto meta = EncodeMeta(b, u.meta);
    return {w::Update::AliveUpdate,
            w::CreateAliveUpdate(b, name, addr, u.incarnation, meta).Union()};
  }
  std::pair<w::Update, fb::Offset<void>> operator()(const ms::SuspectMsg& u) const {
    const auto name = b.CreateString(u.name);
    const auto from = u.from.empty() ? 0 : b.CreateString(u.from);
    return {w::Update::SuspectUpdate, w::CreateSuspectUpdate(b, name, u.incarnation, from).Union()};
  }
  std::pair<w::Update, fb::Offset<void>> operator()(const ms::DeadMsg& u) const {
    const auto name = b.CreateString(u.name);
    const auto from = u.from.empty() ? 0 : b.CreateString(u.from);
    return {w::Update::DeadUpdate, w::CreateDeadUpdate(b, name, u.incarnation, from).Union()};
  }
  std::pair<w::Update, fb::Offset<void>> operator()(const ms::ProgressMsg& u) const {
    const auto name = b.CreateString(u.name);
    const bool eval = u.eval.valid();
    return {w::Update::ProgressUpdate,
            w::CreateProgressUpdate(b, name, u.step, eval ? u.eval.step : 0,
                                    eval ? u.eval.accuracy : -1.0f, eval ? u.eval.loss : -1.0f,
                                    u.step_ms)
                .Union()};
  }
};

struct PrimaryEncoder {
  fb::FlatBufferBuilder& b;

  std::pair<w::Primary, fb::Offset<void>> operator()(const std::monostate&) const {
    return {w::Primary::NONE, 0};
  }
  std::pair<w::Primary, fb::Offset<void>> operator()(const ms::PingMsg& m) const {
    const auto target = m.target.empty() ? 0 : b.CreateString(m.target);
    return {w::Primary::Ping, w::CreatePing(b, m.seq, target).Union()};
  }
  std::pair<w::Primary, fb::Offset<void>> operator()(const ms::IndirectPingMsg& m) const {
    const auto target = b.CreateString(m.target);
    const auto addr = b.CreateString(m.target_addr);
    return {w::Primary::IndirectPing,
            w::CreateIndirectPing(b, m.seq, target, addr, m.want_nack).Union()};
  }
  std::pair<w::Primary, fb::Offset<void>> operator()(const ms::AckMsg& m) const {
    const auto observed = m.observed.empty() ? 0 : b.CreateString(m.observed);
    return {w::Primary::Ack, w::CreateAck(b, m.seq, observed).Union()};
  }
  std::pair<w::Primary, fb::Offset<void>> operator()(const ms::NackMsg& m) const {
    return {w::Primary::Nack, w::CreateNack(b, m.seq).Union()};
  }
  std::pair<w::Primary, fb::Offset<void>> operator()(const ms::RelayRegisterMsg& m) const {
    return {w::Primary::RelayRegister, w::CreateRelayRegister(b, m.seq).Union()};
  }
};

std::pair<w::Body, fb::Offset<void>> EncodePacket(fb::FlatBufferBuilder& b, const ms::Packet& p) {
  std::vector<w::Update> types;
  std::vector<fb::Offset<void>> values;
  types.reserve(p.updates.size());
  values.reserve(p.updates.size());
  for (const ms::Update& u : p.updates) {
    const auto [type, value] = std::visit(UpdateEncoder{b}, u);
    types.push_back(type);
    values.push_back(value);
  }
  const auto [primary_type, primary] = std::visit(PrimaryEncoder{b}, p.primary);
  fb::Offset<fb::Vector<w::Update>> types_vec = 0;
  fb::Offset<fb::Vector<fb::Offset<void>>> values_vec = 0;
  if (!types.empty()) {
    types_vec = b.CreateVector(types);
    values_vec = b.CreateVector(values);
  }
  const auto from_addr = b.CreateString(p.from_addr);
  return {w::Body::MembershipPacket,
          w::CreateMembershipPacket(b, from_addr, p.from_step, primary_type, primary, types_vec,
                                    values_vec)
              .Union()};
}

std::pair<w::Body, fb::Offset<void>> EncodePushPull(fb::FlatBufferBuilder& b,
                                                    const PushPullMsg& m) {
  std::vector<fb::Offset<w::MemberState>> members;
  members.reserve(m.state.members.size());
  for (const ms::MemberState& s : m.state.members) {
    const auto name = b.CreateString(s.name);
    const auto addr = b.CreateString(s.addr);
    const auto meta = EncodeMeta(b, s.meta);
    members.push_back(w::CreateMemberState(b, name, addr, s.incarnation,
                                           static_cast<w::MemberStatus>(s.status), meta, s.step));
  }
  const auto vec = b.CreateVector(members);
  return {w::Body::PushPull,
          w::CreatePushPull(b, m.response, m.state.join, vec, m.state.shuffle).Union()};
}

// `slot` non-null (a chunk with a view): its floats are left uninitialized in the builder, and
// *slot points at them (Codec::EncodeChunkHead sends them from the view instead).
std::pair<w::Body, fb::Offset<void>> EncodeParamChunk(fb::FlatBufferBuilder& b, const ParamChunk& c,
                                                      float** slot = nullptr) {
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
  return {w::Body::ParamChunk,
          w::CreateParamChunk(b, c.round, c.step, c.chunk, c.chunks, c.total, c.offset, data,
                              c.encoding, c.base, plain ? 0 : c.count, half, q, scales, idx,
                              c.final, c.keyed, c.consensus, c.fragment)
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

// ---- Decoding: semantic checks and conversion -----------------------------------------------

// A Meta is optional on the wire (absent = defaults).
bool DecodeMeta(const w::Meta* m, ms::Meta* out, Reject* why) {
  *out = ms::Meta{};
  if (m == nullptr) return true;
  out->data_addr = ToString(m->data_addr());
  if (!out->data_addr.empty() && !ValidAddr(out->data_addr)) return Fail(Reject::kSemantic, why);
  out->training = m->training();
  out->uplink_mbps = m->uplink_mbps();
  out->downlink_mbps = m->downlink_mbps();
  for (float v : {out->uplink_mbps, out->downlink_mbps}) {
    if (!std::isfinite(v) || v < 0) return Fail(Reject::kSemantic, why);
  }
  const auto* keys = m->tag_keys();
  const auto* values = m->tag_values();
  const size_t nk = keys ? keys->size() : 0, nv = values ? values->size() : 0;
  if (nk != nv || nk > kMaxTags) return Fail(Reject::kSemantic, why);
  for (size_t i = 0; i < nk; ++i) {
    out->tags.emplace_back(ToString(keys->Get(i)), ToString(values->Get(i)));
  }
  if (!ValidTags(out->tags)) return Fail(Reject::kSemantic, why);
  if (m->reach() > static_cast<uint8_t>(ms::Reach::kNat)) return Fail(Reject::kSemantic, why);
  out->reach = static_cast<ms::Reach>(m->reach());
  // Optional (older peers leave it out); when present, a member name.
  if (m->relay() != nullptr && m->relay()->size() > 0) {
    std::string_view v(m->relay()->data(), m->relay()->size());
    if (!ValidName(v, kMaxSenderBytes)) return Fail(Reject::kSemantic, why);
    out->relay.assign(v);
  }
  out->serves_relay = m->serves_relay();
  return true;
}

// A required member name: present (else kVerify), 1..kMaxStringBytes, no control characters.
bool DecodeName(const fb::String* s, std::string* out, Reject* why) {
  if (s == nullptr) return Fail(Reject::kVerify, why);
  std::string_view v(s->data(), s->size());
  if (!ValidName(v, kMaxStringBytes)) return Fail(Reject::kSemantic, why);
  out->assign(v);
  return true;
}

// An optional name (absent or empty allowed).
bool DecodeOptionalName(const fb::String* s, std::string* out, Reject* why) {
  out->clear();
  if (s == nullptr || s->size() == 0) return true;
  return DecodeName(s, out, why);
}

bool DecodeAddr(const fb::String* s, std::string* out, Reject* why) {
  if (s == nullptr) return Fail(Reject::kVerify, why);
  std::string_view v(s->data(), s->size());
  if (!ValidAddr(v)) return Fail(Reject::kSemantic, why);
  out->assign(v);
  return true;
}

bool DecodeUpdate(w::Update type, const void* value, ms::Update* out, Reject* why) {
  if (value == nullptr) return Fail(Reject::kVerify, why);
  switch (type) {
    case w::Update::AliveUpdate: {
      const auto* u = static_cast<const w::AliveUpdate*>(value);
      ms::AliveMsg m;
      if (!DecodeName(u->name(), &m.name, why) || !DecodeAddr(u->addr(), &m.addr, why) ||
          !DecodeMeta(u->meta(), &m.meta, why)) {
        return false;
      }
      m.incarnation = u->incarnation();
      *out = std::move(m);
      return true;
    }
    case w::Update::SuspectUpdate: {
      const auto* u = static_cast<const w::SuspectUpdate*>(value);
      ms::SuspectMsg m;
      if (!DecodeName(u->name(), &m.name, why) || !DecodeOptionalName(u->from(), &m.from, why)) {
        return false;
      }
      m.incarnation = u->incarnation();
      *out = std::move(m);
      return true;
    }
    case w::Update::DeadUpdate: {
      const auto* u = static_cast<const w::DeadUpdate*>(value);
      ms::DeadMsg m;
      if (!DecodeName(u->name(), &m.name, why) || !DecodeOptionalName(u->from(), &m.from, why)) {
        return false;
      }
      m.incarnation = u->incarnation();
      *out = std::move(m);
      return true;
    }
    case w::Update::ProgressUpdate: {
      const auto* u = static_cast<const w::ProgressUpdate*>(value);
      ms::ProgressMsg m;
      if (!DecodeName(u->name(), &m.name, why)) return false;
      m.step = u->step();
      if (u->accuracy() >= 0) {  // an evaluation: accuracy a fraction, loss finite and >= 0
        if (!(u->accuracy() <= 1) || !std::isfinite(u->loss()) || u->loss() < 0) {
          return Fail(Reject::kSemantic, why);
        }
        m.eval = {u->eval_step(), u->accuracy(), u->loss()};
      } else if (std::isnan(u->accuracy())) {
        return Fail(Reject::kSemantic, why);
      }
      if (!std::isfinite(u->step_ms()) || u->step_ms() < 0 || u->step_ms() > 1e7f) {
        return Fail(Reject::kSemantic, why);
      }
      m.step_ms = u->step_ms();
      *out = std::move(m);
      return true;
    }
    default:
      // NONE, or a union member this version does not know.
      return Fail(Reject::kSemantic, why);
  }
}

bool DecodePrimary(w::Primary type, const void* value, ms::Primary* out, Reject* why) {
  if (type == w::Primary::NONE) {
    *out = std::monostate{};
    return true;
  }
  if (value == nullptr) return Fail(Reject::kVerify, why);
  switch (type) {
    case w::Primary::Ping: {
      const auto* p = static_cast<const w::Ping*>(value);
      ms::PingMsg m;
      m.seq = p->seq();
      if (!DecodeOptionalName(p->target(), &m.target, why)) return false;
      *out = std::move(m);
      return true;
    }
    case w::Primary::IndirectPing: {
      const auto* p = static_cast<const w::IndirectPing*>(value);
      ms::IndirectPingMsg m;
      m.seq = p->seq();
      m.want_nack = p->want_nack();
      if (!DecodeName(p->target(), &m.target, why) ||
          !DecodeAddr(p->target_addr(), &m.target_addr, why)) {
        return false;
      }
      *out = std::move(m);
      return true;
    }
    case w::Primary::Ack: {
      const auto* a = static_cast<const w::Ack*>(value);
      ms::AckMsg m;
      m.seq = a->seq();
      // Optional (older peers leave it out); when present, a well-formed "ip:port".
      if (a->observed() != nullptr && a->observed()->size() > 0 &&
          !DecodeAddr(a->observed(), &m.observed, why)) {
        return false;
      }
      *out = std::move(m);
      return true;
    }
    case w::Primary::Nack:
      *out = ms::NackMsg{static_cast<const w::Nack*>(value)->seq()};
      return true;
    case w::Primary::RelayRegister:
      *out = ms::RelayRegisterMsg{static_cast<const w::RelayRegister*>(value)->seq()};
      return true;
    default:
      return Fail(Reject::kSemantic, why);
  }
}

bool DecodePacket(const w::MembershipPacket* p, ms::Packet* out, Reject* why) {
  if (!DecodeAddr(p->from_addr(), &out->from_addr, why)) return false;
  out->from_step = p->from_step();
  if (!DecodePrimary(p->primary_type(), p->primary(), &out->primary, why)) return false;
  const auto* types = p->updates_type();
  const auto* values = p->updates();
  if (types == nullptr || values == nullptr) return true;  // the verifier saw both or neither
  if (values->size() > kMaxUpdatesPerDatagram) return Fail(Reject::kSemantic, why);
  out->updates.resize(values->size());
  for (fb::uoffset_t i = 0; i < values->size(); ++i) {
    if (!DecodeUpdate(types->GetEnum<w::Update>(i), values->Get(i), &out->updates[i], why)) {
      return false;
    }
  }
  return true;
}

bool DecodePushPull(const w::PushPull* p, PushPullMsg* out, Reject* why) {
  out->response = p->response();
  out->state.join = p->join();
  out->state.shuffle = p->shuffle();
  const auto* members = p->members();
  if (members == nullptr) return true;
  if (members->size() > kMaxPushPullMembers) return Fail(Reject::kSemantic, why);
  out->state.members.resize(members->size());
  for (fb::uoffset_t i = 0; i < members->size(); ++i) {
    const w::MemberState* s = members->Get(i);
    ms::MemberState& m = out->state.members[i];
    if (s == nullptr) return Fail(Reject::kVerify, why);
    if (!DecodeName(s->name(), &m.name, why) || !DecodeAddr(s->addr(), &m.addr, why) ||
        !DecodeMeta(s->meta(), &m.meta, why)) {
      return false;
    }
    const auto status = static_cast<uint8_t>(s->status());
    if (status > static_cast<uint8_t>(w::MemberStatus::MAX)) return Fail(Reject::kSemantic, why);
    m.status = static_cast<ms::Status>(status);
    m.incarnation = s->incarnation();
    m.step = s->step();
  }
  return true;
}

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

// `hold` (the buffer `c` lies in) non-null: plain floats, or an int8 chunk's q and scales, are
// left there (ParamChunk::held) instead of copied out.
bool DecodeParamChunk(const w::ParamChunk* c, uint32_t expected, ParamChunk* out, Reject* why,
                      std::shared_ptr<const void> hold = nullptr) {
  out->round = c->round();
  out->step = c->step();
  out->chunk = c->chunk();
  out->chunks = c->chunks();
  out->total = c->total();
  out->offset = c->offset();
  out->encoding = c->encoding();
  out->base = c->base();
  const bool others = SizeOf(c->half()) != 0 || SizeOf(c->idx()) != 0;
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
  }
  out->final = c->final();
  out->keyed = c->keyed();
  out->consensus = c->consensus();
  out->fragment = c->fragment();
  out->wire_bytes = ChunkWireBytes(*out);
  out->count = c->count();
  if (out->count == 0 && out->encoding == 0) {
    if (c->data() == nullptr) return Fail(Reject::kVerify, why);
    out->count = static_cast<uint32_t>(std::min<size_t>(SizeOf(c->data()), UINT32_MAX));
  }
  const uint64_t len = out->count;
  // Chunk geometry: a non-empty slice inside a model of `total` floats, and the model size the
  // local trainer uses (a different architecture must never be mixed in). Then the encoded values:
  // counts that match, finite scales and values, indices in range (CheckChunk); afterwards `data`
  // holds `count` dense floats, or an int8 chunk stays in `q` and `scales`.
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

// Verifies `buf` and checks the envelope fields every message shares. On success returns the
// envelope; `buf` must stay alive while it is used.
const w::Envelope* CheckEnvelope(const uint8_t* buf, size_t len, fb::uoffset_t max_tables,
                                 const std::string& cluster, Reject* why) {
  fb::Verifier::Options opts;
  opts.max_depth = kMaxDepth;
  opts.max_tables = max_tables;
  opts.check_alignment = true;
  opts.check_nested_flatbuffers = false;  // the schema has none
  fb::Verifier verifier(buf, len, opts);
  if (!w::VerifyEnvelopeBuffer(verifier)) {
    Fail(Reject::kVerify, why);
    return nullptr;
  }
  const w::Envelope* env = w::GetEnvelope(buf);
  if (env->cluster() == nullptr || env->sender() == nullptr || env->body() == nullptr) {
    Fail(Reject::kVerify, why);
    return nullptr;
  }
  if (env->version() != kProtocolVersion) {
    Fail(Reject::kVersion, why);
    return nullptr;
  }
  if (env->cluster()->string_view() != cluster) {
    Fail(Reject::kCluster, why);
    return nullptr;
  }
  if (!ValidName(env->sender()->string_view(), kMaxSenderBytes)) {
    Fail(Reject::kSemantic, why);
    return nullptr;
  }
  return env;
}

struct Stamps {
  uint64_t sent_ms = 0;
  uint64_t session = 0;
  uint64_t counter = 0;
};

fb::Offset<w::Envelope> FinishEnvelope(fb::FlatBufferBuilder& b, uint16_t version,
                                       const std::string& cluster, const std::string& sender,
                                       const Stamps& stamps, w::Body type, fb::Offset<void> body) {
  const auto c = b.CreateString(cluster);
  const auto s = b.CreateString(sender);
  const auto env = w::CreateEnvelope(b, version, c, s, stamps.sent_ms, type, body, stamps.session,
                                     stamps.counter);
  w::FinishEnvelopeBuffer(b, env);
  return env;
}

}  // namespace

// ---- Codec ----------------------------------------------------------------------------------

Codec::Codec(std::string cluster, std::shared_ptr<Keyring> keyring)
    : cluster_(std::move(cluster)), keyring_(std::move(keyring)) {}

size_t Codec::DatagramOverhead() const {
  // The cluster string costs its bytes plus a 4-byte length, a NUL and up to 3 bytes of padding.
  return kEnvelopeOverhead + cluster_.size() + 8 + (keyring_ ? kSealOverhead : kPlainOverhead);
}

uint64_t Codec::Stamp(uint64_t sent_ms) const {
  return sent_ms == 0 && wall_clock_ ? wall_clock_() : sent_ms;
}

std::vector<uint8_t> Codec::Wrap(const uint8_t* fb, size_t len) const {
  if (keyring_) return keyring_->Seal(fb, len, cluster_);
  std::vector<uint8_t> out;
  out.reserve(kPlainOverhead + len);  // no zero-fill of what is copied over at once
  out.push_back(kPlainMarker);
  out.insert(out.end(), fb, fb + len);
  return out;
}

bool Codec::Unwrap(const uint8_t* data, size_t len, size_t max_len, std::vector<uint8_t>* storage,
                   Reject* why) const {
  if (len > max_len) return Fail(Reject::kTooLarge, why);
  const size_t overhead = keyring_ ? kSealOverhead : kPlainOverhead;
  if (data == nullptr || len < overhead + kMinEnvelopeBytes) return Fail(Reject::kTooSmall, why);
  if (keyring_) {
    // An encrypted agent accepts sealed buffers only (SPEC §4: no key, no entry).
    auto opened = keyring_->Open(data, len, cluster_);
    if (!opened) return Fail(Reject::kAuth, why);
    *storage = std::move(*opened);
  } else {
    if (data[0] != kPlainMarker) return Fail(Reject::kAuth, why);
    // Copy so the envelope starts at an allocation boundary: FlatBuffers accessors read
    // scalars in place and need them aligned (the marker byte would misalign them).
    storage->assign(data + kPlainOverhead, data + len);
  }
  if (storage->size() < kMinEnvelopeBytes) return Fail(Reject::kTooSmall, why);
  return true;
}

std::vector<uint8_t> Codec::EncodeDatagram(const Datagram& d) const {
  fb::FlatBufferBuilder b(512);
  std::pair<w::Body, fb::Offset<void>> body;
  if (const auto* p = std::get_if<ms::Packet>(&d.body)) {
    body = EncodePacket(b, *p);
  } else if (const auto* q = std::get_if<ProgressQuery>(&d.body)) {
    body = {w::Body::ProgressQuery, w::CreateProgressQuery(b, q->seq, q->step, q->need).Union()};
  } else if (const auto* rf = std::get_if<RelayFrame>(&d.body)) {
    if (rf->inner.size() > kMaxRelayInnerBytes || !ValidNodeName(rf->dest)) return {};
    const auto dest = b.CreateString(rf->dest);
    const auto inner = b.CreateVector(rf->inner);
    body = {w::Body::RelayFrame, w::CreateRelayFrame(b, dest, inner).Union()};
  } else {
    const auto& r = std::get<ProgressReply>(d.body);
    body = {w::Body::ProgressReply,
            w::CreateProgressReply(b, r.seq, r.step, r.training, r.watched).Union()};
  }
  Stamps stamps{Stamp(d.sent_ms), d.session != 0 ? d.session : session_, d.counter};
  // A datagram numbered by the caller (tests, replays of recorded traffic) keeps its number;
  // the codec's own sequence only numbers datagrams of its session.
  if (stamps.counter == 0 && stamps.session == session_ && session_ != 0) {
    stamps.counter = next_counter_.fetch_add(1, std::memory_order_relaxed);
  }
  FinishEnvelope(b, send_version_, cluster_, d.sender, stamps, body.first, body.second);
  const size_t wrapped = b.GetSize() + (keyring_ ? kSealOverhead : kPlainOverhead);
  if (wrapped > kMaxDatagramBytes) return {};
  return Wrap(b.GetBufferPointer(), b.GetSize());
}

std::vector<uint8_t> Codec::EncodeFrame(const Frame& f) const {
  const auto* chunk = std::get_if<ParamChunk>(&f.body);
  const auto* pp = std::get_if<PushPullMsg>(&f.body);
  const auto* op = std::get_if<KeyOpMsg>(&f.body);
  const auto* reply = std::get_if<KeyOpReplyMsg>(&f.body);
  const auto* ack = std::get_if<ParamAckMsg>(&f.body);
  const auto* state = std::get_if<StateRequestMsg>(&f.body);
  if (chunk != nullptr && ChunkWireBytes(*chunk) > kParamChunkFloats * sizeof(float)) return {};
  if (pp != nullptr && pp->state.members.size() > kMaxPushPullMembers) return {};
  if (op != nullptr && !ValidKeyOp(*op)) return {};
  if (reply != nullptr && !ValidKeyOpReply(*reply)) return {};
  fb::FlatBufferBuilder b(chunk != nullptr ? ChunkWireBytes(*chunk) + 512 : 4096);
  std::pair<w::Body, fb::Offset<void>> body;
  if (chunk != nullptr) {
    body = EncodeParamChunk(b, *chunk);
  } else if (pp != nullptr) {
    body = EncodePushPull(b, *pp);
  } else if (op != nullptr) {
    body = EncodeKeyOp(b, *op);
  } else if (ack != nullptr) {
    body = {w::Body::ParamAck, w::CreateParamAck(b, ack->round, ack->step, ack->need_full).Union()};
  } else if (state != nullptr) {
    body = {w::Body::StateRequest, w::CreateStateRequest(b, state->step).Union()};
  } else {
    body = EncodeKeyOpReply(b, *reply);
  }
  const Stamps stamps{Stamp(f.sent_ms), f.session != 0 ? f.session : session_, 0};
  FinishEnvelope(b, send_version_, cluster_, f.sender, stamps, body.first, body.second);
  const size_t wrapped = b.GetSize() + (keyring_ ? kSealOverhead : kPlainOverhead);
  std::vector<uint8_t> out;
  if (wrapped <= max_frame_bytes()) out = Wrap(b.GetBufferPointer(), b.GetSize());
  // A KeyOp carries a cluster key in the clear inside the builder: wipe it.
  if (op != nullptr) sodium_memzero(b.GetBufferPointer(), b.GetSize());
  return out;
}

std::vector<uint8_t> Codec::EncodeChunkHead(const Frame& f) const {
  const auto* chunk = std::get_if<ParamChunk>(&f.body);
  if (keyring_ != nullptr || chunk == nullptr || chunk->view == nullptr || chunk->count == 0 ||
      chunk->count > kParamChunkFloats || !chunk->data.empty()) {
    return {};
  }
  fb::FlatBufferBuilder b(1024);
  float* slot = nullptr;
  const auto body = EncodeParamChunk(b, *chunk, &slot);  // the first object: it ends the buffer
  const Stamps stamps{Stamp(f.sent_ms), f.session != 0 ? f.session : session_, 0};
  FinishEnvelope(b, send_version_, cluster_, f.sender, stamps, body.first, body.second);
  const size_t floats = size_t{chunk->count} * sizeof(float);
  const uint8_t* buf = b.GetBufferPointer();
  const size_t size = b.GetSize();
  if (slot == nullptr || size < floats ||
      reinterpret_cast<const uint8_t*>(slot) != buf + size - floats ||
      size + kPlainOverhead > max_frame_bytes()) {
    return {};
  }
  return Wrap(buf, size - floats);
}

std::optional<Datagram> Codec::DecodeDatagram(const uint8_t* data, size_t len, Reject* why) const {
  std::vector<uint8_t> buf;
  if (!Unwrap(data, len, kMaxDatagramBytes, &buf, why)) return std::nullopt;
  const w::Envelope* env = CheckEnvelope(buf.data(), buf.size(), kMaxDatagramTables, cluster_, why);
  if (env == nullptr) return std::nullopt;
  Datagram out;
  out.sender = ToString(env->sender());
  out.sent_ms = env->sent_ms();
  out.session = env->session();
  out.counter = env->counter();
  out.sealed = keyring_ != nullptr;
  switch (env->body_type()) {
    case w::Body::MembershipPacket: {
      ms::Packet p;
      if (!DecodePacket(env->body_as_MembershipPacket(), &p, why)) return std::nullopt;
      p.from = out.sender;
      out.body = std::move(p);
      break;
    }
    case w::Body::ProgressQuery: {
      const auto* q = env->body_as_ProgressQuery();
      out.body = ProgressQuery{q->seq(), q->step(), q->need()};
      break;
    }
    case w::Body::ProgressReply: {
      const auto* r = env->body_as_ProgressReply();
      out.body = ProgressReply{r->seq(), r->step(), r->training(), r->watched()};
      break;
    }
    case w::Body::RelayFrame: {
      // A member name, and a datagram that could be one (at least a marker and an envelope's
      // header, at most what fits in a frame). Whether the inner bytes are a valid datagram is
      // for its receiver to find out: a relay cannot open them.
      const auto* r = env->body_as_RelayFrame();
      RelayFrame rf;
      if (!DecodeName(r->dest(), &rf.dest, why)) return std::nullopt;
      if (!ValidNodeName(rf.dest)) {
        Fail(Reject::kSemantic, why);
        return std::nullopt;
      }
      const auto* inner = r->inner();
      if (inner == nullptr) {
        Fail(Reject::kVerify, why);
        return std::nullopt;
      }
      if (inner->size() > kMaxRelayInnerBytes ||
          inner->size() < kPlainOverhead + kMinEnvelopeBytes) {
        Fail(Reject::kSemantic, why);
        return std::nullopt;
      }
      rf.inner.assign(inner->begin(), inner->end());
      out.body = std::move(rf);
      break;
    }
    default:
      // A frame-only body, or a body this version does not know.
      Fail(Reject::kSemantic, why);
      return std::nullopt;
  }
  return out;
}

std::optional<Frame> Codec::DecodeFrame(const uint8_t* data, size_t len, Reject* why) const {
  std::vector<uint8_t> buf;
  if (!Unwrap(data, len, max_frame_bytes(), &buf, why)) return std::nullopt;
  return DecodeEnvelope(buf.data(), buf.size(), nullptr, why);
}

std::optional<Frame> Codec::DecodeFrameHeld(std::shared_ptr<const void> owner, uint8_t* data,
                                            size_t len, Reject* why) const {
  if (keyring_ == nullptr && owner != nullptr && data != nullptr && len <= max_frame_bytes() &&
      len >= kPlainOverhead + kMinEnvelopeBytes && data[0] == kPlainMarker &&
      reinterpret_cast<uintptr_t>(data + kPlainOverhead) % 8 == 0) {
    // As Unwrap, but read where it lies: the envelope is aligned there.
    return DecodeEnvelope(data + kPlainOverhead, len - kPlainOverhead, std::move(owner), why);
  }
  auto buf = std::make_shared<std::vector<uint8_t>>();
  if (!Unwrap(data, len, max_frame_bytes(), buf.get(), why)) return std::nullopt;
  uint8_t* env = buf->data();
  const size_t env_len = buf->size();
  return DecodeEnvelope(env, env_len, std::move(buf), why);
}

std::optional<Frame> Codec::DecodeEnvelope(uint8_t* buf, size_t len,
                                           std::shared_ptr<const void> owner, Reject* why) const {
  const w::Envelope* env = CheckEnvelope(buf, len, kMaxFrameTables, cluster_, why);
  if (env == nullptr) return std::nullopt;
  Frame out;
  out.sender = ToString(env->sender());
  out.sent_ms = env->sent_ms();
  out.session = env->session();
  switch (env->body_type()) {
    case w::Body::PushPull: {
      PushPullMsg m;
      if (!DecodePushPull(env->body_as_PushPull(), &m, why)) return std::nullopt;
      m.state.from = out.sender;
      out.body = std::move(m);
      break;
    }
    case w::Body::ParamChunk: {
      ParamChunk c;
      if (!DecodeParamChunk(env->body_as_ParamChunk(), expected_params(), &c, why,
                            std::move(owner))) {
        return std::nullopt;
      }
      out.body = std::move(c);
      break;
    }
    case w::Body::KeyOp: {
      KeyOpMsg m;
      const bool ok = DecodeKeyOp(env->body_as_KeyOp(), &m, why);
      // The plaintext envelope holds a cluster key: wipe it whatever the verdict.
      sodium_memzero(buf, len);
      if (!ok) return std::nullopt;
      out.body = std::move(m);
      break;
    }
    case w::Body::KeyOpReply: {
      KeyOpReplyMsg m;
      if (!DecodeKeyOpReply(env->body_as_KeyOpReply(), &m, why)) return std::nullopt;
      out.body = std::move(m);
      break;
    }
    case w::Body::ParamAck: {
      const w::ParamAck* a = env->body_as_ParamAck();
      if (a == nullptr || a->round() == 0) {  // rounds count from 1
        Fail(a == nullptr ? Reject::kVerify : Reject::kSemantic, why);
        return std::nullopt;
      }
      out.body = ParamAckMsg{a->round(), a->step(), a->need_full()};
      break;
    }
    case w::Body::StateRequest: {
      const w::StateRequest* r = env->body_as_StateRequest();
      if (r == nullptr) {
        Fail(Reject::kVerify, why);
        return std::nullopt;
      }
      out.body = StateRequestMsg{r->step()};
      break;
    }
    default:
      Fail(Reject::kSemantic, why);
      return std::nullopt;
  }
  return out;
}

}  // namespace meshtrain::wire
