// Splitting a float32 value into two bfloat16 values, v ~= hi + lo, or three, v ~= hi + mid + lo:
// one definition for the CPU path and the CUDA kernel (bf16_split.cu), so both give the same bits.
//
//   hi = bfloat16(v), rounded to nearest even; lo = bfloat16(v - hi).
//
// v - hi is exact in float32 (hi is v to 8 significant bits, within a factor of 2 of v), so the
// only loss is lo's own rounding: |v - (hi + lo)| <= 2^-9 |v - hi| <= 2^-17 |v| for normal v, and
// at most 2^-134 (half of bfloat16's smallest subnormal) below ~2^-117, where lo would need bits
// that bfloat16 does not have. Products of such parts are exact in float32 (8 x 8 significant
// bits), which is what makes three bf16 GEMMs with float32 accumulation (lo_x hi_w + hi_x lo_w +
// hi_x hi_w) accurate to about float32's level.
//
// Special values: +-inf and NaN keep hi = v and lo = 0; a finite v that would round to infinity
// (|v| >= 0x1.fefp127) keeps the largest finite bfloat16 in hi and the rest in lo. Must not be
// compiled with flush-to-zero (-ftz=true): v - hi can be subnormal.
//
// Non-finite operands in the split products (eager_sum_if_not_finite, below): every part of x
// meets two parts of W and the other way round, so no placement of inf into the parts gives eager's
// result in every case (x = inf, w = 1: x_hi w_lo = inf * 0 = NaN; x = 1, w = inf: x_lo w_hi =
// 0 * inf = NaN, where eager gives inf). But a non-finite operand always makes its outputs'
// sums non-finite (x_hi w_hi holds its term, and inf or NaN stays in a sum), so a sum that comes
// out inf or NaN is formed again from x and W's parts, as eager's class of sum_k x_k w_k: NaN if a
// term is NaN (a NaN operand, inf * 0) or terms of +inf and -inf meet, else the sign of the
// infinite terms. Finite sums are left as they are (their bits do not change); a sum with no
// infinite term, whose finite products overflowed, stands.
#pragma once

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FL_SPLIT_HOST_DEVICE __host__ __device__ __forceinline__
// `inline` for the linker (the header is in many objects), `__noinline__` to keep it out of line.
#define FL_SPLIT_HOST_DEVICE_COLD inline __host__ __device__ __noinline__
#else
#define FL_SPLIT_HOST_DEVICE inline
#define FL_SPLIT_HOST_DEVICE_COLD inline
#endif

