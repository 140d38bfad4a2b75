// Declarations for test_compiled_chains: chains without a 16-bit launch shape of their own, so
// that their kernels are exactly those a run-time chain of the same spec gets when NVRTC compiles
// it (kernels/cuda/jit/), in every dtype: the Half forms in 16 bits where the chain allows them
// (the first), the float32 forms where it does not (the second).
#pragma once

#include <cmath>
#include <tuple>

#include "kernels/math/model.h"

namespace fusedlinear {

// swish_chain's chain (whose own declaration has a 16-bit launch shape).
struct CompiledSwishChain {
  static constexpr const char* kName = "test_compiled_swish_chain";
  static constexpr const char* kLinear = "matmul";
  static constexpr auto kChain = act::Chain(act::AddParam{"add_value"}, act::Swish{}, act::Tanh{},
                                            act::Gelu{}, act::Hardtanh{-1.0f, 1.0f});
};

// Arguments of every kind: numbers that are not short decimals, an unbounded side, two
// parameters, a rewrite (GELU after sigmoid).
struct CompiledMixedChain {
  static constexpr const char* kName = "test_compiled_mixed_chain";
  static constexpr const char* kLinear = "linear";
  static constexpr auto kChain = act::Chain(
      act::Mish{}, act::MulParam{"scale"}, act::Softplus{1.7f, 9.5f}, act::SubParam{"shift"},
      act::Sigmoid{}, act::Gelu{}, act::Clamp{-INFINITY, 0.3f}, act::LeakyRelu{0.1f});
};

using CompiledChainTestModels = std::tuple<CompiledSwishChain, CompiledMixedChain>;

}  // namespace fusedlinear
