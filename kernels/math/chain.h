// A model's activation chain: functors (functors.h) composed in the order the Python model
// applies them, `Chain(AddParam{"add_value"}, Swish{}, Tanh{}, Gelu{}, Hardtanh{-1, 1})`, and the
// rewrites that make a chain cheaper without changing what it computes:
//   - for results kept in bfloat16 or float16 (ResultPrecision::kHalf), each functor's `Half`
//     form where it has one, in chains whose later ops do not magnify its error (kHalfFormsHold);
//   - GELU after a functor whose results lie in [-1, 1] (Tanh, Sigmoid, ...) as the polynomial
//     GeluOnUnitInterval, which is exact there only.
// The run-time chains (program.h) apply the same rewrites to their op lists, and leave out the
// clamps that cannot change a value (without_identity_clamps), each an interpreter dispatch.
#pragma once

#include <type_traits>
#include <utility>

#include "kernels/math/functors.h"

namespace fusedlinear {
namespace act {

// How many bits the chain's result keeps: float32 needs the accurate functors; bfloat16 and
// float16 (8 and 11 significant bits) can take cheaper ones whose errors stay under their
// rounding step.
enum class ResultPrecision { kFloat32, kHalf };
// The precision of a result held in T: float, or a 16-bit type (the host's or the device's).
template <typename T>
inline constexpr ResultPrecision kResultPrecisionFor =
    std::is_same_v<T, float> ? ResultPrecision::kFloat32 : ResultPrecision::kHalf;

// The most per-feature terms (AddParam, ...) one chain may take.
constexpr int kMaxColumnTerms = 4;

// --- functor traits -----------------------------------------------------------------------------

template <class F, class = void>
struct TakesColumnTermOf : std::false_type {};
template <class F>
struct TakesColumnTermOf<F, std::void_t<decltype(F::kTakesColumnTerm)>>
    : std::bool_constant<F::kTakesColumnTerm> {};
template <class F>
inline constexpr bool kTakesColumnTerm = TakesColumnTermOf<F>::value;

template <class F, class = void>
struct OutputInUnitIntervalOf : std::false_type {};
template <class F>
struct OutputInUnitIntervalOf<F, std::void_t<decltype(F::kOutputInUnitInterval)>>
    : std::bool_constant<F::kOutputInUnitInterval> {};
template <class F>
inline constexpr bool kOutputInUnitInterval = OutputInUnitIntervalOf<F>::value;

template <class F, class = void>
struct MemoryBoundOf : std::false_type {};
template <class F>
struct MemoryBoundOf<F, std::void_t<decltype(F::kMemoryBound)>>
    : std::bool_constant<F::kMemoryBound> {};
template <class F>
inline constexpr bool kMemoryBound = MemoryBoundOf<F>::value;

// Whether F is right on part of the line only (GeluOnUnitInterval): taken by the rewrites where
// the functor before it proves the range, never written in a chain.
template <class F, class = void>
struct RewriteOnlyOf : std::false_type {};
template <class F>
struct RewriteOnlyOf<F, std::void_t<decltype(F::kRewriteOnly)>>
    : std::bool_constant<F::kRewriteOnly> {};
template <class F>
inline constexpr bool kRewriteOnly = RewriteOnlyOf<F>::value;

template <class F, class = void>
struct HalfOfImpl {
  using type = F;
};
template <class F>
struct HalfOfImpl<F, std::void_t<typename F::Half>> {
  using type = typename F::Half;
};
// The functor for results kept in 16 bits: F::Half, or F itself.
template <class F>
using HalfOf = typename HalfOfImpl<F>::type;
template <class F>
inline constexpr bool kHasHalfForm = !std::is_same_v<HalfOf<F>, F>;

template <class F, class = void>
struct KeepsErrorsOf : std::false_type {};
template <class F>
struct KeepsErrorsOf<F, std::void_t<decltype(F::kKeepsErrors)>>
    : std::bool_constant<F::kKeepsErrors> {};
template <class F>
inline constexpr bool kKeepsErrors = KeepsErrorsOf<F>::value;

// How many arguments (kArgs) F takes: its data members, in order.
template <class F, class = void>
struct ArgCountOf : std::integral_constant<int, 0> {};
template <class F>
struct ArgCountOf<F, std::void_t<decltype(F::kArgs)>>
    : std::integral_constant<int, int(sizeof(F::kArgs) / sizeof(F::kArgs[0]))> {};
template <class F>
inline constexpr int kArgCount = ArgCountOf<F>::value;

// F with the arguments `args` (kArgCount<F> of them): an aggregate whose data members are its
// arguments in order.
template <class F>
FL_HOST_DEVICE constexpr F with_args(const float* args) {
  static_assert(kArgCount<F> <= 2, "functors take at most two arguments");
  if constexpr (kArgCount<F> == 0) {
    return F{};
  } else if constexpr (kArgCount<F> == 1) {
    return F{args[0]};
  } else {
    return F{args[0], args[1]};
  }
}

// --- the chain ----------------------------------------------------------------------------------

template <class... Fs>
struct Chain;

template <>
struct Chain<> {
  static constexpr int kTerms = 0;
  template <int kSlot, class V>
  FL_HOST_DEVICE V apply_from(V x, const V* /*terms*/) const {
    return x;
  }
  template <class V>
  FL_HOST_DEVICE V operator()(V x, const V* /*terms*/ = nullptr) const {
    return x;
  }
  template <class Fn>
  void for_each(Fn&&) const {}
};

// Chain(f, g, h)(x) == h(g(f(x))). A column functor takes the chain's next per-feature term:
// the k-th column functor the k-th of `terms`, slots fixed at compile time so that a kernel's
// terms stay in registers.
template <class F, class... Rest>
struct Chain<F, Rest...> {
  static constexpr int kOwnTerms = kTakesColumnTerm<F> ? 1 : 0;
  static constexpr int kTerms = kOwnTerms + Chain<Rest...>::kTerms;
  static_assert(kTerms <= kMaxColumnTerms, "a chain takes at most kMaxColumnTerms parameters");

