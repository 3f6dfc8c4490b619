#include "membership/types.h"

#include <type_traits>

namespace meshtrain::membership {

namespace {

// Conservative FlatBuffers cost model (docs/contract.md "Wire format"): every table pays for its
// vtable, its offset and alignment; every field pays for its vtable slot, its inline value or
// offset, a string's length prefix, terminator and padding. The codec (wire/) guarantees it never
// exceeds these.
constexpr size_t kFieldBytes = 16;
constexpr size_t kTableBytes = 32;

// Tags: two vector fields when present (the codec leaves them out when empty), and
// per string its vector slot, length prefix, terminator and padding.
size_t MetaSize(const Meta& m) {
  // The reach byte fits in this bound's slack (a vtable slot and one byte against
  // 16 B per field; tests/wire/codec_test.cc checks the bound with random metadata).
  size_t n = kTableBytes + 4 * kFieldBytes + m.data_addr.size();
  // The relay fields: the name's slot, prefix and padding, and the flag.
  if (!m.relay.empty() || m.serves_relay) n += 2 * kFieldBytes + m.relay.size();
  if (m.absent) n += kFieldBytes;
  if (!m.tags.empty()) n += 2 * kFieldBytes;
  for (const auto& [key, value] : m.tags) n += 2 * kFieldBytes + key.size() + value.size();
  return n;
}

// Each update is one element of the packet's vector of unions: a type tag and an offset.
constexpr size_t kUpdateWrapperBytes = kFieldBytes;

}  // namespace

const char* ReachName(Reach r) {
  switch (r) {
    case Reach::kUnknown:
      return "unknown";
    case Reach::kPublic:
      return "public";
    case Reach::kNat:
      return "nat";
  }
  return "unknown";
}

const char* StatusName(Status s) {
  switch (s) {
    case Status::kAlive:
      return "alive";
    case Status::kSuspect:
      return "suspect";
    case Status::kFailed:
      return "failed";
    case Status::kLeft:
      return "left";
  }
  return "unknown";
}

size_t EstimateSize(const Update& u) {
  return std::visit(
      [](const auto& m) -> size_t {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, AliveMsg>) {
          return kUpdateWrapperBytes + kTableBytes + 4 * kFieldBytes + m.name.size() +
                 m.addr.size() + MetaSize(m.meta);
        } else if constexpr (std::is_same_v<T, SuspectMsg> || std::is_same_v<T, DeadMsg>) {
          return kUpdateWrapperBytes + kTableBytes + 3 * kFieldBytes + m.name.size() +
                 m.from.size();
        } else {
          static_assert(std::is_same_v<T, ProgressMsg>);
          return kUpdateWrapperBytes + kTableBytes + 6 * kFieldBytes + m.name.size();
        }
      },
      u);
}

size_t EstimatePacketOverhead(const Packet& p) {
  // Packet table: from, from_addr, from_step, primary (type + value), updates (a vector of
  // unions: a type vector and a value vector), one field to spare for appended fields.
  size_t bytes = kTableBytes + 8 * kFieldBytes + p.from.size() + p.from_addr.size();
  bytes += std::visit(
      [](const auto& m) -> size_t {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return 0;
        } else if constexpr (std::is_same_v<T, PingMsg>) {
          return kTableBytes + 2 * kFieldBytes + m.target.size();
        } else if constexpr (std::is_same_v<T, IndirectPingMsg>) {
          return kTableBytes + 4 * kFieldBytes + m.target.size() + m.target_addr.size();
        } else if constexpr (std::is_same_v<T, AckMsg>) {
          return kTableBytes + 2 * kFieldBytes + m.observed.size();
        } else {
          static_assert(std::is_same_v<T, NackMsg> || std::is_same_v<T, RelayRegisterMsg>);
          return kTableBytes + kFieldBytes;
        }
      },
      p.primary);
  return bytes;
}

}  // namespace meshtrain::membership
