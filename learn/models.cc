#include "learn/models.h"

#include <cmath>

#include "learn/rng.h"

namespace meshtrain::learn {

size_t MlpShape::NumParams() const {
  size_t n = 0;
  for (int l = 0; l < layers(); ++l) {
    n += static_cast<size_t>(sizes[l + 1]) * static_cast<size_t>(sizes[l] + 1);
  }
  return n;
}

size_t MlpShape::WeightOffset(int layer) const {
  size_t n = 0;
  for (int l = 0; l < layer; ++l) {
    n += static_cast<size_t>(sizes[l + 1]) * static_cast<size_t>(sizes[l] + 1);
  }
  return n;
}

size_t MlpShape::BiasOffset(int layer) const {
  return WeightOffset(layer) + static_cast<size_t>(sizes[layer + 1]) * sizes[layer];
}

void InitMlp(const MlpShape& shape, uint64_t seed, float* params) {
  Rng rng(seed);
  for (int l = 0; l < shape.layers(); ++l) {
    const double stddev = std::sqrt(2.0 / shape.sizes[l]);
    float* w = params + shape.WeightOffset(l);
    const size_t nw = static_cast<size_t>(shape.sizes[l + 1]) * shape.sizes[l];
    for (size_t i = 0; i < nw; ++i) w[i] = static_cast<float>(rng.Normal() * stddev);
    float* b = params + shape.BiasOffset(l);
    for (int i = 0; i < shape.sizes[l + 1]; ++i) b[i] = 0.0f;
  }
}

namespace {

// Runs the network forward over the batch. acts[l] for l >= 1 holds the post-ReLU activations of
// layer l (the pre-softmax logits for the last); acts[0] stays empty because the input is `x`,
// which is not copied.
template <typename S>
void Forward(const MlpShape& shape, const S* params, const Mat<S>& x, std::vector<Mat<S>>* acts) {
  using MapW = Eigen::Map<const Mat<S>>;
  using MapB = Eigen::Map<const Vec<S>>;
  const int layers = shape.layers();
  acts->resize(layers + 1);
  for (int l = 0; l < layers; ++l) {
    const Mat<S>& in = l == 0 ? x : (*acts)[l];
    MapW w(params + shape.WeightOffset(l), shape.sizes[l + 1], shape.sizes[l]);
    MapB b(params + shape.BiasOffset(l), shape.sizes[l + 1]);
    Mat<S>& out = (*acts)[l + 1];
    out.resize(shape.sizes[l + 1], x.cols());
    out.noalias() = w * in;
    out.colwise() += b;
    if (l + 1 < layers) out = out.cwiseMax(S(0));
  }
}

// In place: logits -> softmax probabilities per column; returns per-column log-sum-exp shift so
// that cross-entropy = logsumexp - logit[label] can be computed without log(0).
template <typename S>
Vec<S> SoftmaxInPlace(Mat<S>* logits) {
  Vec<S> lse(logits->cols());
  for (Eigen::Index k = 0; k < logits->cols(); ++k) {
    auto col = logits->col(k);
    const S max = col.maxCoeff();
    col.array() = (col.array() - max).exp();
    const S sum = col.sum();
    col /= sum;
    lse[k] = max + std::log(sum);
  }
  return lse;
}

}  // namespace

template <typename S>
S MlpLossAndGradient(const MlpShape& shape, const S* params, const Mat<S>& x,
                     const std::vector<uint8_t>& labels, S* grad) {
  const int layers = shape.layers();
  const Eigen::Index batch = x.cols();
  std::vector<Mat<S>> acts;
  Forward(shape, params, x, &acts);
  Mat<S>& probs = acts[layers];
  // Cross-entropy needs the logit of the label before softmax overwrites it.
  Vec<S> label_logit(batch);
  for (Eigen::Index k = 0; k < batch; ++k) label_logit[k] = probs(labels[k], k);
  const Vec<S> lse = SoftmaxInPlace(&probs);
  const S loss = (lse - label_logit).sum() / S(batch);
  if (grad == nullptr) return loss;

  // dL/dlogits = (softmax - onehot) / B, then back through each layer: dW = dz * in^T,
  // db = row sums of dz, d(in) = W^T dz masked by the ReLU of the layer below.
  Mat<S> dz = std::move(probs);
  for (Eigen::Index k = 0; k < batch; ++k) dz(labels[k], k) -= S(1);
  dz /= S(batch);
  for (int l = layers - 1; l >= 0; --l) {
    const Mat<S>& in = l == 0 ? x : acts[l];
    Eigen::Map<Mat<S>> dw(grad + shape.WeightOffset(l), shape.sizes[l + 1], shape.sizes[l]);
    Eigen::Map<Vec<S>> db(grad + shape.BiasOffset(l), shape.sizes[l + 1]);
    dw.noalias() = dz * in.transpose();
    db = dz.rowwise().sum();
    if (l == 0) break;  // no gradient with respect to the input
    Eigen::Map<const Mat<S>> w(params + shape.WeightOffset(l), shape.sizes[l + 1], shape.sizes[l]);
    Mat<S> din(shape.sizes[l], batch);
    din.noalias() = w.transpose() * dz;
    dz = (in.array() > S(0)).select(din.array(), S(0)).matrix();
  }
  return loss;
}

ClassifierSums MlpEvaluate(const MlpShape& shape, const float* params, const Eigen::MatrixXf& x,
                           const std::vector<uint8_t>& labels) {
  std::vector<Eigen::MatrixXf> acts;
  Forward(shape, params, x, &acts);
  const Eigen::MatrixXf& logits = acts[shape.layers()];
  ClassifierSums sums;
  for (Eigen::Index k = 0; k < logits.cols(); ++k) {
    auto col = logits.col(k);
    Eigen::Index arg = 0;
    const float max = col.maxCoeff(&arg);
    const double lse = max + std::log(static_cast<double>((col.array() - max).exp().sum()));
    sums.loss_sum += lse - logits(labels[k], k);
    if (arg == labels[k]) ++sums.correct;
  }
  return sums;
}

template <typename S>
S LinearMseAndGradient(const S* params, const Mat<S>& x, const Vec<S>& y, S* grad) {
  const Eigen::Index d = x.rows();
  const Eigen::Index batch = x.cols();
  Eigen::Map<const Vec<S>> w(params, d);
  const S b = params[d];
  Vec<S> r(batch);
  r.noalias() = x.transpose() * w;
  r.array() += b - y.array();
  const S loss = r.squaredNorm() / S(batch);
  if (grad != nullptr) {
    Eigen::Map<Vec<S>> dw(grad, d);
    dw.noalias() = (S(2) / S(batch)) * (x * r);
    grad[d] = S(2) * r.sum() / S(batch);
  }
  return loss;
}

template float MlpLossAndGradient<float>(const MlpShape&, const float*, const Mat<float>&,
                                         const std::vector<uint8_t>&, float*);
template double MlpLossAndGradient<double>(const MlpShape&, const double*, const Mat<double>&,
                                           const std::vector<uint8_t>&, double*);
template float LinearMseAndGradient<float>(const float*, const Mat<float>&, const Vec<float>&,
                                           float*);
template double LinearMseAndGradient<double>(const double*, const Mat<double>&, const Vec<double>&,
                                             double*);

}  // namespace meshtrain::learn
