#include "modules/models.h"

#include <cmath>
#include <stdexcept>

#include "kernels/ops/ops.h"
#include "modules/loader/state_dict.h"

namespace fusedlinear {

torch::Tensor LinearEpilogueModel::matmul_without_bias(const torch::Tensor& x) {
  const int64_t rows = x.dim() > 0 && x.size(-1) > 0 ? x.numel() / x.size(-1) : 0;
  switch (gemm_precision(rows)) {
    case Precision::kIeee:
      break;
    case Precision::kBf16x3: {
      const SplitWeight parts = split_weight();
      return linear_bf16x3(x, parts.hi, parts.lo);
    }
    case Precision::kTf32:
      return linear_tf32(x, linear()->weight);
    case Precision::kBf16:
      return linear_bf16(x, split_weight().hi);
  }
  return torch::matmul(x, linear()->weight.t());
}

torch::Tensor LinearEpilogueModel::epilogue_fused(const torch::Tensor& matmul_out) {
  return fused_chain(matmul_out, linear()->bias);
}

torch::Tensor LinearEpilogueModel::forward(const torch::Tensor& x) {
  const GemmPlan plan = gemm_plan(x);
  if (plan.skinny) {
    switch (plan.precision) {
      case Precision::kIeee:
      case Precision::kTf32:  // the skinny kernel's float32 products: more accurate than TF32
        return fused_linear(x, linear()->weight, c10::nullopt);
      case Precision::kBf16x3: {
        const SplitWeight parts = split_weight();
        return fused_linear(x, parts.hi, parts.lo);
      }
      case Precision::kBf16:
        return fused_linear(x, split_weight().hi, c10::nullopt);
    }
  }
  return epilogue_fused(matmul_without_bias(x));
}

torch::Tensor LinearEpilogueModel::fused_linear(const torch::Tensor& /*x*/,
                                                const torch::Tensor& /*w*/,
                                                const c10::optional<torch::Tensor>& /*w_lo*/) {
  TORCH_CHECK(false, "this model has no fused linear op (has_fused_linear() is false)");
}

void LinearEpilogueModel::set_skinny_max_rows(int64_t rows) {
  TORCH_CHECK(rows >= 0, "set_skinny_max_rows: expected a count >= 0, got ", rows);
  skinny_max_rows_ = rows;
}

int64_t LinearEpilogueModel::skinny_max_rows(Precision precision) {
  if (skinny_max_rows_ >= 0) return skinny_max_rows_;
  return default_skinny_max_rows(precision, linear()->weight.scalar_type());
}

int64_t LinearEpilogueModel::default_skinny_max_rows(Precision precision, torch::ScalarType dtype) {
  // The skinny kernels against cuBLAS at 8192 -> 8192 on an H200, CUDA-graph replays
  // (docs/RESULTS.md): float32 W on the CUDA cores 1.05x at 1 row, 1.8x at 2-8, 1.9x at 9-16
  // (the lane-rows kernel, one tile of 16 rows), 1.35x at 17-32 (two tiles), slower from 33
  // (0.81x at 40, three tiles, before the TMA's copies), and faster than tf32's cuBLAS kernel at
  // 1 row only; bf16x3's parts on the tensor cores 1.5x at 9-32, 1.38x at 48-64 (the staged kernel,
  // with wgmma from 33 rows in sm_90a builds, mma.sync 3-4% slower elsewhere; ieee's kernel runs
  // bf16x3's rows 1-8, faster still: 1.55-1.65x from 2 rows); the bf16 mode's hi part 1.09-1.14x at
  // 1-8, even at 12-16; 16-bit models 0.92-0.98x (cuBLAS's bfloat16 GEMM reads W as fast, and x
  // stays 16-bit).
  if (dtype != torch::kFloat32) return 0;
  switch (precision) {
    case Precision::kIeee:
      return 32;
    case Precision::kBf16x3:
      return 64;
    case Precision::kTf32:
      return 1;
    case Precision::kBf16:
      return 8;
  }
  return 0;
}

LinearEpilogueModel::GemmPlan LinearEpilogueModel::gemm_plan(const torch::Tensor& x) {
  const int64_t rows = x.dim() > 0 && x.size(-1) > 0 ? x.numel() / x.size(-1) : 0;
  const GemmPlan cublas{gemm_precision(rows), false};
  if (!has_fused_linear() || gemm_kernel_ == GemmKernel::kCublas) return cublas;
  if (gemm_kernel_ == GemmKernel::kSkinny) return {precision_, true};
  if (!x.is_cuda()) return cublas;
  // ieee and tf32 read W itself: output-major, or the op would copy it on every call. The split
  // parts are always output-major.
  const bool weight_readable = linear()->weight.is_contiguous();
  const auto takes = [&](Precision precision) {
    const bool reads_weight = precision == Precision::kIeee || precision == Precision::kTf32;
    return rows <= skinny_max_rows(precision) && (weight_readable || !reads_weight);
  };
  if (precision_ == Precision::kBf16x3 && rows <= bf16x3_ieee_skinny_max_rows() &&
      weight_readable) {
    return {Precision::kIeee, true};
  }
  if (takes(precision_)) return {precision_, true};
  return cublas;
}

void LinearEpilogueModel::set_precision(Precision precision) {
  const torch::Tensor& weight = linear()->weight;
  TORCH_CHECK(precision == Precision::kIeee || weight.scalar_type() == torch::kFloat32,
              "set_precision(", precision_name(precision), "): needs a float32 model (it splits ",
              "or rounds float32 operands), this one holds ", weight.scalar_type(), "; use ieee");
  {
    const std::lock_guard<std::mutex> lock(split_mutex_);
    precision_ = precision;
    split_ = SplitWeight{};
  }
  if (precision == Precision::kBf16x3 || precision == Precision::kBf16) split_weight();
}

Precision LinearEpilogueModel::gemm_precision(int64_t rows) const {
  if (precision_ == Precision::kBf16x3 && rows < bf16x3_min_rows_) return Precision::kIeee;
  return precision_;
}

void LinearEpilogueModel::set_bf16x3_min_rows(int64_t rows) {
  TORCH_CHECK(rows >= 0, "set_bf16x3_min_rows: expected a count >= 0, got ", rows);
  bf16x3_min_rows_ = rows;
}

int64_t LinearEpilogueModel::split_weight_bytes() {
  if (precision_ != Precision::kBf16x3 && precision_ != Precision::kBf16) return 0;
  const SplitWeight parts = split_weight();
  return int64_t(parts.hi.nbytes()) + (parts.lo.defined() ? int64_t(parts.lo.nbytes()) : 0);
}

LinearEpilogueModel::SplitWeight LinearEpilogueModel::split_weight() {
  const torch::Tensor& weight = linear()->weight;
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
    auto [hi, lo] = split_bf16(weight.detach());
    split_.hi = hi;
    split_.lo = precision_ == Precision::kBf16x3 ? lo : torch::Tensor();
    split_.source = weight.detach();  // holds the storage: its address stays this weight's
    split_.source_version = version;
  }
  return split_;
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

torch::Tensor SwishChainImpl::fused_chain(const torch::Tensor& y,
                                          const c10::optional<torch::Tensor>& bias) {
  return fused_swish_chain(y, add_value, bias);
}

torch::Tensor SwishChainImpl::fused_linear(const torch::Tensor& x, const torch::Tensor& w,
                                           const c10::optional<torch::Tensor>& w_lo) {
  return fused_linear_swish_chain(x, w, w_lo, matmul->bias, add_value);
}

MishMishImpl::MishMishImpl(int64_t in_features, int64_t out_features, at::Generator generator) {
  linear_ = register_module("linear", make_linear(in_features, out_features, generator));
}

torch::Tensor MishMishImpl::epilogue_eager(const torch::Tensor& linear_out) {
  namespace F = torch::nn::functional;
  return F::mish(F::mish(linear_out));
}

torch::Tensor MishMishImpl::fused_chain(const torch::Tensor& y,
                                        const c10::optional<torch::Tensor>& bias) {
  return fused_mish_mish(y, bias);
}

torch::Tensor MishMishImpl::fused_linear(const torch::Tensor& x, const torch::Tensor& w,
                                         const c10::optional<torch::Tensor>& w_lo) {
  return fused_linear_mish_mish(x, w, w_lo, linear_->bias);
}

const std::vector<ModelInfo>& registered_models() {
  static const std::vector<ModelInfo> models = {
      {"swish_chain", "Linear -> + add_value -> Swish -> Tanh -> GELU(erf) -> Hardtanh(-1, 1)",
       [](int64_t in, int64_t out,
          at::Generator generator) -> std::shared_ptr<LinearEpilogueModel> {
         return SwishChain(in, out, generator).ptr();
       }},
      {"mish_mish", "Linear -> Mish -> Mish",
       [](int64_t in, int64_t out, at::Generator generator)
           -> std::shared_ptr<LinearEpilogueModel> { return MishMish(in, out, generator).ptr(); }},
  };
  return models;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelInfo& model : registered_models()) names.push_back(model.name);
  return names;
}

std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, at::Generator generator) {
  std::string known;
  for (const ModelInfo& model : registered_models()) {
    if (model.name == name) return model.construct(in_features, out_features, generator);
    known += (known.empty() ? "" : ", ") + model.name;
  }
  throw std::invalid_argument("unknown model '" + name + "' (expected one of: " + known + ")");
}

std::vector<std::string> model_keys(const std::string& name) {
  return state_dict_keys(*make_model(name, 1, 1, uint64_t{0}));
}

std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, uint64_t seed) {
  return make_model(name, in_features, out_features, at::detail::createCPUGenerator(seed));
}

}  // namespace fusedlinear
