// The two models' epilogues: what each applies to its Linear layer's output.
//
//   out[r, c] = Activations((y[r, c] + bias[c]) + shift[c])
//
// `bias` is the Linear layer's bias (folded in here so the GEMM can run without it) and
// `shift` a second per-column term (SwishChain's add_value); either may be absent. The
// adds happen in that order, in float, as PyTorch's eager ops do them.
#pragma once

#include "kernels/math/functors.h"

namespace fusedlinear {

enum class EpilogueKind { kSwishChain, kMishMish };

// How many bits the chain's result keeps: float32 needs the accurate functors; bfloat16 and
// float16 (8 and 11 significant bits) can take cheaper ones whose errors stay under their
// rounding step (the hardware tanh, relative error below 2^-10.99; a shorter GELU polynomial; a
// clamp where float32 needs a branch).
enum class ResultPrecision { kFloat32, kHalf };

// Swish -> Tanh -> GELU(erf), after `+ add_value`. GELU follows tanh, so its input is in
// [-1, 1]: GeluErfOnUnitInterval applies, and its results lie in [-0.17, 0.85], where the
// model's last op, Hardtanh(-1, 1), is the identity (NaN passes both): it is left out.
using SwishChainActivations = act::Chain<act::Swish, act::Tanh, act::GeluErfOnUnitInterval>;
using SwishChainActivationsHalf =
    act::Chain<act::Swish, act::TanhHalfPrecision, act::GeluErfOnUnitIntervalHalfPrecision>;
// Mish -> Mish; for 16-bit results with exp's argument clamped instead of the x >= 20 branch.
using MishMishActivations = act::Chain<act::Mish, act::Mish>;
using MishMishActivationsHalf = act::Chain<act::MishHalfPrecision, act::MishHalfPrecision>;

// How the CUDA kernel launches a chain for 16-bit results (float32 results all take one shape,
// fused_epilogue.cuh): rows per thread per step, threads per block, the grid capped at that many
// waves of resident blocks. Each chain names its own, measured with epilogue_bench's shape
// sweep on an H200; a chain without one does not compile for 16-bit results.
struct HalfLaunch {
  int rows, threads, waves;
};
template <class Activations>
struct HalfLaunchOf;
// swish_chain: two rows per step and one wave (each thread loops over several steps, its
// set-up amortised).
template <>
struct HalfLaunchOf<SwishChainActivations> {
  static constexpr HalfLaunch value{2, 128, 1};
};
template <>
struct HalfLaunchOf<SwishChainActivationsHalf> : HalfLaunchOf<SwishChainActivations> {};
// mish_mish, with one more MUFU op an element: one row per step and two waves (more threads in
// flight).
template <>
struct HalfLaunchOf<MishMishActivations> {
  static constexpr HalfLaunch value{1, 128, 2};
};
template <>
struct HalfLaunchOf<MishMishActivationsHalf> : HalfLaunchOf<MishMishActivations> {};

// PyTorch's formulas op for op (act::literal): the baseline the rewrites are measured against
// (kernels/epilogue_bench.cu, tests/test_activations.cpp).
namespace literal {
using SwishChainActivations =
    act::Chain<act::literal::Swish, act::Tanh, act::literal::GeluErf, act::Hardtanh>;
using MishMishActivations = act::Chain<act::literal::Mish, act::literal::Mish>;
}  // namespace literal

// Calls fn(Activations{}) with the chain that `kind` names at `Precision`; the one place that
// maps the enums to a type, for the CUDA launcher and the CPU loop alike.
template <ResultPrecision Precision, class Fn>
inline void dispatch_epilogue(EpilogueKind kind, Fn&& fn) {
  switch (kind) {
    case EpilogueKind::kSwishChain:
      if constexpr (Precision == ResultPrecision::kHalf) {
        fn(SwishChainActivationsHalf{});
      } else {
        fn(SwishChainActivations{});
      }
      return;
    case EpilogueKind::kMishMish:
      if constexpr (Precision == ResultPrecision::kHalf) {
        fn(MishMishActivationsHalf{});
      } else {
        fn(MishMishActivations{});
      }
      return;
  }
}

// The element type of an epilogue's tensors (y, bias, shift and out alike).
enum class ElementType { kFloat32, kFloat16, kBFloat16 };
template <ElementType E>
struct ElementConstant {
  static constexpr ElementType value = E;
};
// Calls fn(ElementConstant<type>{}): the one switch from the run-time element type to a
// compile-time one, for the CUDA launcher and the CPU loops alike (each maps the constant to its
// own storage type: __half or c10::Half, ...).
template <class Fn>
inline void dispatch_element(ElementType type, Fn&& fn) {
  switch (type) {
    case ElementType::kFloat32:
      return fn(ElementConstant<ElementType::kFloat32>{});
    case ElementType::kFloat16:
      return fn(ElementConstant<ElementType::kFloat16>{});
    case ElementType::kBFloat16:
      return fn(ElementConstant<ElementType::kBFloat16>{});
  }
}
// The precision of a result held in that element type.
template <ElementType E>
inline constexpr ResultPrecision kResultPrecisionOfElement =
    E == ElementType::kFloat32 ? ResultPrecision::kFloat32 : ResultPrecision::kHalf;

// The precision of a result held in T: kHalf for the 2-byte float types.
template <typename T>
inline constexpr ResultPrecision kResultPrecisionOf = sizeof(T) == 2 ? ResultPrecision::kHalf
                                                                     : ResultPrecision::kFloat32;

inline const char* epilogue_name(EpilogueKind kind) {
  return kind == EpilogueKind::kSwishChain ? "swish_chain" : "mish_mish";
}

}  // namespace fusedlinear
