// Elementwise activations as tiny functors, shared by the CUDA kernels and the CPU path.
//
// Each functor maps one float to one float, computes PyTorch's function (erf GELU; mish with
// softplus(x) = log1p(exp(x))) and gives what PyTorch gives for NaN and +-Inf. A model's
// activation chain is a composition of them (`Chain<...>`) in the order the Python model applies
// them; each formula is written once and compiled for host and device.
//
// Two families:
//   act::*          what the kernels run: algebraically identical rewrites that need fewer and
//                   cheaper special functions (docs/PERFORMANCE.md has the measurements);
//   act::literal::* PyTorch's own formulas, op for op: the baseline that tests and the kernel
//                   benchmark compare the rewrites against.
// On the GPU, exp and division use the hardware approximations (__expf: a few ulp for the
// arguments that occur here; __fdividef: 2 ulp); on the host, libm expf and exact division.
#pragma once

#if defined(__CUDACC__)
#define FL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FL_HOST_DEVICE inline
#endif

#include <math.h>

namespace fusedlinear {
namespace act {

FL_HOST_DEVICE float fast_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return ::expf(x);
#endif
}

// a / b for |b| < 2^126 (callers guarantee it or accept 0 beyond, see each use).
FL_HOST_DEVICE float fast_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdividef(a, b);
#else
  return a / b;
#endif
}

// torch.sigmoid(x) * x = x / (1 + exp(-x)). For x < -87 the denominator passes 2^126 and the
// GPU's division gives 0 where the true value is below 1e-35 in magnitude; x = -inf gives
// -inf / inf = NaN, as PyTorch's 0 * -inf does.
struct Swish {
  FL_HOST_DEVICE float operator()(float x) const { return fast_div(x, 1.0f + fast_exp(-x)); }
};

// torch.tanh
struct Tanh {
  FL_HOST_DEVICE float operator()(float x) const { return ::tanhf(x); }
};

// F.gelu(x) with approximate='none' (PyTorch's default): 0.5 * x * (1 + erf(x / sqrt(2))).
struct GeluErf {
  FL_HOST_DEVICE float operator()(float x) const {
    constexpr float kInvSqrt2 = 0.70710678118654752440f;
    return 0.5f * x * (1.0f + ::erff(x * kInvSqrt2));
  }
};

// torch.tanh with one exponential and one division: sign(x) * (1 - 2 / (exp(2|x|) + 1)), and
// for |x| < 0.125, where that form loses relative accuracy, the odd Taylor series to x^7
// (truncation below 2e-10 relative). Relative error about 1e-6 at |x| = 0.125, less above.
struct TanhExp {
  FL_HOST_DEVICE float operator()(float x) const {
    const float ax = ::fabsf(x);
    const float x2 = x * x;
    const float series = x + x * x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315)));
    const float far = ::copysignf(1.0f - fast_div(2.0f, fast_exp(2.0f * ax) + 1.0f), x);
    return ax < 0.125f ? series : far;
  }
};

// F.gelu(x) (erf form) with erf by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7):
// for z = |x| / sqrt(2), erf(z) = 1 - q(t) exp(-z^2), t = 1 / (1 + p z). Then
// 1 + erf(x / sqrt 2) is 2 - q e^(-z^2) for x >= 0 and q e^(-z^2) for x < 0 (no
// cancellation), so the result is within ~5e-7 relative for x >= -1. Below -1 the factor
// gets small and the absolute error would dominate: libm erff there.
struct GeluErfPoly {
  FL_HOST_DEVICE float operator()(float x) const {
    if (x < -1.0f) return GeluErf{}(x);
    constexpr float kInvSqrt2 = 0.70710678118654752440f;
    const float z = ::fabsf(x) * kInvSqrt2;
    const float t = fast_div(1.0f, 1.0f + 0.3275911f * z);
    const float q =
        t * (0.254829592f +
             t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    const float tail = q * fast_exp(-z * z);  // 1 - erf(z)
    return 0.5f * x * (x >= 0.0f ? 2.0f - tail : tail);
  }
};

// F.hardtanh(x, -1, 1). Comparisons, not fminf/fmaxf, so NaN stays NaN as in PyTorch's clamp.
struct Hardtanh {
  FL_HOST_DEVICE float operator()(float x) const {
    constexpr float kMin = -1.0f, kMax = 1.0f;
    return x < kMin ? kMin : (x > kMax ? kMax : x);
  }
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

}  // namespace literal

// Chain<F, G, H>{}(x) == H(G(F(x))): the functors applied left to right.
template <class... Fs>
struct Chain;

template <>
struct Chain<> {
  FL_HOST_DEVICE float operator()(float x) const { return x; }
};

template <class First, class... Rest>
struct Chain<First, Rest...> {
  FL_HOST_DEVICE float operator()(float x) const { return Chain<Rest...>{}(First{}(x)); }
};

}  // namespace act
}  // namespace fusedlinear
