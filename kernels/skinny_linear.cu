// Skinny linear layers fused with their epilogue, for inputs of few rows (batch 1-64):
//
//   out[m, n] = Activations((sum_k x[m, k] W[n, k] + bias[n]) + shift[n])
//
// W [n, k] (row-major: output-major, as nn.Linear keeps it) is read once, straight from memory,
// with 16-byte loads, a chunk of k at a time with all of a chunk's loads in flight at once; x is
// small and stays on chip, and the epilogue runs in registers before the one store of each
// output. Two kernels share that plan:
//   - float32 W (and 16-bit W where rows are not 16-byte aligned or the GPU predates sm_80):
//     float32 FMAs on the CUDA cores. Each warp owns kWarpRows rows of W; each lane sums its
//     own k's, and the warp's lanes are added in a fixed order (add_across_lanes). x is read
//     where it lies (L1 and L2), or at the 4- and 8-row tiles staged a chunk at a time through
//     shared memory (SkinnyShape::kStageX).
//   - 16-bit W (16-bit models, and bfloat16 parts of float32 W): mma.sync on the tensor cores,
//     float32 accumulation. A block owns 32 rows of W; its warps share k and their sums are
//     added in a fixed tree through shared memory.
// A third, for bf16x3 from 9 rows, stages W's parts and x's through shared memory instead, so
// that x crosses L2 once per 64 or 128 rows of W (skinny_staged_kernel), its products by ldmatrix
// and mma.sync, or from 33 rows, built for sm_90a, by warpgroup MMA (wgmma) straight from shared
// memory; it is launched to start while the split of x before it ends (dependent_launch.cuh), as
// is the reduce of split k. A fourth, for float32 W from 9 rows, stages W and x the same way and
// forms its products with float32 FMAs, each lane summing 8 rows of W against 4 of x
// (skinny_lane_rows_kernel). From sm_90 the TMA copies these two kernels' stages (tma.cuh: one
// thread a stage, 128-byte-swizzled tiles), where each stage's rows are 128 bytes of k or split
// into such tiles: the lane-rows kernel always, the staged kernel at 64 k a stage (from 33 rows).
// Each block starts its walk over k at its own offset and wraps around (rotated_chunk), so blocks
// running together read different DRAM channels. Results are bitwise the same run to run. Where
// too few blocks would cover the rows of W to fill the GPU, k is split over blocks, the partial
// sums written to a workspace and added in split order by another kernel that applies the
// epilogue.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "bf16_split.h"
#include "dependent_launch.cuh"
#include "fused_epilogue.cuh"
#include "linear_cuda.h"
#include "tma.cuh"

