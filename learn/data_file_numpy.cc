// NumPy data files: .npy arrays (format 1.0/2.0/3.0,
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html) given as an "x,y" pair,
// and .npz archives (a zip with x.npy and y.npy, stored or deflated). The header dictionary is
// parsed by a small bounded parser, never evaluated; the zip is located through its central
// directory, and every offset and size in it is checked against the file before use.
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "learn/data_file_internal.h"

namespace meshtrain::learn::data_file_internal {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the .npy reader copies little-endian elements as they are");

constexpr size_t kMaxNpyHeader = size_t{1} << 16;
constexpr size_t kMaxNpyDims = 32;

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint64_t Le64(const uint8_t* p) { return uint64_t{Le32(p)} | (uint64_t{Le32(p + 4)} << 32); }

// The header dictionary, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(std::string_view text) : text_(text) {}

  // Fills descr, fortran_order and shape; false with *error set on anything else.
  bool Parse(std::string* descr, bool* fortran_order, std::vector<uint64_t>* shape,
             std::string* error) {
    bool have_descr = false, have_order = false, have_shape = false;
    SkipSpace();
    if (!Take('{')) return Fail("expected '{'", error);
    for (;;) {
      SkipSpace();
      if (Take('}')) break;
      std::string key;
      if (!String(&key)) return Fail("expected a quoted key", error);
      SkipSpace();
      if (!Take(':')) return Fail("expected ':' after " + Quote(key), error);
      SkipSpace();
      if (key == "descr") {
        if (!String(descr)) return Fail("'descr' is not a plain dtype string", error);
        have_descr = true;
      } else if (key == "fortran_order") {
        if (Word("True")) {
          *fortran_order = true;
        } else if (Word("False")) {
          *fortran_order = false;
        } else {
          return Fail("'fortran_order' is not True or False", error);
        }
        have_order = true;
      } else if (key == "shape") {
        if (!Tuple(shape)) return Fail("'shape' is not a tuple of integers", error);
        have_shape = true;
      } else {
        return Fail("unexpected key " + Quote(key), error);
      }
      SkipSpace();
      if (Take(',')) continue;
      SkipSpace();
      if (Take('}')) break;
      return Fail("expected ',' or '}'", error);
    }
    if (!have_descr || !have_order || !have_shape) {
      return Fail("needs the keys 'descr', 'fortran_order' and 'shape'", error);
    }
    return true;
  }

