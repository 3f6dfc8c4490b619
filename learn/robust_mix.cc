#include "learn/robust_mix.h"

#include <algorithm>
#include <cmath>

#include "base/loop_guard.h"
#include "learn/mixing.h"

namespace meshtrain::learn {

DiffNorms DiffNorm2(const float* x, const float* ref, size_t n) {
  LoopGuard::Note(n);
  // Four partial sums: the loop vectorizes, and the result does not depend on the thread.
  double d[4] = {0, 0, 0, 0}, r[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t k = 0; k < 4; ++k) {
      const double a = ref[i + k], e = static_cast<double>(x[i + k]) - a;
      d[k] += e * e;
      r[k] += a * a;
    }
  }
  for (; i < n; ++i) {
    const double a = ref[i], e = static_cast<double>(x[i]) - a;
    d[0] += e * e;
    r[0] += a * a;
  }
  return {d[0] + d[1] + d[2] + d[3], r[0] + r[1] + r[2] + r[3]};
}

DiffNorms DiffNorm2Int8(const int8_t* q, const float* scales, uint32_t block, const float* ref,
                        size_t n) {
  LoopGuard::Note(n);
  DiffNorms out;
  if (block == 0) return out;
  for (size_t i = 0; i < n; ++i) {
    const double a = ref[i], e = static_cast<double>(q[i]) * scales[i / block] - a;
    out.diff2 += e * e;
    out.ref2 += a * a;
  }
  return out;
}

void ClipToward(const float* x, const float* ref, double s, float* out, size_t n) {
  LoopGuard::Note(n);
  const auto sf = static_cast<float>(s);
  for (size_t i = 0; i < n; ++i) out[i] = ref[i] + sf * (x[i] - ref[i]);
}

void DequantizeInt8(const int8_t* q, const float* scales, uint32_t block, float* out, size_t n) {
  if (block == 0) return;
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * scales[i / block];
}

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lo + hi);
}

// The verdict for distance r against radius tau (tau 0: no radius yet, accepted).
RobustVerdict Verdict(double r, double tau) {
  if (!std::isfinite(r)) return {RobustVerdict::kRefuse, 0};
  if (tau <= 0 || r <= tau) return {RobustVerdict::kAccept, 1};
  if (r > RobustJudge::kRefuseRadii * tau) return {RobustVerdict::kRefuse, 0};
  return {RobustVerdict::kClip, tau / r};
}

}  // namespace

double RobustJudge::Radius(double ref_norm) const {
  if (recent_.size() < kWarmup) return 0;
  const double median = Median(std::vector<double>(recent_.begin(), recent_.end()));
  return std::max(kClipMedians * median, kFloor * ref_norm);
}

RobustVerdict RobustJudge::Judge(const std::string& from, double distance, double ref_norm,
                                 double share) {
  share = std::clamp(share, 0.0, 1.0);
  const double tau = Radius(ref_norm);
  last_radius_ = tau;
  RobustVerdict v = Verdict(distance, tau);
  PeerJudgment& p = peers_[from];
  const bool bad = v.kind != RobustVerdict::kAccept;
  const double a = (1 - kBadDecay) * share;
  p.bad_share = (1 - a) * p.bad_share + a * (bad ? 1 : 0);
  p.models += share;
  Drift(&p, distance, share);
  // The drift flag turns after kDriftHold models in a row on the other side of kDriftFlagAt.
  const bool above = p.drift >= kDriftFlagAt;
  p.drift_held = above != p.drift_flagged ? p.drift_held + share : 0;
  if (p.drift_held >= kDriftHold) {
    p.drift_flagged = above;
    p.drift_held = 0;
  }
  if (p.models >= kFlagAfter) p.flagged = p.bad_share >= kFlagAt || p.drift_flagged;
  if (std::isfinite(distance)) {
    p.last_distance = distance;
    recent_.push_back(distance);
    if (recent_.size() > kWindow) recent_.pop_front();
  }
  if (p.flagged) v = {RobustVerdict::kRefuse, 0};  // quarantine: judged, never mixed
  (v.kind == RobustVerdict::kAccept ? p.accepted
   : v.kind == RobustVerdict::kClip ? p.clipped
                                    : p.refused)++;
  return v;
}

RobustVerdict RobustJudge::Peek(const std::string& from, double distance, double ref_norm) const {
  const auto it = peers_.find(from);
  if (it != peers_.end() && it->second.flagged) return {RobustVerdict::kRefuse, 0};
  return Verdict(distance, Radius(ref_norm));
}

