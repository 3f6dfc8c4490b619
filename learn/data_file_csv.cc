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

// Wider rows are surely not a feature table (and would overflow LabeledData::width).
constexpr size_t kMaxColumns = size_t{1} << 24;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits at commas; stops after kMaxColumns + 1 cells (the caller rejects that many).
void SplitCells(std::string_view line, std::vector<std::string_view>* cells) {
  cells->clear();
  for (;;) {
    const size_t comma = line.find(',');
    cells->push_back(Trim(line.substr(0, comma)));
    if (comma == std::string_view::npos || cells->size() > kMaxColumns) return;
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

// Walks the text line by line (nothing per line is kept but the parsed values).
class CsvParser {
 public:
  CsvParser(const std::string& path, std::string_view text) : path_(path), rest_(text) {
    if (rest_.substr(0, 3) == "\xEF\xBB\xBF") rest_.remove_prefix(3);  // UTF-8 byte order mark
    // Blank lines at the end are allowed: drop them (and trailing spaces) up front.
    const size_t last = rest_.find_last_not_of(" \t\r\n");
    rest_ = last == std::string_view::npos ? std::string_view() : rest_.substr(0, last + 1);
    all_ = rest_;
  }

  Result<LabeledData> Parse(const std::string& label_column) {
    if (rest_.empty()) return Status::InvalidArgument(path_ + ": no samples (empty file)");
    std::string_view line = NextLine();
    std::vector<std::string_view> cells;
    SplitCells(line, &cells);
    double ignored;
    for (std::string_view cell : cells) {
      if (!ParseDouble(cell, &ignored)) has_header_ = true;
    }
    if (has_header_) names_.assign(cells.begin(), cells.end());
    columns_ = cells.size();
    if (columns_ < 2) {
      return Status::InvalidArgument(Where(path_, 1) +
                                     "found one column; expected comma-separated features and a "
                                     "label");
    }
    if (columns_ > kMaxColumns) {
      return Status::InvalidArgument(Where(path_, 1) + "more than " + std::to_string(kMaxColumns) +
                                     " columns");
    }
    if (Status s = ResolveLabelColumn(label_column); !s.ok()) return s;

    const size_t d = columns_ - 1;
    LabeledData data;
    data.width = static_cast<int>(d);
    // Row-major samples = Eigen's column-major dim x n; grown as rows parse, so the memory
    // stays proportional to the valid data whatever the file claims.
    std::vector<float> values;
    if (!has_header_) rest_ = Rewind();
    while (!rest_.empty()) {
      line = NextLine();
      SplitCells(line, &cells);
      if (cells.size() != columns_) {
        if (cells.size() == 1 && cells[0].empty()) {
          return Status::InvalidArgument(Where(path_, line_number_) + "empty line; expected " +
                                         std::to_string(columns_) + " comma-separated cells");
        }
        return Status::InvalidArgument(
            Where(path_, line_number_) + "row has " +
            (cells.size() > kMaxColumns ? "too many" : std::to_string(cells.size())) +
            " cells, expected " + std::to_string(columns_) + " (as in line 1)");
      }
      for (size_t c = 0; c < columns_; ++c) {
        double v = 0;
        const bool number = ParseDouble(cells[c], &v);
        if (c == label_) {
          if (!number || !std::isfinite(v) || v < 0 || v != std::floor(v) || v > kMaxLabel) {
            return Status::InvalidArgument(Where(path_, line_number_) + "label " + ColumnName(c) +
                                           ": expected a non-negative integer class label, got " +
                                           Quote(cells[c]));
          }
          data.labels.push_back(static_cast<int32_t>(v));
          continue;
        }
        if (!number || !std::isfinite(v) ||
            std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
          return Status::InvalidArgument(
              Where(path_, line_number_) + ColumnName(c) +
              (number ? ": expected a finite number, got " : ": expected a number, got ") +
              Quote(cells[c]));
        }
        values.push_back(static_cast<float>(v));
      }
      data.source_line.push_back(line_number_);
    }
    data.x = Eigen::Map<const Eigen::MatrixXf>(values.data(), static_cast<Eigen::Index>(d),
                                               static_cast<Eigen::Index>(data.labels.size()));
    return data;
  }

 private:
  // The next line without its "\n" / "\r\n"; advances line_number_ (1-based).
  std::string_view NextLine() {
    const size_t nl = rest_.find('\n');
    std::string_view line = rest_.substr(0, nl);
    rest_ = nl == std::string_view::npos ? std::string_view() : rest_.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_number_;
    return line;
  }

  // Back to the start: the first line is data, not a header.
  std::string_view Rewind() {
    line_number_ = 0;
    return all_;
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
        return Status::InvalidArgument(Where(path_, 1) + "no column named " + Quote(spec) +
                                       " in the header (--label-column)");
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
  std::string_view rest_;  // the text not yet parsed
  std::string_view all_;   // the text after the byte order mark, trailing blanks dropped
  uint32_t line_number_ = 0;
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
