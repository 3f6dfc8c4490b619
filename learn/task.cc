#include "learn/task.h"

#include <algorithm>
#include <cmath>

#include "learn/models.h"
#include "learn/task_internal.h"

namespace meshtrain::learn {

Task::Task(std::string name, Eigen::Index num_params, const TaskOptions& options)
    : params_(Eigen::VectorXf::Zero(num_params)),
      name_(std::move(name)),
      optimizer_(static_cast<size_t>(num_params), options.lr, options.momentum),
      batch_size_(options.batch_size),
      order_rng_(options.data_seed),
      grad_(Eigen::VectorXf::Zero(num_params)) {}

float Task::Step() {
  const size_t n = train_size();
  if (order_.size() != n) {
    order_.resize(n);
    for (size_t i = 0; i < n; ++i) order_[i] = static_cast<uint32_t>(i);
    order_rng_.Shuffle(&order_);
    cursor_ = 0;
  } else if (cursor_ >= n) {
    order_rng_.Shuffle(&order_);
    cursor_ = 0;
    ++epoch_;
  }
  const size_t count = std::min(static_cast<size_t>(batch_size_), n - cursor_);
  const float loss = ComputeLossAndGradient(order_.data() + cursor_, count, grad_.data());
  cursor_ += count;
  optimizer_.Apply(grad_, &params_);
  ++steps_;
  return loss;
}

float Task::StepOn(const std::vector<uint32_t>& batch) {
  if (batch.empty()) return 0.0f;  // a mean over nothing would put NaN into the parameters
  const float loss = ComputeLossAndGradient(batch.data(), batch.size(), grad_.data());
  optimizer_.Apply(grad_, &params_);
  ++steps_;
  return loss;
}

float Task::LossAndGradient(const std::vector<uint32_t>& batch, Eigen::VectorXf* grad) {
  grad->resize(params_.size());
  if (batch.empty()) {
    grad->setZero();
    return 0.0f;
  }
  return ComputeLossAndGradient(batch.data(), batch.size(), grad->data());
}

namespace {

class SyntheticTask final : public Task {
 public:
  SyntheticTask(std::shared_ptr<const SyntheticData> data, const TaskOptions& options)
      : Task("synthetic", data->train_x.rows() + 1, options), data_(std::move(data)) {
    const auto [begin, end] = ShardRange(static_cast<size_t>(data_->train_x.cols()), options.shard);
    shard_begin_ = begin;
    shard_size_ = end - begin;
    // Small random start (N(0, 1/d)) so init_seed matters, as for the classifiers.
    Rng rng(options.init_seed);
    const double stddev = 1.0 / std::sqrt(static_cast<double>(data_->train_x.rows()));
    for (Eigen::Index i = 0; i + 1 < params_.size(); ++i) {
      params_[i] = static_cast<float>(rng.Normal() * stddev);
    }
    params_[params_.size() - 1] = 0.0f;
    const Eigen::VectorXf& y = data_->test_y;
    test_var_ = y.size() > 0 ? (y.array() - y.mean()).square().mean() : 0.0;
  }

  size_t train_size() const override { return shard_size_; }
  size_t test_size() const override { return static_cast<size_t>(data_->test_x.cols()); }

  EvalResult EvaluateAt(const float* params) const override {
    EvalResult r;
    r.samples = test_size();
    if (r.samples == 0) return r;
    r.loss = LinearMseAndGradient<float>(params, data_->test_x, data_->test_y, nullptr);
    r.accuracy = test_var_ > 0 ? std::max(0.0, 1.0 - r.loss / test_var_) : 0.0;
    return r;
  }

 protected:
  float ComputeLossAndGradient(const uint32_t* idx, size_t n, float* grad) override {
    const Eigen::Index d = data_->train_x.rows();
    x_.resize(d, static_cast<Eigen::Index>(n));
    y_.resize(static_cast<Eigen::Index>(n));
    for (size_t k = 0; k < n; ++k) {
      const Eigen::Index col = static_cast<Eigen::Index>(shard_begin_ + idx[k]);
      x_.col(static_cast<Eigen::Index>(k)) = data_->train_x.col(col);
      y_[static_cast<Eigen::Index>(k)] = data_->train_y[col];
    }
    return LinearMseAndGradient<float>(params_.data(), x_, y_, grad);
  }

