// Robust mixing (docs/design.md "Robust mixing"): each received model, or each chunk of one, is
// judged by its distance to a reference before it is mixed, as in centered clipping
// (Karimireddy, He, Jaggi 2021; He, Karimireddy, Jaggi 2022, "Byzantine-robust decentralized
// learning via ClippedGossip"): the daemon's reference is the model its last mix made (where the
// mesh last stood), so the distance is how far the sender went since (daemon/trainer/
// chunk_mixer.h).
//   r <= tau:            mixed as it is;
//   tau < r <= 4 tau:    clipped: ref + (x - ref) * tau / r is mixed instead of x;
//   r > 4 tau:           refused (not mixed at all),
// with the radius tau = 4 x the median of the last 48 distances judged (all senders), at least
// 1e-3 x the reference's norm. A chunk of len floats of a model of total floats is judged on its
// distance scaled to the whole model, r = |x - ref| * sqrt(total / len), and counts as
// len / total of a judgment below (a model's chunks rise and fall together). A sender whose
// judgments are clipped or refused again and again (an exponential average of them, 1 for each
// clipped or refused, at 0.5 or more after at least 4 models' worth), or whose distances grew to
// twice what they were against the other senders' for 4 models in a row (drift: a trainer
// that turned bad and keeps within the radius, e.g. a sign-flipped update the mesh follows), is
// flagged, and while flagged its chunks are refused (quarantine); it is judged on, and a run of
// accepted judgments (for drift, 4 models in a row under twice) lifts the flag. Judgments are
// recorded only while the receiver trains (daemon/trainer/chunk_mixer.h SetFrozen; Peek below).
//
// RobustAverageModels is the same rule for the end-of-training consensus, around the
// coordinate-wise median of the final models instead of the receiver's own.
//
// Thread-safety: the functions are pure; RobustJudge is not thread-safe (the caller locks).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace meshtrain::learn {

// Squared norms in double: |x - ref|^2 and |ref|^2 over n floats.
struct DiffNorms {
  double diff2 = 0;
  double ref2 = 0;
};
DiffNorms DiffNorm2(const float* x, const float* ref, size_t n);
// The same for int8 values x[i] = q[i] * scales[i / block].
DiffNorms DiffNorm2Int8(const int8_t* q, const float* scales, uint32_t block, const float* ref,
                        size_t n);
// out[i] = ref[i] + s * (x[i] - ref[i]) (out may be x).
void ClipToward(const float* x, const float* ref, double s, float* out, size_t n);
// out[i] = q[i] * scales[i / block].
void DequantizeInt8(const int8_t* q, const float* scales, uint32_t block, float* out, size_t n);

struct RobustVerdict {
  enum Kind { kAccept, kClip, kRefuse };
  Kind kind = kAccept;
  double scale = 1;  // kClip: the factor on x - ref
};

// What a receiver has judged of one sender.
struct PeerJudgment {
  uint64_t accepted = 0;
  uint64_t clipped = 0;
  uint64_t refused = 0;  // beyond 4 tau, or while flagged
  double last_distance = 0;
  double bad_share = 0;  // exponential average (1/4 a model) of clipped-or-refused judgments
  double models = 0;     // judged, in models (a chunk counts as its share of the model)
  // Drift: how far the sender's distances moved from its own earlier ones, relative to the other
  // senders' (1 = as before; 2 = twice as far from the center as it used to be, compared with the
  // others). Each is a log kept as an exponential average.
  double drift = 1;
  double level = std::nan("");     // log distance, averaged over the last ~4 models
  double baseline = std::nan("");  // level minus the senders' median level, over its history
  double baseline_models = 0;      // models the baseline was formed over
  uint64_t last_judged = 0;        // the judge's count of judgments at its latest
  bool drift_flagged = false;      // flagged for its drift (kDriftFlagAt, kDriftHold)
  double drift_held = 0;           // models judged in a row on the other side of kDriftFlagAt
  bool flagged = false;
};

struct RobustReport {
  bool on = false;
  double radius = 0;  // tau now (0 until the warm-up's distances came)
  std::map<std::string, PeerJudgment> peers;
};

