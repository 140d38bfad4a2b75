// The SIMD loop of the CPU epilogue (epilogue_loop.h with SIMD lanes), compiled once per
// instruction set by the files that register a set of declarations (kernels/register/): each
// defines FUSEDLINEAR_CPU_ISA (the namespace of its entry point) and is built with its instruction
// set's flags and CPU_CAPABILITY_AVX2 or CPU_CAPABILITY_AVX512 (which select ATen's vector types).
// Nothing else may include it: code built with these flags must only run where the CPU has them.
// All it defines but its entry point, cpu::<isa>::chain_span_at, has internal linkage, so no copy
// built with these flags can stand in for another file's (tests/check_isa_objects.cmake).
//
// Loads of bfloat16 are shifts of their bits, of float16 F16C's conversion; stores round to
// nearest even as c10::BFloat16 and c10::Half do (NaN stays NaN).
//
// GCC 12 may report the AVX-512 conversions' own deliberately undefined temporaries
// (_mm512_undefined_*, inside its headers) as used uninitialized where they are inlined: a false
// positive, silenced for those headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>
#include <type_traits>

#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/epilogue_loop.h"
#include "kernels/math/primitives_vec.h"

#if !defined(FUSEDLINEAR_CPU_ISA) || \
    !(defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512))
#error "epilogue_isa.h needs FUSEDLINEAR_CPU_ISA and CPU_CAPABILITY_AVX2 or _AVX512"
#endif

namespace fusedlinear {
namespace cpu {
namespace FUSEDLINEAR_CPU_ISA {
namespace {

using Vec = act::FloatVec;
constexpr int64_t kLanes = Vec::size();

// kLanes elements from p, as floats.
template <ElementType E>
inline Vec load_full(const Stored<E>* p) {
  if constexpr (E == ElementType::kFloat32) {
    return Vec::loadu(p);
  } else {
#if defined(CPU_CAPABILITY_AVX512)
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (E == ElementType::kFloat16) return Vec(_mm512_cvtph_ps(bits));
    // A bfloat16 is the high half of the float with the same value.
    return Vec(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)));
#else
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (E == ElementType::kFloat16) return Vec(_mm256_cvtph_ps(bits));
    return Vec(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
#endif
  }
}

// v rounded to E, kLanes elements to p. bfloat16 as c10::BFloat16 rounds: add 0x7fff plus the
// lowest kept bit, keep the high half; NaN becomes 0x7fc0.
template <ElementType E>
inline void store_full(Stored<E>* p, Vec v) {
  if constexpr (E == ElementType::kFloat32) {
    v.store(p);
  } else {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#if defined(CPU_CAPABILITY_AVX512)
    __m256i halves;
    if constexpr (E == ElementType::kFloat16) {
      halves = _mm512_cvtps_ph(v, kNearest);
    } else {
      const __m512i bits = _mm512_castps_si512(v);
      const __m512i lowest_kept =
          _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      const __m512i rounded = _mm512_srli_epi32(
          _mm512_add_epi32(bits, _mm512_add_epi32(lowest_kept, _mm512_set1_epi32(0x7fff))), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      halves =
          _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, _mm512_set1_epi32(0x7fc0)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), halves);
#else
    __m128i halves;
    if constexpr (E == ElementType::kFloat16) {
      halves = _mm256_cvtps_ph(v, kNearest);
    } else {
      const __m256i bits = _mm256_castps_si256(v);
      const __m256i lowest_kept =
          _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
      __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(bits, _mm256_add_epi32(lowest_kept, _mm256_set1_epi32(0x7fff))), 16);
      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), nan);
      // Each 32-bit lane holds a value below 2^16: pack them to 16 bits, in order.
      halves =
          _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), halves);
#endif
  }
}

// A SIMD vector of floats: the loop's values.
struct VectorLanes {
  using Value = Vec;
  static constexpr int64_t kLanes = Vec::size();
  // `count` (1..kLanes) elements; the lanes past them are zero on loading and dropped on storing.
  template <ElementType E>
  static Vec load(const Stored<E>* p, int64_t count) {
    if (count == kLanes) return load_full<E>(p);
    Stored<E> buffer[kLanes] = {};
    std::memcpy(buffer, p, size_t(count) * sizeof(Stored<E>));
    return load_full<E>(buffer);
  }
  template <ElementType E>
  static Vec broadcast(const Stored<E>* p) {
    Stored<E> buffer[kLanes];
    for (int64_t k = 0; k < kLanes; ++k) buffer[k] = p[0];
    return load_full<E>(buffer);
  }
  template <ElementType E>
  static void store(Stored<E>* p, Vec v, int64_t count) {
    if (count == kLanes) return store_full<E>(p, v);
    Stored<E> buffer[kLanes];
    store_full<E>(buffer, v);
    std::memcpy(p, buffer, size_t(count) * sizeof(Stored<E>));
  }
  // `count` elements from `from` to `to`, as one string move (rep movsb): on CPUs with fast string
  // moves it writes whole cache lines of `to` without reading them first.
  template <ElementType E>
  static void copy(Stored<E>* to, const Stored<E>* from, int64_t count) {
    size_t bytes = size_t(count) * sizeof(Stored<E>);
    asm volatile("rep movsb" : "+D"(to), "+S"(from), "+c"(bytes) : : "memory");
  }
};

}  // namespace

template <class List>
ChainSpan chain_span_at(int index) {
  return SpanTable<VectorLanes, typename ModelList<List>::type>::fn[index];
}

}  // namespace FUSEDLINEAR_CPU_ISA
}  // namespace cpu
}  // namespace fusedlinear
