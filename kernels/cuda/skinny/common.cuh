// What every skinny kernel (skinny_linear.cu) shares: the walk over k, the epilogue and the store
// of each total, the lanes' and warps' sums added in a fixed order, 16-byte cp.async copies of
// tiles into shared memory, and the kernel that adds the splits of k.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/math/bf16_split.h"

namespace fusedlinear {
namespace cuda {
namespace skinny {

constexpr int kLoadsPerLane = 8;  // 16-byte loads of W in flight per lane per chunk
// Each block starts its loop over k this many chunks further on than the block before it
// (rotated_chunk): measured best of 0-4 (docs/PERFORMANCE.md).
constexpr int kRotateChunks = 4;

// The chunk a loop's c-th step reads when it starts `rotate` chunks in and wraps around: blocks
// that start together then read different DRAM channels and banks, where rows of W 2^n bytes
// apart, all read at the same k, would crowd into a few.
__device__ __forceinline__ int64_t rotated_chunk(int64_t c, int64_t rotate, int64_t chunks) {
  return c + rotate < chunks ? c + rotate : c + rotate - chunks;
}

// A block's walk over its split of k (blockIdx.y; k_per_split values a split) in steps of kStep
// values, starting blockIdx.x * kRotateSteps steps in and wrapping around (rotated_chunk).
template <int kStep, int kRotateSteps>
struct KWalk {
  int64_t begin, end;  // the split's k: [begin, end)
  int64_t steps;       // of kStep values, the last maybe partial
  int64_t rotate;      // steps in at the start
  __device__ KWalk(int64_t k_in, int64_t k_per_split)
      : begin(int64_t(blockIdx.y) * k_per_split),
        end(begin + k_per_split < k_in ? begin + k_per_split : k_in),
        steps(ceil_div(end - begin, kStep)),
        rotate(steps > 0 ? (int64_t(blockIdx.x) * kRotateSteps) % steps : 0) {}
  // The first k of the walk's t-th step.
  __device__ int64_t k_of(int64_t t) const {
    return begin + rotated_chunk(t, rotate, steps) * kStep;
  }
};

// The epilogue of output (row, n)'s total, a split-mode total that is inf or NaN first made
// eager's (split::eager_sum_if_not_finite; `split` names no parts for the other products).
template <class Epilogue>
__device__ __forceinline__ auto epilogue_of_total(const Epilogue& epilogue,
                                                  const split::SplitOperands& split, float total,
                                                  int64_t row, int64_t n) {
  return epilogue(split::eager_sum_if_not_finite(split, row, n, total), n);
}

// Stores a block's totals for rows m0... of x and n0... of W, total_of(m, r) that of rows m0 + m
// and n0 + r: the epilogue and the output (epilogue_of_total), or with several splits of k the
// partial sums of split blockIdx.y. Consecutive threads take consecutive outputs.
template <int kRowsX, int kRowsW, int kThreads, typename T, class TotalOf, class Epilogue>
__device__ __forceinline__ void store_totals(TotalOf&& total_of, int64_t m0, int64_t n0,
                                             int64_t rows, int64_t n_out, const Epilogue& epilogue,
                                             const split::SplitOperands& split, T* out,
                                             float* partial) {
  for (int index = threadIdx.x; index < kRowsX * kRowsW; index += kThreads) {
    const int m = index / kRowsW, r = index % kRowsW;
    const int64_t row = m0 + m, n = n0 + r;
    if (row >= rows || n >= n_out) continue;
    const float total = total_of(m, r);
    if (partial) {
      partial[(int64_t(blockIdx.y) * rows + row) * n_out + n] = total;
    } else {
      out[row * n_out + n] = epilogue_of_total(epilogue, split, total, row, n);
    }
  }
}

// Adds kCount sums a lane (a power of two) over the warp's lanes in a fixed order, by halving: at
// each lane offset partners swap halves of what they hold, each keeping the half its offset bit
// selects and adding the partner's, until each sum lives in one lane; the offsets left add in a
// butterfly. 31 shuffles for 32 sums instead of a butterfly's 160, and each total ends in its own
// lane, so the epilogue runs once a total, not once a lane. Lane l then holds in sums[j] the total
// of index (l / max(1, 32 / kCount)) * max(1, kCount / 32) + j, for j < max(1, kCount / 32).
template <int kCount, int kOffset>
__device__ __forceinline__ void add_across_lanes(float* sums, int lane) {
  if constexpr (kOffset > 0) {
    if constexpr (kCount > 1) {
      constexpr int kHalf = kCount / 2;
      const bool upper = lane & kOffset;
#pragma unroll
      for (int i = 0; i < kHalf; ++i) {
        const float send = upper ? sums[i] : sums[i + kHalf];
        const float keep = upper ? sums[i + kHalf] : sums[i];
        sums[i] = keep + __shfl_xor_sync(0xffffffffu, send, kOffset);
      }
      add_across_lanes<kHalf, kOffset / 2>(sums, lane);
    } else {
      sums[0] += __shfl_xor_sync(0xffffffffu, sums[0], kOffset);  // partners add the same two
      add_across_lanes<1, kOffset / 2>(sums, lane);
    }
  }
}

// cp.async exists from sm_80; compiled for older GPUs, kernels that would stage x read it where it
// lies instead.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kHasCopyAsync = false;
#else
constexpr bool kHasCopyAsync = true;
#endif

// 16 bytes from global src to shared dst, zeros where !inside (src then not read).
__device__ __forceinline__ void copy16_async(uint32_t dst, const void* src, bool inside) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(inside ? 16 : 0));
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;");
#endif
}
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
#endif
}