namespace fusedlinear {
namespace cuda {
namespace {

constexpr int kWarps = 4;         // per block
constexpr int kLoadsPerLane = 8;  // 16-byte loads of W in flight per lane per chunk
// Each block starts its loop over k this many chunks further on than the block before it
// (rotated_chunk): measured best of 0-4 (docs/PERFORMANCE.md).
constexpr int kRotateChunks = 4;
constexpr int kLargestTile = 16;  // rows of x per block; more rows take more blocks (grid z)

// Rows of W per warp: each x value a lane reads (from L1) serves that many rows. The widest tile
// takes 8 (242 registers: its 256 blocks fill one wave at two an SM; with 4, 512 blocks ran in two
// waves); the 8-row tile 4, capped at 128 registers so that its 512 blocks fill one wave at four
// an SM (with 8 rows a warp at 168 registers, three an SM, it ran 1.1-1.5x slower: PERFORMANCE.md,
// row 50).
template <int kRows>
inline constexpr int kWarpRowsFor = kRows == 1              ? 2
                                    : kRows == kLargestTile ? 8
                                                            : 4;

// The shape of one instantiation: kVec elements of W per load (16 bytes, or 1 where W's rows are
// not 16-byte aligned), kParts loads per element group (2 with a lo part), kSteps loads per row
// per lane per chunk, kChunk values of k per chunk; kMinBlocks blocks an SM for the launch bounds.
// kStageX: x copied into shared memory (cp.async), kXStages chunks a block, each chunk's copy
// issued kXStages - 1 chunks ahead, instead of read from L1 by every warp: float32 W at the 4- and
// 8-row tiles, where it measured 0.5-3.4 us faster (at the 16-row tile 4-9 us slower; row 51).
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

template <typename T, class Activations>
__device__ __forceinline__ T finish(float sum, const T* bias, const T* shift, int64_t n) {
  if (bias) sum += to_float(bias[n]);
  if (shift) sum += to_float(shift[n]);
  return from_float<T>(Activations{}(sum));
}

// Stores a block's totals for rows m0... of x and n0... of W, total_of(m, r) that of rows m0 + m
// and n0 + r: the epilogue and the output, or with several splits of k the partial sums of split
// blockIdx.y. Consecutive threads take consecutive outputs.
template <typename T, class Activations, int kRowsX, int kRowsW, int kThreads, class TotalOf>
__device__ __forceinline__ void store_totals(TotalOf&& total_of, int64_t m0, int64_t n0,
                                             int64_t rows, int64_t n_out, const T* bias,
                                             const T* shift, T* out, float* partial) {
  for (int index = threadIdx.x; index < kRowsX * kRowsW; index += kThreads) {
    const int m = index / kRowsW, r = index % kRowsW;
    const int64_t row = m0 + m, n = n0 + r;
    if (row >= rows || n >= n_out) continue;
    const float total = total_of(m, r);
    if (partial) {
      partial[(int64_t(blockIdx.y) * rows + row) * n_out + n] = total;
    } else {
      out[row * n_out + n] = finish<T, Activations>(total, bias, shift, n);
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

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

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
// kernel's instructions: PERFORMANCE.md, row 58.)
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

// x [rows, k_in], W [n_out, k_in] (and W's lo part, bfloat16, where kHasLo), out [rows, n_out];
// T is x's, bias's, shift's and out's type. Block (x, y, z): kWarps * kWarpRows rows of W, the
// y-th split of k (k_per_split values, a multiple of kChunk), kRows rows of x. With one split the
// block applies the epilogue and writes out; with several it writes its sums to
// partial[split][row][n] for skinny_reduce_kernel.
template <typename T, typename WT, bool kHasLo, class Shape, class Activations>
__global__ void __launch_bounds__(kWarps * 32, Shape::kMinBlocks)
    skinny_linear_kernel(const T* __restrict__ x, const WT* __restrict__ w,
                         const __nv_bfloat16* __restrict__ w_lo, const T* __restrict__ bias,
                         const T* __restrict__ shift, T* __restrict__ out,
                         float* __restrict__ partial, int64_t rows, int64_t n_out, int64_t k_in,
                         int64_t k_per_split) {
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
      out[row * n_out + n] = finish<T, Activations>(sums[j], bias, shift, n);
    }
  }
}

// out[i] = epilogue(sum over the splits, in order, of partial[split][i]) for i < count. Launched
// with launch_dependent after the kernel that writes partial.
template <typename T, class Activations>
__global__ void skinny_reduce_kernel(const float* __restrict__ partial, int splits,
                                     const T* __restrict__ bias, const T* __restrict__ shift,
                                     T* __restrict__ out, int64_t count, int64_t n_out) {
  wait_for_previous_kernel();  // launched as the skinny kernel's dependent: its partial sums
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    float sum = partial[i];
    for (int s = 1; s < splits; ++s) sum += partial[s * count + i];
    out[i] = finish<T, Activations>(sum, bias, shift, i % n_out);
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

// ---- The tensor-core kernel ----
//
// y^T = W x^T in mma.sync m16n8k16 tiles: W is the A operand (16 rows of W: outputs), x the B
// operand (8 rows of x). Lane (group, quad) loads 8 consecutive k of its rows with one 16-byte
// load; inside each 32-wide step of k, W's and x's k are taken in the same permuted order (a dot
// product does not depend on it), so every fragment comes straight from the lane's own loads,
// with no shuffle and no shared memory. The block's warps take consecutive chunks of k of the
// same 32 rows, so 0.5-1 KB of each row is read at once: warps owning different rows at the same
// k (x then shared in L1) measured 1.5x slower at few rows.

// As kRotateChunks, in the tensor-core kernel's chunks (measured best of 0, 1, 3, 5, 8, 12, 16).
constexpr int kMmaRotateChunks = 12;
constexpr int kMmaWarps = 8;                // per block, each a share of k of the same rows of W
constexpr int kMmaTilesW = 2;               // 16-row tiles of W per block
constexpr int kMmaRowsW = 16 * kMmaTilesW;  // rows of W per block

// kTilesX 8-row tiles of x per block; kSteps 32-wide steps of k per chunk (kLoads loads of W in
// flight per lane: 2 rows per tile per part). hi and lo together take 16 at narrow tiles
// (measured 10% faster at 9-16 rows, where 16 loads of one part measured slower than 8).
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
template <typename T, typename WT, bool kHasLo, class Shape, class Activations>
__global__ void __launch_bounds__(kMmaWarps * 32, 2)
    skinny_mma_kernel(const T* __restrict__ x, const WT* __restrict__ w,
                      const __nv_bfloat16* __restrict__ w_lo, const T* __restrict__ bias,
                      const T* __restrict__ shift, T* __restrict__ out, float* __restrict__ partial,
                      int64_t rows, int64_t n_out, int64_t k_in, int64_t k_per_split) {
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
    // one part: each order measured 2-4% faster where it is used (PERFORMANCE.md, row 40).
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
  store_totals<T, Activations, Shape::kRows, kMmaRowsW, kMmaWarps * 32>(
      [&](int m, int r) { return totals[m][r]; }, m0, n0, rows, n_out, bias, shift, out, partial);
}

// ---- The staged tensor-core kernel ----
//
// For bf16x3 from 9 rows, where every block of the kernel above reads all of x, hi and lo, from
// L2. A block of 64 or 128 rows of W copies stages of 128 or 64 k of W's parts and of x's (split
// into bfloat16 beforehand) into shared memory with cp.async, and its warps take the fragments
// from there with ldmatrix: x crosses L2 once per block's rows of W, and each row of W is read
// 128-256 bytes a part at a time. 8 warps: groups of 32 rows of W x shares of each stage's k,
// the shares added in a fixed tree at the end. Up to 32 rows two blocks an SM, two stages each
// (PERFORMANCE.md, rows 42-43: at 24-32 rows one block with more stages, or 64 k a stage with 64
// rows, measured 1.1-1.8x slower); from 33 rows 128 rows of W a block halve x's reads and
// measured 1.3-1.4x faster than two tiles of 32 rows. At that shape (64 k a stage: 128-byte rows,
// wgmma's swizzle), built for sm_90a, each half of the block (a warpgroup) instead forms its 64
// rows' products for the whole stage with wgmma: 1.2x faster (row 57). Its stages are then the
// TMA's tiles, and from sm_90 one thread copies them (1.01-1.04x faster, row 61); one block an SM
// with four stages keeps more of them in flight than two blocks of two (1.05x faster, row 62).
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

// Four 8x8 matrices of 16-bit values from shared memory; lane l gives the address of row l % 8
// of matrix l / 8.
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], uint32_t address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// Warpgroup MMA (wgmma, sm_90a): its operands read straight from shared memory. Compiled only for
// sm_90a (CMAKE_CUDA_ARCHITECTURES 90a-real, the default), where the staged kernel at 128 rows of W
// and 64 k a stage takes it instead of ldmatrix and mma.sync.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool kHasWarpgroupMma = true;
#else
constexpr bool kHasWarpgroupMma = false;
#endif

// The descriptor of a K-major tile of 128-byte rows in shared memory at `address` (its 8-row
// groups 1024 bytes apart, 1024-byte aligned at its first row), swizzled as staged_offset lays
// pieces out, which is wgmma's 128-byte swizzle.
[[maybe_unused]] __device__ __forceinline__ uint64_t swizzled_tile_descriptor(uint32_t address) {
  return uint64_t((address >> 4) & 0x3fff) | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}

// d += a b^T (d = a b^T where !accumulate) for a 64 x 16 tile a (rows of W) and a 64 x 16 tile b
// (rows of x), bfloat16, float32 accumulators: thread t of the warpgroup holds d[i] at row
// 16 (t / 32) + (t % 32) / 4 + 8 (i / 2 % 2), column 8 (i / 4) + 2 (t % 4) + i % 2.
[[maybe_unused]] __device__ __forceinline__ void warpgroup_mma_m64n64k16(float (&d)[32], uint64_t a,
                                                                         uint64_t b,
                                                                         bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, %32, %33, accumulate, "
      "1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(int(accumulate)));
#endif
}
[[maybe_unused]] __device__ __forceinline__ void warpgroup_mma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
[[maybe_unused]] __device__ __forceinline__ void warpgroup_mma_commit_and_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}
// Makes this thread's writes to shared memory (cp.async's, once waited for) visible to the
// tensor cores' reads (the async proxy); a barrier after it extends that to the block's.
[[maybe_unused]] __device__ __forceinline__ void fence_shared_for_async_reads() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

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
// bias, shift, out float32. Block (x, y, z): kRowsW rows of W, the y-th split of k, kRows
// rows of x; out and partial as skinny_mma_kernel. kTileCopies (Shape::kTmaTiles only): the
// stages copied by the TMA from the maps of the four (tiles of kRowsW and kRows rows), where the
// kernel is built for sm_90 on; otherwise the maps are not read.
template <class Shape, class Activations, bool kTileCopies>
__global__ void __launch_bounds__(kStagedWarps * 32, Shape::kBlocksPerMultiprocessor)
    skinny_staged_kernel(const __nv_bfloat16* __restrict__ x_hi,
                         const __nv_bfloat16* __restrict__ x_lo,
                         const __nv_bfloat16* __restrict__ w_hi,
                         const __nv_bfloat16* __restrict__ w_lo, const float* __restrict__ bias,
                         const float* __restrict__ shift, float* __restrict__ out,
                         float* __restrict__ partial, int64_t rows, int64_t n_out, int64_t k_in,
                         int64_t k_per_split, const __grid_constant__ StagedMaps maps) {
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
  // the tensor cores' sums lose bits as they grow, and sums over a whole split of k (2048-4096
  // k) had 3-5x the error against float64 (PERFORMANCE.md, row 62).
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
        warpgroup_mma_m64n64k16(stage_sum, a_hi, b_lo, k16 > 0);
        warpgroup_mma_m64n64k16(stage_sum, a_lo, b_hi, true);
        warpgroup_mma_m64n64k16(stage_sum, a_hi, b_hi, true);
      }
      warpgroup_mma_commit_and_wait();
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
    // Each warpgroup's totals, laid out [row of x][row of W] (warpgroup_mma_m64n64k16's layout).
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
  store_totals<float, Activations, kRows, kRowsW, kStagedWarps * 32>(
      [&](int m, int r) { return totals[m][r]; }, m0, n0, rows, n_out, bias, shift, out, partial);
}

// ---- The lane-rows kernel (float32 W, from 9 rows of x) ----
//
// Each warp forms the products of a block's 64 rows of W and 16 rows of x over its share of each
// stage's k: lane (g, q) = (lane % 8, lane / 8) sums rows g + 8 i of W (i < 8) against rows
// q + 4 j of x (j < 4), 32 sums a lane where the CUDA-core kernel's 16-row tile holds 128. A
// 16-byte load of W from shared memory then serves 4 lanes and one of x 8: 12 loads for 128
// products. W's tile and x's are staged a stage of k at a time, in one of two layouts that keep a
// load's 8 rows in different banks:
//   - from sm_90, by the TMA (tma.cuh): one thread copies a stage as 128-byte-swizzled tiles of
//     32 k, counted in on an mbarrier; measured 1.1x faster than the copies below (PERFORMANCE.md,
//     row 61), which took every thread's issue slots and address work;
//   - otherwise with cp.async, 16 bytes a thread at a time, each row padded by 16 bytes.
// Two blocks an SM, each waiting only at its own barriers, k split in two: one block of 16 warps
// measured 1.12x slower, its loads and products barely overlapping (row 60). The warps' sums are
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
  // Either layout's stages; the TMA's with 1 KB to align them, and the stages' mbarriers.
  static constexpr int kPaddedBytes = kStages * kStageFloats * 4;
  static constexpr int kSwizzledBytes = kStages * kSwizzledStageFloats * 4 + 1024 + kStages * 8;
  static constexpr int kSmemBytes = std::max(kPaddedBytes, kSwizzledBytes);
  static constexpr int kSums = kLaneRowsW * kLaneRowsX;  // a lane's
  // At the end every warp's sums, [warp][sum][lane], reuse the stages' memory.
  static_assert(kWarps * kSums * 32 <= kStages * kSwizzledStageFloats && kWarpK % 4 == 0);
  static_assert(kK % kTileK == 0 && kSwizzledStageFloats * 4 % 1024 == 0);
};

// x [rows, k_in], W [n_out, k_in], out [rows, n_out], all float32, rows 16-byte aligned. Block
// (x, y, z): Shape::kRowsW rows of W, the y-th split of k (k_per_split values, a multiple of
// Shape::kK), Shape::kRows rows of x; out and partial as skinny_linear_kernel. kTileCopies: W and
// x staged by the TMA from w_map and x_map (describe_matrix: tiles of kRowsW and kRows rows),
// where the kernel is built for sm_90 on; otherwise the maps are not read.
template <class Shape, class Activations, bool kTileCopies>
__global__ void __launch_bounds__(Shape::kWarps * 32, Shape::kBlocks)
    skinny_lane_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                            const float* __restrict__ bias, const float* __restrict__ shift,
                            float* __restrict__ out, float* __restrict__ partial, int64_t rows,
                            int64_t n_out, int64_t k_in, int64_t k_per_split,
                            const __grid_constant__ CUtensorMap w_map,
                            const __grid_constant__ CUtensorMap x_map) {
  constexpr int kRows = Shape::kRows, kRowsW = Shape::kRowsW, kWarps = Shape::kWarps;
  constexpr int kLaneRowsW = Shape::kLaneRowsW, kLaneRowsX = Shape::kLaneRowsX;
  constexpr int kK = Shape::kK, kStride = Shape::kStride, kStages = Shape::kStages;
  constexpr int kTileK = Shape::kTileK, kTiles = Shape::kTiles;
  constexpr int kThreads = kWarps * 32, kSums = Shape::kSums;
  constexpr bool kTma = kTileCopies && kHasTensorCopies;
  extern __shared__ __align__(16) float stages[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = int64_t(blockIdx.x) * kRowsW;
  const int64_t m0 = int64_t(blockIdx.z) * kRows;
  const KWalk<kK, kRotateChunks> walk(k_in, k_per_split);

  // Step t of the walk over k: its stage's slot, W's rows then x's, and (TMA) its mbarrier.
  float* const slots = kTma ? stages + (1024 - shared_address(stages) % 1024) % 1024 / 4 : stages;
  constexpr int kSlotFloats = kTma ? Shape::kSwizzledStageFloats : Shape::kStageFloats;
  auto slot_of = [&](int64_t t) { return slots + (t % kStages) * kSlotFloats; };
  const StageBarriers<kStages> barriers{shared_address(slots + kStages * kSlotFloats)};  // TMA only
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
  store_totals<float, Activations, kRows, kRowsW, kThreads>(
      [&](int m, int r) {
        const int at = ((r / 8) * kLaneRowsX + m / 4) * 32 + r % 8 + 8 * (m % 4);
        float total = sums[at];
        for (int v = 1; v < kWarps; ++v) total += sums[v * kSums * 32 + at];
        return total;
      },
      m0, n0, rows, n_out, bias, shift, out, partial);
}

// ---- Planning and dispatch ----

// How one call is laid out: the grid and its splits of k.
struct Plan {
  dim3 grid;
  int64_t k_per_split = 0;
  int splits = 1;
};

// What one block of a kernel covers, and how many blocks per multiprocessor fill the GPU.
struct BlockCover {
  int64_t w_rows, x_rows, chunk;  // rows of W and of x; values of k per chunk
  int64_t min_chunks_per_split;   // fewer would leave some of the block's warps idle
  int64_t blocks_per_multiprocessor;
  bool within_one_wave = false;  // never more blocks than blocks_per_multiprocessor fill
};

// Enough blocks to fill the GPU: k is split only when the rows of W (and of x) give fewer, and
// never below the cover's chunks per split.
cudaError_t make_plan(int64_t rows, int64_t n_out, int64_t k_in, const BlockCover& cover,
                      const DeviceLimits& limits, Plan& plan) {
  const int64_t blocks_n = ceil_div(n_out, cover.w_rows);
  const int64_t tiles_m = ceil_div(rows, cover.x_rows);
  if (blocks_n > 2147483647 || tiles_m > 65535) return cudaErrorInvalidConfiguration;
  const int64_t chunks = ceil_div(k_in, cover.chunk);
  const int64_t wanted = cover.blocks_per_multiprocessor * limits.multiprocessors;
  int64_t splits = 1;
  if (blocks_n * tiles_m < wanted) {
    splits = std::min(ceil_div(chunks, cover.min_chunks_per_split),
                      cover.within_one_wave ? wanted / (blocks_n * tiles_m)
                                            : ceil_div(wanted, blocks_n * tiles_m));
  }
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, 65535));
  // No k at all (in_features 0) still takes one split, whose sums are 0.
  plan.k_per_split = std::max<int64_t>(1, ceil_div(chunks, splits)) * cover.chunk;
  plan.splits = int(std::max<int64_t>(1, ceil_div(k_in, plan.k_per_split)));
  plan.grid = dim3(unsigned(blocks_n), unsigned(plan.splits), unsigned(tiles_m));
  return cudaSuccess;
}

