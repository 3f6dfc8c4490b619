#include "gossip/broadcast_queue.h"

#include <utility>

namespace meshtrain::gossip {

using membership::EstimateSize;
using membership::ProgressMsg;

namespace {
// Smallest update EstimateSize can return (a progress update with a 1-char name); once the
// budget is below it nothing else fits.
size_t MinUpdateBytes() { return EstimateSize(ProgressMsg{"x", 0, {}}); }
// How many too-large updates Fill looks past before giving up on the packet.
constexpr int kMaxSkips = 32;
}  // namespace

int BroadcastQueue::SlotOf(const Update& u) { return std::holds_alternative<ProgressMsg>(u); }

const std::string& BroadcastQueue::NameOf(const Update& u) {
  return std::visit([](const auto& m) -> const std::string& { return m.name; }, u);
}

void BroadcastQueue::Queue(Update u) {
  const int slot = SlotOf(u);
  const std::string& name = NameOf(u);
  auto it = index_[slot].find(name);
  const Key key{0, next_id_++};
  if (it != index_[slot].end()) {
    order_.erase(it->second);
    it->second = key;
  } else {
    index_[slot].emplace(name, key);
  }
  const size_t bytes = EstimateSize(u);
  order_.emplace(key, Item{std::move(u), bytes, slot});
}

size_t BroadcastQueue::Fill(size_t budget, int limit, std::vector<Update>* out) {
  const size_t min_bytes = MinUpdateBytes();
  size_t used = 0;
  int skips = 0;
  std::vector<Key> taken;
  for (auto it = order_.begin(); it != order_.end() && budget - used >= min_bytes; ++it) {
    if (it->second.bytes > budget - used) {
      if (++skips > kMaxSkips) break;
      continue;
    }
    used += it->second.bytes;
    out->push_back(it->second.update);
    taken.push_back(it->first);
  }
  // Re-key after the scan so an update is never taken twice for one packet.
  for (const Key& k : taken) {
    auto node = order_.extract(k);
    Item& item = node.mapped();
    const int transmits = k.transmits + 1;
    if (transmits >= limit) {
      index_[item.slot].erase(NameOf(item.update));
      continue;
    }
    node.key() = Key{transmits, k.id};
    index_[item.slot][NameOf(item.update)] = node.key();
    order_.insert(std::move(node));
  }
  return used;
}

void BroadcastQueue::Clear() {
  order_.clear();
  index_[0].clear();
  index_[1].clear();
}

}  // namespace meshtrain::gossip
