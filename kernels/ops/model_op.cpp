// fusedlinear::model: a layered model's whole forward in one op (ops.h), each Linear run as
// linear_forward runs it under the kernel asked for (auto by default), or under "mlp" the whole
// model in one launch of the fused-MLP kernel where it takes the model (mlp_forward.h); its CPU
// and CUDA implementations (one function: the ops it calls pick the device) and its Meta
// implementation. The schema is declared in ops.cpp.
#include <torch/library.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops/chain_registry.h"
#include "kernels/ops/linear_forward.h"
#include "kernels/ops/mlp_forward.h"
#include "kernels/ops/model_spec.h"
#include "kernels/ops/op_support.h"
#include "kernels/ops/ops.h"

#ifdef FUSEDLINEAR_WITH_JIT
#include "kernels/cuda/jit/compiled_chains.h"
#include "kernels/ops/chain_source.h"
#endif

namespace fusedlinear {
namespace {

using detail::kModelOp;

// The op's `biases` (Tensor?[]): one per Linear, None where it has none.
using OptionalBiases = c10::List<c10::optional<torch::Tensor>>;

// A spec as the op runs it: each layer's Linears by their index in `weights`, its chain as the
// ops take it and where its parameters start in `params`.
struct ModelLayout {
  struct Layer {
    size_t linear = 0, gate = 0;  // gate == linear: no gate, or the other half of linear's
    bool gated = false;
    int half = -1;
    std::string chain;
    bool compiled = false;  // a declaration's compiled kernels run the chain (else the interpreter)
    const act::Program* program = nullptr;  // the chain's op list (the registry keeps it)
    size_t first_param = 0, params = 0;
  };
  std::vector<Layer> layers;
  bool residual = false;
  size_t linears = 0, params = 0;
  // Each Linear's last plan (by its index in `weights`): a call like the one before it plans
  // nothing again. Shared by every call of the spec: a plan depends on its query alone.
  std::vector<std::unique_ptr<KeptPlan>> plans;
  // The last fused-MLP choice under auto and under kMlp, kept as the plans are.
  std::unique_ptr<KeptAnswer<MlpQuery, MlpChoice>> mlp_choice_auto =
      std::make_unique<KeptAnswer<MlpQuery, MlpChoice>>();
  std::unique_ptr<KeptAnswer<MlpQuery, MlpChoice>> mlp_choice_asked =
      std::make_unique<KeptAnswer<MlpQuery, MlpChoice>>();
  // The fused-MLP kernel with the layers' chains compiled in, where NVRTC compiles them; empty in
  // a build without NVRTC (the kernel's own instances interpret the chains).
  cuda::MlpKernelOf mlp_kernels;
};

// The model `spec` names: a registered layered model (a layered declaration's, its chains
// compiled), else a layered spec.
ModelSpec model_of(const std::string& spec) {
  for (const ModelSpec& model : registered_models()) {
    if (model.name == spec && model.layered()) return model;
  }
  TORCH_CHECK(is_layered_spec(spec),
              detail::text(kModelOp,
                           ": expected a layered spec (e.g. 'fc1:gelu|fc2', docs/CHAINS.md) or a "
                           "layered model's name, got '",
                           spec,
                           "'; a one-Linear model runs with epilogue, linear_epilogue or "
                           "gemm_epilogue"));
  try {
    return layered_model(spec);
  } catch (const ChainSpecError& e) {
    TORCH_CHECK(false, detail::text(kModelOp, ": ", e.what()));
  }
}

ModelLayout layout_of(const std::string& spec) {
  const ModelSpec model = model_of(spec);
  ModelLayout layout;
  layout.residual = model.residual;
  for (const ModelSpec& one : model.layers) {
    ModelLayout::Layer layer;
    layer.linear = layer.gate = layout.linears++;
    layer.gated = one.gated();
    layer.half = one.half;
    if (layer.gated && layer.half < 0) layer.gate = layout.linears++;
    layer.chain = one.op_chain();
    const ChainEntry& entry = detail::chain_for(kModelOp, layer.chain);
    layer.compiled = entry.compiled;
    layer.program = &entry.program;
    layer.params = entry.chain.slot_params().size();
    layer.first_param = layout.params;
    layout.params += layer.params;
    layout.layers.push_back(layer);
  }
  for (size_t i = 0; i < layout.linears; ++i) layout.plans.push_back(std::make_unique<KeptPlan>());
#ifdef FUSEDLINEAR_WITH_JIT
  std::vector<std::string> chains;  // each layer's, as a declaration writes it
  for (const ModelLayout::Layer& layer : layout.layers) {
    chains.push_back(chain_expression(detail::chain_for(kModelOp, layer.chain).chain));
  }
  layout.mlp_kernels = cuda::jit::compiled_mlp_kernels(chains);
#endif
  return layout;
}

// The layout of `spec`, parsed once per spec and kept: the op runs on every call.
const ModelLayout& layout_for(c10::string_view spec) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ModelLayout>, std::less<>> layouts;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = layouts.find(std::string_view(spec.data(), spec.size()));
  if (it != layouts.end()) return *it->second;
  auto layout = std::make_unique<ModelLayout>(layout_of(std::string(spec)));
  return *layouts.emplace(std::string(spec), std::move(layout)).first->second;
}

// The value an argument names, as `parse` reads it; else one line saying what was expected.
template <class Parse>
auto parsed_argument(c10::string_view name, Parse parse, const char* argument,
                     const char* expected) {
  const auto value = parse(std::string(name));
  TORCH_CHECK(value.has_value(),
              detail::text(kModelOp, ": expected ", argument, " ", expected, ", got '", name, "'"));
  return *value;
}

Precision precision_for(c10::string_view name) {
  return parsed_argument(name, &parse_precision, "precision", "ieee, bf16x3, bf16x6, tf32 or bf16");
}

GemmKernel gemm_for(c10::string_view name) {
  return parsed_argument(name, &parse_gemm_kernel, "gemm", "auto, cublas, skinny, hopper or mlp");
}

// An element of one of the op's lists as its messages name it ("weights[3]"), written only when a
// check fails: the checks run on every call.
struct ListEntry {
  const char* list;
  size_t index;
};
void append_text(std::string& s, const ListEntry& entry) {
  s += entry.list;
  s += '[';
  s += std::to_string(entry.index);
  s += ']';
}

// The checks of every implementation (the Meta one's included): the counts of the lists, each
// Linear's shapes against the widths the layers pass on, dtypes and devices. Returns the model's
// output width.
c10::SymInt check_model(const ModelLayout& layout, const torch::Tensor& x, at::TensorList weights,
                        const OptionalBiases& biases, at::TensorList params, Precision precision) {
  using detail::text;
  TORCH_CHECK(x.defined() && x.dim() >= 1,
              text(kModelOp, ": expected x with shape [..., in_features], got ",
                   x.defined() ? text(x.sym_sizes()) : std::string("an undefined tensor")));
  const bool split = precision != Precision::kIeee;
  TORCH_CHECK(!split || x.scalar_type() == torch::kFloat32,
              text(kModelOp, ": precision ", precision_name(precision),
                   " takes float32 x (it splits or rounds float32 operands), got ", x.scalar_type(),
                   "; use ieee"));
  const size_t parts = 1 + size_t(split_weight_parts(precision));
  TORCH_CHECK(weights.size() == layout.linears * parts,
              text(kModelOp, ": the spec names ", layout.linears, " Linear(s); precision ",
                   precision_name(precision), " takes ", parts,
                   parts == 1 ? " tensor (W)" : " tensors (W, then its bfloat16 parts)",
                   " each, so ", layout.linears * parts, " weights, got ", weights.size()));
  TORCH_CHECK(biases.size() == layout.linears,
              text(kModelOp, ": expected ", layout.linears, " biases (one per Linear, None where ",
                   "it has none), got ", biases.size()));
  TORCH_CHECK(params.size() == layout.params,
              text(kModelOp, ": the layers' chains take ", layout.params,
                   " parameter tensor(s), got ", params.size()));
  const auto check_tensor = [&](const torch::Tensor& t, const ListEntry& name,
                                torch::ScalarType dtype, c10::SymIntArrayRef shape,
                                bool one_value_allowed) {
    TORCH_CHECK(t.defined(), text(kModelOp, ": expected ", name, ", got an undefined tensor"));
    const bool fits =
        t.sym_sizes() == shape || (one_value_allowed && t.dim() <= 1 && t.sym_numel() == 1);
    TORCH_CHECK(fits, text(kModelOp, ": expected ", name, " of shape ", shape,
                           one_value_allowed ? " or of one element" : "", ", got ", t.sym_sizes()));
    TORCH_CHECK(t.scalar_type() == dtype, text(kModelOp, ": expected ", name, " of dtype ", dtype,
                                               ", got ", t.scalar_type()));
    TORCH_CHECK(t.device() == x.device(), text(kModelOp, ": expected ", name, " on ", x.device(),
                                               " (the device of x), got ", t.device()));
  };
  // Linear i's W and parts, checked against the width it takes; returns its output width.
  const auto check_linear = [&](size_t i, const c10::SymInt& width) {
    const torch::Tensor& w = weights[i * parts];
    const ListEntry name{"weights", i * parts};
    TORCH_CHECK(w.defined() && w.dim() == 2,
                text(kModelOp, ": expected ", name, " of shape [out_features, ", width, "], got ",
                     w.defined() ? text(w.sym_sizes()) : std::string("an undefined tensor")));
    const c10::SymInt out = w.sym_size(0);
    const std::array<c10::SymInt, 2> shape = {out, width};
    check_tensor(w, name, x.scalar_type(), shape, false);
    for (size_t p = 1; p < parts; ++p) {
      check_tensor(weights[i * parts + p], {"weights", i * parts + p}, torch::kBFloat16, shape,
                   false);
    }
    const c10::optional<torch::Tensor> bias = biases.get(i);
    if (bias && bias->defined()) {
      check_tensor(*bias, {"biases", i}, x.scalar_type(), {out}, false);
    }
    return out;
  };
  c10::SymInt width = x.sym_size(-1);
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    const ModelLayout::Layer& layer = layout.layers[l];
    c10::SymInt out = check_linear(layer.linear, width);
    if (layer.half >= 0) {
      TORCH_CHECK(out % c10::SymInt(2) == 0,
                  text(kModelOp, ": layer ", l + 1, " takes halves of ", "weights[",
                       layer.linear * parts, "]'s ", out, " outputs, an odd count"));
      out = out / c10::SymInt(2);
    } else if (layer.gated) {
      const c10::SymInt gate_out = check_linear(layer.gate, width);
      TORCH_CHECK(gate_out == out, text(kModelOp, ": layer ", l + 1, "'s gate gives ", gate_out,
                                        " outputs, its Linear ", out));
    }
    for (size_t p = layer.first_param; p < layer.first_param + layer.params; ++p) {
      check_tensor(params[p], {"params", p}, x.scalar_type(), {out}, true);
    }
    width = out;
  }
  TORCH_CHECK(!layout.residual || width == x.sym_size(-1),
              text(kModelOp, ": the residual adds x (", x.sym_size(-1), " wide) to an output ",
                   width, " wide"));
  return width;
}

