// Elementwise activations as tiny functors, shared by the CUDA kernels and the CPU path.
//
// Each functor maps one float to one float, computes PyTorch's function (erf GELU; mish with
// softplus(x) = log1p(exp(x))) and gives what PyTorch gives for NaN and +-Inf. A model's
// activation chain is a composition of them (`Chain<...>`) in the order the Python model applies
// them; each formula is written once and compiled for host and device.
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

#include <type_traits>

// Fully unrolled loops in GPU code (the trip counts are template constants); nothing in host
// code, whose compilers do not know the pragma.
#if defined(__CUDA_ARCH__)
#define FL_UNROLL _Pragma("unroll")
#else
#define FL_UNROLL
#endif

namespace fusedlinear {
namespace act {

FL_HOST_DEVICE float fast_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return ::expf(x);
#endif
}

// 1/d: on the GPU the hardware reciprocal (rcp.approx.ftz, 1 ulp, one MUFU op; 0 for
// |d| > 2^126), on the host exact.
FL_HOST_DEVICE float reciprocal(float d) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return r;
#else
  return 1.0f / d;
#endif
}

// a / b as a * (1/b) with the hardware reciprocal (one MUFU op and one multiply, without
// __fdividef's range checks). For |b| > 2^126 the reciprocal flushes to 0, so the result is 0
// (and NaN for a = +-inf): callers say why that is right where they use it. On the host, a / b.
FL_HOST_DEVICE float fast_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return a * reciprocal(b);
#else
  return a / b;
#endif
}

// 1/d[k] for N values with one reciprocal between them (Montgomery's trick): the running
// products p_k = d_0 ... d_k, one reciprocal of p_(N-1), then from the last value back
// 1/d_k = p_(k-1) / p_k and 1/p_(k-1) = d_k / p_k. 3(N - 1) multiplies and one MUFU op instead
// of N MUFU ops; each result within ~N ulp. The product of all N must be a normal float (callers
// bound d). On the host, N exact divisions.
template <int N>
FL_HOST_DEVICE void reciprocals(const float (&d)[N], float (&r)[N]) {
#if defined(__CUDA_ARCH__)
  float prefix[N];
  prefix[0] = d[0];
  FL_UNROLL
  for (int k = 1; k < N; ++k) prefix[k] = prefix[k - 1] * d[k];
  float inverse = reciprocal(prefix[N - 1]);  // 1 / p_k, k from N - 1 down
  FL_UNROLL
  for (int k = N - 1; k > 0; --k) {
    r[k] = inverse * prefix[k - 1];
    inverse *= d[k];
  }
  r[0] = inverse;
#else
  for (int k = 0; k < N; ++k) r[k] = 1.0f / d[k];
#endif
}

// c0 + w (c1 + w (c2 + ...)): Horner's rule, coefficients from the constant term up; nvcc
// contracts each step into one FMA.
FL_HOST_DEVICE float polynomial(float /*w*/, float c0) { return c0; }
template <class... Cs>
FL_HOST_DEVICE float polynomial(float w, float c0, Cs... rest) {
  return polynomial(w, rest...) * w + c0;
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
  FL_HOST_DEVICE float operator()(float x) const { return fast_div(x, 1.0f + fast_exp(-x)); }
};

// torch.tanh, libm's (on the GPU, CUDA's tanhf: ~2 ulp).
struct Tanh {
  FL_HOST_DEVICE float operator()(float x) const { return ::tanhf(x); }
};

// torch.tanh for results kept in bfloat16 or float16: on the GPU the hardware's tanh
// (tanh.approx.f32, one MUFU instruction, relative error below 2^-10.99, tanh(NaN) = NaN,
// tanh(+-inf) = +-1); on the host, libm's. Not for float32 results.
struct TanhHalfPrecision {
  FL_HOST_DEVICE float operator()(float x) const {
#if defined(__CUDA_ARCH__)
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
    return t;
#else
    return ::tanhf(x);
#endif
  }
};

// F.gelu(x) with approximate='none' on [-1, 1], from q = Q(x^2): erf is odd, so
//   gelu(x) = x * (1/2 + x * Q(x^2)),  Q(w) = erf(sqrt(w/2)) / (2 sqrt(w)),
// and Q, smooth on [0, 1], is fitted by a polynomial (the two functors below). Keeps the sign
// of -0; NaN gives NaN.
FL_HOST_DEVICE float gelu_from_q(float x, float q) { return x * (x * q + 0.5f); }

// F.gelu(x) with approximate='none', for x in [-1, 1] only: where it follows Tanh, as in
// swish_chain. A polynomial instead of erff (8 instructions against erff's ~20 and one MUFU op,
// and no branch): Q of degree 5 (relative error 7e-10 in float64; in float32 the result is
// within 1.4 ulp of 0.84 on [-1, 1]). Outside [-1, 1] the polynomial is wrong: compose
// literal::GeluErf there instead.
struct GeluErfOnUnitInterval {
  FL_HOST_DEVICE float operator()(float x) const {
    const float q = polynomial(x * x, 3.989422917e-01f, -6.649035960e-02f, 9.973322973e-03f,
                               -1.186329988e-03f, 1.134863633e-04f, -7.654205547e-06f);
    return gelu_from_q(x, q);
  }
};

