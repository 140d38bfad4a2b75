// x W^T for a few rows of x on the CPU, in float32, each row of W read once for all of x's rows
// (a GEMV's pattern): at these batches the BLAS's GEMM measured several times slower than W's
// read. W may be float32, float16 or bfloat16 (widened to float32 as it is read: half the bytes
// to read, and exact products). One loop per instruction set (small_batch_isa.h), chosen as the
// epilogue's is.
#pragma once

#include <cstdint>

#include "kernels/math/element.h"

namespace fusedlinear {
namespace cpu {

// The most rows auto gives the small-batch products (plan_gemm): up to here they measured faster
// than the BLAS's GEMM, narrow layers and 1024-wide ones alike (docs/PERFORMANCE.md).
constexpr int64_t kSmallBatchMaxRows = 16;

// out [rows][n] = x [rows][k] W [n][k]^T, every tensor contiguous; x and out float32, W of
// w_type.
struct SmallBatchCall {
  const float* x;
  int64_t rows;
  const void* w;
  int64_t n, k;
  float* out;
  ElementType w_type = ElementType::kFloat32;
};

// Whether the small-batch products run here: the epilogue's chosen loop (capability()) is AVX2's
// or AVX-512's.
bool small_batch_runs();

// Whether the small-batch products take x W^T for `rows` rows of x (`w_output_major`: W's rows
// contiguous): where they run, at most kSmallBatchMaxRows rows, W output-major. The op's CPU twin
// takes them there, so a plan that wants the BLAS's GEMM asks this before it calls the twin.
bool small_batch_takes(int64_t rows, bool w_output_major);

// The products of `call`, W's rows split across libtorch's threads. Needs small_batch_runs().
void small_batch_linear(const SmallBatchCall& call);

// Each instruction set's loop on W's rows [first, last) (small_batch_isa.h).
namespace avx2 {
void small_batch_rows(const SmallBatchCall& call, int64_t first, int64_t last);
}
namespace avx512 {
void small_batch_rows(const SmallBatchCall& call, int64_t first, int64_t last);
}

}  // namespace cpu
}  // namespace fusedlinear
