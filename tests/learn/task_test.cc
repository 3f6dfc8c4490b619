// Task factory, short training runs, determinism of initialisation and sample order, sharding.
#include "learn/task.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "learn/mixing.h"
#include "tests/learn/test_util.h"

namespace meshtrain::learn {
namespace {

TaskOptions FmnistOptions() {
  TaskOptions options;
  options.fashion_mnist = testing::SharedFashionMnist();
  return options;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST_CASE("MakeTask validates names and options", "[learn][task]") {
  TaskOptions options;
  auto r = MakeTask("resnet", options);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().message().find("resnet") != std::string::npos);

  options.batch_size = 0;
  CHECK_FALSE(MakeTask("synthetic", options).ok());
  options = TaskOptions();
  options.lr = 0;
  CHECK_FALSE(MakeTask("synthetic", options).ok());
  options = TaskOptions();
  options.momentum = 1.0f;
  CHECK_FALSE(MakeTask("synthetic", options).ok());
  options = TaskOptions();
  options.shard = Shard{4, 4};
  CHECK_FALSE(MakeTask("synthetic", options).ok());
  options = TaskOptions();
  options.synthetic.train_samples = 3;
  options.shard = Shard{0, 5};  // [0, 0): no samples
  CHECK_FALSE(MakeTask("synthetic", options).ok());

  options = TaskOptions();
  options.dataset_dir = "/nonexistent";
  r = MakeTask("fmnist-mlp", options);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsNotFound());
}

TEST_CASE("task sizes", "[learn][task]") {
  auto mlp = MakeTask("fmnist-mlp", FmnistOptions());
  REQUIRE(mlp.ok());
  CHECK((*mlp)->num_params() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  CHECK((*mlp)->train_size() == 60000);
  CHECK((*mlp)->test_size() == 10000);
  CHECK((*mlp)->optimizer().velocity().size() == (*mlp)->params().size());

  auto softmax = MakeTask("fmnist-softmax", FmnistOptions());
  REQUIRE(softmax.ok());
  CHECK((*softmax)->num_params() == 7850);

  TaskOptions options;
  options.shard = Shard{1, 3};
  auto synthetic = MakeTask("synthetic", options);
  REQUIRE(synthetic.ok());
  CHECK((*synthetic)->num_params() == 33);
  CHECK((*synthetic)->train_size() == 1365);  // floor(4096*2/3) - floor(4096/3)
  CHECK((*synthetic)->test_size() == 1024);
}

TEST_CASE("same init seed gives identical parameters; data seed only changes the order",
          "[learn][task]") {
  for (const char* name : {"fmnist-mlp", "fmnist-softmax", "synthetic"}) {
    INFO(name);
    TaskOptions a = FmnistOptions();
    a.init_seed = 11;
    a.data_seed = 1;
    TaskOptions b = a;
    b.data_seed = 2;
    b.shard = Shard{1, 2};
    TaskOptions c = a;
    c.init_seed = 12;
    auto ta = MakeTask(name, a);
    auto tb = MakeTask(name, b);
    auto tc = MakeTask(name, c);
    REQUIRE((ta.ok() && tb.ok() && tc.ok()));
    CHECK((*ta)->params() == (*tb)->params());
    CHECK(ParamsCrc32((*ta)->params()) == ParamsCrc32((*tb)->params()));
    CHECK(ParamsCrc32((*ta)->params()) != ParamsCrc32((*tc)->params()));

    // Same seeds and data: bit-identical trajectories. Different data seed: they diverge.
    auto ta2 = MakeTask(name, a);
    TaskOptions d = a;
    d.data_seed = 99;
    auto td = MakeTask(name, d);
    for (int i = 0; i < 3; ++i) {
      (*ta)->Step();
      (*ta2)->Step();
      (*td)->Step();
    }
    CHECK((*ta)->params() == (*ta2)->params());
    CHECK((*ta)->params() != (*td)->params());
    CHECK((*ta)->steps() == 3);

    // An empty explicit batch is a no-op rather than a NaN update.
    const Eigen::VectorXf before = (*ta)->params();
    CHECK((*ta)->StepOn({}) == 0.0f);
    CHECK((*ta)->params() == before);
  }
}

TEST_CASE("Step visits every shard sample once per epoch", "[learn][task]") {
  TaskOptions options;
  options.synthetic.train_samples = 100;
  options.batch_size = 30;  // 30+30+30+10 per epoch
  options.lr = 1e-3f;
  auto task = MakeTask("synthetic", options);
  REQUIRE(task.ok());
  for (int i = 0; i < 4; ++i) (*task)->Step();
  CHECK((*task)->epoch() == 0);
  (*task)->Step();
  CHECK((*task)->epoch() == 1);
}

TEST_CASE("synthetic regression loss falls by a large factor", "[learn][task][train]") {
  auto r = MakeTask("synthetic", TaskOptions());
  REQUIRE(r.ok());
  Task& task = **r;
  const EvalResult before = task.Evaluate();
  for (int i = 0; i < 300; ++i) task.Step();
  const EvalResult after = task.Evaluate();
  std::printf("synthetic: test MSE %.4f -> %.5f, R^2 %.3f -> %.5f after 300 steps\n", before.loss,
              after.loss, before.accuracy, after.accuracy);
  CHECK(after.loss < before.loss / 100);
  CHECK(after.loss < 0.02);  // noise floor is 0.01
  CHECK(after.accuracy > 0.99);
}

TEST_CASE("fmnist-softmax reaches > 0.75 test accuracy quickly", "[learn][task][train]") {
  auto r = MakeTask("fmnist-softmax", FmnistOptions());
  REQUIRE(r.ok());
  Task& task = **r;
  const EvalResult before = task.Evaluate();
  const auto start = std::chrono::steady_clock::now();
  float last = 0;
  for (int i = 0; i < 400; ++i) last = task.Step();
  const double train_s = Seconds(start);
  const EvalResult after = task.Evaluate();
  std::printf(
      "fmnist-softmax: 400 steps (batch 64) in %.2f s, last batch loss %.3f, "
      "test acc %.3f -> %.4f, loss %.3f\n",
      train_s, last, before.accuracy, after.accuracy, after.loss);
  CHECK(before.accuracy < 0.3);
  CHECK(after.accuracy > 0.75);
}

TEST_CASE("fmnist-mlp reaches > 0.80 test accuracy within one epoch", "[learn][task][train]") {
  auto r = MakeTask("fmnist-mlp", FmnistOptions());
  REQUIRE(r.ok());
  Task& task = **r;
  const int steps = 400;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) task.Step();
  const double step_ms = Seconds(start) * 1000.0 / steps;
  start = std::chrono::steady_clock::now();
  const EvalResult after = task.Evaluate();
  const double eval_s = Seconds(start);
  std::printf(
      "fmnist-mlp: %d steps at %.2f ms/step (batch 64), eval of %zu images %.3f s, "
      "test acc %.4f, loss %.3f\n",
      steps, step_ms, after.samples, eval_s, after.accuracy, after.loss);
  CHECK(after.samples == 10000);
  CHECK(after.accuracy > 0.80);
}

// Not run by default: `test_learn "[.bench]" -s`. Measured (single node, 5 epochs, batch 64,
// momentum 0.9): lr 0.05 (the default --lr) plateaus at 0.871; lr 0.01 reaches 0.8875, so the
// bench uses lr 0.01. Environment overrides for exploring
// hyper-parameters: MESHTRAIN_BENCH_LR, _MOMENTUM, _BATCH, _EPOCHS, and _DROP_EPOCH=K (lr x0.1
// after epoch K).
double EnvOr(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

TEST_CASE("bench: fmnist-mlp accuracy after 5 epochs single-node", "[.bench]") {
  TaskOptions options = FmnistOptions();
  options.lr = static_cast<float>(EnvOr("MESHTRAIN_BENCH_LR", 0.01));
  options.momentum = static_cast<float>(EnvOr("MESHTRAIN_BENCH_MOMENTUM", options.momentum));
  options.batch_size = static_cast<int>(EnvOr("MESHTRAIN_BENCH_BATCH", options.batch_size));
  const int epochs = static_cast<int>(EnvOr("MESHTRAIN_BENCH_EPOCHS", 5));
  auto r = MakeTask("fmnist-mlp", options);
  REQUIRE(r.ok());
  Task& task = **r;
  std::printf("fmnist-mlp lr %g momentum %g batch %d\n", options.lr, options.momentum,
              options.batch_size);
  const auto start = std::chrono::steady_clock::now();
  const int64_t steps_per_epoch = (task.train_size() + task.batch_size() - 1) / task.batch_size();
  double best = 0;
  const int drop_epoch = static_cast<int>(EnvOr("MESHTRAIN_BENCH_DROP_EPOCH", 0));
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    if (drop_epoch > 0 && epoch == drop_epoch + 1) {
      task.optimizer().set_lr(task.optimizer().lr() * 0.1f);
    }
    for (int64_t i = 0; i < steps_per_epoch; ++i) task.Step();
    const EvalResult e = task.Evaluate();
    best = std::max(best, e.accuracy);
    std::printf("epoch %d: test acc %.4f loss %.4f (%.1f s)\n", epoch, e.accuracy, e.loss,
                Seconds(start));
  }
  CHECK(task.Evaluate().accuracy >= 0.88);
}

}  // namespace
}  // namespace meshtrain::learn
