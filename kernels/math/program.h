// A chain composed at run time: the op list of a parsed chain spec (the ops' ParsedChain),
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

// The op code of functor F, or -1 when F is not in the vocabulary (a functor a declaration brings).
template <class F>
constexpr int op_code_of() {
  int code = -1;
  // clang-format off
#define FUSEDLINEAR_CODE_OF(G) \
  if (std::is_same_v<F, G>) code = int(OpCode::k##G);
  FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_CODE_OF)
  FUSEDLINEAR_REWRITTEN(FUSEDLINEAR_CODE_OF)
#undef FUSEDLINEAR_CODE_OF
  // clang-format on
  return code;
}

// Why append_op refused an op.
enum class AppendError { kNone, kNotInVocabulary, kTooManyOps, kTooManyTerms };

// Appends op `code` (an OpCode, or -1) with its arguments to `program`; a column op (`takes_term`)
// takes the next slot. GELU after an op whose results lie in [-1, 1] becomes GeluOnUnitInterval,
// as chain.h's rewrite does for compiled chains.
inline AppendError append_op(Program& program, int code, const float* args, bool takes_term,
                             bool after_unit_interval) {
  if (code < 0) return AppendError::kNotInVocabulary;
  if (program.count == kMaxProgramOps) return AppendError::kTooManyOps;
  if (takes_term && program.terms == kMaxColumnTerms) return AppendError::kTooManyTerms;
  ProgramOp& op = program.ops[program.count++];
  op.code = OpCode(code);
  if (op.code == OpCode::kGelu && after_unit_interval) op.code = OpCode::kGeluOnUnitInterval;
  op.args[0] = args[0];
  op.args[1] = args[1];
  if (takes_term) op.slot = uint8_t(program.terms++);
  return AppendError::kNone;
}

// What the rules below ask of op `code`'s functor (chain.h's traits): whether its results lie in
// [-1, 1] (or are NaN) whatever its input, whether it keeps errors (kKeepsErrors), and the op
// code of its Half form (its own where it has none).
struct OpTraits {
  bool output_in_unit_interval, keeps_errors;
  OpCode half_form;
};
constexpr OpTraits op_traits(OpCode code) {
  switch (code) {
#define FUSEDLINEAR_OP_TRAITS(F)                                                     \
  case OpCode::k##F:                                                                 \
    static_assert(op_code_of<HalfOf<F>>() >= 0, "a Half form the interpreter runs"); \
    return {kOutputInUnitInterval<F>, kKeepsErrors<F>, OpCode(op_code_of<HalfOf<F>>())};
    FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_OP_TRAITS)
    FUSEDLINEAR_REWRITTEN(FUSEDLINEAR_OP_TRAITS)
#undef FUSEDLINEAR_OP_TRAITS
    case OpCode::kCount:
      break;
  }
  return {false, false, code};
}

// chain.h's kHalfFormsHold on an op list (its float32 forms): every op after the first that has a
// Half form keeps errors.
constexpr bool half_forms_hold(const Program& program) {
  bool seen = false;
  for (int i = 0; i < program.count; ++i) {
    const OpCode code = program.ops[i].code;
    if (seen && !op_traits(code).keeps_errors) return false;
    seen = seen || op_traits(code).half_form != code;
  }
  return true;
}

// The program for results of precision P, as a compiled chain of its ops runs (model.h's
// device_chain): for 16-bit results each op's Half form where the program allows them
// (half_forms_hold). The interpreter runs each op's functor as the list gives it.
constexpr Program with_result_precision(const Program& program, ResultPrecision precision) {
  if (precision != ResultPrecision::kHalf || !half_forms_hold(program)) return program;
  Program half = program;
  for (int i = 0; i < half.count; ++i) half.ops[i].code = op_traits(half.ops[i].code).half_form;
  return half;
}

// The program without the clamps that cannot change a value: a Hardtanh or Clamp whose bounds
// hold [-1, 1], after an op whose results lie there on every path, each rounding included — a GELU
// of values in [-1, 1] (results in [-0.17, 0.85]) or a clamp to bounds inside [-1, 1]. There
// clamp_keep_nan passes every value, NaN and -0 included, through unchanged: the results are
// bitwise the same. (Not after tanh or sigmoid themselves, whose approximations reach +-1: that
// none rounds past it is not shown.) Each op costs the interpreter a dispatch, where a compiled
// chain's clamp costs two min/max; hence run-time chains only (a compiled chain's functors read
// their arguments from the op list by position).
inline Program without_identity_clamps(const Program& program) {
  Program kept;
  kept.terms = program.terms;     // the ops left out are clamps, which take no term
  bool in_unit_interval = false;  // the results so far in [-1, 1], up to rounding
  bool well_inside = false;       // ... and inside it after rounding too
  for (int i = 0; i < program.count; ++i) {
    const ProgramOp& op = program.ops[i];
    const bool clamp = op.code == OpCode::kHardtanh || op.code == OpCode::kClamp;
    if (clamp && well_inside && op.args[0] <= -1.0f && op.args[1] >= 1.0f) continue;
    const bool gelu = op.code == OpCode::kGelu || op.code == OpCode::kGeluTanh ||
                      op.code == OpCode::kGeluOnUnitInterval;
    well_inside =
        (gelu && in_unit_interval) || (clamp && op.args[0] >= -1.0f && op.args[1] <= 1.0f);
    in_unit_interval = well_inside || op_traits(op.code).output_in_unit_interval;
    kept.ops[kept.count++] = op;
  }
  return kept;
}

