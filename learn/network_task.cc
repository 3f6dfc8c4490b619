// NetworkTask: a layer-spec network (learn/network.h) trained on Fashion-MNIST or on the user's
// data files (learn/data_file.h). Both data kinds sit behind SampleSource so that sharding,
// label skew, batching and evaluation are written once.
#include <algorithm>
#include <cmath>

#include "learn/network.h"
#include "learn/parallel.h"
#include "learn/task_internal.h"

namespace meshtrain::learn {
namespace {

// A read-only labelled set whose samples are gathered into batch columns.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual TensorShape shape() const = 0;
  virtual void Fill(const uint32_t* idx, size_t n, Eigen::MatrixXf* x) const = 0;
  const std::vector<int32_t>& labels() const { return labels_; }
  size_t size() const { return labels_.size(); }

 protected:
  std::vector<int32_t> labels_;
};

// Fashion-MNIST images kept as bytes; (pixel/255 - shift) * scale when gathered.
class ImageSource final : public SampleSource {
 public:
  ImageSource(std::shared_ptr<const FashionMnist> data, const ImageSet* set, float shift,
              float scale)
      : data_(std::move(data)), set_(set), shift_(shift), scale_(scale) {
    labels_.assign(set->labels.begin(), set->labels.end());
  }
  TensorShape shape() const override { return TensorShape{1, set_->rows, set_->cols}; }
  void Fill(const uint32_t* idx, size_t n, Eigen::MatrixXf* x) const override {
    const Eigen::Index dim = static_cast<Eigen::Index>(set_->dim());
    x->resize(dim, static_cast<Eigen::Index>(n));
    const float mul = scale_ / 255.0f;
    const float add = -shift_ * scale_;
    for (size_t k = 0; k < n; ++k) {
      const uint8_t* src = set_->image(idx[k]);
      float* dst = x->col(static_cast<Eigen::Index>(k)).data();
      for (Eigen::Index j = 0; j < dim; ++j) dst[j] = src[j] * mul + add;
    }
  }

 private:
  std::shared_ptr<const FashionMnist> data_;  // keeps set_ alive
  const ImageSet* set_;
  float shift_;
  float scale_;
};

class FileSource final : public SampleSource {
 public:
  FileSource(std::shared_ptr<const LabeledData> data, float shift = 0.0f, float scale = 1.0f)
      : data_(std::move(data)), shift_(shift), scale_(scale) {
    labels_ = data_->labels;
  }
  TensorShape shape() const override {
    return TensorShape{data_->channels, data_->height, data_->width};
  }
  void Fill(const uint32_t* idx, size_t n, Eigen::MatrixXf* x) const override {
    x->resize(data_->x.rows(), static_cast<Eigen::Index>(n));
    for (size_t k = 0; k < n; ++k) x->col(static_cast<Eigen::Index>(k)) = data_->x.col(idx[k]);
    if (shift_ != 0.0f || scale_ != 1.0f) x->array() = (x->array() - shift_) * scale_;
  }

