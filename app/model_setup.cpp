// Setting up the model a run asks for: detected from --weights or built from --model / --chain,
// its widths, its weight layout, its configuration and its input.
#include "app/model_setup.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "app/cli.h"
#include "app/memory.h"
#include "app/report.h"
#include "app/timing.h"
#include "kernels/ops/chain_spec.h"
#include "modules/loader/key_names.h"
#include "modules/loader/state_dict.h"
#include "modules/loader/torch_file.h"

namespace fusedlinear {
namespace {

// Every model's name and state-dict keys.
const std::vector<ModelKeys>& all_model_keys() {
  static const std::vector<ModelKeys> keys = [] {
    std::vector<ModelKeys> out;
    for (const ModelSpec& spec : registered_models()) {
      out.emplace_back(spec.name, model_keys(spec));
    }
    return out;
  }();
  return keys;
}

// A LoadError about a file the user gave with `option`, saying so: "--input x.pt: ...".
LoadError about(const std::string& option, const std::exception& e) {
  return LoadError(option + " " + e.what());
}

// "a, b, c".
std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// The --weights files that held a bare nn.Linear's keys, named by name_bare_linear.
std::set<std::string>& bare_linear_files() {
  static std::set<std::string> files;
  return files;
}

// A bare nn.Linear's state dict (torch.save(nn.Linear(...).state_dict())): its keys "weight"
// and "bias" become the Linear kBareLinearPath's, which --chain SPEC and the one-Linear models
// name, with a notice. Other files are left as they are.
void name_bare_linear(NamedTensors& file, const std::string& path) {
  std::vector<std::string> keys;
  for (const auto& item : file.tensors) keys.push_back(item.first);
  if (!is_bare_linear(keys) || file.metadata.count("linear")) return;
  for (auto& [key, tensor] : file.tensors) {
    if (key == weight_key("") && tensor.dim() != 2) return;
  }
  for (auto& item : file.tensors) {
    item.first =
        item.first == weight_key("") ? weight_key(kBareLinearPath) : bias_key(kBareLinearPath);
  }
  file.notices.push_back("the keys are a bare nn.Linear's (" + weight_key("") +
                         (keys.size() > 1 ? ", " + bias_key("") : std::string()) +
                         "): taken as the Linear '" + kBareLinearPath + "'");
  bare_linear_files().insert(path);
}

// The --weights file, read once however many times a run needs it: --strip-prefix, else a
// training wrapper's attribute prefix that makes the keys one model's (strip_attribute_prefix);
// a bare nn.Linear's keys named (name_bare_linear).
const NamedTensors& weights_file(const Settings& settings) {
  static std::map<std::string, NamedTensors> cache;
  auto it = cache.find(settings.weights);
  if (it == cache.end()) {
    // Its notices reach the user through apply_state_dict, with the model's.
    try {
      NamedTensors file =
          read_state_dict(settings.weights, settings.weights_key, settings.strip_prefix);
      check_metadata_version(file, settings.weights);
      if (settings.strip_prefix.empty()) strip_attribute_prefix(file, all_model_keys());
      name_bare_linear(file, settings.weights);
      it = cache.emplace(settings.weights, std::move(file)).first;
    } catch (const LoadError& e) {
      throw about("--weights", e);
    }
  }
  return it->second;
}

const torch::Tensor* find_tensor(const NamedTensors& file, const std::string& key) {
  for (const auto& [name, tensor] : file.tensors) {
    if (name == key) return &tensor;
  }
  return nullptr;
}

std::string keys_of(const NamedTensors& file) {
  std::string out;
  for (const auto& item : file.tensors) out += (out.empty() ? "" : ", ") + item.first;
  return out.empty() ? "(none)" : out;
}

}  // namespace

namespace {

// The attribute paths of the file's Linears, those of its 2-D "<path>.weight" tensors, in file
// order.
std::vector<std::string> linear_paths(const NamedTensors& file) {
  std::vector<std::string> paths;
  for (const auto& [key, tensor] : file.tensors) {
    const std::optional<std::string> path = weight_path(key);
    // A bare Linear's path ("") was named on reading (weights_file); the spec grammar names no
    // other empty path.
    if (path && !path->empty() && tensor.dim() == 2) {
      paths.push_back(*path);
    }
  }
  return paths;
}

// How to run a file of several Linears that carries no chain: a layered spec naming them.
std::string several_linears_advice(const std::vector<std::string>& paths) {
  std::string example;
  for (size_t i = 0; i < paths.size(); ++i) {
    example += (i ? "|" : "") + paths[i] + (i + 1 < paths.size() ? ":gelu" : "");
  }
  return "holds several Linears (" + joined(paths) +
         "), and a chain spec follows one: name each in a layered spec, e.g. --chain '" + example +
         "' (docs/CHAINS.md, \"Layered models\"), or save the file with its model "
         "(weights/fx_chain.py save_with_chain)";
}

// The Linear's attribute path in a file: the one its metadata names, else that of its one 2-D
// "<path>.weight" tensor.
std::string linear_path(const NamedTensors& file, const Settings& settings) {
  const auto named = file.metadata.find("linear");
  if (named != file.metadata.end()) {
    // A path the model could not be built with (an empty part) is the metadata's fault: said so,
    // as the spec's grammar says it of a layered spec's paths.
    const std::string& path = named->second;
    if (!is_attribute_path(path)) {
      throw LoadError("--weights " + settings.weights + ": its fusedlinear metadata names the " +
                      "Linear " + spec_excerpt(path, 0) +
                      ", not an attribute path ([A-Za-z0-9_.], e.g. fc or block.0); save the " +
                      "file again with weights/fx_chain.py save_with_chain");
    }
    return path;
  }
  const std::vector<std::string> candidates = linear_paths(file);
  if (candidates.size() == 1) return candidates.front();
  throw UsageError("--weights " + settings.weights + ": " +
                   (candidates.empty() ? std::string("holds no Linear weight (a 2-D <path>.weight)")
                                       : several_linears_advice(candidates)) +
                   "; its keys: " + keys_of(file));
}

// A chain spec or a layered one in canonical form, or the text itself where it parses as
// neither (it then equals no other spec).
std::string canonical_model_spec(const std::string& spec) {
  try {
    return is_layered_spec(spec) ? parse_model_spec(spec).to_string()
                                 : parse_chain_or_empty(spec).to_string();
  } catch (const ChainSpecError&) {
    return spec;
  }
}

// Each chain parameter of `model`'s layers checked to be in the file, with its shape where it is
// one value ([] or [1]).
void check_chain_params(ModelSpec& model, const NamedTensors& file, const Settings& settings,
                        const std::string& from) {
  std::vector<ModelSpec*> layers;
  if (model.layered()) {
    for (ModelSpec& layer : model.layers) layers.push_back(&layer);
  } else {
    layers.push_back(&model);
  }
  for (ModelSpec* layer : layers) {
    // The layer's width, from its Linear's weight in the file (half of it for a chunked Linear).
    const torch::Tensor* weight = find_tensor(file, weight_key(layer->linear));
    const int64_t width =
        weight && weight->dim() == 2 ? weight->size(0) / (layer->half >= 0 ? 2 : 1) : -1;
    for (const std::string& key : layer->parsed_chain().params()) {
      const torch::Tensor* tensor = find_tensor(file, key);
      if (!tensor) {
        throw UsageError(from + ": the chain's parameter '" + key + "' is not in --weights " +
                         settings.weights + " (its keys: " + keys_of(file) + ")");
      }
      if (tensor->numel() == 1 && tensor->dim() <= 1) {
        layer->param_shapes[key] = tensor->sizes().vec();
      } else if (width >= 0 && (tensor->dim() != 1 || tensor->size(0) != width)) {
        // A chain parameter broadcasts along the features (a Linear's bias may be one, its
        // weight never).
        std::ostringstream s;
        s << from << ": the chain's parameter '" << key << "' has shape " << tensor->sizes()
          << " in --weights " << settings.weights << ", expected [" << width << "] (the width of "
          << layer->linear << (layer->half >= 0 ? "'s half" : "") << "), [] or [1]";
        throw UsageError(s.str());
      }
    }
  }
}

// The model of `spec` (a chain spec, or a layered one) with the Linears and parameter shapes of
// the file (or, without one, a chain's Linear named "linear" and per-feature parameters), each
// parameter checked to be there.
ModelSpec chain_model_for(const std::string& spec, const Settings& settings,
                          const std::string& from) {
  if (is_layered_spec(spec)) {
    if (settings.weights.empty()) return layered_model(spec);
    const NamedTensors& file = weights_file(settings);
    std::map<std::string, bool> biases;
    for (const ParsedLayer& layer : parse_model_spec(spec).layers) {
      for (const std::string& path : {layer.linear.path, layer.gate.path}) {
        if (!path.empty()) biases[path] = find_tensor(file, bias_key(path)) != nullptr;
      }
    }
    ModelSpec model = layered_model(spec, biases);
    check_chain_params(model, file, settings, from);
    return model;
  }
  if (settings.weights.empty()) return runtime_model(spec);
  const NamedTensors& file = weights_file(settings);
  const std::string linear = linear_path(file, settings);
  ModelSpec model = runtime_model(spec, linear, find_tensor(file, bias_key(linear)) != nullptr);
  check_chain_params(model, file, settings, from);
  return model;
}

}  // namespace

ModelSpec chain_model(const std::string& spec, const Settings& settings) {
  if (!settings.weights.empty()) {
    const NamedTensors& file = weights_file(settings);
    const auto carried = file.metadata.find("chain");
    // The file says what follows its Linears: another chain given contradicts it.
    if (carried != file.metadata.end() &&
        canonical_model_spec(carried->second) != canonical_model_spec(spec)) {
      // Both specs escaped: either may hold a newline, and the message is one line.
      throw UsageError("--chain " + spec_quoted(spec) + ": --weights " + settings.weights +
                       " carries the chain " + spec_quoted(carried->second) +
                       "; leave out --chain to run it, or give a file without a chain");
    }
  }
  return chain_model_for(spec, settings, "--chain " + spec_quoted(spec));
}

ModelSpec detect_model(const Settings& settings) {
  const NamedTensors& file = weights_file(settings);
  const auto carried = file.metadata.find("chain");
  if (carried != file.metadata.end()) {
    // A chain names at least one op, in a file as on the command line (the empty spec is the
    // ops' way to say a layer's Linear alone, not a spec).
    if (!is_layered_spec(carried->second)) {
      try {
        parse_chain(carried->second);
      } catch (const ChainSpecError& e) {
        throw UsageError("--weights " + settings.weights + "'s " + e.what());
      }
    }
    return chain_model_for(carried->second, settings, "--weights " + settings.weights + "'s chain");
  }
  if (bare_linear_files().count(settings.weights)) {
    throw UsageError("--weights " + settings.weights +
                     ": holds a bare nn.Linear's state dict (weight, bias), which any chain may "
                     "follow: give the chain with --chain SPEC (e.g. --chain gelu, or --chain '" +
                     kBareLinearPath +
                     ":' for the Linear alone; docs/CHAINS.md), or save the module the Linear is "
                     "part of with its chain (weights/fx_chain.py save_with_chain)");
  }
  // The models all of whose keys the file holds. One is taken only where more than a Linear's keys
  // name it: a file of a Linear's keys alone fits any chain, and is never taken for one.
  std::vector<std::string> fits;
  for (const ModelSpec& spec : registered_models()) {
    const std::vector<std::string> keys = model_keys(spec);
    if (std::all_of(keys.begin(), keys.end(),
                    [&](const std::string& key) { return find_tensor(file, key) != nullptr; })) {
      fits.push_back(spec.name);
    }
  }
  if (fits.size() > 1) {
    std::string names;
    for (const auto& name : fits) names += (names.empty() ? "" : " and ") + name;
    throw UsageError("--weights " + settings.weights + ": its keys fit " + names +
                     "; say which with --model");
  }
  if (fits.size() == 1) {
    ModelSpec spec = find_model(fits.front());
    if (!spec.parsed_chain().params().empty()) return spec;
    throw UsageError("--weights " + settings.weights + ": its keys (" + keys_of(file) +
                     ") are a Linear's, which any chain may follow: say which with --model (" +
                     joined(model_names()) +
                     ") or --chain SPEC (docs/CHAINS.md), or save the "
                     "file with its chain (weights/fx_chain.py save_with_chain)");
  }
  std::string models;
  for (const auto& [name, keys] : all_model_keys()) {
    models += (models.empty() ? "" : "; ") + name + ": " + joined(keys);
  }
  const std::string hint = strip_prefix_hint(file, all_model_keys());
  // Linears without a chain: their chain is what is missing, not a prefix to strip (unless a
  // registered model's keys all lie under one, which the hint then names).
  const std::vector<std::string> linears = linear_paths(file);
  if (!linears.empty() && hint == strip_prefix_hint(file, {})) {
    throw LoadError(
        "--weights " + settings.weights + ": holds no registered model's keys (" + models +
        ") and carries no chain; its keys: " + keys_of(file) + "; it " +
        (linears.size() == 1
             ? "holds one Linear (" + linears.front() +
                   "), which any chain may follow: give it with --chain SPEC (docs/CHAINS.md), "
                   "or save the file with its chain (weights/fx_chain.py save_with_chain)"
             : several_linears_advice(linears)));
  }
  throw LoadError("--weights " + settings.weights + ": holds no model's keys (" + models +
                  "); its keys: " + keys_of(file) + hint +
                  "; for a model of your own give --chain SPEC");
}

void check_carried_chain(const ModelSpec& model, const Settings& settings) {
  if (settings.weights.empty()) return;
  const NamedTensors& file = weights_file(settings);
  const auto carried = file.metadata.find("chain");
  if (carried == file.metadata.end()) return;
  const auto linear = file.metadata.find("linear");
  // A layered declaration's name is no spec: its layers say what it computes.
  const std::string spec = model.layered() ? model.parsed_model().to_string() : model.chain;
  const bool same_chain = canonical_model_spec(carried->second) == canonical_model_spec(spec);
  const bool same_linear =
      model.layered() || linear == file.metadata.end() || linear->second == model.linear;
  if (same_chain && same_linear) return;
  throw UsageError("--model " + model.name + ": --weights " + settings.weights +
                   " carries the chain " + spec_quoted(carried->second) +
                   (linear != file.metadata.end() && !linear->second.empty()
                        ? " after Linear " + linear->second
                        : std::string()) +
                   ", not " + model.name + "'s '" + spec + "'" +
                   (model.layered() ? "" : " after Linear " + model.linear) +
                   "; leave out --model to run the file's chain");
}

namespace {

// The weight [out, in] of the Linear at `path` in `file`, checked to be a matrix.
const torch::Tensor& file_weight(const NamedTensors& file, const std::string& path,
                                 const ModelSpec& spec, const Settings& settings) {
  const std::string key = weight_key(path);
  const torch::Tensor* weight = find_tensor(file, key);
  if (!weight) {
    // A bare Linear's keys were named here, not in the file: no prefix of theirs to strip.
    const bool bare = bare_linear_files().count(settings.weights) > 0;
    throw LoadError("--weights " + settings.weights + ": missing key " + key + " (model " +
                    spec.name + "); the file has " + keys_of(file) +
                    (bare ? std::string(" (a bare nn.Linear's weight and bias, named '") +
                                kBareLinearPath + "': name it so in the spec, e.g. --chain '" +
                                kBareLinearPath + ":gelu')"
                          : strip_prefix_hint(file, all_model_keys())));
  }
  if (weight->dim() != 2) {
    std::ostringstream s;
    s << "--weights " << settings.weights << ": " << key << " has shape " << weight->sizes()
      << ", expected [out_features, in_features]";
    throw LoadError(s.str());
  }
  // A Linear of no inputs or outputs computes nothing a chain could follow (and has no
  // initialisation to build the model from); the exporter refuses it with the same words.
  for (const int64_t dim : {int64_t{0}, int64_t{1}}) {
    if (weight->size(dim) == 0) {
      std::ostringstream s;
      s << "--weights " << settings.weights << ": " << key << " has shape " << weight->sizes()
        << ": a Linear of 0 " << (dim == 0 ? "output" : "input")
        << " features; fusedlinear runs Linears of at least 1 of each";
      throw LoadError(s.str());
    }
  }
  return *weight;
}

// The model's widths: its input's, then each layer's output's. From the file's weights where
// there is one (each layer checked to take the width the one before gives), otherwise
// --in-features for the input and --out-features for every layer.
std::vector<int64_t> model_widths(const ModelSpec& spec, const Settings& settings) {
  const std::vector<ModelSpec> layers = spec.layer_specs();
  if (settings.weights.empty()) {
    std::vector<int64_t> widths(layers.size() + 1, settings.out_features);
    widths.front() = settings.in_features;
    return widths;
  }
  const NamedTensors& file = weights_file(settings);
  if (!spec.layered()) {  // the shape given, else the file's (a loader error names a mismatch)
    if (settings.in_features != 0 && settings.out_features != 0) {
      return {settings.in_features, settings.out_features};
    }
    const torch::Tensor& weight = file_weight(file, spec.linear, spec, settings);
    return {settings.in_features ? settings.in_features : weight.size(1),
            settings.out_features ? settings.out_features : weight.size(0)};
  }
  std::vector<int64_t> widths;
  for (size_t i = 0; i < layers.size(); ++i) {
    const ModelSpec& layer = layers[i];
    const torch::Tensor& weight = file_weight(file, layer.linear, spec, settings);
    int64_t in = weight.size(1), out = weight.size(0);
    const std::string where = "--weights " + settings.weights + ": " + weight_key(layer.linear);
    if (layer.half >= 0) {
      if (out % 2 != 0) {
        throw LoadError(where + " has " + std::to_string(out) + (out == 1 ? " row" : " rows") +
                        ", which chunk(2, -1) cannot split in two halves");
      }
      out /= 2;
    }
    if (layer.gated() && layer.half < 0) {
      const torch::Tensor& gate = file_weight(file, layer.gate, spec, settings);
      if (gate.sizes() != weight.sizes()) {
        std::ostringstream s;
        s << where << " is " << weight.sizes() << " and its gate's " << layer.gate << ".weight is "
          << gate.sizes() << ": a gated pair's Linears take the same shape";
        throw LoadError(s.str());
      }
    }
    if (i == 0) {
      if (settings.in_features != 0 && settings.in_features != in) {
        throw UsageError("--in-features " + std::to_string(settings.in_features) + ": " + where +
                         " takes " + std::to_string(in) + " inputs");
      }
      widths.push_back(in);
    } else if (in != widths.back()) {
      throw LoadError(where + " takes " + std::to_string(in) + " inputs, but the layer before (" +
                      layers[i - 1].linear + ") gives " + std::to_string(widths.back()));
    }
    widths.push_back(out);
  }
  if (settings.out_features != 0 && settings.out_features != widths.back()) {
    throw UsageError("--out-features " + std::to_string(settings.out_features) + ": the model in " +
                     settings.weights + " gives " + std::to_string(widths.back()) + " outputs");
  }
  if (spec.residual && widths.front() != widths.back()) {
    throw LoadError("--weights " + settings.weights + ": the model adds its input (" +
                    std::to_string(widths.front()) + " wide) to its output (" +
                    std::to_string(widths.back()) + " wide): a residual needs the same widths");
  }
  return widths;
}

}  // namespace

std::pair<int64_t, int64_t> model_in_out(const ModelSpec& spec, const Settings& settings) {
  const std::vector<int64_t> widths = model_widths(spec, settings);
  return {widths.front(), widths.back()};
}

std::shared_ptr<LayeredModelImpl> build_model(const ModelSpec& spec, const Settings& settings,
                                              at::Generator* rest_of_stream) {
  const NamedTensors* file = settings.weights.empty() ? nullptr : &weights_file(settings);
  const std::vector<int64_t> widths = model_widths(spec, settings);
  // The weights are drawn in float32 on the CPU, then moved: refused before they are asked for
  // where they cannot fit (a system that overcommits would otherwise take minutes to fail).
  double weight_bytes = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const ModelSpec layer = spec.layer_specs()[i];
    weight_bytes += double(widths[i]) * double(widths[i + 1]) * (layer.gated() ? 2 : 1) * 4;
  }
  check_fits(settings, weight_bytes, torch::kCPU, "the weights of " + spec.name);
  if (settings.device.is_cuda()) {
    check_fits(settings, weight_bytes / 4 * double(c10::elementSize(settings.dtype)),
               settings.device, "the weights of " + spec.name);
  }
  at::Generator stream = at::detail::createCPUGenerator(settings.seed);
  std::shared_ptr<LayeredModelImpl> model;
  try {
    model = std::make_shared<LayeredModelImpl>(spec, widths, stream);
  } catch (const std::invalid_argument& e) {
    throw UsageError("model " + spec.name + ": " + e.what());
  }
  if (rest_of_stream) *rest_of_stream = stream;
  // Loaded in the run's dtype: the notice then names the conversions the file's tensors go
  // through (a bfloat16 file run in bfloat16 goes through none), and values the dtype cannot hold
  // are refused as they are read.
  model->to(settings.dtype);
  if (file) {
    // compare and bench build each model twice (eager's and the fused path's): say things once.
    static std::set<std::string> shown;
    std::vector<std::string> notices;
    try {
      notices = apply_state_dict(*model, *file, settings.weights, settings.strict);
    } catch (const LoadError& e) {
      throw about("--weights", e);
    }
    for (const auto& notice : notices) {
      const std::string line = "fusedlinear: note: " + spec.name + ": " + notice;
      if (shown.insert(line).second) std::cerr << line << "\n";
    }
  }
  model->to(settings.device);  // already in the run's dtype (above)
  model->eval();
  return model;
}

