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
#pragma once

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FL_SPLIT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FL_SPLIT_HOST_DEVICE inline
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

}  // namespace split
}  // namespace fusedlinear