// The same for results kept in bfloat16 or float16: Q of degree 3 (relative error 4.4e-6, under
// 0.02 of float16's last place; two instructions fewer). Not for float32 results.
struct GeluErfOnUnitIntervalHalfPrecision {
  FL_HOST_DEVICE float operator()(float x) const {
    const float q =
        polynomial(x * x, 3.989414871e-01f, -6.646524370e-02f, 9.847345762e-03f, -9.795246879e-04f);
    return gelu_from_q(x, q);
  }
};

// F.hardtanh(x, -1, 1), NaN kept as in PyTorch.
struct Hardtanh {
  FL_HOST_DEVICE float operator()(float x) const { return clamp_keep_nan(x, -1.0f, 1.0f); }
};

// F.mish(x) = x * tanh(log1p(exp(x))), with one exponential and one division instead of
// exp, log1p and tanh: for e = exp(x), tanh(log(1 + e)) = ((1+e)^2 - 1) / ((1+e)^2 + 1)
// = n / (n + 2) with n = e * (e + 2). For x >= 20 the factor rounds to 1 in float (and n
// would overflow), so the result is x, as in PyTorch. x = -inf gives -inf * 0 = NaN, as in
// PyTorch.
struct Mish {
  FL_HOST_DEVICE float operator()(float x) const {
    if (x >= 20.0f) return x;
    const float e = fast_exp(x);
    const float n = e * (e + 2.0f);
    return x * fast_div(n, n + 2.0f);
  }
};

// F.mish for results kept in bfloat16 or float16, kGroup values at a time sharing one
// reciprocal (`reciprocals`): mish_mish's 4 MUFU ops an element become 2 + 2 / kGroup, for
// 3 (kGroup - 1) / kGroup multiplies more. The same n / (n + 2) as Mish, with exp's argument
// clamped at 9.5 instead of the x >= 20 branch: from 9.5 on n >= e^19, so n / (n + 2) is within
// 1.2e-8 of 1 and rounds to 1 in float, as at 20; the clamp also bounds n + 2 below 2^28, so
// four of them multiply to a normal float. fminf(NaN, 9.5) is 9.5: a NaN keeps its group's
// product finite and gives NaN only where it stands (x * ...); -inf gives -inf * 0 = NaN and
// +inf gives +inf, as in PyTorch. The shared reciprocal is a few float ulp off 1/d, invisible
// after rounding to 16 bits: not for float32 results.
template <int kGroup>
struct MishHalfPrecision {
  static_assert(kGroup >= 1 && kGroup <= 4, "more than four n + 2 could overflow their product");
  FL_HOST_DEVICE static float n_of(float x) {
    const float e = fast_exp(fminf(x, 9.5f));
    return e * (e + 2.0f);
  }
  FL_HOST_DEVICE float operator()(float x) const {
    const float n = n_of(x);
    return x * (n * reciprocal(n + 2.0f));
  }
  template <int N>
  FL_HOST_DEVICE void operator()(float (&v)[N]) const {
    constexpr int kGrouped = N / kGroup * kGroup;
    FL_UNROLL
    for (int g = 0; g < kGrouped; g += kGroup) {
      float n[kGroup], d[kGroup], r[kGroup];
      FL_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        n[k] = n_of(v[g + k]);
        d[k] = n[k] + 2.0f;
      }
      reciprocals(d, r);
      FL_UNROLL
      for (int k = 0; k < kGroup; ++k) v[g + k] *= n[k] * r[k];
    }
    FL_UNROLL
    for (int k = kGrouped; k < N; ++k) v[k] = (*this)(v[k]);
  }
};

// apply(f, v): f on each of v's N values, in place. A functor that does better with several
// values at once (MishHalfPrecision) takes the whole array; the others, one value at a time.
template <class F, int N>
FL_HOST_DEVICE void apply(const F& f, float (&v)[N]) {
  if constexpr (std::is_invocable_v<const F&, float(&)[N]>) {
    f(v);
  } else {
    FL_UNROLL
    for (int k = 0; k < N; ++k) v[k] = f(v[k]);
  }
}

// Chain<F, G, H>{}(x) == H(G(F(x))): the functors applied left to right, to one value or, each
// in turn, to an array of them (`apply`).
template <class... Fs>
struct Chain;

template <>
struct Chain<> {
  FL_HOST_DEVICE float operator()(float x) const { return x; }
  template <int N>
  FL_HOST_DEVICE void operator()(float (&)[N]) const {}
};

template <class First, class... Rest>
struct Chain<First, Rest...> {
  FL_HOST_DEVICE float operator()(float x) const { return Chain<Rest...>{}(First{}(x)); }
  template <int N>
  FL_HOST_DEVICE void operator()(float (&v)[N]) const {
    apply(First{}, v);
    Chain<Rest...>{}(v);
  }
};

}  // namespace act
}  // namespace fusedlinear