 private:
  bool Fail(const std::string& why, std::string* error) {
    *error = why + " at header character " + std::to_string(pos_);
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Take(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Word(std::string_view w) {
    if (text_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  bool String(std::string* out) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return false;
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return false;
    const std::string_view body = text_.substr(pos_, end - pos_);
    if (body.find('\\') != std::string_view::npos) return false;
    out->assign(body);
    pos_ = end + 1;
    return true;
  }
  bool Tuple(std::vector<uint64_t>* out) {
    out->clear();
    if (!Take('(')) return false;
    for (;;) {
      SkipSpace();
      if (Take(')')) return true;
      if (out->size() >= kMaxNpyDims) return false;
      uint64_t v = 0;
      size_t digits = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (++digits > 18) return false;
        v = v * 10 + static_cast<uint64_t>(text_[pos_++] - '0');
      }
      if (digits == 0) return false;
      Take('L');  // Python 2 longs
      out->push_back(v);
      SkipSpace();
      if (Take(')')) return true;
      if (!Take(',')) return false;
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

// Parses one .npy image in b[0, size). `where` ("PATH: array 'x'") starts every error.
Result<NpyArray> ParseNpy(const std::string& where, const uint8_t* b, size_t size) {
  auto truncated = [&](size_t needed) {
    return Status::Corruption(where + ": truncated .npy data: ran out at byte offset " +
                              std::to_string(size) + " (needs " + std::to_string(needed) +
                              " bytes)");
  };
  if (size < 8) return truncated(8);
  if (std::memcmp(b, "\x93NUMPY", 6) != 0) {
    return Status::Corruption(where + ": not an .npy array (no \\x93NUMPY magic)");
  }
  const int major = b[6], minor = b[7];
  size_t header_start = 0, header_len = 0;
  if (major == 1 && minor == 0) {
    if (size < 10) return truncated(10);
    header_start = 10;
    header_len = Le16(b + 8);
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (size < 12) return truncated(12);
    header_start = 12;
    header_len = Le32(b + 8);
  } else {
    return Status::Corruption(where + ": unsupported .npy format version " + std::to_string(major) +
                              "." + std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  }
  if (header_len > kMaxNpyHeader) {
    return Status::Corruption(where + ": .npy header of " + std::to_string(header_len) +
                              " bytes (at most " + std::to_string(kMaxNpyHeader) + " accepted)");
  }
  if (size < header_start + header_len) return truncated(header_start + header_len);

  NpyArray array;
  bool fortran_order = false;
  std::string error;
  NpyHeaderParser parser(
      std::string_view(reinterpret_cast<const char*>(b + header_start), header_len));
  if (!parser.Parse(&array.descr, &fortran_order, &array.shape, &error)) {
    return Status::Corruption(where + ": malformed .npy header: " + error);
  }
  if (fortran_order) {
    return Status::InvalidArgument(where +
                                   ": fortran_order arrays are not supported (save a C-order "
                                   "array, e.g. np.ascontiguousarray)");
  }
  const std::string& d = array.descr;
  const bool known = d.size() == 3 && (d[0] == '<' || d[0] == '|' || d[0] == '=') &&
                     (d[1] == 'f' || d[1] == 'i' || d[1] == 'u') &&
                     (d[2] == '1' || d[2] == '2' || d[2] == '4' || d[2] == '8');
  array.kind = known ? d[1] : 0;
  array.itemsize = known ? d[2] - '0' : 0;
  if (!known || (d[0] == '|' && array.itemsize != 1) || (d[1] == 'f' && array.itemsize < 4)) {
    return Status::InvalidArgument(where + ": unsupported dtype " + Quote(d) +
                                   " (expected a little-endian float32/float64 or integer array)");
  }
  uint64_t count = 1;
  for (uint64_t dim : array.shape) {
    if (dim != 0 && count > kMaxDataFileBytes / dim) {
      return Status::Corruption(where + ": shape " + array.ShapeText() + " is too large");
    }
    count *= dim;
  }
  array.count = count;
  const uint64_t data_start = header_start + header_len;
  const uint64_t data_bytes = count * static_cast<uint64_t>(array.itemsize);
  if (data_bytes > kMaxDataFileBytes) {
    return Status::Corruption(where + ": shape " + array.ShapeText() + " is too large");
  }
  if (size < data_start + data_bytes) return truncated(data_start + data_bytes);
  if (size > data_start + data_bytes) {
    return Status::Corruption(where + ": " + std::to_string(size - data_start - data_bytes) +
                              " bytes of trailing data after the " + array.ShapeText() +
                              " array ending at byte offset " +
                              std::to_string(data_start + data_bytes));
  }
  array.data = b + data_start;
  return array;
}

namespace {

// Element i of an integer array as int64 (uint64 values beyond int64 saturate).
int64_t IntegerAt(const NpyArray& a, uint64_t i) {
  const uint8_t* p = a.data + i * static_cast<uint64_t>(a.itemsize);
  if (a.kind == 'u') {
    switch (a.itemsize) {
      case 1:
        return p[0];
      case 2:
        return Le16(p);
      case 4:
        return Le32(p);
      default: {
        const uint64_t v = Le64(p);
        return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                   ? std::numeric_limits<int64_t>::max()
                   : static_cast<int64_t>(v);
      }
    }
  }
  switch (a.itemsize) {
    case 1:
      return static_cast<int8_t>(p[0]);
    case 2:
      return static_cast<int16_t>(Le16(p));
    case 4:
      return static_cast<int32_t>(Le32(p));
    default:
      return static_cast<int64_t>(Le64(p));
  }
}

// Element i of a float/integer array as double.
double ValueAt(const NpyArray& a, uint64_t i) {
  if (a.kind != 'f') return static_cast<double>(IntegerAt(a, i));
  const uint8_t* p = a.data + i * static_cast<uint64_t>(a.itemsize);
  if (a.itemsize == 4) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  double v;
  std::memcpy(&v, p, 8);
  return v;
}

// Builds the data set from the x and y arrays; `x_where`/`y_where` begin the errors, `x_name`
// names x inside a sentence about y.
Result<LabeledData> FromArrays(const std::string& x_where, const std::string& x_name,
                               const NpyArray& x, const std::string& y_where, const NpyArray& y) {
  if (x.shape.size() < 2 || x.shape.size() > 4) {
    return Status::InvalidArgument(x_where + " has shape " + x.ShapeText() +
                                   "; expected (n, d), (n, H, W) or (n, C, H, W)");
  }
  for (size_t i = 1; i < x.shape.size(); ++i) {
    if (x.shape[i] == 0 || x.shape[i] > kMaxSide) {
      return Status::InvalidArgument(x_where + " has shape " + x.ShapeText() +
                                     "; every dimension after n must be 1.." +
                                     std::to_string(kMaxSide));
    }
  }
  if (y.kind == 'f') {
    return Status::InvalidArgument(y_where + ": dtype " + Quote(y.descr) +
                                   " is not an integer type; expected integer class labels "
                                   "(e.g. <i8 or |u1)");
  }
  if (y.shape.size() != 1) {
    return Status::InvalidArgument(y_where + " has shape " + y.ShapeText() +
                                   "; expected a 1-D array of n labels");
  }
  const uint64_t n = x.shape[0];
  if (y.shape[0] != n) {
    return Status::InvalidArgument(y_where + " has " + std::to_string(y.shape[0]) +
                                   " labels, but " + x_name + " has " + std::to_string(n) +
                                   " samples");
  }
  LabeledData data;
  if (x.shape.size() == 2) {
    data.width = static_cast<int>(x.shape[1]);
  } else if (x.shape.size() == 3) {
    data.height = static_cast<int>(x.shape[1]);
    data.width = static_cast<int>(x.shape[2]);
  } else {
    data.channels = static_cast<int>(x.shape[1]);
    data.height = static_cast<int>(x.shape[2]);
    data.width = static_cast<int>(x.shape[3]);
  }
  data.x.resize(static_cast<Eigen::Index>(data.dim()), static_cast<Eigen::Index>(n));
  float* dst = data.x.data();
  if (x.kind == 'u' && x.itemsize == 1) {
    for (uint64_t i = 0; i < x.count; ++i) dst[i] = ScaleByte(x.data[i]);
  } else {
    constexpr double kFloatMax = std::numeric_limits<float>::max();
    for (uint64_t i = 0; i < x.count; ++i) {
      const double v = ValueAt(x, i);
      if (!std::isfinite(v) || std::fabs(v) > kFloatMax) {
        const uint64_t dim = data.dim();
        return Status::InvalidArgument(x_where + ": sample " + std::to_string(i / dim) +
                                       ", value " + std::to_string(i % dim) +
                                       " is not a finite float32 number");
      }
      dst[i] = static_cast<float>(v);
    }
  }
  data.labels.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t label = IntegerAt(y, i);
    if (label < 0 || label > kMaxLabel) {
      return Status::InvalidArgument(y_where + ": sample " + std::to_string(i) + ": label " +
                                     std::to_string(label) + " is not a class index 0.." +
                                     std::to_string(kMaxLabel));
    }
    data.labels[i] = static_cast<int32_t>(label);
  }
  return data;
}

// Parses the two .npy images and builds the data set; errors name `x_path`/`y_path`.
Result<LabeledData> FromNpyBytes(const std::string& x_path, const std::vector<uint8_t>& x_bytes,
                                 const std::string& y_path, const std::vector<uint8_t>& y_bytes,
                                 const std::string& x_name) {
  const std::string x_where = x_path + ": array 'x'";
  const std::string y_where = y_path + ": array 'y'";
  Result<NpyArray> x = ParseNpy(x_where, x_bytes.data(), x_bytes.size());
  if (!x.ok()) return x.status();
  Result<NpyArray> y = ParseNpy(y_where, y_bytes.data(), y_bytes.size());
  if (!y.ok()) return y.status();
  return FromArrays(x_where, x_name, *x, y_where, *y);
}

// ---- .npz: the zip container ----

constexpr size_t kEndRecordSize = 22;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;
// Deflate cannot compress better than about 1032:1; a larger claim is a zip bomb or corrupt.
constexpr uint64_t kMaxDeflateRatio = 1032;

struct ZipMember {
  bool found = false;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0;
  uint64_t uncompressed = 0;
  uint64_t local_offset = 0;
};

// The zip64 extended-information extra field (tag 1) holds the 64-bit values of the fields
// that are 0xFFFFFFFF in the central header, in this order.
bool ApplyZip64Extra(const uint8_t* extra, size_t len, ZipMember* m) {
  size_t pos = 0;
  while (pos + 4 <= len) {
    const uint16_t tag = Le16(extra + pos);
    const uint16_t size = Le16(extra + pos + 2);
    if (pos + 4 + size > len) return false;
    if (tag == 1) {
      const uint8_t* p = extra + pos + 4;
      size_t left = size;
      for (uint64_t* field : {&m->uncompressed, &m->compressed, &m->local_offset}) {
        if (*field != 0xFFFFFFFFu) continue;
        if (left < 8) return false;
        *field = Le64(p);
        p += 8;
        left -= 8;
      }
      return true;
    }
    pos += 4 + size;
  }
  return m->uncompressed != 0xFFFFFFFFu && m->compressed != 0xFFFFFFFFu &&
         m->local_offset != 0xFFFFFFFFu;
}

class NpzReader {
 public:
  // `arrays`: the member names without ".npy", all required.
  NpzReader(const std::string& path, const std::vector<uint8_t>& bytes,
            std::vector<std::string> arrays)
      : path_(path), b_(bytes), arrays_(std::move(arrays)), members_(arrays_.size()) {}

  // The .npy bytes of every array, in the order given.
  Result<std::vector<std::vector<uint8_t>>> ReadMembers() {
    if (Status s = ReadCentralDirectory(); !s.ok()) return s;
    std::vector<std::vector<uint8_t>> out(arrays_.size());
    for (size_t i = 0; i < arrays_.size(); ++i) {
      if (Status s = Extract(arrays_[i], members_[i], &out[i]); !s.ok()) return s;
    }
    return out;
  }

  Result<LabeledData> Read() {
    Result<std::vector<std::vector<uint8_t>>> members = ReadMembers();
    if (!members.ok()) return members.status();
    return FromNpyBytes(path_, members.value()[0], path_, members.value()[1], "array 'x'");
  }

 private:
  Status Bad(const std::string& why) const {
    return Status::Corruption(path_ + ": corrupt .npz (zip) archive: " + why);
  }

  Status ReadCentralDirectory() {
    const size_t size = b_.size();
    if (size < kEndRecordSize) return Bad("too short for a zip archive (truncated?)");
    // The end record sits at the end, followed by a comment of at most 65535 bytes.
    size_t end = SIZE_MAX;
    const size_t lowest = size - kEndRecordSize > 0xFFFF ? size - kEndRecordSize - 0xFFFF : 0;
    for (size_t pos = size - kEndRecordSize + 1; pos-- > lowest;) {
      if (Le32(&b_[pos]) == kEndOfCentralDir &&
          pos + kEndRecordSize + Le16(&b_[pos + 20]) <= size) {
        end = pos;
        break;
      }
    }
    if (end == SIZE_MAX) return Bad("no end-of-central-directory record (truncated?)");
    const uint16_t entries = Le16(&b_[end + 10]);
    const uint32_t dir_size = Le32(&b_[end + 12]);
    const uint32_t dir_offset = Le32(&b_[end + 16]);
    if (entries == 0xFFFF || dir_size == 0xFFFFFFFFu || dir_offset == 0xFFFFFFFFu) {
      return Bad("zip64 archives (over 4 GiB or 65535 members) are not supported");
    }
    if (uint64_t{dir_offset} + dir_size > end) {
      return Bad("central directory at byte offset " + std::to_string(dir_offset) + " (" +
                 std::to_string(dir_size) + " bytes) runs past byte offset " + std::to_string(end) +
                 " (truncated?)");
    }
    dir_end_ = dir_offset;
    size_t pos = dir_offset;
    const size_t limit = size_t{dir_offset} + dir_size;
    for (uint32_t i = 0; i < entries; ++i) {
      if (pos + kCentralHeaderSize > limit || Le32(&b_[pos]) != kCentralHeader) {
        return Bad("central directory entry " + std::to_string(i) + " at byte offset " +
                   std::to_string(pos) + " is malformed");
      }
      const uint8_t* h = &b_[pos];
      const size_t name_len = Le16(h + 28), extra_len = Le16(h + 30), comment_len = Le16(h + 32);
      const size_t next = pos + kCentralHeaderSize + name_len + extra_len + comment_len;
      if (next > limit) {
        return Bad("central directory entry " + std::to_string(i) + " runs past the directory");
      }
      const std::string_view name(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
      int slot = -1;
      for (size_t k = 0; k < arrays_.size(); ++k) {
        if (name == arrays_[k] + ".npy") slot = static_cast<int>(k);
      }
      if (slot >= 0) {
        ZipMember& m = members_[slot];
        if (m.found) return Bad("member " + std::string(name) + " appears twice");
        m.found = true;
        m.flags = Le16(h + 8);
        m.method = Le16(h + 10);
        m.crc = Le32(h + 16);
        m.compressed = Le32(h + 20);
        m.uncompressed = Le32(h + 24);
        m.local_offset = Le32(h + 42);
        if (!ApplyZip64Extra(h + kCentralHeaderSize + name_len, extra_len, &m)) {
          return Bad("member " + std::string(name) + " has a malformed zip64 extra field");
        }
      }
      pos = next;
    }
    return Status::OK();
  }

  Status Extract(const std::string& array, const ZipMember& m, std::vector<uint8_t>* out) {
    const std::string member = array + ".npy";
    if (!m.found) {
      const bool data = arrays_ == std::vector<std::string>{"x", "y"};
      return Status::InvalidArgument(path_ + ": no array '" + array + "' (member " + member + ")" +
                                     (data ? "; expected np.savez(path, x=..., y=...)" : ""));
    }
    if (m.flags & 1) return Bad("member " + member + " is encrypted");
    if (m.method != 0 && m.method != 8) {
      return Bad("member " + member + " uses compression method " + std::to_string(m.method) +
                 " (only stored and deflate are supported)");
    }
    if (m.uncompressed > std::numeric_limits<uint32_t>::max() ||
        m.uncompressed > kMaxDataFileBytes) {
      return Bad("member " + member + " is larger than 4 GiB");
    }
    if (m.compressed > b_.size() || (m.method == 0 && m.uncompressed != m.compressed) ||
        (m.method == 8 && m.uncompressed > (m.compressed + 1) * kMaxDeflateRatio)) {
      return Bad("member " + member + " claims " + std::to_string(m.uncompressed) + " bytes from " +
                 std::to_string(m.compressed) + " bytes in a " + std::to_string(b_.size()) +
                 "-byte file");
    }
    if (m.local_offset > dir_end_ || m.local_offset + kLocalHeaderSize > dir_end_ ||
        Le32(&b_[m.local_offset]) != kLocalHeader) {
      return Bad("member " + member + ": no local header at byte offset " +
                 std::to_string(m.local_offset));
    }
    const uint8_t* h = &b_[m.local_offset];
    const uint64_t data_start = m.local_offset + kLocalHeaderSize + Le16(h + 26) + Le16(h + 28);
    if (data_start + m.compressed > dir_end_) {
      return Bad("member " + member + ": " + std::to_string(m.compressed) +
                 " bytes at byte offset " + std::to_string(data_start) +
                 " run past the central directory at " + std::to_string(dir_end_) +
                 " (truncated?)");
    }
    const uint8_t* src = b_.data() + data_start;
    out->resize(m.uncompressed);
    if (m.method == 0) {
      if (m.uncompressed > 0) std::memcpy(out->data(), src, m.uncompressed);
    } else if (Status s = Inflate(member, src, m, out); !s.ok()) {
      return s;
    }
    const uint32_t crc = static_cast<uint32_t>(
        crc32(crc32(0, nullptr, 0), out->data(), static_cast<uInt>(out->size())));
    if (crc != m.crc) {
      return Bad("member " + member + ": CRC-32 mismatch (stored " + std::to_string(m.crc) +
                 ", computed " + std::to_string(crc) + ")");
    }
    return Status::OK();
  }

  // Raw deflate (no zlib header) of exactly m.compressed bytes into exactly m.uncompressed.
  Status Inflate(const std::string& member, const uint8_t* src, const ZipMember& m,
                 std::vector<uint8_t>* out) {
    z_stream zs;
    std::memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return Bad("zlib inflateInit2 failed");
    zs.next_in = const_cast<Bytef*>(src);
    zs.avail_in = static_cast<uInt>(m.compressed);
    zs.next_out = out->data();
    zs.avail_out = static_cast<uInt>(out->size());
    const int ret = inflate(&zs, Z_FINISH);
    const uint64_t produced = zs.total_out;
    const std::string zlib_msg = zs.msg != nullptr ? std::string(" (") + zs.msg + ")" : "";
    inflateEnd(&zs);
    if (ret == Z_STREAM_END && produced == m.uncompressed) return Status::OK();
    if (ret == Z_BUF_ERROR && zs.avail_out == 0) {
      return Bad("member " + member + " inflates to more than the declared " +
                 std::to_string(m.uncompressed) + " bytes");
    }
    return Bad("member " + member + ": deflate data is truncated or corrupt after " +
               std::to_string(produced) + " of " + std::to_string(m.uncompressed) + " bytes" +
               zlib_msg);
  }

  const std::string& path_;
  const std::vector<uint8_t>& b_;
  std::vector<std::string> arrays_;
  std::vector<ZipMember> members_;  // one per arrays_ entry
  uint64_t dir_end_ = 0;            // members' data must end before the central directory
};

}  // namespace

Result<LabeledData> ParseNpyPair(const std::string& x_path, const std::vector<uint8_t>& x_bytes,
                                 const std::string& y_path, const std::vector<uint8_t>& y_bytes) {
  return FromNpyBytes(x_path, x_bytes, y_path, y_bytes, "array 'x' in " + x_path);
}

Result<LabeledData> ParseNpz(const std::string& path, const std::vector<uint8_t>& bytes) {
  return NpzReader(path, bytes, {"x", "y"}).Read();
}

Result<std::vector<std::vector<uint8_t>>> ExtractNpzMembers(
    const std::string& path, const std::vector<uint8_t>& bytes,
    const std::vector<std::string>& arrays) {
  return NpzReader(path, bytes, arrays).ReadMembers();
}

}  // namespace meshtrain::learn::data_file_internal
