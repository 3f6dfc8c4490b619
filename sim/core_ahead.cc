#include "sim/core_ahead.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace meshtrain::sim {
namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// How long the idle worker polls for the next batch before it sleeps: a millisecond of
// simulated events takes the main thread far longer at the sizes the worker is used for, and
// waking from a futex costs tens of microseconds.
constexpr int kSpinsBeforeSleep = 4000;

}  // namespace

CoreAhead::CoreAhead(std::vector<std::unique_ptr<node::Node>>* nodes, uint64_t (*ticks)())
    : nodes_(nodes),
      ticks_(ticks),
      items_(kMaxItems),
      outs_(kMaxItems),
      deadlines_(kMaxItems, 0),
      state_(std::make_unique<std::atomic<uint8_t>[]>(kMaxItems)),
      item_of_(nodes->size(), kNone) {
  worker_ = std::thread([this] { Work(); });
}

CoreAhead::~CoreAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_one();
  worker_.join();
}

void CoreAhead::Post(const std::vector<Item>& items) {
  // The worker may still be skipping the tail of the previous batch (every item of it was
  // taken, so it steps none of them): its items are reused only after it let go.
  const uint64_t prev = posted_.load(std::memory_order_relaxed);
  while (finished_.load(std::memory_order_acquire) != prev) CpuRelax();
  count_ = std::min(items.size(), kMaxItems);
  for (size_t k = 0; k < count_; ++k) {
    items_[k] = items[k];
    state_[k].store(kPending, std::memory_order_relaxed);
    item_of_[items[k].node] = static_cast<uint32_t>(k);
  }
  left_ = count_;
  posted_items_ += count_;
  back_ = count_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.store(prev + 1, std::memory_order_release);
  }
  cv_.notify_one();
}

std::vector<node::Output>* CoreAhead::Take(uint32_t node, int64_t* deadline) {
  const uint32_t k = item_of_[node];
  item_of_[node] = kNone;
  --left_;
  uint8_t expected = kPending;
  if (state_[k].compare_exchange_strong(expected, kMain, std::memory_order_acq_rel)) {
    return nullptr;
  }
  while (state_[k].load(std::memory_order_acquire) != kDone) {
    if (!StepFromBack()) CpuRelax();
  }
  *deadline = deadlines_[k];
  return &outs_[k];
}

uint64_t CoreAhead::StepItem(size_t k) {
  const Item& it = items_[k];
  node::Node& nd = *(*nodes_)[it.node];
  const uint64_t t0 = ticks_();
  if (it.in != nullptr) {
    nd.StepIn(*it.in, it.at);
  } else if (it.at >= nd.NextDeadline()) {
    nd.Tick(it.at);
  }
  const uint64_t ticks = ticks_() - t0;
  nd.TakeOutput(&outs_[k]);
  deadlines_[k] = nd.NextDeadline();
  return ticks;
}

bool CoreAhead::StepFromBack() {
  while (back_ > 0) {
    const size_t j = --back_;
    uint8_t expected = kPending;
    if (!state_[j].compare_exchange_strong(expected, kMain, std::memory_order_acq_rel)) {
      // Taken here already, or claimed by the worker, which claims in order: every item before
      // it is claimed or taken too.
      if (expected == kWorker || expected == kDone) back_ = 0;
      continue;
    }
    main_ticks_ += StepItem(j);
    state_[j].store(kDone, std::memory_order_relaxed);  // read by this thread only
    return true;
  }
  return false;
}

void CoreAhead::Work() {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (posted_.load(std::memory_order_acquire) == seen && !stop_.load()) {
      if (++spins < kSpinsBeforeSleep) {
        CpuRelax();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return posted_.load(std::memory_order_acquire) != seen || stop_.load(); });
    }
    if (stop_.load()) return;
    seen = posted_.load(std::memory_order_acquire);
    StepBatch(count_);
    finished_.store(seen, std::memory_order_release);
  }
}

void CoreAhead::StepBatch(size_t count) {
  // Owned items: claimed by this thread (kWorker), so nobody else touches their nodes.
  bool own[kClaimAhead + 1] = {};
  const auto owned = [&](size_t k) -> bool& { return own[k % (kClaimAhead + 1)]; };
  size_t claimed = 0;
  uint64_t ticks = 0, stepped = 0;
  for (size_t k = 0; k < count; ++k) {
    for (; claimed < std::min(count, k + kClaimAhead + 1); ++claimed) {
      uint8_t expected = kPending;
      owned(claimed) =
          state_[claimed].compare_exchange_strong(expected, kWorker, std::memory_order_acq_rel);
    }
    // Cache hints for the owned items ahead, as the main thread's pipeline (NodeSim::Prefetch):
    // the node object four items ahead, its barrier and input three ahead, the views' buckets
    // and entries for the sender two and one ahead.
    for (size_t d = 1; d <= kClaimAhead && k + d < count; ++d) {
      if (!owned(k + d)) continue;
      const Item& it = items_[k + d];
      const node::Node& nd = *(*nodes_)[it.node];
      if (d == 4) {
        nd.Prefetch(0);
      } else if (d == 3) {
        const char* p = reinterpret_cast<const char*>(it.in);
        for (size_t off = 0; p != nullptr && off < sizeof(node::Input); off += 64) {
          __builtin_prefetch(p + off);
        }
        nd.Prefetch(1);
      } else if (it.in != nullptr) {
        nd.Prefetch(static_cast<int>(4 - d), it.in);
      }
    }
    if (!owned(k)) continue;
    ticks += StepItem(k);
    ++stepped;
    state_[k].store(kDone, std::memory_order_release);
  }
  worker_ticks_.fetch_add(ticks, std::memory_order_acq_rel);
  worker_items_.fetch_add(stepped, std::memory_order_acq_rel);
}

}  // namespace meshtrain::sim
