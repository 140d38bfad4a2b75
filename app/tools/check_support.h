// What the tools that run exported models from C++ share (run_pt2.cpp, check_serving.cpp): the
// comparison with PyTorch's output and the one-line error.
#pragma once

#include <torch/types.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace fusedlinear {

// The largest |got - want|, in float64 on the CPU. Different shapes are an error: broadcasting
// would compare something else.
inline double max_abs_difference(const torch::Tensor& got, const torch::Tensor& want) {
  if (got.sizes() != want.sizes()) {
    throw std::runtime_error("output " + c10::str(got.sizes()) + " where PyTorch's is " +
                             c10::str(want.sizes()));
  }
  if (got.numel() == 0) return 0.0;
  return (got.detach().cpu().to(torch::kFloat64) - want.detach().cpu().to(torch::kFloat64))
      .abs()
      .max()
      .item<double>();
}

// An error's first line; libtorch's without the backtrace and "Exception raised from" lines.
inline std::string error_line(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  const std::string message = c10_error ? c10_error->what_without_backtrace() : error.what();
  return message.substr(0, message.find('\n'));
}

}  // namespace fusedlinear
