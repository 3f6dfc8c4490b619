// Internals of wire::Codec shared by codec.cc (the envelope, sealing and the Codec API),
// codec_membership.cc (membership packets and push-pull states) and codec_params.cc (parameter
// chunks and key operations). Not part of the library's API.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "wire/codec.h"
#include "wire/schema/meshtrain_generated.h"

namespace meshtrain::wire::codec_detail {

namespace fb = ::flatbuffers;
namespace w = ::meshtrain::wire::schema;
namespace ms = ::meshtrain::membership;

inline bool Fail(Reject r, Reject* why) {
  if (why != nullptr) *why = r;
  return false;
}

inline std::string ToString(const fb::String* s) {
  return s == nullptr ? std::string() : std::string(s->data(), s->size());
}

// ---- Membership bodies (codec_membership.cc) ----

std::pair<w::Body, fb::Offset<void>> EncodePacket(fb::FlatBufferBuilder& b, const ms::Packet& p);
std::pair<w::Body, fb::Offset<void>> EncodePushPull(fb::FlatBufferBuilder& b, const PushPullMsg& m);
// A required member name: present (else kVerify), 1..kMaxStringBytes, no control characters.
bool DecodeName(const fb::String* s, std::string* out, Reject* why);
bool DecodePacket(const w::MembershipPacket* p, ms::Packet* out, Reject* why);
bool DecodePushPull(const w::PushPull* p, PushPullMsg* out, Reject* why);

// ---- Parameter chunks and key operations (codec_params.cc) ----

// `slot` non-null (a chunk with a view): its floats are left uninitialized in the builder, and
// *slot points at them (Codec::EncodeChunkHead sends them from the view instead).
std::pair<w::Body, fb::Offset<void>> EncodeParamChunk(fb::FlatBufferBuilder& b, const ParamChunk& c,
                                                      float** slot = nullptr);
std::pair<w::Body, fb::Offset<void>> EncodeKeyOp(fb::FlatBufferBuilder& b, const KeyOpMsg& m);
std::pair<w::Body, fb::Offset<void>> EncodeKeyOpReply(fb::FlatBufferBuilder& b,
                                                      const KeyOpReplyMsg& m);
// `hold` (the buffer `c` lies in) non-null: plain floats, or an int8 chunk's q and scales, are
// left there (ParamChunk::held) instead of copied out.
bool DecodeParamChunk(const w::ParamChunk* c, uint32_t expected, ParamChunk* out, Reject* why,
                      std::shared_ptr<const void> hold = nullptr);
bool DecodeKeyOp(const w::KeyOp* k, KeyOpMsg* out, Reject* why);
bool DecodeKeyOpReply(const w::KeyOpReply* r, KeyOpReplyMsg* out, Reject* why);

}  // namespace meshtrain::wire::codec_detail