 private:
  std::shared_ptr<const LabeledData> data_;
  float shift_;
  float scale_;
};

// Mean loss and accuracy of `params` on samples idx of `set`, in chunks that bound the
// activation memory (a CNN's first layers hold ~10^4 values per sample).
EvalResult EvaluateOn(const Network<float>& net, const float* params, const SampleSource& set,
                      const std::vector<uint32_t>& idx) {
  constexpr size_t kChunk = 256;
  Workspace<float> ws;
  Eigen::MatrixXf x;
  std::vector<int32_t> labels;
  double loss_sum = 0;
  size_t correct = 0;
  for (size_t start = 0; start < idx.size(); start += kChunk) {
    const size_t n = std::min(kChunk, idx.size() - start);
    set.Fill(idx.data() + start, n, &x);
    labels.resize(n);
    for (size_t k = 0; k < n; ++k) labels[k] = set.labels()[idx[start + k]];
    const ClassifierSums sums = net.Evaluate(params, x, labels.data(), &ws);
    loss_sum += sums.loss_sum;
    correct += sums.correct;
  }
  EvalResult r;
  r.samples = idx.size();
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  return r;
}

std::vector<uint32_t> Iota(size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(i);
  return v;
}

class NetworkTask final : public Task {
 public:
  NetworkTask(std::string name, Network<float> net, std::shared_ptr<const SampleSource> train,
              std::vector<uint32_t> train_pool, std::shared_ptr<const SampleSource> test,
              std::vector<uint32_t> test_idx, float shift, float scale, const TaskOptions& options)
      : Task(std::move(name), static_cast<Eigen::Index>(net.NumParams()), options),
        net_(std::move(net)),
        train_(std::move(train)),
        test_(std::move(test)),
        test_idx_(std::move(test_idx)),
        shift_(shift),
        scale_(scale),
        classes_(net_.num_outputs()),
        dropout_seed_(options.data_seed),
        pool_(std::max(1, options.threads)),
        parts_(static_cast<size_t>(pool_.threads())) {
    // train_pool: the training-set indices shards are cut from (all, or what the hold-out left).
    if (options.shard_mode.label_skew) {
      std::vector<int32_t> pool_labels(train_pool.size());
      for (size_t i = 0; i < train_pool.size(); ++i) {
        pool_labels[i] = train_->labels()[train_pool[i]];
      }
      for (uint32_t i : LabelSkewIndices(pool_labels, classes_, options.shard,
                                         options.shard_mode.alpha, options.init_seed)) {
        shard_.push_back(train_pool[i]);
      }
    } else {
      const auto [begin, end] = ShardRange(train_pool.size(), options.shard);
      shard_.assign(train_pool.begin() + static_cast<std::ptrdiff_t>(begin),
                    train_pool.begin() + static_cast<std::ptrdiff_t>(end));
    }
    net_.Init(options.init_seed, params_.data());
  }

  size_t train_size() const override { return shard_.size(); }
  size_t test_size() const override { return test_idx_.size(); }
  std::vector<size_t> LabelHistogram() const override {
    return learn::LabelHistogram(train_->labels(), shard_, classes_);
  }
  std::string model_spec() const override { return net_.spec().text; }
  std::array<int, 3> input_shape() const override {
    const TensorShape& in = net_.input_shape();
    return {in.c, in.h, in.w};
  }

  std::array<float, 2> input_transform() const override { return {shift_, scale_}; }

  EvalResult EvaluateAt(const float* params) const override {
    return EvaluateOn(net_, params, *test_, test_idx_);
  }

 protected:
  // The batch is split into up to --threads parts of near-equal size; each part's mean gradient
  // is weighted by its share, so the result equals the whole batch's mean gradient.
  float ComputeLossAndGradient(const uint32_t* idx, size_t n, float* grad) override {
    constexpr size_t kMinPart = 8;  // below this a part costs more in overhead than it saves
    const int parts =
        static_cast<int>(std::clamp<size_t>(n / kMinPart, 1, static_cast<size_t>(pool_.threads())));
    const uint64_t step_seed =
        dropout_seed_ ^ (static_cast<uint64_t>(steps()) * 0x2545f4914f6cdd1dULL);
    auto run = [&](int p) {
      Part& part = parts_[static_cast<size_t>(p)];
      const size_t begin = n * static_cast<size_t>(p) / static_cast<size_t>(parts);
      const size_t end = n * static_cast<size_t>(p + 1) / static_cast<size_t>(parts);
      part.global.resize(end - begin);
      part.labels.resize(end - begin);
      for (size_t k = begin; k < end; ++k) {
        part.global[k - begin] = shard_[idx[k]];
        part.labels[k - begin] = train_->labels()[shard_[idx[k]]];
      }
      train_->Fill(part.global.data(), part.global.size(), &part.x);
      if (p != 0) part.grad.resize(params_.size());
      part.loss = net_.LossAndGradient(params_.data(), part.x, part.labels.data(),
                                       p == 0 ? grad : part.grad.data(), &part.ws,
                                       RunMode{true, step_seed + static_cast<uint64_t>(p)});
      part.weight = static_cast<float>(end - begin) / static_cast<float>(n);
    };
    if (parts == 1) {
      run(0);
      return parts_[0].loss;
    }
    pool_.Run(parts, run);
    Eigen::Map<Eigen::VectorXf> g(grad, params_.size());
    g *= parts_[0].weight;
    float loss = parts_[0].loss * parts_[0].weight;
    for (int p = 1; p < parts; ++p) {
      g += parts_[static_cast<size_t>(p)].weight * parts_[static_cast<size_t>(p)].grad;
      loss += parts_[static_cast<size_t>(p)].loss * parts_[static_cast<size_t>(p)].weight;
    }
    return loss;
  }

