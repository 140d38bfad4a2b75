// The activation vocabulary: each of torch.nn.functional's one-tensor pointwise activations (and
// add/sub/mul/div by a number or a per-feature parameter, and square) as a tiny functor, shared by
// the CUDA kernels and the CPU loops. A model's chain is their composition (chain.h).
//
// Each functor
//   - maps a value to a value: `V operator()(V x) const`, V a float or, on the CPU, a SIMD vector
//     of floats (primitives.h and primitives_vec.h); the column functors (AddParam, ...) take the
//     element's per-feature term too: `V operator()(V x, V term) const`;
//   - computes PyTorch's definition, with its NaN and +-inf behaviour;
//   - carries its arguments as its data members, in PyTorch's order, initialised to PyTorch's
//     defaults, and names them in kArgs (the spec parser and printer read both);
//   - knows its float64 form, `reference`, written from PyTorch's documented formula (the tests'
//     and `compare`'s reference), and its eager libtorch form, `eager`: a template whose libtorch
//     calls are unqualified, found in namespace at (a torch::Tensor's own) when a host file that
//     includes torch instantiates it; the kernels never do.
// Optional traits: `Half`, a cheaper functor for results kept in 16 bits (chain.h picks it where
// the chain allows it); kKeepsErrors, an error of its argument at most ~1.1 times as large in its
// result, absolute and relative, for arguments from -1 up (so that a Half form before it stays
// within a 16-bit rounding step, chain.h); kOutputInUnitInterval, results always in [-1, 1] (so
// that a following GELU may take the polynomial GeluOnUnitInterval, chain.h);
// kArgsWrittenWhenNotDefault, the canonical spec writes the bare name when every argument is its
// default (chain_spec.h); kMemoryBound, a few instructions a value, so that a loop of it alone
// waits on memory, not on the core (the CPU loop stages the stores of a chain of it alone,
// epilogue_loop.h). Not on the per-feature arithmetic: staged, it measured slower at wide rows
// than stored directly.
#pragma once

#include <cmath>

#include "kernels/math/primitives.h"

namespace fusedlinear {
namespace act {

// An argument of a functor: its name (PyTorch's keyword) and default; `required` where PyTorch
// has none.
struct Arg {
  const char* name;
  float default_value;
  bool required = false;
};

// clamp_keep_nan's float64 form, for the functors' references: NaN stays NaN.
inline double clamp_reference(double x, double lo, double hi) {
  return std::isnan(x) ? x : std::fmin(std::fmax(x, lo), hi);
}

// --- rectifiers and clamps ----------------------------------------------------------------------

// torch.relu: max(x, 0); NaN stays NaN.
struct Relu {
  static constexpr const char* kName = "relu";
  static constexpr bool kKeepsErrors = true;
  static constexpr bool kMemoryBound = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return at_least_keep_nan(x, 0.0f);
  }
  static double reference(double x) { return x < 0 ? 0.0 : x; }
  template <class T>
  static T eager(const T& x) {
    return relu(x);
  }
};

// F.relu6: hardtanh(x, 0, 6).
struct Relu6 {
  static constexpr const char* kName = "relu6";
  static constexpr bool kKeepsErrors = true;
  static constexpr bool kMemoryBound = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return clamp_keep_nan(x, 0.0f, 6.0f);
  }
  static double reference(double x) { return clamp_reference(x, 0.0, 6.0); }
  template <class T>
  static T eager(const T& x) {
    return hardtanh(x, 0, 6);
  }
};

// F.leaky_relu: x if x > 0, else negative_slope * x.
struct LeakyRelu {
  static constexpr const char* kName = "leaky_relu";
  static constexpr bool kMemoryBound = true;
  static constexpr Arg kArgs[] = {{"negative_slope", 0.01f}};
  float negative_slope = 0.01f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return if_positive(x, x, x * V(negative_slope));
  }
  double reference(double x) const { return x > 0 ? x : x * double(negative_slope); }
  template <class T>
  T eager(const T& x) const {
    return leaky_relu(x, negative_slope);
  }
};

