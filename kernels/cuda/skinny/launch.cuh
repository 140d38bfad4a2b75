// The small-batch forward of a declaration's chain (kernels/math/model.h), as plan_skinny_linear
// laid it out: the planned kernel, then, where k is split, the reduce kernel that adds the splits
// in order and applies the epilogue. A launcher per kernel family (skinny.h), each instantiated in
// a file of its own (kernels/register/) so that the families compile side by side.
#pragma once

#include "kernels/cuda/chain_kernels.h"
#include "kernels/cuda/skinny/variants.cuh"

namespace fusedlinear {
namespace cuda {

template <class Model, SkinnyFamily kFamily>
cudaError_t launch_skinny_for(const act::Program& program, const LinearCall& call,
                              const SkinnyPlan& plan, float* workspace, cudaStream_t stream) {
  using namespace skinny;
  if (call.rows == 0 || call.out_features == 0) return cudaSuccess;
  if (family_of(plan.variant) != kFamily) return cudaErrorInvalidValue;
  if (plan.workspace_floats() > 0 && !workspace) return cudaErrorInvalidValue;
  DeviceLimits limits;
  const cudaError_t limits_err = current_device_limits(limits);
  if (limits_err != cudaSuccess) return limits_err;
  float* partial = plan.partial_floats > 0 ? workspace + plan.x_workspace_floats : nullptr;
  cudaError_t err = cudaErrorInvalidValue;
  const auto launch = [&](auto element) {
    constexpr ElementType E = decltype(element)::value;
    using T = DeviceElement<E>;
    const auto chain = device_chain<Model, kResultPrecisionOf<E>>(program);
    const ColumnEpilogue<T, std::decay_t<decltype(chain)>> epilogue(call.bias, call.terms, chain);
    err = with_variant<kFamily, T>(plan.variant, [&](auto kernel) {
      using Kernel = decltype(kernel);
      if constexpr (std::is_same_v<typename Kernel::Element, T>) {
        return Kernel::launch(limits, plan, call, workspace, partial, epilogue, stream);
      } else {
        return cudaErrorInvalidValue;
      }
    });
    if (err != cudaSuccess || plan.splits == 1) return;
    const int64_t count = call.rows * call.out_features;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(count, threads), 65535);
    err = launch_dependent(limits, skinny_reduce_kernel<T, std::decay_t<decltype(chain)>>,
                           unsigned(blocks), threads, 0, stream, static_cast<const float*>(partial),
                           plan.splits, static_cast<T*>(call.out), count, call.out_features,
                           epilogue, split_operands_of(call));
  };
  if constexpr (kFamily == SkinnyFamily::kHalf) {
    if (call.type == ElementType::kFloat16) launch(ElementConstant<ElementType::kFloat16>{});
    if (call.type == ElementType::kBFloat16) launch(ElementConstant<ElementType::kBFloat16>{});
  } else {
    if (call.type == ElementType::kFloat32) launch(ElementConstant<ElementType::kFloat32>{});
  }
  return err;
}

template <class List, SkinnyFamily kFamily>
struct SkinnyTable;
template <class... Ms, SkinnyFamily kFamily>
struct SkinnyTable<std::tuple<Ms...>, kFamily> {
  static constexpr CudaSkinnyFn fn[] = {&launch_skinny_for<Ms, kFamily>...};
};
template <class List, SkinnyFamily kFamily>
CudaSkinnyFn cuda_skinny_at(int index) {
  return SkinnyTable<typename ModelList<List>::type, kFamily>::fn[index];
}

}  // namespace cuda
}  // namespace fusedlinear