std::string choose_weight_layout(LinearChainImpl& model, const torch::Tensor& x) {
  if (!x.is_cuda()) return "weight as loaded (output-major; layouts are chosen on GPUs only)";
  const GemmPlan plan = model.gemm_plan(x);
  if (plan.skinny || plan.hopper) {
    return std::string("weight ") +
           (model.weight_layout() == WeightLayout::kInputMajor ? "input-major" : "output-major") +
           " (the " + (plan.skinny ? "skinny kernel" : "Hopper GEMM") +
           " reads W, or its split parts, output-major)";
  }
  torch::NoGradGuard no_grad;
  const WeightLayout current = model.weight_layout();
  const WeightLayout other_layout =
      current == WeightLayout::kInputMajor ? WeightLayout::kOutputMajor : WeightLayout::kInputMajor;
  const torch::Tensor weight = model.linear()->weight;
  const torch::Tensor other = model.weight_in(other_layout);  // a copy, [out, in] either way
  const auto times = time_interleaved(
      x.device(), 3, 10,
      {[&](int) { torch::matmul(x, weight.t()); }, [&](int) { torch::matmul(x, other.t()); }});
  const bool input_major_now = current == WeightLayout::kInputMajor;
  const double input_major_us = input_major_now ? times[0].median_us : times[1].median_us;
  const double output_major_us = input_major_now ? times[1].median_us : times[0].median_us;
  // Keeps the copy just timed rather than converting again.
  if (times[1].median_us < times[0].median_us) model.store_weight(other);
  const bool input_major = model.weight_layout() == WeightLayout::kInputMajor;
  return std::string("weight ") + (input_major ? "input-major" : "output-major") +
         " (bias-free GEMM " + fixed(input_major_us, 1) + " us input-major, " +
         fixed(output_major_us, 1) + " us output-major)";
}