// F.hardtanh: min(max(x, min_val), max_val); NaN stays NaN.
struct Hardtanh {
  static constexpr const char* kName = "hardtanh";
  static constexpr bool kKeepsErrors = true;
  static constexpr bool kMemoryBound = true;
  static constexpr Arg kArgs[] = {{"min_val", -1.0f}, {"max_val", 1.0f}};
  float min_val = -1.0f, max_val = 1.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return clamp_keep_nan(x, min_val, max_val);
  }
  double reference(double x) const { return clamp_reference(x, min_val, max_val); }
  template <class T>
  T eager(const T& x) const {
    return hardtanh(x, min_val, max_val);
  }
};

// torch.clamp(x, min, max); NaN stays NaN. A spec gives at least one bound (the parser checks);
// the canonical spec writes both (-inf or inf for a side that is not bounded).
struct Clamp {
  static constexpr const char* kName = "clamp";
  static constexpr bool kKeepsErrors = true;
  static constexpr bool kMemoryBound = true;
  static constexpr Arg kArgs[] = {{"min", -INFINITY}, {"max", INFINITY}};
  float min = -INFINITY, max = INFINITY;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return clamp_keep_nan(x, min, max);
  }
  double reference(double x) const { return clamp_reference(x, min, max); }
  template <class T>
  T eager(const T& x) const {
    return clamp(x, min, max);
  }
};

// --- exponential units --------------------------------------------------------------------------

// F.elu: x if x > 0, else alpha * (exp(x) - 1), as expm1 (PyTorch's kernels use expm1).
struct Elu {
  static constexpr const char* kName = "elu";
  static constexpr Arg kArgs[] = {{"alpha", 1.0f}};
  float alpha = 1.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return if_positive(x, x, V(alpha) * accurate_expm1(x));
  }
  double reference(double x) const { return x > 0 ? x : double(alpha) * std::expm1(x); }
  template <class T>
  T eager(const T& x) const {
    return elu(x, alpha);
  }
};

// F.selu: scale * (x if x > 0, else alpha * (exp(x) - 1)), with PyTorch's constants.
struct Selu {
  static constexpr const char* kName = "selu";
  static constexpr double kAlpha = 1.6732632423543772848170429916717;
  static constexpr double kScale = 1.0507009873554804934193349852946;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return if_positive(x, V(float(kScale)) * x, V(float(kAlpha * kScale)) * accurate_expm1(x));
  }
  static double reference(double x) { return kScale * (x > 0 ? x : kAlpha * std::expm1(x)); }
  template <class T>
  static T eager(const T& x) {
    return selu(x);
  }
};

// F.celu: x if x > 0, else alpha * (exp(x / alpha) - 1) (PyTorch: x times 1 / alpha).
struct Celu {
  static constexpr const char* kName = "celu";
  static constexpr Arg kArgs[] = {{"alpha", 1.0f}};
  float alpha = 1.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return if_positive(x, x, V(alpha) * accurate_expm1(x * V(1.0f / alpha)));
  }
  double reference(double x) const {
    return x > 0 ? x : double(alpha) * std::expm1(x / double(alpha));
  }
  template <class T>
  T eager(const T& x) const {
    return celu(x, alpha);
  }
};

// --- sigmoid family -----------------------------------------------------------------------------

// torch.sigmoid: 1 / (1 + exp(-x)). For x < -87 the denominator passes 2^126 and the GPU's
// division gives 0 where the true value is below 1e-37; x = -inf gives 0, +inf 1.
struct Sigmoid {
  static constexpr const char* kName = "sigmoid";
  static constexpr bool kKeepsErrors = true;
  static constexpr bool kOutputInUnitInterval = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return fast_div(V(1.0f), V(1.0f) + fast_exp(negate(x)));
  }
  static double reference(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  template <class T>
  static T eager(const T& x) {
    return sigmoid(x);
  }
};

// F.silu: x * sigmoid(x) = x / (1 + exp(-x)). For x < -87 the GPU gives 0 where the true value
// is below 1e-35 in magnitude; x = -inf gives -inf * 0 = NaN, as PyTorch's does.
struct Silu {
  static constexpr const char* kName = "silu";
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return fast_div(x, V(1.0f) + fast_exp(negate(x)));
  }
  static double reference(double x) { return x / (1.0 + std::exp(-x)); }
  template <class T>
  static T eager(const T& x) {
    return silu(x);
  }
};

