// Registering declarations (kernels/math/model.h): what the registration file that
// kernels/register/fusedlinear_models.cmake writes for a header of them calls, once, at start-up.
// Each declaration of the list becomes a model of the registry and its compiled chain
// (kernels/ops/chain_registry.h), its kernels from the files the same function writes, a kernel
// family each.
#pragma once

#include <cstdio>
#include <exception>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/epilogue_scalar.h"
#include "kernels/math/model.h"
#include "kernels/ops/chain_registry.h"

namespace fusedlinear {

// The kernels of the index-th declaration of List: the scalar CPU loop (instantiated here), and
// where this build has them, the SIMD loops and the CUDA launchers (instantiated by their files).
template <class List>
ChainKernels chain_kernels_at(int index) {
  ChainKernels kernels;
  kernels.cpu.span[int(cpu::Capability::kScalar)] = cpu::scalar::chain_span_at<List>(index);
#if FUSEDLINEAR_CPU_SIMD
  kernels.cpu.span[int(cpu::Capability::kAvx2)] = cpu::avx2::chain_span_at<List>(index);
  kernels.cpu.span[int(cpu::Capability::kAvx512)] = cpu::avx512::chain_span_at<List>(index);
#endif
#ifdef FUSEDLINEAR_WITH_CUDA
  kernels.cuda.epilogue = cuda::cuda_epilogue_at<List>(index);
  kernels.cuda.skinny[int(cuda::SkinnyFamily::kFloat)] =
      cuda::cuda_skinny_at<List, cuda::SkinnyFamily::kFloat>(index);
  kernels.cuda.skinny[int(cuda::SkinnyFamily::kBf16)] =
      cuda::cuda_skinny_at<List, cuda::SkinnyFamily::kBf16>(index);
  kernels.cuda.skinny[int(cuda::SkinnyFamily::kBf16x3)] =
      cuda::cuda_skinny_at<List, cuda::SkinnyFamily::kBf16x3>(index);
  kernels.cuda.skinny[int(cuda::SkinnyFamily::kHalf)] =
      cuda::cuda_skinny_at<List, cuda::SkinnyFamily::kHalf>(index);
  kernels.cuda.hopper[int(cuda::HopperFamily::kFloat32)] =
      cuda::cuda_hopper_at<List, cuda::HopperFamily::kFloat32>(index);
  kernels.cuda.hopper[int(cuda::HopperFamily::kBf16)] =
      cuda::cuda_hopper_at<List, cuda::HopperFamily::kBf16>(index);
  kernels.cuda.hopper[int(cuda::HopperFamily::kHalf)] =
      cuda::cuda_hopper_at<List, cuda::HopperFamily::kHalf>(index);
#endif
  return kernels;
}

// What a declaration's layer may add (model.h): a gate of its own, the half of its Linear that
// its chain takes (the other gating it); and whether a layered declaration adds its input.
template <class L, class = void>
struct GateOf {
  static constexpr const char* value = "";
};
template <class L>
struct GateOf<L, std::void_t<decltype(L::kGate)>> {
  static constexpr const char* value = L::kGate;
};
template <class L, class = void>
struct HalfOf {
  static constexpr int value = -1;
};
template <class L>
struct HalfOf<L, std::void_t<decltype(L::kHalf)>> {
  static constexpr int value = L::kHalf;
};
template <class M, class = void>
struct ResidualOf : std::false_type {};
template <class M>
struct ResidualOf<M, std::void_t<decltype(M::kResidual)>> : std::bool_constant<M::kResidual> {};

// Layer L, its chain compiled under `chain_name`: a one-Linear model.
template <class L>
ModelSpec layer_spec(const std::string& chain_name) {
  ModelSpec spec;
  spec.name = chain_name;
  spec.linear = L::kLinear;
  spec.chain = chain_of(L::kChain).to_string();
  spec.compiled = true;
  spec.half = HalfOf<L>::value;
  spec.gate = spec.half >= 0 ? L::kLinear : GateOf<L>::value;
  return spec;
}

// How many chains the declarations of List before the I-th compile (ModelList's order).
template <class List, size_t... J>
constexpr size_t chains_before(std::index_sequence<J...>) {
  return (size_t{0} + ... +
          std::tuple_size_v<typename LayersOf<std::tuple_element_t<J, List>>::type>);
}

// The I-th declaration of List: its model and its layers' compiled chains (a one-Linear
// declaration's under its name, a layered one's each under "<name>.<linear>"). Layer K's kernels
// are those of ModelList's chain kFirst + K.
template <class List, size_t I, size_t... K>
void register_declaration(std::index_sequence<K...>) {
  using M = std::tuple_element_t<I, List>;
  using Layers = typename LayersOf<M>::type;
  constexpr bool kLayered = !std::is_same_v<Layers, std::tuple<M>>;
  constexpr size_t kFirst = chains_before<List>(std::make_index_sequence<I>{});
  const std::string name = M::kName;
  std::vector<ChainEntry> chains;
  std::vector<ModelSpec> layers;
  const auto add_layer = [&](auto layer, size_t chain_index) {
    using L = decltype(layer);
    ChainEntry chain;
    chain.name = kLayered ? name + "." + L::kLinear : name;
    chain.chain = chain_of(L::kChain);
    chain.kernels = chain_kernels_at<typename ModelList<List>::type>(int(chain_index));
    chains.push_back(chain);
    layers.push_back(layer_spec<L>(chain.name));
  };
  (add_layer(std::tuple_element_t<K, Layers>{}, kFirst + K), ...);
  ModelSpec model;
  if (kLayered) {
    model.name = name;
    model.layers = layers;
    model.residual = ResidualOf<M>::value;
  } else {
    model = layers.front();
  }
  register_model(model, chains);
}

template <class List, size_t... I>
void register_each(std::index_sequence<I...>) {
  (register_declaration<List, I>(
       std::make_index_sequence<
           std::tuple_size_v<typename LayersOf<std::tuple_element_t<I, List>>::type>>{}),
   ...);
}

// Registers every declaration of List (a tuple of them, or one); RuntimeChain registers the
// interpreter's kernels. A declaration whose name is taken is reported on stderr and left out:
// this runs before main, where an exception could not be caught.
template <class List>
bool register_declarations() {
  using Declarations = typename DeclarationList<List>::type;
  try {
    if constexpr (std::is_same_v<Declarations, std::tuple<RuntimeChain>>) {
      register_runtime_kernels(chain_kernels_at<Declarations>(0));
    } else {
      register_each<Declarations>(std::make_index_sequence<std::tuple_size_v<Declarations>>{});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedlinear: error: %s\n", e.what());
    return false;
  }
  return true;
}

}  // namespace fusedlinear
