// The small-batch kernels' interface: a whole fused forward for few rows (batch 1-64), W read
// once and the chain applied before the one store (skinny_*.cuh, a file a kernel family).
// Torch-free: raw pointers, sizes, a stream.
#pragma once

#include <cstdint>

#ifndef __CUDACC_RTC__  // NVRTC takes the variants alone (kernels/cuda/jit/)
#include <cuda_runtime_api.h>

#include "kernels/cuda/linear_call.h"
#endif

namespace fusedlinear {
namespace cuda {

// The kernel a call runs. The first three families read float32 W, bfloat16 W (the bf16 mode) and
// bf16x3's parts for float32 x; the last, W of a 16-bit model's own type.
enum class SkinnyVariant {
  kFloatRows1,  // the CUDA-core kernel, 16-byte loads, tiles of 1, 4 and 8 rows of x
  kFloatRows4,
  kFloatRows8,
  kFloatLaneRows,   // from 9 rows: W and x staged, each lane summing 8 rows of W against 4 of x
  kFloatUnaligned,  // any shape and alignment: one element a load, tiles of 16 rows
  kBf16TensorCore,  // mma.sync from the lanes' own loads, tiles of 8 rows
  kBf16Unaligned,
  kBf16x3TensorCore,
  kBf16x3Staged16,  // from 9 rows: W's and x's parts staged, x split beforehand
  kBf16x3Staged32,
  kBf16x3Staged64,  // from 33 rows: 128 rows of W a block, one block an SM (wgmma on sm_90a)
  kBf16x3Unaligned,
  kHalfTensorCore,
  kHalfUnaligned,
};

// How one call is laid out: the kernel, its grid and the splits of k, and its workspace (floats:
// the x parts of the staged kernel first, then the partial sums of split k).
struct SkinnyPlan {
  SkinnyVariant variant = SkinnyVariant::kFloatUnaligned;
  unsigned grid[3] = {1, 1, 1};
  int64_t k_per_split = 0;
  int splits = 1;
  int64_t x_workspace_floats = 0, partial_floats = 0;
  int64_t workspace_floats() const { return x_workspace_floats + partial_floats; }
};

// The kernel families, one a weight type (chain_kernels.h: a launcher each).
enum class SkinnyFamily { kFloat, kBf16, kBf16x3, kHalf };

#ifndef __CUDACC_RTC__
// Picks the kernel for `call` on the current device and lays out its launch. Returns
// cudaErrorInvalidValue for products the type does not take (bfloat16 parts with 16-bit x),
// cudaErrorInvalidConfiguration for more rows than the grid takes (65535 tiles).
cudaError_t plan_skinny_linear(const LinearCall& call, SkinnyPlan& plan);

SkinnyFamily family_of(SkinnyVariant variant);
#endif

}  // namespace cuda
}  // namespace fusedlinear
