// Fashion-MNIST loader on the real Debian files and on corrupt files written to a temp dir;
// shard parsing and splitting.
#include "learn/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "tests/learn/test_util.h"

namespace meshtrain::learn {
namespace {

using testing::Contains;
using testing::PutBe32;
using testing::SharedFashionMnist;
using testing::TempDir;
using testing::WriteGz;
using testing::WriteRaw;

std::vector<uint8_t> ImagesIdx(uint32_t count, uint32_t rows = 28, uint32_t cols = 28,
                               uint32_t magic = 2051) {
  std::vector<uint8_t> b;
  PutBe32(&b, magic);
  PutBe32(&b, count);
  PutBe32(&b, rows);
  PutBe32(&b, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) b.push_back(static_cast<uint8_t>(i * 7));
  return b;
}

std::vector<uint8_t> LabelsIdx(uint32_t count, uint32_t magic = 2049) {
  std::vector<uint8_t> b;
  PutBe32(&b, magic);
  PutBe32(&b, count);
  for (uint32_t i = 0; i < count; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

std::vector<uint8_t> ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("fashion-mnist loads the real Debian files", "[learn][dataset]") {
  const auto start = std::chrono::steady_clock::now();
  auto data = SharedFashionMnist();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fashion-mnist load (first use in this binary): %.3f s\n", seconds);

  REQUIRE(data->train.size() == 60000);
  REQUIRE(data->test.size() == 10000);
  for (const ImageSet* set : {&data->train, &data->test}) {
    CHECK(set->rows == 28);
    CHECK(set->cols == 28);
    CHECK(set->pixels.size() == set->size() * 784);
    const auto [lo, hi] = std::minmax_element(set->labels.begin(), set->labels.end());
    CHECK(*lo == 0);
    CHECK(*hi == 9);
    // Every class is present in roughly equal numbers (6000 / 1000 each).
    std::vector<size_t> per_class(10, 0);
    for (uint8_t l : set->labels) ++per_class[l];
    for (size_t c : per_class) CHECK(c == set->size() / 10);
    const auto [plo, phi] = std::minmax_element(set->pixels.begin(), set->pixels.end());
    CHECK(*plo == 0);
    CHECK(*phi == 255);
  }
  // Known first labels of the training file: ankle boot (9), T-shirt (0), T-shirt (0).
  CHECK(data->train.labels[0] == 9);
  CHECK(data->train.labels[1] == 0);
  CHECK(data->train.labels[2] == 0);

  // Training-set pixel statistics used to standardize inputs (known Fashion-MNIST values).
  CHECK(data->pixel_mean == Approx(0.2860).margin(5e-4));
  CHECK(data->pixel_stddev == Approx(0.3530).margin(5e-4));
  const auto [test_mean, test_std] = PixelMoments(data->test);
  CHECK(test_mean == Approx(0.2868).margin(2e-3));
  CHECK(test_std > 0.3);

  // FillBatch scales to [0,1] floats, one sample per column.
  const std::vector<uint32_t> idx = {0, 59999, 123};
  Eigen::MatrixXf x;
  std::vector<uint8_t> labels;
  FillBatch(data->train, idx.data(), idx.size(), &x, &labels);
  REQUIRE(x.rows() == 784);
  REQUIRE(x.cols() == 3);
  CHECK(x.minCoeff() >= 0.0f);
  CHECK(x.maxCoeff() <= 1.0f);
  CHECK(x.maxCoeff() > 0.9f);
  CHECK(labels[1] == data->train.labels[59999]);
  CHECK(x(300, 2) == Approx(data->train.image(123)[300] / 255.0f));
}

TEST_CASE("fashion-mnist missing files give NotFound with the install hint", "[learn][dataset]") {
  auto r = LoadFashionMnist("/nonexistent/fashion-mnist-dir");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsNotFound());
  CHECK(Contains(r.status().message(), "/nonexistent/fashion-mnist-dir"));
  CHECK(Contains(r.status().message(), "dataset-fashion-mnist"));
  CHECK(Contains(r.status().message(), "--dataset-dir"));

  TempDir dir;  // exists but empty
  r = LoadFashionMnist(dir.path());
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsNotFound());
  CHECK(Contains(r.status().message(), "train-images-idx3-ubyte.gz"));
}

TEST_CASE("small valid IDX pairs load, gzip or plain", "[learn][dataset]") {
  TempDir dir;
  WriteGz(dir.File("img.gz"), ImagesIdx(5));
  WriteRaw(dir.File("lab"), LabelsIdx(5));
  auto r = LoadIdxPair(dir.File("img.gz"), dir.File("lab"));
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->size() == 5);
  CHECK(r->labels[3] == 3);
  CHECK(r->image(1)[0] == static_cast<uint8_t>(784 * 7));
}

TEST_CASE("corrupt IDX files give clear errors", "[learn][dataset]") {
  TempDir dir;
  const std::string img = dir.File("img.gz");
  const std::string lab = dir.File("lab.gz");
  WriteGz(lab, LabelsIdx(5));

  SECTION("bad image magic") {
    WriteGz(img, ImagesIdx(5, 28, 28, 2049));
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsCorruption());
    CHECK(Contains(r.status().message(), img));
    CHECK(Contains(r.status().message(), "bad magic number 2049 (expected 2051)"));
  }
  SECTION("bad label magic") {
    WriteGz(img, ImagesIdx(5));
    WriteGz(lab, LabelsIdx(5, 2051));
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status().message(), "bad magic number 2051 (expected 2049)"));
  }
  SECTION("wrong dimensions") {
    WriteGz(img, ImagesIdx(5, 32, 32));
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status().message(), "32x32, expected 28x28"));
  }
  SECTION("count mismatch") {
    WriteGz(img, ImagesIdx(6));
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status().message(), "5 labels for 6 images"));
  }
  SECTION("label out of range") {
    WriteGz(img, ImagesIdx(5));
    std::vector<uint8_t> labels = LabelsIdx(5);
    labels.back() = 10;
    WriteGz(lab, labels);
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status().message(), "label 10 at index 4 is not < 10"));
  }
  SECTION("payload shorter than the header says") {
    std::vector<uint8_t> bytes = ImagesIdx(5);
    bytes.resize(16 + 123);
    WriteGz(img, bytes);
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsCorruption());
    CHECK(Contains(r.status().message(),
                   "fashion-mnist: " + img + ": truncated (expected 3920 bytes, got 123)"));
  }
  SECTION("header cut short") {
    WriteGz(img, {0, 0, 8, 3, 0, 0});
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status().message(), "truncated (header needs 16 bytes, got 6)"));
  }
  SECTION("empty file") {
    WriteRaw(img, {});
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status().message(), "truncated"));
  }
  SECTION("gzip stream cut in the middle") {
    WriteGz(img, ImagesIdx(50));
    std::vector<uint8_t> gz = ReadRaw(img);
    REQUIRE(gz.size() > 100);
    gz.resize(gz.size() / 2);
    WriteRaw(img, gz);
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsCorruption());
    CHECK(Contains(r.status().message(), img));
    CHECK((Contains(r.status().message(), "truncated") ||
           Contains(r.status().message(), "corrupt gzip")));
  }
  SECTION("gzip payload bytes flipped") {
    WriteGz(img, ImagesIdx(50));
    std::vector<uint8_t> gz = ReadRaw(img);
    for (size_t i = 20; i < gz.size() - 8; i += 7) gz[i] ^= 0x5a;
    WriteRaw(img, gz);
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsCorruption());
  }
  SECTION("trailing bytes") {
    std::vector<uint8_t> bytes = ImagesIdx(5);
    bytes.push_back(1);
    WriteGz(img, bytes);
    auto r = LoadIdxPair(img, lab);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status().message(), "trailing data"));
  }
  SECTION("missing label file") {
    WriteGz(img, ImagesIdx(5));
    auto r = LoadIdxPair(img, dir.File("nope.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsNotFound());
    CHECK(Contains(r.status().message(), "nope.gz: not found"));
  }
}

TEST_CASE("ParseShard accepts I/N and rejects bad input", "[learn][dataset]") {
  auto ok = ParseShard("2/5");
  REQUIRE(ok.ok());
  CHECK(ok->index == 2);
  CHECK(ok->count == 5);
  CHECK(ok->ToString() == "2/5");
  CHECK(ParseShard("0/1").ok());
  for (const char* bad : {"", "3", "5/5", "6/5", "0/0", "-1/4", "1/-4", "a/4", "1/b", " 1/4",
                          "1/4 ", "1//4", "/4", "1/", "1/4/2", "99999999999/100000000000"}) {
    INFO(bad);
    auto r = ParseShard(bad);
    CHECK_FALSE(r.ok());
    CHECK(r.status().IsInvalidArgument());
    CHECK(Contains(r.status().message(), "--shard"));
  }
}

TEST_CASE("ShardRange splits into disjoint near-equal parts covering the set", "[learn][dataset]") {
  for (size_t n : {0u, 1u, 7u, 100u, 60000u, 60001u}) {
    for (uint32_t count : {1u, 2u, 3u, 7u, 10u, 64u}) {
      size_t expect_begin = 0;
      size_t lo = n, hi = 0;
      for (uint32_t i = 0; i < count; ++i) {
        const auto [b, e] = ShardRange(n, Shard{i, count});
        CHECK(b == expect_begin);  // contiguous: disjoint and no gap
        CHECK(e >= b);
        expect_begin = e;
        lo = std::min(lo, e - b);
        hi = std::max(hi, e - b);
      }
      CHECK(expect_begin == n);  // covers everything
      CHECK(hi - lo <= 1);       // near-equal
    }
  }
  CHECK(ShardRange(60000, Shard{3, 4}) == std::pair<size_t, size_t>(45000, 60000));
}

}  // namespace
}  // namespace meshtrain::learn
