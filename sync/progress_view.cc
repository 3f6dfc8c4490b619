#include "sync/progress_view.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace meshtrain::sync {

ProgressView::ProgressView(std::string self, double interval_alpha)
    : self_(std::move(self)), alpha_(interval_alpha) {
  if (!(alpha_ > 0.0 && alpha_ <= 1.0)) alpha_ = 0.3;
}

uint32_t ProgressView::HashName(const std::string& name) {
  return static_cast<uint32_t>(std::hash<std::string>{}(name));
}

size_t ProgressView::Lookup(const std::string& name, uint32_t tag) const {
  const size_t mask = table_.size() - 1;
  for (size_t b = tag & mask;; b = (b + 1) & mask) {
    const Bucket& k = table_[b];
    if (k.pos1 == 0) return b;
    if (k.tag == tag && entries_[k.pos1 - 1].name == name) return b;
  }
}

void ProgressView::Rehash(size_t capacity) {
  table_.assign(capacity, Bucket{});
  for (size_t i = 0; i < entries_.size(); ++i) {
    const uint32_t tag = HashName(entries_[i].name);
    table_[Lookup(entries_[i].name, tag)] = Bucket{static_cast<uint32_t>(i + 1), tag};
  }
}

// Backward-shift deletion: no tombstones, so probe chains stay short.
void ProgressView::EraseBucket(size_t b) {
  const size_t mask = table_.size() - 1;
  size_t hole = b;
  for (size_t j = (hole + 1) & mask; table_[j].pos1 != 0; j = (j + 1) & mask) {
    const size_t home = table_[j].tag & mask;
    // The entry at j may fill the hole when the hole lies on its probe path [home, j).
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = Bucket{};
}

void ProgressView::CountStep(uint64_t step, int delta) {
  auto it = std::lower_bound(
      step_counts_.begin(), step_counts_.end(), step,
      [](const std::pair<uint64_t, uint32_t>& c, uint64_t s) { return c.first < s; });
  const bool found = it != step_counts_.end() && it->first == step;
  if (delta > 0) {
    if (found) {
      ++it->second;
    } else {
      step_counts_.insert(it, {step, 1});
    }
    return;
  }
  if (found && --it->second == 0) step_counts_.erase(it);
}

bool ProgressView::Advance(size_t pos, uint64_t step, TimeMs now) {
  PeerProgress& p = entries_[pos].progress;
  if (step <= p.step) return false;  // stale or duplicate news: steps never go back
  // Interval sample: time between learning two steps, per step. Learning lags the peer's real
  // progress by a roughly constant gossip delay, so differences still track its pace.
  const TimeMs elapsed = std::max<TimeMs>(0, now - p.learned);
  const double sample = static_cast<double>(elapsed) / static_cast<double>(step - p.step);
  p.interval_ms = p.interval_ms > 0 ? alpha_ * sample + (1 - alpha_) * p.interval_ms : sample;
  CountStep(p.step, -1);
  CountStep(step, +1);
  p.step = step;
  p.learned = now;
  return true;
}

bool ProgressView::Update(const std::string& name, uint64_t step, TimeMs now, bool* added) {
  if (added) *added = false;
  if (!self_.empty() && name == self_) return false;
  const uint32_t tag = HashName(name);
  size_t b = table_.empty() ? 0 : Lookup(name, tag);
  if (!table_.empty() && table_[b].pos1 != 0) return Advance(table_[b].pos1 - 1, step, now);
  if (2 * (entries_.size() + 1) > table_.size()) {
    Rehash(std::max<size_t>(16, 2 * table_.size()));
    b = Lookup(name, tag);
  }
  PeerProgress p;
  p.step = step;
  p.learned = now;
  entries_.push_back(Entry{name, p});
  table_[b] = Bucket{static_cast<uint32_t>(entries_.size()), tag};
  CountStep(step, +1);
  if (added) *added = true;
  return true;
}

bool ProgressView::UpdateKnown(const std::string& name, uint64_t step, TimeMs now) {
  if (table_.empty()) return false;
  const size_t b = Lookup(name, HashName(name));
  return table_[b].pos1 != 0 && Advance(table_[b].pos1 - 1, step, now);
}

bool ProgressView::Remove(const std::string& name) {
  if (table_.empty()) return false;
  const size_t b = Lookup(name, HashName(name));
  if (table_[b].pos1 == 0) return false;
  const size_t pos = table_[b].pos1 - 1;
  EraseBucket(b);
  CountStep(entries_[pos].progress.step, -1);
  if (pos + 1 != entries_.size()) {
    const std::string& last = entries_.back().name;
    table_[Lookup(last, HashName(last))].pos1 = static_cast<uint32_t>(pos + 1);
    entries_[pos] = std::move(entries_.back());
  }
  entries_.pop_back();
  return true;
}

void ProgressView::Clear() {
  entries_.clear();
  table_.clear();
  step_counts_.clear();
}

const PeerProgress* ProgressView::Find(const std::string& name) const {
  if (table_.empty()) return nullptr;
  const Bucket& k = table_[Lookup(name, HashName(name))];
  return k.pos1 == 0 ? nullptr : &entries_[k.pos1 - 1].progress;
}

std::vector<std::string> ProgressView::peers() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<uint64_t> ProgressView::MinStep() const {
  if (step_counts_.empty()) return std::nullopt;
  return step_counts_.begin()->first;
}

std::optional<uint64_t> ProgressView::MaxStep() const {
  if (step_counts_.empty()) return std::nullopt;
  return step_counts_.rbegin()->first;
}

}  // namespace meshtrain::sync
