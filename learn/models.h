// The numerical cores of the tasks: loss, gradient and evaluation of
//  - a fully connected ReLU network with a softmax cross-entropy head (MlpShape {784,256,128,10}
//    is fmnist-mlp; {784,10} is multinomial logistic regression, fmnist-softmax), and
//  - linear regression with mean squared error (the synthetic task).
// All parameters live in ONE flat vector (what nodes multicast and average: docs/contract.md
// "Parameter exchange"); layers are Eigen::Map views onto it. Batches are matrices whose columns
// are samples, so every layer is one matrix product over the batch. The functions are templates
// over the scalar so tests can check gradients in double against finite differences; float and
// double are instantiated in models.cc.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain::learn {

template <typename S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <typename S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// Layer widths from input to output. Flat layout: for each layer l in order, W_l (out x in,
// column-major) followed by b_l (out).
struct MlpShape {
  std::vector<int> sizes;

  int layers() const { return static_cast<int>(sizes.size()) - 1; }
  size_t NumParams() const;
  // Offset of W_l and of b_l in the flat vector.
  size_t WeightOffset(int layer) const;
  size_t BiasOffset(int layer) const;
};

// He initialisation (N(0, 2/fan_in) weights, zero biases) drawn from `seed`. Identical seeds give
// bit-identical parameters on every platform (learn/rng.h).
void InitMlp(const MlpShape& shape, uint64_t seed, float* params);

// Mean softmax cross-entropy over the columns of `x` (shape.sizes[0] x B) with labels[k] the class
// of column k. When `grad` is non-null it receives d(loss)/d(params) (NumParams() values).
template <typename S>
S MlpLossAndGradient(const MlpShape& shape, const S* params, const Mat<S>& x,
                     const std::vector<uint8_t>& labels, S* grad);

// Sum of per-sample cross-entropies and number of correct argmax predictions over the columns
// of x (sums, so callers can evaluate a large set in chunks).
struct ClassifierSums {
  double loss_sum = 0;
  size_t correct = 0;
};
ClassifierSums MlpEvaluate(const MlpShape& shape, const float* params, const Eigen::MatrixXf& x,
                           const std::vector<uint8_t>& labels);

// Linear regression y ~ w.x + b with params = [w (d), b]. Mean squared error over the columns of
// x (d x B) against y (B); gradient (d+1 values) written when non-null.
template <typename S>
S LinearMseAndGradient(const S* params, const Mat<S>& x, const Vec<S>& y, S* grad);

}  // namespace meshtrain::learn