// The model as the fused-MLP kernel's plan sees it (gemm_plan.h: mlp_refusal); x and the
// weights checked (check_model).
MlpQuery mlp_query_of(const ModelLayout& layout, const torch::Tensor& x, at::TensorList weights,
                      Precision precision) {
  const size_t parts = 1 + size_t(split_weight_parts(precision));
  MlpQuery query;
  query.precision = precision;
  query.float32_model = x.scalar_type() == torch::kFloat32;
  query.device = gemm_device_of(x);
  query.rows = rows_of(x);
  query.widths.push_back(x.size(-1));
  for (const ModelLayout::Layer& layer : layout.layers) {
    const int64_t out = weights[layer.linear * parts].size(0);
    query.widths.push_back(layer.half >= 0 ? out / 2 : out);
    query.compiled_chains.push_back(layer.compiled);
    query.gated.push_back(layer.gated || layer.half >= 0);
  }
  return query;
}

// The whole model in one launch of the fused-MLP kernel (a model mlp_refusal accepts, in the
// query's form and mode). Each Linear is its W and the parts that follow it in `weights` (the
// streamed form copies them; the resident form splits a float32 W in shared memory itself).
torch::Tensor fused_mlp_of(const ModelLayout& layout, const torch::Tensor& x,
                           at::TensorList weights, const OptionalBiases& biases,
                           at::TensorList params, const MlpQuery& query) {
  const size_t parts = 1 + size_t(split_weight_parts(query.precision));
  std::vector<MlpLayerTensors> layers;
  for (const ModelLayout::Layer& one : layout.layers) {
    MlpLayerTensors layer;
    const auto parts_of = [&](size_t linear) {
      return std::vector<torch::Tensor>(weights.begin() + long(linear * parts + 1),
                                        weights.begin() + long(linear * parts + parts));
    };
    layer.weight = weights[one.linear * parts];
    layer.weight_parts = parts_of(one.linear);
    layer.bias = biases.get(one.linear);
    if (one.gated && one.half < 0) {
      layer.gate_weight = weights[one.gate * parts];
      layer.gate_weight_parts = parts_of(one.gate);
      layer.gate_bias = biases.get(one.gate);
    }
    layer.half = one.half;
    layer.program = one.program;
    layer.params.assign(params.begin() + long(one.first_param),
                        params.begin() + long(one.first_param + one.params));
    layers.push_back(layer);
  }
#ifdef FUSEDLINEAR_WITH_CUDA
  return fused_mlp_forward(x, layers, layout.residual, mlp_form(query), query.precision,
                           layout.mlp_kernels);
#else
  TORCH_CHECK(false, detail::text(kModelOp, ": this build has no CUDA kernels"));
  return torch::Tensor();
#endif
}

