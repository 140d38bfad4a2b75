#include "app/report.h"

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
  rule.reserve(widths.size());
  for (size_t width : widths) rule.emplace_back(width, '-');
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

double max_abs_finite(const torch::Tensor& t) {
  if (t.numel() == 0) return 0.0;
  const torch::Tensor finite = t.abs().masked_select(torch::isfinite(t));
  return finite.numel() ? finite.max().item<double>() : 0.0;
}

NonFinite count_non_finite(const torch::Tensor& eager, const torch::Tensor& fused) {
  const auto count = [](const torch::Tensor& mask) { return mask.sum().item<int64_t>(); };
  NonFinite n;
  n.eager_nan = count(torch::isnan(eager));
  n.eager_inf = count(torch::isinf(eager));
  n.fused_nan = count(torch::isnan(fused));
  n.fused_inf = count(torch::isinf(fused));
  n.same_positions = torch::equal(torch::isnan(eager), torch::isnan(fused)) &&
                     torch::equal(torch::isposinf(eager), torch::isposinf(fused)) &&
                     torch::equal(torch::isneginf(eager), torch::isneginf(fused));
  return n;
}

std::string NonFinite::describe() const {
  const auto counts = [](int64_t nan, int64_t inf) {
    return std::to_string(nan) + " NaN and " + std::to_string(inf) + " inf";
  };
  return counts(eager_nan, eager_inf) + " in eager's output, " + counts(fused_nan, fused_inf) +
         " in fused's, " + (same_positions ? "at the same positions" : "at different positions");
}

nlohmann::ordered_json NonFinite::json() const {
  return {{"eager_nan", eager_nan},
          {"eager_inf", eager_inf},
          {"fused_nan", fused_nan},
          {"fused_inf", fused_inf},
          {"same_positions", same_positions}};
}

OutputDifference compare_outputs(const torch::Tensor& got, const torch::Tensor& want, double atol,
                                 double rtol) {
  // The float64 reference is computed on the CPU: compared where the output lies.
  const torch::Tensor g = got.to(torch::kFloat64), w = want.to(got.device(), torch::kFloat64);
  const torch::Tensor finite = g.isfinite().logical_and(w.isfinite());
  const torch::Tensor diff = torch::where(finite, (g - w).abs(), torch::zeros_like(g));
  OutputDifference d;
  d.max_abs = max_abs_finite(diff);
  d.max_rel = max_abs_finite(diff / w.abs().clamp_min(std::max(atol, 1e-30)));
  d.non_finite = count_non_finite(w, g);
  d.allclose = d.non_finite.same_positions &&
               torch::allclose(torch::where(finite, g, torch::zeros_like(g)),
                               torch::where(finite, w, torch::zeros_like(w)), rtol, atol);
  return d;
}

nlohmann::ordered_json difference_json(const OutputDifference& d) {
  return {{"max_abs", d.max_abs},
          {"max_rel", d.max_rel},
          {"allclose", d.allclose},
          {"non_finite", d.non_finite.json()}};
}

std::string nonfinite_cell(const NonFinite& n) {
  const int64_t got = n.fused_nan + n.fused_inf, want = n.eager_nan + n.eager_inf;
  if (got == 0 && want == 0) return "0";
  return std::to_string(got) +
         (n.same_positions ? " (as eager)" : " (eager " + std::to_string(want) + ")");
}

}  // namespace fusedlinear
