// Model specs: a model as layers, each a Linear and the chain after it (docs/CHAINS.md, "Layered
// models"), parsed and printed. A spec is either a chain spec (one Linear, named elsewhere) or
//   fc1: gelu | fc2: relu | fc3           layers in order; a layer's chain may be empty
//   w1: silu * w3 | w2                    a gated pair: silu(w1(x)) * w3(x) (SwiGLU)
//   w13[0]: silu * w13[1] | w2            the same from one Linear's two halves (chunk(2, -1))
//   x + (fc1: gelu | fc2)                 the input added to the output (a residual)
#pragma once

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

}  // namespace fusedlinear