// x * sigmoid(beta * x) = x / (1 + exp(-beta * x)), PyTorch's `x * torch.sigmoid(beta * x)`
// (CLIP's QuickGELU: beta = 1.702). With beta = 1, `torch.sigmoid(x) * x` as reference model
// swish_chain writes it: silu's value bitwise (1 * x is x exactly), its eager form the two ops.
// As silu with beta * x for x: where beta * x = -inf the result is +-inf * 0 = NaN, as PyTorch's.
struct Swish {
  static constexpr const char* kName = "swish";
  static constexpr Arg kArgs[] = {{"beta", 1.0f}};
  // The canonical spec writes `swish` for beta = 1 (chain_spec.h), as specs did before beta.
  static constexpr bool kArgsWrittenWhenNotDefault = true;
  float beta = 1.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return fast_div(x, V(1.0f) + fast_exp(negate(x * V(beta))));
  }
  double reference(double x) const { return x / (1.0 + std::exp(-(double(beta) * x))); }
  template <class T>
  T eager(const T& x) const {
    // PyTorch multiplies a float32 tensor by a Python float in float32.
    if (beta == 1.0f) return sigmoid(x) * x;
    return sigmoid(x * beta) * x;
  }
};

// F.logsigmoid: min(x, 0) - log1p(exp(-|x|)), as PyTorch computes it (no overflow either side).
struct Logsigmoid {
  static constexpr const char* kName = "logsigmoid";
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return if_negative(x, x, V(0.0f)) - accurate_log1p(accurate_exp(negate(absolute(x))));
  }
  static double reference(double x) {
    return std::fmin(x, 0.0) - std::log1p(std::exp(-std::fabs(x)));
  }
  template <class T>
  static T eager(const T& x) {
    return log_sigmoid(x);
  }
};

// F.hardsigmoid: relu6(x + 3) / 6.
struct Hardsigmoid {
  static constexpr const char* kName = "hardsigmoid";
  static constexpr bool kMemoryBound = true;
  static constexpr bool kOutputInUnitInterval = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return clamp_keep_nan(x + V(3.0f), 0.0f, 6.0f) * V(1.0f / 6.0f);
  }
  static double reference(double x) { return clamp_reference(x + 3.0, 0.0, 6.0) / 6.0; }
  template <class T>
  static T eager(const T& x) {
    return hardsigmoid(x);
  }
};

// F.hardswish: x * relu6(x + 3) / 6; -inf gives -inf * 0 = NaN, as PyTorch's does.
struct Hardswish {
  static constexpr const char* kName = "hardswish";
  static constexpr bool kMemoryBound = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x * clamp_keep_nan(x + V(3.0f), 0.0f, 6.0f) * V(1.0f / 6.0f);
  }
  static double reference(double x) { return x * clamp_reference(x + 3.0, 0.0, 6.0) / 6.0; }
  template <class T>
  static T eager(const T& x) {
    return hardswish(x);
  }
};

// --- tanh family --------------------------------------------------------------------------------

// torch.tanh (accurate_tanh: libm's; on the GPU, CUDA's tanhf: ~2 ulp).
struct TanhHalfPrecision;
struct Tanh {
  static constexpr const char* kName = "tanh";
  static constexpr bool kKeepsErrors = true;
  static constexpr bool kOutputInUnitInterval = true;
  using Half = TanhHalfPrecision;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return accurate_tanh(x);
  }
  static double reference(double x) { return std::tanh(x); }
  template <class T>
  static T eager(const T& x) {
    return tanh(x);
  }
};

// torch.tanh for results kept in bfloat16 or float16 (half_precision_tanh: the GPU's hardware
// tanh). Not for float32 results.
struct TanhHalfPrecision {
  static constexpr bool kOutputInUnitInterval = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return half_precision_tanh(x);
  }
};