// Launches either kernel (they take the same arguments) with args' pointers as its types.
template <typename T, typename WT, class Kernel>
void launch_kernel(Kernel kernel, int threads, const Plan& plan, const SkinnyLinearArgs& args,
                   float* partial, cudaStream_t stream) {
  kernel<<<plan.grid, threads, 0, stream>>>(
      static_cast<const T*>(args.x), static_cast<const WT*>(args.w),
      static_cast<const __nv_bfloat16*>(args.w_lo), static_cast<const T*>(args.bias),
      static_cast<const T*>(args.shift), static_cast<T*>(args.out), partial, args.rows,
      args.out_features, args.in_features, plan.k_per_split);
}

// One instantiation of either kernel: its element type, what its block covers, and its launch.
template <typename T, typename WT, bool kHasLo, class Shape>
struct CudaCoreKernel {
  using Element = T;
  // Two blocks an SM fill the GPU; the widest tile's blocks, two an SM, stay within one wave
  // (split in two, its 256 blocks at 8192 outputs measured 4 us slower).
  static BlockCover cover() {
    BlockCover cover{kWarps * Shape::kWarpRows, Shape::kRows, Shape::kChunk, 1, 2};
    cover.within_one_wave = Shape::kRows == kLargestTile;
    return cover;
  }
  static int64_t x_workspace_floats(const SkinnyLinearArgs&) { return 0; }
  template <class Activations>
  static cudaError_t launch(const DeviceLimits&, const Plan& plan, const SkinnyLinearArgs& args,
                            float*, float* partial, cudaStream_t stream) {
    launch_kernel<T, WT>(skinny_linear_kernel<T, WT, kHasLo, Shape, Activations>, kWarps * 32, plan,
                         args, partial, stream);
    return cudaGetLastError();
  }
};

