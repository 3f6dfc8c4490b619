#include "learn/dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <tuple>

namespace meshtrain::learn {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: unsigned byte, 1 dimension
constexpr char kInstallHint[] =
    "install the Debian package dataset-fashion-mnist or pass --dataset-dir";

std::string Prefix(const std::string& path) { return "fashion-mnist: " + path + ": "; }

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool DirExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// RAII for gzFile.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (file_ != nullptr) gzbuffer(file_, 1 << 18);
  }
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  Status OpenStatus() const {
    if (file_ != nullptr) return Status::OK();
    if (!FileExists(path_)) {
      return Status::NotFound(Prefix(path_) + "not found — " + kInstallHint);
    }
    return Status::IOError(Prefix(path_) + "cannot open: " + std::strerror(errno));
  }

  // Reads up to n bytes; returns how many were read, or a status on a zlib/IO error. Short counts
  // mean end of data (a truncated file).
  Status Read(uint8_t* dst, size_t n, size_t* got) {
    *got = 0;
    while (*got < n) {
      const size_t chunk = std::min<size_t>(n - *got, 1u << 30);
      const int r = gzread(file_, dst + *got, static_cast<unsigned>(chunk));
      if (r < 0) return ZlibError();
      if (r == 0) break;
      *got += static_cast<size_t>(r);
    }
    // A truncated gzip stream makes gzread return the data it had, then report
    // Z_BUF_ERROR; a short count is reported as truncation by the caller either way.
    int errnum = Z_OK;
    gzerror(file_, &errnum);
    if (errnum != Z_OK && errnum != Z_BUF_ERROR) return ZlibError();
    return Status::OK();
  }

  // True when no byte follows the current position.
  bool AtEnd() {
    uint8_t extra;
    return gzread(file_, &extra, 1) <= 0;
  }

 private:
  Status ZlibError() {
    int errnum = Z_OK;
    const char* msg = gzerror(file_, &errnum);
    if (errnum == Z_ERRNO) {
      return Status::IOError(Prefix(path_) + "read error: " + std::strerror(errno));
    }
    return Status::Corruption(Prefix(path_) + "corrupt gzip data (" + (msg ? msg : "?") + ")");
  }

  std::string path_;
  gzFile file_ = nullptr;
};

// Reads the header words of an IDX file and the payload into *out.
Status ReadIdx(const std::string& path, uint32_t magic, int ndims, std::vector<uint32_t>* dims,
               std::vector<uint8_t>* out) {
  GzReader reader(path);
  if (Status s = reader.OpenStatus(); !s.ok()) return s;
  const size_t header_bytes = 4 * (1 + static_cast<size_t>(ndims));
  uint8_t header[16];
  size_t got = 0;
  if (Status s = reader.Read(header, header_bytes, &got); !s.ok()) return s;
  if (got < 4) {
    return Status::Corruption(Prefix(path) + "truncated (header needs " +
                              std::to_string(header_bytes) + " bytes, got " + std::to_string(got) +
                              ")");
  }
  const uint32_t found_magic = BigEndian32(header);
  if (found_magic != magic) {
    return Status::Corruption(Prefix(path) + "bad magic number " + std::to_string(found_magic) +
                              " (expected " + std::to_string(magic) + ")");
  }
  if (got < header_bytes) {
    return Status::Corruption(Prefix(path) + "truncated (header needs " +
                              std::to_string(header_bytes) + " bytes, got " + std::to_string(got) +
                              ")");
  }
  dims->clear();
  size_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    dims->push_back(BigEndian32(header + 4 + 4 * d));
    total *= (*dims)[d];
  }
  // Fashion-MNIST has 60 000 images; refuse absurd counts before allocating.
  constexpr size_t kMaxBytes = size_t{1} << 31;
  if (total > kMaxBytes) {
    return Status::Corruption(Prefix(path) + "implausible size " + std::to_string(total) +
                              " bytes in header");
  }
  out->resize(total);
  if (Status s = reader.Read(out->data(), total, &got); !s.ok()) return s;
  if (got < total) {
    return Status::Corruption(Prefix(path) + "truncated (expected " + std::to_string(total) +
                              " bytes, got " + std::to_string(got) + ")");
  }
  if (!reader.AtEnd()) {
    return Status::Corruption(Prefix(path) + "trailing data after " + std::to_string(total) +
                              " bytes");
  }
  return Status::OK();
}

// The .gz name if it exists, else the uncompressed name if that exists, else the .gz name (so
// the error names the file the Debian package installs).
std::string PickFile(const std::string& dir, const std::string& base) {
  const std::string gz = dir + "/" + base + ".gz";
  if (FileExists(gz)) return gz;
  const std::string plain = dir + "/" + base;
  if (FileExists(plain)) return plain;
  return gz;
}

}  // namespace