// One thread's share of copying tiles of kTileRows rows x kPiecesPerRow 16-byte pieces (each
// tile a stage's k of rows row0... of an E [*, ld] matrix) into shared memory: the block's
// kThreads threads take consecutive pieces in turn, each the same piece of every kRowStep-th row,
// so where its rows lie is worked out once and each stage adds only its k. (A loop over pieces of
// a count the compiler could not know, each address worked out in full, took most of the staged
// kernel's instructions.)
template <typename E, int kTileRows, int kPiecesPerRow, int kThreads>
struct TileSource {
  static constexpr int kPerPiece = 16 / int(sizeof(E));
  static constexpr int kRowStep = kThreads / kPiecesPerRow;
  static constexpr int kCount = kTileRows / kRowStep;  // pieces a thread copies a tile
  static_assert(kThreads % kPiecesPerRow == 0 && kTileRows % kRowStep == 0,
                "every thread copies the same piece of as many rows");
  int row, piece;       // the thread's first row in the tile, and its piece of each row
  int64_t at[kCount];   // where its rows start in the matrix, at k = 0
  bool inside[kCount];  // rows before row_end; the rest are copied as zeros
  __device__ TileSource(int64_t row0, int64_t row_end, int64_t ld)
      : row(int(threadIdx.x) / kPiecesPerRow), piece(int(threadIdx.x) % kPiecesPerRow) {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      const int64_t r = row0 + row + j * kRowStep;
      inside[j] = r < row_end;
      at[j] = (inside[j] ? r : 0) * ld;
    }
  }
  // Copies k0... of m's rows into the tile at `tile` (k at or past k_end as zeros; k_end a
  // multiple of kPerPiece); offset(row, piece) is where a piece lies in the tile, in bytes.
  template <class Offset>
  __device__ __forceinline__ void copy(uint32_t tile, const E* m, int64_t k0, int64_t k_end,
                                       Offset&& offset) const {
    const int64_t k = k0 + piece * kPerPiece;
    const bool k_inside = k < k_end;
    const E* from = m + (k_inside ? k : 0);  // in the matrix even where nothing is read
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      copy16_async(tile + offset(row + j * kRowStep, piece), from + at[j], inside[j] && k_inside);
    }
  }
};

// Stands in for a TileSource where a kernel's threads copy nothing themselves.
struct NoTileSource {
  __device__ NoTileSource(int64_t, int64_t, int64_t) {}
};

// out[i] = epilogue(sum over the splits, in order, of partial[split][i]) for i < count
// (epilogue_of_total). Launched with launch_dependent after the kernel that writes partial.
template <typename T, class ChainT>
__global__ void skinny_reduce_kernel(const float* __restrict__ partial, int splits,
                                     T* __restrict__ out, int64_t count, int64_t n_out,
                                     const __grid_constant__ ColumnEpilogue<T, ChainT> epilogue,
                                     const __grid_constant__ split::SplitOperands split) {
  wait_for_previous_kernel();  // launched as the skinny kernel's dependent: its partial sums
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    float sum = partial[i];
    for (int s = 1; s < splits; ++s) sum += partial[s * count + i];
    out[i] = epilogue_of_total(epilogue, split, sum, i / n_out, i % n_out);
  }
}

// Adds the sums of kMembers warps that hold the same outputs (kSums a lane, `sums`), in a fixed
// tree, upper half onto lower half, through `exchange` (kMembers / 2 * kSums * 32 floats of
// shared memory); member 0 ends with the totals. Every thread of the block calls it.
template <int kMembers, int kSums>
__device__ __forceinline__ void add_across_warps(float* sums, float* exchange, int member,
                                                 int lane) {
  for (int half = kMembers / 2; half > 0; half /= 2) {
    if (member >= half && member < 2 * half) {
#pragma unroll
      for (int v = 0; v < kSums; ++v) exchange[((member - half) * kSums + v) * 32 + lane] = sums[v];
    }
    __syncthreads();
    if (member < half) {
#pragma unroll
      for (int v = 0; v < kSums; ++v) sums[v] += exchange[(member * kSums + v) * 32 + lane];
    }
    __syncthreads();
  }
}

}  // namespace skinny
}  // namespace cuda
}  // namespace fusedlinear
