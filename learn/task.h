// A training task: a model, its data (this node's shard of the training set plus the test set)
// and its SGD-with-momentum optimizer, behind one interface the agent's trainer thread and the
// simulator drive. MakeTask takes a preset name or a layer spec (learn/network.h); presets
// (docs/contract.md "Training", one table in learn/task.cc, Presets()):
//   "fmnist-mlp"      dense(256),relu,dense(128),relu,dense(10): 784-256-128-10 ReLU MLP
//   "fmnist-softmax"  dense(10): multinomial logistic regression (784-10)
//   "fmnist-cnn"      conv(16,5),relu,maxpool(2),conv(32,5),relu,maxpool(2),flatten,dense(128),
//                     relu,dense(10)
//   "synthetic"       seeded linear regression (default d = 32, 4096 train / 1024 test samples,
//                     y = w*.x + b* + N(0, 0.1^2)); loss = MSE and "accuracy" = R^2 on the test
//                     set, clamped at 0 (1 = perfect fit; the noise floor caps it near 0.9997)
// All parameters are ONE contiguous Eigen::VectorXf (params()): that vector is what is
// multicast, mixed (learn/mixing.h) and checkpointed (learn/checkpoint.h).
//
// Determinism: parameters depend only on init_seed (nodes sharing it start identical, which
// gossip averaging assumes); the order of training samples depends only on data_seed (reshuffled
// every epoch). The synthetic data depend only on synthetic.data_seed, so every node learns the
// same function.
//
// Thread-safety: a Task is not thread-safe; one trainer thread owns it. To send parameters while
// training continues, copy params() at a step boundary (the snapshot of docs/contract.md
// "Parameter exchange") and send the copy.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "learn/data_file.h"
#include "learn/dataset.h"
#include "learn/label_skew.h"
#include "learn/model_file.h"
#include "learn/optimizer.h"
#include "learn/rng.h"
#include "learn/status.h"

namespace meshtrain::learn {

// The synthetic regression data set; generate once with MakeSyntheticData and share it between
// the tasks of many simulated nodes.
struct SyntheticOptions {
  int dim = 32;
  int train_samples = 4096;
  int test_samples = 1024;
  float noise_stddev = 0.1f;
  uint64_t data_seed = 0x5eed;  // the same for every node: one function to learn
};

struct SyntheticData {
  Eigen::MatrixXf train_x;  // dim x train_samples, features ~ N(0, 1)
  Eigen::VectorXf train_y;
  Eigen::MatrixXf test_x;  // dim x test_samples
  Eigen::VectorXf test_y;
  Eigen::VectorXf true_w;  // the generating weights and bias
  float true_bias = 0;
};

std::shared_ptr<const SyntheticData> MakeSyntheticData(const SyntheticOptions& options);

struct TaskOptions {
  std::string dataset_dir = kDefaultFashionMnistDir;
  // Already loaded data to share (one load per agent process); when null, MakeTask loads
  // dataset_dir for the fmnist tasks / generates `synthetic` for the synthetic task.
  std::shared_ptr<const FashionMnist> fashion_mnist;
  std::shared_ptr<const SyntheticData> synthetic_data;
  SyntheticOptions synthetic;
  Shard shard;  // of the training set; the test set is always whole
  // How the training set is split into shards (fmnist tasks): iid = contiguous ranges,
  // label-skew:ALPHA = seeded Dirichlet label skew (learn/label_skew.h; seeded by init_seed, so
  // equal on every node).
  ShardMode shard_mode;
  // fmnist tasks: feed (pixel - mean) / stddev of the training set instead of raw [0,1] pixels.
  // Centred inputs condition the MLP's first layer far better (fmnist-mlp reaches 0.887 instead
  // of 0.872 test accuracy after 5 epochs at lr 0.01); the statistics come from the whole
  // training file, so all nodes apply the same transform. Unset = the task's default: on for
  // fmnist-mlp, off for fmnist-softmax (whose larger-scale standardized inputs make lr 0.05
  // unstable; raw pixels reach 0.82 after one epoch).
  std::optional<bool> standardize_inputs;
  // User data: `--train-data` / `--test-data` files (learn/data_file.h), used instead
  // of Fashion-MNIST when train_data is set. Without test_data a seeded 10 % of the training file
  // (the same on every node) is held out for evaluation. train_set/test_set: already loaded.
  std::string train_data;
  std::string test_data;
  DataFileOptions data_options;
  std::shared_ptr<const LabeledData> train_set;
  std::shared_ptr<const LabeledData> test_set;
  // Threads that share one minibatch's gradient (`--threads N`; 1 = the trainer thread alone).
  int threads = 1;
  int batch_size = 64;
  float lr = 0.05f;
  float momentum = 0.9f;
  uint64_t init_seed = 1;  // parameter initialisation: keep equal across nodes
  uint64_t data_seed = 1;  // sample order: differs per node (default: hash of the name)
};

struct EvalResult {
  double loss = 0;      // mean cross-entropy (classifiers) or MSE (synthetic)
  double accuracy = 0;  // fraction correct (classifiers) or max(0, R^2) (synthetic)
  size_t samples = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  const std::string& name() const { return name_; }
  size_t num_params() const { return static_cast<size_t>(params_.size()); }
  Eigen::VectorXf& params() { return params_; }
  const Eigen::VectorXf& params() const { return params_; }
  SgdMomentum& optimizer() { return optimizer_; }
  const SgdMomentum& optimizer() const { return optimizer_; }

