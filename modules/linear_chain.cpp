#include "modules/linear_chain.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "kernels/ops/linear_forward.h"
#include "kernels/ops/ops.h"
#include "modules/layered_model.h"
#include "modules/loader/state_dict.h"

namespace fusedlinear {
namespace {

// nn.Linear(in_features, out_features) with its parameters drawn from `generator` exactly as
// reset_parameters() draws them from the global one: kaiming_uniform_(weight, a=sqrt(5)), i.e.
// uniform in +-sqrt(3) * gain / sqrt(fan_in), then the bias uniform in +-1/sqrt(fan_in) (the
// bounds computed as libtorch and Python compute them, so the values are the same bits).
// libtorch's constructor always draws from the global generator, so the Linear is constructed
// empty (a [0, 1] weight: no draws) and then given its size.
torch::nn::Linear make_linear(int64_t in_features, int64_t out_features, bool bias,
                              at::Generator& generator) {
  torch::nn::Linear linear(torch::nn::LinearOptions(1, 0).bias(bias));
  linear->options.in_features(in_features).out_features(out_features);
  torch::NoGradGuard no_grad;
  linear->weight.set_data(torch::empty({out_features, in_features}));
  const int64_t fan_in = in_features;
  const double gain = torch::nn::init::calculate_gain(torch::kLeakyReLU, std::sqrt(5));
  const double stddev = gain / std::sqrt(fan_in);
  const double weight_bound = std::sqrt(3.0) * stddev;
  linear->weight.uniform_(-weight_bound, weight_bound, generator);
  if (bias) {
    linear->bias.set_data(torch::empty({out_features}));
    const double bias_bound = 1 / std::sqrt(fan_in);
    linear->bias.uniform_(-bias_bound, bias_bound, generator);
  }
  return linear;
}

// Throws std::invalid_argument unless `tensor` (`what`) may be chain parameter `key` of `spec`'s
// model of `out_features` outputs: the shape the parameter is drawn in (its param_shapes entry,
// else [out_features]), or one value ([] or [1]). A chain parameter broadcasts along the
// features, so a Linear's bias may be one and its weight never.
void check_param_shape(const ModelSpec& spec, int64_t out_features, const std::string& key,
                       const torch::Tensor& tensor, const std::string& what) {
  const auto shape = spec.param_shapes.find(key);
  const std::vector<int64_t> expected =
      shape != spec.param_shapes.end() ? shape->second : std::vector<int64_t>{out_features};
  if (tensor.sizes() == expected || (tensor.numel() == 1 && tensor.dim() <= 1)) return;
  std::ostringstream s;
  s << "the chain's parameter '" << key << "' is " << what << ", of shape " << tensor.sizes()
    << "; a chain parameter broadcasts along the features: expected " << c10::IntArrayRef(expected)
    << ", [] or [1]";
  throw std::invalid_argument(s.str());
}

}  // namespace

// The module at `path` ("block.0") below `root`, made (empty) where missing: libtorch's names may
// not hold dots, so a dotted Python path is a chain of modules, as in Python.
torch::nn::Module& module_at(torch::nn::Module& root, const std::string& path) {
  torch::nn::Module* module = &root;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    if (dot == std::string::npos) return *module;
    const std::string name = path.substr(start, dot - start);
    std::shared_ptr<torch::nn::Module> child;
    for (const auto& item : module->named_children()) {
      if (item.key() == name) child = item.value();
    }
    if (!child) child = module->register_module(name, std::make_shared<torch::nn::Module>());
    module = child.get();
    start = dot + 1;
  }
}

