// What the translation unit of a run-time chain instantiates when NVRTC compiles it (chain_units.h
// writes it): for the chain's declaration D, the kernels a declaration's registration instantiates
// (kernels/register/), and the chain's value as those kernels take it, which the host, not knowing
// its type, reads from the module and passes on as bytes (CompiledChainBytes).
#pragma once

#include "kernels/cuda/epilogue.cuh"
#include "kernels/math/model.h"

namespace fusedlinear {
namespace cuda {

// Room for any chain's value (at most act::kMaxProgramOps functors of two floats or a pointer
// each), aligned as a pointer: ColumnEpilogue<T, CompiledChainBytes> is laid out as
// ColumnEpilogue<T, ChainT> for any such ChainT (its chain after the same pointer-aligned members).
constexpr int kMaxCompiledChainBytes = 256;
struct alignas(8) CompiledChainBytes {
  static constexpr int kTerms = 0;
  unsigned char bytes[kMaxCompiledChainBytes];
};

// The fused epilogue of D for element type E: the instances launch_epilogue_for<D> launches.
template <class D, ElementType E>
struct CompiledEpilogue {
  using T = DeviceElement<E>;
  using ChainT = DeviceChain<D, kResultPrecisionOf<E>>;
  using Shape = ProductionShape<T, D, ChainT>;
  static constexpr int kVec = 16 / sizeof(T);
  static_assert(Shape::kMaxRegisters == 0, "a declaration's epilogue kernel is never capped");
  static_assert(alignof(ChainT) <= alignof(CompiledChainBytes) &&
                    sizeof(ChainT) <= sizeof(CompiledChainBytes),
                "the host passes the chain as CompiledChainBytes");
};

// D's chain for results of element type E, as its kernels take it.
template <class D, ElementType E>
__device__ const DeviceChain<D, kResultPrecisionOf<E>> kCompiledChain =
    device_chain<D, kResultPrecisionOf<E>>(act::Program{});

}  // namespace cuda
}  // namespace fusedlinear
