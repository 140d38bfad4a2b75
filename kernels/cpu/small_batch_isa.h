// The small-batch products' loop (small_batch.h), compiled once per instruction set by
// small_batch_avx2.cpp and small_batch_avx512.cpp, each with its set's flags and
// FUSEDLINEAR_CPU_ISA naming the namespace of its entry point. As for the epilogue's SIMD loops
// (epilogue_isa.h), all but the entry point has internal linkage and no header with inline
// functions is included, so no code built with these flags can stand in for another file's
// (tests/check_isa_objects.cmake).
//
// Each block of W's rows is multiplied by a group of x's rows at once: W's values are loaded once
// for the group (a 16-bit W's widened to float32 as they are loaded), and each sum is a vector of
// partial sums over k, added up at the end.
//
// GCC 12 may report the AVX-512 sum's own deliberately undefined temporaries (_mm512_undefined_*,
// inside its headers) as used uninitialized: a false positive, silenced for those headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

#include "kernels/cpu/small_batch.h"

#if !defined(FUSEDLINEAR_CPU_ISA) || \
    !(defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512))
#error "small_batch_isa.h needs FUSEDLINEAR_CPU_ISA and CPU_CAPABILITY_AVX2 or _AVX512"
#endif

namespace fusedlinear {
namespace cpu {
namespace FUSEDLINEAR_CPU_ISA {
namespace {

// Rows of W a block: each row's vector of x's values serves all of them.
constexpr int kWRows = 4;

#if defined(CPU_CAPABILITY_AVX512)
using Vec = __m512;
constexpr int64_t kLanes = 16;
// x's rows a group: kRows x kWRows sums, kWRows of W and one of x in the 32 vector registers.
constexpr int kMaxRows = 4;
Vec zero() { return _mm512_setzero_ps(); }
Vec load(const float* p) { return _mm512_loadu_ps(p); }
// The first `count` (0..kLanes - 1) elements, zeros after them.
Vec load_first(const float* p, int64_t count) {
  return _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), p);
}
// kLanes 16-bit values (the first `count`, zeros after them), as a float16's or a bfloat16's bits.
__m256i load_halves(const uint16_t* p, int64_t count) {
  return count == kLanes ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                         : _mm256_maskz_loadu_epi16(__mmask16((1u << count) - 1), p);
}
Vec widen_float16(__m256i h) { return _mm512_cvtph_ps(h); }
// A bfloat16 is a float32's high half.
Vec widen_bfloat16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
float sum(Vec v) { return _mm512_reduce_add_ps(v); }
#else
using Vec = __m256;
constexpr int64_t kLanes = 8;
constexpr int kMaxRows = 2;  // of the 16 vector registers
Vec zero() { return _mm256_setzero_ps(); }
Vec load(const float* p) { return _mm256_loadu_ps(p); }
Vec load_first(const float* p, int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), lane));
}
__m128i load_halves(const uint16_t* p, int64_t count) {
  if (count == kLanes) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  uint16_t tail[kLanes] = {};  // once a row of W: no masked 16-bit load in AVX2
  std::memcpy(tail, p, size_t(count) * sizeof(uint16_t));
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail));
}
Vec widen_float16(__m128i h) { return _mm256_cvtph_ps(h); }
Vec widen_bfloat16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
float sum(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#endif

// W's values [at, at + count) (count <= kLanes; zeros after them) as float32, W of type E.
template <ElementType E>
Vec load_w(const void* w, int64_t at, int64_t count) {
  if constexpr (E == ElementType::kFloat32) {
    const float* p = static_cast<const float*>(w) + at;
    return count == kLanes ? load(p) : load_first(p, count);
  } else {
    const auto h = load_halves(static_cast<const uint16_t*>(w) + at, count);
    return E == ElementType::kFloat16 ? widen_float16(h) : widen_bfloat16(h);
  }
}

// out[r][j + b] for kRows rows of x (from `x`, to `out`) and W's rows j .. j + kBlock - 1.
template <ElementType E, int kRows, int kBlock>
void block_sums(const SmallBatchCall& call, const float* x, float* out, int64_t j) {
  const int64_t k = call.k, whole = k - k % kLanes;
  Vec acc[kRows][kBlock];
  for (int r = 0; r < kRows; ++r) {
    for (int b = 0; b < kBlock; ++b) acc[r][b] = zero();
  }
  const auto step = [&](int64_t i, int64_t count) {
    Vec wv[kBlock];
    for (int b = 0; b < kBlock; ++b) wv[b] = load_w<E>(call.w, (j + b) * k + i, count);
    for (int r = 0; r < kRows; ++r) {
      const Vec xv = count == kLanes ? load(x + r * k + i) : load_first(x + r * k + i, count);
      for (int b = 0; b < kBlock; ++b) acc[r][b] = fma(wv[b], xv, acc[r][b]);
    }
  };
  for (int64_t i = 0; i < whole; i += kLanes) step(i, kLanes);
  if (whole < k) step(whole, k - whole);
  for (int r = 0; r < kRows; ++r) {
    for (int b = 0; b < kBlock; ++b) out[r * call.n + j + b] = sum(acc[r][b]);
  }
}

// kRows rows of x against W's rows [first, last).
template <ElementType E, int kRows>
void rows_of(const SmallBatchCall& call, const float* x, float* out, int64_t first, int64_t last) {
  int64_t j = first;
  for (; j + kWRows <= last; j += kWRows) block_sums<E, kRows, kWRows>(call, x, out, j);
  for (; j < last; ++j) block_sums<E, kRows, 1>(call, x, out, j);
}

// A group of `rows` (1..kRows) rows of x.
template <ElementType E, int kRows>
void group_of(int64_t rows, const SmallBatchCall& call, const float* x, float* out, int64_t first,
              int64_t last) {
  if constexpr (kRows > 1) {
    if (rows < kRows) return group_of<E, kRows - 1>(rows, call, x, out, first, last);
  }
  rows_of<E, kRows>(call, x, out, first, last);
}

}  // namespace

void small_batch_rows(const SmallBatchCall& call, int64_t first, int64_t last) {
  dispatch_element(call.w_type, [&](auto type) {
    for (int64_t r = 0; r < call.rows; r += kMaxRows) {
      const int64_t left = call.rows - r;
      group_of<decltype(type)::value, kMaxRows>(left < kMaxRows ? left : kMaxRows, call,
                                                call.x + r * call.k, call.out + r * call.n, first,
                                                last);
    }
  });
}

}  // namespace FUSEDLINEAR_CPU_ISA
}  // namespace cpu
}  // namespace fusedlinear