void RobustJudge::Drift(PeerJudgment* p, double distance, double share) {
  p->last_judged = ++judged_;
  if (!std::isfinite(distance) || distance <= 0) return;
  // Rates per model, applied per chunk at its share: 1 - (1 - a)^share.
  auto rate = [share](double a) { return 1 - std::pow(1 - a, share); };
  const double level = std::log(distance);
  p->level = std::isnan(p->level) ? level : p->level + rate(kLevelRate) * (level - p->level);
  std::vector<double> levels;
  for (const auto& [name, q] : peers_) {
    if (judged_ - q.last_judged <= kRecentJudgments && !std::isnan(q.level)) {
      levels.push_back(q.level);
    }
  }
  if (levels.size() < 3) return;  // no others to compare with
  const double rel = p->level - Median(std::move(levels));
  if (p->baseline_models < kBaselineModels) {
    // Forming: the sender's usual place among the others.
    p->baseline =
        std::isnan(p->baseline) ? rel : p->baseline + rate(kBaselineFormRate) * (rel - p->baseline);
    p->baseline_models += share;
    p->drift = 1;
    return;
  }
  const double dev = rel - p->baseline;
  p->drift = std::exp(std::max(dev, 0.0));
  if (dev < std::log(kDriftFollow)) p->baseline += rate(kBaselineRate) * (rel - p->baseline);
}

namespace {

// The coordinate-wise median of equal-sized models: a center no minority of them can move far.
std::vector<float> CoordinateMedian(const std::vector<const std::vector<float>*>& models) {
  const size_t n = models.front()->size(), k = models.size(), mid = k / 2;
  std::vector<float> center(n);
  std::vector<float> col(k);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < k; ++j) col[j] = (*models[j])[i];
    std::sort(col.begin(), col.end());
    center[i] = k % 2 == 1 ? col[mid]
                           : static_cast<float>(0.5 * (static_cast<double>(col[mid - 1]) +
                                                       static_cast<double>(col[mid])));
  }
  return center;
}

}  // namespace

std::vector<float> ReduceModels(const std::vector<const std::vector<float>*>& models, bool robust,
                                std::vector<size_t>* dropped, std::vector<size_t>* clipped,
                                const ReduceJudgment& judged) {
  if (!robust) return AverageModels(models);
  // The reducing node's quarantine first: its flags rest on the whole run, not on one model. They
  // count only while they spare a majority: a node that flags half of the others or more is more
  // likely the odd one (its own trainer sends a bad model, so every honest one looks far from its
  // center), and then neither its flags nor its radius is used.
  std::vector<size_t> idx, quarantined;
  for (size_t j = 0; j < models.size(); ++j) {
    const bool q = j < judged.quarantined.size() && judged.quarantined[j];
    (q ? quarantined : idx).push_back(j);
  }
  double min_radius = judged.min_radius;
  if (2 * idx.size() <= models.size()) {
    idx.insert(idx.end(), quarantined.begin(), quarantined.end());
    std::sort(idx.begin(), idx.end());
    quarantined.clear();
    min_radius = 0;
  }
  if (dropped) dropped->insert(dropped->end(), quarantined.begin(), quarantined.end());
  std::vector<const std::vector<float>*> in;
  for (size_t j : idx) in.push_back(models[j]);
  if (in.size() < 3) return AverageModels(in);
  const size_t n = in.front()->size();
  for (const auto* m : in) {
    if (m->size() != n) return {};
  }
  LoopGuard::Note(n * in.size());
  const std::vector<float> center = CoordinateMedian(in);
  const size_t k = in.size();
  std::vector<double> dist(k);
  double center2 = 0;
  for (size_t j = 0; j < k; ++j) {
    const DiffNorms d = DiffNorm2(in[j]->data(), center.data(), n);
    dist[j] = std::sqrt(d.diff2);
    center2 = d.ref2;
  }
  const double tau = std::max({RobustJudge::kClipMedians * Median(dist), min_radius,
                               RobustJudge::kFloor * std::sqrt(center2)});
  std::vector<double> sum(n, 0.0);
  size_t kept = 0;
  std::vector<float> tmp(n);
  for (size_t j = 0; j < k; ++j) {
    const RobustVerdict v = Verdict(dist[j], tau);
    if (v.kind == RobustVerdict::kRefuse) {
      if (dropped) dropped->push_back(idx[j]);
      continue;
    }
    const float* m = in[j]->data();
    if (v.kind == RobustVerdict::kClip) {
      if (clipped) clipped->push_back(idx[j]);
      ClipToward(m, center.data(), v.scale, tmp.data(), n);
      m = tmp.data();
    }
    for (size_t i = 0; i < n; ++i) sum[i] += m[i];
    kept++;
  }
  if (dropped) std::sort(dropped->begin(), dropped->end());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(sum[i] / static_cast<double>(kept));
  return out;
}

}  // namespace meshtrain::learn
