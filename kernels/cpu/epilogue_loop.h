// The CPU epilogue's loop, once for every width: `Lanes` says how values are loaded, held and
// stored (one float at a time in the scalar loop, epilogue.cpp; a SIMD vector in the AVX2 and
// AVX-512 loops, epilogue_isa.h). Each run of a row goes a block of values (vectors) at a time:
// the elements load as floats, get the bias added, go through the chain's functors, and are
// rounded once on the way back; the last partial vector of a run goes through a small buffer
// (Lanes::load and store with a count). Every lane is computed alone, so an element's result does
// not depend on where it falls in a vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/epilogue.h"
#include "kernels/math/element.h"
#include "kernels/math/model.h"

namespace fusedlinear {
namespace cpu {

// What an element is held as in memory: a float, or the 16 bits of a float16 or bfloat16.
template <ElementType E>
using Stored = std::conditional_t<E == ElementType::kFloat32, float, uint16_t>;

// Calls fn(first, col, n, rows) for the runs of elements of [begin, end) that each lie in one
// row, starting at column `col`: a partial row, first or last, alone (rows = 1, the per-column
// inputs of a run contiguous), and the whole rows between them in one call (col = 0, n = cols).
template <class Fn>
inline void for_each_row_group(int64_t cols, int64_t begin, int64_t end, Fn&& fn) {
  int64_t first = begin;
  if (first % cols != 0) {
    const int64_t n = std::min(cols - first % cols, end - first);
    fn(first, first % cols, n, int64_t(1));
    first += n;
  }
  const int64_t rows = (end - first) / cols;
  if (rows > 0) fn(first, int64_t(0), cols, rows);
  first += rows * cols;
  if (first < end) fn(first, int64_t(0), end - first, int64_t(1));
}

// As for_each_row_group, a row a call: fn(first, col, n).
template <class Fn>
inline void for_each_row_run(int64_t cols, int64_t begin, int64_t end, Fn&& fn) {
  for_each_row_group(cols, begin, end, [&](int64_t first, int64_t col, int64_t n, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) fn(first + r * cols, col, n);
  });
}

// Marks the lambdas run once a value (vector): they are always inlined into their loops. In the
// interpreter's large switch the compiler otherwise leaves some out of line, so each value costs
// a call, and a costly op reloads all its constants each time.
#if defined(__GNUC__)
#define FUSEDLINEAR_PER_VALUE __attribute__((always_inline))
#else
#define FUSEDLINEAR_PER_VALUE
#endif

// Values (vectors) a block: the loop goes over a row's run a block at a time, in passes over all
// of a block's values, the first pass as they load (bias added), the last as they store. A
// run-time chain makes a pass an op, so it dispatches each op once a block, not once a value; a
// compiled chain makes a pass a functor alike. Each pass's
// loop has independent iterations, which the core overlaps, where a whole chain applied a value at
// a time is one long dependency through its calls, and every call spills the vector registers.
// Small enough for the values to stay in L1 between passes.
constexpr int kBlockValues = 32;

// Values a piece of a staged pass (block_pass): at most 256 elements (AVX-512's 16 vectors),
// which measured faster copied to out than pieces of twice that.
template <class Lanes>
constexpr int kStagedValuesOf = int(std::min<int64_t>(kBlockValues, 256 / Lanes::kLanes));

// A block of a row's run: `full` whole values from element `at` (column `col`), then the `rest`
// elements (0 to kLanes - 1) of a partial one; for a chain of one pass, `rows` such runs,
// `stride` elements apart (else rows = 1); `v` holds its values between the passes;
// `stage_copies`: staged_copies_pay() (epilogue.h).
template <class Lanes, ElementType E>
struct Block {
  const EpilogueCall& call;
  int64_t at, col;
  int full;
  int64_t rest, rows, stride;
  typename Lanes::Value* v;
  bool stage_copies;
};

// Term `slot` of a block's values: a column's values (`column`), or one value for all (`all`: a
// one-element parameter, or zeros where the call passes fewer terms than the chain reads).
template <class Lanes, ElementType E>
struct TermSource {
  using V = typename Lanes::Value;
  const Stored<E>* column = nullptr;
  V all = V(0.0f);
  void set(const Block<Lanes, E>& block, int slot) {
    const ColumnTerms& terms = block.call.terms;
    if (slot >= terms.count) return;
    const auto* data = static_cast<const Stored<E>*>(terms.data[slot]);
    if ((terms.broadcast >> slot) & 1) {
      all = Lanes::template broadcast<E>(data);
    } else {
      column = data + block.col;
    }
  }
};

// One pass over the block: apply(x, i, count) on each value, from y + bias for the chain's first
// pass (kFirst), else from the block's values; to out for its last (kLast), times the gate where
// the call has one (the value stored, so rounded as a separate multiply sees it, then multiplied
// and stored again), else back. kStaged (a chain's only pass, of few instructions a value, which
// waits on its stores; after other passes staging measured slower): the values stored in a buffer
// on the stack instead, and copied to out a piece at a time (Lanes::copy), which the SIMD loops
// make a string move: it writes whole cache lines without reading them first, where each vector
// store fetches its line of out. Not where out is y itself (below). The call's pointers are read
// into locals first: the vector stores may alias anything, so fields read through a reference would
// be read again after every store.
template <bool kFirst, bool kLast, bool kStaged, class Lanes, ElementType E, class Apply>
inline void block_pass(const Block<Lanes, E>& block, const Apply& apply) {
  using V = typename Lanes::Value;
  using S = Stored<E>;
  constexpr int64_t kLanes = Lanes::kLanes;
  constexpr bool kStage = kFirst && kLast && kStaged;
  const EpilogueCall& call = block.call;
  const S* const y = static_cast<const S*>(call.y) + block.at;
  const S* const bias = call.bias ? static_cast<const S*>(call.bias) + block.col : nullptr;
  S* const out = static_cast<S*>(call.out) + block.at;
  const S* const gate = call.gate ? static_cast<const S*>(call.gate) + block.at : nullptr;
  V* const v = block.v;
  const int full = block.full;
  const int64_t rest = block.rest;
  const Apply fn = apply;  // a copy: what it holds by value stays in registers (op_pass)
  // Value i of the row `shift` elements on from the block's first.
  const auto one = [&](int64_t shift, int i, int64_t count, S* to) FUSEDLINEAR_PER_VALUE {
    V x;
    if constexpr (kFirst) {
      x = Lanes::template load<E>(y + shift + i * kLanes, count);
      if (bias) x = x + Lanes::template load<E>(bias + i * kLanes, count);
    } else {
      x = v[i];
    }
    x = fn(x, i, count);
    if constexpr (kLast) {
      Lanes::template store<E>(to, x, count);
      if (gate) {
        x = Lanes::template load<E>(to, count) *
            Lanes::template load<E>(gate + shift + i * kLanes, count);
        Lanes::template store<E>(to, x, count);
      }
    } else {
      v[i] = x;
    }
  };
  // Two values an iteration: with AVX2's float32, a whole cache line, as eager's loops store.
  const auto store_row = [&](int64_t shift) FUSEDLINEAR_PER_VALUE {
#pragma GCC unroll 2
    for (int i = 0; i < full; ++i) one(shift, i, kLanes, out + shift + i * kLanes);
    if (rest > 0) one(shift, full, rest, out + shift + full * kLanes);
  };
  const auto store_to_out = [&] {
    for (int64_t shift = 0; shift < block.rows * block.stride; shift += block.stride)
      store_row(shift);
  };
  if constexpr (kStage) {
    // Over y itself (out == y, the CPU's whole forward) the values are stored in place: y's lines
    // are in the cache already, and the string move back onto them measured slower. Without fast
    // short string moves the copy measured slower than the stores it replaces.
    if (static_cast<const void*>(out) == static_cast<const void*>(y) || !block.stage_copies) {
      return store_to_out();
    }
    // A piece at a time: its buffer starts at the offset in a 4 KiB page of the piece's source, so
    // that no load shares the low 12 bits of its address with an earlier store of the piece: the
    // core can take those for a dependence and wait on it.
    constexpr int kPiece = kStagedValuesOf<Lanes>;
    constexpr size_t kPage = 4096;
    alignas(64) unsigned char room[kPage + kPiece * kLanes * sizeof(S)];
    const int values = full + (rest > 0 ? 1 : 0);
    for (int64_t shift = 0; shift < block.rows * block.stride; shift += block.stride) {
      for (int p = 0; p < values; p += kPiece) {
        const int end = std::min(values, p + kPiece);
        const auto source = reinterpret_cast<uintptr_t>(y + shift + p * kLanes);
        S* const sink =
            reinterpret_cast<S*>(room + (source - reinterpret_cast<uintptr_t>(room)) % kPage);
        const int whole = std::min(end, full);
        for (int i = p; i < whole; ++i) one(shift, i, kLanes, sink + (i - p) * kLanes);
        if (end > full) one(shift, full, rest, sink + (full - p) * kLanes);
        Lanes::template copy<E>(
            out + shift + p * kLanes, sink,
            std::min<int64_t>(int64_t(end) * kLanes, full * kLanes + rest) - int64_t(p) * kLanes);
      }
    }
  } else {
    store_to_out();
  }
}

template <bool kFirst, bool kStaged, class Lanes, ElementType E, class Apply>
inline void block_pass(const Block<Lanes, E>& block, bool last, const Apply& apply) {
  if (last) {
    block_pass<kFirst, true, kStaged>(block, apply);
  } else {
    block_pass<kFirst, false, false>(block, apply);
  }
}

// --- the passes: one an op of a run-time chain, or a functor of a compiled one -------------------

// Op f, column ops with term `slot`, as a pass of a chain. The per-value lambdas hold
// f and the term by value, and block_pass runs a copy of them: read through a reference, f's
// arguments (clamp's bounds, celu's 1 / alpha) would be read again, and computed again, after
// every store, which may alias them, instead of once a block.
template <bool kFirst, class Lanes, ElementType E, class F>
inline void op_pass(const F& f, const Block<Lanes, E>& block, int slot, bool last) {
  using V = typename Lanes::Value;
  if constexpr (act::kTakesColumnTerm<F>) {
    TermSource<Lanes, E> term;
    term.set(block, slot);
    // A loop for each kind of term: a branch on the kind inside kept the loop from storing two
    // values an iteration.
    if (term.column) {
      const auto* const column = term.column;
      block_pass<kFirst, act::kMemoryBound<F>>(
          block, last, [f, column](V x, int i, int64_t count) FUSEDLINEAR_PER_VALUE {
            return f(x, Lanes::template load<E>(column + i * Lanes::kLanes, count));
          });
    } else {
      const V all = term.all;
      block_pass<kFirst, act::kMemoryBound<F>>(
          block, last, [f, all](V x, int, int64_t) FUSEDLINEAR_PER_VALUE { return f(x, all); });
    }
  } else {
    block_pass<kFirst, act::kMemoryBound<F>>(
        block, last, [f](V x, int, int64_t) FUSEDLINEAR_PER_VALUE { return f(x); });
  }
}

// A compiled chain on a block: a pass a functor, as a run-time chain makes a pass an op; its
// first column functor takes term kSlot. (Cheap functors merged into a costly one's pass
// measured slower, once the passes' lambdas were inlined.)
template <int kSlot, bool kFirst, class Lanes, ElementType E, class... Fs>
inline void block_ops(const act::Chain<Fs...>& chain, const Block<Lanes, E>& block) {
  using V = typename Lanes::Value;
  if constexpr (sizeof...(Fs) == 0) {
    block_pass<true, true, true>(block, [](V x, int, int64_t) FUSEDLINEAR_PER_VALUE { return x; });
  } else {
    constexpr bool kLast = sizeof...(Fs) == 1;
    op_pass<kFirst>(chain.first, block, kSlot, kLast);
    if constexpr (!kLast) {
      block_ops<kSlot + act::Chain<Fs...>::kOwnTerms, false>(chain.rest, block);
    }
  }
}

// A run-time chain on a block: one dispatch an op. Column ops take their own slot.
template <int kSlot, bool kFirst, class Lanes, ElementType E, act::ResultPrecision P, int kTerms>
inline void block_ops(const act::ProgramChain<P, kTerms>& chain, const Block<Lanes, E>& block) {
  using V = typename Lanes::Value;
  const act::Program& program = chain.program;
  if (program.count == 0) {
    return block_pass<true, true, true>(block,
                                        [](V x, int, int64_t) FUSEDLINEAR_PER_VALUE { return x; });
  }
  for (int i = 0; i < program.count; ++i) {
    const act::ProgramOp& op = program.ops[i];
    const bool last = i + 1 == program.count;
    const auto run = [&](const auto& f) {
      if (i == 0) {
        op_pass<true>(f, block, op.slot, last);
      } else {
        op_pass<false>(f, block, op.slot, last);
      }
    };
    // clang-format off
    switch (op.code) {
#define FUSEDLINEAR_OP_CASE(F)                    \
  case act::OpCode::k##F:                         \
    run(act::functor_of<P, act::F>(op));          \
    break;
      FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_OP_CASE)
      FUSEDLINEAR_REWRITTEN(FUSEDLINEAR_OP_CASE)
#undef FUSEDLINEAR_OP_CASE
      case act::OpCode::kCount:
        break;
    }
    // clang-format on
  }
}

