// The CPU epilogue's scalar loop (epilogue_loop.h a float at a time, on libm): the loop of every
// CPU, and of the 16-bit types element by element (c10::Half, c10::BFloat16 round as PyTorch).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>

#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/epilogue_loop.h"

namespace fusedlinear {
namespace cpu {
namespace scalar {

// One float at a time.
struct ScalarLanes {
  using Value = float;
  static constexpr int64_t kLanes = 1;
  template <ElementType E>
  static float load(const Stored<E>* p, int64_t /*count*/) {
    if constexpr (E == ElementType::kFloat32) {
      return *p;
    } else if constexpr (E == ElementType::kFloat16) {
      return float(c10::Half(*p, c10::Half::from_bits()));
    } else {
      return float(c10::BFloat16(*p, c10::BFloat16::from_bits()));
    }
  }
  template <ElementType E>
  static float broadcast(const Stored<E>* p) {
    return load<E>(p, 1);
  }
  template <ElementType E>
  static void store(Stored<E>* p, float v, int64_t /*count*/) {
    if constexpr (E == ElementType::kFloat32) {
      *p = v;
    } else if constexpr (E == ElementType::kFloat16) {
      *p = c10::Half(v).x;
    } else {
      *p = c10::BFloat16(v).x;
    }
  }
  template <ElementType E>
  static void copy(Stored<E>* to, const Stored<E>* from, int64_t count) {
    std::memcpy(to, from, size_t(count) * sizeof(Stored<E>));
  }
};

template <class List>
ChainSpan chain_span_at(int index) {
  return SpanTable<ScalarLanes, typename ModelList<List>::type>::fn[index];
}

}  // namespace scalar
}  // namespace cpu
}  // namespace fusedlinear
