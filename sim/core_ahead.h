// CoreAhead: the simulator's node cores stepped ahead on a second thread (PspSimOptions::threads),
// with results identical to one thread.
//
// The simulation is one sequence of events; an event's effect on its node core (Node::StepIn)
// depends only on that node's state, the input and the time. So when the event queue knows the
// rest of the current millisecond (sim::NodeNet::Upcoming: later pushes for it come after those
// events), the first input (a datagram, or a frame or close its connection admits) or live
// deadline of each node in it can have its node core stepped early: nothing before it in the
// sequence touches that node. The main thread posts those events as a
// batch; the worker steps them in order while the main thread goes on handling the events
// before them (the network model, the trainers, the queue). When the main thread reaches a
// posted event, it finds the node core stepped (waiting if the worker is in the middle of it)
// and only executes the outputs the worker took from it (with the node's next deadline, read
// right after the step), as it would have after stepping it itself; the main thread does not
// touch the node's own memory for it at all, which would only move it from one core's cache to
// the other's. If the worker has not claimed the item yet, the main thread claims and steps it.
//
// Each posted item is owned by exactly one thread (an atomic state claimed by compare-exchange),
// the worker touches nothing but the posted nodes and their inputs, and the main thread does not
// touch a posted node until it takes the item. The inputs stay in place (NodeNet's slots never
// move) until the main thread releases them after the take.
//
// Thread-safety: Post, Posted, Take and busy are for the one main thread; the worker is internal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "node/node.h"

namespace meshtrain::sim {

class CoreAhead {
 public:
  struct Item {
    uint32_t node = 0;
    uint32_t slot = 0;  // the input's slot in NodeNet (identifies the event), or kTickSlot
    int64_t at = 0;     // the event's time
    // The input; null for a deadline: the node core's Tick if `at` reached its NextDeadline.
    node::Input* in = nullptr;
  };
  static constexpr uint32_t kTickSlot = ~uint32_t{0};
  static constexpr size_t kMaxItems = 4096;

  // `nodes` outlives this object; `ticks` is the clock the node-core time is measured with.
  CoreAhead(std::vector<std::unique_ptr<node::Node>>* nodes, uint64_t (*ticks)());
  ~CoreAhead();
  CoreAhead(const CoreAhead&) = delete;
  CoreAhead& operator=(const CoreAhead&) = delete;

  // Items posted and not yet taken.
  bool busy() const { return left_ > 0; }
  // Posts up to kMaxItems items (distinct nodes) for the worker. Requires !busy().
  void Post(const std::vector<Item>& items);
  // Whether `node` has a posted item not yet taken (with `slot`: that one).
  bool Posted(uint32_t node) const { return node < item_of_.size() && item_of_[node] != kNone; }
  bool Posted(uint32_t node, uint32_t slot) const {
    return Posted(node) && items_[item_of_[node]].slot == slot;
  }
  // Takes node's posted item. If its node core was stepped (by the worker, or by this thread
  // while it waited for the worker), returns the outputs the step left (the caller executes and
  // clears them) and sets *deadline to the node's NextDeadline after the step. Null if the caller
  // must step it (nobody else will). While the worker is busy with the item, this thread steps
  // the batch's last items the worker has not claimed yet, so that neither thread idles while the
  // other has node cores to step.
  std::vector<node::Output>* Take(uint32_t node, int64_t* deadline);
  // Time-stamp ticks spent in node cores: by the worker, and by Take's thread in items it stepped
  // while waiting.
  uint64_t ticks() const { return worker_ticks_.load(std::memory_order_acquire) + main_ticks_; }
  // Items posted, and those the worker stepped.
  uint64_t posted_items() const { return posted_items_; }
  uint64_t worker_items() const { return worker_items_.load(std::memory_order_acquire); }

 private:
  enum State : uint8_t { kPending, kWorker, kDone, kMain };
  static constexpr uint32_t kNone = ~uint32_t{0};
  // Items the worker claims ahead of the one it steps, whose state it prefetches meanwhile.
  static constexpr size_t kClaimAhead = 4;

  void Work();
  void StepBatch(size_t count);
  // Steps the node core of item k and takes its outputs; returns the time-stamp ticks it took.
  uint64_t StepItem(size_t k);
  // Take's thread: steps the last item nobody claimed; false if there is none.
  bool StepFromBack();

  std::vector<std::unique_ptr<node::Node>>* nodes_;
  uint64_t (*ticks_)();
  std::vector<Item> items_;                        // kMaxItems; the posted batch
  std::vector<std::vector<node::Output>> outs_;    // per item: what its step left
  std::vector<int64_t> deadlines_;                 // per item: the node's next deadline after it
  std::unique_ptr<std::atomic<uint8_t>[]> state_;  // per item
  std::vector<uint32_t> item_of_;      // node -> its posted item, or kNone (main thread)
  size_t left_ = 0;                    // posted items not yet taken (main thread)
  size_t back_ = 0;                    // items below it may be unclaimed (main thread)
  uint64_t posted_items_ = 0;          // main thread
  uint64_t main_ticks_ = 0;            // main thread
  size_t count_ = 0;                   // items in the batch (set before posted_)
  std::atomic<uint64_t> posted_{0};    // batches posted
  std::atomic<uint64_t> finished_{0};  // batches the worker is done with
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> worker_ticks_{0};
  std::atomic<uint64_t> worker_items_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread worker_;
};

}  // namespace meshtrain::sim
