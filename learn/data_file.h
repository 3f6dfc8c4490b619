// User data sets for `--train-data` / `--test-data`: a labelled sample matrix read from IDX
// (optionally gzip), CSV, NumPy .npy pairs or .npz archives. Every byte of the file is
// untrusted: sizes are bounded before allocating, every read is range-checked, and a bad file
// yields one Status whose message starts with the file path and names the line, byte offset or
// array and what was expected — never a partly loaded set.
//
// Formats (chosen by the name after stripping ".gz", else by the first bytes; zlib inflates
// gzip for every format):
//   IDX   "IMAGES,LABELS" or one images path whose labels file is found by replacing
//         "images-idx3" with "labels-idx1" (else "images" with "labels") in the file name.
//         Unsigned-byte arrays of 1-4 dimensions (n[,d] | n,H,W | n,C,H,W), pixels scaled to
//         [0,1]; labels 1-D unsigned bytes.
//   CSV   comma-separated numbers, optional header row, `label_column` by name or 0-based index
//         (default: the last column); every other column is a feature.
//   .npy  "X.npy,Y.npy": x float32/float64/uint8 (scaled to [0,1]) or integer, shape (n,d),
//         (n,H,W) or (n,C,H,W); y integer, shape (n).
//   .npz  one zip archive (stored or deflated, as np.savez / np.savez_compressed write it) with
//         the members x.npy and y.npy.
//
// Thread-safety: the functions are reentrant; a LabeledData is a plain value.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "learn/status.h"

namespace meshtrain::learn {

// Largest file (after gzip inflation) or zip member the loaders accept.
inline constexpr uint64_t kMaxDataFileBytes = uint64_t{4} << 30;  // 4 GiB

struct LabeledData {
  // Per-sample input shape (C,H,W); flat features are (1,1,d).
  int channels = 1;
  int height = 1;
  int width = 0;
  Eigen::MatrixXf x;                  // dim() x size(): one column per sample
  std::vector<int32_t> labels;        // size() class indices, each >= 0
  std::vector<uint32_t> source_line;  // CSV: 1-based file line of each sample; else empty

  size_t size() const { return labels.size(); }
  size_t dim() const {
    return static_cast<size_t>(channels) * static_cast<size_t>(height) * static_cast<size_t>(width);
  }
  int num_classes() const;  // largest label + 1; 0 when empty
};

struct DataFileOptions {
  // CSV only: the label column's header name or 0-based index; empty = the last column.
  std::string label_column;
  // `--input-shape C,H,W`: replaces the shape found in the file; must multiply to dim().
  std::optional<std::array<int, 3>> input_shape;
};

// Loads `path`: one file, or "A,B" (IDX images,labels or .npy x,y). A path that exists as a
// file is taken whole even if it contains a comma. Errors: NotFound for a missing file,
// IOError for a read failure, Corruption / InvalidArgument for bad contents or options, n == 0
// included; every message begins with the offending file's path.
Result<LabeledData> LoadDataFile(const std::string& path, const DataFileOptions& opts);

// Parses `--input-shape` "C,H,W": three decimal integers, each 1..65536, no signs or spaces.
Result<std::array<int, 3>> ParseInputShape(const std::string& text);

// OK when every label is < num_outputs, else InvalidArgument
// "PATH: sample K: label L out of range for a model with N outputs" (K 0-based) or, for CSV
// data, "PATH:LINE: label L out of range for a model with N outputs".
Status CheckLabels(const LabeledData& data, int num_outputs, const std::string& path);

}  // namespace meshtrain::learn
