// Hand-built envelopes, as a hostile or buggy peer could send them: verifier-valid FlatBuffers
// that the codec's own encoders would never produce (shared sub-tables inflating counts,
// unknown union and enum values, missing required fields). Built with FlatBuffers' raw table
// API from the field slots of wire/schema/meshtrain.fbs (slot i has vtable offset 4 + 2i),
// so the tests need no generated code.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "wire/codec.h"

namespace meshtrain::wire::testing {

struct Crafted {
  std::string what;
  bool frame;                  // decode with DecodeFrame, else DecodeDatagram
  std::vector<uint8_t> fb;     // the FlatBuffer, without marker or seal
  std::optional<Reject> want;  // nullopt: must be accepted
};

namespace crafted_detail {

namespace fb = ::flatbuffers;
constexpr fb::voffset_t Slot(int i) { return static_cast<fb::voffset_t>(4 + 2 * i); }

// Body union type ids (schema order, NONE = 0).
enum : uint8_t {
  kPacket = 1,
  kQuery = 2,
  kReply = 3,
  kPushPull = 4,
  kChunk = 5,
  kKeyOp = 6,
  kKeyOpReply = 7,
  kRelayFrame = 10
};
// Update union ids.
enum : uint8_t { kAlive = 1, kSuspect = 2, kDead = 3, kProgress = 4 };

struct EnvOpts {
  uint16_t version = kProtocolVersion;
  const char* cluster = "default";  // nullptr: field absent
  const char* sender = "n1";
  const char* identifier = "MSHT";
};

inline std::vector<uint8_t> FinishEnvelope(fb::FlatBufferBuilder& b, uint8_t body_type,
                                           fb::uoffset_t body, const EnvOpts& o = {}) {
  fb::Offset<fb::String> cluster = o.cluster ? b.CreateString(o.cluster) : 0;
  fb::Offset<fb::String> sender = o.sender ? b.CreateString(o.sender) : 0;
  const auto start = b.StartTable();
  b.AddElement<uint64_t>(Slot(3), 1, 0);
  if (body != 0) b.AddOffset(Slot(5), fb::Offset<void>(body));
  if (o.sender) b.AddOffset(Slot(2), sender);
  if (o.cluster) b.AddOffset(Slot(1), cluster);
  b.AddElement<uint16_t>(Slot(0), o.version, 0);
  b.AddElement<uint8_t>(Slot(4), body_type, 0);
  const auto root = b.EndTable(start);
  b.Finish(fb::Offset<void>(root), o.identifier);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

inline fb::uoffset_t Progress(fb::FlatBufferBuilder& b, const char* name, uint64_t step) {
  const auto n = b.CreateString(name);
  const auto start = b.StartTable();
  b.AddElement<uint64_t>(Slot(1), step, 0);
  b.AddOffset(Slot(0), n);
  return b.EndTable(start);
}

// A membership packet whose `count` updates all point at one shared update table.
inline std::vector<uint8_t> SharedUpdates(size_t count, uint8_t update_type = kProgress,
                                          uint8_t primary_type = 0) {
  fb::FlatBufferBuilder b;
  const fb::uoffset_t u = Progress(b, "n7", 5);
  std::vector<uint8_t> types(count, update_type);
  std::vector<fb::Offset<void>> values(count, fb::Offset<void>(u));
  const auto tv = b.CreateVector(types);
  const auto vv = b.CreateVector(values);
  const auto addr = b.CreateString("127.0.0.1:7950");
  const auto start = b.StartTable();
  b.AddOffset(Slot(0), addr);
  b.AddOffset(Slot(4), tv);
  b.AddOffset(Slot(5), vv);
  if (primary_type != 0) b.AddOffset(Slot(3), fb::Offset<void>(u));
  b.AddElement<uint8_t>(Slot(2), primary_type, 0);
  return FinishEnvelope(b, kPacket, b.EndTable(start));
}

// A push-pull whose `count` members all point at one shared MemberState table.
inline std::vector<uint8_t> SharedMembers(size_t count, uint8_t status = 0) {
  fb::FlatBufferBuilder b;
  const auto name = b.CreateString("m");
  const auto addr = b.CreateString("10.0.0.1:7950");
  auto start = b.StartTable();
  b.AddOffset(Slot(0), name);
  b.AddOffset(Slot(1), addr);
  b.AddElement<uint8_t>(Slot(3), status, 0);
  const fb::uoffset_t member = b.EndTable(start);
  std::vector<fb::Offset<void>> members(count, fb::Offset<void>(member));
  const auto mv = b.CreateVector(members);
  start = b.StartTable();
  b.AddOffset(Slot(2), mv);
  return FinishEnvelope(b, kPushPull, b.EndTable(start));
}

inline std::vector<uint8_t> Query(const EnvOpts& o, uint8_t body_type = kQuery) {
  fb::FlatBufferBuilder b;
  const auto start = b.StartTable();
  b.AddElement<uint32_t>(Slot(0), 7, 0);
  b.AddElement<uint64_t>(Slot(1), 8, 0);
  return FinishEnvelope(b, body_type, b.EndTable(start), o);
}

inline std::vector<uint8_t> ChunkWithoutData() {
  fb::FlatBufferBuilder b;
  const auto start = b.StartTable();
  b.AddElement<uint32_t>(Slot(3), 1, 0);
  b.AddElement<uint32_t>(Slot(4), 10, 0);
  return FinishEnvelope(b, kChunk, b.EndTable(start));
}

inline std::vector<uint8_t> AliveWithoutAddr() {
  fb::FlatBufferBuilder b;
  const auto name = b.CreateString("n3");
  auto start = b.StartTable();
  b.AddOffset(Slot(0), name);
  const fb::uoffset_t alive = b.EndTable(start);
  std::vector<uint8_t> types{kAlive};
  std::vector<fb::Offset<void>> values{fb::Offset<void>(alive)};
  const auto tv = b.CreateVector(types);
  const auto vv = b.CreateVector(values);
  const auto addr = b.CreateString("127.0.0.1:7950");
  start = b.StartTable();
  b.AddOffset(Slot(0), addr);
  b.AddOffset(Slot(4), tv);
  b.AddOffset(Slot(5), vv);
  return FinishEnvelope(b, kPacket, b.EndTable(start));
}

// KeyOp { op, key, seq }: `key_len` < 0 leaves the key out.
inline std::vector<uint8_t> KeyOpBody(uint8_t op, int key_len) {
  fb::FlatBufferBuilder b;
  fb::Offset<fb::Vector<uint8_t>> key = 0;
  if (key_len >= 0) {
    std::vector<uint8_t> bytes(static_cast<size_t>(key_len), 0x5A);
    key = b.CreateVector(bytes);
  }
  const auto start = b.StartTable();
  b.AddElement<uint32_t>(Slot(2), 9, 0);
  if (key_len >= 0) b.AddOffset(Slot(1), key);
  b.AddElement<uint8_t>(Slot(0), op, 0);
  return FinishEnvelope(b, kKeyOp, b.EndTable(start));
}

// KeyOpReply { seq, ok, error, keys: [KeyHash { fingerprint, primary }] }. A null fingerprint
// leaves the field out of that KeyHash.
inline std::vector<uint8_t> KeyOpReplyBody(const std::vector<const char*>& fingerprints,
                                           const std::vector<bool>& primary,
                                           const char* error = nullptr) {
  fb::FlatBufferBuilder b;
  std::vector<fb::Offset<void>> hashes;
  for (size_t i = 0; i < fingerprints.size(); ++i) {
    fb::Offset<fb::String> f = fingerprints[i] ? b.CreateString(fingerprints[i]) : 0;
    const auto start = b.StartTable();
    if (fingerprints[i]) b.AddOffset(Slot(0), f);
    b.AddElement<uint8_t>(Slot(1), primary[i] ? 1 : 0, 0);
    hashes.push_back(fb::Offset<void>(b.EndTable(start)));
  }
  const auto keys = b.CreateVector(hashes);
  fb::Offset<fb::String> err = error ? b.CreateString(error) : 0;
  const auto start = b.StartTable();
  b.AddOffset(Slot(3), keys);
  if (error) b.AddOffset(Slot(2), err);
  b.AddElement<uint32_t>(Slot(0), 9, 0);
  b.AddElement<uint8_t>(Slot(1), 1, 0);
  return FinishEnvelope(b, kKeyOpReply, b.EndTable(start));
}

// A relay frame: `dest` (nullptr: absent) and `inner` bytes (-1: absent).
inline std::vector<uint8_t> RelayFrameBody(const char* dest, int inner) {
  fb::FlatBufferBuilder b;
  fb::Offset<fb::String> d = dest ? b.CreateString(dest) : 0;
  fb::Offset<fb::Vector<uint8_t>> in = 0;
  if (inner >= 0) {
    std::vector<uint8_t> bytes(static_cast<size_t>(inner), 0x5A);
    in = b.CreateVector(bytes);
  }
  const auto start = b.StartTable();
  if (dest) b.AddOffset(Slot(0), d);
  if (inner >= 0) b.AddOffset(Slot(1), in);
  return FinishEnvelope(b, kRelayFrame, b.EndTable(start));
}

}  // namespace crafted_detail

// Every crafted case with the reason the codec must give (for cluster "default").
inline std::vector<Crafted> CraftedCases() {
  using namespace crafted_detail;
  std::vector<Crafted> c;
  c.push_back({"64 shared updates", false, SharedUpdates(kMaxUpdatesPerDatagram), std::nullopt});
  c.push_back(
      {"65 shared updates", false, SharedUpdates(kMaxUpdatesPerDatagram + 1), Reject::kSemantic});
  c.push_back({"unknown update type", false, SharedUpdates(1, 9), Reject::kSemantic});
  c.push_back({"NONE update type", false, SharedUpdates(1, 0), Reject::kSemantic});
  c.push_back({"unknown primary type", false, SharedUpdates(1, kProgress, 9), Reject::kSemantic});
  c.push_back({"alive without addr", false, AliveWithoutAddr(), Reject::kVerify});
  c.push_back({"query", false, Query({}), std::nullopt});
  c.push_back({"unknown body type", false, Query({}, 11), Reject::kSemantic});
  c.push_back({"relay register", false, SharedUpdates(1, kProgress, 5), std::nullopt});
  // Relay frames: a member name, and inner bytes that could be a datagram.
  c.push_back({"relay frame", false, RelayFrameBody("n2", 100), std::nullopt});
  c.push_back({"relay frame, largest inner", false,
               RelayFrameBody("n2", static_cast<int>(kMaxRelayInnerBytes)), std::nullopt});
  c.push_back({"relay frame, inner too large", false,
               RelayFrameBody("n2", static_cast<int>(kMaxRelayInnerBytes) + 1), Reject::kSemantic});
  c.push_back({"relay frame, inner too small", false, RelayFrameBody("n2", 8), Reject::kSemantic});
  c.push_back({"relay frame, no inner", false, RelayFrameBody("n2", -1), Reject::kVerify});
  c.push_back({"relay frame, no dest", false, RelayFrameBody(nullptr, 100), Reject::kVerify});
  c.push_back({"relay frame, empty dest", false, RelayFrameBody("", 100), Reject::kSemantic});
  c.push_back({"relay frame, control char in dest", false, RelayFrameBody("n\x01", 100),
               Reject::kSemantic});
  c.push_back({"relay frame, 65-byte dest", false,
               RelayFrameBody(std::string(kMaxSenderBytes + 1, 'd').c_str(), 100),
               Reject::kSemantic});
  c.push_back({"relay frame in a TCP frame", true, RelayFrameBody("n2", 100), Reject::kSemantic});
  c.push_back({"no sender", false, Query({kProtocolVersion, "default", nullptr}), Reject::kVerify});
  c.push_back({"no cluster", false, Query({kProtocolVersion, nullptr, "n1"}), Reject::kVerify});
  c.push_back({"empty sender", false, Query({kProtocolVersion, "default", ""}), Reject::kSemantic});
  c.push_back({"version 0", false, Query({0}), Reject::kVersion});
  c.push_back({"version 2", false, Query({2}), Reject::kVersion});
  c.push_back({"other cluster", false, Query({kProtocolVersion, "defaulT"}), Reject::kCluster});
  c.push_back({"wrong identifier", false, Query({kProtocolVersion, "default", "n1", "MSHU"}),
               Reject::kVerify});
  c.push_back({"chunk without data", true, ChunkWithoutData(), Reject::kVerify});
  c.push_back({"member status 200", true, SharedMembers(1, 200), Reject::kSemantic});
  c.push_back({"member status 4", true, SharedMembers(1, 4), Reject::kSemantic});
  c.push_back({"100000 shared members", true, SharedMembers(kMaxPushPullMembers), std::nullopt});
  c.push_back(
      {"100001 shared members", true, SharedMembers(kMaxPushPullMembers + 1), Reject::kSemantic});
  // Key rotation frames (`meshtrain keys`).
  c.push_back({"key op use, 32-byte key", true, KeyOpBody(2, 32), std::nullopt});
  c.push_back({"key op list, no key", true, KeyOpBody(4, -1), std::nullopt});
  c.push_back({"key op install, 31-byte key", true, KeyOpBody(1, 31), Reject::kSemantic});
  c.push_back({"key op remove, 33-byte key", true, KeyOpBody(3, 33), Reject::kSemantic});
  c.push_back({"key op install, no key", true, KeyOpBody(1, -1), Reject::kVerify});
  c.push_back({"key op list with a key", true, KeyOpBody(4, 32), Reject::kSemantic});
  c.push_back({"key op 0", true, KeyOpBody(0, 32), Reject::kSemantic});
  c.push_back({"key op 5", true, KeyOpBody(5, -1), Reject::kSemantic});
  c.push_back({"key op in a datagram", false, KeyOpBody(2, 32), Reject::kSemantic});
  c.push_back({"key reply", true,
               KeyOpReplyBody({"0123456789abcdef", "fedcba9876543210"}, {true, false}),
               std::nullopt});
  c.push_back({"key reply, two primaries", true,
               KeyOpReplyBody({"0123456789abcdef", "fedcba9876543210"}, {true, true}),
               Reject::kSemantic});
  c.push_back({"key reply, duplicate fingerprints", true,
               KeyOpReplyBody({"0123456789abcdef", "0123456789abcdef"}, {false, false}),
               Reject::kSemantic});
  c.push_back({"key reply, uppercase fingerprint", true,
               KeyOpReplyBody({"0123456789ABCDEF"}, {true}), Reject::kSemantic});
  c.push_back(
      {"key reply, short fingerprint", true, KeyOpReplyBody({"0123"}, {true}), Reject::kSemantic});
  c.push_back(
      {"key reply, no fingerprint", true, KeyOpReplyBody({nullptr}, {false}), Reject::kVerify});
  c.push_back({"key reply, control char in error", true, KeyOpReplyBody({}, {}, "bad\nkey"),
               Reject::kSemantic});
  {
    std::vector<std::string> many;
    for (size_t i = 0; i <= kMaxKeysInReply; ++i) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%016zx", i);
      many.emplace_back(buf);
    }
    std::vector<const char*> ptrs;
    for (const auto& m : many) ptrs.push_back(m.c_str());
    c.push_back({"key reply, 65 keys", true,
                 KeyOpReplyBody(ptrs, std::vector<bool>(ptrs.size(), false)), Reject::kSemantic});
    ptrs.pop_back();
    c.push_back({"key reply, 64 keys", true,
                 KeyOpReplyBody(ptrs, std::vector<bool>(ptrs.size(), false)), std::nullopt});
  }
  // More tables than any legal push-pull: the verifier's table budget stops it first.
  c.push_back(
      {"300000 shared members", true, SharedMembers(3 * kMaxPushPullMembers), Reject::kVerify});
  return c;
}

}  // namespace meshtrain::wire::testing
