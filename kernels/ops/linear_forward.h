// One Linear's fused forward as its GEMM plan says (gemm_plan.h): the products cuBLAS or the CPU's
// GEMM forms, then the fused epilogue; or the whole forward in one op (the small-batch kernels,
// the Hopper GEMM). The modules (LinearChain) and the whole-model op both run a Linear here, so
// a model runs the same from C++ and through the op.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/ops/gemm_plan.h"

namespace fusedlinear {

// W [out, in] in the model's dtype and, for the modes that take them, its bfloat16 parts: bf16's
// hi; bf16x3's hi and lo (split_bf16); bf16x6's hi, mid and lo (split_bf16_three). Undefined
// where the mode takes none.
struct LinearWeights {
  torch::Tensor weight, hi, mid, lo;
};

// How many bfloat16 parts of W `precision` takes: bf16 1, bf16x3 2, bf16x6 3, ieee and tf32 none.
int split_weight_parts(Precision precision);

// x's device as the plan needs it, and x's rows (the product of its leading dimensions).
GemmDevice gemm_device_of(const torch::Tensor& x);
int64_t rows_of(const torch::Tensor& x);

// x W^T without bias, in `products` (cuBLAS's or the CPU's GEMM; the split modes' ops).
torch::Tensor linear_products(const torch::Tensor& x, const LinearWeights& w, Precision products);

// What a layer adds to a Linear's forward: a gated layer's other product, multiplied in the
// epilogue's pass where the plan has one (fused_epilogue), else after; a residual (the model's
// input), added by the GEMM itself (beta = 1) where cuBLAS forms the float32 or 16-bit products
// of a Linear alone, else after.
struct LayerTerms {
  c10::optional<torch::Tensor> gate, residual;
};

// chain(x W^T + bias, params) [* gate] [+ residual] as `plan` says: the small-batch kernels' or
// the Hopper GEMM's whole forward, or linear_products then the fused epilogue. `chain`: the ops'
// chain argument (a compiled declaration's name or a chain spec; "" for the Linear alone);
// `params` in its slot order; `terms` shaped like the output.
torch::Tensor linear_forward(const GemmPlan& plan, const torch::Tensor& x, const LinearWeights& w,
                             const c10::optional<torch::Tensor>& bias,
                             const std::vector<torch::Tensor>& params, const std::string& chain,
                             const LayerTerms& terms = {});

// A gated layer, chain(x W^T + bias, params) * (x G^T + gate_bias), G the gate's weights (its
// parts for plan.products as W's): where the plan takes the Hopper GEMM, both products in one
// kernel (ops.h: fused_gemm_epilogue_gated), the same bits as linear_forward with the gate's
// output as LayerTerms::gate; otherwise that, `gate_forward()` giving the gate's output.
torch::Tensor linear_forward_gated(const GemmPlan& plan, const torch::Tensor& x,
                                   const LinearWeights& w, const c10::optional<torch::Tensor>& bias,
                                   const std::vector<torch::Tensor>& params,
                                   const std::string& chain, const LinearWeights& gate,
                                   const c10::optional<torch::Tensor>& gate_bias,
                                   const std::function<torch::Tensor()>& gate_forward);

}  // namespace fusedlinear
