// Elementwise activations as tiny functors, shared by the CUDA kernels and the CPU path.
//
// Each functor maps a value to a value, computes PyTorch's function (erf GELU; mish with
// softplus(x) = log1p(exp(x))) and gives what PyTorch gives for NaN and +-Inf. A model's
// activation chain is a composition of them (`Chain<...>`) in the order the Python model applies
// them; each formula is written once and compiled for host and device.
//
// The value is a float, or on the CPU a SIMD vector of floats (at::vec::Vectorized<float>): the
// functors that the kernels run are templates over the value type V and reach the special
// functions only through the primitives below (fast_exp, fast_div, ...). Each primitive has its
// float form here and its vector form in activations_vec.h (CPU only: this header stays free of
// torch so that the CUDA kernels compile without it). For V = float every functor is the same
// code as a plain float functor.
//
// Two families:
//   act::*          what the kernels run: algebraically identical rewrites that need fewer and
//                   cheaper special functions (docs/PERFORMANCE.md has the measurements); one
//                   (GeluErfOnUnitInterval) is valid on a stated domain only;
//   act::literal::* PyTorch's own formulas, op for op: the baseline that tests and the kernel
//                   benchmark compare the rewrites against.
// On the GPU, exp and division use the hardware approximations (__expf: a few ulp for the
// arguments that occur here; a * rcp.approx(b): ~2 ulp), and results kept in 16 bits the
// hardware tanh; on the host, libm and exact division.
#pragma once

#if defined(__CUDACC__)
#define FL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FL_HOST_DEVICE inline
#endif

#include <math.h>

namespace fusedlinear {
namespace act {

// The primitives for other value types (SIMD vectors: activations_vec.h specializes these).
// Declared here so that the functors' unqualified calls find them whenever they are
// instantiated; a float argument takes the float overloads below.
template <class V>
V fast_exp(V x);
template <class V>
V fast_div(V a, V b);
template <class V>
V negate(V x);
template <class V>
V min_or_bound(V x, float bound);
template <class V>
V clamp_keep_nan(V x, float lo, float hi);
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

// x where x >= bound, otherwise otherwise(): for a float a branch (otherwise() is evaluated only
// below the bound); for a vector, both and a blend, lane by lane. NaN is below any bound. (The
// vector form is an overload that the call finds through its lambda, whose type belongs to this
// namespace.)
template <class F>
FL_HOST_DEVICE float x_where_at_least(float bound, float x, F otherwise) {
  if (x >= bound) return x;
  return otherwise();
}

// fminf(x, bound): the smaller of the two, and `bound` when x is NaN.
FL_HOST_DEVICE float min_or_bound(float x, float bound) { return fminf(x, bound); }

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

// tanh within a few ulp: libm's tanhf on the host, CUDA's tanhf (~2 ulp) on the GPU.
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

namespace literal {

// torch.sigmoid(x) * x, as PyTorch computes it.
struct Swish {
  FL_HOST_DEVICE float operator()(float x) const {
    const float sigmoid = 1.0f / (1.0f + ::expf(-x));
    return sigmoid * x;
  }
};

// F.mish, as PyTorch writes it.
struct Mish {
  FL_HOST_DEVICE float operator()(float x) const { return x * ::tanhf(::log1pf(::expf(x))); }
};

// F.gelu(x), approximate='none', as PyTorch writes it.
struct GeluErf {
  FL_HOST_DEVICE float operator()(float x) const {
    constexpr float kInvSqrt2 = 0.70710678118654752440f;
    return 0.5f * x * (1.0f + ::erff(x * kInvSqrt2));
  }
};

}  // namespace literal

// torch.sigmoid(x) * x = x / (1 + exp(-x)). For x < -87 the denominator passes 2^126 and the
// GPU's division gives 0 where the true value is below 1e-35 in magnitude; x = -inf gives
// -inf * 0 = NaN, as PyTorch's 0 * -inf does.
struct Swish {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return fast_div(x, V(1.0f) + fast_exp(negate(x)));
  }
};

// torch.tanh (accurate_tanh: libm's; on the GPU, CUDA's tanhf: ~2 ulp).
struct Tanh {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return accurate_tanh(x);
  }
};

