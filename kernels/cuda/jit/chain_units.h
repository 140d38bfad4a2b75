// The translation units NVRTC compiles for a run-time chain, a kernel family and element type a
// unit: the chain's declaration (its kChain as a declaration writes it, kernels/ops/chain_source.h)
// and the name expressions of what the host takes from the module (compiled_chain.cuh). Torch-free
// and GPU-free: the CPU test compiles the units the library compiles.
#pragma once

#include <string>

#include "kernels/cuda/jit/nvrtc_compile.h"
#include "kernels/math/element.h"

namespace fusedlinear {
namespace cuda {
namespace jit {

// The fused epilogue (kernels/cuda/epilogue.cuh) of the chain `chain_expression` (an act::Chain
// expression, in namespace fusedlinear) for `type`: its name expressions are the kernels
// [vectorized][has bias][gated] in that nesting order ([0][0][0], [0][0][1], [0][1][0], ...),
// then the chain's value.
NvrtcRequest epilogue_unit(const std::string& chain_expression, ElementType type,
                           const std::string& architecture);
constexpr int kEpilogueUnitChainValue = 8;  // the index of the chain's value in its names

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
