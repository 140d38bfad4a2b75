// The primitives of primitives.h for SIMD vectors of floats (at::vec::Vectorized<float>), so that
// the same functors run on the CPU a vector at a time. CPU only: the CUDA kernels include
// primitives.h alone and stay free of torch.
//
// Compiled once per instruction set (kernels/cpu/epilogue_isa.h): with CPU_CAPABILITY_AVX2 or
// CPU_CAPABILITY_AVX512 defined, Vectorized<float> holds 8 or 16 floats. exp and expm1 are
// computed here, inline (vector_exp, vector_expm1: about 1 ulp), and GELU without erf
// (vector_gelu): Sleef's functions, which at::vec calls, are out-of-line calls that cost more than
// the rest of most ops (its erf several times libtorch's whole GELU), and every call spills the
// vector registers.
// log1p too (vector_log1p, 0.88 ulp), where the scalar build keeps Sleef's; tanh is computed from
// exp with AVX2 (tanh_from_exp, 1.7 ulp), from a table of polynomials with AVX-512
// (tanh_from_table, 0.58 ulp). The float forms use libm (host) or the GPU's instructions.
// Division is exact, as on the host; comparisons and blends keep NaN where the float forms do.
//
// Always inlined (FL_HOST_DEVICE), as primitives.h's: a copy left out of line, which a large
// caller such as the interpreter's loop gets from the compiler's own choice, would be a weak symbol
// of an object built with AVX2 or AVX-512 flags (tests/check_isa_objects.cmake).
#pragma once

#include <ATen/cpu/vec/vec.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/math/primitives.h"
#include "kernels/math/tanh_table.h"

