// LoadDataFile: file reading, format dispatch, shape override and label checks. The format
// parsers live in data_file_csv.cc, data_file_numpy.cc and data_file_idx.cc.
#include "learn/data_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "learn/data_file_internal.h"

namespace meshtrain::learn {
namespace data_file_internal {
namespace {

// gzread takes an unsigned count; read in slices that keep memory growth smooth.
constexpr size_t kReadChunk = size_t{1} << 20;

class GzFile {
 public:
  explicit GzFile(const std::string& path) : file_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return file_; }

 private:
  gzFile file_;
};

}  // namespace

Result<std::vector<uint8_t>> ReadDataBytes(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError(path + ": cannot open: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  GzFile file(path);
  if (file.get() == nullptr) {
    return Status::IOError(path + ": cannot open: " + std::strerror(errno));
  }
  gzbuffer(file.get(), 1 << 18);
  std::vector<uint8_t> out;
  out.reserve(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), kMaxDataFileBytes));
  for (;;) {
    if (out.size() > kMaxDataFileBytes) {
      return Status::Corruption(path + ": larger than " + std::to_string(kMaxDataFileBytes) +
                                " bytes (after gzip inflation)");
    }
    const size_t old = out.size();
    out.resize(old + kReadChunk);
    const int got = gzread(file.get(), out.data() + old, static_cast<unsigned>(kReadChunk));
    if (got < 0) {
      int errnum = Z_OK;
      const char* msg = gzerror(file.get(), &errnum);
      if (errnum == Z_ERRNO) return Status::IOError(path + ": read error: " + std::strerror(errno));
      return Status::Corruption(path + ": corrupt gzip data (" + (msg ? msg : "?") + ")");
    }
    out.resize(old + static_cast<size_t>(got));
    if (got == 0) break;
  }
  // zlib returns the data it could inflate from a truncated gzip stream and flags it here.
  int errnum = Z_OK;
  const char* msg = gzerror(file.get(), &errnum);
  if (errnum != Z_OK) {
    return Status::Corruption(path + ": truncated or corrupt gzip data after " +
                              std::to_string(out.size()) + " inflated bytes (" + (msg ? msg : "?") +
                              ")");
  }
  return out;
}

std::string Quote(std::string_view text) {
  constexpr size_t kMaxShown = 40;
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > kMaxShown) out += "...";
  out += "\"";
  return out;
}

}  // namespace data_file_internal

namespace {

namespace dfi = data_file_internal;

enum class Format { kUnknown, kCsv, kNpy, kNpz, kIdx };

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The format named by the file name: extension after stripping ".gz", case-insensitive.
Format FormatFromName(const std::string& path) {
  std::string name =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (EndsWith(name, ".gz")) name.resize(name.size() - 3);
  if (EndsWith(name, ".csv")) return Format::kCsv;
  if (EndsWith(name, ".npy")) return Format::kNpy;
  if (EndsWith(name, ".npz")) return Format::kNpz;
  if (EndsWith(name, "-ubyte") || EndsWith(name, ".idx") || EndsWith(name, ".idx1") ||
      EndsWith(name, ".idx2") || EndsWith(name, ".idx3") || EndsWith(name, ".idx4")) {
    return Format::kIdx;
  }
  return Format::kUnknown;
}

// The format announced by the first bytes (after gzip inflation).
Format FormatFromMagic(const std::vector<uint8_t>& b) {
  if (b.size() >= 6 && std::memcmp(b.data(), "\x93NUMPY", 6) == 0) return Format::kNpy;
  if (b.size() >= 4 && std::memcmp(b.data(), "PK\x03\x04", 4) == 0) return Format::kNpz;
  if (b.size() >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 0x08 && b[3] >= 1 && b[3] <= 4) {
    return Format::kIdx;
  }
  return Format::kUnknown;
}

Status ApplyInputShape(const std::string& path, const std::array<int, 3>& shape,
                       LabeledData* data) {
  const uint64_t values = static_cast<uint64_t>(shape[0]) * static_cast<uint64_t>(shape[1]) *
                          static_cast<uint64_t>(shape[2]);
  if (values != data->dim()) {
    return Status::InvalidArgument(
        path + ": --input-shape " + std::to_string(shape[0]) + "," + std::to_string(shape[1]) +
        "," + std::to_string(shape[2]) + " has " + std::to_string(values) +
        " values per sample, but the data has " + std::to_string(data->dim()));
  }
  data->channels = shape[0];
  data->height = shape[1];
  data->width = shape[2];
  return Status::OK();
}

Result<LabeledData> LoadByFormat(const std::vector<std::string>& paths,
                                 const DataFileOptions& opts) {
  const std::string& first = paths[0];
  Result<std::vector<uint8_t>> bytes = dfi::ReadDataBytes(first);
  if (!bytes.ok()) return bytes.status();
  Format format = FormatFromName(first);
  if (format == Format::kUnknown) format = FormatFromMagic(*bytes);
  if (format == Format::kUnknown) {
    return Status::InvalidArgument(first +
                                   ": unknown data format (expected a .csv, .npy, .npz or IDX "
                                   "file, optionally .gz)");
  }
  if (format == Format::kCsv || format == Format::kNpz) {
    if (paths.size() != 1) {
      return Status::InvalidArgument(first + ": a " + (format == Format::kCsv ? "CSV" : ".npz") +
                                     " data set is one file; drop the second path " + paths[1]);
    }
    if (format == Format::kNpz) return dfi::ParseNpz(first, *bytes);
    return dfi::ParseCsv(
        first, std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()),
        opts.label_column);
  }
  std::string second;
  if (paths.size() == 2) {
    second = paths[1];
  } else if (format == Format::kNpy) {
    return Status::InvalidArgument(first +
                                   ": an .npy file holds one array; pass X.npy,Y.npy (or one "
                                   ".npz with x and y)");
  } else {
    second = dfi::IdxLabelsPath(first);
    if (second.empty()) {
      return Status::InvalidArgument(first +
                                     ": cannot derive the IDX labels file name (no \"images\" in "
                                     "it); pass IMAGES,LABELS");
    }
  }
  Result<std::vector<uint8_t>> second_bytes = dfi::ReadDataBytes(second);
  if (!second_bytes.ok()) return second_bytes.status();
  if (format == Format::kNpy) return dfi::ParseNpyPair(first, *bytes, second, *second_bytes);
  return dfi::ParseIdxPair(first, *bytes, second, *second_bytes);
}

}  // namespace

