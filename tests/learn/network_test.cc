// Layer-spec models (learn/network.h): parsing and its errors, shapes, and every layer's gradient
// against central finite differences in double (max relative error < 1e-5).
#include "learn/network.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "learn/models.h"
#include "learn/rng.h"

namespace meshtrain::learn {
namespace {

Network<double> BuildD(const std::string& spec, TensorShape in) {
  Result<ModelSpec> parsed = ParseModelSpec(spec);
  INFO(spec << ": " << parsed.status().ToString());
  REQUIRE(parsed.ok());
  Result<Network<double>> net = Network<double>::Build(parsed.value(), in);
  INFO(net.status().ToString());
  REQUIRE(net.ok());
  return std::move(net).value();
}

// Largest |analytic - numeric| / max(1e-3, |analytic| + |numeric|) over every parameter.
double GradientError(const std::string& spec, TensorShape in, int outputs, uint64_t seed) {
  Network<double> net = BuildD(spec, in);
  REQUIRE(net.num_outputs() == outputs);
  Rng rng(seed);
  std::vector<double> params(net.NumParams());
  net.Init(seed, params.data());
  // Perturb every parameter so that gains, biases and zero-initialised values are exercised.
  for (double& p : params) p += 0.1 * rng.Normal();
  const int batch = 3;
  Mat<double> x(in.size(), batch);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = rng.Normal();
  std::vector<int32_t> labels(batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.UniformInt(outputs));
  Workspace<double> ws;
  RunMode mode{true, 99};  // dropout masks fixed by the seed
  std::vector<double> grad(params.size());
  const double loss = net.LossAndGradient(params.data(), x, labels.data(), grad.data(), &ws, mode);
  REQUIRE(std::isfinite(loss));
  double worst = 0;
  const double eps = 1e-6;
  for (size_t i = 0; i < params.size(); ++i) {
    const double saved = params[i];
    params[i] = saved + eps;
    const double up = net.LossAndGradient(params.data(), x, labels.data(), nullptr, &ws, mode);
    params[i] = saved - eps;
    const double down = net.LossAndGradient(params.data(), x, labels.data(), nullptr, &ws, mode);
    params[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    const double denom = std::max(1e-3, std::abs(grad[i]) + std::abs(numeric));
    worst = std::max(worst, std::abs(grad[i] - numeric) / denom);
  }
  return worst;
}

TEST_CASE("every layer's gradient matches finite differences (double)", "[learn][grad][network]") {
  struct Case {
    const char* spec;
    TensorShape in;
    int outputs;
  };
  const std::vector<Case> cases = {
      {"dense(5),relu,dense(4)", {1, 1, 7}, 4},
      {"dense(5),tanh,dense(3)", {1, 1, 6}, 3},
      {"dense(5),sigmoid,dense(3)", {1, 1, 6}, 3},
      {"dense(6),dropout(0.3),dense(3)", {1, 1, 5}, 3},
      {"dense(6),layernorm,dense(3)", {1, 1, 5}, 3},
      {"conv(3,3),flatten,dense(4)", {2, 6, 5}, 4},
      {"conv(2,3,stride=2,pad=1),relu,dense(3)", {2, 7, 6}, 3},
      {"conv(2,2),maxpool(2),flatten,dense(3)", {1, 7, 7}, 3},
      {"conv(2,3),maxpool(3,stride=2),dense(3)", {1, 9, 8}, 3},
      {"conv(2,3),avgpool(2),dense(3)", {3, 7, 7}, 3},
      {"conv(2,3,pad=1),avgpool(3,stride=1),tanh,dense(3)", {1, 6, 6}, 3},
      {"dense(4),relu,dense(3),mse", {1, 1, 5}, 3},
      {"conv(3,3),relu,maxpool(2),conv(4,2),relu,flatten,dense(5),relu,dense(3)", {1, 10, 10}, 3},
  };
  for (const Case& c : cases) {
    const double err = GradientError(c.spec, c.in, c.outputs, 17);
    INFO(c.spec << " max relative error " << err);
    CHECK(err < 1e-5);
  }
}

TEST_CASE("the MLP presets' network draws the same parameters as InitMlp", "[learn][network]") {
  const MlpShape shape{{784, 256, 128, 10}};
  std::vector<float> old(shape.NumParams());
  InitMlp(shape, 5, old.data());
  Result<ModelSpec> spec = ParseModelSpec("dense(256),relu,dense(128),relu,dense(10)");
  REQUIRE(spec.ok());
  Result<Network<float>> net = Network<float>::Build(spec.value(), TensorShape{1, 28, 28});
  REQUIRE(net.ok());
  REQUIRE(net->NumParams() == old.size());
  std::vector<float> fresh(old.size());
  net->Init(5, fresh.data());
  CHECK(fresh == old);
}

TEST_CASE("shapes and parameter counts", "[learn][network]") {
  Result<ModelSpec> spec = ParseModelSpec(
      "conv(16,5), relu, maxpool(2), conv(32,5), relu, maxpool(2), flatten, dense(128), relu, "
      "dense(10)");
  REQUIRE(spec.ok());
  CHECK(spec->text ==
        "conv(16,5),relu,maxpool(2),conv(32,5),relu,maxpool(2),flatten,dense(128),relu,dense(10)");
  Result<Network<float>> net = Network<float>::Build(spec.value(), TensorShape{1, 28, 28});
  REQUIRE(net.ok());
  // 16*25+16 + 32*16*25+32 + 128*512+128 + 10*128+10
  CHECK(net->NumParams() == 416 + 12832 + 65664 + 1290);
  CHECK(net->output_shape() == TensorShape{10, 1, 1});
  Result<Network<float>> padded =
      Network<float>::Build(ParseModelSpec("conv(4,3,stride=2,pad=1)").value(), {3, 9, 8});
  REQUIRE(padded.ok());
  CHECK(padded->output_shape() == TensorShape{4, 5, 4});
}

TEST_CASE("bad specs give one clear error", "[learn][network]") {
  auto err = [](const std::string& spec, TensorShape in = {1, 28, 28}) -> std::string {
    Result<ModelSpec> parsed = ParseModelSpec(spec);
    if (!parsed.ok()) return parsed.status().message();
    Result<Network<float>> net = Network<float>::Build(parsed.value(), in);
    return net.ok() ? std::string() : net.status().message();
  };
  CHECK(err("cnov(16,5),relu,dense(10)").find("did you mean conv?") != std::string::npos);
  CHECK(err("cnov(16,5),relu,dense(10)").find("layer 1") != std::string::npos);
  CHECK(err("dense(10").find("unbalanced") != std::string::npos);
  CHECK(err("dense(x)").find("not a number") != std::string::npos);
  CHECK(err("dense(10),,relu").find("empty layer") != std::string::npos);
  CHECK(err("dense(1.5)").find("integer") != std::string::npos);
  CHECK(err("dense()").find("wrong number of arguments") != std::string::npos);
  CHECK(err("conv(4,3,strid=2)").find("unknown argument \"strid\"") != std::string::npos);
  CHECK(err("conv(4,40)").find("larger than") != std::string::npos);
  CHECK(err("maxpool(30)").find("larger than") != std::string::npos);
  CHECK(err("dropout(1.5),dense(3)").find("p must be") != std::string::npos);
  CHECK(err("relu,flatten").find("no trainable layer") != std::string::npos);
  CHECK(err("").find("layer 1") != std::string::npos);
  CHECK(err("dense(3),mse").empty());
  CHECK(err("mse,dense(3)").find("unknown layer \"mse\"") != std::string::npos);
}

TEST_CASE("dropout is active only in training and reproducible per seed", "[learn][network]") {
  Network<double> net = BuildD("dropout(0.5),dense(3)", {1, 1, 50});
  std::vector<double> params(net.NumParams());
  net.Init(1, params.data());
  Mat<double> x = Mat<double>::Ones(50, 4);
  std::vector<int32_t> labels = {0, 1, 2, 0};
  Workspace<double> ws;
  const double a = net.LossAndGradient(params.data(), x, labels.data(), nullptr, &ws, {true, 7});
  const double b = net.LossAndGradient(params.data(), x, labels.data(), nullptr, &ws, {true, 7});
  const double c = net.LossAndGradient(params.data(), x, labels.data(), nullptr, &ws, {true, 8});
  const double e1 = net.LossAndGradient(params.data(), x, labels.data(), nullptr, &ws, {false, 7});
  const double e2 = net.LossAndGradient(params.data(), x, labels.data(), nullptr, &ws, {false, 8});
  CHECK(a == b);
  CHECK(a != c);
  CHECK(e1 == e2);
}

}  // namespace
}  // namespace meshtrain::learn
