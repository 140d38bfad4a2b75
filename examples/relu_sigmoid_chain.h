// The outside model's activations, torch-free so that its .cu compiles without libtorch: each a
// functor (as fusedlinear's own, activations.h), the chain their composition.
#pragma once

#include <fusedlinear/activations.h>

#include <cstdint>

#ifdef EXAMPLE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace example {

// torch.relu: max(x, 0), NaN kept.
struct Relu {
  FL_HOST_DEVICE float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};

// torch.sigmoid: 1 / (1 + exp(-x)), with fusedlinear's exp and division (the hardware's on the
// GPU, libm's and exact on the host). x = -inf gives 1 / inf = 0.
struct Sigmoid {
  FL_HOST_DEVICE float operator()(float x) const {
    return fusedlinear::act::fast_div(1.0f, 1.0f + fusedlinear::act::fast_exp(-x));
  }
};

using ReluSigmoidActivations = fusedlinear::act::Chain<Relu, Sigmoid>;

#ifdef EXAMPLE_WITH_CUDA
// out = ReluSigmoidActivations(y + bias) on `stream` (relu_sigmoid_cuda.cu); float32, row-major
// [rows, cols], bias may be null.
cudaError_t launch_relu_sigmoid(const float* y, const float* bias, float* out, int64_t rows,
                                int64_t cols, cudaStream_t stream);
#endif

}  // namespace example