template <typename T, typename WT, bool kHasLo, class Shape>
struct TensorCoreKernel {
  using Element = T;
  static BlockCover cover() { return {kMmaRowsW, Shape::kRows, Shape::kChunk, kMmaWarps, 1}; }
  static int64_t x_workspace_floats(const SkinnyLinearArgs&) { return 0; }
  template <class Activations>
  static cudaError_t launch(const DeviceLimits&, const Plan& plan, const SkinnyLinearArgs& args,
                            float*, float* partial, cudaStream_t stream) {
    launch_kernel<T, WT>(skinny_mma_kernel<T, WT, kHasLo, Shape, Activations>, kMmaWarps * 32, plan,
                         args, partial, stream);
    return cudaGetLastError();
  }
};

// Lets `kernel` take `bytes` of dynamic shared memory on the current device, where `allowed` (the
// kernel's own record, bit d for device d) says it has not yet: once per device, not per launch.
inline cudaError_t allow_shared_bytes_once(const void* kernel, int bytes, int device,
                                           std::atomic<uint64_t>& allowed) {
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;  // past 64: every launch
  if (bit != 0 && (allowed.load(std::memory_order_relaxed) & bit)) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) allowed.fetch_or(bit, std::memory_order_relaxed);
  return err;
}

// Whether a launch may have the TMA copy its stages (the matrices must also be described:
// describe_matrix): asked for, on sm_90 or newer.
inline bool tile_copies_allowed(const SkinnyLinearArgs& args, const DeviceLimits& limits) {
  return args.tile_copies && limits.compute_major >= 9;
}