std::string choose_weight_layout(LayeredModelImpl& model, const torch::Tensor& x) {
  if (!x.is_cuda()) return choose_weight_layout(*model.linears().front(), x);
  if (model.mlp_refusal(x).empty()) {
    return "weight layouts kept (the fused MLP kernel reads W output-major)";
  }
  std::string text;
  for (LinearChainImpl* linear : model.linears()) {
    // Each Linear timed on an input of its width and x's rows.
    const int64_t in = linear->in_features();
    const torch::Tensor input =
        x.size(-1) == in ? x : torch::rand({x.numel() / x.size(-1), in}, x.options());
    const std::string line = choose_weight_layout(*linear, input);
    if (model.linears().size() > 1) {
      text += (text.empty() ? "" : "; ") + linear->spec().linear + ": " + line;
    } else {
      text = line;
    }
  }
  return text;
}

void configure_fused(LinearChainImpl& model, Precision precision, GemmKernel kernel,
                     const Settings& settings) {
  model.set_bf16x3_min_rows(settings.bf16x3_min_rows);
  model.set_precision(precision);
  model.set_gemm_kernel(kernel);
}

void configure_fused(LayeredModelImpl& model, Precision precision, GemmKernel kernel,
                     const Settings& settings) {
  for (LinearChainImpl* linear : model.linears()) {
    configure_fused(*linear, precision, kernel, settings);
  }
}

