// The element types the epilogues take, the one switch from a run-time type to a compile-time
// one, and what an epilogue call passes to a kernel: torch-free, for the CUDA launchers and the
// CPU loops alike.
#pragma once

#include <stdint.h>

#include "kernels/math/chain.h"

namespace fusedlinear {

// The element type of an epilogue's tensors (y, bias, the terms and out alike).
enum class ElementType { kFloat32, kFloat16, kBFloat16 };
template <ElementType E>
struct ElementConstant {
  static constexpr ElementType value = E;
};
// Calls fn(ElementConstant<type>{}): the one switch from the run-time element type to a
// compile-time one (each side maps the constant to its own storage type: __half or c10::Half).
template <class Fn>
inline void dispatch_element(ElementType type, Fn&& fn) {
  switch (type) {
    case ElementType::kFloat32:
      return fn(ElementConstant<ElementType::kFloat32>{});
    case ElementType::kFloat16:
      return fn(ElementConstant<ElementType::kFloat16>{});
    case ElementType::kBFloat16:
      return fn(ElementConstant<ElementType::kBFloat16>{});
  }
}
// The precision of a result held in that element type.
constexpr act::ResultPrecision result_precision_of(ElementType type) {
  return type == ElementType::kFloat32 ? act::ResultPrecision::kFloat32
                                       : act::ResultPrecision::kHalf;
}
template <ElementType E>
inline constexpr act::ResultPrecision kResultPrecisionOf = result_precision_of(E);

// A chain's per-feature terms: data[j] the j-th term's values (`count` of them, in the chain's
// slot order), each [cols] of the call's element type, or one value for every column where bit j
// of `broadcast` is set (a one-element parameter).
struct ColumnTerms {
  const void* data[act::kMaxColumnTerms] = {};
  uint32_t broadcast = 0;
  int count = 0;
};

// One epilogue over a row-major [rows, cols] tensor y (`type` for y, bias, the terms, gate and
// out):
//   out[r, c] = chain(y[r, c] + bias[c], terms[.][c]) * gate[r, c]
// bias and gate may be null. gate, a [rows, cols] tensor like y, is a gated layer's other
// product: the chain's value is rounded to `type` before the multiply, as a separate multiply
// would see it, so the result is the unfused one's to the bit. out must not overlap gate, nor y but
// where it is y itself, which the CPU loops allow (each value is read before it is written).
struct EpilogueCall {
  ElementType type = ElementType::kFloat32;
  const void* y = nullptr;
  const void* bias = nullptr;
  ColumnTerms terms;
  const void* gate = nullptr;
  void* out = nullptr;
  int64_t rows = 0, cols = 0;
};

}  // namespace fusedlinear
