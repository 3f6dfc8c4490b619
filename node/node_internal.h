// Internals of node::Node shared by node.cc (inputs, membership, barrier, joins) and
// node_rounds.cc (parameter multicast rounds and reassembly). Not part of the API.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "node/node.h"

namespace meshtrain::node {
namespace ms = ::meshtrain::membership;
namespace internal {

namespace ms = ::meshtrain::membership;

// Bytes a frame costs beyond its floats (envelope, chunk header, seal, length prefix): the
// meters only need the order of magnitude; the driver counts the real bytes for status.
constexpr uint64_t kFrameOverheadBytes = 96;

inline bool IsLive(ms::Status s) { return s == ms::Status::kAlive || s == ms::Status::kSuspect; }

// FNV-1a: a hash that is the same on every host and build (std::hash is not specified to be).
inline uint64_t StableHash(const std::string& s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace internal

// One multicast round: the snapshot goes to every receiver over its parameter connection (kept
// open between rounds); the round ends when every transfer was acknowledged (ParamAck) or lost
// (its connection closed first).
struct Node::Transfer {
  std::string receiver;
  uint64_t wire_bytes = 0;  // what this transfer costs on the wire (payload + frame overhead)
  // Compressed transfers: the receiver's reference once it acknowledges (what it reconstructs),
  // and whether this transfer was a full snapshot.
  std::shared_ptr<const std::vector<float>> new_ref;
  bool full = true;
};

struct Node::Round {
  uint64_t id = 0;
  TimeMs started = 0;
  int outstanding = 0;
  int delivered = 0;
  uint64_t bytes = 0;      // acknowledged bytes on the wire
  uint64_t raw_bytes = 0;  // the same transfers as plain float32 chunks
  uint64_t raw_per_rx = 0;
  bool consensus = false;  // it carries the consensus model (acknowledgements recorded)
  std::map<ConnId, Transfer> transfers;  // connection -> transfer in flight on it
};

// What a peer holds of this node's model (sender side) or of the peer's (receiver side): the
// reference compressed changes are computed against and added to (wire/compress.h).
struct Node::Reference {
  uint64_t round = 0;
  uint32_t since_full = 0;  // changes sent on top of the last full snapshot
  std::shared_ptr<const std::vector<float>> values;
};

template <typename F>
void Node::ForEachPeer(F&& fn) const {
  if (swim_) {
    swim_->ForEachMember([&](const ms::Member& m) {
      if (m.name == config_.name) return;
      ++stats_.peer_visits;
      fn(RefOf(m));
    });
    return;
  }
  for (const ExternalPeer& v : external_) {
    ++stats_.peer_visits;
    fn(RefOf(v));
  }
}

struct Node::PushPull {
  std::string addr;
  bool done = false;
  bool join = false;
  uint64_t join_tag = 0;
};

}  // namespace meshtrain::node
