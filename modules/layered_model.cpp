#include "modules/layered_model.h"

#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "kernels/ops/ops.h"
#include "modules/loader/state_dict.h"

namespace fusedlinear {
namespace {

// A chunked Linear's output: its half `half` (the chain's) and the other (the gate).
std::pair<torch::Tensor, torch::Tensor> halves(const torch::Tensor& y, int half) {
  const int64_t width = y.size(-1) / 2;
  return {y.narrow(-1, half * width, width), y.narrow(-1, (1 - half) * width, width)};
}

// x W^T + b in float64 on the CPU (x float64).
torch::Tensor linear_reference(LinearChainImpl& linear, const torch::Tensor& x64) {
  torch::Tensor y =
      torch::matmul(x64, linear.linear()->weight.detach().to(torch::kCPU, torch::kFloat64).t());
  const torch::Tensor& bias = linear.linear()->bias;
  if (bias.defined()) y += bias.detach().to(torch::kCPU, torch::kFloat64);
  return y;
}

}  // namespace

LayeredModelImpl::LayeredModelImpl(ModelSpec spec, const std::vector<int64_t>& widths,
                                   at::Generator generator)
    : spec_(std::move(spec)) {
  const std::vector<ModelSpec> layer_specs = spec_.layer_specs();
  if (widths.size() != layer_specs.size() + 1) {
    throw std::invalid_argument("LayeredModel: " + std::to_string(layer_specs.size()) +
                                " layers take " + std::to_string(layer_specs.size() + 1) +
                                " widths, got " + std::to_string(widths.size()));
  }
  if (spec_.residual && widths.front() != widths.back()) {
    throw std::invalid_argument("the residual adds the input (" + std::to_string(widths.front()) +
                                " wide) to the output (" + std::to_string(widths.back()) +
                                " wide): the widths must match");
  }
  // Every Linear's tensors by state-dict key ("fc2.bias"): a chain parameter naming one is that
  // tensor, as `self.fc2.bias` is in Python, bound once every Linear is made.
  std::map<std::string, std::string> linear_of;  // key -> the Linear's path
  for (const ModelSpec& one : layer_specs) {
    for (const auto& [path, bias] : {std::pair{one.linear, one.linear_bias},
                                     std::pair{one.half < 0 ? one.gate : "", one.gate_bias}}) {
      if (path.empty()) continue;
      linear_of[path + ".weight"] = path;
      if (bias) linear_of[path + ".bias"] = path;
    }
  }
  std::set<std::string> linear_tensors;
  for (const auto& item : linear_of) linear_tensors.insert(item.first);
  for (const ModelSpec& one : layer_specs) {
    for (const std::string& key : one.parsed_chain().params()) {
      if (linear_of.count(key) > 0) continue;
      for (const auto& [tensor, path] : linear_of) {
        if (key.compare(0, path.size() + 1, path + ".") == 0) {
          throw std::invalid_argument("the chain's parameter '" + key +
                                      "' names a tensor of Linear " + path +
                                      ", which holds none of that name");
        }
      }
    }
  }
  std::set<std::string> param_keys;
  for (size_t i = 0; i < layer_specs.size(); ++i) {
    const ModelSpec& one = layer_specs[i];
    const int64_t in = widths[i], out = widths[i + 1];
    ModelSpec main = one;
    main.gate.clear();
    main.half = -1;
    Layer layer;
    layer.half = one.half;
    if (one.half >= 0) {
      // The chain takes half the Linear's output: its parameters are as wide as the layer.
      for (const std::string& key : main.parsed_chain().params()) {
        main.param_shapes.emplace(key, std::vector<int64_t>{out});
      }
    }
    layer.linear = std::make_shared<LinearChainImpl>(main, in, one.half >= 0 ? 2 * out : out,
                                                     generator, linear_tensors);
    if (one.gated() && one.half < 0) {
      layer.gate = std::make_shared<LinearChainImpl>(runtime_model("", one.gate, one.gate_bias), in,
                                                     out, generator);
    }
    // Registered here under the Python keys, the same tensors and modules as the layer's own.
    for (LinearChainImpl* linear : {layer.linear.get(), layer.gate.get()}) {
      if (!linear) continue;
      for (const std::string& key : linear->chain().params()) {
        if (!param_keys.insert(key).second) {
          throw std::invalid_argument("the parameter '" + key +
                                      "' is used by two layers' chains; each layer takes its own");
        }
        if (linear_tensors.count(key) > 0) continue;  // registered with its Linear
        module_at(*this, key).register_parameter(last_component(key), linear->param(key));
      }
      const std::string& path = linear->spec().linear;
      module_at(*this, path).register_module(last_component(path), linear->linear());
    }
    layers_.push_back(layer);
  }
  for (const Layer& layer : layers_) {
    LinearChainImpl& chain = *layer.linear;
    for (const std::string& key : chain.chain().params()) {
      const auto owner = linear_of.find(key);
      if (owner == linear_of.end() || owner->second == chain.spec().linear) continue;
      for (LinearChainImpl* linear : linears()) {
        if (linear->spec().linear != owner->second) continue;
        const std::string name = last_component(key);
        chain.bind_param(key, name == "bias" ? linear->linear()->bias : linear->linear()->weight,
                         "Linear " + owner->second + "'s " + name);
      }
    }
  }
}

std::vector<LinearChainImpl*> LayeredModelImpl::linears() const {
  std::vector<LinearChainImpl*> all;
  for (const Layer& layer : layers_) {
    all.push_back(layer.linear.get());
    if (layer.gate) all.push_back(layer.gate.get());
  }
  return all;
}

LinearChainImpl& LayeredModelImpl::single_linear() const {
  if (spec_.layered()) {
    throw std::invalid_argument("model '" + spec_.name + "' has " + std::to_string(layers_.size()) +
                                " layers; this takes a model of one Linear");
  }
  return *layers_.front().linear;
}

namespace {

// The model on x: `whole(L, h, terms)` a Linear and its chain, times a gate and plus the residual
// where `terms` has them (LayerTerms), `product(L, h)` a Linear alone (bias included), `chain(L,
// y)` L's chain on y (part of L's output), `gated(L, G, h)` a gated layer (by default whole(L, h)
// times product(G, h)). A residual adds x (eager's order, x + f(x)), given to the last layer where
// it is a Linear of its own; `input` is x as the layers take it.
template <class Whole, class Product, class Chain, class Gated>
torch::Tensor evaluate(const std::vector<LayeredModelImpl::Layer>& layers, bool residual,
                       const torch::Tensor& input, Whole&& whole, Product&& product, Chain&& chain,
                       Gated&& gated) {
  torch::Tensor h = input;
  bool added = false;
  for (const LayeredModelImpl::Layer& layer : layers) {
    LinearChainImpl& linear = *layer.linear;
    if (layer.half >= 0) {
      const auto [main, other] = halves(product(linear, h), layer.half);
      h = chain(linear, main) * other;
    } else if (layer.gate) {
      h = gated(linear, *layer.gate, h);
    } else if (residual && &layer == &layers.back()) {
      h = whole(linear, h, LayerTerms{c10::nullopt, input});
      added = true;
    } else {
      h = whole(linear, h, LayerTerms{});
    }
  }
  return residual && !added ? input + h : h;
}
template <class Whole, class Product, class Chain>
torch::Tensor evaluate(const std::vector<LayeredModelImpl::Layer>& layers, bool residual,
                       const torch::Tensor& input, Whole&& whole, Product&& product,
                       Chain&& chain) {
  const auto gate_output_first = [&](LinearChainImpl& l, LinearChainImpl& gate,
                                     const torch::Tensor& h) {
    return whole(l, h, LayerTerms{product(gate, h), c10::nullopt});
  };
  return evaluate(layers, residual, input, whole, product, chain, gate_output_first);
}

// The eager form of whole(L, h, terms), from L's forward f: f(h) * gate, x + f(h).
template <class Forward>
torch::Tensor with_terms(const LayerTerms& terms, Forward&& f) {
  torch::Tensor out = f();
  if (terms.gate) out = out * *terms.gate;
  return terms.residual ? *terms.residual + out : out;
}

}  // namespace

torch::Tensor LayeredModelImpl::forward(const torch::Tensor& x) {
  // The whole-model op runs the fused-MLP kernel where choose_mlp says so, else each Linear as
  // auto plans it (the same bits as below): it decides once, from the arguments it checks.
  if (may_run_mlp(x)) return forward_op(x);
  return evaluate(
      layers_, spec_.residual, x,
      [](LinearChainImpl& l, const torch::Tensor& h, const LayerTerms& terms) {
        return l.forward_with(h, terms);
      },
      // A gate's output, or a chunked Linear's before its chain takes half: no chain.
      [](LinearChainImpl& l, const torch::Tensor& h) { return l.forward_without_chain(h); },
      [](LinearChainImpl& l, const torch::Tensor& y) {
        return l.chain_fused(y.contiguous(), c10::nullopt);
      },
      [](LinearChainImpl& l, LinearChainImpl& gate, const torch::Tensor& h) {
        return l.forward_gated(h, gate);
      });
}

torch::Tensor LayeredModelImpl::forward_eager(const torch::Tensor& x) {
  return evaluate(
      layers_, spec_.residual, x,
      [](LinearChainImpl& l, const torch::Tensor& h, const LayerTerms& terms) {
        return with_terms(terms, [&] { return l.forward_eager(h); });
      },
      [](LinearChainImpl& l, const torch::Tensor& h) { return l.linear()->forward(h); },
      [](LinearChainImpl& l, const torch::Tensor& y) { return l.chain_eager(y); });
}

torch::Tensor LayeredModelImpl::forward_eager_gemms(const torch::Tensor& x) {
  const auto fused_chain = [](LinearChainImpl& l, const torch::Tensor& y) {
    return l.chain_fused(y.contiguous(), c10::nullopt);
  };
  return evaluate(
      layers_, spec_.residual, x,
      [](LinearChainImpl& l, const torch::Tensor& h, const LayerTerms& terms) {
        const torch::Tensor out = l.chain_fused(l.linear()->forward(h), c10::nullopt, terms.gate);
        return terms.residual ? *terms.residual + out : out;
      },
      [](LinearChainImpl& l, const torch::Tensor& h) { return l.linear()->forward(h); },
      fused_chain);
}

ModelOpArguments LayeredModelImpl::op_arguments() {
  if (!spec_.layered()) {
    throw std::invalid_argument(
        "op_arguments: a layered model's; a one-Linear model runs with "
        "the ops epilogue, linear_epilogue or gemm_epilogue");
  }
  ModelOpArguments arguments;
  arguments.spec = spec_.name;
  arguments.precision = layers_.front().linear->precision();
  arguments.gemm = layers_.front().linear->gemm_kernel();
  const auto add_linear = [&](LinearChainImpl& l) {
    const LinearWeights w = l.weights(arguments.precision);
    arguments.weights.push_back(w.weight);
    for (const torch::Tensor& part : {w.hi, w.mid, w.lo}) {
      if (part.defined()) arguments.weights.push_back(part);
    }
    const torch::Tensor& bias = l.linear()->bias;
    arguments.biases.push_back(bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
  };
  for (const Layer& layer : layers_) {
    add_linear(*layer.linear);
    if (layer.gate) add_linear(*layer.gate);
    for (const torch::Tensor& p : layer.linear->slot_params()) arguments.params.push_back(p);
  }
  return arguments;
}

torch::Tensor LayeredModelImpl::forward_op(const torch::Tensor& x) {
  const ModelOpArguments a = op_arguments();
  return fused_model(x, a.weights, a.biases, a.params, a.spec, a.precision, a.gemm);
}

void LayeredModelImpl::run_gemms(const torch::Tensor& x) {
  torch::Tensor h = x;
  for (const Layer& layer : layers_) {
    torch::Tensor y = layer.linear->linear()->forward(h);
    if (layer.gate) layer.gate->linear()->forward(h);
    h = layer.half >= 0 ? halves(y, layer.half).first : y;
  }
}

torch::Tensor LayeredModelImpl::reference(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x64 = x.detach().to(torch::kCPU, torch::kFloat64);
  return evaluate(
      layers_, spec_.residual, x64,
      [](LinearChainImpl& l, const torch::Tensor& h, const LayerTerms& terms) {
        return with_terms(terms, [&] { return l.reference(h); });
      },
      &linear_reference,
      [](LinearChainImpl& l, const torch::Tensor& y) {
        return reference_chain(l.chain(), y.contiguous(), l.slot_params());
      });
}

void LayeredModelImpl::set_precision(Precision precision) {
  for (LinearChainImpl* linear : linears()) linear->set_precision(precision);
}

void LayeredModelImpl::set_bf16x3_min_rows(int64_t rows) {
  for (LinearChainImpl* linear : linears()) linear->set_bf16x3_min_rows(rows);
}

void LayeredModelImpl::set_gemm_kernel(GemmKernel kernel) {
  for (LinearChainImpl* linear : linears()) linear->set_gemm_kernel(kernel);
}

GemmKernel LayeredModelImpl::model_kernel() const {
  const GemmKernel first = layers_.front().linear->gemm_kernel();
  for (const Layer& layer : layers_) {
    for (const auto* linear : {layer.linear.get(), layer.gate.get()}) {
      // Mixed kernels: each Linear as its own says.
      if (linear && linear->gemm_kernel() != first) return GemmKernel::kCublas;
    }
  }
  return first;
}

bool LayeredModelImpl::may_run_mlp(const torch::Tensor& x) {
  if (!spec_.layered()) return false;
  const GemmKernel kernel = model_kernel();
  // Asked for: the op runs it or says why not. Under auto: the op only where the plan takes it.
  if (kernel == GemmKernel::kMlp) return true;
  if (kernel != GemmKernel::kAuto || !x.is_cuda()) return false;
  return *kept_mlp_choice_.answer_for(
      mlp_query(x), [&](const MlpQuery& query) { return choose_mlp(query, kernel).fused; });
}

MlpQuery LayeredModelImpl::mlp_query(const torch::Tensor& x) {
  MlpQuery query;
  query.precision = layers_.front().linear->precision();
  query.float32_model = x.scalar_type() == torch::kFloat32;
  query.device = gemm_device_of(x);
  query.rows = rows_of(x);
  query.widths.push_back(in_features());
  for (const Layer& layer : layers_) {
    const int64_t out = layer.linear->out_features();
    query.widths.push_back(layer.half >= 0 ? out / 2 : out);
    query.compiled_chains.push_back(layer.linear->compiled_chain());
    query.gated.push_back(layer.gate != nullptr || layer.half >= 0);
  }
  return query;
}

MlpChoice LayeredModelImpl::mlp_choice(const torch::Tensor& x) {
  // The plan decides and says why, on the CPU and for a Linear on its own too.
  return choose_mlp(mlp_query(x), model_kernel());
}

std::string LayeredModelImpl::mlp_refusal(const torch::Tensor& x) {
  const MlpChoice choice = mlp_choice(x);
  return choice.fused ? "" : choice.reason;
}

std::string LayeredModelImpl::gemm_description(const torch::Tensor& x) {
  // What may_run_mlp decides, from one query that the description reads too.
  if (spec_.layered()) {
    const MlpQuery query = mlp_query(x);
    if (choose_mlp(query, model_kernel()).fused) return mlp_description(query);
  }
  std::string text;
  std::string last;
  for (LinearChainImpl* linear : linears()) {
    const std::string one = linear->gemm_plan(x).description;
    // Linears that run alike are said once.
    if (one != last) text += (text.empty() ? "" : "; ") + one;
    last = one;
  }
  return text;
}

int64_t LayeredModelImpl::split_weight_bytes() {
  int64_t bytes = 0;
  for (LinearChainImpl* linear : linears()) bytes += linear->split_weight_bytes();
  return bytes;
}

double LayeredModelImpl::flops_per_row() {
  double flops = 0;
  for (LinearChainImpl* linear : linears()) {
    flops += 2.0 * double(linear->in_features()) * double(linear->out_features());
  }
  return flops;
}

int64_t LayeredModelImpl::in_features() { return layers_.front().linear->in_features(); }

int64_t LayeredModelImpl::out_features() {
  const Layer& last = layers_.back();
  const int64_t width = last.linear->out_features();
  return last.half >= 0 ? width / 2 : width;
}

std::vector<std::string> layered_model_keys(const ModelSpec& spec) {
  const std::vector<int64_t> widths(spec.layer_specs().size() + 1, 2);
  LayeredModelImpl model(spec, widths, at::detail::createCPUGenerator(0));
  return state_dict_keys(model);
}

}  // namespace fusedlinear
