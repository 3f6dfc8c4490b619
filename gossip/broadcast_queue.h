// The dissemination queue of the SWIM core (SWIM §4.3, memberlist TransmitLimitedQueue): state
// updates waiting to be piggybacked on outgoing packets. Holds at most one membership update
// (alive/suspect/dead) and one progress update per member — a newer update about a member
// replaces the older one. Each update is sent `limit` times, the least-transmitted first and,
// among equals, the newest first, as many as fit in each packet's byte budget.
//
// Thread-safety: none; owned by one Swim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "membership/types.h"

namespace meshtrain::gossip {

using membership::Update;

class BroadcastQueue {
 public:
  // Queues `u`, replacing any queued update of the same kind (membership or progress) about the
  // same member. The replacement starts with zero transmissions.
  void Queue(Update u);

  // Appends queued updates to `out` while their EstimateSize fits in `budget` bytes, counts a
  // transmission for each and drops those that reached `limit` transmissions. Returns the bytes
  // used. Cost is O(taken · log size) plus a bounded scan past updates that do not fit.
  size_t Fill(size_t budget, int limit, std::vector<Update>* out);

  // Whether a membership update (alive/suspect/dead) about `name` is queued.
  bool HasStateUpdate(const std::string& name) const { return index_[0].count(name) > 0; }

  size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }
  void Clear();

 private:
  // Ordering key: fewest transmissions first, then newest (largest id) first.
  struct Key {
    int transmits;
    uint64_t id;
    bool operator<(const Key& o) const {
      if (transmits != o.transmits) return transmits < o.transmits;
      return id > o.id;
    }
  };
  struct Item {
    Update update;
    size_t bytes;
    int slot;  // 0 = membership state, 1 = progress
  };

  static int SlotOf(const Update& u);
  static const std::string& NameOf(const Update& u);

  std::map<Key, Item> order_;
  std::unordered_map<std::string, Key> index_[2];  // per slot: member name -> key in order_
  uint64_t next_id_ = 0;
};

}  // namespace meshtrain::gossip
