// The whole forward of a chain (kernels/math/model.h) on the Hopper GEMM (hopper_gemm.cuh): for
// float32 x, x split into its bfloat16 parts in the workspace (as many as W comes in), then one
// kernel, the chain in its epilogue. A launcher per family (the input's type, chain_kernels.h),
// each instantiated in a file of its own (kernels/register/) so that they compile side by side;
// the kernels are a declaration's, or those of a run-time chain compiled at run time
// (kernels/cuda/jit/), launched by the same code.
#pragma once

#include "kernels/cuda/chain_kernels.h"
#include "kernels/cuda/gemm/hopper_gemm.cuh"
#include "kernels/cuda/linear.h"

namespace fusedlinear {
namespace cuda {

// bf16x3's products in the library's forward (hopper_gemm.cuh: GemmProducts).
constexpr gemm::GemmProducts kLibraryBf16x3 = gemm::GemmProducts::kBf16x3Promoted;

// The products a call forms on the Hopper GEMM (for 16-bit x, its own: one product).
constexpr gemm::GemmProducts gemm_products_of(Precision precision) {
  return precision == Precision::kBf16x6   ? gemm::GemmProducts::kBf16x6Promoted
         : precision == Precision::kBf16x3 ? kLibraryBf16x3
                                           : gemm::GemmProducts::kOne;
}

// A family's element types: the products' operands (In), the output, the bias and terms (Out).
template <HopperFamily kFamily>
struct HopperTypes {
  static constexpr ElementType kOut = kFamily == HopperFamily::kFloat32 ? ElementType::kFloat32
                                      : kFamily == HopperFamily::kBf16  ? ElementType::kBFloat16
                                                                        : ElementType::kFloat16;
  using Out = DeviceElement<kOut>;
  using In = std::conditional_t<kFamily == HopperFamily::kHalf, __half, __nv_bfloat16>;
};

// The whole forward of `call` on the kernels `kernel_of` gives for each tile's shape (a
// GemmKernelHandle: detail::launch_products).
template <HopperFamily kFamily, class KernelOf>
cudaError_t launch_hopper_family(const KernelOf& kernel_of, const LinearCall& call,
                                 float* workspace, cudaStream_t stream) {
  using Out = typename HopperTypes<kFamily>::Out;
  constexpr gemm::TileSet kTiles = gemm::TileSet::kAutoCandidates;
  const int64_t m = call.rows, n = call.out_features, k = call.in_features;
  if (hopper_family_of(call) != kFamily) return cudaErrorInvalidValue;
  if (hopper_workspace_floats(call) > 0 && !workspace) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  auto* out = static_cast<Out*>(call.out);
  if constexpr (kFamily == HopperFamily::kFloat32) {
    if (call.precision == Precision::kIeee) return cudaErrorNotSupported;  // float32's
    const int parts = split_parts_of(call.precision);
    // x's parts in the workspace, one after another; W's as the call gives them.
    __nv_bfloat16* x_parts[gemm::kMaxParts] = {};
    for (int p = 0; p < parts; ++p)
      x_parts[p] = reinterpret_cast<__nv_bfloat16*>(workspace) + p * m * k;
    // Unused parts repeat the last one given, as the launchers of hopper_gemm.cuh pass them.
    const void* const x_in[gemm::kMaxParts] = {x_parts[0], x_parts[parts > 1 ? 1 : 0],
                                               x_parts[parts - 1]};
    const void* const w_in[gemm::kMaxParts] = {call.w, parts > 1 ? call.w_lo : call.w,
                                               parts > 2   ? call.w_third
                                               : parts > 1 ? call.w_lo
                                                           : call.w};
    const void* const gate_in[gemm::kMaxParts] = {call.gate_w,
                                                  parts > 1 ? call.gate_w_lo : call.gate_w,
                                                  parts > 2   ? call.gate_w_third
                                                  : parts > 1 ? call.gate_w_lo
                                                              : call.gate_w};
    const void* const* gate = call.gate_w ? gate_in : nullptr;
    const auto split_x = [&] {
      return launch_split_bf16_parts(static_cast<const float*>(call.x), x_parts[0], x_parts[1],
                                     x_parts[2], m * k, stream);
    };
    // Sums that an operand's inf or NaN makes inf or NaN, as eager's (bf16_split.h).
    const split::SplitOperands operands = split_operands_of(call);
    const split::SplitOperands gate_operands = split_operands_of(call, /*gate=*/true);
    if (parts == 3) {
      return gemm::detail::launch_products<gemm::GemmProducts::kBf16x6Promoted, kTiles>(
          kernel_of, split_x, x_in, w_in, out, m, n, k, stream, gemm::GemmTile::kAuto, operands,
          gate, gate_operands);
    }
    if (parts == 2) {
      return gemm::detail::launch_products<kLibraryBf16x3, kTiles>(
          kernel_of, split_x, x_in, w_in, out, m, n, k, stream, gemm::GemmTile::kAuto, operands,
          gate, gate_operands);
    }
    // One product carries an inf or NaN as eager does: no sums to recompute.
    return gemm::detail::launch_products<gemm::GemmProducts::kOne, kTiles>(
        kernel_of, split_x, x_in, w_in, out, m, n, k, stream, gemm::GemmTile::kAuto, {}, gate);
  } else {
    const void* const x_in[gemm::kMaxParts] = {call.x, call.x, call.x};
    const void* const w_in[gemm::kMaxParts] = {call.w, call.w, call.w};
    const void* const gate_in[gemm::kMaxParts] = {call.gate_w, call.gate_w, call.gate_w};
    return gemm::detail::launch_products<gemm::GemmProducts::kOne, kTiles>(
        kernel_of, gemm::detail::nothing_before, x_in, w_in, out, m, n, k, stream,
        gemm::GemmTile::kAuto, {}, call.gate_w ? gate_in : nullptr);
  }
}

// The whole forward of declaration Model (or, for RuntimeChain, of `program`, by the interpreter's
// kernels), on the kernels compiled with the library.
template <class Model, HopperFamily kFamily>
cudaError_t launch_hopper_for(const act::Program& program, const LinearCall& call, float* workspace,
                              cudaStream_t stream) {
  using Types = HopperTypes<kFamily>;
  using Out = typename Types::Out;
  const auto chain = device_chain<Model, kResultPrecisionOf<Types::kOut>>(program);
  ColumnEpilogue<Out, std::decay_t<decltype(chain)>> epilogue(call.bias, call.terms, chain);
  epilogue.gate_bias = static_cast<const Out*>(call.gate_bias);
  if (call.gate_w) {
    return launch_hopper_family<kFamily>(
        gemm::declared_kernels<typename Types::In, /*kGated=*/true>(epilogue), call, workspace,
        stream);
  }
  return launch_hopper_family<kFamily>(gemm::declared_kernels<typename Types::In>(epilogue), call,
                                       workspace, stream);
}

template <class List, HopperFamily kFamily>
struct HopperTable;
template <class... Ms, HopperFamily kFamily>
struct HopperTable<std::tuple<Ms...>, kFamily> {
  static constexpr CudaHopperFn fn[] = {&launch_hopper_for<Ms, kFamily>...};
};
template <class List, HopperFamily kFamily>
CudaHopperFn cuda_hopper_at(int index) {
  return HopperTable<typename ModelList<List>::type, kFamily>::fn[index];
}

}  // namespace cuda
}  // namespace fusedlinear
