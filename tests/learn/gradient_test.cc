// Analytic gradients against central finite differences: in double on small random models
// (MLP, softmax regression, linear regression), and in float through the Task API on the real
// tasks (checks the plumbing: shard indexing, batch gathering, parameter layout).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "learn/models.h"
#include "learn/rng.h"
#include "learn/task.h"
#include "tests/learn/test_util.h"

namespace meshtrain::learn {
namespace {

// Largest |analytic - numeric| / max(1e-3, |analytic| + |numeric|) over all coordinates.
template <typename LossFn>
double MaxRelativeError(Vec<double>* params, const Vec<double>& analytic, LossFn loss, double eps) {
  double worst = 0;
  for (Eigen::Index i = 0; i < params->size(); ++i) {
    const double saved = (*params)[i];
    (*params)[i] = saved + eps;
    const double up = loss();
    (*params)[i] = saved - eps;
    const double down = loss();
    (*params)[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    const double denom = std::max(1e-3, std::abs(analytic[i]) + std::abs(numeric));
    worst = std::max(worst, std::abs(analytic[i] - numeric) / denom);
  }
  return worst;
}

Mat<double> RandomMatrix(Rng* rng, int rows, int cols) {
  Mat<double> m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = rng->Normal();
  return m;
}

void CheckClassifierGradient(const MlpShape& shape) {
  Rng rng(42);
  std::vector<float> init(shape.NumParams());
  InitMlp(shape, 7, init.data());
  Vec<double> params(static_cast<Eigen::Index>(init.size()));
  for (size_t i = 0; i < init.size(); ++i) params[i] = init[i];
  // Non-zero biases so that the bias gradients are exercised away from the initial point.
  for (Eigen::Index i = 0; i < params.size(); ++i) params[i] += 0.05 * rng.Normal();
  const int batch = 5;
  const Mat<double> x = RandomMatrix(&rng, shape.sizes[0], batch);
  std::vector<uint8_t> labels(batch);
  for (auto& l : labels) l = static_cast<uint8_t>(rng.UniformInt(shape.sizes.back()));

  Vec<double> grad(params.size());
  const double loss = MlpLossAndGradient<double>(shape, params.data(), x, labels, grad.data());
  CHECK(std::isfinite(loss));
  CHECK(grad.norm() > 0);
  auto fn = [&] { return MlpLossAndGradient<double>(shape, params.data(), x, labels, nullptr); };
  const double err = MaxRelativeError(&params, grad, fn, 1e-6);
  INFO("max relative error " << err);
  CHECK(err < 1e-6);
}

TEST_CASE("MLP gradient matches finite differences (double)", "[learn][grad]") {
  CheckClassifierGradient(MlpShape{{12, 9, 7, 4}});
}

TEST_CASE("softmax regression gradient matches finite differences (double)", "[learn][grad]") {
  CheckClassifierGradient(MlpShape{{12, 5}});
}

TEST_CASE("linear regression gradient matches finite differences (double)", "[learn][grad]") {
  Rng rng(3);
  const int d = 6, batch = 9;
  const Mat<double> x = RandomMatrix(&rng, d, batch);
  const Vec<double> y = RandomMatrix(&rng, batch, 1);
  Vec<double> params = RandomMatrix(&rng, d + 1, 1);
  Vec<double> grad(d + 1);
  LinearMseAndGradient<double>(params.data(), x, y, grad.data());
  auto fn = [&] { return LinearMseAndGradient<double>(params.data(), x, y, nullptr); };
  const double err = MaxRelativeError(&params, grad, fn, 1e-6);
  INFO("max relative error " << err);
  CHECK(err < 1e-7);
}

// Float check through the Task API on the largest-gradient coordinates (where float round-off in
// the finite difference is relatively smallest) plus a few random ones.
void CheckTaskGradient(Task* task, double tolerance) {
  std::vector<uint32_t> batch;
  for (uint32_t i = 0; i < 16; ++i) batch.push_back(i * 37 % task->train_size());
  Eigen::VectorXf grad;
  task->LossAndGradient(batch, &grad);
  REQUIRE(static_cast<size_t>(grad.size()) == task->num_params());
  std::vector<Eigen::Index> coords(static_cast<size_t>(grad.size()));
  for (size_t i = 0; i < coords.size(); ++i) coords[i] = static_cast<Eigen::Index>(i);
  std::partial_sort(coords.begin(), coords.begin() + 10, coords.end(),
                    [&](auto a, auto b) { return std::abs(grad[a]) > std::abs(grad[b]); });
  coords.resize(10);
  Rng rng(5);
  for (int k = 0; k < 5; ++k) {
    coords.push_back(static_cast<Eigen::Index>(rng.UniformInt(task->num_params())));
  }
  Eigen::VectorXf scratch;
  for (Eigen::Index i : coords) {
    const float saved = task->params()[i];
    const float eps = 1e-2f;
    task->params()[i] = saved + eps;
    const double up = task->LossAndGradient(batch, &scratch);
    task->params()[i] = saved - eps;
    const double down = task->LossAndGradient(batch, &scratch);
    task->params()[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    INFO("coordinate " << i << " analytic " << grad[i] << " numeric " << numeric);
    CHECK(std::abs(grad[i] - numeric) <= tolerance * std::max(1e-2, std::abs(numeric)));
  }
}

TEST_CASE("task gradients match finite differences (float)", "[learn][grad]") {
  TaskOptions options;
  SECTION("synthetic") {
    auto task = MakeTask("synthetic", options);
    REQUIRE(task.ok());
    CheckTaskGradient(task->get(), 1e-2);
  }
  SECTION("fmnist-softmax on a shard") {
    options.fashion_mnist = testing::SharedFashionMnist();
    options.shard = Shard{2, 3};
    auto task = MakeTask("fmnist-softmax", options);
    REQUIRE(task.ok());
    CheckTaskGradient(task->get(), 5e-2);
  }
}

}  // namespace
}  // namespace meshtrain::learn