Result<ImageSet> LoadIdxPair(const std::string& images_path, const std::string& labels_path) {
  ImageSet set;
  std::vector<uint32_t> dims;
  if (Status s = ReadIdx(images_path, kImagesMagic, 3, &dims, &set.pixels); !s.ok()) return s;
  if (dims[1] != kFashionMnistSide || dims[2] != kFashionMnistSide) {
    return Status::Corruption(Prefix(images_path) + "images are " + std::to_string(dims[1]) + "x" +
                              std::to_string(dims[2]) + ", expected 28x28");
  }
  const uint32_t image_count = dims[0];
  set.rows = static_cast<int>(dims[1]);
  set.cols = static_cast<int>(dims[2]);
  if (Status s = ReadIdx(labels_path, kLabelsMagic, 1, &dims, &set.labels); !s.ok()) return s;
  if (dims[0] != image_count) {
    return Status::Corruption(Prefix(labels_path) + std::to_string(dims[0]) + " labels for " +
                              std::to_string(image_count) + " images in " + images_path);
  }
  for (size_t i = 0; i < set.labels.size(); ++i) {
    if (set.labels[i] >= kFashionMnistClasses) {
      return Status::Corruption(Prefix(labels_path) + "label " + std::to_string(set.labels[i]) +
                                " at index " + std::to_string(i) + " is not < 10");
    }
  }
  return set;
}

Result<std::shared_ptr<const FashionMnist>> LoadFashionMnist(const std::string& dir) {
  if (!DirExists(dir)) {
    return Status::NotFound("fashion-mnist: " + dir + ": not found — " + kInstallHint);
  }
  auto data = std::make_shared<FashionMnist>();
  Result<ImageSet> train = LoadIdxPair(PickFile(dir, "train-images-idx3-ubyte"),
                                       PickFile(dir, "train-labels-idx1-ubyte"));
  if (!train.ok()) return train.status();
  Result<ImageSet> test =
      LoadIdxPair(PickFile(dir, "t10k-images-idx3-ubyte"), PickFile(dir, "t10k-labels-idx1-ubyte"));
  if (!test.ok()) return test.status();
  data->train = std::move(train).value();
  data->test = std::move(test).value();
  std::tie(data->pixel_mean, data->pixel_stddev) = PixelMoments(data->train);
  return std::shared_ptr<const FashionMnist>(std::move(data));
}

void FillBatch(const ImageSet& set, const uint32_t* indices, size_t n, Eigen::MatrixXf* x,
               std::vector<uint8_t>* labels) {
  const size_t dim = set.dim();
  x->resize(static_cast<Eigen::Index>(dim), static_cast<Eigen::Index>(n));
  labels->resize(n);
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t k = 0; k < n; ++k) {
    const uint8_t* src = set.image(indices[k]);
    float* dst = x->data() + k * dim;
    for (size_t j = 0; j < dim; ++j) dst[j] = static_cast<float>(src[j]) * kScale;
    (*labels)[k] = set.labels[indices[k]];
  }
}

std::pair<float, float> PixelMoments(const ImageSet& set) {
  // Integer histogram: exact and fast (one pass over bytes, no float accumulation error).
  uint64_t hist[256] = {};
  for (uint8_t p : set.pixels) ++hist[p];
  double n = 0, sum = 0, sq = 0;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    n += static_cast<double>(hist[v]);
    sum += static_cast<double>(hist[v]) * x;
    sq += static_cast<double>(hist[v]) * x * x;
  }
  if (n == 0) return {0.0f, 1.0f};
  const double mean = sum / n;
  const double var = std::max(0.0, sq / n - mean * mean);
  return {static_cast<float>(mean), var > 0 ? static_cast<float>(std::sqrt(var)) : 1.0f};
}

std::string Shard::ToString() const { return std::to_string(index) + "/" + std::to_string(count); }

Result<Shard> ParseShard(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--shard \"" + text + "\": " + why +
                                   " (expected I/N with 0 <= I < N, e.g. 0/4)");
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return bad("missing '/'");
  auto parse = [](const std::string& s, uint32_t* out) {
    if (s.empty() || s.size() > 9) return false;
    uint32_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<uint32_t>(c - '0');
    }
    *out = v;
    return true;
  };
  Shard shard;
  if (!parse(text.substr(0, slash), &shard.index)) return bad("I is not a non-negative integer");
  if (!parse(text.substr(slash + 1), &shard.count)) return bad("N is not a non-negative integer");
  if (shard.count == 0) return bad("N must be at least 1");
  if (shard.index >= shard.count) return bad("I must be less than N");
  return shard;
}

std::pair<size_t, size_t> ShardRange(size_t n, const Shard& s) {
  // No overflow: n < 2^32 samples and count < 10^9 keep n * (index + 1) below 2^64.
  const uint64_t begin = static_cast<uint64_t>(n) * s.index / s.count;
  const uint64_t end = static_cast<uint64_t>(n) * (s.index + 1) / s.count;
  return {static_cast<size_t>(begin), static_cast<size_t>(end)};
}

}  // namespace meshtrain::learn
