// The cuBLAS products of the split-precision linear layers (linear_cuda.h): y = x W^T as bfloat16
// products with float32 accumulation (one, or three or six accumulated into y), or as TF32
// products.
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

cublasStatus_t gemm_bf16_parts(cublasHandle_t handle, int m, int n, int k, int parts,
                               const void* const* x_parts, const void* const* w_parts,
                               WeightMajor w_major, float* y) {
  if (parts < 1 || parts > 3) return CUBLAS_STATUS_INVALID_VALUE;
  float beta = 0.0f;  // the first product writes y, the others add to it
  for (int order = parts - 1; order >= 0; --order) {
    for (int i = order; i >= 0; --i) {
      const cublasStatus_t status = gemm(handle, m, n, k, x_parts[i], w_parts[order - i],
                                         CUDA_R_16BF, w_major, beta, y, CUBLAS_COMPUTE_32F);
      if (status != CUBLAS_STATUS_SUCCESS) return status;
      beta = 1.0f;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t gemm_tf32(cublasHandle_t handle, int m, int n, int k, const float* x, const float* w,
                         WeightMajor w_major, float* y) {
  return gemm(handle, m, n, k, x, w, CUDA_R_32F, w_major, 0.0f, y, CUBLAS_COMPUTE_32F_FAST_TF32);
}

}  // namespace fusedlinear
