#include "cli/local_model.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "cli/option_choice.h"
#include "daemon/ops/json_text.h"
#include "learn/mixing.h"
#include "learn/model_file.h"
#include "learn/network.h"
#include "learn/rng.h"
#include "learn/task.h"

namespace meshtrain::cli {
namespace {

struct DataArgs {
  std::string train_data, test_data, label_column, input_shape;
  std::string dataset_dir = learn::kDefaultFashionMnistDir;
};

struct TrainArgs {
  DataArgs data;
  std::string model = "fmnist-mlp";
  std::string shard, shard_mode = "iid";
  uint64_t steps = 1000;
  int batch = 64;
  double lr = 0.05;
  double momentum = 0.9;
  int threads = 1;
  uint64_t seed = 1;
  uint64_t eval_every = 0;
  double eval_average = 0;
  std::string out;
  OutputFormat format = OutputFormat::kTable;
};

struct EvaluateArgs {
  DataArgs data;
  std::string model;
  OutputFormat format = OutputFormat::kTable;
};

TrainArgs& Train() {
  static TrainArgs a;
  return a;
}
EvaluateArgs& Eval() {
  static EvaluateArgs a;
  return a;
}

// Bad options, data files and models are usage errors (cli/exit_codes.h).
int Error(const std::string& msg) { return UsageError(msg); }

void AddDataOptions(CLI::App* c, DataArgs* d, bool train) {
  if (train) {
    c->add_option("--train-data", d->train_data,
                  "Training file instead of Fashion-MNIST: IDX (images[,labels], .gz ok), CSV, "
                  "X.npy,Y.npy or .npz (arrays x and y)");
  }
  c->add_option("--test-data", d->test_data,
                train ? "Test file (default: Fashion-MNIST's, or 10% of --train-data held out)"
                      : "Test file (default: Fashion-MNIST's test set)");
  c->add_option("--label-column", d->label_column,
                "CSV: the label column's name or 0-based index (default: the last column)");
  c->add_option("--input-shape", d->input_shape, "C,H,W of one sample where the file does not say");
  c->add_option("--dataset-dir", d->dataset_dir, "Fashion-MNIST IDX files")->capture_default_str();
}

// Fills the data fields of `o`; an error names the option.
learn::Status ApplyData(const DataArgs& d, learn::TaskOptions* o) {
  o->dataset_dir = d.dataset_dir;
  o->train_data = d.train_data;
  o->test_data = d.test_data;
  o->data_options.label_column = d.label_column;
  if (!d.input_shape.empty()) {
    auto shape = learn::ParseInputShape(d.input_shape);
    if (!shape.ok())
      return learn::Status::InvalidArgument("--input-shape: " + shape.status().message());
    o->data_options.input_shape = shape.value();
  }
  return learn::Status::OK();
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

CLI::App* AddTrainCommand(CLI::App& app) {
  TrainArgs& a = Train();
  CLI::App* c = app.add_subcommand(
      "train", "Train a model in this process, without a mesh (a baseline; prints samples/s)");
  c->add_option("--model", a.model, "A preset or a layer spec (see `agent --help`)")
      ->capture_default_str();
  AddDataOptions(c, &a.data, true);
  c->add_option("--shard", a.shard, "Train on the I-th of N shards only (I/N)");
  c->add_option("--shard-mode", a.shard_mode, "iid or label-skew:ALPHA")->capture_default_str();
  c->add_option("--steps", a.steps, "SGD steps")->capture_default_str();
  c->add_option("--batch", a.batch, "Mini-batch size")->capture_default_str();
  c->add_option("--lr", a.lr, "Learning rate")->capture_default_str();
  c->add_option("--momentum", a.momentum, "SGD momentum")->capture_default_str();
  c->add_option("--threads", a.threads, "Threads sharing each minibatch")->capture_default_str();
  c->add_option("--seed", a.seed, "Sample-order seed")->capture_default_str();
  c->add_option("--eval-every", a.eval_every, "Evaluate every N steps (0 = at the end only)")
      ->capture_default_str();
  c->add_option("--eval-average", a.eval_average,
                "Evaluate (and write with --out) the moving average of the parameters with "
                "this decay per step, e.g. 0.98 (0 = the parameters as trained)")
      ->capture_default_str();
  c->add_option("--out", a.out, "Write the trained model here (.npz, see `evaluate`)");
  AddChoice(c, "--format", a.format, kOutputFormatNames, "Output format (the summary)");
  return c;
}

CLI::App* AddEvaluateCommand(CLI::App& app) {
  EvaluateArgs& a = Eval();
  CLI::App* c = app.add_subcommand(
      "evaluate", "Accuracy and loss of a model file (from `export` or --data-dir) on a test set");
  c->add_option("--model", a.model, "Model file (.npz)")->required();
  AddDataOptions(c, &a.data, false);
  AddChoice(c, "--format", a.format, kOutputFormatNames, "Output format");
  return c;
}

int RunTrainCommand() {
  const TrainArgs& a = Train();
  learn::TaskOptions o;
  if (auto st = ApplyData(a.data, &o); !st.ok()) return Error(st.message());
  if (!a.shard.empty()) {
    auto shard = learn::ParseShard(a.shard);
    if (!shard.ok()) return Error("invalid --shard: " + shard.status().message());
    o.shard = shard.value();
  }
  auto mode = learn::ParseShardMode(a.shard_mode);
  if (!mode.ok()) return Error("invalid " + mode.status().message());
  o.shard_mode = mode.value();
  if (!(a.eval_average >= 0 && a.eval_average < 1)) {
    return Error("invalid --eval-average: a decay in [0, 1), e.g. 0.98");
  }
  o.batch_size = a.batch;
  o.lr = static_cast<float>(a.lr);
  o.momentum = static_cast<float>(a.momentum);
  o.threads = a.threads;
  o.init_seed = 0x6d657368;  // as the agent: a model trained here starts like a mesh node
  o.data_seed = a.seed;
  auto made = learn::MakeTask(a.model, o);
  if (!made.ok()) return Error(made.status().message());
  learn::Task& task = *made.value();
  std::fprintf(stderr, "model %s: %zu parameters, %zu training samples, batch %d, %d thread(s)\n",
               task.model_spec().empty() ? task.name().c_str() : task.model_spec().c_str(),
               task.num_params(), task.train_size(), a.batch, a.threads);
  if (const auto hist = task.LabelHistogram(); !hist.empty()) {
    std::string h;
    for (size_t c : hist) h += (h.empty() ? "" : ",") + std::to_string(c);
    std::fprintf(stderr, "shard %s (%s): label histogram [%s]\n",
                 a.shard.empty() ? "all" : a.shard.c_str(), a.shard_mode.c_str(), h.c_str());
  }
  double train_s = 0;
  uint64_t samples = 0;
  learn::EvalResult eval;
  learn::ParamAverage average(a.eval_average);
  if (average.enabled()) average.Reset(task.params());
  // The model evaluated and written: the trained parameters or their moving average.
  const auto model = [&]() -> const Eigen::VectorXf& {
    return average.enabled() ? average.value() : task.params();
  };
  auto step_start = std::chrono::steady_clock::now();
  for (uint64_t s = 1; s <= a.steps; ++s) {
    const size_t n = std::min<size_t>(static_cast<size_t>(task.batch_size()), task.train_size());
    const float loss = task.Step();
    if (average.enabled()) average.Update(task.params());
    samples += n;
    if ((a.eval_every > 0 && s % a.eval_every == 0) || s == a.steps) {
      train_s += Since(step_start);
      eval = task.EvaluateAt(model().data());
      std::fprintf(stderr,
                   "step %llu  loss %.4f  test accuracy %.4f  test loss %.4f  %.0f samples/s\n",
                   static_cast<unsigned long long>(s), loss, eval.accuracy, eval.loss,
                   train_s > 0 ? static_cast<double>(samples) / train_s : 0.0);
      step_start = std::chrono::steady_clock::now();
    }
  }
  if (!a.out.empty()) {
    learn::ModelFile m;
    m.spec = task.model_spec();
    if (m.spec.empty()) return Error("--out: task " + task.name() + " is not a layer-spec model");
    m.input_shape = task.input_shape();
    m.input_shift = task.input_transform()[0];
    m.input_scale = task.input_transform()[1];
    m.step = task.steps();
    m.params.assign(model().data(), model().data() + model().size());
    if (auto st = learn::WriteModelFile(a.out, m); !st.ok()) return Error(st.message());
  }
  const double sps = train_s > 0 ? static_cast<double>(samples) / train_s : 0.0;
  nlohmann::json out = {{"model", task.name()}, {"params", task.num_params()}, {"steps", a.steps},
                        {"batch", a.batch},     {"threads", a.threads},        {"train_s", train_s},
                        {"samples_per_s", sps}, {"accuracy", eval.accuracy},   {"loss", eval.loss}};
  if (a.format == OutputFormat::kJson) {
    std::printf("%s\n", daemon::JsonText(out).c_str());
  } else {
    std::printf("steps %llu in %.2f s (%.0f samples/s), test accuracy %.4f, loss %.4f\n",
                static_cast<unsigned long long>(a.steps), train_s, sps, eval.accuracy, eval.loss);
  }
  return 0;
}

int RunEvaluateCommand() {
  const EvaluateArgs& a = Eval();
  learn::TaskOptions o;
  if (auto st = ApplyData(a.data, &o); !st.ok()) return Error(st.message());
  auto model = learn::ReadModelFile(a.model);
  if (!model.ok()) return Error(model.status().message());
  auto r = learn::EvaluateModelFile(model.value(), o);
  if (!r.ok()) return Error(r.status().message());
  if (a.format == OutputFormat::kJson) {
    std::printf("%s\n", daemon::JsonText(nlohmann::json{{"model", model->spec},
                                                        {"step", model->step},
                                                        {"samples", r->samples},
                                                        {"accuracy", r->accuracy},
                                                        {"loss", r->loss}})
                            .c_str());
  } else {
    std::printf("model %s (step %lld): accuracy %.4f, loss %.4f on %zu samples\n",
                model->spec.c_str(), static_cast<long long>(model->step), r->accuracy, r->loss,
                r->samples);
  }
  return 0;
}

}  // namespace meshtrain::cli
