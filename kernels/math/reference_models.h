// The library's models, one declaration each (kernels/math/model.h says what a declaration
// holds): the two reference models of docs/DESIGN.md, as weights/export.py defines them in
// Python. A model added to LibraryModels is known to every path, the CLI and the tests.
#pragma once

#include <tuple>

#include "kernels/math/model.h"

namespace fusedlinear {

// Linear -> + add_value -> Swish -> Tanh -> GELU(erf) -> Hardtanh(-1, 1). GELU follows tanh, so it
// runs as the polynomial GeluOnUnitInterval (chain.h).
struct SwishChainModel {
  static constexpr const char* kName = "swish_chain";
  static constexpr const char* kLinear = "matmul";
  static constexpr auto kChain = act::Chain(act::AddParam{"add_value"}, act::Swish{}, act::Tanh{},
                                            act::Gelu{}, act::Hardtanh{-1.0f, 1.0f});
  // Two rows per step and one wave: each thread loops over several steps, its set-up amortised
  // (epilogue_bench's shape sweep on an H200).
  static constexpr HalfLaunch kHalfLaunch{2, 128, 1};
};

// Linear -> Mish -> Mish.
struct MishMishModel {
  static constexpr const char* kName = "mish_mish";
  static constexpr const char* kLinear = "linear";
  static constexpr auto kChain = act::Chain(act::Mish{}, act::Mish{});
};

using LibraryModels = std::tuple<SwishChainModel, MishMishModel>;

}  // namespace fusedlinear
