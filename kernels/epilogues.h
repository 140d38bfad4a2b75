// The two models' epilogues: what each applies to its Linear layer's output.
//
//   out[r, c] = Activations((y[r, c] + bias[c]) + shift[c])
//
// `bias` is the Linear layer's bias (folded in here so the GEMM can run without it) and
// `shift` a second per-column term (SwishChain's add_value); either may be absent. The
// adds happen in that order, in float, as PyTorch's eager ops do them.
#pragma once

#include "activations.h"

namespace fusedlinear {

enum class EpilogueKind { kSwishChain, kMishMish };

// Swish -> Tanh -> GELU(erf) -> Hardtanh(-1, 1), after `+ add_value`.
using SwishChainActivations = act::Chain<act::Swish, act::Tanh, act::GeluErf, act::Hardtanh>;
// Mish -> Mish.
using MishMishActivations = act::Chain<act::Mish, act::Mish>;

// PyTorch's formulas op for op (act::literal): the baseline the rewrites are measured against
// (kernels/epilogue_bench.cu, tests/test_activations.cpp).
namespace literal {
using SwishChainActivations =
    act::Chain<act::literal::Swish, act::Tanh, act::GeluErf, act::Hardtanh>;
using MishMishActivations = act::Chain<act::literal::Mish, act::literal::Mish>;
}  // namespace literal

// Calls fn(Activations{}) with the chain that `kind` names; the one place that maps the enum
// to a type, for the CUDA launcher and the CPU loop alike.
template <class Fn>
inline void dispatch_epilogue(EpilogueKind kind, Fn&& fn) {
  switch (kind) {
    case EpilogueKind::kSwishChain:
      fn(SwishChainActivations{});
      return;
    case EpilogueKind::kMishMish:
      fn(MishMishActivations{});
      return;
  }
}

inline const char* epilogue_name(EpilogueKind kind) {
  return kind == EpilogueKind::kSwishChain ? "swish_chain" : "mish_mish";
}

}  // namespace fusedlinear
