// The cuBLAS products of the split-precision linear layers (linear_cuda.h): y = x W^T as bfloat16
// products with float32 accumulation (one, or three accumulated into y), or as TF32 products.
#include "kernels/cuda/linear.h"

namespace fusedlinear {
namespace {

// cuBLAS is column-major: row-major y [m, n] is column-major y^T [n, m] = W x^T, so W is the
// first operand (transposed when it is nn.Linear's row-major [n, k]) and x^T the second.
cublasStatus_t gemm(cublasHandle_t handle, int m, int n, int k, const void* x, const void* w,
                    cudaDataType_t operand_type, WeightMajor w_major, float beta, float* y,
                    cublasComputeType_t compute) {
  const float alpha = 1.0f;
  const bool output_major = w_major == WeightMajor::kOutput;
  return cublasGemmEx(handle, output_major ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k,
                      &alpha, w, operand_type, output_major ? k : n, x, operand_type, k, &beta, y,
                      CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT);
}

}  // namespace

cublasStatus_t gemm_bf16_parts(cublasHandle_t handle, int m, int n, int k, const void* x_hi,
                               const void* x_lo, const void* w_hi, const void* w_lo,
                               WeightMajor w_major, float* y) {
  const auto product = [&](const void* x, const void* w, float beta) {
    return gemm(handle, m, n, k, x, w, CUDA_R_16BF, w_major, beta, y, CUBLAS_COMPUTE_32F);
  };
  if (!x_lo || !w_lo) return product(x_hi, w_hi, 0.0f);
  cublasStatus_t status = product(x_lo, w_hi, 0.0f);
  if (status == CUBLAS_STATUS_SUCCESS) status = product(x_hi, w_lo, 1.0f);
  if (status == CUBLAS_STATUS_SUCCESS) status = product(x_hi, w_hi, 1.0f);
  return status;
}

cublasStatus_t gemm_tf32(cublasHandle_t handle, int m, int n, int k, const float* x, const float* w,
                         WeightMajor w_major, float* y) {
  return gemm(handle, m, n, k, x, w, CUDA_R_32F, w_major, 0.0f, y, CUBLAS_COMPUTE_32F_FAST_TF32);
}

}  // namespace fusedlinear
