// Parameter mixing and fingerprints for the flat parameter vectors nodes exchange.
//
// MixAverage implements the receiver-side gossip averaging rule (docs/contract.md "Parameter
// exchange"): after k parameter vectors x_1..x_k arrived since the last step,
// x <- (x + sum_j x_j) / (1 + k).
// ParamsCrc32 is a fingerprint of the exact float bytes, for tests and logs that compare models.
//
// Thread-safety: pure functions; the caller makes sure nobody writes the vectors meanwhile.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshtrain::learn {

// x <- (x + sum_j others[j][0..n)) / (1 + k), n = x.size(), k = others.size(). Each pointer must
// address n floats (a received vector already checked against the local model size). With no
// others, x is unchanged. Accumulates in double to keep the mean independent of arrival order up
// to float rounding of the final result.
void MixAverage(Eigen::VectorXf& x, const std::vector<const float*>& others);

// The plain average of equally long models, summed in double in the order given: the same inputs
// give the same bytes on every IEEE-754 machine (the end-of-training consensus, docs/design.md
// "One model at the end").
std::vector<float> AverageModels(const std::vector<const std::vector<float>*>& models);

// Progress-aware mixing (docs/design.md "Mixing"): x <- (x + sum_j w_j x_j) / (1 + sum_j w_j). With
// every w_j = 1 this is MixAverage.
void MixWeighted(Eigen::VectorXf& x, const std::vector<const float*>& others,
                 const std::vector<double>& weights);
// The same on n floats at `x` (shared memory of an external trainer,
// daemon/trainer/external_trainer.h).
void MixWeighted(float* x, size_t n, const std::vector<const float*>& others,
                 const std::vector<double>& weights);

// The weight of a model received at the sender's step `theirs` by a node at step `ours`:
// min(1, (theirs + 1) / (ours + 1))^2. A model as far on as ours or further counts fully (plain
// gossip averaging whenever steps agree within a few steps of staleness: 96 vs 100 still
// gets 0.92); a model far behind counts little (half our steps: 0.25; a fresh node's step-0
// model against step 500: 4e-6), so it never pulls an advanced node back. Squared so that the
// pull of a model falls faster than its training does.
double MixWeight(uint64_t ours, uint64_t theirs);

// True when all n values are finite: a receiver's last semantic check before mixing, so one
// diverged or malicious peer cannot poison the average with NaN/Inf.
bool ParamsFinite(const float* data, size_t n);
// Copies n floats from src to dst (not overlapping) and returns ParamsFinite of them, in one pass.
bool CopyParamsFinite(const float* src, float* dst, size_t n);

// CRC32 (zlib) of the float bytes as stored in memory (little-endian on supported hosts).
uint32_t ParamsCrc32(const float* data, size_t n);

// Dynamic batch size (--batch auto; docs/barriers.md "Dynamic batch"): the next batch of a node
// whose step took `own_step_s` at `batch` while the mesh's median step interval is `mesh_step_s`:
// halfway from `batch` to batch * mesh / own, clamped to [max(1, base / 8), base]. A slow node
// shrinks its batch until its steps keep the mesh's pace; a node never exceeds its base batch.
// The caller scales the learning rate linearly with the batch (lr = base_lr * batch / base).
// Unknown inputs (<= 0) keep `batch`.
int AdaptBatchSize(int batch, int base, double own_step_s, double mesh_step_s);

// Exponential moving average of the parameters along training (Polyak averaging), the model
// `--eval-average D` evaluates: after each step avg <- d * avg + (1 - d) * x with
// d = min(D, (1 + n) / (10 + n)), n the updates since the last Reset (so the first updates
// follow x closely instead of dragging the starting point along). SGD at a constant learning
// rate ends in a noise ball around a minimum; its average sits near the centre, so evaluations
// of it neither swing from one to the next nor trail the trained model by more than ~1/(1-D)
// steps. Reset when the parameters are replaced rather than trained (a model adopted on join, a
// finished peer's model taken over, a restored checkpoint). Not thread-safe.
class ParamAverage {
 public:
  explicit ParamAverage(double decay) : decay_(decay) {}
  bool enabled() const { return decay_ > 0; }
  void Reset(const Eigen::VectorXf& x) {
    avg_ = x;
    updates_ = 0;
  }
  void Update(const Eigen::VectorXf& x);
  // The average; empty before the first Reset.
  const Eigen::VectorXf& value() const { return avg_; }

 private:
  double decay_;
  Eigen::VectorXf avg_;
  uint64_t updates_ = 0;
};

// DiLoCo's outer optimizer (`--outer`) on the gossip-mixed model. At each sync
// (every --sync-every H local steps) the parameters x̄ — trained for H steps from θ₀, the
// parameters of the last outer step, and mixed with the peers' models that arrived meanwhile —
// give the pseudo-gradient Δ = θ₀ − x̄, and
//   avg:      θ = x̄                                 (gossip averaging alone)
//   sgd:      θ = θ₀ − lr Δ
//   nesterov: m ← μ m + Δ;  θ = θ₀ − lr (Δ + μ m)
// then θ₀ ← θ. Nodes send their models (not pseudo-gradients), so mixing still pulls them
// together; θ₀ and the momentum m stay local (a restarted or joining node starts them from the
// model in hand: Reset). Not thread-safe.
class OuterStep {
 public:
  enum class Kind { kAvg, kSgd, kNesterov };
  // The kinds' names (--outer, the config file, status), in the order help and errors list them.
  static constexpr std::array<std::pair<std::string_view, Kind>, 3> kKindNames = {{
      {"avg", Kind::kAvg},
      {"sgd", Kind::kSgd},
      {"nesterov", Kind::kNesterov},
  }};
  OuterStep(Kind kind, double lr, double momentum) : kind_(kind), lr_(lr), momentum_(momentum) {}
  // A name of kKindNames; false otherwise.
  static bool ParseKind(const std::string& text, Kind* kind);
  static const char* Name(Kind kind);
  bool enabled() const { return kind_ != Kind::kAvg; }
  // x becomes θ₀; the momentum is cleared.
  void Reset(const float* x, size_t n);
  // One outer step on x (x̄ in, θ out). A size other than Reset's resets instead.
  void Step(float* x, size_t n) { Step(x, n, 0, n); }
  // The same on the fragment [lo, hi) of x only (streaming fragments: each fragment takes its
  // outer step when it is synced; the rest keeps training).
  void Step(float* x, size_t n, size_t lo, size_t hi);
  uint64_t steps() const { return steps_; }

 private:
  Kind kind_;
  float lr_, momentum_;
  std::vector<float> start_, momentum_buf_;
  uint64_t steps_ = 0;
};

// Streaming fragments (Streaming DiLoCo): the model's n floats cut into `fragments`
// contiguous ranges of nearly equal size; fragment f is [f·n/F, (f+1)·n/F).
std::pair<size_t, size_t> FragmentRange(size_t n, size_t fragments, size_t f);

inline uint32_t ParamsCrc32(const Eigen::VectorXf& x) {
  return ParamsCrc32(x.data(), static_cast<size_t>(x.size()));
}

}  // namespace meshtrain::learn
