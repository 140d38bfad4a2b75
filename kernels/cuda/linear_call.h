// One whole fused forward, as the kernels that fuse the chain into the products take it: the
// small-batch kernels (skinny/skinny.h) and the Hopper GEMM (gemm/gemm.h). Torch-free.
#pragma once

#include <cstdint>

#include "kernels/math/bf16_split.h"
#include "kernels/math/element.h"

namespace fusedlinear {
namespace cuda {

// Which products a call forms, and so what it reads as W: W in x's type (float32 FMAs for float32;
// tensor-core products for 16-bit x); or, for float32 x, W's bfloat16 hi part alone (the bf16
// mode: x rounded to bfloat16, x_hi w_hi), hi and lo (bf16x3: x split as W was, x_lo w_hi +
// x_hi w_lo + x_hi w_hi, smallest first) or hi, mid and lo (bf16x6: the six products of parts i
// and j with i + j < 3; the Hopper GEMM only), as gemm_bf16_parts forms them.
enum class LinearProducts { kAsInput, kBf16, kBf16x3, kBf16x6 };

// The bfloat16 parts of x and of W that `products` reads (0: x and W themselves).
constexpr int split_parts_of(LinearProducts products) {
  return products == LinearProducts::kBf16     ? 1
         : products == LinearProducts::kBf16x3 ? 2
         : products == LinearProducts::kBf16x6 ? 3
                                               : 0;
}

// One fused forward:
//   out[m, n] = chain(sum_k x[m, k] W[n, k] + bias[n], terms[.][n])
// x [rows, in_features] row-major; W (and w_lo) [out_features, in_features] row-major
// (output-major); bias [out_features] or null; x, bias, the terms and out hold `type`. Sums in
// float32.
struct LinearCall {
  ElementType type = ElementType::kFloat32;
  LinearProducts products = LinearProducts::kAsInput;
  const void* x = nullptr;
  const void* w = nullptr;
  const void* w_lo = nullptr;     // W's second part: bf16x3's lo, bf16x6's mid
  const void* w_third = nullptr;  // W's third part: bf16x6's lo
  const void* bias = nullptr;
  ColumnTerms terms;
  void* out = nullptr;
  int64_t rows = 0, out_features = 0, in_features = 0;
  // From sm_90 the kernels that stage W and x through shared memory have the TMA copy them where
  // the driver can describe the matrices; false copies them thread by thread, as older GPUs do
  // (the same bits: for tests and comparisons).
  bool tile_copies = true;
};

// What the kernels read to give a split-mode sum that comes out inf or NaN eager's value
// (bf16_split.h): float32 x and W's parts, for bf16x3 and bf16x6; nothing for the other products.
inline split::SplitOperands split_operands_of(const LinearCall& call) {
  const int parts = split_parts_of(call.products);
  if (call.type != ElementType::kFloat32 || parts < 2) return {};
  const void* const w[3] = {call.w, call.w_lo, call.w_third};
  return split::split_operands(static_cast<const float*>(call.x), w, parts, call.in_features,
                               call.out_features, /*w_input_major=*/false);
}

}  // namespace cuda
}  // namespace fusedlinear