// F.softsign: x / (1 + |x|); +-inf gives inf / inf = NaN, as PyTorch's does.
struct Softsign {
  static constexpr const char* kName = "softsign";
  static constexpr bool kKeepsErrors = true;
  static constexpr bool kOutputInUnitInterval = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    // IEEE division: the reciprocal of fast_div flushes for |x| > 2^126, where softsign is 1.
    return x / (V(1.0f) + absolute(x));
  }
  static double reference(double x) { return x / (1.0 + std::fabs(x)); }
  template <class T>
  static T eager(const T& x) {
    return x / (x.abs() + 1);
  }
};

// F.tanhshrink: x - tanh(x).
struct Tanhshrink {
  static constexpr const char* kName = "tanhshrink";
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x - accurate_tanh(x);
  }
  static double reference(double x) { return x - std::tanh(x); }
  template <class T>
  static T eager(const T& x) {
    return x - x.tanh();
  }
};

// F.softplus: x where beta * x > threshold, else log1p(exp(beta * x)) / beta.
struct Softplus {
  static constexpr const char* kName = "softplus";
  static constexpr Arg kArgs[] = {{"beta", 1.0f}, {"threshold", 20.0f}};
  float beta = 1.0f, threshold = 20.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    const V scaled = x * V(beta);
    return where_above(scaled, threshold, x, [&]() FL_INLINE_LAMBDA {
      return fast_div(accurate_log1p(accurate_exp(scaled)), V(beta));
    });
  }
  double reference(double x) const {
    const double scaled = x * double(beta);
    return scaled > double(threshold) ? x : std::log1p(std::exp(scaled)) / double(beta);
  }
  template <class T>
  T eager(const T& x) const {
    return softplus(x, beta, threshold);
  }
};

// mish's factor tanh(softplus(x)) from e = exp(x), with one division instead of log1p and tanh:
// tanh(log(1 + e)) = ((1+e)^2 - 1) / ((1+e)^2 + 1) = n / (n + 2) with n = e * (e + 2). Needs e
// below ~1.8e19 (n finite); callers bound x.
template <class V>
FL_HOST_DEVICE V tanh_softplus_from_exp(V e) {
  const V n = e * (e + V(2.0f));
  return fast_div(n, n + V(2.0f));
}

// F.mish: x * tanh(log1p(exp(x))), with one exponential and one division instead of exp, log1p
// and tanh (tanh_softplus_from_exp). For x >= 20 the factor rounds to 1 in float (and n would
// overflow), so the result is x, as in PyTorch. x = -inf gives -inf * 0 = NaN, as in PyTorch.
struct MishHalfPrecision;
struct Mish {
  static constexpr const char* kName = "mish";
  static constexpr bool kKeepsErrors = true;
  using Half = MishHalfPrecision;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x_where_at_least(
        20.0f, x, [&]() FL_INLINE_LAMBDA { return x * tanh_softplus_from_exp(fast_exp(x)); });
  }
  static double reference(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
  template <class T>
  static T eager(const T& x) {
    return mish(x);
  }
};

// F.mish for results kept in bfloat16 or float16: Mish's n / (n + 2) with exp's argument clamped
// at 9.5 instead of the x >= 20 branch, measured faster at the 16-bit kernels' launch shape. From
// 9.5 on n >= e^19, so n / (n + 2) is within 1.2e-8 of 1 and rounds to 1 in float, as from 20; on
// the GPU the hardware reciprocal leaves x * ... up to a few float ulp off x there, invisible
// after rounding to 16 bits: not for float32 results. min_or_bound(NaN, 9.5) is 9.5, so NaN gives
// x * ... = NaN; -inf gives -inf * 0 = NaN and +inf gives +inf, as in PyTorch.
struct MishHalfPrecision {
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x * tanh_softplus_from_exp(fast_exp(min_or_bound(x, 9.5f)));
  }
};

// --- GELU ---------------------------------------------------------------------------------------

// F.gelu(x), approximate='none': x / 2 * (1 + erf(x / sqrt(2))). -inf gives NaN, as PyTorch's.
struct GeluOnUnitInterval;
struct Gelu {
  static constexpr const char* kName = "gelu";
  static constexpr double kInvSqrt2 = 0.70710678118654752440;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return accurate_gelu(x);
  }
  static double reference(double x) { return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2)); }
  template <class T>
  static T eager(const T& x) {
    return gelu(x);  // approximate='none', F.gelu's default
  }
};

