// The models fusedlinear knows (registry.h).
#include "modules/registry.h"

#include <mutex>
#include <stdexcept>

#include "kernels/ops/chain_registry.h"

namespace fusedlinear {
namespace {

struct Models {
  std::mutex mutex;
  std::vector<ModelSpec> specs;
};

Models& models() {
  static Models m;
  return m;
}

}  // namespace

ParsedChain ModelSpec::parsed_chain() const {
  return compiled ? find_chain(name).chain : parse_chain_or_empty(chain);
}

std::string ModelSpec::description() const {
  return layered() ? parse_model_spec(name).description() : parsed_chain().description();
}

void register_model(const ModelSpec& spec) {
  Models& m = models();
  const std::lock_guard<std::mutex> lock(m.mutex);
  for (const ModelSpec& known : m.specs) {
    if (known.name == spec.name) {
      throw std::invalid_argument("fusedlinear: a model named '" + spec.name +
                                  "' is registered twice");
    }
  }
  m.specs.push_back(spec);
}

std::vector<ModelSpec> registered_models() {
  Models& m = models();
  const std::lock_guard<std::mutex> lock(m.mutex);
  return m.specs;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelSpec& spec : registered_models()) names.push_back(spec.name);
  return names;
}

ModelSpec find_model(const std::string& name) {
  std::string known;
  for (const ModelSpec& spec : registered_models()) {
    if (spec.name == name) return spec;
    known += (known.empty() ? "" : ", ") + spec.name;
  }
  throw std::invalid_argument("unknown model '" + name + "' (expected one of: " + known + ")");
}

ModelSpec runtime_model(const std::string& spec, const std::string& linear, bool linear_bias) {
  const ParsedChain chain = parse_chain_or_empty(spec);
  program_of(chain);  // refuses what the interpreter cannot run, now rather than at the first call
  ModelSpec model;
  model.name = chain.to_string();
  model.linear = linear;
  model.linear_bias = linear_bias;
  model.chain = chain.to_string();
  return model;
}

ModelSpec layered_model(const std::string& spec, const std::map<std::string, bool>& biases) {
  const ParsedModel parsed = parse_model_spec(spec);
  const auto has_bias = [&](const std::string& path) {
    const auto it = biases.find(path);
    return it == biases.end() || it->second;
  };
  ModelSpec model;
  model.name = parsed.to_string();
  model.residual = parsed.residual;
  for (const ParsedLayer& layer : parsed.layers) {
    program_of(layer.chain);  // refuses what the interpreter cannot run, now
    ModelSpec one;
    one.name = one.chain = layer.chain.to_string();
    one.linear = layer.linear.path;
    one.linear_bias = has_bias(one.linear);
    if (layer.gated) {
      one.gate = layer.gate.path;
      one.gate_bias = has_bias(one.gate);
      one.half = layer.linear.half;
    }
    model.layers.push_back(one);
  }
  return model;
}

}  // namespace fusedlinear
