// Model files (learn/model_file.h) and the network tasks behind --model / --threads.
#include "learn/model_file.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "learn/task.h"
#include "tests/learn/test_util.h"

namespace meshtrain::learn {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
void Spit(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

ModelFile SmallModel() {
  ModelFile m;
  m.spec = "conv(2,3),relu,flatten,dense(3)";
  m.input_shape = {1, 5, 5};
  m.step = 42;
  m.input_shift = 0.25f;
  m.input_scale = 2.0f;
  m.params.resize(2 * 9 + 2 + 3 * 18 + 3);
  for (size_t i = 0; i < m.params.size(); ++i) m.params[i] = 0.01f * static_cast<float>(i);
  return m;
}

TEST_CASE("model files round-trip and reject what does not fit", "[learn][model_file]") {
  testing::TempDir dir;
  const std::string path = dir.path() + "/m.npz";
  const ModelFile m = SmallModel();
  REQUIRE(WriteModelFile(path, m).ok());
  Result<ModelFile> back = ReadModelFile(path);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(back->spec == m.spec);
  CHECK(back->input_shape == m.input_shape);
  CHECK(back->step == 42);
  CHECK(back->input_shift == 0.25f);
  CHECK(back->input_scale == 2.0f);
  CHECK(back->params == m.params);

  const std::string good = Slurp(path);
  SECTION("a flipped byte fails the CRC") {
    std::string bad = good;
    bad[200] = static_cast<char>(bad[200] ^ 0x40);
    Spit(path, bad);
    Result<ModelFile> r = ReadModelFile(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().rfind(path, 0) == 0);
  }
  SECTION("truncated") {
    Spit(path, good.substr(0, good.size() / 2));
    CHECK_FALSE(ReadModelFile(path).ok());
  }
  SECTION("parameters that do not fit the spec") {
    ModelFile wrong = m;
    wrong.params.pop_back();
    REQUIRE(WriteModelFile(path, wrong).ok());
    Result<ModelFile> r = ReadModelFile(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("spec needs") != std::string::npos);
  }
  SECTION("a spec that does not parse") {
    ModelFile wrong = m;
    wrong.spec = "conv(2,3),relu,flatten,dens(3)";
    REQUIRE(WriteModelFile(path, wrong).ok());
    CHECK_FALSE(ReadModelFile(path).ok());
  }
  SECTION("a data .npz is not a model") {
    CHECK_FALSE(ReadModelFile(dir.path() + "/missing.npz").ok());
  }
}

TEST_CASE("threads (--threads) split a batch without changing its gradient", "[learn][network]") {
  TaskOptions options;
  options.fashion_mnist = testing::SharedFashionMnist();
  options.threads = 1;
  auto one = MakeTask("fmnist-cnn", options);
  REQUIRE(one.ok());
  options.threads = 2;
  auto two = MakeTask("fmnist-cnn", options);
  REQUIRE(two.ok());
  REQUIRE((*one)->params() == (*two)->params());
  std::vector<uint32_t> batch;
  for (uint32_t i = 0; i < 37; ++i) batch.push_back(i * 101);
  Eigen::VectorXf g1, g2;
  const float l1 = (*one)->LossAndGradient(batch, &g1);
  const float l2 = (*two)->LossAndGradient(batch, &g2);
  CHECK(std::abs(l1 - l2) < 1e-5f * std::max(1.0f, std::abs(l1)));
  CHECK((g1 - g2).norm() < 1e-4f * g1.norm());
  CHECK(g1.norm() > 0);
}

TEST_CASE("model names: presets, specs and clear errors", "[learn][task]") {
  TaskOptions options;
  options.fashion_mnist = testing::SharedFashionMnist();
  auto cnn = MakeTask("fmnist-cnn", options);
  REQUIRE(cnn.ok());
  CHECK((*cnn)->num_params() == 80202);
  CHECK((*cnn)->model_spec().find("conv(16,5)") == 0);
  auto spec = MakeTask("conv(4,3,stride=2),relu,flatten,dense(10)", options);
  REQUIRE(spec.ok());
  CHECK((*spec)->name() == "conv(4,3,stride=2),relu,flatten,dense(10)");
  auto few = MakeTask("dense(5)", options);
  REQUIRE_FALSE(few.ok());
  CHECK(few.status().message().find("10 classes") != std::string::npos);
  auto typo = MakeTask("fmnist-cnm", options);
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.status().message().find("not a preset") != std::string::npos);
}

}  // namespace
}  // namespace meshtrain::learn