// A compiled chain of the vocabulary's functors as the interpreter's op list (host only; for the
// kernel benchmark's side-by-side runs).
template <class... Fs>
Program program_of(const Chain<Fs...>& chain) {
  Program program;
  bool after_unit_interval = false;
  chain.for_each([&](const auto& functor) {
    using F = std::decay_t<decltype(functor)>;
    float args[2] = {0, 0};
    if constexpr (kArgCount<F> == 1) {
      const auto [a0] = functor;
      args[0] = a0;
    } else if constexpr (kArgCount<F> == 2) {
      const auto [a0, a1] = functor;
      args[0] = a0;
      args[1] = a1;
    }
    append_op(program, op_code_of<F>(), args, kTakesColumnTerm<F>, after_unit_interval);
    after_unit_interval = kOutputInUnitInterval<F>;
  });
  return program;
}

// A compiled chain's float64 form from its functors' own (host only): x, and terms[k] the k-th
// column functor's term.
template <class... Fs>
double reference_of(const Chain<Fs...>& chain, double x, const double* terms) {
  int slot = 0;
  chain.for_each([&](const auto& functor) {
    using F = std::decay_t<decltype(functor)>;
    if constexpr (kTakesColumnTerm<F>) {
      x = functor.reference(x, terms[slot++]);
    } else {
      x = functor.reference(x);
    }
  });
  return x;
}

// The interpreter, as a chain for results of precision P whose program reads at most kTermCount
// per-feature terms: the kernels keep that many in registers, so a kernel for fewer
// (with_term_capacity) has registers to spare for more threads.
template <ResultPrecision P, int kTermCount = kMaxColumnTerms>
struct ProgramChain {
  static_assert(kTermCount >= 0 && kTermCount <= kMaxColumnTerms);
  static constexpr int kTerms = kTermCount;
  Program program;
};

// Calls f(std::integral_constant<int, C>{}) with the least capacity C of 0, 1, 2 and
// kMaxColumnTerms that holds `terms` (a Program's count).
template <class F>
void with_term_capacity(int terms, F&& f) {
  static_assert(kMaxColumnTerms >= 2);
  if (terms == 0) {
    f(std::integral_constant<int, 0>{});
  } else if (terms == 1) {
    f(std::integral_constant<int, 1>{});
  } else if (terms == 2) {
    f(std::integral_constant<int, 2>{});
  } else {
    f(std::integral_constant<int, kMaxColumnTerms>{});
  }
}

// Functor F of an op, for results of precision P (its Half form for 16-bit results).
template <ResultPrecision P, class F>
FL_HOST_DEVICE auto functor_of(const ProgramOp& op) {
  if constexpr (P == ResultPrecision::kHalf && !std::is_same_v<HalfOf<F>, F>) {
    return HalfOf<F>{};
  } else {
    return with_args<F>(op.args);
  }
}

// Op F on a thread's R rows of N values, value k of every row in column k; a column op takes the
// first of `terms` and shifts the rest down one place. Slots are given in order (append_op), so
// the first is always the op's own: each op reads a fixed register, where picking the slot by its
// number, by index or by comparisons, had the compiler keep the terms in local memory. kTerms: how
// many of `terms` the program reads.
template <ResultPrecision P, class F, int kTerms, class V, int R, int N>
FL_HOST_DEVICE void apply_op(const ProgramOp& op, V (&v)[R][N], V (&terms)[kMaxColumnTerms][N]) {
  const auto f = functor_of<P, F>(op);
  FL_UNROLL
  for (int r = 0; r < R; ++r) {
    FL_UNROLL
    for (int k = 0; k < N; ++k) {
      if constexpr (kTakesColumnTerm<F>) {
        v[r][k] = f(v[r][k], terms[0][k]);
      } else {
        v[r][k] = f(v[r][k]);
      }
    }
  }
  if constexpr (kTakesColumnTerm<F>) {
    FL_UNROLL
    for (int k = 0; k < N; ++k) {
      FL_UNROLL
      for (int j = 0; j + 1 < kTerms; ++j) terms[j][k] = terms[j + 1][k];
    }
  }
}

// The program on R rows of N values sharing their columns' terms: one dispatch an op for all
// R x N, so that more rows a thread pay for fewer dispatches a value.
template <ResultPrecision P, int kTerms, class V, int R, int N>
FL_HOST_DEVICE void apply_chain(const ProgramChain<P, kTerms>& chain, V (&v)[R][N],
                                const V (&column_terms)[kMaxColumnTerms][N]) {
  const Program& program = chain.program;
  V terms[kMaxColumnTerms][N];  // the terms past kTerms: the caller's (unread) zeros
  FL_UNROLL
  for (int j = 0; j < kMaxColumnTerms; ++j) {
    FL_UNROLL
    for (int k = 0; k < N; ++k) terms[j][k] = column_terms[j][k];
  }
  for (int i = 0; i < program.count; ++i) {
    const ProgramOp& op = program.ops[i];
    // clang-format off
    switch (op.code) {
#define FUSEDLINEAR_OP_CASE(F) \
  case OpCode::k##F:           \
    apply_op<P, F, kTerms>(op, v, terms); \
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

// The program on one row of N values.
template <ResultPrecision P, int kTerms, class V, int N>
FL_HOST_DEVICE void apply_chain(const ProgramChain<P, kTerms>& chain, V (&v)[N],
                                const V (&column_terms)[kMaxColumnTerms][N]) {
  apply_chain(chain, reinterpret_cast<V(&)[1][N]>(v), column_terms);
}

}  // namespace act
}  // namespace fusedlinear
