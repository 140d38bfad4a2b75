// The CPU epilogue's loop, once for every width: `Lanes` says how values are loaded, held and
// stored (one float at a time in the scalar loop, epilogue.cpp; a SIMD vector in the AVX2 and
// AVX-512 loops, epilogue_isa.h). Each run of a row goes a value (vector) at a time: the elements
// load as floats, get the bias added, go through the chain's functors, and are rounded once on
// the way back; the last partial vector of a run goes through a small buffer (Lanes::load and
// store with a count). Every lane is computed alone, so an element's result does not depend on
// where it falls in a vector.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/math/element.h"
#include "kernels/math/model.h"

namespace fusedlinear {
namespace cpu {

// What an element is held as in memory: a float, or the 16 bits of a float16 or bfloat16.
template <ElementType E>
using Stored = std::conditional_t<E == ElementType::kFloat32, float, uint16_t>;

// Calls fn(first, col, n) for each run of elements [first, first + n) of [begin, end) that lies
// in one row, starting at column `col`: the per-column inputs of a run are contiguous.
template <class Fn>
inline void for_each_row_run(int64_t cols, int64_t begin, int64_t end, Fn&& fn) {
  for (int64_t first = begin; first < end;) {
    const int64_t col = first % cols;
    const int64_t n = std::min(cols - col, end - first);
    fn(first, col, n);
    first += n;
  }
}

// The chain over the elements [begin, end) of the call's row-major [rows, cols] tensor, kGroup
// values (vectors) at a time where a run of a row holds them: a run-time chain's ops are then
// dispatched once for kGroup values, and a compiled chain's independent values interleave.
template <class Lanes, ElementType E, class ChainT>
inline void run_chain(const ChainT& chain, const EpilogueCall& call, int64_t begin, int64_t end) {
  using V = typename Lanes::Value;
  using S = Stored<E>;
  constexpr int64_t kLanes = Lanes::kLanes;
  constexpr int kGroup = 4;
  constexpr int kTerms = ChainT::kTerms;
  const S* y = static_cast<const S*>(call.y);
  const S* bias = static_cast<const S*>(call.bias);
  S* out = static_cast<S*>(call.out);
  const S* terms[act::kMaxColumnTerms];
  for (int j = 0; j < act::kMaxColumnTerms; ++j)
    terms[j] = static_cast<const S*>(call.terms.data[j]);
  const int term_count = std::min(call.terms.count, kTerms);
  // kN values from element k of the run at `first` (column `col`), each of `count` lanes.
  const auto values_at = [&](auto group, int64_t first, int64_t col, int64_t k, int64_t count) {
    constexpr int kN = decltype(group)::value;
    V v[kN];
    V t[act::kMaxColumnTerms][kN];
    for (int g = 0; g < kN; ++g) {
      const int64_t at = k + g * kLanes;
      v[g] = Lanes::template load<E>(y + first + at, count);
      if (bias) v[g] = v[g] + Lanes::template load<E>(bias + col + at, count);
      for (int j = 0; j < act::kMaxColumnTerms; ++j) {
        t[j][g] = j >= term_count ? V(0.0f)
                  : (call.terms.broadcast >> j) & 1
                      ? Lanes::template broadcast<E>(terms[j])
                      : Lanes::template load<E>(terms[j] + col + at, count);
      }
    }
    act::apply_chain(chain, v, t);
    for (int g = 0; g < kN; ++g)
      Lanes::template store<E>(out + first + k + g * kLanes, v[g], count);
  };
  for_each_row_run(call.cols, begin, end, [&](int64_t first, int64_t col, int64_t n) {
    int64_t k = 0;
    for (; k + kGroup * kLanes <= n; k += kGroup * kLanes) {
      values_at(std::integral_constant<int, kGroup>{}, first, col, k, kLanes);
    }
    for (; k + kLanes <= n; k += kLanes)
      values_at(std::integral_constant<int, 1>{}, first, col, k, kLanes);
    if (k < n) values_at(std::integral_constant<int, 1>{}, first, col, k, n - k);
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
