// A model declaration: what the library needs to know of a Linear -> activation-chain model to
// build every path for it (the CUDA epilogue in float32, bfloat16 and float16, the small-batch
// kernels' epilogue, the CPU's SIMD loops, the ops, the module, the CLI and the tests). Torch-free,
// so that CUDA files compile it. A declaration is a struct:
//
//   struct SwishChain {
//     static constexpr const char* kName = "swish_chain";   // as the CLI and Python call it
//     static constexpr const char* kLinear = "matmul";      // the nn.Linear's attribute name
//     static constexpr auto kChain =                        // the ops after it, in order
//         act::Chain(act::AddParam{"add_value"}, act::Swish{}, act::Tanh{}, act::Gelu{},
//                    act::Hardtanh{-1.0f, 1.0f});
//     static constexpr HalfLaunch kHalfLaunch{2, 128, 1};   // optional: see below
//   };
//
// A parameter of the chain (AddParam{"add_value"}, ...) is a tensor of the model under that
// state-dict key, [out_features] or of one element, drawn from a standard normal at
// initialisation (after the Linear's weight and bias, as `nn.Parameter(torch.randn(...))` in
// the Python constructor).
//
// A layered declaration lists its layers, each a struct of its Linear and chain as above (and,
// optionally, its own kHalfLaunch), in the model's order; it says what a layered
// spec says (docs/CHAINS.md, "Layered models"), here `fc1: gelu | fc2: gelu | fc3`:
//
//   struct Fc1 {
//     static constexpr const char* kLinear = "fc1";
//     static constexpr auto kChain = act::Chain(act::Gelu{});
//   };
//   ...                                                     // Fc2 likewise, Fc3 with act::Chain()
//   struct Mlp {
//     static constexpr const char* kName = "mlp";
//     using Layers = std::tuple<Fc1, Fc2, Fc3>;
//     static constexpr bool kResidual = false;              // optional: x + (...)
//   };
//
// A gated layer (`w1: silu * w3`) also names its gate's Linear, `kGate = "w3"`; a layer of one
// Linear's two halves (`w13[0]: silu * w13[1]`) says which half its chain takes, `kHalf = 0`.
// Each layer's chain is compiled as a one-Linear declaration's and registered as
// "<kName>.<kLinear>" ("mlp.fc1").
//
// Registration: kernels/register/fusedlinear_models.cmake's fusedlinear_add_models, which
// compiles each path for the declarations of a header.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/math/chain.h"
#include "kernels/math/program.h"

namespace fusedlinear {

// How the CUDA epilogue kernel runs a chain for 16-bit results (float32 results all take one
// shape): rows per thread per step, threads per block, the grid capped at that many waves of
// resident blocks. The 16-bit kernels are bound by arithmetic, so the best shape depends on the
// chain; the default suits chains of a few special functions (mish_mish's, measured on an H200).
struct HalfLaunch {
  int rows, threads, waves;
};
inline constexpr HalfLaunch kDefaultHalfLaunch{1, 128, 2};

template <class M, class = void>
struct HalfLaunchOf {
  static constexpr HalfLaunch value = kDefaultHalfLaunch;
};
template <class M>
struct HalfLaunchOf<M, std::void_t<decltype(M::kHalfLaunch)>> {
  static constexpr HalfLaunch value = M::kHalfLaunch;
};

// Whether declaration M sets kHalfForms, which device_chain refuses: its chain decides.
template <class M, class = void>
struct SetsHalfForms : std::false_type {};
template <class M>
struct SetsHalfForms<M, std::void_t<decltype(M::kHalfForms)>> : std::true_type {};

// The run-time chains' pseudo-declaration: its kernels interpret a Program (program.h).
struct RuntimeChain {};

template <class M>
inline constexpr bool kIsRuntimeChain = std::is_same_v<M, RuntimeChain>;

// What a run-time chain compiled by NVRTC declares besides its kChain (kernels/cuda/jit/): nothing,
// so that it takes the default launch shape; the host launches its kernels with the shapes of this.
struct CompiledRuntimeChain {};

// The chain the kernels run for declaration M with results of precision P: the declaration's
// own, rewritten (chain.h); for RuntimeChain the interpreter of `program`, which compiled chains
// ignore. 16-bit results take the functors' Half forms where the chain allows them (chain.h's
// kHalfFormsHold; program.h's half_forms_hold for an op list, the same rule), so that a
// declaration, its chain compiled at run time and the interpreter run the same functors.
template <class M, act::ResultPrecision P>
constexpr auto device_chain(const act::Program& program) {
  static_assert(!SetsHalfForms<M>::value,
                "a declaration does not set kHalfForms: its chain decides whether 16-bit results "
                "take the Half forms (kernels/math/chain.h, kHalfFormsHold)");
  if constexpr (kIsRuntimeChain<M>) {
    return act::ProgramChain<act::ResultPrecision::kFloat32>{
        act::with_result_precision(program, P)};
  } else if constexpr (P == act::ResultPrecision::kHalf &&
                       !act::kHalfFormsHold<std::decay_t<decltype(M::kChain)>>) {
    return act::rewrite<act::ResultPrecision::kFloat32>(M::kChain);
  } else {
    return act::rewrite<P>(M::kChain);
  }
}

template <class M, act::ResultPrecision P>
using DeviceChain = decltype(device_chain<M, P>(act::Program{}));

// A layered declaration's layers (its Layers), or a one-Linear declaration as its one layer.
template <class M, class = void>
struct LayersOf {
  using type = std::tuple<M>;
};
template <class M>
struct LayersOf<M, std::void_t<typename M::Layers>> {
  using type = typename M::Layers;
};

// The declarations of a registration: a tuple of them, or one.
template <class List>
struct DeclarationList {
  using type = std::tuple<List>;
};
template <class... Ms>
struct DeclarationList<std::tuple<Ms...>> {
  using type = std::tuple<Ms...>;
};

// The chains a registration compiles, in order: each layer's of each declaration (LayersOf). The
// kernels are instantiated for this list and indexed by a chain's place in it.
template <class List>
struct ModelList {
  using type = typename ModelList<typename DeclarationList<List>::type>::type;
};
template <class... Ms>
struct ModelList<std::tuple<Ms...>> {
  using type = decltype(std::tuple_cat(std::declval<typename LayersOf<Ms>::type>()...));
};

}  // namespace fusedlinear
