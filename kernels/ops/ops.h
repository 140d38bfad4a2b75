// The ops of fusedlinear, each declared once (TORCH_LIBRARY in ops.cpp) with CPU and CUDA
// implementations registered separately (ops.cpp, linear_cpu.cpp; ops_cuda.cpp):
//   fusedlinear::swish_chain, fusedlinear::mish_mish   the fused epilogues
//   fusedlinear::split_bf16                            float32 -> bfloat16 hi + lo
//   fusedlinear::linear_bf16x3, linear_bf16, linear_tf32
//                                                      x W^T from tensor-core products
//   fusedlinear::linear_swish_chain, linear_mish_mish  a whole forward for few rows (the skinny
//                                                      kernel: W read once, the chain fused)
// These wrappers call the dispatcher, which picks the implementation from the inputs' device.
#pragma once

#include <torch/types.h>

#include <tuple>
#include <vector>

#include "kernels/math/chains.h"

namespace fusedlinear {

// SwishChain's epilogue: hardtanh(gelu(tanh(swish((y + bias) + add_value)))) in one pass.
// y: [..., features] float32/float16/bfloat16; bias (optional) and add_value: [features],
// same dtype and device as y. Returns a new contiguous tensor shaped like y.
torch::Tensor fused_swish_chain(const torch::Tensor& y, const torch::Tensor& add_value,
                                const c10::optional<torch::Tensor>& bias = c10::nullopt);

// MishMish's epilogue: mish(mish(y + bias)) in one pass. Same contract as above.
torch::Tensor fused_mish_mish(const torch::Tensor& y,
                              const c10::optional<torch::Tensor>& bias = c10::nullopt);

// v ~= hi + lo, both bfloat16 (kernels/bf16_split.h): hi = bfloat16(v), lo = bfloat16(v - hi);
// |v - (hi + lo)| <= 2^-17 |v| for normal v; +-inf and NaN in hi with lo = 0. v: float32, any
// shape; hi and lo are new contiguous tensors of v's shape.
std::tuple<torch::Tensor, torch::Tensor> split_bf16(const torch::Tensor& v);

// x W^T (nn.Linear without bias) to about float32's accuracy from bfloat16 tensor-core products:
// x is split per call, W is given split (w_hi, w_lo = split_bf16(W)), and
//   y = x_lo w_hi^T + x_hi w_lo^T + x_hi w_hi^T
// with each product accumulated in float32 on its own, smallest first (the x_lo w_lo^T term,
// ~2^-18 of each product, is left out). x: float32 [..., in]; w_hi, w_lo: bfloat16 [out, in];
// returns float32 [..., out]. On the CPU the same products are formed exactly in float32 and
// summed by float32 matrix products: an emulation for testing, slower than x W^T.
torch::Tensor linear_bf16x3(const torch::Tensor& x, const torch::Tensor& w_hi,
                            const torch::Tensor& w_lo);

// x W^T from bfloat16 operands (x rounded per call; w_hi = bfloat16(W)), float32 accumulation and
// output: about 2^-8 relative error per product. Same shapes as linear_bf16x3.
torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w_hi);

// x W^T with TF32 products (operands to 10 significand bits), float32 accumulation: about 2^-10
// relative error per product. x: float32 [..., in]; w: float32 [out, in]; returns [..., out].
torch::Tensor linear_tf32(const torch::Tensor& x, const torch::Tensor& w);

// A model's whole forward in one op, for inputs of few rows (batch 1-64), where the GEMM is bound
// by reading W: out = chain(x W^T + bias [+ add_value]) with W read once, the products summed in
// float32 and the epilogue applied before the one store (kernels/skinny_linear.cu). x [..., in]
// float32, float16 or bfloat16; w [out, in] of x's dtype, or, for float32 x, bfloat16 parts: w
// alone (w = bfloat16(W): the bf16 mode's products, as linear_bf16) or w and w_lo (bf16x3's split
// weight: bf16x3's products, as linear_bf16x3); bias and add_value [out] of x's dtype. Returns
// [..., out] in x's dtype. Results are bitwise the same run to run. W is read as a contiguous
// [out, in] tensor (a transposed one is copied first). On CUDA, 16-bit W runs on the tensor cores
// where the GPU has them (sm_80 on) and rows are 16-byte aligned. On the CPU: the same products
// in float32 then the fused epilogue (for testing; no faster than the separate ops).
torch::Tensor fused_linear_swish_chain(const torch::Tensor& x, const torch::Tensor& w,
                                       const c10::optional<torch::Tensor>& w_lo,
                                       const c10::optional<torch::Tensor>& bias,
                                       const torch::Tensor& add_value);
torch::Tensor fused_linear_mish_mish(const torch::Tensor& x, const torch::Tensor& w,
                                     const c10::optional<torch::Tensor>& w_lo,
                                     const c10::optional<torch::Tensor>& bias);

namespace detail {
// Checks shared by the CPU and CUDA implementations: dtype, device, per-column vector shapes.
// Each failure says what was expected and what came.
void check_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& y,
                           const c10::optional<torch::Tensor>& bias,
                           const c10::optional<torch::Tensor>& shift);

// The ElementType of a float32, float16 or bfloat16 tensor (ATen's AT_DISPATCH_SWITCH: any
// other dtype throws; the ops check dtypes with clearer messages before). The one place the
// torch side maps a dtype.
ElementType element_type_of(const torch::Tensor& t);

// The CPU implementation of both epilogues (the CUDA one is in ops_cuda.cpp).
torch::Tensor fused_epilogue_cpu(EpilogueKind kind, const torch::Tensor& y,
                                 const c10::optional<torch::Tensor>& bias,
                                 const c10::optional<torch::Tensor>& shift);

// Checks of the linear ops: x float32 [..., in] on `device`; w [out, in] of `w_dtype` on the same
// device; w_lo, where given, like w. Each failure says what was expected and what came.
void check_linear_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                         const torch::Tensor& w, torch::ScalarType w_dtype,
                         const torch::Tensor* w_lo = nullptr);
// Checks of the fused linear ops (fused_linear_swish_chain above): each failure says what was
// expected and what came.
void check_fused_linear_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                               const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
                               const c10::optional<torch::Tensor>& bias,
                               const c10::optional<torch::Tensor>& shift);
// x's leading dimensions with `out_features` last: the shape of x W^T.
std::vector<int64_t> linear_output_shape(const torch::Tensor& x, int64_t out_features);
// x [..., in] as a contiguous [rows, in] matrix (rows: the product of the leading dimensions).
torch::Tensor linear_rows(const torch::Tensor& x);

// The CPU implementations (linear_cpu.cpp).
std::tuple<torch::Tensor, torch::Tensor> split_bf16_cpu(const torch::Tensor& v);
torch::Tensor linear_bf16x3_cpu(const torch::Tensor& x, const torch::Tensor& w_hi,
                                const torch::Tensor& w_lo);
torch::Tensor linear_bf16_cpu(const torch::Tensor& x, const torch::Tensor& w_hi);
torch::Tensor linear_tf32_cpu(const torch::Tensor& x, const torch::Tensor& w);
}  // namespace detail

}  // namespace fusedlinear
