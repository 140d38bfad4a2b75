// The tensor-core skinny kernel: out = epilogue(x W^T) for a few rows of x and 16-bit W (or W's
// bfloat16 parts), mma.sync m16n8k16 with every fragment taken from the lane's own 16-byte loads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/skinny/common.cuh"
#include "kernels/math/bf16_split.h"

namespace fusedlinear {
namespace cuda {
namespace skinny {

// y^T = W x^T in mma.sync m16n8k16 tiles: W is the A operand (16 rows of W: outputs), x the B
// operand (8 rows of x). Lane (group, quad) loads 8 consecutive k of its rows with one 16-byte
// load; inside each 32-wide step of k, W's and x's k are taken in the same permuted order (a dot
// product does not depend on it), so every fragment comes straight from the lane's own loads,
// with no shuffle and no shared memory. The block's warps take consecutive chunks of k of the
// same 32 rows, so 0.5-1 KB of each row is read at once: warps owning different rows at the same
// k (x then shared in L1) measured slower at few rows: each row's reads in flight shrink.

// As kRotateChunks, in the tensor-core kernel's chunks (measured best of 0, 1, 3, 5, 8, 12, 16).
constexpr int kMmaRotateChunks = 12;
constexpr int kMmaWarps = 8;                // per block, each a share of k of the same rows of W
constexpr int kMmaTilesW = 2;               // 16-row tiles of W per block
constexpr int kMmaRowsW = 16 * kMmaTilesW;  // rows of W per block

// kTilesX 8-row tiles of x per block; kSteps 32-wide steps of k per chunk (kLoads loads of W in
// flight per lane: 2 rows per tile per part). hi and lo together take 16 at narrow tiles, where
// they measured faster; one part measured slower with 16 than with 8 (docs/PERFORMANCE.md).
template <bool kHasLo, int kTilesXOf>
struct MmaShape {
  static constexpr int kTilesX = kTilesXOf;
  static constexpr int kRows = 8 * kTilesX;
  static constexpr int kParts = kHasLo ? 2 : 1;
  static constexpr int kLoads = kHasLo && kTilesX <= 2 ? 16 : kLoadsPerLane;
  static constexpr int kSteps = kLoads / (kMmaTilesW * 2 * kParts);
  static constexpr int kChunk = 32 * kSteps;
};

// Four 32-bit words: 8 16-bit values, as one 16-byte load brings them.
struct alignas(16) Words {
  uint32_t v[4];
};

// Four 8x8 matrices of 16-bit values from shared memory; lane l gives the address of row l % 8
// of matrix l / 8.
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], uint32_t address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// d += a b for one m16n8k16 tile (float32 accumulators); a and b hold WT pairs.
template <typename WT>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<WT, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  __trap();  // launched only on sm_80 and newer (supports_tensor_cores)
#endif
}

// split::split_bf16 of two floats as bfloat16 pairs (hi only where !kHasLo). The hardware's
// rounding gives the same bits for finite values whose hi part stays finite; the rest (inf, NaN,
// values that round up to inf) take split_bf16 itself.
template <bool kHasLo>
__device__ __forceinline__ void split_pair(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = pack_pair<__nv_bfloat16>(a, b);
  if constexpr (kHasLo) {
    const float2 rounded = unpack_pair(hi, __nv_bfloat16{});
    lo = pack_pair<__nv_bfloat16>(a - rounded.x, b - rounded.y);
  }
  if ((hi & 0x7f80u) == 0x7f80u || (hi & 0x7f800000u) == 0x7f800000u) {
    const split::Bf16Pair pa = split::split_bf16(a), pb = split::split_bf16(b);
    hi = pa.hi | uint32_t(pb.hi) << 16;
    lo = pa.lo | uint32_t(pb.lo) << 16;
  }
}

// x's 8 values at p (16-byte aligned; zeros where !inside) as the B operand's pairs: x's own
// 16-bit values, or float32 x's bfloat16 hi part (and lo part where kHasLo).
template <typename T, bool kHasLo>
__device__ __forceinline__ void x_pairs(const T* p, bool inside, Words& hi, Words& lo) {
  if constexpr (std::is_same_v<T, float>) {
    float4 v[2] = {};
    if (inside) {
      v[0] = reinterpret_cast<const float4*>(p)[0];
      v[1] = reinterpret_cast<const float4*>(p)[1];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      split_pair<kHasLo>(v[h].x, v[h].y, hi.v[2 * h], lo.v[2 * h]);
      split_pair<kHasLo>(v[h].z, v[h].w, hi.v[2 * h + 1], lo.v[2 * h + 1]);
    }
  } else {
    hi = inside ? *reinterpret_cast<const Words*>(p) : Words{};
  }
}

// x [rows, k_in] of T, W [n_out, k_in] of WT (and W's lo part where kHasLo: then T is float32
// and x is split as W was, for x_lo W_hi + x_hi W_lo + x_hi W_hi, smallest first), out [rows,
// n_out]. Block (x, y, z): kMmaRowsW rows of W, the y-th split of k (a multiple of kChunk), kRows
// rows of x; its warps take the split's chunks in turn. With one split the block applies the
// epilogue and writes out; with several it writes its sums to partial[split][row][n].
template <typename T, typename WT, bool kHasLo, class Shape, class ChainT>
__global__ void __launch_bounds__(kMmaWarps * 32, 2)
    skinny_tensor_core_kernel(const T* __restrict__ x, const WT* __restrict__ w,
                              const __nv_bfloat16* __restrict__ w_lo, T* __restrict__ out,
                              float* __restrict__ partial, int64_t rows, int64_t n_out,
                              int64_t k_in, int64_t k_per_split,
                              const __grid_constant__ ColumnEpilogue<T, ChainT> epilogue,
                              const __grid_constant__ split::SplitOperands split) {
  constexpr int kTilesX = Shape::kTilesX, kSteps = Shape::kSteps, kChunk = Shape::kChunk;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;  // the fragment's row, and its 8 k of a step
  const int64_t n0 = int64_t(blockIdx.x) * kMmaRowsW;
  const int64_t m0 = int64_t(blockIdx.z) * Shape::kRows;
  const KWalk<kChunk, kMmaRotateChunks> walk(k_in, k_per_split);

  // This lane's rows: of W, group and group + 8 of each tile; of x, group of each tile (rows past
  // the last read the last row; their sums are not stored).
  int64_t w_offset[kMmaTilesW][2];
  bool w_inside[kMmaTilesW][2];
#pragma unroll
  for (int i = 0; i < kMmaTilesW; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = n0 + 16 * i + 8 * h + group;
      w_inside[i][h] = n < n_out;
      w_offset[i][h] = (w_inside[i][h] ? n : 0) * k_in + quad * 8;
    }
  }
  const T* x_rows[kTilesX];
#pragma unroll
  for (int j = 0; j < kTilesX; ++j) {
    const int64_t m = m0 + 8 * j + group;
    x_rows[j] = x + (m < rows ? m : rows - 1) * k_in + quad * 8;
  }

