// A self-contained SVG bar chart (no scripts, no external fonts or styles) that any browser opens:
// horizontal bars grouped per row, one bar per series, a value axis with ticks, an optional
// dashed reference line (1.0 for speedups) and a legend.
#pragma once

#include <string>
#include <vector>

namespace fusedlinear {

struct BarChartOptions {
  std::string subtitle;                   // a second, smaller line under the title (device, date)
  std::string axis_label;                 // under the value axis
  double reference = 1.0;                 // dashed line at this value; NaN: none
  std::string value_suffix = "\xC3\x97";  // after each bar's value label ("×")
  int value_decimals = 2;
};

// values[g][s]: the bar of series s in group g; NaN (or a missing entry) draws no bar. The value
// axis starts at 0 and ends past the largest value and the reference. All text is XML-escaped.
std::string render_bar_chart(const std::string& title, const std::vector<std::string>& groups,
                             const std::vector<std::string>& series,
                             const std::vector<std::vector<double>>& values,
                             const BarChartOptions& options = {});

// `text` with & < > " ' replaced by their XML entities.
std::string xml_escape(const std::string& text);

}  // namespace fusedlinear