namespace fusedlinear {
namespace act {

using FloatVec = at::vec::Vectorized<float>;

template <>
FL_HOST_DEVICE FloatVec fast_div(FloatVec a, FloatVec b) {
  return a / b;
}

template <>
FL_HOST_DEVICE FloatVec negate(FloatVec x) {
  return x.neg();
}

template <>
FL_HOST_DEVICE FloatVec absolute(FloatVec x) {
  return x.abs();
}

// Lanes where x < bound keep x; the others, NaN among them, take the bound (as fminf does).
template <>
FL_HOST_DEVICE FloatVec min_or_bound(FloatVec x, float bound) {
  return FloatVec::blendv(FloatVec(bound), x, x < FloatVec(bound));
}

// x < lo ? lo : (x > hi ? hi : x), lane by lane, NaN kept: at::vec's clamp is one max and one min
// instruction with x as their second operand, which they return where either operand is NaN (and
// where both are zeros, as the comparisons keep x).
template <>
FL_HOST_DEVICE FloatVec clamp_keep_nan(FloatVec x, float lo, float hi) {
  return at::vec::clamp(x, FloatVec(lo), FloatVec(hi));
}

// x < lo ? lo : x, lane by lane, NaN kept: one max instruction, as clamp_keep_nan's.
template <>
FL_HOST_DEVICE FloatVec at_least_keep_nan(FloatVec x, float lo) {
  return at::vec::clamp_min(x, FloatVec(lo));
}

template <>
FL_HOST_DEVICE FloatVec if_positive(FloatVec x, FloatVec then, FloatVec otherwise) {
  return FloatVec::blendv(otherwise, then, x > FloatVec(0.0f));
}

template <>
FL_HOST_DEVICE FloatVec if_negative(FloatVec x, FloatVec then, FloatVec otherwise) {
  return FloatVec::blendv(otherwise, then, x < FloatVec(0.0f));
}

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
// FloatVec's lanes as GCC vector types, for the few steps that work on a float's bits: integer
// arithmetic, shifts and conversions are then written once for both widths. (Not in the scalar
// build, where a vector of 32 bytes would change the calling convention.)
using IntLanes = int32_t __attribute__((vector_size(sizeof(FloatVec))));
using UintLanes = uint32_t __attribute__((vector_size(sizeof(FloatVec))));  // wraps, as bits do
using FloatLanes = float __attribute__((vector_size(sizeof(FloatVec))));
#if defined(CPU_CAPABILITY_AVX512)
using NativeFloats = __m512;  // what FloatVec holds and converts to and from
#else
using NativeFloats = __m256;
#endif
// A cast between vector types of one width keeps the bits, and stays in a register (a copy
// through memory left the compiler spilling other values in some loops).
template <class To, class From>
FL_HOST_DEVICE To same_bits(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "a vector of the same width");
  if constexpr (std::is_same_v<From, FloatVec>) {
    return (To)NativeFloats(from);
  } else if constexpr (std::is_same_v<To, FloatVec>) {
    return FloatVec((NativeFloats)from);
  } else {
    return (To)from;
  }
}
#endif

// Rounding u to an integer n by an addition (ties to even), for |u| < 2^22: u + 1.5 2^23 + bias
// has 1 as its last place, so the sum is u rounded, and holds n + bias in its low bits;
// subtracting the same constant gives n. Two additions, where round() and a conversion of n take
// three instructions, and power_of_two_from_sum reads 2^(n + bias - 127) from the sum with one
// shift.
constexpr float rounding_constant(int bias) {
  return 12582912.0f + float(bias);  // exact
}

// 2^(n + bias - 127) from a sum of rounding_constant(bias) that rounded to n: its low bits
// shifted into the exponent, for n + bias in [1, 254].
FL_HOST_DEVICE FloatVec power_of_two_from_sum(FloatVec sum) {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  return same_bits<FloatVec>(same_bits<UintLanes>(sum) << 23);
#else
  uint32_t lanes[FloatVec::size()];
  std::memcpy(lanes, &sum, sizeof(lanes));
  for (uint32_t& lane : lanes) lane <<= 23;
  FloatVec power;
  std::memcpy(&power, lanes, sizeof(lanes));
  return power;
#endif
}

// 2^n lane by lane, for integer-valued n in [-126, 127]: n + rounding_constant(127) is exact, and
// holds n + 127 in its low bits. (A NaN lane gives 0 or a power of two of either sign; the callers'
// results there are NaN.)
FL_HOST_DEVICE FloatVec power_of_two(FloatVec n) {
  return power_of_two_from_sum(n + FloatVec(rounding_constant(127)));
}

// x = n ln 2 + r with integer n and |r| <= ln 2 / 2 (ln 2 in two parts, so r is exact to a few
// float ulp), for |x| < 2^21: n is x log2(e) rounded once, from the exact product, with 127 as
// the sum's bias, so that power_of_two_from_sum(sum) is 2^n where n is in [-126, 127].
struct ExpReduced {
  FloatVec n, r, sum;
};
FL_HOST_DEVICE ExpReduced reduce_for_exp(FloatVec x) {
  const FloatVec sum =
      at::vec::fmadd(x, FloatVec(1.44269504088896341f), FloatVec(rounding_constant(127)));
  const FloatVec n = sum - FloatVec(rounding_constant(127));
  const FloatVec r = at::vec::fmadd(n, FloatVec(-0.693145751953125f), x);
  return {n, at::vec::fmadd(n, FloatVec(-1.42860682030941723e-6f), r), sum};
}
// The same for any x, clamped first to [-104, 89] (NaN kept): e^x is 0 below and infinite above.
FL_HOST_DEVICE ExpReduced reduce_for_exp_clamped(FloatVec x) {
  return reduce_for_exp(clamp_keep_nan(x, -104.0f, 89.0f));
}

// e^r - 1 for |r| <= ln 2 / 2: r + r^2 (1/2 + r/6 + ...), Taylor's terms to r^7 (the rest below
// 0.2 ulp), so small r keep their relative accuracy.
FL_HOST_DEVICE FloatVec expm1_reduced(FloatVec r) {
  const FloatVec p =
      polynomial(r, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040);
  return at::vec::fmadd(r * r, p, r);
}

// v 2^n for e's n in [-150, 128]: results that are subnormal round once, those past the float
// range become infinite. AVX-512 scales in one instruction. Otherwise one factor 2^n where every
// lane's is a normal float (n in [-126, 127], nearly every vector), else two factors, each a
// normal float; a product by a power of two is exact until its one rounding, so both give the
// same bits.
FL_HOST_DEVICE FloatVec times_power_of_two(FloatVec v, const ExpReduced& e) {
  const FloatVec n = e.n;
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_scalef_ps(v, n);
#else
  const FloatVec beyond_one_factor = (n < FloatVec(-126.0f)) | (n > FloatVec(127.0f));
  if (beyond_one_factor.zero_mask() == (1 << FloatVec::size()) - 1)
    return v * power_of_two_from_sum(e.sum);
  const FloatVec half = (n * FloatVec(0.5f)).floor();
  return v * power_of_two(half) * power_of_two(n - half);
#endif
}

// e^x: 2^n e^r, within about 1 ulp; 0 below -104, infinity above 89, NaN stays NaN.
FL_HOST_DEVICE FloatVec vector_exp(FloatVec x) {
  const ExpReduced e = reduce_for_exp_clamped(x);
  return times_power_of_two(expm1_reduced(e.r) + FloatVec(1.0f), e);
}

// e^x - 1 = 2^n (e^r - 1) + (2^n - 1), one rounding (n = 0: e^r - 1 itself, so small x keep
// their relative accuracy), 2^n read from n's bits; x is clamped first to [-45, 89] (NaN kept),
// below which the result is -1 already, so that n >= -65. A vector with a lane of n > 64 (x
// above 44), where 1 is below the ulp, takes e^x alone there. x = +-0 gives x.
FL_HOST_DEVICE FloatVec vector_expm1(FloatVec x) {
  const ExpReduced e = reduce_for_exp(clamp_keep_nan(x, -45.0f, 89.0f));
  const FloatVec m = expm1_reduced(e.r);
  const FloatVec beyond = e.n > FloatVec(64.0f);
  FloatVec result;
  if (beyond.zero_mask() == (1 << FloatVec::size()) - 1) {
    const FloatVec scale = power_of_two_from_sum(e.sum);
    result = at::vec::fmadd(scale, m, scale - FloatVec(1.0f));
  } else {
    const FloatVec scale = power_of_two(at::vec::clamp_max(e.n, FloatVec(64.0f)));
    const FloatVec near = at::vec::fmadd(scale, m, scale - FloatVec(1.0f));
    result = FloatVec::blendv(near, times_power_of_two(m + FloatVec(1.0f), e), beyond);
  }
  return FloatVec::blendv(result, x, x == FloatVec(0.0f));  // -0 stays -0
}

// GELU, x Phi(x) (Phi the normal distribution), in one formula for every lane, where
// x / 2 (1 + erf(x / sqrt 2)) would take erf's two formulas and an exp. With a = |x| and
// t = 1 / (1 + p a),
//   h = Phi(-a) = R(t) 2^(-a^2 log2(e) / 2),   Phi(x) = h for x < 0, 1 - h otherwise,
// R a polynomial fitted to Phi(-a) e^(a^2 / 2) for a in [0, 14.5], smooth in t since a t stays
// below 1 / p. Relative error up to 7e-7 from x = -3 up: the rounding of t counts up to 2.7 times
// in R, and that of a^2 grows with the exponent, to 1e-5 near -13; never the cancellation of
// 1 + erf for x < 0. 2^(-a^2 ...) = 2^n 2^f with f in [-1/2, 1/2] (n rounded by an addition,
// rounding_constant, from the exact product), 2^f by a polynomial whose coefficients carry a
// factor 2^-64 that 2^(n + 64) undoes, so a result below float's normal range is rounded once; a
// is clamped at 16, from where h underflows to 0 (n + 64 then stays a normal float's exponent).
// NaN gives NaN and -inf gives NaN (as PyTorch, -inf * 0), +inf gives +inf, -0 gives -0.
FL_HOST_DEVICE FloatVec vector_gelu(FloatVec x) {
  const FloatVec a = at::vec::clamp_max(x.abs(), FloatVec(16.0f));
  const FloatVec t = FloatVec(1.0f) / at::vec::fmadd(a, FloatVec(0.296875f), FloatVec(1.0f));
  const FloatVec r = polynomial(t, 1.321952732e-05f, 1.181144640e-01f, 1.217857525e-01f,
                                8.841424435e-02f, 1.576754600e-01f, -1.025679186e-01f,
                                2.561590374e-01f, -1.788179576e-01f, 3.922371939e-02f);
  // -a^2 log2(e) / 2 = n + f, from the exact product of a and a_scaled
  const FloatVec a_scaled = a * FloatVec(-0.72134752044448170368f);
  const FloatVec sum = at::vec::fmadd(a, a_scaled, FloatVec(rounding_constant(191)));
  const FloatVec f = at::vec::fmadd(a, a_scaled, FloatVec(rounding_constant(191)) - sum);
  const FloatVec minus_scaled_power =
      polynomial(f, -5.421010868e-20f, -3.757558531e-20f, -1.302270297e-20f, -3.008839259e-21f,
                 -5.214193317e-22f, -7.264117259e-23f, -8.318979983e-24f);  // -2^f 2^-64
  const FloatVec minus_h = r * minus_scaled_power * power_of_two_from_sum(sum);
  // x Phi(x) is x - |x| h for x >= 0 and -|x| h for x < 0, where max(x, -0) is x and -0: one
  // fused multiply-add, rounded once. |x| of x clamped at 16 from above: +inf - 16 * 0 is +inf,
  // -0 + inf * 0 is NaN.
  return at::vec::fmadd(at::vec::clamp_max(x, FloatVec(16.0f)).abs(), minus_h,
                        at_least_keep_nan(x, -0.0f));
}

template <>
FL_HOST_DEVICE FloatVec fast_exp(FloatVec x) {
  return vector_exp(x);
}

template <>
FL_HOST_DEVICE FloatVec accurate_exp(FloatVec x) {
  return vector_exp(x);
}

template <>
FL_HOST_DEVICE FloatVec accurate_expm1(FloatVec x) {
  return vector_expm1(x);
}

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
// log(1 + x) within 0.88 ulp (every float checked), as fdlibm's log1pf computes it: u = 1 + x
// rounded, and c, its rounding error over u (AVX-512 divides by the reciprocal estimate and a
// Newton step: its division costs more than the rest), so that log1p(x) = log(u) + c; u = 2^k m
// with m in [sqrt(1/2), sqrt(2)), read from u's bits; log(m) = f - f^2/2 + s (f^2/2 + R(s^2)) with
// f = m - 1, s = f / (2 + f), R the tail of 2 atanh(s)'s series. A vector with a lane of 0, -1 or
// below, +inf or NaN takes Sleef's log1p there (rare: the ops that call log1p pass it exp's
// results).
FL_HOST_DEVICE FloatVec vector_log1p(FloatVec x) {
  const FloatVec u = x + FloatVec(1.0f);
  const FloatVec error =  // exact: x - (u - 1) where u < 2, 1 - (u - x) from 2 up
      FloatVec::blendv(FloatVec(1.0f) - (u - x), x - (u - FloatVec(1.0f)), u < FloatVec(2.0f));
#if defined(CPU_CAPABILITY_AVX512)
  // 1 / u to 28 bits: the 14-bit estimate, then a Newton step
  const FloatVec estimate = _mm512_maskz_rcp14_ps(0xffff, u);
  const FloatVec c =
      error * at::vec::fmadd(at::vec::fmadd(u, estimate.neg(), FloatVec(1.0f)), estimate, estimate);
#else
  const FloatVec c = error / u;
#endif
  // u's bits moved by m's lower bound, so that the exponent field is k + 127 and the significand,
  // moved back, is m
  const UintLanes moved = same_bits<UintLanes>(u) + 0x004afb0du;
  const IntLanes exponent = IntLanes(moved >> 23) - 127;
  const FloatVec k = same_bits<FloatVec>(__builtin_convertvector(exponent, FloatLanes));
  const FloatVec m = same_bits<FloatVec>((moved & 0x007fffffu) + 0x3f3504f3u);
  const FloatVec f = m - FloatVec(1.0f);
  const FloatVec s = f / (FloatVec(2.0f) + f);
  const FloatVec z = s * s;
  const FloatVec r = z * polynomial(z, 2.0f / 3, 2.0f / 5, 2.0f / 7, 2.0f / 9);
  const FloatVec half_f_squared = FloatVec(0.5f) * f * f;
  // k ln 2 (ln 2 in two parts) + f - (f^2/2 - s (f^2/2 + r)) + c, the small terms summed first
  const FloatVec small = at::vec::fmadd(s, half_f_squared + r,
                                        at::vec::fmadd(k, FloatVec(1.42860682030941723e-6f), c));
  const FloatVec result =
      at::vec::fmadd(k, FloatVec(0.693145751953125f), f - (half_f_squared - small));
  const FloatVec ordinary =
      (x > FloatVec(-1.0f)) & (x < FloatVec(INFINITY)) & (x != FloatVec(0.0f));
  if (ordinary.zero_mask() == 0) return result;  // no lane is 0 (false)
  return FloatVec::blendv(x.log1p(), result, ordinary);
}
#endif

template <>
FL_HOST_DEVICE FloatVec accurate_log1p(FloatVec x) {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  return vector_log1p(x);
#else
  return x.log1p();
#endif
}

template <>
FL_HOST_DEVICE FloatVec accurate_gelu(FloatVec x) {
  return vector_gelu(x);
}

// tanh a vector at a time in about half the instructions of Sleef's (FloatVec::tanh, 1.0 ulp,
// ~130 instructions a vector with AVX2: as much as the rest of swish_chain), within 1.7 ulp:
// below |x| = 0.625 the odd polynomial |x| + |x|^3 P(x^2) (P fitted to tanh, 0.8 ulp in float);
// from there 1 - 2 / (exp(2|x|) + 1) (no cancellation: the result is above 0.55); then the sign
// of x, so -0 stays -0 and NaN stays NaN (exp(NaN) is NaN). 2|x| is clamped at 40, where tanh
// already rounds to 1, so that exp's 2^n is always one normal float: no check of the lanes'
// range, as vector_exp's for its wider one.
FL_HOST_DEVICE FloatVec tanh_from_exp(FloatVec x) {
  const FloatVec sign = x & FloatVec(-0.0f);
  const FloatVec a = x.abs();
  const FloatVec w = a * a;
  const FloatVec p = polynomial(w, -3.333333135e-01f, 1.333320588e-01f, -5.394676328e-02f,
                                2.170070447e-02f, -8.177398704e-03f, 2.142962068e-03f);
  const FloatVec near_zero = a + a * w * p;
  const ExpReduced e = reduce_for_exp(at::vec::clamp_max(a + a, FloatVec(40.0f)));  // NaN kept
  const FloatVec power = power_of_two_from_sum(e.sum);
  const FloatVec exp_2a = at::vec::fmadd(power, expm1_reduced(e.r), power);
  const FloatVec beyond = FloatVec(1.0f) - FloatVec(2.0f) / (exp_2a + FloatVec(1.0f));
  return FloatVec::blendv(beyond, near_zero, a < FloatVec(0.625f)) ^ sign;
}

#if defined(CPU_CAPABILITY_AVX512)
// tanh with AVX-512, within 0.58 ulp (every float checked), with no division and no exp: a
// polynomial of degree 6 on each of 29 intervals of |x| (tanh_table.h), whose coefficients two
// registers and one permute give each lane. The interval is the bits of |x|, clamped at 9.5
// (where tanh rounds to 1; NaN kept), shifted right by 21: its exponent and two bits of its
// significand, from 2^-4 on (below, interval 0). Interval 0 adds t = |x| last, for relative
// accuracy near 0. Then the sign of x, so -0 stays -0; NaN gives NaN through t.
FL_HOST_DEVICE FloatVec tanh_from_table(FloatVec x) {
  const FloatVec sign = x & FloatVec(-0.0f);
  const FloatVec a = at::vec::clamp_max(x.abs(), FloatVec(9.5f));
  const __m512i interval = _mm512_max_epi32(
      _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 21), _mm512_set1_epi32(492)),
      _mm512_setzero_si512());
  const auto lanes = [&](const float* row) FL_INLINE_LAMBDA {
    return FloatVec(
        _mm512_permutex2var_ps(_mm512_load_ps(row), interval, _mm512_load_ps(row + 16)));
  };
  const auto& c = kTanhTable.coefficient;
  const FloatVec t = a - lanes(kTanhTable.center);
  FloatVec p = lanes(c[6]);
  for (int j = 5; j >= 1; --j) p = at::vec::fmadd(p, t, lanes(c[j]));
  const __mmask16 near_zero = _mm512_cmpeq_epi32_mask(interval, _mm512_setzero_si512());
  const FloatVec base = _mm512_mask_blend_ps(near_zero, lanes(c[0]), t);
  return at::vec::fmadd(p, t, base) ^ sign;
}
#endif

// The AVX-512 tanh from its table; with AVX2, where no instruction indexes a table of 32 in a
// register, from exp.
template <>
FL_HOST_DEVICE FloatVec accurate_tanh(FloatVec x) {
#if defined(CPU_CAPABILITY_AVX512)
  return tanh_from_table(x);
#else
  return tanh_from_exp(x);
#endif
}

// The same tanh as for float32 results: the GPU's cheaper instruction has no CPU twin.
template <>
FL_HOST_DEVICE FloatVec half_precision_tanh(FloatVec x) {
  return accurate_tanh(x);
}

// x in the lanes where x >= bound, otherwise() in the others (NaN among them); otherwise() is
// computed for all lanes. Found from the functors through the lambda they pass (its type
// belongs to fusedlinear::act).
template <class F>
FL_HOST_DEVICE FloatVec x_where_at_least(float bound, FloatVec x, F otherwise) {
  return FloatVec::blendv(otherwise(), x, x >= FloatVec(bound));
}

template <class F>
FL_HOST_DEVICE FloatVec where_above(FloatVec test, float bound, FloatVec then, F otherwise) {
  return FloatVec::blendv(otherwise(), then, test > FloatVec(bound));
}

}  // namespace act
}  // namespace fusedlinear
