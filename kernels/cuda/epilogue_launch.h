// Launcher for the fused epilogue on CUDA. Torch-free (raw pointers, sizes, a stream) so
// kernels/*.cu compile with any nvcc, with or without a CUDA-enabled libtorch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/chains.h"

namespace fusedlinear {

// out[r, c] = Activations((y[r, c] + bias[c]) + shift[c]) for a row-major [rows, cols] tensor.
// y, bias, shift and out all hold `type`; bias and shift may be null; out must not overlap y.
// Uses 16-byte loads and stores when cols and the pointers allow, else one element per access.
// Returns the launch's error (cudaSuccess when rows or cols is 0: nothing is launched).
cudaError_t launch_fused_epilogue(EpilogueKind kind, ElementType type, const void* y,
                                  const void* bias, const void* shift, void* out, int64_t rows,
                                  int64_t cols, cudaStream_t stream);

}  // namespace fusedlinear
