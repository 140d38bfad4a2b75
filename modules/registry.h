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

namespace fusedlinear {

struct ModelSpec {
  std::string name;    // as the CLI and Python call it; a run-time chain's: its spec
  std::string linear;  // the nn.Linear's attribute path ("matmul", "fc", "block.0")
  bool linear_bias = true;
  std::string chain;  // the chain's canonical spec (docs/CHAINS.md)
  // Whether `name` has compiled kernels (a declaration's); otherwise the interpreter runs `chain`.
  bool compiled = false;
  // A parameter's shape where it is not [out_features]: [] or [1] (one value for every column).
  std::map<std::string, std::vector<int64_t>> param_shapes;

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

}  // namespace fusedlinear
