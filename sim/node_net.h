// The simulated world between node::Node instances (sim/node_sim.h): one event queue ordered by
// (virtual time, sequence number) and the network model of PspSimOptions::net. The queue is a
// timing wheel of 1 ms buckets (events of a bucket in push order, which is sequence order) over
// the next kWheelMs, with a binary heap for events further ahead: O(1) per event where a heap of
// a million events would cost a cache miss per level.
//
// Everything a node's output causes at another node (or at itself) becomes an input delivered
// through the heap, never synchronously (docs/design.md "The node core"):
//   - SendDatagram: a DatagramIn at the receiver after latency + uniform jitter, unless lost
//     (probability `loss`) or the receiver is down at arrival.
//   - Connect/SendFrame/Close: a TCP-like stream. Frames queue on the sender's uplink and the
//     receiver's downlink (bandwidth MB/s each; a parameter chunk costs its share of
//     `param_bytes`), take latency + jitter, and a lost attempt costs one retransmission timeout;
//     frames of one direction arrive in order. The acceptor's end gets an id from the simulator
//     (below kFirstOutgoingConn) on its first FrameIn. Close gives the closer ConnClosed at once
//     (through the heap) and the other end ConnClosed after the data in flight. A Connect to a
//     node that is down (or unknown) yields ConnClosed{clean=false} after kConnectTimeoutMs; the
//     open connections of a node that crashes end at their other side the same way after
//     kStreamTimeoutMs (a reset or a TCP timeout), unless that side closes first.
// Endpoints are node names "n<index>", used as membership and data addresses.
//
// Thread-safety: none; one simulation owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "learn/rng.h"
#include "node/node.h"
#include "sim/psp_sim.h"

namespace meshtrain::sim {

using TimeMs = int64_t;

struct SimEvent {
  enum Kind : uint8_t {
    kInput,     // deliver input `slot` to `node`
    kTick,      // `node`'s deadline (valid while it is the one NodeSim tracks)
    kStepDone,  // `node`'s trainer finished computing a step
    kCrash,     // crash spec `slot` happens
    kSample,    // record the step distribution
    kCpuDone,   // host `node`'s next compute completion (live while `slot` is its generation)
  };
  TimeMs at;
  uint64_t seq;
  uint32_t node;
  uint32_t slot;
  Kind kind;
  uint8_t input = 0;  // kInput: the input's alternative (node::Input::index()), for a look ahead
};

// Per-node traffic, counted at the sender.
struct NodeTraffic {
  uint64_t messages = 0;  // datagrams and frames
  uint64_t bytes = 0;
};

class NodeNet {
 public:
  static constexpr TimeMs kConnectTimeoutMs = 1000;
  static constexpr TimeMs kStreamTimeoutMs = 3000;

  NodeNet(size_t nodes, const NetModel& model, size_t param_bytes, uint64_t seed);
  NodeNet(const NodeNet&) = delete;
  NodeNet& operator=(const NodeNet&) = delete;

  // ---- the event queue ----
  // Schedules an event; `at` must not be before the last popped event (it is clamped).
  void Push(TimeMs at, SimEvent::Kind kind, uint32_t node, uint32_t slot = 0, uint8_t input = 0);
  // The earliest event if it is due at or before `until`; false otherwise. After false, events
  // may still be pushed for any time >= `until`.
  bool PopUntil(TimeMs until, SimEvent* ev);
  // The event `k` places after the next one in the current millisecond, if the queue knows it
  // already (for prefetching; may miss events of the far heap).
  const SimEvent* PeekAhead(size_t k) const {
    const std::vector<SimEvent>& bucket = wheel_[static_cast<size_t>(cur_ & (kWheelMs - 1))];
    return pos_ + k < bucket.size() ? &bucket[pos_ + k] : nullptr;
  }
  // Prefetches the input of a kInput event (a hint; no effect on behaviour).
  void PrefetchInput(uint32_t slot) const {
    if (slot >= slots_.size()) return;
    const char* p = reinterpret_cast<const char*>(&slots_[slot]);
    for (size_t off = 0; off < sizeof(node::Input); off += 64) __builtin_prefetch(p + off);
  }
  // The input of a kInput event still in flight (for prefetching), or null.
  const node::Input* PeekInput(uint32_t slot) const {
    return slot < slots_.size() ? &slots_[slot] : nullptr;
  }
  // Delivers `in` (a node::Input alternative) to `node` at `at` (a kInput event), constructed in
  // its slot: an input is moved once on its way to the node core.
  template <typename T>
  void Deliver(TimeMs at, uint32_t node, T&& in) {
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      slots_[slot] = std::forward<T>(in);
    } else {
      slot = static_cast<uint32_t>(slots_.size());
      slots_.push_back(std::forward<T>(in));
    }
    Push(at, SimEvent::kInput, node, slot, static_cast<uint8_t>(slots_[slot].index()));
  }
  // The input of a kInput event, in place: valid until ReleaseInput(slot) or the next Deliver;
  // the node core may move from it.
  node::Input& InputAt(uint32_t slot) { return slots_[slot]; }
  // The event's input is done with: its slot is free for the next Deliver.
  void ReleaseInput(uint32_t slot) {
    slots_[slot] = node::ConnClosed{};  // releases what a moved-from value may still hold
    free_slots_.push_back(slot);
  }
  // The events still due in the current millisecond after the last popped one, in the order
  // PopUntil will return them, if that order is final: events pushed from now on for this
  // millisecond come after them. 0 (and *first unset) while events that waited in the far heap
  // for this millisecond are still to come. The pointer is valid until the next Push or Pop.
  size_t Upcoming(const SimEvent** first) const;

