// The staged skinny kernel (bf16x3 from 9 rows): out = epilogue(x W^T) from W's and x's bfloat16
// parts copied a stage at a time into shared memory (cp.async or the TMA), their products by
// ldmatrix and mma.sync, or by wgmma (sm_90a).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/skinny/common.cuh"
#include "kernels/cuda/skinny/tensor_core.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace fusedlinear {
namespace cuda {
namespace skinny {

// For bf16x3 from 9 rows, where every block of the tensor-core kernel would read all of x, hi and
// lo, from L2. A block of 64 or 128 rows of W copies stages of 128 or 64 k of W's parts and of x's
// (split into bfloat16 beforehand) into shared memory with cp.async, and its warps take the
// fragments from there with ldmatrix: x crosses L2 once per block's rows of W, and each row of W is
// read 128-256 bytes a part at a time. 8 warps: groups of 32 rows of W x shares of each stage's k,
// the shares added in a fixed tree at the end. Up to 32 rows two blocks an SM, two stages each
// (at 24-32 rows one block with more stages, or 64 k a stage with 64 rows, was slower; docs/
// PERFORMANCE.md has the figures); from 33 rows 128 rows of W a block halve x's reads, faster
// than two tiles of 32 rows. At that shape (64 k a stage: 128-byte rows,
// wgmma's swizzle), built for sm_90a, each half of the block (a warpgroup) instead forms its 64
// rows' products for the whole stage with wgmma, which measured faster. Its stages are then the
// TMA's tiles, and from sm_90 one thread copies them (faster than every thread's copies); one
// block an SM with four stages keeps more of them in flight than two blocks of two.
// Every stage's products are summed apart and added to float32 totals, so that a longer split of
// k costs no accuracy.

constexpr int kStagedWarps = 8;
constexpr int kStagedWarpRowsW = 32;  // rows of W per warp: two 16-row tiles
constexpr int kStagedRotate = 4;      // stages each block starts further on than the block before
// Shared memory a block may take so that n fit an SM of sm_90 (228 KiB, 1 KiB reserved each).
constexpr int staged_smem_budget(int blocks_per_multiprocessor) {
  return (228 / blocks_per_multiprocessor - 1) * 1024;
}

// kTilesX 8-row tiles of x per block (even: ldmatrix takes them in pairs), kRowsW rows of W
// per block, kK values of k a stage, kBlocks blocks an SM; as many stages as their share of
// shared memory holds. The warps: kRowGroups groups of 32 rows of W x kKGroups shares of each
// stage's k.
template <int kTilesXOf, int kRowsWOf = 64, int kKOf = 128, int kBlocksOf = 2>
struct StagedShape {
  static constexpr int kTilesX = kTilesXOf;
  static constexpr int kRows = 8 * kTilesX;
  static constexpr int kRowsW = kRowsWOf;
  static constexpr int kK = kKOf;
  static constexpr int kBlocksPerMultiprocessor = kBlocksOf;
  static constexpr int kRowGroups = kRowsW / kStagedWarpRowsW;
  static constexpr int kKGroups = kStagedWarps / kRowGroups;
  static constexpr int kWBytes = kRowsW * kK * 2;              // one part of W, one stage
  static constexpr int kXBytes = kRows * kK * 2;               // one part of x, one stage
  static constexpr int kStageBytes = 2 * (kWBytes + kXBytes);  // hi and lo
  static constexpr int kBarrierBytes = 64;                     // the TMA's mbarriers, 8 at most
  static constexpr int kStages = (staged_smem_budget(kBlocksOf) - kBarrierBytes) / kStageBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + kBarrierBytes;
  // Stages of 64 k: 128-byte rows, the TMA's tiles (tma.cuh) in the layout staged_offset gives.
  static constexpr bool kTmaTiles = kK * 2 == kTileRowBytes;
  static_assert(kTilesX % 2 == 0 && kStages >= 2 && kStages * 8 <= kBarrierBytes);
  static_assert(kRowGroups * kKGroups == kStagedWarps && kRowsW % kStagedWarpRowsW == 0);
  static_assert(kK % (16 * kKGroups) == 0 && kK / 8 >= 8);  // every k group a step; swizzle
};

// Byte offset of 16-byte piece `piece` of row `row` in a stage's [rows][kK] tile: pieces
// XOR-swizzled by the row, so that 8 consecutive rows' same piece fall in different banks.
template <int kK>
__device__ __forceinline__ uint32_t staged_offset(int row, int piece) {
  return uint32_t(row * kK * 2 + ((piece ^ (row & 7)) * 16));
}

// The TMA's descriptions of the staged kernel's four matrices (describe_matrix).
struct StagedMaps {
  CUtensorMap w_hi, w_lo, x_hi, x_lo;
};

// x_hi, x_lo [rows, k_in]: float32 x's bfloat16 parts (split_bf16); w_hi, w_lo [n_out, k_in]: W's;
// the epilogue and out float32. Block (x, y, z): kRowsW rows of W, the y-th split of k, kRows
// rows of x; out and partial as skinny_tensor_core_kernel. kTileCopies (Shape::kTmaTiles only): the
// stages copied by the TMA from the maps of the four (tiles of kRowsW and kRows rows), where the
// kernel is built for sm_90 on; otherwise the maps are not read.
template <class Shape, class ChainT, bool kTileCopies>
__global__ void __launch_bounds__(kStagedWarps * 32, Shape::kBlocksPerMultiprocessor)
    skinny_staged_kernel(const __nv_bfloat16* __restrict__ x_hi,
                         const __nv_bfloat16* __restrict__ x_lo,
                         const __nv_bfloat16* __restrict__ w_hi,
                         const __nv_bfloat16* __restrict__ w_lo, float* __restrict__ out,
                         float* __restrict__ partial, int64_t rows, int64_t n_out, int64_t k_in,
                         int64_t k_per_split, const __grid_constant__ StagedMaps maps,
                         const __grid_constant__ ColumnEpilogue<float, ChainT> epilogue,
                         const __grid_constant__ split::SplitOperands split) {
  constexpr int kTilesX = Shape::kTilesX, kRows = Shape::kRows, kStages = Shape::kStages;
  constexpr int kK = Shape::kK, kRowsW = Shape::kRowsW, kKGroups = Shape::kKGroups;
  // Warpgroup MMA where the GPU code has it and the tiles are its 128-byte swizzled rows: each
  // half of the block (a warpgroup) forms its 64 rows of W's products over the whole stage.
  constexpr bool kWarpgroupMma = kHasWarpgroupMma && kK == 64 && kRowsW == 128 && kRows == 64;
  constexpr bool kTma = kTileCopies && Shape::kTmaTiles && kHasTensorCopies;
  extern __shared__ __align__(1024) unsigned char staged[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;
  const int row_group = warp / kKGroups, k_group = warp % kKGroups;
  const int64_t n0 = int64_t(blockIdx.x) * kRowsW;
  const int64_t m0 = int64_t(blockIdx.z) * kRows;
  const KWalk<kK, kStagedRotate> walk(k_in, k_per_split);
  const uint32_t base = shared_address(staged);

  auto w_tile = [&](int stage, int part) {
    return base + stage * Shape::kStageBytes + part * Shape::kWBytes;
  };
  auto x_tile = [&](int stage, int part) {
    return base + stage * Shape::kStageBytes + 2 * Shape::kWBytes + part * Shape::kXBytes;
  };
  // Step t of the walk over k: its stage's slot.
  auto stage_of = [&](int64_t t) { return int(t % kStages); };
  // Step t's tiles of W's parts and of x's, rows past the last and k past the split's end as zeros.
  using WSource = std::conditional_t<kTma, NoTileSource,
                                     TileSource<__nv_bfloat16, kRowsW, kK / 8, kStagedWarps * 32>>;
  using XSource = std::conditional_t<kTma, NoTileSource,
                                     TileSource<__nv_bfloat16, kRows, kK / 8, kStagedWarps * 32>>;
  [[maybe_unused]] const WSource w_source(n0, n_out, k_in);
  [[maybe_unused]] const XSource x_source(m0, rows, k_in);
  // With the TMA one thread copies each tile, counted in on its stage's mbarrier (after the
  // stages).
  const StageBarriers<kStages> barriers{base + kStages * Shape::kStageBytes};
  auto copy_w = [&](int64_t t) {
    if constexpr (kTma) {
      if (threadIdx.x != 0) return;
      expect_bytes(barriers.of(t), Shape::kStageBytes);  // the stage's x tiles included
      copy_tile(w_tile(stage_of(t), 0), maps.w_hi, n0, walk.k_of(t), barriers.of(t));
      copy_tile(w_tile(stage_of(t), 1), maps.w_lo, n0, walk.k_of(t), barriers.of(t));
    } else {
      w_source.copy(w_tile(stage_of(t), 0), w_hi, walk.k_of(t), walk.end, staged_offset<kK>);
      w_source.copy(w_tile(stage_of(t), 1), w_lo, walk.k_of(t), walk.end, staged_offset<kK>);
    }
  };
  auto copy_x = [&](int64_t t) {
    if constexpr (kTma) {
      if (threadIdx.x != 0) return;
      copy_tile(x_tile(stage_of(t), 0), maps.x_hi, m0, walk.k_of(t), barriers.of(t));
      copy_tile(x_tile(stage_of(t), 1), maps.x_lo, m0, walk.k_of(t), barriers.of(t));
    } else {
      x_source.copy(x_tile(stage_of(t), 0), x_hi, walk.k_of(t), walk.end, staged_offset<kK>);
      x_source.copy(x_tile(stage_of(t), 1), x_lo, walk.k_of(t), walk.end, staged_offset<kK>);
    }
  };
  if constexpr (kTma) barriers.init();

  // The rows and pieces this lane addresses for ldmatrix: of W (A: matrices rows 0-7 / 8-15 x k
  // 0-7 / 8-15), of x (B: tile j, k 0-7 / 8-15, then tile j + 1).
  const int matrix = lane / 8, matrix_row = lane % 8;
  const int a_row = row_group * kStagedWarpRowsW + (matrix % 2) * 8 + matrix_row,
            a_piece = matrix / 2;
  const int b_row = (matrix / 2) * 8 + matrix_row, b_piece = matrix % 2;

  // Each stage's products are summed by the tensor cores, then added to these float32 totals:
  // the tensor cores' sums lose bits as they grow, and sums over a whole split of k (thousands
  // of terms) had several times the error against float64 (figures in PERFORMANCE.md).
  float acc[2][kTilesX][4] = {};
  [[maybe_unused]] float warpgroup_acc[kWarpgroupMma ? 32 : 1] = {};
  const int warpgroup = warp / 4;
  // The first stages' W on its way while the split of x (the kernel before this one) ends; the
  // first commit group holds them all, so each stage's group still completes it.
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < walk.steps) copy_w(s);
  }
  wait_for_previous_kernel();
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < walk.steps) copy_x(s);
    if constexpr (!kTma) copy_async_commit();  // the TMA's copies count on the mbarriers
  }
  for (int64_t t = 0; t < walk.steps; ++t) {
    if constexpr (kTma) {
      barriers.wait(t);
    } else {
      copy_async_wait<kStages - 2>();
      if constexpr (kWarpgroupMma) fence_shared_for_async_reads();
    }
    __syncthreads();  // stage t arrived for every thread; stage t - 1 is read by no warp
    if (t + kStages - 1 < walk.steps) {
      copy_w(t + kStages - 1);
      copy_x(t + kStages - 1);
    }
    if constexpr (!kTma) copy_async_commit();
    const int stage = stage_of(t);
    if constexpr (kWarpgroupMma) {
      // bf16x3's products, smallest first, for each 16 k: the tiles' descriptors step 32 bytes
      // along their rows; the first starts the stage's sum. Waited for before the next stage's
      // barrier, after which its slot is overwritten.
      float stage_sum[32];
      warpgroup_mma_fence();
#pragma unroll
      for (int k16 = 0; k16 < kK / 16; ++k16) {
        // Bytes into the tiles: this warpgroup's 64 rows of W, and the 16 k's first.
        const uint32_t w_at = warpgroup * 64 * kK * 2 + k16 * 32, x_at = k16 * 32;
        const uint64_t a_hi = swizzled_tile_descriptor(w_tile(stage, 0) + w_at);
        const uint64_t a_lo = swizzled_tile_descriptor(w_tile(stage, 1) + w_at);
        const uint64_t b_hi = swizzled_tile_descriptor(x_tile(stage, 0) + x_at);
        const uint64_t b_lo = swizzled_tile_descriptor(x_tile(stage, 1) + x_at);
        warpgroup_mma<64, __nv_bfloat16>(stage_sum, a_hi, b_lo, k16 > 0);
        warpgroup_mma<64, __nv_bfloat16>(stage_sum, a_lo, b_hi, true);
        warpgroup_mma<64, __nv_bfloat16>(stage_sum, a_hi, b_hi, true);
      }
      warpgroup_commit();
      warpgroup_wait<0>();
#pragma unroll
      for (int i = 0; i < 32; ++i) warpgroup_acc[i] += stage_sum[i];
    } else {
      float stage_sum[2][kTilesX][4] = {};
#pragma unroll
      for (int k16 = k_group; k16 < kK / 16; k16 += kKGroups) {
        uint32_t a[2][2][4];  // [hi, lo][tile of W]
#pragma unroll
        for (int p = 0; p < 2; ++p)
#pragma unroll
          for (int i = 0; i < 2; ++i)
            load_matrices(a[p][i],
                          w_tile(stage, p) + staged_offset<kK>(a_row + 16 * i, 2 * k16 + a_piece));
#pragma unroll
        for (int j = 0; j < kTilesX; j += 2) {
          uint32_t b[2][4];  // [hi, lo]: tile j's two halves of k, then tile j + 1's
#pragma unroll
          for (int p = 0; p < 2; ++p)
            load_matrices(b[p],
                          x_tile(stage, p) + staged_offset<kK>(8 * j + b_row, 2 * k16 + b_piece));
#pragma unroll
          for (int jj = 0; jj < 2; ++jj)
#pragma unroll
            for (int i = 0; i < 2; ++i) {  // bf16x3's products, smallest first
              float(&d)[4] = stage_sum[i][j + jj];
              mma_m16n8k16<__nv_bfloat16>(d, a[0][i], b[1][2 * jj], b[1][2 * jj + 1]);
              mma_m16n8k16<__nv_bfloat16>(d, a[1][i], b[0][2 * jj], b[0][2 * jj + 1]);
              mma_m16n8k16<__nv_bfloat16>(d, a[0][i], b[0][2 * jj], b[0][2 * jj + 1]);
            }
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < kTilesX; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[i][j][c] += stage_sum[i][j][c];
    }
  }
  if constexpr (!kTma) copy_async_wait<0>();
  allow_next_kernel_start();  // the reduce kernel, where k is split, may launch now
  __syncthreads();
  float(*totals)[kRowsW + 1] = reinterpret_cast<float(*)[kRowsW + 1]>(staged);
  static_assert(kRows * (kRowsW + 1) * 4 <= Shape::kSmemBytes);
  if constexpr (kWarpgroupMma) {
    // Each warpgroup's totals, laid out [row of x][row of W] (warpgroup_mma's layout).
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      totals[8 * (i / 4) + 2 * quad + i % 2]
            [64 * warpgroup + 16 * (warp % 4) + group + 8 * (i / 2 % 2)] = warpgroup_acc[i];
    }
  } else {
    // The k groups' sums added in a fixed tree through shared memory (each row group its own part
    // of it); k group 0 of each row group ends with its rows' totals.
    constexpr int kSums = 2 * kTilesX * 4;
    constexpr int kExchangeFloats = (kKGroups / 2) * kSums * 32;  // a row group's
    static_assert(Shape::kRowGroups * kExchangeFloats * 4 <= Shape::kSmemBytes);
    auto* exchange = reinterpret_cast<float*>(staged) + row_group * kExchangeFloats;
    add_across_warps<kKGroups, kSums>(&acc[0][0][0], exchange, k_group, lane);
    // Totals laid out [row of x][row of W]; accumulator c of tile (i, j) is row 32 row_group +
    // 16 i + group (+ 8 for c >= 2) of W, row 8 j + 2 quad (+ 1 for odd c) of x.
    if (k_group == 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < kTilesX; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            totals[8 * j + 2 * quad + c % 2]
                  [row_group * kStagedWarpRowsW + 16 * i + group + 8 * (c / 2)] = acc[i][j][c];
    }
  }
  __syncthreads();
  store_totals<kRows, kRowsW, kStagedWarps * 32>([&](int m, int r) { return totals[m][r]; }, m0, n0,
                                                 rows, n_out, epilogue, split, out, partial);
}

}  // namespace skinny
}  // namespace cuda
}  // namespace fusedlinear
