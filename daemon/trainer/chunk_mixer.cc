#include "daemon/trainer/chunk_mixer.h"

#include <cmath>

#include "daemon/trainer/trainer.h"
#include "wire/compress.h"

namespace meshtrain::daemon {

ChunkMixer::ChunkMixer(size_t max_queued_bytes) : max_queued_bytes_(max_queued_bytes) {
  thread_ = std::thread([this] { Run(); });
}

ChunkMixer::~ChunkMixer() {
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {

node::MixChunk Header(std::string from, uint32_t total, uint32_t offset) {
  node::MixChunk c;
  c.from = std::move(from);
  c.total = total;
  c.offset = offset;
  return c;
}

}  // namespace

bool ChunkMixer::Push(std::string from, uint32_t total, uint32_t offset, std::vector<float> data,
                      double w) {
  node::MixChunk c = Header(std::move(from), total, offset);
  c.data = std::move(data);
  return Push(std::move(c), w);
}

bool ChunkMixer::PushInt8(std::string from, uint32_t total, uint32_t offset, std::vector<int8_t> q,
                          std::vector<float> scales, double w) {
  if (q.empty()) return false;
  node::MixChunk c = Header(std::move(from), total, offset);
  c.q = std::move(q);
  c.scales = std::move(scales);
  return Push(std::move(c), w);
}

bool ChunkMixer::PushHeld(std::string from, uint32_t total, uint32_t offset, wire::HeldValues held,
                          double w) {
  if (!held) return false;
  node::MixChunk c = Header(std::move(from), total, offset);
  c.held = std::move(held);
  return Push(std::move(c), w);
}

bool ChunkMixer::Push(node::MixChunk chunk, double w) {
  // The codec checked the geometry; defence in depth.
  const wire::HeldValues& h = chunk.held;
  if (h && (h.n == 0 || (h.f == nullptr) == (h.q == nullptr))) return false;
  const size_t scales = h ? h.ns : chunk.scales.size();
  if (chunk.int8() &&
      (chunk.count() == 0 || scales != (chunk.count() + wire::kInt8Block - 1) / wire::kInt8Block)) {
    return false;
  }
  return Queue(Item{std::move(chunk), w});
}

bool ChunkMixer::Queue(Item item) {
  const size_t bytes = item.bytes();
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    if (stop_ || queued_bytes_ + bytes > max_queued_bytes_) {
      dropped_++;
      return false;
    }
    queued_bytes_ += bytes;
    queue_.push_back(std::move(item));
  }
  q_cv_.notify_one();
  return true;
}

void ChunkMixer::Run() {
  // Not a bulk thread (daemon/trainer/trainer.h): at nice +5 it fell behind under load and its
  // queue held the senders back (bench/model_size.py, 250 M int8: 9-10 peer models mixed in 40
  // steps against 10-12 at the agent's priority).
  NameThisThread("mt-mix");
  ThroughputThread();
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(q_mu_);
      q_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::vector<float> clipped;
    if (!robust() || JudgeChunk(item.chunk, &clipped)) {
      std::lock_guard<std::mutex> lock(sum_mu_);
      const node::MixChunk& c = item.chunk;
      if (!clipped.empty()) {
        sum_.Fold(c.from, c.total, c.offset, clipped.data(), clipped.size(), item.w);
      } else if (!c.int8()) {
        sum_.Fold(c.from, c.total, c.offset, c.values(), c.count(), item.w);
      } else {
        sum_.FoldInt8(c.from, c.total, c.offset, c.qvalues(), c.qscales(), wire::kInt8Block,
                      c.count(), item.w);
      }
    }
    // Let the chunk (and the frame it may hold) go before the mixer says it is idle, so
    // Drain() returns with every folded frame released.
    const size_t bytes = item.bytes();
    item = Item{};
    {
      std::lock_guard<std::mutex> lock(q_mu_);
      queued_bytes_ -= bytes;
      folded_++;
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }
}

bool ChunkMixer::JudgeChunk(const node::MixChunk& c, std::vector<float>* clipped) {
  const std::shared_ptr<const std::vector<float>> ref = JudgedAgainst(c.total);
  const size_t n = c.count();
  if (!ref || ref->size() != c.total || n == 0 || size_t{c.offset} + n > ref->size()) return true;
  const float* r = ref->data() + c.offset;
  const learn::DiffNorms d =
      c.int8() ? learn::DiffNorm2Int8(c.qvalues(), c.qscales(), wire::kInt8Block, r, n)
               : learn::DiffNorm2(c.values(), r, n);
  // Scaled to the whole model: a chunk of len floats is judged as if every chunk were like it.
  const double scale = static_cast<double>(c.total) / static_cast<double>(n);
  const learn::RobustVerdict v =
      Verdict(c.from, std::sqrt(d.diff2 * scale), std::sqrt(d.ref2 * scale), 1 / scale);
  if (v.kind == learn::RobustVerdict::kRefuse) return false;
  if (v.kind == learn::RobustVerdict::kClip) {
    clipped->resize(n);
    const float* x = c.values();
    if (c.int8()) {
      learn::DequantizeInt8(c.qvalues(), c.qscales(), wire::kInt8Block, clipped->data(), n);
      x = clipped->data();
    }
    learn::ClipToward(x, r, v.scale, clipped->data(), n);
  }
  return true;
}

void ChunkMixer::SetReference(std::shared_ptr<const std::vector<float>> ref) {
  if (!robust()) return;  // off: no reference held (it would keep a snapshot buffer busy)
  std::lock_guard<std::mutex> lock(ref_mu_);
  ref_ = std::move(ref);
}

std::shared_ptr<const std::vector<float>> ChunkMixer::JudgedAgainst(size_t n) const {
  {
    std::lock_guard<std::mutex> lock(center_mu_);
    if (center_ && center_->size() == n) return center_;
  }
  std::lock_guard<std::mutex> lock(ref_mu_);
  return ref_;
}

bool ChunkMixer::JudgeWhole(const std::string& from, const float* own, float* model, size_t n) {
  if (!robust() || n == 0) return true;
  std::shared_ptr<const std::vector<float>> center;
  {
    std::lock_guard<std::mutex> lock(center_mu_);
    if (center_ && center_->size() == n) center = center_;
  }
  const float* ref = center ? center->data() : own;  // as documented: the center, else own
  const learn::DiffNorms d = learn::DiffNorm2(model, ref, n);
  const learn::RobustVerdict v = Verdict(from, std::sqrt(d.diff2), std::sqrt(d.ref2), 1);
  if (v.kind == learn::RobustVerdict::kRefuse) return false;
  if (v.kind == learn::RobustVerdict::kClip) learn::ClipToward(model, ref, v.scale, model, n);
  return true;
}

learn::RobustVerdict ChunkMixer::Verdict(const std::string& from, double distance, double ref_norm,
                                         double share) {
  std::lock_guard<std::mutex> lock(judge_mu_);
  if (frozen_.load(std::memory_order_relaxed)) return judge_.Peek(from, distance, ref_norm);
  return judge_.Judge(from, distance, ref_norm, share);
}

learn::RobustReport ChunkMixer::Robust() const {
  learn::RobustReport out;
  out.on = robust();
  std::lock_guard<std::mutex> lock(judge_mu_);
  out.radius = judge_.last_radius();
  out.peers = judge_.peers();
  return out;
}

void ChunkMixer::Drain() {
  std::unique_lock<std::mutex> lock(q_mu_);
  idle_cv_.wait(lock, [&] { return stop_ || (queue_.empty() && !busy_); });
}

size_t ChunkMixer::Apply(float* x, size_t n) {
  std::lock_guard<std::mutex> lock(sum_mu_);
  const uint64_t floats = sum_.window_floats();
  const size_t senders = sum_.Apply(x, n);
  if (robust() && n > 0) {
    // The center the next window's chunks are judged against. The buffer is reused unless a
    // judgment still holds it (the lock keeps new holders out while it is rewritten).
    std::lock_guard<std::mutex> center_lock(center_mu_);
    if (!center_ || center_->size() != n || center_.use_count() > 1) {
      center_ = std::make_shared<std::vector<float>>(n);
    }
    std::copy(x, x + n, center_->begin());
  }
  if (senders > 0 && n > 0) {
    // Lock-free for readers: status reads these on the event loop, which must never wait for
    // this lock (held over a whole model by Apply).
    models_mixed_ppm_.fetch_add(floats * 1000000 / n, std::memory_order_relaxed);
  }
  return senders;
}

double ChunkMixer::models_mixed() const {
  return static_cast<double>(models_mixed_ppm_.load(std::memory_order_relaxed)) / 1e6;
}

void ChunkMixer::Clear() {
  {
    std::unique_lock<std::mutex> lock(q_mu_);
    for (const Item& item : queue_) queued_bytes_ -= item.bytes();
    queue_.clear();
    // The item being folded goes in first, then the sum is cleared.
    idle_cv_.wait(lock, [&] { return stop_ || !busy_; });
  }
  std::lock_guard<std::mutex> lock(sum_mu_);
  sum_.Clear();
  std::lock_guard<std::mutex> center_lock(center_mu_);
  center_.reset();  // the model was replaced: the old center says nothing of it
}

void ChunkMixer::Reserve(uint32_t total) {
  std::lock_guard<std::mutex> lock(sum_mu_);
  sum_.Reserve(total);
}

uint64_t ChunkMixer::dropped() const {
  std::lock_guard<std::mutex> lock(q_mu_);
  return dropped_;
}

uint64_t ChunkMixer::folded() const {
  std::lock_guard<std::mutex> lock(q_mu_);
  return folded_;
}

bool ChunkMixer::backlogged() const {
  std::lock_guard<std::mutex> lock(q_mu_);
  return queued_bytes_ * 2 > max_queued_bytes_;
}

size_t ChunkMixer::queued_bytes() const {
  std::lock_guard<std::mutex> lock(q_mu_);
  return queued_bytes_;
}

}  // namespace meshtrain::daemon