torch::Tensor model_forward(const torch::Tensor& x, at::TensorList weights,
                            const OptionalBiases& biases,
                            const detail::OptionalTensors& params_or_none, c10::string_view spec,
                            c10::string_view precision_name_given, c10::string_view gemm) {
  const at::TensorList params = detail::listed(params_or_none);
  const ModelLayout& layout = layout_for(spec);
  const Precision precision = precision_for(precision_name_given);
  const GemmKernel kernel = gemm_for(gemm);
  check_model(layout, x, weights, biases, params, precision);
  // The CPU never runs the fused-MLP kernel: no query to build there.
  if (x.is_cuda() && (kernel == GemmKernel::kMlp || kernel == GemmKernel::kAuto)) {
    const MlpQuery query = mlp_query_of(layout, x, weights, precision);
    auto& kept = kernel == GemmKernel::kMlp ? layout.mlp_choice_asked : layout.mlp_choice_auto;
    const auto choice = kept->answer_for(
        query, [kernel](const MlpQuery& asked) { return choose_mlp(asked, kernel); });
    if (choice->fused) {
      return fused_mlp_of(layout, x, weights, biases, params, query);
    }
  }
  const size_t parts = 1 + size_t(split_weight_parts(precision));
  const auto weights_of = [&](size_t i) {
    // W, then its parts: bf16's hi; bf16x3's hi, lo; bf16x6's hi, mid, lo.
    const torch::Tensor* first = &weights[i * parts];
    LinearWeights w{first[0], {}, {}, {}};
    if (parts >= 2) w.hi = first[1];
    if (parts == 3) w.lo = first[2];
    if (parts == 4) {
      w.mid = first[2];
      w.lo = first[3];
    }
    return w;
  };
  // Linear i on h, with `chain` and its parameters, and a gate or the residual: as the plan for
  // `kernel` says (a model the fused-MLP kernel refused: auto's).
  const auto plan_of = [&](size_t i, const LinearWeights& w, const torch::Tensor& h,
                           const std::string& chain) {
    GemmQuery query;
    query.precision = precision;
    query.kernel = kernel;
    query.rows = rows_of(h);
    query.in_features = w.weight.size(1);
    query.float32_model = w.weight.scalar_type() == torch::kFloat32;
    query.device = gemm_device_of(h);
    query.weight_output_major = w.weight.is_contiguous();
    query.chain_kernels = gpu_chain_kernels(detail::chain_for(kModelOp, chain));
    return layout.plans[i]->plan_for(query);
  };
  const auto run = [&](size_t i, const torch::Tensor& h, const std::string& chain,
                       const std::vector<torch::Tensor>& chain_params,
                       const LayerTerms& terms = {}) {
    const LinearWeights w = weights_of(i);
    return linear_forward(*plan_of(i, w, h, chain), h, w, biases.get(i), chain_params, chain,
                          terms);
  };
  torch::Tensor h = x;
  for (const ModelLayout::Layer& layer : layout.layers) {
    const std::vector<torch::Tensor> chain_params(
        params.begin() + long(layer.first_param),
        params.begin() + long(layer.first_param + layer.params));
    if (layer.half >= 0) {
      // One GEMM, then the chain on one half times the other (chunk(2, -1)).
      const torch::Tensor y = run(layer.linear, h, "", {});
      const int64_t width = y.size(-1) / 2;
      const torch::Tensor main = y.narrow(-1, layer.half * width, width).contiguous();
      const torch::Tensor other = y.narrow(-1, (1 - layer.half) * width, width);
      h = fused_epilogue(main, c10::nullopt, chain_params, layer.chain) * other;
    } else if (layer.gated) {
      const LinearWeights w = weights_of(layer.linear);
      h = linear_forward_gated(*plan_of(layer.linear, w, h, layer.chain), h, w,
                               biases.get(layer.linear), chain_params, layer.chain,
                               weights_of(layer.gate), biases.get(layer.gate),
                               [&] { return run(layer.gate, h, "", {}); });
    } else if (layout.residual && &layer == &layout.layers.back()) {
      // The residual given to the last Linear, as LayeredModel gives it (bitwise the same).
      h = run(layer.linear, h, layer.chain, chain_params, {c10::nullopt, x});
      return h;
    } else {
      h = run(layer.linear, h, layer.chain, chain_params);
    }
  }
  return layout.residual ? x + h : h;
}