  F first{};
  Chain<Rest...> rest{};

  constexpr Chain() = default;
  FL_HOST_DEVICE constexpr explicit Chain(F f, Rest... fs) : first(f), rest(fs...) {
    static_assert(!kRewriteOnly<F>,
                  "this functor is exact on [-1, 1] only: write Gelu{}, which the chain's rewrite "
                  "turns into it where the functor before it proves the range");
  }
  FL_HOST_DEVICE constexpr Chain(std::in_place_t, F f, Chain<Rest...> tail)
      : first(f), rest(tail) {}

  template <int kSlot, class V>
  FL_HOST_DEVICE V apply_from(V x, const V* terms) const {
    if constexpr (kTakesColumnTerm<F>) {
      x = first(x, terms[kSlot]);
    } else {
      x = first(x);
    }
    return rest.template apply_from<kSlot + kOwnTerms>(x, terms);
  }
  // The chain on x; `terms`: the element's kTerms per-feature terms (unread when none).
  template <class V>
  FL_HOST_DEVICE V operator()(V x, const V* terms = nullptr) const {
    return apply_from<0>(x, terms);
  }
  // fn(functor) for each functor in order (host: printing, eager forms).
  template <class Fn>
  void for_each(Fn&& fn) const {
    fn(first);
    rest.for_each(fn);
  }
};

template <class... Fs>
Chain(Fs...) -> Chain<Fs...>;

// The chain on each of N values (a kernel's elements of one row, or lanes' vectors), `terms[j][k]`
// the j-th per-feature term of value k.
template <class... Fs, class V, int N>
FL_HOST_DEVICE void apply_chain(const Chain<Fs...>& chain, V (&v)[N],
                                const V (&terms)[kMaxColumnTerms][N]) {
  constexpr int kTerms = Chain<Fs...>::kTerms;
  FL_UNROLL
  for (int k = 0; k < N; ++k) {
    V t[kTerms > 0 ? kTerms : 1];
    FL_UNROLL
    for (int j = 0; j < kTerms; ++j) t[j] = terms[j][k];
    v[k] = chain(v[k], t);
  }
}

// The chain on R rows of N values that share their columns' terms (`terms[j][k]`, value k of
// every row).
template <class... Fs, class V, int R, int N>
FL_HOST_DEVICE void apply_chain(const Chain<Fs...>& chain, V (&v)[R][N],
                                const V (&terms)[kMaxColumnTerms][N]) {
  FL_UNROLL
  for (int r = 0; r < R; ++r) apply_chain(chain, v[r], terms);
}

// --- rewrites -----------------------------------------------------------------------------------

// What F becomes after Prev (the functor before it in the chain; void for the first), for
// results of precision P.
template <class Prev, class F>
using AfterRangeOf = std::conditional_t<std::is_same_v<F, Gelu> && kOutputInUnitInterval<Prev>,
                                        GeluOnUnitInterval, F>;
template <ResultPrecision P, class Prev, class F>
using RewrittenOf = std::conditional_t<P == ResultPrecision::kHalf, HalfOf<AfterRangeOf<Prev, F>>,
                                       AfterRangeOf<Prev, F>>;

template <class R, class F>
FL_HOST_DEVICE constexpr R rewritten_functor(const F& f) {
  if constexpr (std::is_same_v<R, F>) {
    return f;
  } else {
    static_assert(kArgCount<F> == 0 && !kTakesColumnTerm<F>,
                  "rewrites replace argument-free functors");
    return R{};
  }
}

template <class F, class Tail>
struct Prepend;
template <class F, class... Fs>
struct Prepend<F, Chain<Fs...>> {
  using type = Chain<F, Fs...>;
};

template <ResultPrecision P, class Prev, class C>
struct Rewrite;
template <ResultPrecision P, class Prev>
struct Rewrite<P, Prev, Chain<>> {
  using type = Chain<>;
  static FL_HOST_DEVICE constexpr type of(const Chain<>&) { return {}; }
};
template <ResultPrecision P, class Prev, class F, class... Rest>
struct Rewrite<P, Prev, Chain<F, Rest...>> {
  using R = RewrittenOf<P, Prev, F>;
  using Tail = Rewrite<P, F, Chain<Rest...>>;
  using type = typename Prepend<R, typename Tail::type>::type;
  static FL_HOST_DEVICE constexpr type of(const Chain<F, Rest...>& c) {
    return type(std::in_place, rewritten_functor<R>(c.first), Tail::of(c.rest));
  }
};

// Chain C as it runs for results of precision P (the Half forms for kHalf: model.h takes them
// where kHalfFormsHold).
template <ResultPrecision P, class C>
using Rewritten = typename Rewrite<P, void, C>::type;
template <ResultPrecision P, class C>
FL_HOST_DEVICE constexpr Rewritten<P, C> rewrite(const C& chain) {
  return Rewrite<P, void, C>::of(chain);
}

// Whether the functors Fs (a chain's float32 forms, in order) may take their Half forms for 16-bit
// results: each Half form is within a 16-bit rounding step of its own result, and every functor
// after the first that has one keeps errors (kKeepsErrors), so that no later op magnifies that
// error past a step (an add or a sub may cancel, a multiply scale it). The Half forms' results are
// at least -1, the range kKeepsErrors is stated for. program.h's half_forms_hold applies the same
// rule to an op list.
template <class... Fs>
constexpr bool half_forms_hold_of(const Chain<Fs...>*) {
  bool seen = false, holds = true;
  ((holds = holds && (!seen || kKeepsErrors<Fs>), seen = seen || kHasHalfForm<Fs>), ...);
  return holds;
}
template <class C>
inline constexpr bool kHalfFormsHold =
    half_forms_hold_of(static_cast<const Rewritten<ResultPrecision::kFloat32, C>*>(nullptr));

}  // namespace act
}  // namespace fusedlinear