namespace fusedlinear {
namespace split {

FL_SPLIT_HOST_DEVICE uint32_t bits_of(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

FL_SPLIT_HOST_DEVICE float float_of(uint32_t bits) {
  float v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

// The bfloat16 bits of v rounded to nearest even (NaN stays a quiet NaN of the same sign), as
// PyTorch's and CUDA's float -> bfloat16 conversions round.
FL_SPLIT_HOST_DEVICE uint16_t to_bf16_bits(float v) {
  const uint32_t bits = bits_of(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x0040u);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The float32 value of bfloat16 bits (exact: bfloat16 is float32's top half).
FL_SPLIT_HOST_DEVICE float from_bf16_bits(uint16_t bits) { return float_of(uint32_t(bits) << 16); }

struct Bf16Pair {
  uint16_t hi, lo;  // bfloat16 bits
};

FL_SPLIT_HOST_DEVICE Bf16Pair split_bf16(float v) {
  const uint32_t magnitude = bits_of(v) & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return {to_bf16_bits(v), 0};  // +-inf, NaN
  uint16_t hi = to_bf16_bits(v);
  // Rounded up to infinity: keep the largest finite bfloat16 (v truncated) instead.
  if ((hi & 0x7fffu) == 0x7f80u) hi = uint16_t(bits_of(v) >> 16);
  return {hi, to_bf16_bits(v - from_bf16_bits(hi))};
}

struct Bf16Triple {
  uint16_t hi, mid, lo;  // bfloat16 bits
};

// The three-way split of bf16x6: hi and mid are split_bf16(v)'s hi and lo, and lo = bfloat16(v -
// hi - mid), where both subtractions are exact (as above, one level down). The parts hold 24
// significant bits between them, float32's: |v - (hi + mid + lo)| <= 2^-9 |v - hi - mid| <=
// 2^-26 |v| for normal v (at most 2^-134 below ~2^-108). +-inf and NaN keep mid = lo = 0.
FL_SPLIT_HOST_DEVICE Bf16Triple split_bf16_three(float v) {
  const Bf16Pair first = split_bf16(v);
  if (first.lo == 0) return {first.hi, 0, 0};  // nothing left (or too little); +-inf, NaN
  const float rest = (v - from_bf16_bits(first.hi)) - from_bf16_bits(first.lo);
  return {first.hi, first.lo, to_bf16_bits(rest)};
}

// The parts of v for a split into `parts` (1-3) values: split_bf16's hi and lo (lo = 0 for one
// part) and lo = 0, or split_bf16_three's. The CPU and CUDA splits both take their bits from here.
FL_SPLIT_HOST_DEVICE Bf16Triple split_into_parts(float v, int parts) {
  if (parts == 3) return split_bf16_three(v);
  const Bf16Pair pair = split_bf16(v);
  return {pair.hi, parts == 2 ? pair.lo : uint16_t(0), 0};
}

FL_SPLIT_HOST_DEVICE bool is_finite(float v) { return (bits_of(v) & 0x7fffffffu) < 0x7f800000u; }

// What a split-mode sum reads, for forming a non-finite sum again as eager would: x as given to
// the split (float32) and W's bfloat16 parts (2: hi, lo; 3: hi, mid, lo), part p's value of
// output n at k at w[p][n * w_n_stride + k * w_k_stride]. With fewer than two parts (no split, or
// the bf16 mode's one product, which carries its terms' classes itself) nothing is restored.
struct SplitOperands {
  const float* x = nullptr;  // [rows][k], row-major
  const uint16_t* w[3] = {nullptr, nullptr, nullptr};
  int parts = 0;
  int64_t k = 0;
  int64_t w_n_stride = 0, w_k_stride = 1;
};

// x [rows][k] and `parts` parts of W (bfloat16 bits), W [n][k] laid out output-major ([n][k]
// row-major) or input-major (the transpose of a row-major [k][n]).
inline SplitOperands split_operands(const float* x, const void* const* w, int parts, int64_t k,
                                    int64_t n, bool w_input_major) {
  SplitOperands s;
  s.x = x;
  for (int p = 0; p < parts && p < 3; ++p) s.w[p] = static_cast<const uint16_t*>(w[p]);
  s.parts = parts;
  s.k = k;
  s.w_n_stride = w_input_major ? 1 : k;
  s.w_k_stride = w_input_major ? n : 1;
  return s;
}

// The value W's parts hold at `index`: hi itself where it is inf or NaN (the parts after it are
// 0), else their sum (v to 16 or 24 bits: the sign, whether it is 0, and its size for products
// that overflow).
FL_SPLIT_HOST_DEVICE float joined_parts(const SplitOperands& s, int64_t index) {
  const float hi = from_bf16_bits(s.w[0][index]);
  if (!is_finite(hi)) return hi;
  float v = hi + from_bf16_bits(s.w[1][index]);
  if (s.parts == 3) v += from_bf16_bits(s.w[2][index]);
  return v;
}

// Eager's class of sum_k x[row, k] w[n, k] given that it is not finite (a term is NaN or
// infinite): NaN, +inf or -inf; `total` where no term is (the finite products' sum overflowed).
// Stops at the first term that settles it as NaN. Out of line: the kernels' sums take it only for
// inf or NaN.
FL_SPLIT_HOST_DEVICE_COLD float eager_sum_of_terms(const SplitOperands& s, int64_t row, int64_t n,
                                                   float total) {
  const float* x = s.x + row * s.k;
  bool nan = false, positive = false, negative = false;
  for (int64_t k = 0; k < s.k && !nan; ++k) {
    const float term = x[k] * joined_parts(s, n * s.w_n_stride + k * s.w_k_stride);
    const uint32_t magnitude = bits_of(term) & 0x7fffffffu;
    if (magnitude > 0x7f800000u) {
      nan = true;
    } else if (magnitude == 0x7f800000u) {
      if (bits_of(term) >> 31) {
        negative = true;
      } else {
        positive = true;
      }
      nan = positive && negative;  // inf - inf
    }
  }
  if (nan) return float_of(0x7fc00000u);
  if (positive) return float_of(0x7f800000u);
  if (negative) return float_of(0xff800000u);
  return total;
}

// A split-mode sum of output (row, n) as eager's: `total` where it is finite (bit for bit), else
// eager_sum_of_terms.
FL_SPLIT_HOST_DEVICE float eager_sum_if_not_finite(const SplitOperands& s, int64_t row, int64_t n,
                                                   float total) {
  if (s.parts < 2 || is_finite(total)) return total;
  return eager_sum_of_terms(s, row, n, total);
}

}  // namespace split
}  // namespace fusedlinear