 private:
  struct Part {
    std::vector<uint32_t> global;
    std::vector<int32_t> labels;
    Eigen::MatrixXf x;
    Eigen::VectorXf grad;
    Workspace<float> ws;
    float loss = 0;
    float weight = 0;
  };

  Network<float> net_;
  std::shared_ptr<const SampleSource> train_;
  std::shared_ptr<const SampleSource> test_;
  std::vector<uint32_t> test_idx_;
  float shift_;  // inputs are fed as (x - shift) * scale
  float scale_;
  std::vector<uint32_t> shard_;  // training-set indices of this node's shard
  int classes_;
  uint64_t dropout_seed_;
  WorkerPool pool_;
  std::vector<Part> parts_;
};

// A seeded 10 % of n (at least one sample, at most n - 1) for evaluation, the same on every node.
void HoldOut(size_t n, std::vector<uint32_t>* train, std::vector<uint32_t>* test) {
  std::vector<uint32_t> order = Iota(n);
  Rng rng(0x686f6c64);
  rng.Shuffle(&order);
  const size_t held = std::min(n - 1, std::max<size_t>(1, n / 10));
  test->assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(held));
  train->assign(order.begin() + static_cast<std::ptrdiff_t>(held), order.end());
  std::sort(train->begin(), train->end());
  std::sort(test->begin(), test->end());
}

Result<std::shared_ptr<const LabeledData>> LoadOrShare(std::shared_ptr<const LabeledData> given,
                                                       const std::string& path,
                                                       const DataFileOptions& opts) {
  if (given) return given;
  Result<LabeledData> loaded = LoadDataFile(path, opts);
  if (!loaded.ok()) return loaded.status();
  return std::shared_ptr<const LabeledData>(
      std::make_shared<LabeledData>(std::move(loaded).value()));
}

}  // namespace

