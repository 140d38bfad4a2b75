// The fused epilogue ops, declared once as `fusedlinear::swish_chain` and
// `fusedlinear::mish_mish` (TORCH_LIBRARY in ops.cpp), with CPU (ops.cpp) and CUDA
// (ops_cuda.cpp) implementations registered separately. These wrappers call the dispatcher,
// which picks the implementation from the input's device.
#pragma once

#include <torch/types.h>

#include "epilogues.h"

namespace fusedlinear {

// SwishChain's epilogue: hardtanh(gelu(tanh(swish((y + bias) + add_value)))) in one pass.
// y: [..., features] float32/float16/bfloat16; bias (optional) and add_value: [features],
// same dtype and device as y. Returns a new contiguous tensor shaped like y.
torch::Tensor fused_swish_chain(const torch::Tensor& y, const torch::Tensor& add_value,
                                const c10::optional<torch::Tensor>& bias = c10::nullopt);

// MishMish's epilogue: mish(mish(y + bias)) in one pass. Same contract as above.
torch::Tensor fused_mish_mish(const torch::Tensor& y,
                              const c10::optional<torch::Tensor>& bias = c10::nullopt);

namespace detail {
// Checks shared by the CPU and CUDA implementations: dtype, device, per-column vector shapes.
// Each failure says what was expected and what came.
void check_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& y,
                           const c10::optional<torch::Tensor>& bias,
                           const c10::optional<torch::Tensor>& shift);

// The CPU implementation of both epilogues (the CUDA one is in ops_cuda.cpp).
torch::Tensor fused_epilogue_cpu(EpilogueKind kind, const torch::Tensor& y,
                                 const c10::optional<torch::Tensor>& bias,
                                 const c10::optional<torch::Tensor>& shift);
}  // namespace detail

}  // namespace fusedlinear