int LabeledData::num_classes() const {
  int32_t max_label = -1;
  for (int32_t l : labels) max_label = std::max(max_label, l);
  return static_cast<int>(max_label) + 1;
}

Result<LabeledData> LoadDataFile(const std::string& path, const DataFileOptions& opts) {
  std::vector<std::string> paths;
  const size_t comma = path.find(',');
  if (comma == std::string::npos || IsRegularFile(path)) {
    paths.push_back(path);
  } else {
    paths.push_back(path.substr(0, comma));
    paths.push_back(path.substr(comma + 1));
    if (paths[0].empty() || paths[1].empty() || paths[1].find(',') != std::string::npos) {
      return Status::InvalidArgument(path +
                                     ": expected one file or two comma-separated files "
                                     "(IMAGES,LABELS or X.npy,Y.npy)");
    }
  }
  if (paths[0].empty()) return Status::InvalidArgument("data file: empty path");
  Result<LabeledData> data = LoadByFormat(paths, opts);
  if (!data.ok()) return data;
  if (data->size() == 0) return Status::InvalidArgument(paths[0] + ": no samples");
  if (opts.input_shape) {
    if (Status s = ApplyInputShape(paths[0], *opts.input_shape, &*data); !s.ok()) return s;
  }
  return data;
}

Result<std::array<int, 3>> ParseInputShape(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--input-shape \"" + text + "\": " + why +
                                   " (expected C,H,W with each 1..65536, e.g. 1,28,28)");
  };
  std::array<int, 3> shape{};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? text.find(',', pos) : text.size();
    if (end == std::string::npos) return bad("needs three comma-separated numbers");
    const std::string part = text.substr(pos, end - pos);
    if (part.empty() || part.size() > 5 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("\"" + part + "\" is not a number in 1..65536");
    }
    const int v = std::stoi(part);
    if (v < 1 || v > 65536) return bad(part + " is not in 1..65536");
    shape[i] = v;
    pos = end + 1;
  }
  return shape;
}

Status CheckLabels(const LabeledData& data, int num_outputs, const std::string& path) {
  for (size_t k = 0; k < data.labels.size(); ++k) {
    const int32_t label = data.labels[k];
    if (label >= 0 && label < num_outputs) continue;
    const std::string where = k < data.source_line.size()
                                  ? path + ":" + std::to_string(data.source_line[k])
                                  : path + ": sample " + std::to_string(k);
    return Status::InvalidArgument(where + ": label " + std::to_string(label) +
                                   " out of range for a model with " + std::to_string(num_outputs) +
                                   " outputs");
  }
  return Status::OK();
}

}  // namespace meshtrain::learn
