// One whole fused forward, as the kernels that fuse the chain into the products take it: the
// small-batch kernels (skinny/skinny.h) and the Hopper GEMM (gemm/gemm.h). Torch-free.
#pragma once

#include <cstdint>

#include "kernels/math/bf16_split.h"
#include "kernels/math/element.h"
#include "kernels/math/precision.h"

namespace fusedlinear {
namespace cuda {

// One fused forward:
//   out[m, n] = chain(sum_k x[m, k] W[n, k] + bias[n], terms[.][n])
// x [rows, in_features] row-major; W (and w_lo) [out_features, in_features] row-major
// (output-major); bias [out_features] or null; x, bias, the terms and out hold `type`. Sums in
// float32.
struct LinearCall {
  ElementType type = ElementType::kFloat32;
  // The products (kernels/math/precision.h), and so what the call reads as W: for ieee W in x's
  // type (float32 FMAs for float32, tensor-core products for 16-bit x); for float32 x, W's
  // bfloat16 parts as gemm_bf16_parts forms their products: bf16's hi (x rounded to bfloat16),
  // bf16x3's hi and lo, bf16x6's hi, mid and lo (the Hopper GEMM only). tf32 comes as ieee.
  Precision precision = Precision::kIeee;
  const void* x = nullptr;
  const void* w = nullptr;
  const void* w_lo = nullptr;     // W's second part: bf16x3's lo, bf16x6's mid
  const void* w_third = nullptr;  // W's third part: bf16x6's lo
  const void* bias = nullptr;
  ColumnTerms terms;
  // A gated pair's second Linear (the gate, B; the Hopper GEMM only): out = chain(x W^T + bias)
  // * (x B^T + gate_bias), B [out_features, in_features] in W's parts and layout, its bias as
  // bias. Null for one Linear.
  const void* gate_w = nullptr;
  const void* gate_w_lo = nullptr;
  const void* gate_w_third = nullptr;
  const void* gate_bias = nullptr;
  void* out = nullptr;
  int64_t rows = 0, out_features = 0, in_features = 0;
  // From sm_90 the kernels that stage W and x through shared memory have the TMA copy them where
  // the driver can describe the matrices; false copies them thread by thread, as older GPUs do
  // (the same bits: for tests and comparisons).
  bool tile_copies = true;
};

// What the kernels read to give a split-mode sum that comes out inf or NaN eager's value
// (bf16_split.h): float32 x and W's parts (or the gate's, B's), for bf16x3 and bf16x6; nothing
// for the other products.
inline split::SplitOperands split_operands_of(const LinearCall& call, bool gate = false) {
  const int parts = split_parts_of(call.precision);
  if (call.type != ElementType::kFloat32 || parts < 2) return {};
  const void* const w[3] = {gate ? call.gate_w : call.w, gate ? call.gate_w_lo : call.w_lo,
                            gate ? call.gate_w_third : call.w_third};
  return split::split_operands(static_cast<const float*>(call.x), w, parts, call.in_features,
                               call.out_features, /*w_input_major=*/false);
}

}  // namespace cuda
}  // namespace fusedlinear
