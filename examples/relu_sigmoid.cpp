// The outside model's module: eager ops and its fused epilogue on the CPU or the GPU.
#include "relu_sigmoid.h"

#include <ATen/Parallel.h>
#include <fusedlinear/fused_epilogue_cpu.h>

#ifdef EXAMPLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace example {

ReluSigmoidImpl::ReluSigmoidImpl(int64_t in_features, int64_t out_features) {
  linear_ = register_module("linear", torch::nn::Linear(in_features, out_features));
}

torch::Tensor ReluSigmoidImpl::epilogue_eager(const torch::Tensor& linear_out) {
  return torch::sigmoid(torch::relu(linear_out));
}

torch::Tensor ReluSigmoidImpl::fused_chain(const torch::Tensor& y,
                                           const c10::optional<torch::Tensor>& bias) {
  TORCH_CHECK(y.scalar_type() == torch::kFloat32, "ReluSigmoid: expected float32, got ",
              y.scalar_type());
  const torch::Tensor input = y.contiguous();
  const torch::Tensor b = bias && bias->defined() ? bias->contiguous() : torch::Tensor();
  torch::Tensor out = torch::empty_like(input);
  const int64_t cols = input.size(-1), n = input.numel();
  const float* bias_data = b.defined() ? b.data_ptr<float>() : nullptr;
  if (input.is_cuda()) {
#ifdef EXAMPLE_WITH_CUDA
    const cudaError_t err =
        launch_relu_sigmoid(input.data_ptr<float>(), bias_data, out.data_ptr<float>(), n / cols,
                            cols, at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "ReluSigmoid: ", cudaGetErrorString(err));
    return out;
#else
    TORCH_CHECK(false, "ReluSigmoid: this example was built without CUDA");
#endif
  }
  at::parallel_for(0, n, int64_t{1} << 15, [&](int64_t begin, int64_t end) {
    fusedlinear::cpu::scalar_span<float, ReluSigmoidActivations>(
        input.data_ptr<float>(), bias_data, nullptr, out.data_ptr<float>(), cols, begin, end);
  });
  return out;
}

}  // namespace example
