// Torch-free launchers of the linear layers on CUDA: the float32 -> bfloat16 split
// (bf16_split.cu), the cuBLAS products y = x W^T without bias (linear_cublas.cpp), and the skinny
// kernels that compute a whole fused forward for few rows (skinny_linear.cu). Raw
// pointers, sizes, a stream or a cuBLAS handle bound to one, so they compile with any nvcc and
// C++ compiler, with or without a CUDA-enabled libtorch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/chains.h"

namespace fusedlinear {

// hi[i], lo[i] = split::split_bf16(v[i]) for i < n (bfloat16 bits; lo may be null: hi only).
// 16-byte accesses when v, hi and lo are 16-byte aligned. Returns the launch's error.
cudaError_t launch_split_bf16(const float* v, void* hi, void* lo, int64_t n, cudaStream_t stream);

// How W [n, k] lies in memory: row-major [n, k] as nn.Linear keeps it (output-major), or the
// transpose of a row-major [k, n] (input-major).
enum class WeightMajor { kOutput, kInput };

// y [m, n] row-major float32 = x W^T from bfloat16 parts on the tensor cores, float32
// accumulation and output:
//   x_lo, w_lo null:  y = x_hi w_hi^T                                     (bf16)
//   both given:       y = x_lo w_hi^T;  y += x_hi w_lo^T;  y += x_hi w_hi^T  (bf16x3)
// Each product is accumulated in float32 on its own and added to y once (beta = 1), smallest
// first, so the small terms are not rounded against the large one's partial sums. x parts:
// [m, k] row-major. The handle's stream is the one the products run on.
cublasStatus_t gemm_bf16_parts(cublasHandle_t handle, int m, int n, int k, const void* x_hi,
                               const void* x_lo, const void* w_hi, const void* w_lo,
                               WeightMajor w_major, float* y);

// y [m, n] = x W^T in float32 with TF32 tensor-core products (operands read as TF32, 10 explicit
// significand bits; float32 accumulation).
cublasStatus_t gemm_tf32(cublasHandle_t handle, int m, int n, int k, const float* x, const float* w,
                         WeightMajor w_major, float* y);

// What the skinny kernel reads as W, and so which products it forms: W in x's type (float32 FMAs;
// for 16-bit x, tensor-core products); or, for float32 x, W's bfloat16 hi part alone (the bf16
// mode: x rounded to bfloat16, x_hi w_hi) or hi and lo (bf16x3: x split as W was, x_lo w_hi +
// x_hi w_lo + x_hi w_hi, smallest first), as gemm_bf16_parts forms them.
enum class SkinnyWeight { kAsInput, kBf16, kBf16HiLo };

// One fused forward for few rows:
//   out[m, n] = Activations((sum_k x[m, k] W[n, k] + bias[n]) + shift[n])
// with the chain `kind` names for `type`'s precision (epilogues.h). x [rows, in_features]
// row-major; W (and w_lo) [out_features, in_features] row-major (output-major); bias and shift
// [out_features] or null; x, bias, shift and out hold `type`. Sums in float32. 16-bit W takes the
// tensor cores (mma.sync) on sm_80 and newer when W's and x's rows are 16-byte aligned (in_features
// a multiple of 8); otherwise float32 FMAs of the same parts.
struct SkinnyLinearArgs {
  EpilogueKind kind = EpilogueKind::kMishMish;
  ElementType type = ElementType::kFloat32;
  SkinnyWeight weight = SkinnyWeight::kAsInput;
  const void* x = nullptr;
  const void* w = nullptr;
  const void* w_lo = nullptr;  // with kBf16HiLo only
  const void* bias = nullptr;
  const void* shift = nullptr;
  void* out = nullptr;
  int64_t rows = 0, out_features = 0, in_features = 0;
  // From sm_90 the kernels that stage W and x through shared memory have the TMA copy them where
  // the driver can describe the matrices; false copies them thread by thread, as older GPUs do
  // (the same bits: for tests and comparisons).
  bool tile_copies = true;
};

// How many floats of workspace launch_skinny_linear needs for `args` on the current device: the
// partial sums where k is split over blocks, and for bf16x3 from 9 rows x's bfloat16 parts (0
// when neither). Returns cudaErrorInvalidValue for a weight the type does not take (kBf16 or
// kBf16HiLo with 16-bit x), cudaErrorInvalidConfiguration for more rows than the grid takes
// (16 * 65535; 64 * 65535 for 16-bit W on the tensor cores, 32 * 65535 for bf16x3 there).
cudaError_t plan_skinny_linear(const SkinnyLinearArgs& args, int64_t& workspace_floats);

// Launches the skinny forward on `stream` (one kernel; before it, x's split where bf16x3 takes the
// staged kernel; after it, where k is split, the partial sums' sum in a fixed order and the
// epilogue); results are bitwise the same run to run. The workspace: plan_skinny_linear's floats
// (null when 0). Returns the launches' error.
cudaError_t launch_skinny_linear(const SkinnyLinearArgs& args, float* workspace,
                                 cudaStream_t stream);

}  // namespace fusedlinear
