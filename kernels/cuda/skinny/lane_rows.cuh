// The lane-rows skinny kernel (float32 W from 9 rows of x): out = epilogue(x W^T) from W and x
// staged a stage of k at a time in shared memory (cp.async or the TMA), float32 FMAs, each lane
// summing 8 rows of W against 4 of x.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/skinny/common.cuh"
#include "kernels/cuda/tma.cuh"

namespace fusedlinear {
namespace cuda {
namespace skinny {

// Each warp forms the products of a block's 64 rows of W and 16 rows of x over its share of each
// stage's k: lane (g, q) = (lane % 8, lane / 8) sums rows g + 8 i of W (i < 8) against rows
// q + 4 j of x (j < 4), 32 sums a lane where the CUDA-core kernel's 16-row tile holds 128. A
// 16-byte load of W from shared memory then serves 4 lanes and one of x 8: 12 loads for 128
// products. W's tile and x's are staged a stage of k at a time, in one of two layouts that keep a
// load's 8 rows in different banks:
//   - from sm_90, by the TMA (tma.cuh): one thread copies a stage as 128-byte-swizzled tiles of
//     32 k, counted in on an mbarrier; measured faster than the copies below, which took every
//     thread's issue slots and address work;
//   - otherwise with cp.async, 16 bytes a thread at a time, each row padded by 16 bytes.
// Two blocks an SM, each waiting only at its own barriers, k split in two: one block of 16 warps
// was slower, its loads and products barely overlapping. The warps' sums are
// added in a fixed order at the end.
struct LaneRowsShape {
  static constexpr int kRows = 16;               // rows of x per block
  static constexpr int kRowsW = 64;              // rows of W per block
  static constexpr int kLaneRowsW = kRowsW / 8;  // of W per lane
  static constexpr int kLaneRowsX = kRows / 4;   // of x per lane
  static constexpr int kWarps = 8;               // each a share of every stage's k
  static constexpr int kK = 64;                  // values of k a stage
  static constexpr int kWarpK = kK / kWarps;     // a warp's share of a stage
  static constexpr int kStages = 4;
  static constexpr int kBlocks = 2;  // an SM
  // cp.async's layout: [row of W, then of x][kStride], rows padded by 16 bytes.
  static constexpr int kStride = kK + 4;  // floats from one staged row to the next
  static constexpr int kWFloats = kRowsW * kStride;
  static constexpr int kStageFloats = (kRowsW + kRows) * kStride;
  // The TMA's layout: [tile of 32 k][row of W] then [tile][row of x], 128-byte rows, swizzled.
  static constexpr int kTileK = kTileRowBytes / 4;
  static constexpr int kTiles = kK / kTileK;
  static constexpr int kTileFloatsW = kRowsW * kTileK, kTileFloatsX = kRows * kTileK;
  static constexpr int kSwizzledStageFloats = kTiles * (kTileFloatsW + kTileFloatsX);
  // Either layout's stages; the TMA's with the stages' mbarriers after them.
  static constexpr int kPaddedBytes = kStages * kStageFloats * 4;
  static constexpr int kSwizzledBytes = kStages * kSwizzledStageFloats * 4 + kStages * 8;
  static constexpr int kSmemBytes = std::max(kPaddedBytes, kSwizzledBytes);
  static constexpr int kSums = kLaneRowsW * kLaneRowsX;  // a lane's
  // At the end every warp's sums, [warp][sum][lane], reuse the stages' memory.
  static_assert(kWarps * kSums * 32 <= kStages * kSwizzledStageFloats && kWarpK % 4 == 0);
  static_assert(kK % kTileK == 0 && kSwizzledStageFloats * 4 % 1024 == 0);
};

// x [rows, k_in], W [n_out, k_in], out [rows, n_out], all float32, rows 16-byte aligned. Block
// (x, y, z): Shape::kRowsW rows of W, the y-th split of k (k_per_split values, a multiple of
// Shape::kK), Shape::kRows rows of x; out and partial as skinny_cuda_core_kernel. kTileCopies: W
// and x staged by the TMA from w_map and x_map (describe_matrix: tiles of kRowsW and kRows rows),
// where the kernel is built for sm_90 on; otherwise the maps are not read.
template <class Shape, class ChainT, bool kTileCopies>
__global__ void __launch_bounds__(Shape::kWarps * 32, Shape::kBlocks)
    skinny_lane_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                            float* __restrict__ out, float* __restrict__ partial, int64_t rows,
                            int64_t n_out, int64_t k_in, int64_t k_per_split,
                            const __grid_constant__ CUtensorMap w_map,
                            const __grid_constant__ CUtensorMap x_map,
                            const __grid_constant__ ColumnEpilogue<float, ChainT> epilogue) {
  constexpr int kRows = Shape::kRows, kRowsW = Shape::kRowsW, kWarps = Shape::kWarps;
  constexpr int kLaneRowsW = Shape::kLaneRowsW, kLaneRowsX = Shape::kLaneRowsX;
  constexpr int kK = Shape::kK, kStride = Shape::kStride, kStages = Shape::kStages;
  constexpr int kTileK = Shape::kTileK, kTiles = Shape::kTiles;
  constexpr int kThreads = kWarps * 32, kSums = Shape::kSums;
  constexpr bool kTma = kTileCopies && kHasTensorCopies;
  // 1024-byte aligned, as the TMA's 128-byte swizzle wants its tiles (each slot is a multiple).
  extern __shared__ __align__(1024) float stages[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = int64_t(blockIdx.x) * kRowsW;
  const int64_t m0 = int64_t(blockIdx.z) * kRows;
  const KWalk<kK, kRotateChunks> walk(k_in, k_per_split);

  // Step t of the walk over k: its stage's slot, W's rows then x's, and (TMA) its mbarrier.
  constexpr int kSlotFloats = kTma ? Shape::kSwizzledStageFloats : Shape::kStageFloats;
  auto slot_of = [&](int64_t t) { return stages + (t % kStages) * kSlotFloats; };
  const StageBarriers<kStages> barriers{
      shared_address(stages + kStages * kSlotFloats)};  // TMA only
  // Where x's rows start in a slot, after W's; and where the 4 k from k of row r lie in W's or
  // x's part of a slot (part_rows rows: the height of its tiles in the TMA's layout, whose pieces
  // are swizzled as staged_offset swizzles them).
  constexpr int kXPartFloats = kTma ? kTiles * Shape::kTileFloatsW : Shape::kWFloats;
  auto piece_at = [&](const float* part, int part_rows, int r, int k) {
    if constexpr (kTma) {
      return part + (k / kTileK) * part_rows * kTileK + r * kTileK +
             ((k % kTileK / 4) ^ (r % 8)) * 4;
    } else {
      return part + r * kStride + k;
    }
  };

  // Step t's tiles of W and x into its slot, rows past the last and k past the split's end as
  // zeros (splits end on a stage's edge, the last at k_in, past which the TMA reads zeros): by one
  // thread through the TMA, or by every thread with cp.async (one commit group a step, empty or
  // not).
  using WSource =
      std::conditional_t<kTma, NoTileSource, TileSource<float, kRowsW, kK / 4, kThreads>>;
  using XSource =
      std::conditional_t<kTma, NoTileSource, TileSource<float, kRows, kK / 4, kThreads>>;
  [[maybe_unused]] const WSource w_source(n0, n_out, k_in);
  [[maybe_unused]] const XSource x_source(m0, rows, k_in);
  auto copy_stage = [&](int64_t t) {
    if constexpr (kTma) {
      if (threadIdx.x != 0 || t >= walk.steps) return;
      const uint32_t slot = shared_address(slot_of(t)), barrier = barriers.of(t);
      expect_bytes(barrier, Shape::kSwizzledStageFloats * 4);
      const int64_t k = walk.k_of(t);
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        copy_tile(slot + i * Shape::kTileFloatsW * 4, w_map, n0, k + i * kTileK, barrier);
        copy_tile(slot + (kTiles * Shape::kTileFloatsW + i * Shape::kTileFloatsX) * 4, x_map, m0,
                  k + i * kTileK, barrier);
      }
    } else {
      if (t < walk.steps) {
        const uint32_t slot = shared_address(slot_of(t));
        auto offset = [](int row, int piece) { return uint32_t((row * kStride + piece * 4) * 4); };
        w_source.copy(slot, w, walk.k_of(t), walk.end, offset);
        x_source.copy(slot + Shape::kWFloats * 4, x, walk.k_of(t), walk.end, offset);
      }
      copy_async_commit();
    }
  };
  if constexpr (kTma) barriers.init();

  // This lane's rows: g + 8 i of W, q + 4 j of x.
  const int g = lane % 8, q = lane / 8;
  float acc[kLaneRowsW][kLaneRowsX] = {};
  for (int s = 0; s < kStages - 1; ++s) copy_stage(s);
  for (int64_t t = 0; t < walk.steps; ++t) {
    if constexpr (kTma) {
      barriers.wait(t);
    } else {
      copy_async_wait<kStages - 2>();
    }
    __syncthreads();  // stage t arrived for every thread; stage t - 1 is read by no warp
    copy_stage(t + kStages - 1);
    const float* slot = slot_of(t);
#pragma unroll
    for (int k4 = 0; k4 < Shape::kWarpK; k4 += 4) {
      const int k = warp * Shape::kWarpK + k4;
      float4 wv[kLaneRowsW], xv[kLaneRowsX];
#pragma unroll
      for (int i = 0; i < kLaneRowsW; ++i) {
        wv[i] = *reinterpret_cast<const float4*>(piece_at(slot, kRowsW, g + 8 * i, k));
      }
#pragma unroll
      for (int j = 0; j < kLaneRowsX; ++j) {
        xv[j] =
            *reinterpret_cast<const float4*>(piece_at(slot + kXPartFloats, kRows, q + 4 * j, k));
      }
#pragma unroll
      for (int i = 0; i < kLaneRowsW; ++i) {
#pragma unroll
        for (int j = 0; j < kLaneRowsX; ++j) {
          acc[i][j] = fmaf(xv[j].x, wv[i].x, acc[i][j]);
          acc[i][j] = fmaf(xv[j].y, wv[i].y, acc[i][j]);
          acc[i][j] = fmaf(xv[j].z, wv[i].z, acc[i][j]);
          acc[i][j] = fmaf(xv[j].w, wv[i].w, acc[i][j]);
        }
      }
    }
  }
  if constexpr (!kTma) copy_async_wait<0>();
  allow_next_kernel_start();  // the reduce kernel, where k is split, may launch now
  __syncthreads();
  // The warps' sums added in warp order. Sum s = i * kLaneRowsX + j of lane (g, q) is row
  // n0 + g + 8 i of W, m0 + q + 4 j of x.
  float* sums = stages;  // [warp][sum][lane]
#pragma unroll
  for (int s = 0; s < kSums; ++s) sums[(warp * kSums + s) * 32 + lane] = (&acc[0][0])[s];
  __syncthreads();
  store_totals<kRows, kRowsW, kThreads>(
      [&](int m, int r) {
        const int at = ((r / 8) * kLaneRowsX + m / 4) * 32 + r % 8 + 8 * (m % 4);
        float total = sums[at];
        for (int v = 1; v < kWarps; ++v) total += sums[v * kSums * 32 + at];
        return total;
      },
      m0, n0, rows, n_out, epilogue, split::SplitOperands{}, out, partial);  // float32 W: no parts
}

}  // namespace skinny
}  // namespace cuda
}  // namespace fusedlinear