class RobustJudge {
 public:
  // tau = this x the median recent distance. An honest sender's distance varies with how far it ran
  // ahead (ssp lets it run `staleness` steps): up to 3.7 x the median on the skew MLP's clean run
  // (docs/design.md "Robust mixing"), so 4 leaves clean runs unclipped.
  static constexpr double kClipMedians = 4;
  static constexpr double kRefuseRadii = 4;  // refused beyond this x tau
  static constexpr double kFloor = 1e-3;     // tau >= this x |ref|
  static constexpr size_t kWindow = 48;      // distances the median is taken over
  static constexpr size_t kWarmup = 6;       // distances seen before anything is clipped
  static constexpr double kBadDecay = 0.75;  // bad_share <- 0.75 bad_share + 0.25 [bad]
  static constexpr double kFlagAt = 0.5;
  static constexpr double kFlagAfter = 4;  // models judged of a sender before it can be flagged
  // Drift (docs/design.md "Robust mixing"): a sender whose distance, against the other senders',
  // grew to kDriftFlagAt x what it was is flagged. The level averages 1/4 a model; the baseline
  // forms over the first kBaselineModels models, then follows at kBaselineRate a model only while
  // the drift stays under kDriftFollow (a sender that turned bad does not become the norm).
  static constexpr double kLevelRate = 0.25;
  // Forming, the baseline follows at kBaselineFormRate a model (its place over the last ~8 models)
  // for kBaselineModels models: the first steps of training move every model fast and unevenly
  // (formed over the first 8, on a clean run of the skew MLP an honest agent saw the honest node
  // on its own classes drift to 3.6 and quarantined it from about step 19 to the end).
  static constexpr double kBaselineModels = 32;
  static constexpr double kBaselineFormRate = 0.125;
  static constexpr double kBaselineRate = 0.02;
  static constexpr double kDriftFollow = 1.5;
  static constexpr double kDriftFlagAt = 2;
  // ... for this many models in a row, and the flag lifts after as many in a row under it: an
  // honest sender's drift spikes for a step or two when it lags (up to 1.96 on the skew MLP's clean
  // runs), a sender that turned bad stays there, and one whose drift hovers about kDriftFlagAt
  // neither dodges the flag nor has it lifted by a dip.
  static constexpr double kDriftHold = 4;
  // Senders judged within this many judgments count in the senders' median level.
  static constexpr uint64_t kRecentJudgments = 256;

  // Judges `from`'s model (or chunk) at distance `distance` from the reference, whose norm is
  // `ref_norm` (both scaled to the whole model); `share` is the chunk's share of the model (1: a
  // whole model). Non-finite distances are refused.
  RobustVerdict Judge(const std::string& from, double distance, double ref_norm, double share = 1);
  // The verdict Judge would give, by the radius and `from`'s flag as they stand, with nothing
  // recorded: for a receiver whose center stopped moving (its trainer finished or left), where a
  // distance grows with the time since the last mix rather than with what the sender did.
  RobustVerdict Peek(const std::string& from, double distance, double ref_norm) const;
  // tau for a reference of norm ref_norm (0 during the warm-up).
  double Radius(double ref_norm) const;
  const std::map<std::string, PeerJudgment>& peers() const { return peers_; }
  double last_radius() const { return last_radius_; }

 private:
  // Updates p's level, baseline and drift with a distance judged at `share` of a model.
  void Drift(PeerJudgment* p, double distance, double share);

  std::deque<double> recent_;
  std::map<std::string, PeerJudgment> peers_;
  double last_radius_ = 0;
  uint64_t judged_ = 0;
};

// The end-of-training consensus model. Plain (robust false, or fewer than 3 models): the average
// of AverageModels. Robust: models whose sender the reducing node has quarantined
// (`quarantined[j]`, when given) are dropped, as long as that leaves more than half (else its
// flags and radius are not used: it is more likely the odd one); the rest are judged around their
// coordinate-wise median c with the rule above, tau = 4 x the median of the distances |m_j - c|,
// at least `min_radius` (the reducing node's radius of its training-time judgments: final models
// of honest nodes differ by a few steps, and when most are alike the median alone would call the
// others far) and 1e-3 |c|: a model within tau as it is, within 4 tau clipped, beyond it dropped.
// Summed in double in the order given: the same inputs give the same bytes on every IEEE-754
// machine. `dropped` and `clipped`, when given, receive the indices of the models dropped and
// clipped.
struct ReduceJudgment {
  std::vector<bool> quarantined;  // by model index; empty: none
  double min_radius = 0;
};
std::vector<float> ReduceModels(const std::vector<const std::vector<float>*>& models, bool robust,
                                std::vector<size_t>* dropped = nullptr,
                                std::vector<size_t>* clipped = nullptr,
                                const ReduceJudgment& judged = {});

}  // namespace meshtrain::learn