// The staged kernel (bf16x3 only); x is split into its bfloat16 parts in the workspace first.
template <class Shape>
struct StagedKernel {
  using Element = float;
  static BlockCover cover() {
    return {Shape::kRowsW, Shape::kRows, Shape::kK, Shape::kStages, Shape::kBlocksPerMultiprocessor,
            true};
  }
  static int64_t x_workspace_floats(const SkinnyLinearArgs& args) {
    return args.rows * args.in_features;  // two bfloat16 parts
  }
  template <class Activations>
  static cudaError_t launch(const DeviceLimits& limits, const Plan& plan,
                            const SkinnyLinearArgs& args, float* workspace, float* partial,
                            cudaStream_t stream) {
    const int64_t count = args.rows * args.in_features;
    auto* x_hi = reinterpret_cast<__nv_bfloat16*>(workspace);
    __nv_bfloat16* x_lo = x_hi + count;
    cudaError_t err =
        launch_split_bf16(static_cast<const float*>(args.x), x_hi, x_lo, count, stream);
    if (err != cudaSuccess) return err;
    StagedMaps maps{};
    if constexpr (Shape::kTmaTiles) {
      const bool described = tile_copies_allowed(args, limits) &&
                             describe_matrix(maps.w_hi, args.w, 2, args.out_features,
                                             args.in_features, Shape::kRowsW) == cudaSuccess &&
                             describe_matrix(maps.w_lo, args.w_lo, 2, args.out_features,
                                             args.in_features, Shape::kRowsW) == cudaSuccess &&
                             describe_matrix(maps.x_hi, x_hi, 2, args.rows, args.in_features,
                                             Shape::kRows) == cudaSuccess &&
                             describe_matrix(maps.x_lo, x_lo, 2, args.rows, args.in_features,
                                             Shape::kRows) == cudaSuccess;
      if (described)
        return launch_as<Activations, true>(limits, plan, args, x_hi, x_lo, maps, partial, stream);
    }
    return launch_as<Activations, false>(limits, plan, args, x_hi, x_lo, maps, partial, stream);
  }
  template <class Activations, bool kTileCopies>
  static cudaError_t launch_as(const DeviceLimits& limits, const Plan& plan,
                               const SkinnyLinearArgs& args, const __nv_bfloat16* x_hi,
                               const __nv_bfloat16* x_lo, const StagedMaps& maps, float* partial,
                               cudaStream_t stream) {
    auto kernel = skinny_staged_kernel<Shape, Activations, kTileCopies>;
    static std::atomic<uint64_t> devices_allowed{0};  // this instantiation's, bit d for device d
    const cudaError_t err = allow_shared_bytes_once(
        reinterpret_cast<const void*>(kernel), Shape::kSmemBytes, limits.device, devices_allowed);
    if (err != cudaSuccess) return err;
    // Overlapping the split's tail: the kernel waits for it before it reads x's parts.
    return launch_dependent(
        limits, kernel, plan.grid, kStagedWarps * 32, Shape::kSmemBytes, stream, x_hi, x_lo,
        static_cast<const __nv_bfloat16*>(args.w), static_cast<const __nv_bfloat16*>(args.w_lo),
        static_cast<const float*>(args.bias), static_cast<const float*>(args.shift),
        static_cast<float*>(args.out), partial, args.rows, args.out_features, args.in_features,
        plan.k_per_split, maps);
  }
};