// F.gelu(x, approximate='tanh'): x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
struct GeluTanh {
  static constexpr const char* kName = "gelu";
  static constexpr const char* kChoice = "tanh";           // the spec's gelu(tanh)
  static constexpr double kBeta = 0.79788456080286535588;  // sqrt(2 / pi)
  static constexpr double kKappa = 0.044715;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    const V inner = V(float(kBeta)) * (x + V(float(kKappa)) * x * x * x);
    return V(0.5f) * x * (V(1.0f) + accurate_tanh(inner));
  }
  static double reference(double x) {
    return 0.5 * x * (1.0 + std::tanh(kBeta * (x + kKappa * x * x * x)));
  }
  template <class T>
  static T eager(const T& x) {
    return gelu(x, "tanh");
  }
};

// F.gelu(x) with approximate='none' for x in [-1, 1] only, from q = Q(x^2): erf is odd, so
//   gelu(x) = x * (1/2 + x * Q(x^2)),  Q(w) = erf(sqrt(w/2)) / (2 sqrt(w)),
// and Q, smooth on [0, 1], is fitted by a polynomial of degree 5 (relative error 7e-10 in
// float64; the float result within 1.4 ulp of 0.84 on [-1, 1]): 8 instructions against erff's ~20
// and one MUFU op, and no branch. Keeps the sign of -0; NaN gives NaN. Wrong outside [-1, 1]: only
// chain.h's rewrite uses it, where the functor before GELU proves the range (its
// kOutputInUnitInterval).
template <class V>
FL_HOST_DEVICE V gelu_from_q(V x, V q) {
  return x * (x * q + V(0.5f));
}
struct GeluOnUnitIntervalHalfPrecision;
struct GeluOnUnitInterval {
  using Half = GeluOnUnitIntervalHalfPrecision;
  static constexpr bool kRewriteOnly = true;  // a declaration writes Gelu{} (chain.h refuses this)
  static constexpr bool kKeepsErrors = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    const V q = polynomial(x * x, 3.989422917e-01f, -6.649035960e-02f, 9.973322973e-03f,
                           -1.186329988e-03f, 1.134863633e-04f, -7.654205547e-06f);
    return gelu_from_q(x, q);
  }
};
// The same for results kept in bfloat16 or float16: Q of degree 3 (relative error 4.4e-6, under
// 0.02 of float16's last place; two instructions fewer). Not for float32 results.
struct GeluOnUnitIntervalHalfPrecision {
  static constexpr bool kRewriteOnly = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    const V q =
        polynomial(x * x, 3.989414871e-01f, -6.646524370e-02f, 9.847345762e-03f, -9.795246879e-04f);
    return gelu_from_q(x, q);
  }
};

// --- powers -------------------------------------------------------------------------------------

// torch.square: x * x, one rounding (PyTorch's pow(x, 2) is the same product); +-inf gives inf,
// NaN stays NaN.
struct Square {
  static constexpr const char* kName = "square";
  static constexpr bool kMemoryBound = true;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x * x;
  }
  static double reference(double x) { return x * x; }
  template <class T>
  static T eager(const T& x) {
    return square(x);
  }
};

// --- arithmetic with a number -------------------------------------------------------------------

// x + value, x - value, x * value, x / value (x / value by IEEE division: x * (1 / value) would
// round differently from PyTorch's).
struct AddScalar {
  static constexpr const char* kName = "add";
  static constexpr bool kMemoryBound = true;
  static constexpr Arg kArgs[] = {{"value", 0.0f, true}};
  float value = 0.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x + V(value);
  }
  double reference(double x) const { return x + double(value); }
  template <class T>
  T eager(const T& x) const {
    return x + value;
  }
};
struct SubScalar {
  static constexpr const char* kName = "sub";
  static constexpr bool kMemoryBound = true;
  static constexpr Arg kArgs[] = {{"value", 0.0f, true}};
  float value = 0.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x - V(value);
  }
  double reference(double x) const { return x - double(value); }
  template <class T>
  T eager(const T& x) const {
    return x - value;
  }
};
struct MulScalar {
  static constexpr const char* kName = "mul";
  static constexpr bool kMemoryBound = true;
  static constexpr Arg kArgs[] = {{"value", 1.0f, true}};
  float value = 1.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x * V(value);
  }
  double reference(double x) const { return x * double(value); }
  template <class T>
  T eager(const T& x) const {
    return x * value;
  }
};
struct DivScalar {
  static constexpr const char* kName = "div";
  static constexpr bool kMemoryBound = true;
  static constexpr Arg kArgs[] = {{"value", 1.0f, true}};
  float value = 1.0f;
  template <class V>
  FL_HOST_DEVICE V operator()(V x) const {
    return x / V(value);
  }
  double reference(double x) const { return x / double(value); }
  template <class T>
  T eager(const T& x) const {
    return x / value;
  }
};

