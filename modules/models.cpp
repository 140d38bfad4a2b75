#include "models.h"

#include <cmath>
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

torch::Tensor LinearEpilogueModel::weight_in(WeightLayout layout) {
  const torch::Tensor& weight = linear()->weight;
  const bool already = layout == WeightLayout::kInputMajor
                           ? weight_layout() == WeightLayout::kInputMajor
                           : weight.is_contiguous();
  if (already) return weight;
  torch::NoGradGuard no_grad;
  return layout == WeightLayout::kInputMajor ? weight.t().contiguous().t() : weight.contiguous();
}

void LinearEpilogueModel::store_weight(const torch::Tensor& weight) {
  torch::Tensor& current = linear()->weight;
  TORCH_CHECK(weight.sizes() == current.sizes() && weight.dtype() == current.dtype() &&
                  weight.device() == current.device(),
              "store_weight: expected a ", current.sizes(), " ", current.dtype(), " tensor on ",
              current.device(), " (the weight's), got ", weight.sizes(), " ", weight.dtype(),
              " on ", weight.device());
  torch::NoGradGuard no_grad;
  current.set_data(weight);
}

WeightLayout LinearEpilogueModel::weight_layout() {
  const torch::Tensor& weight = linear()->weight;
  const bool input_major =
      weight.dim() == 2 && weight.stride(0) == 1 && weight.stride(1) == weight.size(0);
  return input_major ? WeightLayout::kInputMajor : WeightLayout::kOutputMajor;
}

int64_t LinearEpilogueModel::in_features() { return linear()->weight.size(1); }
int64_t LinearEpilogueModel::out_features() { return linear()->weight.size(0); }

namespace {

// nn.Linear(in_features, out_features) with its parameters drawn from `generator` exactly as
// reset_parameters() draws them from the global one: kaiming_uniform_(weight, a=sqrt(5)), i.e.
// uniform in +-sqrt(3) * gain / sqrt(fan_in), then the bias uniform in +-1/sqrt(fan_in) (the
// bounds computed as libtorch and Python compute them, so the values are the same bits).
// libtorch's constructor always draws from the global generator, so the Linear is constructed
// empty (a [0, 1] weight: no draws) and then given its size.
torch::nn::Linear make_linear(int64_t in_features, int64_t out_features, at::Generator& generator) {
  torch::nn::Linear linear(torch::nn::LinearOptions(1, 0));
  linear->options.in_features(in_features).out_features(out_features);
  torch::NoGradGuard no_grad;
  linear->weight.set_data(torch::empty({out_features, in_features}));
  linear->bias.set_data(torch::empty({out_features}));
  const int64_t fan_in = in_features;
  const double gain = torch::nn::init::calculate_gain(torch::kLeakyReLU, std::sqrt(5));
  const double stddev = gain / std::sqrt(fan_in);
  const double weight_bound = std::sqrt(3.0) * stddev;
  linear->weight.uniform_(-weight_bound, weight_bound, generator);
  const double bias_bound = 1 / std::sqrt(fan_in);
  linear->bias.uniform_(-bias_bound, bias_bound, generator);
  return linear;
}

}  // namespace

SwishChainImpl::SwishChainImpl(int64_t in_features, int64_t out_features, at::Generator generator) {
  // Same registration order and draws as the Python constructor: the Linear, then add_value.
  matmul = register_module("matmul", make_linear(in_features, out_features, generator));
  add_value = register_parameter("add_value", torch::randn({out_features}, generator));
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

MishMishImpl::MishMishImpl(int64_t in_features, int64_t out_features, at::Generator generator) {
  linear_ = register_module("linear", make_linear(in_features, out_features, generator));
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
                                                int64_t out_features, at::Generator generator) {
  if (name == "swish_chain") return SwishChain(in_features, out_features, generator).ptr();
  if (name == "mish_mish") return MishMish(in_features, out_features, generator).ptr();
  throw std::invalid_argument("unknown model '" + name + "' (expected swish_chain or mish_mish)");
}

std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, uint64_t seed) {
  return make_model(name, in_features, out_features, at::detail::createCPUGenerator(seed));
}

}  // namespace fusedlinear
