// The arithmetic the activation functors are written in (functors.h): the float forms here, for
// the CUDA kernels and the CPU's scalar loop; the SIMD-vector forms in primitives_vec.h, for the
// CPU's vector loops. The functors reach exp, division, tanh, comparisons ... only through these,
// so that each compiles unchanged for a float or for at::vec::Vectorized<float>.
//
// On the GPU, fast_exp and fast_div are the hardware's approximations (__expf: a few ulp for the
// arguments that occur in the chains; a * rcp.approx(b): ~2 ulp), half_precision_tanh the
// hardware's tanh; the accurate_* forms are CUDA's libm (1-2 ulp). On the host all are libm's and
// division is exact.
#pragma once

// Always inlined: on the CPU the same functions are compiled into the scalar loop and into the
// AVX2 and AVX-512 loops (kernels/cpu/epilogue_isa.h), and a copy left out of line would be one
// symbol shared by all three, built for whichever instruction set the linker keeps.
#if defined(__CUDACC__)
#define FL_HOST_DEVICE __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define FL_HOST_DEVICE inline __attribute__((always_inline))
#else
#define FL_HOST_DEVICE inline
#endif

// The same for the lambdas the functors hand to x_where_at_least and where_above: a lambda's
// operator() is only implicitly inline, and the CPU's large interpreter loop had one left out of
// line. (`[&]() FL_INLINE_LAMBDA { ... }`; nvcc inlines them itself.)
#if defined(__GNUC__) && !defined(__CUDACC__)
#define FL_INLINE_LAMBDA __attribute__((always_inline))
#else
#define FL_INLINE_LAMBDA
#endif

#include <math.h>

// `#pragma unroll` for the GPU's code; host compilers unroll such small loops on their own.
#if defined(__CUDA_ARCH__)
#define FL_UNROLL _Pragma("unroll")
#else
#define FL_UNROLL
#endif

namespace fusedlinear {
namespace act {

// The forms for other value types (SIMD vectors: primitives_vec.h specializes these). Declared
// here so that the functors' unqualified calls find them whenever they are instantiated; a float
// argument takes the float overloads below.
template <class V>
V fast_exp(V x);
template <class V>
V fast_div(V a, V b);
template <class V>
V negate(V x);
template <class V>
V absolute(V x);
template <class V>
V min_or_bound(V x, float bound);
template <class V>
V clamp_keep_nan(V x, float lo, float hi);
template <class V>
V at_least_keep_nan(V x, float lo);
template <class V>
V if_positive(V x, V then, V otherwise);
template <class V>
V if_negative(V x, V then, V otherwise);
template <class V>
V accurate_exp(V x);
template <class V>
V accurate_expm1(V x);
template <class V>
V accurate_log1p(V x);
template <class V>
V accurate_gelu(V x);
template <class V>
V accurate_tanh(V x);
template <class V>
V half_precision_tanh(V x);

FL_HOST_DEVICE float fast_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return ::expf(x);
#endif
}

// a / b as a * (1/b) with the hardware reciprocal (rcp.approx.ftz: 1 ulp; one MUFU op and one
// multiply, without __fdividef's range checks). For |b| > 2^126 the reciprocal flushes to 0, so
// the result is 0 (and NaN for a = +-inf): callers say why that is right where they use it.
FL_HOST_DEVICE float fast_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  float reciprocal;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(reciprocal) : "f"(b));
  return a * reciprocal;
#else
  return a / b;
#endif
}

FL_HOST_DEVICE float negate(float x) { return -x; }
FL_HOST_DEVICE float absolute(float x) { return fabsf(x); }

// fminf(x, bound): the smaller of the two, and `bound` when x is NaN.
FL_HOST_DEVICE float min_or_bound(float x, float bound) { return fminf(x, bound); }

// min(max(x, lo), hi) with NaN passed through, as PyTorch's clamp does (fminf/fmaxf would
// return the bound). On the GPU two min/max instructions with the .NaN flag (sm_80+).
FL_HOST_DEVICE float clamp_keep_nan(float x, float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(x), "f"(lo));
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(y), "f"(hi));
  return y;
#else
  return x < lo ? lo : (x > hi ? hi : x);
#endif
}

// max(x, lo) with NaN passed through, as PyTorch's relu and clamp_min do.
FL_HOST_DEVICE float at_least_keep_nan(float x, float lo) { return x < lo ? lo : x; }

// x > 0 ? then : otherwise, and x < 0 ? then : otherwise: NaN fails both tests. For a vector
// both values are computed and blended lane by lane.
FL_HOST_DEVICE float if_positive(float x, float then, float otherwise) {
  return x > 0.0f ? then : otherwise;
}
FL_HOST_DEVICE float if_negative(float x, float then, float otherwise) {
  return x < 0.0f ? then : otherwise;
}

// x where x >= bound, otherwise otherwise(): for a float a branch (otherwise() is evaluated only
// below the bound); for a vector, both and a blend, lane by lane. NaN is below any bound. (The
// vector form is an overload that the call finds through its lambda, whose type belongs to this
// namespace.)
template <class F>
FL_HOST_DEVICE float x_where_at_least(float bound, float x, F otherwise) {
  if (x >= bound) return x;
  return otherwise();
}

// then where test > bound, otherwise otherwise(): as x_where_at_least, with a strict test on a
// value of its own (softplus's beta * x > threshold).
template <class F>
FL_HOST_DEVICE float where_above(float test, float bound, float then, F otherwise) {
  if (test > bound) return then;
  return otherwise();
}

// c0 + w (c1 + w (c2 + ...)): Horner's rule, coefficients from the constant term up; nvcc
// contracts each step into one FMA (and so does g++ for vectors, where built with FMA).
template <class V>
FL_HOST_DEVICE V polynomial(V /*w*/, float c0) {
  return V(c0);
}
template <class V, class... Cs>
FL_HOST_DEVICE V polynomial(V w, float c0, Cs... rest) {
  return polynomial(w, rest...) * w + V(c0);
}

FL_HOST_DEVICE float accurate_exp(float x) { return ::expf(x); }
FL_HOST_DEVICE float accurate_expm1(float x) { return ::expm1f(x); }
FL_HOST_DEVICE float accurate_log1p(float x) { return ::log1pf(x); }
// GELU (approximate='none'), x / 2 * (1 + erf(x / sqrt(2))), through libm's or the GPU's erff;
// the vector form (primitives_vec.h) evaluates x * Phi(x) in one formula instead.
FL_HOST_DEVICE float accurate_gelu(float x) {
  return 0.5f * x * (1.0f + ::erff(x * float(0.70710678118654752440)));
}
FL_HOST_DEVICE float accurate_tanh(float x) { return ::tanhf(x); }

// tanh for results kept in bfloat16 or float16: on the GPU the hardware's tanh
// (tanh.approx.f32, one MUFU instruction, relative error below 2^-10.99, tanh(NaN) = NaN,
// tanh(+-inf) = +-1); on the host, libm's. Not for float32 results.
FL_HOST_DEVICE float half_precision_tanh(float x) {
#if defined(__CUDA_ARCH__)
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
  return t;
#else
  return ::tanhf(x);
#endif
}

}  // namespace act
}  // namespace fusedlinear