  // Launched as the dependent of the kernel before it (often the layer before, whose output x
  // is): this warp's first chunk of W asked of L2 while that kernel ends, then the wait for x.
  if (warp < walk.steps) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t k = walk.k_of(warp) + s * 32;
#pragma unroll
      for (int i = 0; i < kMmaTilesW; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (!w_inside[i][h] || k + quad * 8 >= walk.end) continue;
          prefetch_to_l2(w + w_offset[i][h] + k);
          if constexpr (kHasLo) prefetch_to_l2(w_lo + w_offset[i][h] + k);
        }
      }
    }
  }
  wait_for_previous_kernel();
  float acc[kMmaTilesW][kTilesX][4] = {};
  for (int64_t c = warp; c < walk.steps; c += kMmaWarps) {
    const int64_t k0 = walk.k_of(c);
    // This chunk's W first: its loads are all in flight before the first product.
    Words hi[kSteps][kMmaTilesW][2];
    [[maybe_unused]] Words lo[kSteps][kMmaTilesW][2];
    auto load = [&](int s, int i, int h) {
      const int64_t k = k0 + s * 32;
      const bool inside = w_inside[i][h] && k + quad * 8 < walk.end;
      hi[s][i][h] = inside ? *reinterpret_cast<const Words*>(w + w_offset[i][h] + k) : Words{};
      if constexpr (kHasLo) {
        lo[s][i][h] = inside ? *reinterpret_cast<const Words*>(w_lo + w_offset[i][h] + k) : Words{};
      }
    };
    // Each row's steps back to back for hi + lo; every row's first step, then their second, for
    // one part: each order measured faster where it is used (figures in PERFORMANCE.md).
    if constexpr (kHasLo) {
#pragma unroll
      for (int i = 0; i < kMmaTilesW; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int s = 0; s < kSteps; ++s) load(s, i, h);
    } else {
#pragma unroll
      for (int s = 0; s < kSteps; ++s)
#pragma unroll
        for (int i = 0; i < kMmaTilesW; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) load(s, i, h);
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t k = k0 + s * 32;
      const bool k_inside = k + quad * 8 < walk.end;
      // The step's x for every tile, read before the first product (its latency, from L2 for
      // wide tiles, is then paid once a step, not once a tile).
      Words x_hi[kTilesX];
      [[maybe_unused]] Words x_lo[kTilesX];
#pragma unroll
      for (int j = 0; j < kTilesX; ++j) {
        x_pairs<T, kHasLo>(x_rows[j] + k, k_inside, x_hi[j], x_lo[j]);
      }
#pragma unroll
      for (int j = 0; j < kTilesX; ++j) {
        // The step's two k16 products: words 0, 1 of each load, then words 2, 3.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int lo_k = 2 * half, hi_k = 2 * half + 1;
#pragma unroll
          for (int i = 0; i < kMmaTilesW; ++i) {
            const uint32_t a_hi[4] = {hi[s][i][0].v[lo_k], hi[s][i][1].v[lo_k], hi[s][i][0].v[hi_k],
                                      hi[s][i][1].v[hi_k]};
            if constexpr (kHasLo) {
              const uint32_t a_lo[4] = {lo[s][i][0].v[lo_k], lo[s][i][1].v[lo_k],
                                        lo[s][i][0].v[hi_k], lo[s][i][1].v[hi_k]};
              mma_m16n8k16<WT>(acc[i][j], a_hi, x_lo[j].v[lo_k], x_lo[j].v[hi_k]);
              mma_m16n8k16<WT>(acc[i][j], a_lo, x_hi[j].v[lo_k], x_hi[j].v[hi_k]);
            }
            mma_m16n8k16<WT>(acc[i][j], a_hi, x_hi[j].v[lo_k], x_hi[j].v[hi_k]);
          }
        }
      }
    }
  }

  allow_next_kernel_start();  // the reduce kernel, where k is split, may launch now
  // The warps' sums added in a fixed tree through shared memory; warp 0 ends with the block's
  // totals.
  constexpr int kSums = kMmaTilesW * kTilesX * 4;
  __shared__ float exchange[kMmaWarps / 2][kSums][32];
  add_across_warps<kMmaWarps, kSums>(&acc[0][0][0], &exchange[0][0][0], warp, lane);
  // Warp 0's totals laid out [row of x][row of W], then the epilogue and stores spread over the
  // block, consecutive threads on consecutive outputs. Accumulator c of tile (i, j) is row
  // 16 i + group (+ 8 for c >= 2) of W, row 8 j + 2 quad (+ 1 for odd c) of x.
  float(*totals)[kMmaRowsW + 1] = reinterpret_cast<float(*)[kMmaRowsW + 1]>(&exchange[0][0][0]);
  static_assert(Shape::kRows * (kMmaRowsW + 1) <= (kMmaWarps / 2) * kSums * 32);
  if (warp == 0) {
#pragma unroll
    for (int i = 0; i < kMmaTilesW; ++i)
#pragma unroll
      for (int j = 0; j < kTilesX; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          totals[8 * j + 2 * quad + c % 2][16 * i + group + 8 * (c / 2)] = acc[i][j][c];
  }
  __syncthreads();
  store_totals<Shape::kRows, kMmaRowsW, kMmaWarps * 32>([&](int m, int r) { return totals[m][r]; },
                                                        m0, n0, rows, n_out, epilogue, split, out,
                                                        partial);
}

}  // namespace skinny
}  // namespace cuda
}  // namespace fusedlinear
