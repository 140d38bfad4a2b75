// torch::nn::Module equivalents of the two reference models (shared/reference_models.py).
//
// Each registers its parameters under the Python state-dict keys and has two forwards:
//   forward        the GEMM by libtorch (without bias), then one fused op for everything
//                  after it (bias, add_value and the activation chain: kernels/ops.h);
//   forward_eager  the unfused libtorch ops, one per Python op, in the Python order: the
//                  baseline the fused path is compared against.
// To deploy your own Linear + elementwise model, copy one of these and its epilogue.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace fusedlinear {

// How the Linear's weight W [out, in] lies in memory: nn.Linear's row-major [out, in]
// (output-major), or the transpose of a contiguous [in, out] (input-major).
enum class WeightLayout { kOutputMajor, kInputMajor };

// What the CLI, the benchmark and the tests need from any model here.
class LinearEpilogueModel : public torch::nn::Module {
 public:
  // The Python ops after nn.Linear, unfused (input: the Linear's output, bias included).
  virtual torch::Tensor epilogue_eager(const torch::Tensor& linear_out) = 0;
  // The same as one fused op; input: x @ W^T *without* the bias, which the op adds.
  virtual torch::Tensor epilogue_fused(const torch::Tensor& matmul_out) = 0;
  // The model's nn.Linear.
  virtual torch::nn::Linear& linear() = 0;

  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor forward_eager(const torch::Tensor& x);
  // x @ W^T, the GEMM of `forward` (no bias).
  torch::Tensor matmul_without_bias(const torch::Tensor& x);

  // The Linear's weight W [out, in] in `layout`: W itself when it is laid out so, else a copy.
  // Input-major is the same [out, in] tensor laid out as the transpose of a contiguous [in, out]
  // one, so that x @ W^T runs cuBLAS's NN GEMM instead of its TN one. On an H200 in float32
  // that measured 1.4% faster at 1024 x 8192 -> 8192 and 10-27% at batch 1-64, but 10% slower
  // at batch 256 (docs/RESULTS.md), so the app times both and keeps the faster
  // (choose_weight_layout).
  torch::Tensor weight_in(WeightLayout layout);
  // Stores `weight`, W's values in some layout (from weight_in), as the Linear's weight: the
  // values, shape and state-dict entry stay; both forwards use the weight as it is laid out;
  // moving the model keeps the layout, loading a state dict into it too.
  void store_weight(const torch::Tensor& weight);
  // store_weight(weight_in(layout)); needs one extra copy of W while it converts.
  void store_weight_in(WeightLayout layout) { store_weight(weight_in(layout)); }
  // kInputMajor when W is laid out input-major, else kOutputMajor.
  WeightLayout weight_layout();

  int64_t in_features();
  int64_t out_features();
};

// Linear -> + add_value -> Swish -> Tanh -> GELU(erf) -> Hardtanh(-1, 1).
// Keys: matmul.weight [out, in], matmul.bias [out], add_value [out].
// The constructors draw the parameters as PyTorch's do (nn.Linear: the weight, then the bias,
// uniform in +-1/sqrt(in_features); add_value: standard normal), in the Python order, from
// `generator`: by default PyTorch's global one, as `Model(in, out)` in Python.
class SwishChainImpl : public LinearEpilogueModel {
 public:
  SwishChainImpl(int64_t in_features, int64_t out_features,
                 at::Generator generator = at::detail::getDefaultCPUGenerator());
  torch::Tensor epilogue_eager(const torch::Tensor& linear_out) override;
  torch::Tensor epilogue_fused(const torch::Tensor& matmul_out) override;
  torch::nn::Linear& linear() override { return matmul; }

  torch::nn::Linear matmul{nullptr};
  torch::Tensor add_value;
};
TORCH_MODULE(SwishChain);

// Linear -> Mish -> Mish. Keys: linear.weight [out, in], linear.bias [out].
class MishMishImpl : public LinearEpilogueModel {
 public:
  MishMishImpl(int64_t in_features, int64_t out_features,
               at::Generator generator = at::detail::getDefaultCPUGenerator());
  torch::Tensor epilogue_eager(const torch::Tensor& linear_out) override;
  torch::Tensor epilogue_fused(const torch::Tensor& matmul_out) override;
  torch::nn::Linear& linear() override { return linear_; }

 private:
  torch::nn::Linear linear_{nullptr};
};
TORCH_MODULE(MishMish);

// The model names the CLI accepts, in the order `all` runs them.
const std::vector<std::string>& model_names();

// A model by name ("swish_chain" or "mish_mish"), its parameters drawn as PyTorch's
// constructor draws them from `generator`, which is left where the draws end: what Python's
// `torch.manual_seed(seed); model = Model(...)` does with the global generator, here with one
// of the caller's (at::detail::createCPUGenerator(seed)), so that PyTorch's global generator is
// neither used nor reseeded. Throws std::invalid_argument for an unknown name.
std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, at::Generator generator);
// The same from a fresh generator seeded with `seed`: the same parameters as Python's
// `torch.manual_seed(seed); model = Model(in_features, out_features)`.
std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, uint64_t seed);

}  // namespace fusedlinear
