// The CPU implementation of the fused epilogues: one loop per instruction set, chosen at run
// time. A scalar loop runs the activation functors on floats with libm; SIMD loops run the same
// functors on at::vec::Vectorized<float> (activations_vec.h), compiled once with AVX2 and once
// with AVX-512 (fused_epilogue_cpu_isa.h), since ATen's vector headers compile their scalar
// fallbacks unless built with those flags. fused_epilogue_cpu.cpp splits the elements across
// threads (at::parallel_for) and calls the chosen loop on each part.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/math/chains.h"

namespace fusedlinear {
namespace cpu {

// The instruction sets there are loops for, in increasing order.
enum class Capability { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2", "avx512" (the last two as ATEN_CPU_CAPABILITY spells them).
const char* capability_name(Capability capability);

// The loops this build has and this CPU can run, best first; kScalar is always there. AVX2 needs
// AVX2, FMA and F16C; AVX-512 needs AVX-512 F, BW, VL and DQ (as ATen's AVX512 kernels do), FMA
// and F16C.
std::vector<Capability> supported_capabilities();

// The loop the ops use. Chosen on first use as ATen chooses its own: the best supported one, or
// what the environment variable ATEN_CPU_CAPABILITY names ("default" is the scalar loop,
// "avx2", "avx512"), lowered to the best supported one at or below it.
// FUSEDLINEAR_CPU_CAPABILITY, with the same values, chooses for the fused ops alone.
Capability capability();

// Makes the ops use `capability` from now on (tests force each one in turn). Throws
// std::invalid_argument when it is not among supported_capabilities().
void set_capability(Capability capability);

// out[i] = Activations((y[i] + bias[c]) + shift[c]), c = i % cols, for the elements i in
// [begin, end) of a row-major tensor whose rows have `cols` elements. bias and shift may be
// null; out must not overlap y. One function per instruction set, each in its own namespace.
#define FUSEDLINEAR_DECLARE_EPILOGUE_SPAN                                                     \
  void epilogue_span(EpilogueKind kind, ElementType element, const void* y, const void* bias, \
                     const void* shift, void* out, int64_t cols, int64_t begin, int64_t end)
namespace scalar {
FUSEDLINEAR_DECLARE_EPILOGUE_SPAN;
}
namespace avx2 {
FUSEDLINEAR_DECLARE_EPILOGUE_SPAN;
}
namespace avx512 {
FUSEDLINEAR_DECLARE_EPILOGUE_SPAN;
}

// Calls fn(first, col, n) for each run of elements [first, first + n) of [begin, end) that lies
// in one row, starting at column `col`: the per-column terms of a run are contiguous.
template <class Fn>
inline void for_each_row_run(int64_t cols, int64_t begin, int64_t end, Fn&& fn) {
  for (int64_t first = begin; first < end;) {
    const int64_t col = first % cols;
    const int64_t n = std::min(cols - col, end - first);
    fn(first, col, n);
    first += n;
  }
}

// out[i] = Activations((y[i] + bias[c]) + shift[c]) for the elements [begin, end), one at a time
// on floats (on the host both tanh functors are libm's): the scalar loop, and what a chain
// defined outside this library runs on the CPU. T is float or a 16-bit type that converts to and
// from float (c10::Half, c10::BFloat16); bias and shift may be null.
template <typename T, class Activations>
void scalar_span(const T* y, const T* bias, const T* shift, T* out, int64_t cols, int64_t begin,
                 int64_t end) {
  const Activations activations;
  for_each_row_run(cols, begin, end, [&](int64_t first, int64_t col, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      float v = static_cast<float>(y[first + k]);
      if (bias) v += static_cast<float>(bias[col + k]);
      if (shift) v += static_cast<float>(shift[col + k]);
      out[first + k] = static_cast<T>(activations(v));
    }
  });
}

}  // namespace cpu
}  // namespace fusedlinear
