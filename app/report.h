// Plain-text tables for the terminal (columns aligned, numbers right-aligned) and small
// formatting helpers shared by the commands.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "app/timing.h"
#include "modules/output/output_file.h"

namespace fusedlinear {

class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void add_row(std::vector<std::string> row);
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A timing as JSON: median_us, p10_us, p90_us, min_us, samples.
nlohmann::ordered_json timing_json(const TimingStats& t);

// printf-style "%.*g" / "%.*f" / "%.*e" helpers returning std::string.
std::string fixed(double value, int decimals);
std::string scientific(double value, int decimals);

// The largest |t| over t's finite elements, 0 when it has none: NaN and infinities are counted
// apart (NonFinite), never printed as an error of "nan".
double max_abs_finite(const torch::Tensor& t);

// The NaN and infinite elements of two outputs of the same shape (eager's and fused's).
struct NonFinite {
  int64_t eager_nan = 0, eager_inf = 0, fused_nan = 0, fused_inf = 0;
  bool same_positions = true;  // NaN where the other has NaN, +inf where +inf, -inf where -inf
  bool any() const { return eager_nan + eager_inf + fused_nan + fused_inf > 0; }
  // "3 NaN and 1 inf in eager's output, 3 NaN and 1 inf in fused's, at the same positions".
  std::string describe() const;
  nlohmann::ordered_json json() const;
};
NonFinite count_non_finite(const torch::Tensor& eager, const torch::Tensor& fused);

// An output against a reference (`want`: eager's, or a float64 evaluation): the largest absolute
// and relative differences over the positions where both are finite (relative to
// max(|want|, atol), so values near zero are judged by the absolute difference, as allclose
// does), their NaN and infinities (want as "eager", got as "fused"), and the verdict:
// allclose(got, want, rtol, atol) on the finite positions, the others the same in both.
struct OutputDifference {
  double max_abs = 0, max_rel = 0;
  NonFinite non_finite;
  bool allclose = true;
};
OutputDifference compare_outputs(const torch::Tensor& got, const torch::Tensor& want, double atol,
                                 double rtol);
nlohmann::ordered_json difference_json(const OutputDifference& d);
// A table's NaN/inf column: "0"; "48 (as eager)" where the reference has them at the same
// positions; "48 (eager 0)" where it does not.
std::string nonfinite_cell(const NonFinite& n);

}  // namespace fusedlinear
