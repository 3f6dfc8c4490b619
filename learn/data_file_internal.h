// Pieces of the data-file loader (data_file.h) shared between its translation units: whole-file
// reading with gzip inflation and one parser per format. Each parser takes the file's bytes
// (already inflated) and the path used in error messages; none of them reads past `bytes`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "learn/data_file.h"

namespace meshtrain::learn::data_file_internal {

// Sanity bounds shared by the IDX, CSV and .npy readers: one non-sample dimension (larger is
// surely a corrupt header and would overflow LabeledData's ints), and class labels (beyond this
// is surely a wrong column; keeps num_classes() far from overflow).
inline constexpr uint32_t kMaxSide = uint32_t{1} << 24;
inline constexpr int64_t kMaxLabel = (1 << 24) - 1;

// Zip record signatures (.npz files: read here, written by learn/model_file.cc).
inline constexpr uint32_t kEndOfCentralDir = 0x06054b50;
inline constexpr uint32_t kCentralHeader = 0x02014b50;
inline constexpr uint32_t kLocalHeader = 0x04034b50;

// The whole content of `path`, gunzipped when it is gzip (zlib passes other files through).
// NotFound when missing, IOError when unreadable, Corruption for bad gzip data or more than
// kMaxDataFileBytes.
Result<std::vector<uint8_t>> ReadDataBytes(const std::string& path);

// A parsed .npy array: a view into the bytes it was parsed from.
struct NpyArray {
  char kind = 0;     // 'f' float, 'i' signed, 'u' unsigned integer
  int itemsize = 0;  // bytes per element
  std::string descr;
  std::vector<uint64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t count = 0;  // elements

  std::string ShapeText() const {
    std::string out = "(";
    for (size_t i = 0; i < shape.size(); ++i) {
      out += std::to_string(shape[i]);
      out += shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : "");
    }
    return out + ")";
  }
};

// Parses one .npy image in b[0, size) (format 1.0-3.0, little-endian float or integer dtypes,
// C order; the data must fill the rest exactly). `where` ("PATH: array 'x'") starts every error.
Result<NpyArray> ParseNpy(const std::string& where, const uint8_t* b, size_t size);

// The .npy bytes of the members ARRAY.npy of an .npz archive, one per name in `arrays`, in that
// order (stored or deflated, CRC-checked, sizes bounded); an error names a missing array.
Result<std::vector<std::vector<uint8_t>>> ExtractNpzMembers(const std::string& path,
                                                            const std::vector<uint8_t>& bytes,
                                                            const std::vector<std::string>& arrays);

// An unsigned-byte pixel on the [0,1] scale.
inline float ScaleByte(uint8_t v) { return static_cast<float>(v) * (1.0f / 255.0f); }

// Printable, bounded rendering of untrusted text for an error message.
std::string Quote(std::string_view text);

Result<LabeledData> ParseCsv(const std::string& path, std::string_view text,
                             const std::string& label_column);

// x and y as two .npy files.
Result<LabeledData> ParseNpyPair(const std::string& x_path, const std::vector<uint8_t>& x_bytes,
                                 const std::string& y_path, const std::vector<uint8_t>& y_bytes);

// An .npz archive with the members x.npy and y.npy.
Result<LabeledData> ParseNpz(const std::string& path, const std::vector<uint8_t>& bytes);

// IDX images (1-4 dimensions of unsigned bytes) and labels (1-D unsigned bytes).
Result<LabeledData> ParseIdxPair(const std::string& images_path, const std::vector<uint8_t>& images,
                                 const std::string& labels_path,
                                 const std::vector<uint8_t>& labels);

// The labels file of an IDX images path ("images-idx3" -> "labels-idx1", else "images" ->
// "labels" in the file name); empty when the name has neither.
std::string IdxLabelsPath(const std::string& images_path);

}  // namespace meshtrain::learn::data_file_internal