  // Whether a popped input may reach `node`: false for frames and closes of connection ends that
  // are already closed. Records a delivered ConnClosed.
  bool Admit(uint32_t node, const node::Input& in);
  // Admit's answer without recording anything. It changes only when `node` itself is handed a
  // close of that connection (or crashes), never by other nodes' inputs: so it holds for a
  // node's first input of a millisecond from the moment the millisecond's order is known
  // (NodeSim's look ahead).
  bool Admissible(uint32_t node, const node::Input& in);

  // ---- outputs of node `from` at `now` ----
  void Send(uint32_t from, node::SendDatagram&& d, TimeMs now);
  void Open(uint32_t from, const node::Connect& c, TimeMs now);
  void Send(uint32_t from, node::SendFrame&& f, TimeMs now);
  void Close(uint32_t from, const node::Close& c, TimeMs now);

  // `node` stops: nothing reaches it any more; its connections end at the other side.
  void Crash(uint32_t node, TimeMs now);
  bool up(uint32_t node) const { return up_[node] != 0; }

  // "n17" -> 17; -1 for anything else.
  int64_t IndexOf(const std::string& name) const;
  const std::string& name(uint32_t node) const { return names_[node]; }

  const std::vector<NodeTraffic>& traffic() const { return traffic_; }
  uint64_t datagrams_lost() const { return datagrams_lost_; }
  uint64_t param_frames() const { return param_frames_; }
  uint64_t membership_datagrams() const { return membership_datagrams_; }
  size_t open_connections() const { return conns_.size(); }

 private:
  struct End {
    bool fin = false;   // ConnClosed scheduled (or the end is gone): nothing more is sent to it
    bool done = false;  // ConnClosed delivered
    TimeMs last_arrival = 0;  // of the frames sent to this end (in-order delivery)
  };
  struct Conn {
    uint32_t opener = 0;
    uint32_t acceptor = 0;
    bool has_acceptor = false;
    node::ConnId opener_id = 0;
    End at_opener, at_acceptor;
  };
  static uint64_t OutKey(uint32_t node, node::ConnId id) {
    return (uint64_t{node} << 40) ^ (id - node::kFirstOutgoingConn);
  }
  // The connection `id` of `node`, and whether `node` is its opener; nullptr if unknown.
  Conn* Find(uint32_t node, node::ConnId id, bool* opener);
  // The end of its connection that frame or close `in` arrives at (sets *opener and *id); null
  // where Admit refuses it, and for an input that is not on a connection.
  End* ArrivalEnd(uint32_t node, const node::Input& in, bool* opener, node::ConnId* id);
  void MaybeErase(node::ConnId acceptor_id);
  TimeMs Latency();
  bool Lost() { return model_.loss > 0 && rng_.Uniform() < model_.loss; }
  size_t FrameBytes(const wire::Frame& f) const;

  NetModel model_;
  size_t param_bytes_;
  learn::Rng rng_;
  std::vector<std::string> names_;
  std::vector<uint8_t> up_;
  std::vector<double> uplink_free_;    // ms at which the node's uplink is idle again
  std::vector<double> downlink_free_;  // same for its downlink
  std::vector<NodeTraffic> traffic_;

  static constexpr TimeMs kWheelMs = TimeMs{1} << 14;
  std::vector<std::vector<SimEvent>> wheel_;  // bucket at & (kWheelMs - 1), for [cur_, +kWheelMs)
  std::vector<std::vector<SimEvent>> spare_;  // drained buckets' storage, for reuse
  static constexpr size_t kSpareBuckets = 64;
  TimeMs cur_ = 0;  // the bucket being drained
  size_t pos_ = 0;  // next event in it
  size_t in_wheel_ = 0;
  std::vector<SimEvent> far_;  // a binary heap (std::push_heap), earliest on top
  uint64_t seq_ = 0;
  // Inputs in flight, by slot, in chunks that never move: a node core may work on one input (on
  // another thread, sim/node_sim.h) while others are delivered.
  class Slots {
   public:
    size_t size() const { return size_; }
    node::Input& operator[](size_t i) { return chunks_[i / kChunk][i % kChunk]; }
    const node::Input& operator[](size_t i) const { return chunks_[i / kChunk][i % kChunk]; }
    template <typename T>
    void push_back(T&& in) {
      if (size_ == chunks_.size() * kChunk) {
        chunks_.push_back(std::make_unique<node::Input[]>(kChunk));
      }
      (*this)[size_++] = std::forward<T>(in);
    }

   private:
    static constexpr size_t kChunk = 1024;
    std::vector<std::unique_ptr<node::Input[]>> chunks_;
    size_t size_ = 0;
  };
  Slots slots_;
  std::vector<uint32_t> free_slots_;

  std::unordered_map<node::ConnId, Conn> conns_;         // by the acceptor's id
  std::unordered_map<uint64_t, node::ConnId> outgoing_;  // OutKey(opener, its id) -> acceptor id
  node::ConnId next_accept_id_ = 1;

  uint64_t datagrams_lost_ = 0;
  uint64_t param_frames_ = 0;
  uint64_t membership_datagrams_ = 0;
};

}  // namespace meshtrain::sim
