// The floors of a model's forward that compare and bench report beside it: the model's GEMMs
// alone as libtorch runs them (addmm, bias included: eager's GEMMs), and a copy of every weight,
// the memory system's pace on the bytes any forward must read.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "app/timing.h"
#include "modules/layered_model.h"

namespace fusedlinear {

// Reading the weights at a copy's pace: a copy moves each byte twice (read and written).
inline double weight_read_us(const TimingStats& weight_copy) { return weight_copy.median_us / 2; }

struct ForwardFloors {
  TimingStats gemms, weight_copy;
  double gemm_flops = 0;  // the GEMMs' 2 x multiply-adds at the rows timed

  // Times the GEMMs on input(i) and the copy of every weight, in turns of their own, for inputs
  // of `rows` rows. Not in the forwards' turns: they read the eager model's weights, which would
  // then stay in the cache for its forward and not for the fused models' own copies.
  static ForwardFloors time(const torch::Device& device, int warmup, int iters,
                            LayeredModelImpl& model,
                            const std::function<const torch::Tensor&(int)>& input, int64_t rows);

  double gemm_gflops() const { return gemm_flops / gemms.median_us / 1e3; }
  double weight_read_us() const { return fusedlinear::weight_read_us(weight_copy); }
  // gemm_addmm, gemm_gflops, weight_copy, weight_read_us.
  nlohmann::ordered_json json() const;
};

}  // namespace fusedlinear
