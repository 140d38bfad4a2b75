// The fused-MLP kernel (kernels/cuda/mlp/) as the whole-model op runs it under gemm "mlp"
// (model_op.cpp): the model's layers as tensors, already checked by the op, and the CUDA call
// (mlp_cuda.cpp, in builds with CUDA).
#pragma once

#include <torch/types.h>

#include <vector>

#include "kernels/cuda/mlp/mlp_call.h"
#include "kernels/math/program.h"

namespace fusedlinear {

// One layer of a layered model: chain(x W^T + bias) [* gate].
struct MlpLayerTensors {
  torch::Tensor weight;  // [out, in]; a chunked Linear's [2 out, in]
  // A float32 W's bfloat16 parts in a split mode, as the per-layer path holds them (bf16: hi;
  // bf16x3: hi, lo); empty otherwise. The same for the gate's W.
  std::vector<torch::Tensor> weight_parts;
  c10::optional<torch::Tensor> bias;
  torch::Tensor gate_weight;  // a gated layer's own gate Linear; undefined otherwise
  std::vector<torch::Tensor> gate_weight_parts;
  c10::optional<torch::Tensor> gate_bias;
  int half = -1;                          // a chunked Linear: the half the chain takes
  const act::Program* program = nullptr;  // the layer's chain, as the interpreter runs it
  std::vector<torch::Tensor> params;      // the chain's parameters, in its slot order
};

// The whole forward of `layers` on CUDA x [..., in] in one launch of the kernel's `form`
// (gemm_plan.h: mlp_form) with `precision`'s products, x added to the output where `residual`:
// what the whole-model op computes layer by layer, up to the order of each sum (fused_mlp.cuh).
// The model must be one mlp_refusal (gemm_plan.h) accepts. `compiled`: the kernels compiled with
// the layers' chains in (kernels/cuda/jit/compiled_chains.h), or empty for the library's.
torch::Tensor fused_mlp_forward(const torch::Tensor& x, const std::vector<MlpLayerTensors>& layers,
                                bool residual, cuda::MlpForm form, Precision precision,
                                const cuda::MlpKernelOf& compiled);

}  // namespace fusedlinear
