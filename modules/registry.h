// The models fusedlinear knows: a ModelSpec each, registered by the declarations' registration
// files (kernels/register/fusedlinear_models.cmake; the library's own: swish_chain, mish_mish),
// or made at run time from a chain spec (runtime_model). The CLI (--model, inferring a model from
// a file's keys), bench, the tests and, checked against them by a test, weights/export.py take
// their names and keys from here.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/ops/chain_spec.h"
#include "kernels/ops/model_spec.h"

namespace fusedlinear {

struct ModelSpec {
  std::string name;    // as the CLI and Python call it; a run-time chain's: its spec
  std::string linear;  // the nn.Linear's attribute path ("matmul", "fc", "block.0")
  bool linear_bias = true;
  std::string chain;  // the chain's canonical spec (docs/CHAINS.md); "" for none
  // Whether `name` has compiled kernels (a declaration's); otherwise the interpreter runs `chain`.
  bool compiled = false;
  // A parameter's shape where it is not [out_features]: [] or [1] (one value for every column).
  std::map<std::string, std::vector<int64_t>> param_shapes;

  // A gated layer: its output chain(linear(x)) times gate(x), `gate` a Linear of its own (path),
  // or with `half` 0 or 1, the other half of `linear`'s output (chunk(2, -1)), the chain then
  // taking half `half`.
  std::string gate;
  bool gate_bias = true;
  int half = -1;
  bool gated() const { return !gate.empty(); }

  // A layered model (kernels/ops/model_spec.h): its layers in order, each a one-Linear spec as
  // above (the fields above then unused but `name`), and whether the input is added to the
  // output. Empty for a one-Linear model.
  std::vector<ModelSpec> layers;
  bool residual = false;
  bool layered() const { return !layers.empty(); }
  // The layers a model runs: `layers`, or the model itself as its one layer.
  std::vector<ModelSpec> layer_specs() const {
    return layered() ? layers : std::vector<ModelSpec>{*this};
  }

  // What the chain computes: a compiled model's from its declaration (which may hold functors of
  // its own, outside the vocabulary the spec parser knows), a run-time chain's from its spec.
  ParsedChain parsed_chain() const;
  // "Linear -> add(add_value) -> swish -> ...".
  std::string description() const;
  // The key the ops take as their chain argument: the name where compiled, else the spec.
  const std::string& op_chain() const { return compiled ? name : chain; }
};

// Adds a model. Throws std::invalid_argument for a name already taken.
void register_model(const ModelSpec& spec);
// The registered models, in registration order.
std::vector<ModelSpec> registered_models();
// The registered names, in the order `--model all` runs them.
std::vector<std::string> model_names();
// The model registered as `name`. Throws std::invalid_argument naming the registered ones.
ModelSpec find_model(const std::string& name);

// A model whose chain is `spec`, run by the interpreter; `linear`: the Linear's attribute path.
// Throws ChainSpecError (kernels/ops/chain_spec.h) for a malformed spec.
ModelSpec runtime_model(const std::string& spec, const std::string& linear = "linear",
                        bool linear_bias = true);

// A layered model from its spec (kernels/ops/model_spec.h), each layer run by the interpreter;
// `biases`: whether a Linear (by path) has a bias (all have, where not named). Throws
// ChainSpecError for a malformed spec or a chain the interpreter cannot run.
ModelSpec layered_model(const std::string& spec, const std::map<std::string, bool>& biases = {});

}  // namespace fusedlinear