// --- arithmetic with a parameter ----------------------------------------------------------------

// x + p, x - p, x * p, x / p for a parameter p of the model: a per-feature vector [out_features]
// (SwishChain's add_value) or a one-element tensor, named by its state-dict key. The kernels load
// each element's term (its column's value) once and pass it in; `key` is for the declaration and
// the spec only (the kernels' copies carry none).
struct AddParam {
  static constexpr const char* kName = "add";
  static constexpr bool kTakesColumnTerm = true;
  const char* key = nullptr;
  template <class V>
  FL_HOST_DEVICE V operator()(V x, V term) const {
    return x + term;
  }
  static double reference(double x, double term) { return x + term; }
  template <class T>
  static T eager(const T& x, const T& term) {
    return x + term;
  }
};
struct SubParam {
  static constexpr const char* kName = "sub";
  static constexpr bool kTakesColumnTerm = true;
  const char* key = nullptr;
  template <class V>
  FL_HOST_DEVICE V operator()(V x, V term) const {
    return x - term;
  }
  static double reference(double x, double term) { return x - term; }
  template <class T>
  static T eager(const T& x, const T& term) {
    return x - term;
  }
};
struct MulParam {
  static constexpr const char* kName = "mul";
  static constexpr bool kTakesColumnTerm = true;
  const char* key = nullptr;
  template <class V>
  FL_HOST_DEVICE V operator()(V x, V term) const {
    return x * term;
  }
  static double reference(double x, double term) { return x * term; }
  template <class T>
  static T eager(const T& x, const T& term) {
    return x * term;
  }
};
struct DivParam {
  static constexpr const char* kName = "div";
  static constexpr bool kTakesColumnTerm = true;
  const char* key = nullptr;
  template <class V>
  FL_HOST_DEVICE V operator()(V x, V term) const {
    return x / term;
  }
  static double reference(double x, double term) { return x / term; }
  template <class T>
  static T eager(const T& x, const T& term) {
    return x / term;
  }
};

// The vocabulary in one list, in the order the spec documentation gives it: X(Functor) for each.
// The run-time interpreter numbers its op codes by this list (program.h), the spec parser reads
// the names and arguments from it; a functor defined outside the library composes into compiled
// chains only (it is not in this list).
// clang-format off
#define FUSEDLINEAR_VOCABULARY(X)                                                         \
  X(Relu) X(Relu6) X(LeakyRelu) X(Elu) X(Selu) X(Celu) X(Gelu) X(GeluTanh) X(Silu)         \
  X(Swish) X(Mish) X(Sigmoid) X(Tanh) X(Hardtanh) X(Clamp) X(Hardsigmoid) X(Hardswish)     \
  X(Softplus) X(Softsign) X(Tanhshrink) X(Logsigmoid) X(Square)                            \
  X(AddScalar) X(SubScalar) X(MulScalar) X(DivScalar)                                      \
  X(AddParam) X(SubParam) X(MulParam) X(DivParam)
// clang-format on
// Functors the interpreter runs that no spec names: chain.h's rewrites.
#define FUSEDLINEAR_REWRITTEN(X) \
  X(GeluOnUnitInterval) X(TanhHalfPrecision) X(MishHalfPrecision) X(GeluOnUnitIntervalHalfPrecision)

}  // namespace act
}  // namespace fusedlinear
