// The membership bodies of the wire codec: SWIM packets (a primary message and piggybacked
// updates, each member's metadata) and push-pull states, to and from their FlatBuffers tables
// with the semantic checks of docs/contract.md "Wire format".
#include <cmath>
#include <string_view>
#include <utility>

#include "wire/codec_bodies.h"

namespace meshtrain::wire::codec_detail {

// ---- Encoding -------------------------------------------------------------------------------

namespace {

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
                       static_cast<uint8_t>(m.reach), relay, m.serves_relay, m.absent);
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

}  // namespace

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

// ---- Decoding: semantic checks and conversion -----------------------------------------------

namespace {

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
  out->absent = m->absent();
  return true;
}

}  // namespace

// A required member name: present (else kVerify), 1..kMaxStringBytes, no control characters.
bool DecodeName(const fb::String* s, std::string* out, Reject* why) {
  if (s == nullptr) return Fail(Reject::kVerify, why);
  std::string_view v(s->data(), s->size());
  if (!ValidName(v, kMaxStringBytes)) return Fail(Reject::kSemantic, why);
  out->assign(v);
  return true;
}

namespace {

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

}  // namespace

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

}  // namespace meshtrain::wire::codec_detail
