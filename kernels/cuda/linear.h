// Torch-free launchers of the products y = x W^T on CUDA: the float32 -> bfloat16 split
// (split_bf16.cu) and the cuBLAS products without bias (cublas_products.cpp). Raw pointers, sizes,
// a stream or a cuBLAS handle bound to one, so they compile with any nvcc and C++ compiler, with or
// without a CUDA-enabled libtorch. (The small-batch kernels, which fuse the chain:
// skinny/skinny.h.)
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/bf16_split.h"

namespace fusedlinear {

// hi[i], lo[i] = split::split_bf16(v[i]) for i < n (bfloat16 bits; lo may be null: hi only); with
// `third` given (and lo), the three-way split: hi[i], lo[i], third[i] = split_bf16_three(v[i])'s
// hi, mid, lo. 16-byte accesses when the pointers are 16-byte aligned. Returns the launch's error.
cudaError_t launch_split_bf16_parts(const float* v, void* hi, void* lo, void* third, int64_t n,
                                    cudaStream_t stream);
inline cudaError_t launch_split_bf16(const float* v, void* hi, void* lo, int64_t n,
                                     cudaStream_t stream) {
  return launch_split_bf16_parts(v, hi, lo, nullptr, n, stream);
}

// How W [n, k] lies in memory: row-major [n, k] as nn.Linear keeps it (output-major), or the
// transpose of a row-major [k, n] (input-major).
enum class WeightMajor { kOutput, kInput };

// y [m, n] row-major float32 = x W^T from bfloat16 parts on the tensor cores, float32
// accumulation and output, each operand split in `parts` (1, 2 or 3) parts, x_parts[0] and
// w_parts[0] the hi parts. Every product of parts i and j with i + j < parts is formed, those of
// larger i + j first:
//   1 part:   y = x_hi w_hi^T                                       (bf16)
//   2 parts:  y = x_lo w_hi^T;  y += x_hi w_lo^T;  y += x_hi w_hi^T    (bf16x3)
//   3 parts:  the three of i + j = 2, the two of i + j = 1, x_hi w_hi^T (bf16x6)
// Each product is accumulated in float32 on its own and added to y once (beta = 1), smallest
// first, so the small terms are not rounded against the large one's partial sums. x parts:
// [m, k] row-major. The handle's stream is the one the products run on.
cublasStatus_t gemm_bf16_parts(cublasHandle_t handle, int m, int n, int k, int parts,
                               const void* const* x_parts, const void* const* w_parts,
                               WeightMajor w_major, float* y);

// Each sum of y [m, n] (row-major, 16-byte aligned) that is inf or NaN, formed again as eager's
// from `operands` (split::eager_sum_if_not_finite: the x and W parts the split products read);
// finite sums are left as they are. One pass over y, after the products; nothing where operands
// has fewer than two parts. Returns the launch's error.
cudaError_t launch_eager_non_finite_sums(float* y, int64_t m, int64_t n,
                                         const split::SplitOperands& operands, cudaStream_t stream);

// y [m, n] = x W^T in float32 with TF32 tensor-core products (operands read as TF32, 10 explicit
// significand bits; float32 accumulation).
cublasStatus_t gemm_tf32(cublasHandle_t handle, int m, int n, int k, const float* x, const float* w,
                         WeightMajor w_major, float* y);

}  // namespace fusedlinear
