// The translation units NVRTC compiles for a run-time chain, a kernel family and element type (and
// for the Hopper GEMM, a kernel instance) a unit: the chain's declaration (its kChain as a
// declaration writes it, kernels/ops/chain_source.h) and the name expressions of what the host
// takes from the module (compiled_chain.cuh). Torch-free and GPU-free: the CPU test compiles the
// units the library compiles.
#pragma once

#include <string>
#include <vector>

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

// One kernel of the Hopper GEMM (kernels/cuda/gemm/hopper_gemm.cuh: hopper_gemm_kernel), as its
// launcher picks one for a call: x's type (float32: x's bfloat16 parts, float32 out; a 16-bit type:
// x, W and out of it), the products (a GemmProducts enumerator's name) and the tile (GemmShape's
// other arguments).
struct HopperInstance {
  ElementType type = ElementType::kFloat32;
  std::string products;  // "kOne", "kBf16x3Promoted", "kBf16x6Promoted"
  int tile_n = 0, consumer_rows = 0;
  bool turns = false;
  bool gated = false;  // a gated pair's kernel (hopper_gemm.cuh: kGated)
};

// The Hopper GEMM's kernel `instance` with the chain in its epilogue: its name expressions are
// the kernel, then the chain's value.
NvrtcRequest hopper_unit(const std::string& chain_expression, const HopperInstance& instance,
                         const std::string& architecture);
constexpr int kHopperUnitChainValue = 1;  // the index of the chain's value in its names

// The small-batch kernel of a variant (kernels/cuda/skinny/variants.cuh: KernelOf) for results of
// `type`, with the chain in its epilogue: its name expressions are the kernel without the TMA's
// tile copies, the kernel with them (the same kernel for variants that have none), the kernel that
// adds the splits of k, then the chain's value. `variant`: a SkinnyVariant enumerator's name.
NvrtcRequest skinny_unit(const std::string& chain_expression, ElementType type,
                         const std::string& variant, const std::string& architecture);
constexpr int kSkinnyUnitReduce = 2;      // the index of the reduce kernel in its names
constexpr int kSkinnyUnitChainValue = 3;  // the index of the chain's value in its names

// One kernel of the fused-MLP kernel (kernels/cuda/mlp/) with a model's layers' chains compiled in
// (`layer_chains`: each layer's chain expression, in order; "act::Chain()" for a layer without
// one), for the instance a launcher asks for (fused_mlp.cuh: kernel_for, e.g.
// "resident_mlp_kernel<__half, 1, 4, fusedlinear::cuda::mlp::CompiledShape<0u, 32, 64, 16>"): its
// one name expression is that kernel.
NvrtcRequest mlp_unit(const std::vector<std::string>& layer_chains, const std::string& instance,
                      const std::string& architecture);

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
