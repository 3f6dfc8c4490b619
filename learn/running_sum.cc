#include "learn/running_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/huge_pages.h"
#include "base/kernels.h"
#include "base/loop_guard.h"

namespace meshtrain::learn {

template <typename F>
bool RunningSum::FoldWith(const std::string& from, uint32_t total, uint32_t offset, size_t n,
                          double w, F fold) {
  if (total == 0 || n == 0 || uint64_t{offset} + n > total || !(w > 0) || !std::isfinite(w)) {
    return false;
  }
  if (total_ == 0) {
    // Not zero-filled: a range's first fold in a window writes it (below), so nothing reads a
    // value no fold wrote, and the pages are touched only as chunks arrive.
    sum_.reset(new float[total]);
    AdviseHugePages(sum_.get(), size_t{total} * sizeof(float));
    total_ = total;
  } else if (total_ != total) {
    return false;
  }
  if (!folded_[from].insert(offset).second) return false;
  LoopGuard::Note(n);
  // Where no segment of this window covers [offset, end) the sum holds an earlier window's
  // values: set it; where one does, add. (Apply and Clear then never have to zero the sum.)
  const auto end = static_cast<uint32_t>(offset + n);
  uint32_t pos = offset;
  auto it = segments_.upper_bound(pos);
  if (it != segments_.begin() && std::prev(it)->second.end > pos) --it;
  while (pos < end) {
    if (it == segments_.end() || it->first >= end) {
      fold(pos, end - pos, false);
      break;
    }
    if (it->first > pos) {
      fold(pos, it->first - pos, false);
      pos = it->first;
    }
    const uint32_t stop = std::min(end, it->second.end);
    fold(pos, stop - pos, true);
    pos = stop;
    ++it;
  }
  AddWeight(offset, end, w);
  window_floats_ += n;
  return true;
}

bool RunningSum::Fold(const std::string& from, uint32_t total, uint32_t offset, const float* data,
                      size_t n, double w) {
  const auto wf = static_cast<float>(w);
  return FoldWith(from, total, offset, n, w, [&](uint32_t pos, uint32_t len, bool add) {
    float* s = sum_.get() + pos;
    const float* x = data + (pos - offset);
    if (add) {
      kernels::AddScaled(s, x, wf, len);
    } else {
      kernels::SetScaled(s, x, wf, len);
    }
  });
}

bool RunningSum::FoldInt8(const std::string& from, uint32_t total, uint32_t offset, const int8_t* q,
                          const float* scales, uint32_t block, size_t n, double w) {
  if (block == 0) return false;
  const auto wf = static_cast<float>(w);
  return FoldWith(from, total, offset, n, w, [&](uint32_t pos, uint32_t len, bool add) {
    // Piece [pos, pos + len) of the model is values [i, i + len) of the chunk: block by block.
    for (uint32_t i = pos - offset, stop = i + len; i < stop;) {
      const uint32_t b = i / block, next = std::min(stop, (b + 1) * block);
      float* s = sum_.get() + offset + i;
      if (add) {
        kernels::FoldInt8<true>(s, q + i, scales[b], wf, next - i);
      } else {
        kernels::FoldInt8<false>(s, q + i, scales[b], wf, next - i);
      }
      i = next;
    }
  });
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
  if (n != total_) {
    Clear();
    return 0;
  }
  for (const auto& [start, seg] : segments_) {
    const auto inv = static_cast<float>(1.0 / (1.0 + seg.weight));
    kernels::MixInto(x + start, sum_.get() + start, inv, seg.end - start);
  }
  const bool mixed = !segments_.empty();
  Clear();
  return mixed ? senders : 0;
}

void RunningSum::Reserve(uint32_t total) {
  if (total == 0 || total_ == total) return;
  Clear();
  sum_.reset(new float[total]);
  AdviseHugePages(sum_.get(), size_t{total} * sizeof(float));
  std::memset(sum_.get(), 0, size_t{total} * sizeof(float));
  total_ = total;
}

void RunningSum::Clear() {
  segments_.clear();
  folded_.clear();
  window_floats_ = 0;
}

}  // namespace meshtrain::learn