Result<std::unique_ptr<Task>> MakeNetworkTask(const std::string& name, const ModelSpec& spec,
                                              bool standardize, const TaskOptions& options) {
  std::shared_ptr<const SampleSource> train, test;
  std::shared_ptr<const LabeledData> train_file, test_file;
  std::vector<uint32_t> pool, test_idx;
  float shift = 0.0f, scale = 1.0f;
  if (options.train_data.empty() && !options.train_set) {
    std::shared_ptr<const FashionMnist> data = options.fashion_mnist;
    if (!data) {
      Result<std::shared_ptr<const FashionMnist>> loaded = LoadFashionMnist(options.dataset_dir);
      if (!loaded.ok()) return loaded.status();
      data = std::move(loaded).value();
    }
    const bool on = options.standardize_inputs.value_or(standardize);
    shift = on ? data->pixel_mean : 0.0f;
    scale = on ? 1.0f / data->pixel_stddev : 1.0f;
    train = std::make_shared<ImageSource>(data, &data->train, shift, scale);
    test = std::make_shared<ImageSource>(data, &data->test, shift, scale);
    pool = Iota(train->size());
    test_idx = Iota(test->size());
  } else {
    const std::string train_path = options.train_data.empty() ? "train data" : options.train_data;
    auto train_data = LoadOrShare(options.train_set, options.train_data, options.data_options);
    if (!train_data.ok()) return train_data.status();
    train_file = train_data.value();
    train = std::make_shared<FileSource>(train_file);
    if (options.test_data.empty() && !options.test_set) {
      if (train->size() < 2) {
        return Status::InvalidArgument(train_path + ": " + std::to_string(train->size()) +
                                       " sample(s) cannot be split into training and hold-out "
                                       "sets; pass --test-data");
      }
      test = train;
      test_file = train_file;
      HoldOut(train->size(), &pool, &test_idx);
    } else {
      auto test_data = LoadOrShare(options.test_set, options.test_data, options.data_options);
      if (!test_data.ok()) return test_data.status();
      if (!(test_data.value()->channels == train_data.value()->channels &&
            test_data.value()->height == train_data.value()->height &&
            test_data.value()->width == train_data.value()->width)) {
        return Status::InvalidArgument(
            options.test_data + ": samples of shape " +
            TensorShape{test_data.value()->channels, test_data.value()->height,
                        test_data.value()->width}
                .ToString() +
            " do not match the training data's " + train->shape().ToString());
      }
      test_file = test_data.value();
      test = std::make_shared<FileSource>(test_file);
      pool = Iota(train->size());
      test_idx = Iota(test->size());
    }
  }
  Result<Network<float>> net = Network<float>::Build(spec, train->shape());
  if (!net.ok()) return net.status();
  const int outputs = net->num_outputs();
  if (outputs < 2) {
    return Status::InvalidArgument("model " + name + " has " + std::to_string(outputs) +
                                   " output; a classifier needs one per class (at least 2)");
  }
  if (train_file) {
    if (Status st = CheckLabels(*train_file, outputs, options.train_data); !st.ok()) return st;
    if (test_file && test_file != train_file) {
      if (Status st = CheckLabels(*test_file, outputs, options.test_data); !st.ok()) return st;
    }
  } else if (outputs < kFashionMnistClasses) {
    return Status::InvalidArgument("model " + name + " has " + std::to_string(outputs) +
                                   " outputs but Fashion-MNIST has " +
                                   std::to_string(kFashionMnistClasses) + " classes");
  }
  return std::unique_ptr<Task>(
      std::make_unique<NetworkTask>(name, std::move(net).value(), train, std::move(pool), test,
                                    std::move(test_idx), shift, scale, options));
}

Result<EvalResult> EvaluateModelFile(const ModelFile& model, const TaskOptions& options) {
  Result<ModelSpec> spec = ParseModelSpec(model.spec);
  if (!spec.ok()) return spec.status();
  const TensorShape shape{model.input_shape[0], model.input_shape[1], model.input_shape[2]};
  Result<Network<float>> net = Network<float>::Build(spec.value(), shape);
  if (!net.ok()) return net.status();
  if (net->NumParams() != model.params.size()) {
    return Status::InvalidArgument("model has " + std::to_string(model.params.size()) +
                                   " parameters, its spec needs " +
                                   std::to_string(net->NumParams()));
  }
  std::shared_ptr<const SampleSource> test;
  std::string where = options.test_data;
  if (options.test_data.empty() && !options.test_set) {
    Result<std::shared_ptr<const FashionMnist>> loaded = LoadFashionMnist(options.dataset_dir);
    if (!loaded.ok()) return loaded.status();
    const ImageSet* set = &loaded.value()->test;
    test = std::make_shared<ImageSource>(loaded.value(), set, model.input_shift, model.input_scale);
    where = "Fashion-MNIST test set";
  } else {
    auto data = LoadOrShare(options.test_set, options.test_data, options.data_options);
    if (!data.ok()) return data.status();
    if (Status st = CheckLabels(*data.value(), net->num_outputs(), where); !st.ok()) return st;
    test = std::make_shared<FileSource>(data.value(), model.input_shift, model.input_scale);
  }
  if (!(test->shape() == shape)) {
    return Status::InvalidArgument(where + ": samples of shape " + test->shape().ToString() +
                                   " do not fit the model's input " + shape.ToString() +
                                   " (--input-shape C,H,W if the file does not say)");
  }
  return EvaluateOn(net.value(), model.params.data(), *test, Iota(test->size()));
}

}  // namespace meshtrain::learn