  // Local SGD steps taken (Step/StepOn calls), restorable from a checkpoint.
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // Completed passes over this node's shard by Step().
  int64_t epoch() const { return epoch_; }
  int batch_size() const { return batch_size_; }
  void set_batch_size(int b) { batch_size_ = std::max(1, b); }
  virtual size_t train_size() const = 0;  // samples in this node's shard
  // Per-class sample counts of this node's shard (classifier tasks; empty otherwise).
  virtual std::vector<size_t> LabelHistogram() const { return {}; }
  virtual size_t test_size() const = 0;
  // The layer spec of a network task (canonical text) and its sample shape; "" for synthetic.
  virtual std::string model_spec() const { return ""; }
  virtual std::array<int, 3> input_shape() const { return {0, 0, 0}; }  // C, H, W
  // Inputs are fed to the model as (x - shift) * scale ({0, 1} = as loaded).
  virtual std::array<float, 2> input_transform() const { return {0.0f, 1.0f}; }

  // One SGD step on the next minibatch of this node's shard (sequential over a per-epoch seeded
  // shuffle; the last batch of an epoch may be smaller). Returns the minibatch loss before the
  // update.
  float Step();
  // One SGD step on explicit samples, indices into this node's shard (precondition: each
  // < train_size()). An empty batch changes nothing and returns 0.
  float StepOn(const std::vector<uint32_t>& batch);
  // Loss at params() on the given shard samples and its gradient (resized to num_params()),
  // without changing anything (zero gradient and loss 0 for an empty batch).
  float LossAndGradient(const std::vector<uint32_t>& batch, Eigen::VectorXf* grad);

  // Mean loss and accuracy of params() on the whole test set.
  EvalResult Evaluate() const { return EvaluateAt(params_.data()); }
  // The same for a parameter vector of num_params() floats. Reads only the test data: safe to
  // run on another thread while this task trains (evaluation off the critical path).
  virtual EvalResult EvaluateAt(const float* params) const = 0;

 protected:
  Task(std::string name, Eigen::Index num_params, const TaskOptions& options);

  // Loss and gradient at params() for shard samples idx[0..n); grad has num_params() entries.
  virtual float ComputeLossAndGradient(const uint32_t* idx, size_t n, float* grad) = 0;

  Eigen::VectorXf params_;

 private:
  std::string name_;
  SgdMomentum optimizer_;
  int batch_size_;
  Rng order_rng_;
  std::vector<uint32_t> order_;  // shard-local sample order of the current epoch
  size_t cursor_ = 0;
  int64_t steps_ = 0;
  int64_t epoch_ = 0;
  Eigen::VectorXf grad_;
};

// The presets (name, layer spec or "" for synthetic, one-line description).
struct Preset {
  const char* name;
  const char* spec;
  const char* about;
  bool standardize;  // Fashion-MNIST inputs as (pixel - mean) / stddev
};
const std::vector<Preset>& Presets();
// Names accepted by MakeTask besides layer specs (the presets).
const std::vector<std::string>& TaskNames();

// Builds a task from a preset name or a layer spec. Errors: unknown name / bad spec (the spec
// parser's message), invalid options (batch < 1, lr <= 0, momentum outside [0, 1), threads
// outside 1..64, a shard with no samples), data that do not fit the model (input size, labels
// beyond its outputs), or the data failing to load (the loader's message names the file).
Result<std::unique_ptr<Task>> MakeTask(const std::string& name, const TaskOptions& options);

// `meshtrain evaluate`: mean loss and accuracy of a model file on options.test_data (with
// options.data_options), or on Fashion-MNIST's test set (options.dataset_dir) when that is empty.
Result<EvalResult> EvaluateModelFile(const ModelFile& model, const TaskOptions& options);

}  // namespace meshtrain::learn
