// The CUDA-core skinny kernel: out = epilogue(x W^T) for a few rows of x, float32 FMAs, each
// warp owning a few rows of W read with 16-byte loads and its lanes' sums added in a fixed order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/skinny/common.cuh"
#include "kernels/math/bf16_split.h"

namespace fusedlinear {
namespace cuda {
namespace skinny {

constexpr int kWarps = 4;         // per block
constexpr int kLargestTile = 16;  // rows of x per block; more rows take more blocks (grid z)

// Rows of W per warp: each x value a lane reads (from L1) serves that many rows. The widest tile
// takes 8 (242 registers: its 256 blocks fill one wave at two an SM; with 4, 512 blocks ran in two
// waves); the 8-row tile 4, capped at 128 registers so that its 512 blocks fill one wave at four
// an SM (with 8 rows a warp at 168 registers, three an SM, it ran slower).
template <int kRows>
inline constexpr int kWarpRowsFor = kRows == 1              ? 2
                                    : kRows == kLargestTile ? 8
                                                            : 4;

// The shape of one instantiation: kVec elements of W per load (16 bytes, or 1 where W's rows are
// not 16-byte aligned), kParts loads per element group (2 with a lo part), kSteps loads per row
// per lane per chunk, kChunk values of k per chunk; kMinBlocks blocks an SM for the launch bounds.
// kStageX: x copied into shared memory (cp.async), kXStages chunks a block, each chunk's copy
// issued kXStages - 1 chunks ahead, instead of read from L1 by every warp: float32 W at the 4- and
// 8-row tiles, where it measured faster (at the 16-row tile slower).
template <typename WT, bool kHasLo, int kVecOf, int kRowsOf>
struct SkinnyShape {
  static constexpr int kVec = kVecOf;
  static constexpr int kRows = kRowsOf;
  static constexpr int kWarpRows = kWarpRowsFor<kRows>;
  static constexpr int kParts = kHasLo ? 2 : 1;
  static constexpr int kSteps = std::max(1, kLoadsPerLane / (kWarpRows * kParts));
  static constexpr int kChunk = kSteps * 32 * kVec;
  static constexpr int kMinBlocks = kRows == 8 ? 4 : 1;
  static constexpr bool kStageX =
      std::is_same_v<WT, float> && kVec == 4 && (kRows == 4 || kRows == 8);
  static constexpr int kXStages = 3;
};

// x's value as the products take it: itself where W is of x's type; for float32 x with W's
// bfloat16 parts, its bfloat16 hi part, and its lo part where W's lo part is given
// (split::split_bf16, as the tensor-core kernel and the cuBLAS path split x).
template <typename T, typename WT, bool kHasLo>
__device__ __forceinline__ float x_part(float v, float& lo) {
  if constexpr (std::is_same_v<T, WT>) {
    return v;
  } else if constexpr (kHasLo) {
    const split::Bf16Pair parts = split::split_bf16(v);
    lo = split::from_bf16_bits(parts.lo);
    return split::from_bf16_bits(parts.hi);
  } else {
    return split::from_bf16_bits(split::split_bf16(v).hi);
  }
}

// x [rows, k_in], W [n_out, k_in] (and W's lo part, bfloat16, where kHasLo), out [rows, n_out];
// T is x's, the epilogue's and out's type. Block (x, y, z): kWarps * kWarpRows rows of W, the
// y-th split of k (k_per_split values, a multiple of kChunk), kRows rows of x. With one split the
// block applies the epilogue and writes out; with several it writes its sums to
// partial[split][row][n] for skinny_reduce_kernel.
template <typename T, typename WT, bool kHasLo, class Shape, class ChainT>
__global__ void __launch_bounds__(kWarps * 32, Shape::kMinBlocks)
    skinny_cuda_core_kernel(const T* __restrict__ x, const WT* __restrict__ w,
                            const __nv_bfloat16* __restrict__ w_lo, T* __restrict__ out,
                            float* __restrict__ partial, int64_t rows, int64_t n_out, int64_t k_in,
                            int64_t k_per_split,
                            const __grid_constant__ ColumnEpilogue<T, ChainT> epilogue,
                            const __grid_constant__ split::SplitOperands split) {
  constexpr int kVec = Shape::kVec, kRows = Shape::kRows, kWarpRows = Shape::kWarpRows;
  constexpr int kSteps = Shape::kSteps, kChunk = Shape::kChunk;
  using Pack = Packed<WT, kVec>;
  using LoPack = Packed<__nv_bfloat16, kVec>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = (int64_t(blockIdx.x) * kWarps + warp) * kWarpRows;
  const int64_t m0 = int64_t(blockIdx.z) * kRows;
  const KWalk<kChunk, kRotateChunks> walk(k_in, k_per_split);

  // Rows of x past the last (a tile's padding) read the last row; their sums are not stored.
  auto x_row = [&](int m) { return x + (m0 + m < rows ? m0 + m : rows - 1) * k_in; };

  float acc[kWarpRows][kRows] = {};

  // Where x is staged: chunk c's x, all of the tile's rows, copied by the block's threads into
  // stage `slot`; rows past the last and k past the split's end as zeros.
  constexpr bool kStageX = Shape::kStageX && kHasCopyAsync;
  constexpr int kXStages = Shape::kXStages;
  __shared__ __align__(16) T x_stage[kStageX ? kXStages : 1][kStageX ? kRows : 1][kChunk];
  using XSource =
      std::conditional_t<kStageX, TileSource<T, kRows, kChunk / kVec, kWarps * 32>, NoTileSource>;
  [[maybe_unused]] const XSource x_source(m0, rows, k_in);
  [[maybe_unused]] auto copy_x = [&](int64_t c, int slot) {
    if constexpr (kStageX) {
      x_source.copy(
          shared_address(&x_stage[slot][0][0]), x, walk.k_of(c), walk.end,
          [](int m, int piece) { return uint32_t((m * kChunk + piece * kVec) * sizeof(T)); });
    }
  };
  // Launched as the dependent of the kernel before it (often the layer before, whose output x
  // is): the first chunk's rows of W asked of L2 while that kernel ends, then the wait for x.
  if (walk.steps > 0) {
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int64_t k = walk.k_of(0) + (s * 32 + lane) * kVec;
        if (n0 + r >= n_out || k >= walk.end) continue;
        prefetch_to_l2(w + (n0 + r) * k_in + k);
        if constexpr (kHasLo) prefetch_to_l2(w_lo + (n0 + r) * k_in + k);
      }
    }
  }
  wait_for_previous_kernel();
  if constexpr (kStageX) {
#pragma unroll
    for (int stage = 0; stage < kXStages - 1; ++stage) {
      if (stage < walk.steps) copy_x(stage, stage);
      copy_async_commit();
    }
  }
  for (int64_t c = 0; c < walk.steps; ++c) {
    const int64_t k0 = walk.k_of(c);
    // This chunk's W first: its loads are all in flight before the first product.
    Pack hi[kWarpRows][kSteps];
    [[maybe_unused]] LoPack lo[kWarpRows][kSteps];
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int64_t k = k0 + (s * 32 + lane) * kVec;
        const bool inside = n0 + r < n_out && k < walk.end;
        const int64_t at = (n0 + r) * k_in + k;
        hi[r][s] = inside ? *reinterpret_cast<const Pack*>(w + at) : Pack{};
        if constexpr (kHasLo) {
          lo[r][s] = inside ? *reinterpret_cast<const LoPack*>(w_lo + at) : LoPack{};
        }
      }
    }
    [[maybe_unused]] int slot = 0;
    if constexpr (kStageX) {
      copy_async_wait<kXStages - 2>();
      __syncthreads();  // chunk c's x arrived for every thread; chunk c - 1's is read by no warp
      const int64_t ahead = c + kXStages - 1;
      if (ahead < walk.steps) copy_x(ahead, int(ahead % kXStages));
      copy_async_commit();
      slot = int(c % kXStages);
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t k = k0 + (s * 32 + lane) * kVec;
      if (k >= walk.end) break;
      float wv[kWarpRows][kVec];
      [[maybe_unused]] float wv_lo[kWarpRows][kVec];
#pragma unroll
      for (int r = 0; r < kWarpRows; ++r) {
        to_floats(hi[r][s], wv[r]);
        if constexpr (kHasLo) to_floats(lo[r][s], wv_lo[r]);
      }
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        // x's values from its stage (whose one row, where x is not staged, is never read), or
        // where they lie (they stay in L1 and L2: every warp reads them); copied whole first:
        // read through a reference, each value took a load of its own.
        float xv[kVec];
        [[maybe_unused]] float xv_lo[kVec];
        const T* x_at =
            kStageX ? &x_stage[slot][kStageX ? m : 0][(s * 32 + lane) * kVec] : x_row(m) + k;
        const Packed<T, kVec> x_pack = *reinterpret_cast<const Packed<T, kVec>*>(x_at);
        to_floats(x_pack, xv);
#pragma unroll
        for (int v = 0; v < kVec; ++v) xv[v] = x_part<T, WT, kHasLo>(xv[v], xv_lo[v]);
#pragma unroll
        for (int r = 0; r < kWarpRows; ++r) {
#pragma unroll
          for (int v = 0; v < kVec; ++v) {
            if constexpr (kHasLo) {  // bf16x3's products, smallest first
              acc[r][m] = fmaf(xv_lo[v], wv[r][v], acc[r][m]);
              acc[r][m] = fmaf(xv[v], wv_lo[r][v], acc[r][m]);
            }
            acc[r][m] = fmaf(xv[v], wv[r][v], acc[r][m]);
          }
        }
      }
    }
  }

  allow_next_kernel_start();  // the reduce kernel, where k is split, may launch now
  // The lanes' sums added by halving; then each total lives in kLanesPerSum lanes (the first
  // stores it), each lane holding kSumsPerLane totals of consecutive indices r * kRows + m.
  constexpr int kSums = kWarpRows * kRows;
  static_assert((kSums & (kSums - 1)) == 0, "add_across_lanes halves the sums");
  constexpr int kLanesPerSum = kSums >= 32 ? 1 : 32 / kSums;
  constexpr int kSumsPerLane = kSums >= 32 ? kSums / 32 : 1;
  float* sums = &acc[0][0];
  add_across_lanes<kSums, 16>(sums, lane);
  if (lane % kLanesPerSum != 0) return;
#pragma unroll
  for (int j = 0; j < kSumsPerLane; ++j) {
    const int index = lane / kLanesPerSum * kSumsPerLane + j;
    const int64_t n = n0 + index / kRows, row = m0 + index % kRows;
    if (n >= n_out || row >= rows) continue;
    if (partial) {
      partial[(int64_t(blockIdx.y) * rows + row) * n_out + n] = sums[j];
    } else {
      out[row * n_out + n] = epilogue_of_total(epilogue, split, sums[j], row, n);
    }
  }
}

}  // namespace skinny
}  // namespace cuda
}  // namespace fusedlinear