// Whether a chain is one pass (at most one op), which holds no values between passes.
template <class... Fs>
constexpr bool one_pass(const act::Chain<Fs...>&) {
  return sizeof...(Fs) <= 1;
}
template <act::ResultPrecision P, int kTerms>
bool one_pass(const act::ProgramChain<P, kTerms>& chain) {
  return chain.program.count <= 1;
}

// The chain over the elements [begin, end) of the call's row-major [rows, cols] tensor, a block
// of a row's run at a time; a chain of one pass, which holds no values between passes, takes
// every whole row as one block (and without per-column inputs the whole span): each block pays
// its pass's set-up again, which measured costly beside most ops' few instructions a value.
template <class Lanes, ElementType E, class ChainT>
inline void run_chain(const ChainT& chain, const EpilogueCall& call, int64_t begin, int64_t end) {
  constexpr int64_t kLanes = Lanes::kLanes;
  typename Lanes::Value values[kBlockValues];
  const bool stage_copies = staged_copies_pay();
  // Without per-column inputs the rows need not be told apart: runs across rows, as long as a
  // block's count of values fits its int.
  const bool by_row = call.bias || call.terms.count > 0;
  const int64_t run = by_row ? call.cols : std::min<int64_t>(end, int64_t(1) << 30);
  if (one_pass(chain)) {
    return for_each_row_group(
        run, begin, end, [&](int64_t first, int64_t col, int64_t n, int64_t rows) {
          const Block<Lanes, E> block{call, first, col,    int(n / kLanes), n % kLanes,
                                      rows, run,   values, stage_copies};
          block_ops<0, true>(chain, block);
        });
  }
  for_each_row_run(run, begin, end, [&](int64_t first, int64_t col, int64_t n) {
    for (int64_t k = 0; k < n; k += kBlockValues * kLanes) {
      const int64_t count = std::min(n - k, kBlockValues * kLanes);
      const Block<Lanes, E> block{call, first + k, col + k, int(count / kLanes), count % kLanes,
                                  1,    run,       values,  stage_copies};
      block_ops<0, true>(chain, block);
    }
  });
}

// The loop of declaration Model (or, for RuntimeChain, of `program`) on [begin, end) of a call.
template <class Lanes, class Model>
void span_of(const act::Program& program, const EpilogueCall& call, int64_t begin, int64_t end) {
  dispatch_element(call.type, [&](auto element) {
    constexpr ElementType E = decltype(element)::value;
    run_chain<Lanes, E>(device_chain<Model, kResultPrecisionOf<E>>(program), call, begin, end);
  });
}

// The spans of a tuple of declarations, in order.
template <class Lanes, class List>
struct SpanTable;
template <class Lanes, class... Ms>
struct SpanTable<Lanes, std::tuple<Ms...>> {
  using Span = void (*)(const act::Program&, const EpilogueCall&, int64_t, int64_t);
  static constexpr Span fn[] = {&span_of<Lanes, Ms>...};
};

}  // namespace cpu
}  // namespace fusedlinear