// torch.tanh for results kept in bfloat16 or float16 (half_precision_tanh: the GPU's hardware
// tanh). Not for float32 results.
struct TanhHalfPrecision {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return half_precision_tanh(x);
  }
};

// F.gelu(x) with approximate='none' on [-1, 1], from q = Q(x^2): erf is odd, so
//   gelu(x) = x * (1/2 + x * Q(x^2)),  Q(w) = erf(sqrt(w/2)) / (2 sqrt(w)),
// and Q, smooth on [0, 1], is fitted by a polynomial (the two functors below). Keeps the sign
// of -0; NaN gives NaN.
template <class V>
FL_HOST_DEVICE V gelu_from_q(V x, V q) {
  return x * (x * q + V(0.5f));
}

// F.gelu(x) with approximate='none', for x in [-1, 1] only: where it follows Tanh, as in
// swish_chain. A polynomial instead of erff (8 instructions against erff's ~20 and one MUFU op,
// and no branch): Q of degree 5 (relative error 7e-10 in float64; in float32 the result is
// within 1.4 ulp of 0.84 on [-1, 1]). Outside [-1, 1] the polynomial is wrong: compose
// literal::GeluErf there instead.
struct GeluErfOnUnitInterval {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    const V q = polynomial(x * x, 3.989422917e-01f, -6.649035960e-02f, 9.973322973e-03f,
                           -1.186329988e-03f, 1.134863633e-04f, -7.654205547e-06f);
    return gelu_from_q(x, q);
  }
};

// The same for results kept in bfloat16 or float16: Q of degree 3 (relative error 4.4e-6, under
// 0.02 of float16's last place; two instructions fewer). Not for float32 results.
struct GeluErfOnUnitIntervalHalfPrecision {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    const V q =
        polynomial(x * x, 3.989414871e-01f, -6.646524370e-02f, 9.847345762e-03f, -9.795246879e-04f);
    return gelu_from_q(x, q);
  }
};

// F.hardtanh(x, -1, 1), NaN kept as in PyTorch.
struct Hardtanh {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return clamp_keep_nan(x, -1.0f, 1.0f);
  }
};

// mish's factor tanh(softplus(x)) from e = exp(x), with one division instead of log1p and
// tanh: tanh(log(1 + e)) = ((1+e)^2 - 1) / ((1+e)^2 + 1) = n / (n + 2) with n = e * (e + 2).
// Needs e below ~1.8e19 (n finite); callers bound x.
template <class V>
FL_HOST_DEVICE V tanh_softplus_from_exp(V e) {
  const V n = e * (e + V(2.0f));
  return fast_div(n, n + V(2.0f));
}

// F.mish(x) = x * tanh(log1p(exp(x))), with one exponential and one division instead of
// exp, log1p and tanh (tanh_softplus_from_exp). For x >= 20 the factor rounds to 1 in float
// (and n would overflow), so the result is x, as in PyTorch. x = -inf gives -inf * 0 = NaN, as
// in PyTorch.
struct Mish {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x_where_at_least(20.0f, x, [&] { return x * tanh_softplus_from_exp(fast_exp(x)); });
  }
};

// F.mish for results kept in bfloat16 or float16: Mish's n / (n + 2) with exp's argument
// clamped at 9.5 instead of the x >= 20 branch, measured faster at the 16-bit kernels' launch
// shape (docs/PERFORMANCE.md, row 18). From 9.5 on n >= e^19, so n / (n + 2) is within 1.2e-8
// of 1 and rounds to 1 in float, as from 20; on the GPU the hardware reciprocal leaves x * ...
// up to a few float ulp off x there, invisible after rounding to 16 bits: not for float32
// results. min_or_bound(NaN, 9.5) is 9.5, so NaN gives x * ... = NaN; -inf gives -inf * 0 = NaN
// and +inf gives +inf, as in PyTorch.
struct MishHalfPrecision {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x * tanh_softplus_from_exp(fast_exp(min_or_bound(x, 9.5f)));
  }
};

// Chain<F, G, H>{}(x) == H(G(F(x))): the functors applied left to right.
template <class... Fs>
struct Chain;

template <>
struct Chain<> {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x;
  }
};

template <class First, class... Rest>
struct Chain<First, Rest...> {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return Chain<Rest...>{}(First{}(x));
  }
};

}  // namespace act
}  // namespace fusedlinear
