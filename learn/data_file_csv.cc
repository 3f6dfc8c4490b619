// CSV data files: comma-separated numeric cells, one sample per line. The first line is a header
// iff one of its cells is not a number. Errors name the file, the 1-based line and the column.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "learn/data_file_internal.h"

namespace meshtrain::learn::data_file_internal {
namespace {

// Class labels beyond this are surely a wrong column; keeps num_classes() far from overflow.
constexpr double kMaxLabel = (1 << 24) - 1;
// Wider rows are surely not a feature table (and would overflow LabeledData::width).
constexpr size_t kMaxColumns = size_t{1} << 24;

struct Line {
  std::string_view text;
  uint32_t number;  // 1-based
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void SplitCells(std::string_view line, std::vector<std::string_view>* cells) {
  cells->clear();
  for (;;) {
    const size_t comma = line.find(',');
    cells->push_back(Trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return;
    line.remove_prefix(comma + 1);
  }
}

// strtod over the whole cell (no trailing characters); non-finite values parse too so that the
// caller can say "not finite" rather than "not a number".
bool ParseDouble(std::string_view cell, double* out) {
  constexpr size_t kMaxCell = 400;
  if (cell.empty() || cell.size() > kMaxCell) return false;
  char buf[kMaxCell + 1];
  std::memcpy(buf, cell.data(), cell.size());
  buf[cell.size()] = '\0';
  char* end = nullptr;
  *out = std::strtod(buf, &end);
  return end == buf + cell.size();
}

std::string Where(const std::string& path, uint32_t line) {
  return path + ":" + std::to_string(line) + ": ";
}

class CsvParser {
 public:
  CsvParser(const std::string& path, std::string_view text) : path_(path) { SplitLines(text); }

  Result<LabeledData> Parse(const std::string& label_column) {
    if (!status_.ok()) return status_;
    if (lines_.empty()) return Status::InvalidArgument(path_ + ": no samples (empty file)");
    std::vector<std::string_view> cells;
    SplitCells(lines_[0].text, &cells);
    double ignored;
    for (std::string_view cell : cells) {
      if (!ParseDouble(cell, &ignored)) has_header_ = true;
    }
    if (has_header_) names_.assign(cells.begin(), cells.end());
    columns_ = cells.size();
    if (columns_ < 2) {
      return Status::InvalidArgument(Where(path_, lines_[0].number) +
                                     "found one column; expected comma-separated features and a "
                                     "label");
    }
    if (columns_ > kMaxColumns) {
      return Status::InvalidArgument(Where(path_, lines_[0].number) + std::to_string(columns_) +
                                     " columns, more than " + std::to_string(kMaxColumns));
    }
    if (Status s = ResolveLabelColumn(label_column); !s.ok()) return s;

    const size_t first = has_header_ ? 1 : 0;
    const size_t n = lines_.size() - first;
    const size_t d = columns_ - 1;
    LabeledData data;
    data.width = static_cast<int>(d);
    data.x.resize(static_cast<Eigen::Index>(d), static_cast<Eigen::Index>(n));
    data.labels.resize(n);
    data.source_line.resize(n);
    for (size_t r = 0; r < n; ++r) {
      const Line& line = lines_[first + r];
      SplitCells(line.text, &cells);
      if (cells.size() != columns_) {
        if (cells.size() == 1 && cells[0].empty()) {
          return Status::InvalidArgument(Where(path_, line.number) + "empty line; expected " +
                                         std::to_string(columns_) + " comma-separated cells");
        }
        return Status::InvalidArgument(Where(path_, line.number) + "row has " +
                                       std::to_string(cells.size()) + " cells, expected " +
                                       std::to_string(columns_) + " (as in line " +
                                       std::to_string(lines_[0].number) + ")");
      }
      float* col = data.x.data() + r * d;
      for (size_t c = 0; c < columns_; ++c) {
        double v = 0;
        const bool number = ParseDouble(cells[c], &v);
        if (c == label_) {
          if (!number || !std::isfinite(v) || v < 0 || v != std::floor(v) || v > kMaxLabel) {
            return Status::InvalidArgument(Where(path_, line.number) + "label " + ColumnName(c) +
                                           ": expected a non-negative integer class label, got " +
                                           Quote(cells[c]));
          }
          data.labels[r] = static_cast<int32_t>(v);
          continue;
        }
        if (!number || !std::isfinite(v) ||
            std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
          return Status::InvalidArgument(
              Where(path_, line.number) + ColumnName(c) +
              (number ? ": expected a finite number, got " : ": expected a number, got ") +
              Quote(cells[c]));
        }
        col[c < label_ ? c : c - 1] = static_cast<float>(v);
      }
      data.source_line[r] = line.number;
    }
    return data;
  }

 private:
  void SplitLines(std::string_view text) {
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte order mark
    uint32_t number = 1;
    for (;;) {
      const size_t nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lines_.push_back({line, number});
      if (nl == std::string_view::npos) break;
      text.remove_prefix(nl + 1);
      if (number == UINT32_MAX) {
        status_ =
            Status::InvalidArgument(path_ + ": more than " + std::to_string(UINT32_MAX) + " lines");
        return;
      }
      ++number;
    }
    while (!lines_.empty() && Trim(lines_.back().text).empty()) lines_.pop_back();
  }

  Status ResolveLabelColumn(const std::string& spec) {
    if (spec.empty()) {
      label_ = columns_ - 1;
      return Status::OK();
    }
    for (size_t c = 0; c < names_.size(); ++c) {
      if (names_[c] == spec) {
        label_ = c;
        return Status::OK();
      }
    }
    const bool digits =
        spec.size() <= 9 && spec.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) {
      if (has_header_) {
        return Status::InvalidArgument(Where(path_, lines_[0].number) + "no column named " +
                                       Quote(spec) + " in the header (--label-column)");
      }
      return Status::InvalidArgument(path_ + ": --label-column " + Quote(spec) +
                                     " names a column, but the file has no header row");
    }
    label_ = static_cast<size_t>(std::stoul(spec));
    if (label_ >= columns_) {
      return Status::InvalidArgument(path_ + ": --label-column " + spec +
                                     " is out of range: the file has " + std::to_string(columns_) +
                                     " columns (0-based index)");
    }
    return Status::OK();
  }

  std::string ColumnName(size_t c) const {
    if (has_header_) return "column " + Quote(names_[c]) + " (index " + std::to_string(c) + ")";
    return "column index " + std::to_string(c);
  }

  const std::string& path_;
  Status status_;
  std::vector<Line> lines_;
  bool has_header_ = false;
  std::vector<std::string_view> names_;
  size_t columns_ = 0;
  size_t label_ = 0;
};

}  // namespace

Result<LabeledData> ParseCsv(const std::string& path, std::string_view text,
                             const std::string& label_column) {
  return CsvParser(path, text).Parse(label_column);
}

}  // namespace meshtrain::learn::data_file_internal
