// Model specs: a model as layers, each a Linear and the chain after it (docs/CHAINS.md, "Layered
// models"), parsed and printed, and ModelSpec, a model as the modules build it (a registered
// declaration, kernels/ops/chain_registry.h, or a spec given at run time). A spec is either a chain
// spec (one Linear, named elsewhere) or
//   fc1: gelu | fc2: relu | fc3           layers in order; a layer's chain may be empty
//   w1: silu * w3 | w2                    a gated pair: silu(w1(x)) * w3(x) (SwiGLU)
//   w13[0]: silu * w13[1] | w2            the same from one Linear's two halves (chunk(2, -1))
//   x + (fc1: gelu | fc2)                 the input added to the output (a residual)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/ops/chain_spec.h"

namespace fusedlinear {

// A Linear by its attribute path ("fc1", "0", "block.fc"), or one half of its output (`half` 0
// or 1: chunk(2, -1)'s first or second part; -1 the whole output).
struct LinearRef {
  std::string path;
  int half = -1;
  std::string to_string() const;  // "fc1", "w13[0]"
  bool operator==(const LinearRef& other) const { return path == other.path && half == other.half; }
};

// One layer: chain(linear(x)), times gate(x) for a gated pair.
struct ParsedLayer {
  LinearRef linear;
  ParsedChain chain;  // no ops: the Linear alone
  bool gated = false;
  LinearRef gate;                 // a Linear of its own, or the other half of `linear`'s
  std::string to_string() const;  // "fc1:gelu", "w1:silu*w3", "fc3"
};

struct ParsedModel {
  std::vector<ParsedLayer> layers;
  bool residual = false;  // the model's input added to its output
  // The canonical spec: no spaces, "x+(w1:silu*w3|w2)".
  std::string to_string() const;
  // "fc1 -> gelu | fc2", for reports.
  std::string description() const;
};

// Whether `spec` is a layered spec (it names Linears: ':' or '|', or a residual "x + (...)")
// rather than a chain spec.
bool is_layered_spec(const std::string& spec);

// Parses a layered spec. Throws ChainSpecError, one line naming the layer and what was expected:
// a malformed path, a half other than [0] or [1], a gate of another Linear's half, a Linear used
// twice, and the chain errors of parse_chain.
ParsedModel parse_model_spec(const std::string& spec);

// A model as the modules build it: one Linear and the chain after it, or layers of them.
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
  // A layered model's layers as a spec says them (a declaration's from its layers, not its name,
  // which is no spec).
  ParsedModel parsed_model() const;
  // "Linear -> add(add_value) -> swish -> ...".
  std::string description() const;
  // The key the ops take as their chain argument: the name where compiled, else the spec.
  const std::string& op_chain() const { return compiled ? name : chain; }
};

// A model whose chain is `spec`, run by the interpreter; `linear`: the Linear's attribute path.
// Throws ChainSpecError (kernels/ops/chain_spec.h) for a malformed spec.
ModelSpec runtime_model(const std::string& spec, const std::string& linear = "linear",
                        bool linear_bias = true);

// A layered model from its spec (kernels/ops/model_spec.h), each layer run by the interpreter;
// `biases`: whether a Linear (by path) has a bias (all have, where not named). Throws
// ChainSpecError for a malformed spec or a chain the interpreter cannot run.
ModelSpec layered_model(const std::string& spec, const std::map<std::string, bool>& biases = {});

}  // namespace fusedlinear
