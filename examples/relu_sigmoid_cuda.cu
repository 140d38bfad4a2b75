// The outside model's kernel: fusedlinear's fused-epilogue kernel template for its own chain.
#include <fusedlinear/fused_epilogue.cuh>

#include "relu_sigmoid_chain.h"

namespace example {

cudaError_t launch_relu_sigmoid(const float* y, const float* bias, float* out, int64_t rows,
                                int64_t cols, cudaStream_t stream) {
  // fusedlinear's float32 shape: one row per thread per step, 256 threads, two waves.
  using Shape = fusedlinear::cuda::LaunchShape<1, 256, 2>;
  return fusedlinear::cuda::launch_fused_epilogue_typed<float, Shape, ReluSigmoidActivations>(
      y, bias, nullptr, out, rows, cols, stream);
}

}  // namespace example
