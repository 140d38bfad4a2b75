// plan_skinny_linear (skinny.h): the kernel a call runs and the layout of its launch, decided once
// a call, before any chain is known; the launch (launch.cuh) takes the plan as it is.
#include "kernels/cuda/skinny/variants.cuh"

namespace fusedlinear {
namespace cuda {

SkinnyFamily family_of(SkinnyVariant variant) {
  if (variant <= SkinnyVariant::kFloatUnaligned) return SkinnyFamily::kFloat;
  if (variant <= SkinnyVariant::kBf16Unaligned) return SkinnyFamily::kBf16;
  if (variant <= SkinnyVariant::kBf16x3Unaligned) return SkinnyFamily::kBf16x3;
  return SkinnyFamily::kHalf;
}

cudaError_t plan_skinny_linear(const LinearCall& call, SkinnyPlan& plan) {
  using namespace skinny;
  if (call.type != ElementType::kFloat32 && call.precision != Precision::kIeee) {
    return cudaErrorInvalidValue;
  }
  DeviceLimits limits;
  const cudaError_t limits_err = current_device_limits(limits);
  if (limits_err != cudaSuccess) return limits_err;
  plan = SkinnyPlan{};
  plan.variant = choose_variant(call, limits);
  const auto lay_out = [&](auto kernel) {
    using Kernel = decltype(kernel);
    const cudaError_t err =
        make_plan(call.rows, call.out_features, call.in_features, Kernel::cover(), limits, plan);
    if (err != cudaSuccess) return err;
    plan.x_workspace_floats = Kernel::x_workspace_floats(call);
    plan.partial_floats =
        plan.splits > 1 ? int64_t(plan.splits) * call.rows * call.out_features : 0;
    return cudaSuccess;
  };
  // What a kernel covers does not depend on its element type: plan 16-bit models as bfloat16.
  switch (family_of(plan.variant)) {
    case SkinnyFamily::kFloat:
      return with_variant<SkinnyFamily::kFloat, float>(plan.variant, lay_out);
    case SkinnyFamily::kBf16:
      return with_variant<SkinnyFamily::kBf16, float>(plan.variant, lay_out);
    case SkinnyFamily::kBf16x3:
      return with_variant<SkinnyFamily::kBf16x3, float>(plan.variant, lay_out);
    case SkinnyFamily::kHalf:
      return with_variant<SkinnyFamily::kHalf, __nv_bfloat16>(plan.variant, lay_out);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace fusedlinear
