#include "sync/progress_view.h"

#include <algorithm>
#include <utility>

namespace meshtrain::sync {

ProgressView::ProgressView(std::string self, double interval_alpha,
                           std::shared_ptr<NameTable> names)
    : self_(std::move(self)),
      alpha_(interval_alpha),
      names_(names ? std::move(names) : std::make_shared<NameTable>()) {
  if (!(alpha_ > 0.0 && alpha_ <= 1.0)) alpha_ = 0.3;
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
  const size_t pos = index_.Find(name, NameAt());
  if (pos != NameIndex::kNone) return Advance(pos, step, now);
  PeerProgress p;
  p.step = step;
  p.learned = now;
  entries_.push_back(Entry{names_->Intern(name), p});
  index_.Insert(name, entries_.size() - 1, entries_.size(), NameAt());
  CountStep(step, +1);
  if (added) *added = true;
  return true;
}

bool ProgressView::UpdateKnown(const std::string& name, uint64_t step, TimeMs now) {
  const size_t pos = index_.Find(name, NameAt());
  return pos != NameIndex::kNone && Advance(pos, step, now);
}

bool ProgressView::Remove(const std::string& name) {
  const size_t pos = index_.Erase(name, NameAt());
  if (pos == NameIndex::kNone) return false;
  CountStep(entries_[pos].progress.step, -1);
  if (pos + 1 != entries_.size()) {
    index_.Relocate(name_at(entries_.size() - 1), pos, NameAt());
    entries_[pos] = entries_.back();
  }
  entries_.pop_back();
  return true;
}

void ProgressView::Clear() {
  entries_.clear();
  index_.Clear();
  step_counts_.clear();
}

const PeerProgress* ProgressView::Find(const std::string& name) const {
  const size_t pos = index_.Find(name, NameAt());
  return pos == NameIndex::kNone ? nullptr : &entries_[pos].progress;
}

size_t ProgressView::Locate(const std::string& name, size_t* hint) const {
  if (*hint < entries_.size() && name_at(*hint) == name) return *hint;
  const size_t pos = index_.Find(name, NameAt());
  if (pos != NameIndex::kNone) *hint = pos;
  return pos;
}

const PeerProgress* ProgressView::Find(const std::string& name, size_t* hint) const {
  const size_t pos = Locate(name, hint);
  return pos == NameIndex::kNone ? nullptr : &entries_[pos].progress;
}

size_t ProgressView::Position(const std::string& name) const { return index_.Find(name, NameAt()); }

const PeerProgress* ProgressView::FindId(uint32_t id, size_t* hint) const {
  if (*hint < entries_.size() && entries_[*hint].name == id) return &entries_[*hint].progress;
  const size_t pos = index_.Find((*names_)[id], NameAt());
  if (pos == NameIndex::kNone) return nullptr;
  *hint = pos;
  return &entries_[pos].progress;
}

bool ProgressView::UpdateKnown(const std::string& name, uint64_t step, TimeMs now, size_t* hint) {
  const size_t pos = Locate(name, hint);
  return pos != NameIndex::kNone && Advance(pos, step, now);
}

std::vector<std::string> ProgressView::peers() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(name(e));
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
