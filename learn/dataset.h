// Fashion-MNIST in memory, read from the gzip IDX files of Debian's dataset-fashion-mnist
// (http://yann.lecun.com/exdb/mnist/ format: big-endian header, then raw bytes), and shard
// arithmetic for `--shard I/N`.
//
// Pixels are kept as the original bytes (55 MB for all 70 000 images instead of 220 MB as
// floats) and scaled to [0,1] floats when a batch is gathered (FillBatch); an agent loads the set
// once and tasks share it read-only through std::shared_ptr<const FashionMnist>.
//
// Thread-safety: loading functions are reentrant; a loaded ImageSet/FashionMnist is immutable and
// may be read from any number of threads.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "learn/status.h"

namespace meshtrain::learn {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;
inline constexpr int kFashionMnistSide = 28;
inline constexpr int kFashionMnistPixels = kFashionMnistSide * kFashionMnistSide;  // 784

// Images with their labels, as in one pair of IDX files.
struct ImageSet {
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // size() * rows * cols bytes, image-major, row-major inside
  std::vector<uint8_t> labels;  // size() labels, each < kFashionMnistClasses

  size_t size() const { return labels.size(); }
  size_t dim() const { return static_cast<size_t>(rows) * static_cast<size_t>(cols); }
  const uint8_t* image(size_t i) const { return pixels.data() + i * dim(); }
  float pixel(size_t i, size_t j) const { return image(i)[j] * (1.0f / 255.0f); }
};

struct FashionMnist {
  ImageSet train;  // 60 000 images
  ImageSet test;   // 10 000 images
  // Mean and standard deviation of all training pixels on the [0,1] scale (about 0.286 and
  // 0.353), computed at load time from the whole training file, so every node standardizes its
  // inputs identically whatever its shard.
  float pixel_mean = 0.0f;
  float pixel_stddev = 1.0f;
};

// Mean and standard deviation of the pixels of `set`, scaled to [0,1].
std::pair<float, float> PixelMoments(const ImageSet& set);

// Reads one IDX image file and its label file (gzip-compressed or plain; zlib reads both) and
// checks magic numbers (2051 images, 2049 labels), 28x28 dimensions, matching counts, labels < 10
// and that the files hold exactly the announced bytes. Errors name the file and the problem.
Result<ImageSet> LoadIdxPair(const std::string& images_path, const std::string& labels_path);

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir` (the .gz name is tried
// first). A missing directory or file yields NotFound with a hint to install the Debian package
// dataset-fashion-mnist or pass --dataset-dir.
Result<std::shared_ptr<const FashionMnist>> LoadFashionMnist(
    const std::string& dir = kDefaultFashionMnistDir);

// Writes the images `indices[k]` of `set` as the columns of `x` (dim x indices.size(), resized),
// scaled to [0,1], and their labels to `labels` (resized). Columns are samples so that one sample
// is contiguous in Eigen's column-major storage. Precondition: every index < set.size().
void FillBatch(const ImageSet& set, const uint32_t* indices, size_t n, Eigen::MatrixXf* x,
               std::vector<uint8_t>* labels);

// `--shard I/N`: the I-th (0-based) of N disjoint, near-equal parts of a training set.
struct Shard {
  uint32_t index = 0;
  uint32_t count = 1;  // 1 = the whole set

  bool whole() const { return count == 1; }
  std::string ToString() const;  // "I/N"
};

// Parses "I/N" with 0 <= I < N, N >= 1, both decimal without sign or spaces.
Result<Shard> ParseShard(const std::string& text);

// The contiguous range [begin, end) of shard `s` in a set of n samples: begin = floor(n*I/N),
// end = floor(n*(I+1)/N). Shards of one N are disjoint, cover [0, n) and differ in size by at most
// one. (Fashion-MNIST's training file is in random class order, so contiguous parts are mixed.)
std::pair<size_t, size_t> ShardRange(size_t n, const Shard& s);

}  // namespace meshtrain::learn
