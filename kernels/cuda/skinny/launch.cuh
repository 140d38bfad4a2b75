// The small-batch forward of a declaration's chain (kernels/math/model.h), as plan_skinny_linear
// laid it out: the planned kernel, then, where k is split, the reduce kernel that adds the splits
// in order and applies the epilogue. A launcher per kernel family (skinny.h), each instantiated in
// a file of its own (kernels/register/) so that the families compile side by side.
#pragma once

#include "kernels/cuda/chain_kernels.h"
#include "kernels/cuda/skinny/variants.cuh"

namespace fusedlinear {
namespace cuda {

// The small-batch forward of `call` as `plan` lays it out, for the call's element type E:
// `epilogue_of(ElementConstant<E>{})` the epilogue (a ColumnEpilogue of the chain) and
// `kernels_of(Kernel{}, ElementConstant<E>{})` the SkinnyKernels of the plan's variant Kernel, a
// declaration's or a run-time chain's compiled ones (kernels/cuda/jit/), launched alike.
template <SkinnyFamily kFamily, class EpilogueOf, class KernelsOf>
cudaError_t launch_skinny_family(const LinearCall& call, const SkinnyPlan& plan, float* workspace,
                                 cudaStream_t stream, const EpilogueOf& epilogue_of,
                                 const KernelsOf& kernels_of) {
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
    using T = DeviceElement<decltype(element)::value>;
    const auto epilogue = epilogue_of(element);
    using Epilogue = std::decay_t<decltype(epilogue)>;
    SkinnyKernels kernels;
    err = with_variant<kFamily, T>(plan.variant, [&](auto kernel) {
      using Kernel = decltype(kernel);
      if constexpr (std::is_same_v<typename Kernel::Element, T>) {
        kernels = kernels_of(kernel, element);
        return Kernel::launch(limits, plan, call, workspace, partial, epilogue, kernels, stream);
      } else {
        return cudaErrorInvalidValue;
      }
    });
    if (err != cudaSuccess || plan.splits == 1) return;
    const int64_t count = call.rows * call.out_features;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(count, threads), 65535);
    err = KernelLauncher<ReduceFunction<T, typename Epilogue::Chain>>::launch_dependent(
        limits, kernels.reduce, unsigned(blocks), threads, 0, stream,
        static_cast<const float*>(partial), plan.splits, static_cast<T*>(call.out), count,
        call.out_features, epilogue, split_operands_of(call));
  };
  if constexpr (kFamily == SkinnyFamily::kHalf) {
    if (call.type == ElementType::kFloat16) launch(ElementConstant<ElementType::kFloat16>{});
    if (call.type == ElementType::kBFloat16) launch(ElementConstant<ElementType::kBFloat16>{});
  } else {
    if (call.type == ElementType::kFloat32) launch(ElementConstant<ElementType::kFloat32>{});
  }
  return err;
}

// The small-batch forward of declaration Model (or, for RuntimeChain, of `program`, by the
// interpreter's kernels), on the kernels compiled with the library.
template <class Model, SkinnyFamily kFamily>
cudaError_t launch_skinny_for(const act::Program& program, const LinearCall& call,
                              const SkinnyPlan& plan, float* workspace, cudaStream_t stream) {
  const auto epilogue_of = [&](auto element) {
    constexpr ElementType E = decltype(element)::value;
    const auto chain = device_chain<Model, kResultPrecisionOf<E>>(program);
    return ColumnEpilogue<DeviceElement<E>, std::decay_t<decltype(chain)>>(call.bias, call.terms,
                                                                           chain);
  };
  const auto kernels_of = [](auto kernel, auto element) {
    constexpr ElementType E = decltype(element)::value;
    return skinny::declared_kernels<decltype(kernel), DeviceElement<E>,
                                    DeviceChain<Model, kResultPrecisionOf<E>>>();
  };
  return launch_skinny_family<kFamily>(call, plan, workspace, stream, epilogue_of, kernels_of);
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
