// What the CPU and CUDA implementations of the ops share (ops.cpp, ops_cuda.cpp): the checks of
// the epilogue's inputs, and the chain an op's `chain` argument names.
#pragma once

#include <torch/types.h>

#include "kernels/ops/chain_registry.h"

namespace fusedlinear {
namespace detail {

void check_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& y,
                           const c10::optional<torch::Tensor>& bias,
                           c10::ArrayRef<torch::Tensor> params, size_t chain_params);

// find_chain, its ChainSpecError as the op's error.
const ChainEntry& chain_for(const char* op, c10::string_view chain);

}  // namespace detail
}  // namespace fusedlinear
