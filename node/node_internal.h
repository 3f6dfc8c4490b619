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
// A participant's final model, acknowledged by the consensus leader, goes to it again only after
// this long (a leader that restarted lost it); never sooner, whatever the spread of finish times.
constexpr TimeMs kFinalResendMs = 60000;

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