// The lane-rows kernel (float32 W, 16-byte aligned rows, sm_80 on): two blocks an SM, within one
// wave (at 8192 outputs 128 blocks of rows of W, k split in two). From sm_90 W and x are staged
// by the TMA, where the driver describes them (describe_matrix); otherwise with cp.async.
template <class Shape>
struct LaneRowsKernel {
  using Element = float;
  static BlockCover cover() {
    return {Shape::kRowsW, Shape::kRows, Shape::kK, 1, Shape::kBlocks, true};
  }
  static int64_t x_workspace_floats(const SkinnyLinearArgs&) { return 0; }
  template <class Activations>
  static cudaError_t launch(const DeviceLimits& limits, const Plan& plan,
                            const SkinnyLinearArgs& args, float*, float* partial,
                            cudaStream_t stream) {
    CUtensorMap w_map{}, x_map{};
    const bool tile_copies =
        tile_copies_allowed(args, limits) &&
        describe_matrix(w_map, args.w, 4, args.out_features, args.in_features, Shape::kRowsW) ==
            cudaSuccess &&
        describe_matrix(x_map, args.x, 4, args.rows, args.in_features, Shape::kRows) == cudaSuccess;
    return tile_copies
               ? launch_as<Activations, true>(limits, plan, args, partial, w_map, x_map, stream)
               : launch_as<Activations, false>(limits, plan, args, partial, w_map, x_map, stream);
  }
  template <class Activations, bool kTileCopies>
  static cudaError_t launch_as(const DeviceLimits& limits, const Plan& plan,
                               const SkinnyLinearArgs& args, float* partial,
                               const CUtensorMap& w_map, const CUtensorMap& x_map,
                               cudaStream_t stream) {
    auto kernel = skinny_lane_rows_kernel<Shape, Activations, kTileCopies>;
    static std::atomic<uint64_t> devices_allowed{0};  // this instantiation's, bit d for device d
    const cudaError_t err = allow_shared_bytes_once(
        reinterpret_cast<const void*>(kernel), Shape::kSmemBytes, limits.device, devices_allowed);
    if (err != cudaSuccess) return err;
    kernel<<<plan.grid, Shape::kWarps * 32, Shape::kSmemBytes, stream>>>(
        static_cast<const float*>(args.x), static_cast<const float*>(args.w),
        static_cast<const float*>(args.bias), static_cast<const float*>(args.shift),
        static_cast<float*>(args.out), partial, args.rows, args.out_features, args.in_features,
        plan.k_per_split, w_map, x_map);
    return cudaGetLastError();
  }
};