torch::Tensor model_meta(const torch::Tensor& x, at::TensorList weights,
                         const OptionalBiases& biases, const detail::OptionalTensors& params,
                         c10::string_view spec, c10::string_view precision, c10::string_view gemm) {
  gemm_for(gemm);
  const c10::SymInt out = check_model(layout_for(spec), x, weights, biases, detail::listed(params),
                                      precision_for(precision));
  return at::empty_symint(detail::linear_output_shape(x.sym_sizes(), out), x.options());
}

// An undefined x, or x on a device with no implementation: one line saying so.
torch::Tensor model_elsewhere(const torch::Tensor& x, at::TensorList /*weights*/,
                              const OptionalBiases& /*biases*/,
                              const detail::OptionalTensors& /*params*/, c10::string_view /*spec*/,
                              c10::string_view /*precision*/, c10::string_view /*gemm*/) {
  TORCH_CHECK(false, x.defined() ? detail::text(kModelOp, ": no implementation for x on ",
                                                x.device(), " (CPU, CUDA and meta tensors)")
                                 : detail::text(kModelOp,
                                                ": expected a tensor x, got an "
                                                "undefined tensor"));
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedlinear, CPU, m) { m.impl("model", &model_forward); }
#ifdef FUSEDLINEAR_WITH_CUDA
TORCH_LIBRARY_IMPL(fusedlinear, CUDA, m) { m.impl("model", &model_forward); }
#endif
TORCH_LIBRARY_IMPL(fusedlinear, Meta, m) { m.impl("model", &model_meta); }
TORCH_LIBRARY_IMPL(fusedlinear, CompositeExplicitAutograd, m) { m.impl("model", &model_elsewhere); }

