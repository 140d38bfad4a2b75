#include "models.h"

#include <stdexcept>

#include "../kernels/ops.h"

namespace fusedlinear {

torch::Tensor LinearEpilogueModel::matmul_without_bias(const torch::Tensor& x) {
  return torch::matmul(x, linear()->weight.t());
}

torch::Tensor LinearEpilogueModel::forward(const torch::Tensor& x) {
  return epilogue_fused(matmul_without_bias(x));
}

torch::Tensor LinearEpilogueModel::forward_eager(const torch::Tensor& x) {
  return epilogue_eager(linear()->forward(x));
}

void LinearEpilogueModel::store_weight_input_major() {
  if (weight_is_input_major()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor& weight = linear()->weight;
  weight.set_data(weight.t().contiguous().t());
}

void LinearEpilogueModel::store_weight_output_major() {
  torch::NoGradGuard no_grad;
  torch::Tensor& weight = linear()->weight;
  if (!weight.is_contiguous()) weight.set_data(weight.contiguous());
}

bool LinearEpilogueModel::weight_is_input_major() {
  const torch::Tensor& weight = linear()->weight;
  return weight.dim() == 2 && weight.stride(0) == 1 && weight.stride(1) == weight.size(0);
}

int64_t LinearEpilogueModel::in_features() { return linear()->weight.size(1); }
int64_t LinearEpilogueModel::out_features() { return linear()->weight.size(0); }

SwishChainImpl::SwishChainImpl(int64_t in_features, int64_t out_features) {
  // Same registration order and draws as the Python constructor: the Linear, then add_value.
  matmul = register_module("matmul", torch::nn::Linear(in_features, out_features));
  add_value = register_parameter("add_value", torch::randn({out_features}));
}

torch::Tensor SwishChainImpl::epilogue_eager(const torch::Tensor& linear_out) {
  namespace F = torch::nn::functional;
  torch::Tensor y = linear_out + add_value;
  y = torch::sigmoid(y) * y;
  y = torch::tanh(y);
  y = torch::gelu(y);  // approximate='none', the exact erf form, as F.gelu's default
  return F::hardtanh(y, F::HardtanhFuncOptions().min_val(-1).max_val(1));
}

torch::Tensor SwishChainImpl::epilogue_fused(const torch::Tensor& matmul_out) {
  return fused_swish_chain(matmul_out, add_value, matmul->bias);
}

MishMishImpl::MishMishImpl(int64_t in_features, int64_t out_features) {
  linear_ = register_module("linear", torch::nn::Linear(in_features, out_features));
}

torch::Tensor MishMishImpl::epilogue_eager(const torch::Tensor& linear_out) {
  namespace F = torch::nn::functional;
  return F::mish(F::mish(linear_out));
}

torch::Tensor MishMishImpl::epilogue_fused(const torch::Tensor& matmul_out) {
  return fused_mish_mish(matmul_out, linear_->bias);
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"swish_chain", "mish_mish"};
  return names;
}

std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, uint64_t seed) {
  torch::manual_seed(seed);
  if (name == "swish_chain") return SwishChain(in_features, out_features).ptr();
  if (name == "mish_mish") return MishMish(in_features, out_features).ptr();
  throw std::invalid_argument("unknown model '" + name + "' (expected swish_chain or mish_mish)");
}

}  // namespace fusedlinear