// float32 W: where W's and x's rows are aligned for 16-byte loads, the CUDA-core kernel with the
// narrowest tile of x rows that holds `rows` up to 8 rows, the lane-rows kernel from 9 (the
// CUDA-core kernel's 16-row tile where the GPU lacks cp.async or the shared memory); otherwise
// the CUDA-core kernel, one element per load, with the widest tile (correct for any shape and
// alignment).
template <class Fn>
cudaError_t dispatch_float_weight(const SkinnyLinearArgs& args, const DeviceLimits& limits,
                                  Fn&& fn) {
  constexpr int kVec = 4;
  const bool vector_loads = args.in_features % kVec == 0 && aligned16(args.w) && aligned16(args.x);
  if (!vector_loads)
    return fn(CudaCoreKernel<float, float, false, SkinnyShape<float, false, 1, kLargestTile>>{});
  if (args.rows <= 1)
    return fn(CudaCoreKernel<float, float, false, SkinnyShape<float, false, kVec, 1>>{});
  if (args.rows <= 4)
    return fn(CudaCoreKernel<float, float, false, SkinnyShape<float, false, kVec, 4>>{});
  if (args.rows <= 8)
    return fn(CudaCoreKernel<float, float, false, SkinnyShape<float, false, kVec, 8>>{});
  if (limits.compute_major >= 8 && limits.shared_bytes_per_block >= LaneRowsShape::kSmemBytes)
    return fn(LaneRowsKernel<LaneRowsShape>{});
  return fn(CudaCoreKernel<float, float, false, SkinnyShape<float, false, kVec, kLargestTile>>{});
}

// 16-bit W (x of WT, or float32 x with W's bfloat16 parts): the tensor-core kernel with the
// narrowest tile of x rows that holds `rows`, where the GPU has mma.sync for WT (sm_80 on) and
// W's and x's rows are 16-byte aligned; otherwise the CUDA-core kernel, one element per load
// (float32 products of the same values, x not rounded: correct anywhere, not tuned).
template <typename T, typename WT, bool kHasLo, class Fn>
cudaError_t dispatch_16bit_weight(const SkinnyLinearArgs& args, const DeviceLimits& limits,
                                  Fn&& fn) {
  const bool tensor_cores = limits.compute_major >= 8 && args.in_features % 8 == 0 &&
                            aligned16(args.w) && (!kHasLo || aligned16(args.w_lo)) &&
                            aligned16(args.x);
  if (!tensor_cores) {
    return fn(CudaCoreKernel<T, WT, kHasLo, SkinnyShape<WT, kHasLo, 1, kLargestTile>>{});
  }
  if (args.rows <= 8) return fn(TensorCoreKernel<T, WT, kHasLo, MmaShape<kHasLo, 1>>{});
  // bf16x3 from 9 rows: the staged kernel, where the GPU has the shared memory for it
  // (PERFORMANCE.md, rows 42-43); from 33 rows one block an SM where a block may take sm_90's
  // 192 KiB (row 62), otherwise two.
  if constexpr (kHasLo) {
    using UpTo16 = StagedShape<2>;
    using UpTo32 = StagedShape<4>;
    using From33OneBlock = StagedShape<8, 128, 64, 1>;
    using From33TwoBlocks = StagedShape<8, 128, 64, 2>;
    if (limits.shared_bytes_per_block >=
        std::max(UpTo32::kSmemBytes, From33TwoBlocks::kSmemBytes)) {
      if (args.rows <= 16) return fn(StagedKernel<UpTo16>{});
      if (args.rows <= 32) return fn(StagedKernel<UpTo32>{});
      if (limits.shared_bytes_per_block >= From33OneBlock::kSmemBytes)
        return fn(StagedKernel<From33OneBlock>{});
      return fn(StagedKernel<From33TwoBlocks>{});
    }
  }
  if (args.rows <= 16) return fn(TensorCoreKernel<T, WT, kHasLo, MmaShape<kHasLo, 2>>{});
  if (args.rows <= 32) return fn(TensorCoreKernel<T, WT, kHasLo, MmaShape<kHasLo, 4>>{});
  return fn(TensorCoreKernel<T, WT, kHasLo, MmaShape<kHasLo, 8>>{});
}

