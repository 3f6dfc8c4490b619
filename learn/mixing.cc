#include "learn/mixing.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/finite.h"
#include "base/loop_guard.h"

namespace meshtrain::learn {

void MixAverage(Eigen::VectorXf& x, const std::vector<const float*>& others) {
  MixWeighted(x, others, std::vector<double>(others.size(), 1.0));
}

void MixWeighted(Eigen::VectorXf& x, const std::vector<const float*>& others,
                 const std::vector<double>& weights) {
  MixWeighted(x.data(), static_cast<size_t>(x.size()), others, weights);
}

void MixWeighted(float* data, size_t size, const std::vector<const float*>& others,
                 const std::vector<double>& weights) {
  if (others.empty()) return;
  LoopGuard::Note(size);
  const auto n = static_cast<Eigen::Index>(size);
  Eigen::Map<Eigen::VectorXf> x(data, n);
  double total = 1.0;
  for (double w : weights) total += w;
  const double scale = 1.0 / total;
  constexpr Eigen::Index kBlock = 4096;
  Eigen::VectorXd acc(std::min(n, kBlock));
  for (Eigen::Index start = 0; start < n; start += kBlock) {
    const Eigen::Index len = std::min(kBlock, n - start);
    auto a = acc.head(len);
    a = x.segment(start, len).cast<double>();
    for (size_t j = 0; j < others.size(); ++j) {
      a += weights[j] * Eigen::Map<const Eigen::VectorXf>(others[j] + start, len).cast<double>();
    }
    x.segment(start, len) = (a * scale).cast<float>();
  }
}

void ParamAverage::Update(const Eigen::VectorXf& x) {
  if (avg_.size() != x.size()) {
    Reset(x);
    return;
  }
  const double n = static_cast<double>(++updates_);
  const auto d = static_cast<float>(std::min(decay_, (1.0 + n) / (10.0 + n)));
  avg_ = d * avg_ + (1.0f - d) * x;
}

std::vector<float> AverageModels(const std::vector<const std::vector<float>*>& models) {
  if (models.empty()) return {};
  const size_t n = models.front()->size();
  std::vector<double> sum(n, 0.0);
  for (const auto* m : models) {
    if (m->size() != n) return {};
    const float* x = m->data();
    for (size_t i = 0; i < n; ++i) sum[i] += static_cast<double>(x[i]);
  }
  std::vector<float> out(n);
  const double k = static_cast<double>(models.size());
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(sum[i] / k);
  return out;
}

bool OuterStep::ParseKind(const std::string& text, Kind* kind) {
  for (const auto& [name, k] : kKindNames) {
    if (text == name) {
      *kind = k;
      return true;
    }
  }
  return false;
}

const char* OuterStep::Name(Kind kind) {
  for (const auto& [name, k] : kKindNames) {
    if (k == kind) return name.data();  // the table's names are string literals
  }
  return "avg";
}

void OuterStep::Reset(const float* x, size_t n) {
  if (!enabled()) return;
  start_.assign(x, x + n);
  momentum_buf_.assign(kind_ == Kind::kNesterov && momentum_ > 0 ? n : 0, 0.0f);
}

std::pair<size_t, size_t> FragmentRange(size_t n, size_t fragments, size_t f) {
  if (fragments <= 1) return {0, n};
  const auto at = [&](size_t k) {
    return static_cast<size_t>(static_cast<unsigned __int128>(n) * k / fragments);
  };
  return {at(f % fragments), at(f % fragments + 1)};
}

void OuterStep::Step(float* x, size_t n, size_t lo, size_t hi) {
  if (!enabled()) return;
  if (start_.size() != n) return Reset(x, n);
  const bool nesterov = !momentum_buf_.empty();
  for (size_t i = lo; i < std::min(hi, n); ++i) {
    float delta = start_[i] - x[i];
    if (nesterov) {
      float& m = momentum_buf_[i];
      m = momentum_ * m + delta;
      delta += momentum_ * m;
    }
    start_[i] -= lr_ * delta;
    x[i] = start_[i];
  }
  steps_++;
}

double MixWeight(uint64_t ours, uint64_t theirs) {
  if (theirs >= ours) return 1.0;
  const double r = (static_cast<double>(theirs) + 1.0) / (static_cast<double>(ours) + 1.0);
  return r * r;
}

bool ParamsFinite(const float* data, size_t n) { return meshtrain::ScanFinite(data, nullptr, n); }

bool CopyParamsFinite(const float* src, float* dst, size_t n) {
  return n == 0 || meshtrain::ScanFinite(src, dst, n);
}

uint32_t ParamsCrc32(const float* data, size_t n) {
  static_assert(sizeof(float) == 4, "IEEE-754 single precision expected");
  LoopGuard::Note(n);
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(data);
  size_t left = n * sizeof(float);
  while (left > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

int AdaptBatchSize(int batch, int base, double own_step_s, double mesh_step_s) {
  if (own_step_s <= 0 || mesh_step_s <= 0 || batch <= 0 || base <= 0) return batch;
  const double target = batch * mesh_step_s / own_step_s;
  const long next = std::lround(0.5 * batch + 0.5 * target);
  return static_cast<int>(std::clamp<long>(next, std::max(1, base / 8), base));
}

}  // namespace meshtrain::learn
