#include "node/watchers.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace meshtrain::node {

bool Watchers::Add(const std::string& name, const std::string& addr, uint32_t seq, uint64_t need,
                   size_t view) {
  const auto name_at = [this](size_t i) -> const std::string& { return watchers_[i].name; };
  const size_t pos = index_.Find(name, name_at);
  if (pos != sync::NameIndex::kNone) {
    Watcher& w = watchers_[pos];
    w.addr = addr;
    w.seq = seq;
    w.need = need;
  } else {
    if (watchers_.size() >= std::max(kMax, view + 1)) return false;
    watchers_.push_back(Watcher{name, addr, seq, need});
    index_.Insert(name, watchers_.size() - 1, watchers_.size(), name_at);
  }
  // The smallest need only falls here (a replaced watcher's larger need is caught by the walk).
  min_need_ = watchers_.size() == 1 ? need : std::min(min_need_, need);
  return true;
}

std::vector<Watchers::Watcher> Watchers::TakeDue(uint64_t step, bool training) {
  std::vector<Watcher> due;
  if (training && step < min_need_) return due;  // nobody is due
  const auto name_at = [this](size_t i) -> const std::string& { return watchers_[i].name; };
  // The due watchers leave the vector (the last one fills each hole) and are answered in name
  // order, as the sorted map this replaced did.
  uint64_t min_need = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < watchers_.size();) {
    if (training && step < watchers_[i].need) {
      min_need = std::min(min_need, watchers_[i].need);
      ++i;
      continue;
    }
    index_.Erase(watchers_[i].name, name_at);
    due.push_back(std::move(watchers_[i]));
    if (i + 1 != watchers_.size()) {
      index_.Relocate(watchers_.back().name, i, name_at);
      watchers_[i] = std::move(watchers_.back());
    }
    watchers_.pop_back();
  }
  min_need_ = min_need;
  std::sort(due.begin(), due.end(),
            [](const Watcher& a, const Watcher& b) { return a.name < b.name; });
  return due;
}

}  // namespace meshtrain::node
