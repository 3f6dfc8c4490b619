// The wire codec's envelope and the Codec API: the envelope every message shares (verified
// first), sealing or the plain marker around it, and the dispatch to the bodies of
// codec_membership.cc and codec_params.cc.
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

#include "wire/codec_bodies.h"
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

using codec_detail::DecodeKeyOp;
using codec_detail::DecodeKeyOpReply;
using codec_detail::DecodeName;
using codec_detail::DecodePacket;
using codec_detail::DecodeParamChunk;
using codec_detail::DecodePushPull;
using codec_detail::EncodeKeyOp;
using codec_detail::EncodeKeyOpReply;
using codec_detail::EncodePacket;
using codec_detail::EncodeParamChunk;
using codec_detail::EncodePushPull;
using codec_detail::Fail;
using codec_detail::ToString;

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
    // An encrypted agent accepts sealed buffers only (docs/contract.md "Wire format": no key, no
    // entry).
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
