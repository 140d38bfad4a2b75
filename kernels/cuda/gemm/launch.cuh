// The whole forward of a declaration's chain (kernels/math/model.h) on the Hopper GEMM
// (hopper_gemm.cuh): for float32 x, x split into its bfloat16 parts in the workspace (as many as
// W comes in), then one kernel, the chain in its epilogue. A launcher per family (the input's type,
// chain_kernels.h), each instantiated in a file of its own (kernels/register/) so that they compile
// side by side.
#pragma once

#include "kernels/cuda/chain_kernels.h"
#include "kernels/cuda/gemm/hopper_gemm.cuh"
#include "kernels/cuda/linear.h"

namespace fusedlinear {
namespace cuda {

// bf16x3's products in the library's forward (hopper_gemm.cuh: GemmProducts).
constexpr gemm::GemmProducts kLibraryBf16x3 = gemm::GemmProducts::kBf16x3Promoted;

template <class Model, HopperFamily kFamily>
cudaError_t launch_hopper_for(const act::Program& program, const LinearCall& call, float* workspace,
                              cudaStream_t stream) {
  const int64_t m = call.rows, n = call.out_features, k = call.in_features;
  if (hopper_family_of(call) != kFamily) return cudaErrorInvalidValue;
  if (hopper_workspace_floats(call) > 0 && !workspace) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  if constexpr (kFamily == HopperFamily::kFloat32) {
    if (call.products == LinearProducts::kAsInput) return cudaErrorNotSupported;  // float32's
    const auto chain = device_chain<Model, act::ResultPrecision::kFloat32>(program);
    const ColumnEpilogue<float, std::decay_t<decltype(chain)>> epilogue(call.bias, call.terms,
                                                                        chain);
    const int parts = split_parts_of(call.products);
    // x's parts in the workspace, one after another; W's as the call gives them.
    __nv_bfloat16* x_parts[gemm::kMaxParts] = {};
    for (int p = 0; p < parts; ++p)
      x_parts[p] = reinterpret_cast<__nv_bfloat16*>(workspace) + p * m * k;
    const __nv_bfloat16* const w_parts[gemm::kMaxParts] = {
        static_cast<const __nv_bfloat16*>(call.w), static_cast<const __nv_bfloat16*>(call.w_lo),
        static_cast<const __nv_bfloat16*>(call.w_third)};
    auto* out = static_cast<float*>(call.out);
    const cudaError_t err = launch_split_bf16_parts(static_cast<const float*>(call.x), x_parts[0],
                                                    x_parts[1], x_parts[2], m * k, stream);
    if (err != cudaSuccess) return err;
    // Sums that an operand's inf or NaN makes inf or NaN, as eager's (bf16_split.h).
    const split::SplitOperands split = split_operands_of(call);
    if (parts == 3) {
      const __nv_bfloat16* const x_in[gemm::kMaxParts] = {x_parts[0], x_parts[1], x_parts[2]};
      return gemm::launch_hopper_gemm_bf16x6<gemm::TileSet::kAutoCandidates>(
          x_in, w_parts, out, m, n, k, epilogue, stream, gemm::GemmTile::kAuto, split);
    }
    if (parts == 2) {
      return gemm::launch_hopper_gemm_bf16x3<kLibraryBf16x3, gemm::TileSet::kAutoCandidates>(
          x_parts[0], x_parts[1], w_parts[0], w_parts[1], out, m, n, k, epilogue, stream,
          gemm::GemmTile::kAuto, split);
    }
    return gemm::launch_hopper_gemm<gemm::TileSet::kAutoCandidates>(
        static_cast<const __nv_bfloat16*>(x_parts[0]), w_parts[0], out, m, n, k, epilogue, stream);
  } else {
    constexpr ElementType E =
        kFamily == HopperFamily::kBf16 ? ElementType::kBFloat16 : ElementType::kFloat16;
    using T = DeviceElement<E>;
    const auto chain = device_chain<Model, kResultPrecisionOf<E>>(program);
    const ColumnEpilogue<T, std::decay_t<decltype(chain)>> epilogue(call.bias, call.terms, chain);
    return gemm::launch_hopper_gemm<gemm::TileSet::kAutoCandidates>(
        static_cast<const T*>(call.x), static_cast<const T*>(call.w), static_cast<T*>(call.out), m,
        n, k, epilogue, stream);
  }
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
