// Torch-free launchers of the products y = x W^T on CUDA: the float32 -> bfloat16 split
// (split_bf16.cu) and the cuBLAS products without bias (cublas_products.cpp). Raw pointers, sizes,
// a stream or a cuBLAS handle bound to one, so they compile with any nvcc and C++ compiler, with or
// without a CUDA-enabled libtorch. (The small-batch kernels, which fuse the chain:
// skinny/skinny.h.)
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

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

}  // namespace fusedlinear
