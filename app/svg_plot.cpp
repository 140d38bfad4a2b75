#include "app/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace fusedlinear {
namespace {

const char* const kPalette[] = {"#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"};

std::string num(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// 1, 2 or 5 times a power of ten, near span / 6: five to eight ticks.
double tick_step(double span) {
  const double raw = span / 6;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

// Decimals that show a tick step exactly (0.25 -> 2, 5 -> 0).
int decimals_for(double step) {
  int decimals = 0;
  while (decimals < 6 && std::fabs(step * std::pow(10.0, decimals) -
                                   std::round(step * std::pow(10.0, decimals))) > 1e-6) {
    ++decimals;
  }
  return decimals;
}

// UTF-8 code points, for an estimate of a label's width.
size_t glyphs(const std::string& text) {
  return size_t(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_bar_chart(const std::string& title, const std::vector<std::string>& groups,
                             const std::vector<std::string>& series,
                             const std::vector<std::vector<double>>& values,
                             const BarChartOptions& options) {
  const auto value_at = [&](size_t g, size_t s) {
    return g < values.size() && s < values[g].size() ? values[g][s] : NAN;
  };
  const bool has_reference = std::isfinite(options.reference);
  double largest = has_reference ? options.reference : 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t s = 0; s < series.size(); ++s) {
      if (std::isfinite(value_at(g, s))) largest = std::max(largest, value_at(g, s));
    }
  }
  if (!(largest > 0)) largest = 1;
  const double step = tick_step(largest * 1.05);
  const double axis_max = std::ceil(largest * 1.05 / step) * step;
  const int tick_decimals = decimals_for(step);

  // Geometry (pixels): label column, plot area, rows of bars.
  size_t label_glyphs = 0;
  for (const auto& g : groups) label_glyphs = std::max(label_glyphs, glyphs(g));
  const double label_w = std::clamp(double(label_glyphs) * 7.0 + 20, 100.0, 380.0);
  const double width = 960, plot_x = label_w, plot_w = width - label_w - 70;
  const double bar_h = 14, bar_gap = 2, group_pad = 10;
  const double group_h = double(std::max<size_t>(series.size(), 1)) * (bar_h + bar_gap) + group_pad;
  const double plot_y = options.subtitle.empty() ? 70 : 88;
  const double plot_h = std::max(double(groups.size()), 1.0) * group_h;
  const double height = plot_y + plot_h + 58;
  const auto x_of = [&](double v) { return plot_x + plot_w * std::clamp(v / axis_max, 0.0, 1.0); };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width, 0) << "\" height=\""
      << num(height, 0) << "\" viewBox=\"0 0 " << num(width, 0) << " " << num(height, 0)
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << num(width / 2, 1) << "\" y=\"26\" text-anchor=\"middle\" font-size=\"17\""
      << " font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
  if (!options.subtitle.empty()) {
    svg << "<text x=\"" << num(width / 2, 1) << "\" y=\"46\" text-anchor=\"middle\" fill=\"#555\">"
        << xml_escape(options.subtitle) << "</text>\n";
  }
  // Legend, one swatch per series, in a row above the plot.
  double legend_x = plot_x;
  for (size_t s = 0; s < series.size(); ++s) {
    svg << "<rect x=\"" << num(legend_x, 1) << "\" y=\"" << num(plot_y - 22, 1)
        << "\" width=\"12\" height=\"12\" fill=\"" << kPalette[s % 6] << "\"/>"
        << "<text x=\"" << num(legend_x + 17, 1) << "\" y=\"" << num(plot_y - 12, 1) << "\">"
        << xml_escape(series[s]) << "</text>\n";
    legend_x += 17 + double(glyphs(series[s])) * 7.0 + 24;
  }
  // Alternate row shading, grid lines and tick labels.
  for (size_t g = 0; g < groups.size(); g += 2) {
    svg << "<rect x=\"0\" y=\"" << num(plot_y + double(g) * group_h, 1) << "\" width=\""
        << num(width, 0) << "\" height=\"" << num(group_h, 1) << "\" fill=\"#f3f4f7\"/>\n";
  }
  const double axis_y = plot_y + plot_h;
  for (int i = 0; double(i) * step <= axis_max + step * 1e-9; ++i) {
    const double v = double(i) * step, x = x_of(v);
    svg << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(plot_y, 1) << "\" x2=\"" << num(x, 1)
        << "\" y2=\"" << num(axis_y + 5, 1) << "\" stroke=\"#d0d0d0\"/>"
        << "<text x=\"" << num(x, 1) << "\" y=\"" << num(axis_y + 19, 1)
        << "\" text-anchor=\"middle\">" << num(v, tick_decimals) << "</text>\n";
  }
  svg << "<line x1=\"" << num(plot_x, 1) << "\" y1=\"" << num(axis_y, 1) << "\" x2=\""
      << num(plot_x + plot_w, 1) << "\" y2=\"" << num(axis_y, 1) << "\" stroke=\"#333\"/>\n";
  if (!options.axis_label.empty()) {
    svg << "<text x=\"" << num(plot_x + plot_w / 2, 1) << "\" y=\"" << num(axis_y + 40, 1)
        << "\" text-anchor=\"middle\">" << xml_escape(options.axis_label) << "</text>\n";
  }
  // The reference line under the bars, so that bars and labels stay readable over it.
  if (has_reference) {
    const double x = x_of(options.reference);
    svg << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(plot_y - 4, 1) << "\" x2=\"" << num(x, 1)
        << "\" y2=\"" << num(axis_y, 1)
        << "\" stroke=\"#222\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
  }
  // The bars, each with its value at the end, and the group's label on the left.
  for (size_t g = 0; g < groups.size(); ++g) {
    const double top = plot_y + double(g) * group_h + group_pad / 2;
    svg << "<text x=\"" << num(plot_x - 8, 1) << "\" y=\""
        << num(top + (group_h - group_pad) / 2 + 4, 1) << "\" text-anchor=\"end\">"
        << xml_escape(groups[g]) << "</text>\n";
    for (size_t s = 0; s < series.size(); ++s) {
      const double v = value_at(g, s);
      if (!std::isfinite(v)) continue;
      const double y = top + double(s) * (bar_h + bar_gap), x_end = x_of(v);
      svg << "<rect x=\"" << num(plot_x, 1) << "\" y=\"" << num(y, 1) << "\" width=\""
          << num(std::max(x_end - plot_x, 0.5), 1) << "\" height=\"" << num(bar_h, 1)
          << "\" fill=\"" << kPalette[s % 6] << "\"><title>"
          << xml_escape(groups[g] + ", " + series[s] + ": " + num(v, options.value_decimals) +
                        options.value_suffix)
          << "</title></rect>"
          << "<text x=\"" << num(x_end + 4, 1) << "\" y=\"" << num(y + bar_h - 3, 1)
          << "\" font-size=\"11\" paint-order=\"stroke\" stroke=\"white\" stroke-width=\"3\">"
          << num(v, options.value_decimals) << xml_escape(options.value_suffix) << "</text>\n";
    }
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace fusedlinear
