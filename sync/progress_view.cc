#include "sync/progress_view.h"

#include <algorithm>
#include <utility>

namespace meshtrain::sync {

ProgressView::ProgressView(std::string self, double interval_alpha)
    : self_(std::move(self)), alpha_(interval_alpha) {
  if (!(alpha_ > 0.0 && alpha_ <= 1.0)) alpha_ = 0.3;
}

void ProgressView::CountStep(uint64_t step, int delta) {
  if (delta > 0) {
    ++step_counts_[step];
    return;
  }
  auto it = step_counts_.find(step);
  if (it != step_counts_.end() && --it->second == 0) step_counts_.erase(it);
}

bool ProgressView::Update(const std::string& name, uint64_t step, TimeMs now) {
  if (!self_.empty() && name == self_) return false;
  auto [it, added] = index_.try_emplace(name, entries_.size());
  if (added) {
    PeerProgress p;
    p.step = step;
    p.learned = now;
    entries_.push_back(Entry{name, p});
    CountStep(step, +1);
    return true;
  }
  PeerProgress& p = entries_[it->second].progress;
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

bool ProgressView::Remove(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  const size_t pos = it->second;
  index_.erase(it);
  CountStep(entries_[pos].progress.step, -1);
  if (pos + 1 != entries_.size()) {
    entries_[pos] = std::move(entries_.back());
    index_[entries_[pos].name] = pos;
  }
  entries_.pop_back();
  return true;
}

void ProgressView::Clear() {
  entries_.clear();
  index_.clear();
  step_counts_.clear();
}

const PeerProgress* ProgressView::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second].progress;
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
