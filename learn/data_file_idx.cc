// IDX data files (http://yann.lecun.com/exdb/mnist/): a big-endian header — two zero bytes, the
// element type (0x08 = unsigned byte, the only one accepted), the number of dimensions, then one
// 32-bit size per dimension — followed by exactly the announced bytes.
#include <algorithm>

#include "learn/data_file_internal.h"

namespace meshtrain::learn::data_file_internal {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;

struct IdxArray {
  std::vector<uint32_t> dims;
  size_t data_offset = 0;
};

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string Hex32(uint32_t v) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) out += kHex[(v >> shift) & 15];
  return out;
}

// Checks the header of an unsigned-byte IDX array with min_dims..max_dims dimensions and that
// the file holds exactly the announced bytes.
Result<IdxArray> ParseIdx(const std::string& path, const std::vector<uint8_t>& b, int min_dims,
                          int max_dims) {
  if (b.size() < 4) {
    return Status::Corruption(path + ": truncated IDX file: data ran out at byte offset " +
                              std::to_string(b.size()) + " (the magic number needs 4 bytes)");
  }
  const uint32_t magic = BigEndian32(b.data());
  const std::string expected_magic = min_dims == max_dims
                                         ? Hex32(0x800 + static_cast<uint32_t>(min_dims))
                                         : Hex32(0x800 + static_cast<uint32_t>(min_dims)) + ".." +
                                               Hex32(0x800 + static_cast<uint32_t>(max_dims));
  if (b[0] != 0 || b[1] != 0 || b[2] != kUnsignedByte || b[3] < min_dims || b[3] > max_dims) {
    std::string why = "bad IDX magic number " + Hex32(magic) + " (expected " + expected_magic;
    if (b[0] == 0 && b[1] == 0 && b[2] != kUnsignedByte) {
      why += ": only unsigned-byte elements, type 0x08, are supported";
    }
    return Status::Corruption(path + ": " + why + ")");
  }
  IdxArray array;
  const int ndims = b[3];
  array.data_offset = 4 + 4 * static_cast<size_t>(ndims);
  if (b.size() < array.data_offset) {
    return Status::Corruption(path + ": truncated IDX file: data ran out at byte offset " +
                              std::to_string(b.size()) + " inside the header (" +
                              std::to_string(array.data_offset) + " bytes)");
  }
  uint64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    const uint32_t size = BigEndian32(b.data() + 4 + 4 * d);
    if (d > 0 && (size == 0 || size > kMaxSide)) {
      return Status::Corruption(path + ": IDX dimension " + std::to_string(d) + " is " +
                                std::to_string(size) + " (expected 1.." + std::to_string(kMaxSide) +
                                ")");
    }
    array.dims.push_back(size);
    total *= size;  // no overflow: total <= 2^32 before, size <= 2^24 after dimension 0
    if (total > kMaxDataFileBytes) {
      return Status::Corruption(path + ": IDX header announces more than " +
                                std::to_string(kMaxDataFileBytes) + " bytes of data");
    }
  }
  const uint64_t expected = array.data_offset + total;
  if (b.size() < expected) {
    return Status::Corruption(path + ": truncated IDX file: data ran out at byte offset " +
                              std::to_string(b.size()) + " (the header announces " +
                              std::to_string(expected) + " bytes)");
  }
  if (b.size() > expected) {
    return Status::Corruption(path + ": " + std::to_string(b.size() - expected) +
                              " bytes of trailing data after byte offset " +
                              std::to_string(expected) + " (the header announces " +
                              std::to_string(expected) + " bytes)");
  }
  return array;
}

}  // namespace

Result<LabeledData> ParseIdxPair(const std::string& images_path, const std::vector<uint8_t>& images,
                                 const std::string& labels_path,
                                 const std::vector<uint8_t>& labels) {
  Result<IdxArray> x = ParseIdx(images_path, images, 1, 4);
  if (!x.ok()) return x.status();
  Result<IdxArray> y = ParseIdx(labels_path, labels, 1, 1);
  if (!y.ok()) return y.status();
  const uint32_t n = x->dims[0];
  if (y->dims[0] != n) {
    return Status::Corruption(labels_path + ": " + std::to_string(y->dims[0]) + " labels for " +
                              std::to_string(n) + " images in " + images_path);
  }
  LabeledData data;
  const std::vector<uint32_t>& dims = x->dims;
  switch (dims.size()) {
    case 1:
      data.width = 1;
      break;  // one value per sample
    case 2:
      data.width = static_cast<int>(dims[1]);
      break;
    case 3:
      data.height = static_cast<int>(dims[1]);
      data.width = static_cast<int>(dims[2]);
      break;
    default:
      data.channels = static_cast<int>(dims[1]);
      data.height = static_cast<int>(dims[2]);
      data.width = static_cast<int>(dims[3]);
  }
  const size_t dim = data.dim();
  data.x.resize(static_cast<Eigen::Index>(dim), static_cast<Eigen::Index>(n));
  const uint8_t* src = images.data() + x->data_offset;
  float* dst = data.x.data();
  for (size_t i = 0; i < dim * n; ++i) dst[i] = ScaleByte(src[i]);
  const uint8_t* label_bytes = labels.data() + y->data_offset;
  data.labels.assign(label_bytes, label_bytes + n);
  return data;
}

std::string IdxLabelsPath(const std::string& images_path) {
  const size_t slash = images_path.find_last_of('/');
  const size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  std::string path = images_path;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"images-idx3", "labels-idx1"},
                                 std::pair<std::string, std::string>{"images", "labels"}}) {
    const size_t at = path.rfind(from);
    if (at != std::string::npos && at >= name_start) return path.replace(at, from.size(), to);
  }
  return "";
}

}  // namespace meshtrain::learn::data_file_internal
