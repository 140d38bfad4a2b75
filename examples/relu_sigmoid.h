// A model defined outside fusedlinear with its public headers only: Linear -> ReLU -> Sigmoid, a
// LinearEpilogueModel whose fused epilogue runs its chain (relu_sigmoid_chain.h) on the CPU
// (fusedlinear's scalar loop) or the GPU (fusedlinear's kernel, relu_sigmoid_cuda.cu).
#pragma once

#include <fusedlinear/models.h>

#include "relu_sigmoid_chain.h"

namespace example {

class ReluSigmoidImpl : public fusedlinear::LinearEpilogueModel {
 public:
  ReluSigmoidImpl(int64_t in_features, int64_t out_features);
  torch::Tensor epilogue_eager(const torch::Tensor& linear_out) override;
  torch::Tensor fused_chain(const torch::Tensor& y,
                            const c10::optional<torch::Tensor>& bias) override;
  torch::nn::Linear& linear() override { return linear_; }

 private:
  torch::nn::Linear linear_{nullptr};
};
TORCH_MODULE(ReluSigmoid);

}  // namespace example