std::string last_component(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

LinearChainImpl::LinearChainImpl(ModelSpec spec, int64_t in_features, int64_t out_features,
                                 at::Generator generator, const std::set<std::string>& bound)
    : spec_(std::move(spec)), chain_(spec_.parsed_chain()), chain_name_(spec_.op_chain()) {
  if (spec_.layered()) {
    throw std::invalid_argument("model '" + spec_.name + "' has " +
                                std::to_string(spec_.layers.size()) +
                                " layers; a LinearChain is one Linear (a LayeredModel takes it)");
  }
  // As the Python constructors draw: the Linear first, then the chain's parameters.
  torch::nn::Linear linear = make_linear(in_features, out_features, spec_.linear_bias, generator);
  std::vector<std::pair<std::string, torch::Tensor>> drawn;
  const std::string own = spec_.linear + ".";
  for (const std::string& key : chain_.params()) {
    // `self.fc.bias` in Python: the Linear's own tensor, which a second parameter of the same
    // name would clash with (a Linear has no submodules, so nothing else lies under its path).
    if (key.compare(0, own.size(), own) == 0) {
      const std::string name = key.substr(own.size());
      const torch::Tensor tensor = name == "weight" ? linear->weight
                                   : name == "bias" ? linear->bias
                                                    : torch::Tensor();
      if (!tensor.defined()) {
        throw std::invalid_argument(
            "the chain's parameter '" + key + "' names a tensor of Linear " + spec_.linear +
            ", which holds " + (spec_.linear_bias ? "weight and bias" : "a weight and no bias"));
      }
      check_param_shape(spec_, out_features, key, tensor, "Linear " + spec_.linear + "'s " + name);
      params_[key] = tensor;
      bound_.insert(key);
      continue;
    }
    if (bound.count(key) > 0) {
      bound_.insert(key);
      continue;
    }
    const auto shape = spec_.param_shapes.find(key);
    const std::vector<int64_t> sizes =
        shape != spec_.param_shapes.end() ? shape->second : std::vector<int64_t>{out_features};
    drawn.emplace_back(key, torch::randn(sizes, generator));
  }
  // Registered as Python orders the keys: each module's own parameters before its children's.
  for (const auto& [key, value] : drawn) {
    params_[key] = module_at(*this, key).register_parameter(last_component(key), value);
  }
  linear_ = module_at(*this, spec_.linear).register_module(last_component(spec_.linear), linear);
  slot_keys_ = chain_.slot_params();
}

std::vector<torch::Tensor> LinearChainImpl::slot_params() const {
  std::vector<torch::Tensor> tensors;
  for (const std::string& key : slot_keys_) tensors.push_back(params_.at(key));
  return tensors;
}

torch::Tensor& LinearChainImpl::param(const std::string& key) { return params_.at(key); }

void LinearChainImpl::bind_param(const std::string& key, const torch::Tensor& tensor,
                                 const std::string& what) {
  if (bound_.count(key) == 0 || key.compare(0, spec_.linear.size() + 1, spec_.linear + ".") == 0) {
    throw std::invalid_argument("bind_param: '" + key +
                                "' is not a parameter this chain takes from another module");
  }
  check_param_shape(spec_, out_features(), key, tensor, what);
  params_[key] = tensor;
}

torch::Tensor LinearChainImpl::chain_eager(const torch::Tensor& linear_out) {
  return eager_chain(chain_, linear_out, slot_params());
}

torch::Tensor LinearChainImpl::chain_fused(const torch::Tensor& y,
                                           const c10::optional<torch::Tensor>& bias,
                                           const c10::optional<torch::Tensor>& gate) {
  return fused_epilogue(y, bias, slot_params(), chain_name_, gate);
}

torch::Tensor LinearChainImpl::reference(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x64 = x.detach().to(torch::kCPU, torch::kFloat64);
  const torch::Tensor w64 = linear_->weight.detach().to(torch::kCPU, torch::kFloat64);
  torch::Tensor y64 = torch::matmul(x64, w64.t());
  if (linear_->bias.defined()) y64 += linear_->bias.detach().to(torch::kCPU, torch::kFloat64);
  return reference_chain(chain_, y64, slot_params());
}

GemmQuery LinearChainImpl::gemm_query(const torch::Tensor& x) {
  GemmQuery query;
  query.precision = precision_;
  query.kernel = gemm_kernel_;
  query.rows = rows_of(x);
  query.in_features = linear_->weight.size(1);
  query.float32_model = linear_->weight.scalar_type() == torch::kFloat32;
  query.device = gemm_device_of(x);
  query.weight_output_major = linear_->weight.is_contiguous();
  query.skinny_max_rows = skinny_max_rows_;
  query.bf16x3_min_rows = bf16x3_min_rows_;
  query.chain_kernels = gpu_chain_kernels(find_chain(chain_name_));
  return query;
}

GemmPlan LinearChainImpl::gemm_plan(const torch::Tensor& x) {
  return *kept_plan_.plan_for(gemm_query(x));
}

bool LinearChainImpl::compiled_chain() const { return find_chain(chain_name_).compiled; }

LinearWeights LinearChainImpl::weights(Precision products) {
  LinearWeights w{linear_->weight, {}, {}, {}};
  if (split_weight_parts(products) > 0) {
    const SplitWeight parts = split_weight();
    w.hi = parts.hi;
    w.mid = parts.mid;
    w.lo = parts.lo;
  }
  return w;
}

torch::Tensor LinearChainImpl::matmul_without_bias(const torch::Tensor& x) {
  GemmQuery query = gemm_query(x);
  query.kernel = GemmKernel::kCublas;  // the products cuBLAS (or the CPU) runs
  const Precision products = kept_plan_.plan_for(query)->products;
  return linear_products(x, weights(products), products);
}

torch::Tensor LinearChainImpl::epilogue_fused(const torch::Tensor& matmul_out) {
  return chain_fused(matmul_out, linear_->bias);
}

torch::Tensor LinearChainImpl::forward(const torch::Tensor& x) { return forward_with(x, {}); }

torch::Tensor LinearChainImpl::forward_with(const torch::Tensor& x, const LayerTerms& terms) {
  const auto kept = kept_plan_.plan_for(gemm_query(x));
  const GemmPlan& plan = *kept;
  return linear_forward(plan, x, weights(plan.products), linear_->bias, slot_params(), chain_name_,
                        terms);
}

torch::Tensor LinearChainImpl::forward_gated(const torch::Tensor& x, LinearChainImpl& gate) {
  const auto kept = kept_plan_.plan_for(gemm_query(x));
  const GemmPlan& plan = *kept;
  return linear_forward_gated(plan, x, weights(plan.products), linear_->bias, slot_params(),
                              chain_name_, gate.weights(plan.products), gate.linear()->bias,
                              [&] { return gate.forward_without_chain(x); });
}

torch::Tensor LinearChainImpl::forward_without_chain(const torch::Tensor& x) {
  GemmQuery query = gemm_query(x);
  query.chain_kernels = gpu_chain_kernels(find_chain(""));
  const auto kept = kept_plan_.plan_for(query);
  const GemmPlan& plan = *kept;
  return linear_forward(plan, x, weights(plan.products), linear_->bias, {}, "");
}

torch::Tensor LinearChainImpl::forward_eager(const torch::Tensor& x) {
  return chain_eager(linear_->forward(x));
}

void LinearChainImpl::set_skinny_max_rows(int64_t rows) {
  TORCH_CHECK(rows >= 0, "set_skinny_max_rows: expected a count >= 0, got ", rows);
  skinny_max_rows_ = rows;
}

void LinearChainImpl::set_precision(Precision precision) {
  const torch::Tensor& weight = linear_->weight;
  TORCH_CHECK(precision == Precision::kIeee || weight.scalar_type() == torch::kFloat32,
              "set_precision(", precision_name(precision), "): needs a float32 model (it splits ",
              "or rounds float32 operands), this one holds ", weight.scalar_type(), "; use ieee");
  {
    const std::lock_guard<std::mutex> lock(split_mutex_);
    precision_ = precision;
    split_ = SplitWeight{};
  }
  if (split_weight_parts(precision) > 0) split_weight();
}

void LinearChainImpl::set_bf16x3_min_rows(int64_t rows) {
  TORCH_CHECK(rows >= 0, "set_bf16x3_min_rows: expected a count >= 0, got ", rows);
  bf16x3_min_rows_ = rows;
}

int64_t LinearChainImpl::split_weight_bytes() {
  if (split_weight_parts(precision_) == 0) return 0;
  const SplitWeight parts = split_weight();
  int64_t bytes = 0;
  for (const torch::Tensor* part : {&parts.hi, &parts.mid, &parts.lo}) {
    if (part->defined()) bytes += int64_t(part->nbytes());
  }
  return bytes;
}

LinearChainImpl::SplitWeight LinearChainImpl::split_weight() {
  const torch::Tensor& weight = linear_->weight;
  // Inference tensors keep no version counter; they cannot be changed in place either.
  const int64_t version = weight.is_inference() ? 0 : weight._version();
  const std::lock_guard<std::mutex> lock(split_mutex_);
  const bool current = split_.source.defined() && split_.source.data_ptr() == weight.data_ptr() &&
                       split_.source.strides() == weight.strides() &&
                       split_.source_version == version;
  if (!current) {
    TORCH_CHECK(weight.scalar_type() == torch::kFloat32, precision_name(precision_),
                " GEMM: needs a float32 weight, the model now holds ", weight.scalar_type(),
                "; call set_precision(Precision::kIeee) before converting it");
    torch::NoGradGuard no_grad;
    split_ = SplitWeight{};
    if (precision_ == Precision::kBf16x6) {
      std::tie(split_.hi, split_.mid, split_.lo) = split_bf16_three(weight.detach());
    } else {
      auto [hi, lo] = split_bf16(weight.detach());
      split_.hi = hi;
      if (precision_ == Precision::kBf16x3) split_.lo = lo;
    }
    split_.source = weight.detach();  // holds the storage: its address stays this weight's
    split_.source_version = version;
  }
  return split_;
}

torch::Tensor LinearChainImpl::weight_in(WeightLayout layout) {
  const torch::Tensor& weight = linear_->weight;
  const bool already = layout == WeightLayout::kInputMajor
                           ? weight_layout() == WeightLayout::kInputMajor
                           : weight.is_contiguous();
  if (already) return weight;
  torch::NoGradGuard no_grad;
  return layout == WeightLayout::kInputMajor ? weight.t().contiguous().t() : weight.contiguous();
}

void LinearChainImpl::store_weight(const torch::Tensor& weight) {
  torch::Tensor& current = linear_->weight;
  TORCH_CHECK(weight.sizes() == current.sizes() && weight.dtype() == current.dtype() &&
                  weight.device() == current.device(),
              "store_weight: expected a ", current.sizes(), " ", current.dtype(), " tensor on ",
              current.device(), " (the weight's), got ", weight.sizes(), " ", weight.dtype(),
              " on ", weight.device());
  torch::NoGradGuard no_grad;
  current.set_data(weight);
}

WeightLayout LinearChainImpl::weight_layout() {
  const torch::Tensor& weight = linear_->weight;
  const bool input_major =
      weight.dim() == 2 && weight.stride(0) == 1 && weight.stride(1) == weight.size(0);
  return input_major ? WeightLayout::kInputMajor : WeightLayout::kOutputMajor;
}

int64_t LinearChainImpl::in_features() { return linear_->weight.size(1); }
int64_t LinearChainImpl::out_features() { return linear_->weight.size(0); }

std::shared_ptr<LinearChainImpl> make_model(const std::string& name, int64_t in_features,
                                            int64_t out_features, at::Generator generator) {
  return std::make_shared<LinearChainImpl>(find_model(name), in_features, out_features, generator);
}

std::shared_ptr<LinearChainImpl> make_model(const std::string& name, int64_t in_features,
                                            int64_t out_features, uint64_t seed) {
  return make_model(name, in_features, out_features, at::detail::createCPUGenerator(seed));
}

std::shared_ptr<LinearChainImpl> make_model(const ModelSpec& spec, int64_t in_features,
                                            int64_t out_features, uint64_t seed) {
  return std::make_shared<LinearChainImpl>(spec, in_features, out_features,
                                           at::detail::createCPUGenerator(seed));
}

std::vector<std::string> model_keys(const ModelSpec& spec) {
  if (spec.layered()) return layered_model_keys(spec);
  LinearChainImpl model(spec, 1, 1, at::detail::createCPUGenerator(0));
  return state_dict_keys(model);
}

std::vector<std::string> model_keys(const std::string& name) {
  return model_keys(find_model(name));
}

}  // namespace fusedlinear
