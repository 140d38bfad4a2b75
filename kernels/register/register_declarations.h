// Registering declarations (kernels/math/model.h): what the registration file that
// kernels/register/fusedlinear_models.cmake writes for a header of them calls, once, at start-up.
// Each declaration of the list becomes a model of the registry and its compiled chain
// (kernels/ops/chain_registry.h), its kernels from the files the same function writes, a kernel
// family each.
#pragma once

#include <cstdio>
#include <exception>
#include <tuple>
#include <utility>

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

// Declaration M's model.
template <class M>
ModelSpec model_spec_of() {
  ModelSpec spec;
  spec.name = M::kName;
  spec.linear = M::kLinear;
  spec.chain = chain_of(M::kChain).to_string();
  spec.compiled = true;
  return spec;
}

// Declaration M, the index-th of List: its model and its compiled chain, under its name.
template <class List, size_t I>
void register_declaration() {
  using M = std::tuple_element_t<I, List>;
  ChainEntry chain;
  chain.name = M::kName;
  chain.chain = chain_of(M::kChain);
  chain.kernels = chain_kernels_at<List>(int(I));
  register_model(model_spec_of<M>(), {chain});
}

template <class List, size_t... I>
void register_each(std::index_sequence<I...>) {
  (register_declaration<List, I>(), ...);
}

// Registers every declaration of List (a tuple of them, or one); RuntimeChain registers the
// interpreter's kernels. A declaration whose name is taken is reported on stderr and left out:
// this runs before main, where an exception could not be caught.
template <class List>
bool register_declarations() {
  using Models = typename ModelList<List>::type;
  try {
    if constexpr (std::is_same_v<Models, std::tuple<RuntimeChain>>) {
      register_runtime_kernels(chain_kernels_at<Models>(0));
    } else {
      register_each<Models>(std::make_index_sequence<std::tuple_size_v<Models>>{});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedlinear: error: %s\n", e.what());
    return false;
  }
  return true;
}

}  // namespace fusedlinear
