// A chain composed at run time: the op list of a parsed chain spec (kernels/ops/chain_spec.h),
// interpreted by the same kernels that run compiled chains (chain.h), with the same functors. Each
// op is applied to all of a thread's values before the next (one dispatch an op for 4-16 values),
// its code the same for every thread, so the interpreter's branches never diverge.
#pragma once

#include <stdint.h>

#include <type_traits>

#include "kernels/math/chain.h"

namespace fusedlinear {
namespace act {

// An op code per functor of the vocabulary and of the rewrites (functors.h), in list order.
enum class OpCode : uint8_t {
#define FUSEDLINEAR_OP_CODE(F) k##F,
  FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_OP_CODE) FUSEDLINEAR_REWRITTEN(FUSEDLINEAR_OP_CODE)
#undef FUSEDLINEAR_OP_CODE
      kCount
};

constexpr int kMaxProgramOps = 16;

struct ProgramOp {
  OpCode code = OpCode::kCount;
  uint8_t slot = 0;        // a column functor's term: which of the chain's per-feature terms
  float args[2] = {0, 0};  // the functor's arguments (kArgs), in order
};

// The ops of a chain in order, `terms` per-feature terms (slot k for the k-th column op); plain
// data, taken by value by the kernels. A compiled chain's kernels read their functors' arguments
// from the same list (one op a functor, in order).
struct Program {
  int32_t count = 0;
  int32_t terms = 0;
  ProgramOp ops[kMaxProgramOps];
};

// The interpreter, as a chain for results of precision P.
template <ResultPrecision P>
struct ProgramChain {
  static constexpr int kTerms = kMaxColumnTerms;
  Program program;
};

// Functor F of an op, for results of precision P (its Half form for 16-bit results).
template <ResultPrecision P, class F>
FL_HOST_DEVICE auto functor_of(const ProgramOp& op) {
  if constexpr (P == ResultPrecision::kHalf && !std::is_same_v<HalfOf<F>, F>) {
    return HalfOf<F>{};
  } else {
    return with_args<F>(op.args);
  }
}

template <ResultPrecision P, class F, class V, int N>
FL_HOST_DEVICE void apply_op(const ProgramOp& op, V (&v)[N], const V (&terms)[kMaxColumnTerms][N]) {
  const auto f = functor_of<P, F>(op);
  FL_UNROLL
  for (int k = 0; k < N; ++k) {
    if constexpr (kTakesColumnTerm<F>) {
      // The op's term picked by comparisons (uniform: every thread runs the same op), not an
      // index, which would move the terms from registers to local memory.
      V term = terms[0][k];
      FL_UNROLL
      for (int j = 1; j < kMaxColumnTerms; ++j) {
        if (op.slot == j) term = terms[j][k];
      }
      v[k] = f(v[k], term);
    } else {
      v[k] = f(v[k]);
    }
  }
}

template <ResultPrecision P, class V, int N>
FL_HOST_DEVICE void apply_chain(const ProgramChain<P>& chain, V (&v)[N],
                                const V (&terms)[kMaxColumnTerms][N]) {
  const Program& program = chain.program;
  for (int i = 0; i < program.count; ++i) {
    const ProgramOp& op = program.ops[i];
    // clang-format off
    switch (op.code) {
#define FUSEDLINEAR_OP_CASE(F) \
  case OpCode::k##F:           \
    apply_op<P, F>(op, v, terms); \
    break;
      FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_OP_CASE)
      FUSEDLINEAR_REWRITTEN(FUSEDLINEAR_OP_CASE)
#undef FUSEDLINEAR_OP_CASE
      case OpCode::kCount:
        break;
    }
    // clang-format on
  }
}

}  // namespace act
}  // namespace fusedlinear
