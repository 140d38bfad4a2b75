#include "report.h"

#include <algorithm>
#include <cstdio>

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

}  // namespace fusedlinear
