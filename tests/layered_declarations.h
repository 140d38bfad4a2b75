// Layered declarations (kernels/math/model.h) for the tests, registered in test_layered only:
// each layer's chain compiled, each model the same as a layered spec says.
#pragma once

#include <tuple>

#include "kernels/math/model.h"

namespace fusedlinear {
namespace test_models {

// fc1: gelu | fc2: add(shift),gelu(tanh) | fc3
struct MlpFc1 {
  static constexpr const char* kLinear = "fc1";
  static constexpr auto kChain = act::Chain(act::Gelu{});
};
struct MlpFc2 {
  static constexpr const char* kLinear = "fc2";
  static constexpr auto kChain = act::Chain(act::AddParam{"shift"}, act::GeluTanh{});
};
struct MlpFc3 {
  static constexpr const char* kLinear = "fc3";
  static constexpr auto kChain = act::Chain();
};
struct Mlp {
  static constexpr const char* kName = "test_mlp";
  using Layers = std::tuple<MlpFc1, MlpFc2, MlpFc3>;
};

// w1: silu * w3 | w2: mish
struct SwigluW1 {
  static constexpr const char* kLinear = "w1";
  static constexpr const char* kGate = "w3";
  static constexpr auto kChain = act::Chain(act::Silu{});
};
struct SwigluW2 {
  static constexpr const char* kLinear = "w2";
  static constexpr auto kChain = act::Chain(act::Mish{});
};
struct Swiglu {
  static constexpr const char* kName = "test_swiglu";
  using Layers = std::tuple<SwigluW1, SwigluW2>;
};

// x + (w13[1]: silu * w13[0] | w2)
struct ChunkedW13 {
  static constexpr const char* kLinear = "w13";
  static constexpr int kHalf = 1;
  static constexpr auto kChain = act::Chain(act::Silu{});
};
struct ChunkedW2 {
  static constexpr const char* kLinear = "w2";
  static constexpr auto kChain = act::Chain();
};
struct ChunkedResidual {
  static constexpr const char* kName = "test_chunked_residual";
  using Layers = std::tuple<ChunkedW13, ChunkedW2>;
  static constexpr bool kResidual = true;
};

using LayeredDeclarations = std::tuple<Mlp, Swiglu, ChunkedResidual>;

}  // namespace test_models
}  // namespace fusedlinear