 private:
  std::shared_ptr<const SyntheticData> data_;
  size_t shard_begin_ = 0;
  size_t shard_size_ = 0;
  double test_var_ = 0;
  Eigen::MatrixXf x_;
  Eigen::VectorXf y_;
};

}  // namespace

std::shared_ptr<const SyntheticData> MakeSyntheticData(const SyntheticOptions& options) {
  auto data = std::make_shared<SyntheticData>();
  Rng rng(options.data_seed);
  const int d = std::max(1, options.dim);
  data->true_w.resize(d);
  for (int i = 0; i < d; ++i) data->true_w[i] = static_cast<float>(rng.Normal());
  data->true_bias = static_cast<float>(rng.Normal());
  auto fill = [&](int n, Eigen::MatrixXf* x, Eigen::VectorXf* y) {
    n = std::max(0, n);
    x->resize(d, n);
    y->resize(n);
    for (int k = 0; k < n; ++k) {
      for (int i = 0; i < d; ++i) (*x)(i, k) = static_cast<float>(rng.Normal());
      (*y)[k] = x->col(k).dot(data->true_w) + data->true_bias +
                static_cast<float>(rng.Normal() * options.noise_stddev);
    }
  };
  fill(options.train_samples, &data->train_x, &data->train_y);
  fill(options.test_samples, &data->test_x, &data->test_y);
  return data;
}

const std::vector<Preset>& Presets() {
  static const std::vector<Preset> kPresets = {
      {"fmnist-mlp", "dense(256),relu,dense(128),relu,dense(10)",
       "784-256-128-10 ReLU MLP on Fashion-MNIST", true},
      {"fmnist-softmax", "dense(10)", "multinomial logistic regression on Fashion-MNIST", false},
      {"fmnist-cnn",
       "conv(16,5),relu,maxpool(2),conv(32,5),relu,maxpool(2),flatten,dense(128),relu,dense(10)",
       "two-layer CNN on Fashion-MNIST", true},
      {"synthetic", "", "seeded linear regression (MSE; accuracy = R^2)", false},
  };
  return kPresets;
}

const std::vector<std::string>& TaskNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const Preset& p : Presets()) names.emplace_back(p.name);
    return names;
  }();
  return kNames;
}

Result<std::unique_ptr<Task>> MakeTask(const std::string& name, const TaskOptions& options) {
  if (options.batch_size < 1) {
    return Status::InvalidArgument("batch size must be at least 1, got " +
                                   std::to_string(options.batch_size));
  }
  if (!(options.lr > 0.0f) || !std::isfinite(options.lr)) {
    return Status::InvalidArgument("learning rate must be positive, got " +
                                   std::to_string(options.lr));
  }
  if (!(options.momentum >= 0.0f && options.momentum < 1.0f)) {
    return Status::InvalidArgument("momentum must be in [0, 1), got " +
                                   std::to_string(options.momentum));
  }
  if (options.threads < 1 || options.threads > 64) {
    return Status::InvalidArgument("threads must be in 1..64, got " +
                                   std::to_string(options.threads));
  }
  if (options.shard.count == 0 || options.shard.index >= options.shard.count) {
    return Status::InvalidArgument("invalid shard " + options.shard.ToString());
  }

  const Preset* preset = nullptr;
  for (const Preset& p : Presets()) {
    if (name == p.name) preset = &p;
  }
  std::unique_ptr<Task> task;
  if (preset != nullptr && preset->spec[0] == '\0') {
    std::shared_ptr<const SyntheticData> data = options.synthetic_data;
    if (!data) data = MakeSyntheticData(options.synthetic);
    task = std::make_unique<SyntheticTask>(std::move(data), options);
  } else {
    Result<ModelSpec> spec = ParseModelSpec(preset != nullptr ? preset->spec : name);
    if (!spec.ok()) {
      if (name.find_first_of("(,") == std::string::npos) {
        std::string names;
        for (const std::string& n : TaskNames()) names += (names.empty() ? "" : ", ") + n;
        return Status::InvalidArgument("unknown model \"" + name + "\": not a preset (" + names +
                                       ") nor a layer spec (" + spec.status().message() + ")");
      }
      return spec.status();
    }
    Result<std::unique_ptr<Task>> made =
        MakeNetworkTask(preset != nullptr ? name : spec->text, spec.value(),
                        preset != nullptr ? preset->standardize : true, options);
    if (!made.ok()) return made.status();
    task = std::move(made).value();
  }
  if (task->train_size() == 0) {
    return Status::InvalidArgument("shard " + options.shard.ToString() + " of task " + name +
                                   " has no training samples");
  }
  return task;
}

}  // namespace meshtrain::learn