torch::Tensor fused_model(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                          const std::vector<c10::optional<torch::Tensor>>& biases,
                          const std::vector<torch::Tensor>& params, const std::string& spec,
                          Precision precision, GemmKernel gemm) {
  using Signature = torch::Tensor(const torch::Tensor&, at::TensorList, const OptionalBiases&,
                                  const detail::OptionalTensors&, c10::string_view,
                                  c10::string_view, c10::string_view);
  OptionalBiases listed_biases;
  for (const auto& bias : biases) listed_biases.push_back(bias);
  // The schema takes the precision and the kernel by name (the implementations parse them).
  return detail::call_op<kModelOp, Signature>(x, weights, listed_biases,
                                              detail::OptionalTensors(params), spec,
                                              precision_name(precision), gemm_kernel_name(gemm));
}

FusedMlpPlan fused_model_mlp_plan(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                  const std::vector<c10::optional<torch::Tensor>>& biases,
                                  const std::vector<torch::Tensor>& params, const std::string& spec,
                                  Precision precision, GemmKernel gemm) {
  const ModelLayout& layout = layout_for(spec);
  OptionalBiases listed_biases;
  for (const auto& bias : biases) listed_biases.push_back(bias);
  check_model(layout, x, weights, listed_biases, params, precision);
  const MlpQuery query = mlp_query_of(layout, x, weights, precision);
  FusedMlpPlan plan;
  plan.choice = choose_mlp(query, gemm);
  if (plan.choice.fused) plan.description = mlp_description(query);
  return plan;
}

}  // namespace fusedlinear
