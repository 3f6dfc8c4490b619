// Models from a layer spec: `--model "conv(16,5),relu,maxpool(2),flatten,dense(10)"` (docs/guide.md
// "Training: models, data, shards").
//
// A spec is a comma-separated list of layers, each `name` or `name(arg, ..., key=value)`, read
// left to right from the input; an optional last token `xent` (softmax cross-entropy, the
// default) or `mse` (mean squared error against one-hot targets) names the loss. The layer types
// live in ONE table (LayerTypes(), learn/layers.cc): adding a layer is one class and one row.
//
// Data layout as in learn/models.h: a batch is a matrix whose columns are samples; a sample of
// shape (C, H, W) is C*H*W values, channel-major then row-major (an IDX image is (1, 28, 28)).
// All parameters are ONE flat vector; every layer owns a contiguous slice of it, in spec order.
// Layers are templates over the scalar so gradients are checked in double against finite
// differences (tests/learn/network_test.cc); float and double are instantiated.
//
// Thread-safety: a built Network is immutable. Forward/backward state lives in a Workspace, one
// per thread; any number of threads may use one Network with their own workspaces.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "learn/models.h"
#include "learn/rng.h"
#include "learn/status.h"

namespace meshtrain::learn {

// The shape of one sample. Flat feature vectors are (1, 1, D).
struct TensorShape {
  int c = 1;
  int h = 1;
  int w = 1;
  int size() const { return c * h * w; }
  std::string ToString() const;  // "CxHxW"
  bool operator==(const TensorShape& o) const { return c == o.c && h == o.h && w == o.w; }
};

// One parsed layer token.
struct LayerSpec {
  std::string name;
  std::vector<double> args;                            // positional
  std::vector<std::pair<std::string, double>> kwargs;  // key=value
  std::string text;                                    // as written (for messages)
  // The value of keyword `key`, else positional `pos`, else `fallback`.
  double Arg(const std::string& key, size_t pos, double fallback) const;
};

enum class LossKind { kSoftmaxCrossEntropy, kMse };

struct ModelSpec {
  std::vector<LayerSpec> layers;
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  std::string text;  // canonical: tokens joined by ',' without spaces
};

// Parses a spec. Errors name the token, its 1-based position and what was expected (an unknown
// layer lists the known ones and the closest name).
Result<ModelSpec> ParseModelSpec(const std::string& text);

// Per-call mode of a forward pass.
struct RunMode {
  bool training = false;  // dropout active
  uint64_t seed = 0;      // dropout masks (per step; equal seeds give equal masks)
};

// Per-layer scratch that a forward pass leaves for the backward pass.
template <typename S>
struct LayerCache {
  Mat<S> m;                  // conv: im2col patches; dropout: mask; layernorm: normalized input
  Vec<S> v;                  // layernorm: 1/stddev per sample
  std::vector<int32_t> idx;  // maxpool: input row of each output's maximum
};

template <typename S>
class Layer {
 public:
  virtual ~Layer() = default;
  // Checks the arguments against the input shape and fixes the output shape.
  virtual Result<TensorShape> Configure(const TensorShape& in) = 0;
  virtual size_t NumParams() const { return 0; }
  // Initial parameters (He normal for weights, zero biases, unit gains), drawn from `rng`.
  virtual void Init(Rng* /*rng*/, S* /*params*/) const {}
  // y (out.size() x B) = layer(x (in.size() x B)).
  virtual void Forward(const S* params, const Mat<S>& x, Mat<S>* y, LayerCache<S>* cache,
                       const RunMode& mode) const = 0;
  // Given the forward's x, y and cache and dL/dy: writes dL/dparams (NumParams() values, not
  // accumulated) and dL/dx unless dx is null (the first layer).
  virtual void Backward(const S* params, const Mat<S>& x, const Mat<S>& y, const Mat<S>& dy,
                        LayerCache<S>* cache, Mat<S>* dx, S* dparams) const = 0;

  void set_index(int i) { index_ = i; }
  int index() const { return index_; }

 private:
  int index_ = 0;
};

// One row of the layer table.
struct LayerType {
  const char* name;
  const char* usage;  // e.g. "conv(F,K[,stride=1,pad=0])"
  size_t min_args;
  size_t max_args;
  std::vector<std::string> keywords;  // accepted key=value names
  std::unique_ptr<Layer<float>> (*make_float)(const LayerSpec&);
  std::unique_ptr<Layer<double>> (*make_double)(const LayerSpec&);
};
const std::vector<LayerType>& LayerTypes();
std::string LayerUsage();  // every usage string, comma separated (for --help and errors)

// Scratch for one thread's passes.
template <typename S>
struct Workspace {
  std::vector<Mat<S>> acts;  // acts[0] unused (the input is not copied); acts[l+1] = layer l out
  std::vector<LayerCache<S>> caches;
  Mat<S> d0, d1;  // ping-pong gradients with respect to activations
};

template <typename S>
class Network {
 public:
  // Builds the layers of `spec` for samples of shape `input`. Errors: a layer that cannot take
  // its input (e.g. a kernel larger than the image), bad arguments, no parameters at all.
  static Result<Network> Build(const ModelSpec& spec, const TensorShape& input);

  Network(Network&&) = default;
  Network& operator=(Network&&) = default;

  size_t NumParams() const { return num_params_; }
  const TensorShape& input_shape() const { return input_; }
  const TensorShape& output_shape() const { return output_; }
  int num_outputs() const { return output_.size(); }
  LossKind loss() const { return spec_.loss; }
  const ModelSpec& spec() const { return spec_; }

  // He initialisation from `seed` (layer by layer in spec order; the MLP presets draw exactly as
  // learn::InitMlp did, so their parameters are unchanged).
  void Init(uint64_t seed, S* params) const;

  // Mean loss over the columns of x (labels[k] the class of column k, < num_outputs()) and, when
  // grad is non-null, its gradient (NumParams() values).
  S LossAndGradient(const S* params, const Mat<S>& x, const int32_t* labels, S* grad,
                    Workspace<S>* ws, const RunMode& mode) const;

  // Sum of per-sample losses and count of correct argmax predictions (inference mode).
  ClassifierSums Evaluate(const S* params, const Mat<S>& x, const int32_t* labels,
                          Workspace<S>* ws) const;

 private:
  Network() = default;
  const Mat<S>& Forward(const S* params, const Mat<S>& x, Workspace<S>* ws,
                        const RunMode& mode) const;

  ModelSpec spec_;
  TensorShape input_;
  TensorShape output_;
  std::vector<std::unique_ptr<Layer<S>>> layers_;
  std::vector<size_t> offsets_;
  size_t num_params_ = 0;
};

extern template class Network<float>;
extern template class Network<double>;

}  // namespace meshtrain::learn
