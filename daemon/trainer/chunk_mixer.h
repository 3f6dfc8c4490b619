// Folds peers' parameter chunks into a running sum on a thread of its own, so that
// neither the event loop nor the trainer pays for it chunk by chunk: the loop thread hands each
// arriving chunk over (Push moves it into a queue: O(1)), the mixer thread ("mt-mix") folds it
// into a learn::RunningSum, and the trainer mixes the sum into its parameters at its step
// boundary (Apply, under the sum's lock; the loop never takes that lock, so a long Apply of a
// large model only lets the queue grow for that while).
//
// Memory: the sum (one model) plus the queue, capped at max_queued_bytes: a chunk that would go
// beyond is dropped and counted (its range is then not mixed from that sender this round).
//
// Robust mixing (SetRobust; docs/design.md "Robust mixing"): the mixer thread judges each chunk
// against the same range of the center with learn::RobustJudge before folding it: as it is,
// clipped toward the center, or not at all. The center is the model this node's last mix made
// (Apply keeps a copy: one more model in memory while robust mixing is on), so a peer is judged
// by how far it went from where the mesh last stood (its pseudo-gradient), not by how far it is
// from this node's own model (which label-skewed shards pull apart). Before the first mix, and
// after Clear, the reference (the receiver's newest snapshot of its own model, SetReference)
// stands in. Without either of the model's size chunks are folded as they are.
//
// Thread-safety: Push from one thread (the loop); Apply, Clear, Drain, SetReference, JudgeWhole
// and Robust from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "learn/robust_mix.h"
#include "learn/running_sum.h"
#include "node/node.h"

namespace meshtrain::daemon {

class ChunkMixer {
 public:
  explicit ChunkMixer(size_t max_queued_bytes = size_t{64} << 20);
  ~ChunkMixer();  // stops and joins the thread
  ChunkMixer(const ChunkMixer&) = delete;
  ChunkMixer& operator=(const ChunkMixer&) = delete;

  // Queues floats [offset, offset + data.size()) of `from`'s model of `total` floats, to fold
  // with weight w. False when dropped (queue full, or stopped).
  bool Push(std::string from, uint32_t total, uint32_t offset, std::vector<float> data, double w);
  // The same for an int8 chunk the codec checked: values q[i] * scales[i / wire::kInt8Block],
  // folded from that form (a quarter of the bytes queued and read).
  bool PushInt8(std::string from, uint32_t total, uint32_t offset, std::vector<int8_t> q,
                std::vector<float> scales, double w);
  // Either, for values the codec left in their frame (wire::HeldValues: floats at f, or int8
  // at q with their scales at s, the geometry checked); the frame is kept until folded.
  bool PushHeld(std::string from, uint32_t total, uint32_t offset, wire::HeldValues held, double w);
  // Any of these, as the node emits it (the three above build one).
  bool Push(node::MixChunk chunk, double w);
  // Waits until every queued chunk has been folded (tests, and a MIX that must see all of a
  // transfer that has been acknowledged).
  void Drain();
  // Mixes the sum into x[0, n) and starts a new window; returns the senders mixed in. Robust: x
  // after the mix becomes the center.
  size_t Apply(float* x, size_t n);
  // Forgets queued and folded chunks (the model was replaced).
  void Clear();
  // Makes the running sum for a model of `total` floats now, its pages touched (the first
  // chunks then fold at full speed). Runs as long as a pass over the model: not on the loop.
  void Reserve(uint32_t total);

  // Robust mixing on or off (off: every chunk folded as it is).
  void SetRobust(bool on) { robust_.store(on, std::memory_order_relaxed); }
  bool robust() const { return robust_.load(std::memory_order_relaxed); }
  // Frozen while this node's trainer does not train (it finished, reached the target, or left):
  // its center no longer moves, so the distances of the chunks that still arrive grow with the
  // time since its last mix, not with what their senders did. They are judged by the standing
  // radius and flags (learn::RobustJudge::Peek) and recorded nowhere; unfrozen when a trainer
  // trains again.
  void SetFrozen(bool frozen) { frozen_.store(frozen, std::memory_order_relaxed); }
  // The receiver's own model the chunks are judged against (null: none). Kept only while robust
  // mixing is on.
  void SetReference(std::shared_ptr<const std::vector<float>> ref);
  // Whether `buffer` is the reference (a snapshot buffer it holds is still free to reuse).
  bool IsReference(const void* buffer) const {
    std::lock_guard<std::mutex> lock(ref_mu_);
    return ref_ && ref_.get() == buffer;
  }
  // Judges a whole model `from` sent (n floats) against the center, or `own` before there is
  // one, when robust mixing is on: false when it is refused; a clipped model is clipped in place.
  // Off: true.
  bool JudgeWhole(const std::string& from, const float* own, float* model, size_t n);
  // What the judge has seen (on: whether robust mixing is on). Short lock: safe on the loop.
  learn::RobustReport Robust() const;

  uint64_t dropped() const;
  // Peer models mixed in so far, counted in whole models: the floats of every Apply's window over
  // the model's size (a step that mixes half of one peer's snapshot adds 0.5).
  double models_mixed() const;
  uint64_t folded() const;
  size_t queued_bytes() const;
  // More than half of max_queued_bytes is queued: the producer should hold back (the agent
  // stops reading parameter connections; the rest of the room absorbs what was in hand).
  bool backlogged() const;

 private:
  struct Item {
    node::MixChunk chunk;
    double w = 0;
    size_t bytes() const {
      const size_t scales = chunk.held ? chunk.held.ns : chunk.scales.size();
      return chunk.int8() ? chunk.count() + scales * sizeof(float) : chunk.count() * sizeof(float);
    }
  };
  bool Queue(Item item);
  void Run();
  // Judges a chunk (robust mixing): false when refused; `clipped` receives the values to fold
  // instead when it is clipped (left empty otherwise).
  bool JudgeChunk(const node::MixChunk& c, std::vector<float>* clipped);
  // judge_'s verdict on a distance: recorded (Judge), or while frozen only looked up (Peek).
  learn::RobustVerdict Verdict(const std::string& from, double distance, double ref_norm,
                               double share);

  const size_t max_queued_bytes_;
  mutable std::mutex q_mu_;
  std::condition_variable q_cv_;     // items queued, or stop
  std::condition_variable idle_cv_;  // the queue ran empty and nothing is being folded
  // Guarded by q_mu_:
  std::deque<Item> queue_;
  size_t queued_bytes_ = 0;
  bool busy_ = false;  // an item is being folded
  bool stop_ = false;
  uint64_t dropped_ = 0;
  uint64_t folded_ = 0;

  mutable std::mutex sum_mu_;
  learn::RunningSum sum_;                      // guarded by sum_mu_
  std::atomic<uint64_t> models_mixed_ppm_{0};  // models mixed, in millionths

  std::atomic<bool> robust_{false};
  std::atomic<bool> frozen_{false};
  mutable std::mutex ref_mu_;
  std::shared_ptr<const std::vector<float>> ref_;  // guarded by ref_mu_
  // Not ref_mu_: the loop takes that (IsReference), and a copy of the center is a model's pass.
  mutable std::mutex center_mu_;
  std::shared_ptr<std::vector<float>> center_;  // guarded by center_mu_
  // The center when there is one of n floats, else the reference (or null).
  std::shared_ptr<const std::vector<float>> JudgedAgainst(size_t n) const;
  mutable std::mutex judge_mu_;
  learn::RobustJudge judge_;  // guarded by judge_mu_

  std::thread thread_;
};

}  // namespace meshtrain::daemon