// Calls fn(kernel) with the instantiation the arguments take on the device `limits` describes (W
// in x's type, or, for float32 x, W's bfloat16 hi part with or without its lo part) and returns
// its result; cudaErrorInvalidValue for a weight the type does not take.
template <class Fn>
cudaError_t dispatch_kernel(const SkinnyLinearArgs& args, const DeviceLimits& limits, Fn&& fn) {
  cudaError_t err = cudaErrorInvalidValue;
  dispatch_element(args.type, [&](auto element) {
    using T = DeviceElement<decltype(element)::value>;
    if constexpr (std::is_same_v<T, float>) {
      if (args.weight == SkinnyWeight::kAsInput) err = dispatch_float_weight(args, limits, fn);
      if (args.weight == SkinnyWeight::kBf16) {
        err = dispatch_16bit_weight<T, __nv_bfloat16, false>(args, limits, fn);
      }
      if (args.weight == SkinnyWeight::kBf16HiLo) {
        err = dispatch_16bit_weight<T, __nv_bfloat16, true>(args, limits, fn);
      }
    } else if (args.weight == SkinnyWeight::kAsInput) {
      err = dispatch_16bit_weight<T, T, false>(args, limits, fn);
    }
  });
  return err;
}

// The workspace of one call, in floats: x's bfloat16 parts first (the staged kernel's), then the
// partial sums of split k.
struct WorkspaceLayout {
  int64_t x_floats = 0, partial_floats = 0;
  int64_t total() const { return x_floats + partial_floats; }
};

template <class Kernel>
WorkspaceLayout workspace_layout(const SkinnyLinearArgs& args, const Plan& plan) {
  return {Kernel::x_workspace_floats(args),
          plan.splits > 1 ? int64_t(plan.splits) * args.rows * args.out_features : 0};
}

// Looks up the current device's limits (once a call), picks the instantiation the arguments take
// and plans its launch, then returns fn(kernel, limits, plan).
template <class Fn>
cudaError_t with_plan(const SkinnyLinearArgs& args, Fn&& fn) {
  DeviceLimits limits;
  const cudaError_t limits_err = current_device_limits(limits);
  if (limits_err != cudaSuccess) return limits_err;
  return dispatch_kernel(args, limits, [&](auto kernel) {
    Plan plan;
    const cudaError_t err = make_plan(args.rows, args.out_features, args.in_features,
                                      decltype(kernel)::cover(), limits, plan);
    if (err != cudaSuccess) return err;
    return fn(kernel, limits, plan);
  });
}

}  // namespace
}  // namespace cuda

cudaError_t plan_skinny_linear(const SkinnyLinearArgs& args, int64_t& workspace_floats) {
  workspace_floats = 0;
  return cuda::with_plan(args, [&](auto kernel, const cuda::DeviceLimits&, const cuda::Plan& plan) {
    workspace_floats = cuda::workspace_layout<decltype(kernel)>(args, plan).total();
    return cudaSuccess;
  });
}

cudaError_t launch_skinny_linear(const SkinnyLinearArgs& args, float* workspace,
                                 cudaStream_t stream) {
  if (args.rows == 0 || args.out_features == 0) return cudaSuccess;
  return cuda::with_plan(args, [&](auto kernel, const cuda::DeviceLimits& limits,
                                   const cuda::Plan& plan) {
    using Kernel = decltype(kernel);
    using T = typename Kernel::Element;
    const cuda::WorkspaceLayout layout = cuda::workspace_layout<Kernel>(args, plan);
    if (layout.total() > 0 && !workspace) return cudaErrorInvalidValue;
    float* partial = layout.partial_floats > 0 ? workspace + layout.x_floats : nullptr;
    cudaError_t err = cudaErrorInvalidValue;
    dispatch_epilogue<kResultPrecisionOf<T>>(args.kind, [&](auto activations) {
      using Activations = decltype(activations);
      err = Kernel::template launch<Activations>(limits, plan, args, workspace, partial, stream);
      if (err != cudaSuccess || plan.splits == 1) return;
      const int64_t count = args.rows * args.out_features;
      const int threads = 256;
      const int64_t blocks = std::min<int64_t>(cuda::ceil_div(count, threads), 65535);
      err = cuda::launch_dependent(
          limits, cuda::skinny_reduce_kernel<T, Activations>, unsigned(blocks), threads, 0, stream,
          static_cast<const float*>(partial), plan.splits, static_cast<const T*>(args.bias),
          static_cast<const T*>(args.shift), static_cast<T*>(args.out), count, args.out_features);
    });
    return err;
  });
}

}  // namespace fusedlinear
