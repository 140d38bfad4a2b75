// The primitives of primitives.h for SIMD vectors of floats (at::vec::Vectorized<float>), so that
// the same functors run on the CPU a vector at a time. CPU only: the CUDA kernels include
// primitives.h alone and stay free of torch.
//
// Compiled once per instruction set (kernels/cpu/epilogue_isa.h): with CPU_CAPABILITY_AVX2 or
// CPU_CAPABILITY_AVX512 defined, Vectorized<float> holds 8 or 16 floats and its exp, expm1, log1p
// and erf are Sleef's (1.0 ulp); tanh is computed from exp (tanh_from_exp, 1.7 ulp), where the
// float forms use libm (host) or the GPU's instructions. Division is exact, as on the host;
// comparisons and blends keep NaN where the float forms do.
//
// Always inlined (FL_HOST_DEVICE), as primitives.h's: a copy left out of line, which a large
// caller such as the interpreter's loop gets from the compiler's own choice, would be a weak symbol
// of an object built with AVX2 or AVX-512 flags (tests/check_isa_objects.cmake).
#pragma once

#include <ATen/cpu/vec/vec.h>

#include "kernels/math/primitives.h"

namespace fusedlinear {
namespace act {

using FloatVec = at::vec::Vectorized<float>;

template <>
FL_HOST_DEVICE FloatVec fast_exp(FloatVec x) {
  return x.exp();
}

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

// x < lo ? lo : (x > hi ? hi : x), lane by lane: NaN fails both comparisons and stays.
template <>
FL_HOST_DEVICE FloatVec clamp_keep_nan(FloatVec x, float lo, float hi) {
  const FloatVec at_least_lo = FloatVec::blendv(x, FloatVec(lo), x < FloatVec(lo));
  return FloatVec::blendv(at_least_lo, FloatVec(hi), at_least_lo > FloatVec(hi));
}

template <>
FL_HOST_DEVICE FloatVec if_positive(FloatVec x, FloatVec then, FloatVec otherwise) {
  return FloatVec::blendv(otherwise, then, x > FloatVec(0.0f));
}

template <>
FL_HOST_DEVICE FloatVec if_negative(FloatVec x, FloatVec then, FloatVec otherwise) {
  return FloatVec::blendv(otherwise, then, x < FloatVec(0.0f));
}

template <>
FL_HOST_DEVICE FloatVec accurate_exp(FloatVec x) {
  return x.exp();
}

template <>
FL_HOST_DEVICE FloatVec accurate_expm1(FloatVec x) {
  return x.expm1();
}

template <>
FL_HOST_DEVICE FloatVec accurate_log1p(FloatVec x) {
  return x.log1p();
}

template <>
FL_HOST_DEVICE FloatVec accurate_erf(FloatVec x) {
  return x.erf();
}

// tanh a vector at a time in about half the instructions of Sleef's (FloatVec::tanh, 1.0 ulp,
// ~130 instructions a vector with AVX2: as much as the rest of swish_chain), within 1.7 ulp:
// below |x| = 0.625 the odd polynomial |x| + |x|^3 P(x^2) (P fitted to tanh, 0.8 ulp in float);
// from there 1 - 2 / (exp(2|x|) + 1) (no cancellation: the result is above 0.55); then the sign
// of x, so -0 stays -0 and NaN stays NaN (exp(NaN) is NaN); exp(2|x|) = inf gives 1.
FL_HOST_DEVICE FloatVec tanh_from_exp(FloatVec x) {
  const FloatVec sign = x & FloatVec(-0.0f);
  const FloatVec a = x.abs();
  const FloatVec w = a * a;
  const FloatVec p = polynomial(w, -3.333333135e-01f, 1.333320588e-01f, -5.394676328e-02f,
                                2.170070447e-02f, -8.177398704e-03f, 2.142962068e-03f);
  const FloatVec near_zero = a + a * w * p;
  const FloatVec beyond = FloatVec(1.0f) - FloatVec(2.0f) / ((a + a).exp() + FloatVec(1.0f));
  return FloatVec::blendv(beyond, near_zero, a < FloatVec(0.625f)) ^ sign;
}

template <>
FL_HOST_DEVICE FloatVec accurate_tanh(FloatVec x) {
  return tanh_from_exp(x);
}

// The same tanh as for float32 results: the GPU's cheaper instruction has no CPU twin.
template <>
FL_HOST_DEVICE FloatVec half_precision_tanh(FloatVec x) {
  return tanh_from_exp(x);
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