std::string gemm_description(LinearChainImpl& model, const torch::Tensor& x) {
  return model.gemm_plan(x).description;
}

std::shared_ptr<LinearChainImpl> build_linear_model(const ModelSpec& spec,
                                                    const Settings& settings) {
  if (spec.layered()) {
    throw UsageError(settings.command + " times models of one Linear; " + spec.name + " has " +
                     std::to_string(spec.layers.size()) + " layers (compare times them)");
  }
  return build_model(spec, settings)->layers().front().linear;
}

bool verdict_counts(Precision precision, const Settings& settings) {
  return keeps_float32_accuracy(precision) || settings.tolerance_given;
}

torch::Tensor build_input(const Settings& settings, int64_t in_features, at::Generator stream) {
  torch::Tensor x;
  if (!settings.input.empty()) {
    try {
      x = read_tensor(settings.input);
    } catch (const LoadError& e) {
      throw about("--input", e);
    }
    if (x.dim() < 1 || x.size(-1) != in_features || !x.is_floating_point()) {
      std::ostringstream s;
      s << "--input " << settings.input << ": the input has shape " << x.sizes() << " and dtype "
        << x.scalar_type() << ", expected a floating-point tensor [..., " << in_features
        << "] (in_features of the model)";
      throw UsageError(s.str());
    }
    // As weights are (apply_state_dict): values the run's dtype cannot hold are refused, not
    // made infinite.
    if (x.scalar_type() != settings.dtype) {
      const std::string loss = conversion_loss(x, settings.dtype);
      if (!loss.empty()) {
        std::ostringstream s;
        s << "--input " << settings.input << ": cannot convert the input's " << x.scalar_type()
          << " to the run's " << settings.dtype << " (--dtype " << dtype_name(settings.dtype)
          << "): " << loss;
        throw UsageError(s.str());
      }
    }
  } else {
    // torch.rand(batch, in_features): uniform in [0, 1), as the reference workload, continuing
    // the stream the parameters were drawn from (see cli.h).
    check_fits(settings, double(settings.batch) * double(in_features) * 4, torch::kCPU,
               "the input");
    x = torch::rand({settings.batch, in_features}, stream);
  }
  return x.to(settings.device, settings.dtype).contiguous();
}

}  // namespace fusedlinear
