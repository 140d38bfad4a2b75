#include "report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "cli.h"

namespace fusedlinear {

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}

void Table::add_row(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void Table::print(std::ostream& out) const {
  std::vector<size_t> widths(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    widths[c] = header_[c].size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  // The first column (names) is left-aligned, the rest (numbers) right-aligned.
  const auto print_row = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      out << (c == 0 ? row[c] + pad : pad + row[c]) << (c + 1 < row.size() ? "  " : "\n");
    }
  };
  print_row(header_);
  std::vector<std::string> rule;
  for (size_t width : widths) rule.push_back(std::string(width, '-'));
  print_row(rule);
  for (const auto& row : rows_) print_row(row);
}

nlohmann::ordered_json timing_json(const TimingStats& t) {
  return {{"median_us", t.median_us},
          {"p10_us", t.p10_us},
          {"p90_us", t.p90_us},
          {"min_us", t.min_us},
          {"samples", t.samples}};
}

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string scientific(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*e", decimals, value);
  return buffer;
}

// POSIX stat rather than std::filesystem: libtorch 2.11's libtorch.so exports its own copies of
// some std::filesystem functions, which crash when called from here (tests/test_support.h).
void check_output_path(const std::string& path, bool overwrite,
                       const std::vector<std::string>& inputs) {
  struct stat out;
  if (::stat(path.c_str(), &out) != 0) return;  // a new file
  for (const auto& input : inputs) {
    struct stat in;
    if (!input.empty() && ::stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev &&
        in.st_ino == out.st_ino) {
      throw UsageError(path + ": is also an input of this run; choose another output path");
    }
  }
  if (S_ISDIR(out.st_mode)) throw UsageError(path + ": is a directory, expected a file path");
  if (!overwrite) {
    throw UsageError(path + ": already exists; pass --overwrite to replace it");
  }
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp-fusedlinear";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::remove(temp.c_str());
      throw UsageError(path + ": cannot write");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    throw UsageError(path + ": cannot write");
  }
}

}  // namespace fusedlinear
