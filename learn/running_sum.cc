#include "learn/running_sum.h"

#include <algorithm>
#include <cmath>

#include "base/loop_guard.h"

namespace meshtrain::learn {

bool RunningSum::Fold(const std::string& from, uint32_t total, uint32_t offset, const float* data,
                      size_t n, double w) {
  if (total == 0 || n == 0 || uint64_t{offset} + n > total || !(w > 0) || !std::isfinite(w)) {
    return false;
  }
  if (sum_.empty()) {
    sum_.assign(total, 0.0f);
  } else if (sum_.size() != total) {
    return false;
  }
  if (!folded_[from].insert(offset).second) return false;
  LoopGuard::Note(n);
  const auto wf = static_cast<float>(w);
  float* s = sum_.data() + offset;
  for (size_t i = 0; i < n; ++i) s[i] += wf * data[i];
  AddWeight(offset, static_cast<uint32_t>(offset + n), w);
  window_floats_ += n;
  return true;
}

void RunningSum::SplitAt(uint32_t at) {
  auto it = segments_.upper_bound(at);
  if (it == segments_.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  const Segment tail{it->second.end, it->second.weight};
  it->second.end = at;
  segments_.emplace(at, tail);
}

void RunningSum::AddWeight(uint32_t a, uint32_t b, double w) {
  SplitAt(a);
  SplitAt(b);
  uint32_t pos = a;
  auto it = segments_.lower_bound(a);
  while (pos < b) {
    if (it == segments_.end() || it->first >= b) {
      segments_.emplace(pos, Segment{b, w});  // a gap up to b
      return;
    }
    if (it->first > pos) segments_.emplace(pos, Segment{it->first, w});  // the gap before it
    it->second.weight += w;
    pos = it->second.end;
    ++it;
  }
}

size_t RunningSum::Apply(float* x, size_t n) {
  LoopGuard::Note(n);
  const size_t senders = folded_.size();
  if (n == sum_.size()) {
    for (const auto& [start, seg] : segments_) {
      const auto inv = static_cast<float>(1.0 / (1.0 + seg.weight));
      float* xi = x + start;
      float* si = sum_.data() + start;
      const size_t len = seg.end - start;
      for (size_t i = 0; i < len; ++i) xi[i] = (xi[i] + si[i]) * inv;
      std::fill(si, si + len, 0.0f);
    }
  }
  if (n != sum_.size()) {
    Clear();
    return 0;
  }
  const bool mixed = !segments_.empty();
  segments_.clear();  // the loop above zeroed their sums
  folded_.clear();
  window_floats_ = 0;
  return mixed ? senders : 0;
}

void RunningSum::Clear() {
  for (const auto& [start, seg] : segments_) {
    std::fill(sum_.begin() + start, sum_.begin() + seg.end, 0.0f);
  }
  segments_.clear();
  folded_.clear();
  window_floats_ = 0;
}

}  // namespace meshtrain::learn
