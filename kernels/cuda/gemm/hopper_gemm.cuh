// out = chain(x W^T + bias) on Hopper (sm_90a): a TMA-fed, warp-specialized wgmma GEMM whose
// epilogue applies the activation chain to the float32 accumulators before the one store.
//
// x [m][k] and W [n][k] row-major (both K-major), of bfloat16 or float16, or for bf16x3 each given
// as its bfloat16 hi and lo parts (split_bf16); out [m][n] float32 or the 16-bit type.
//
// A block of three warpgroups: one producer (a single thread issues every TMA tile copy; the
// warpgroup gives its registers up with setmaxnreg) and two consumers (wgmma straight from shared
// memory, float32 accumulators in registers, then the epilogue). Between them a ring of stages in
// shared memory, each with a full and an empty mbarrier (pipeline.cuh). Blocks are persistent,
// one an SM, and walk the tiles in groups of rows of tiles (TileOrder) so that the tiles in flight
// share their x rows and W columns in L2. Two ways to split the work:
//   - shared tiles: both consumers work on one tile, 64 or 128 rows each, and read every stage;
//   - tiles in turns: each consumer its own tiles, the two taking the tensor cores in turn (named
//     barriers), so that one's epilogue runs while the other's products do.
// The TMA writes zeros past the matrix (tails of m, n and k), and the stores are masked.
//
// A gated pair, out = chain(x A^T + a) * (x B^T + b) (SwiGLU's silu(w1(x)) * w3(x)), is one GEMM
// (kGated): a tile's W holds its columns' rows of A, then the same rows of B (two copies from the
// two matrices), so that a consumer thread's accumulators of 8 columns of A sit beside those of the
// same columns of B, and the epilogue forms their product: the two Linears' products in one
// kernel, neither output written to memory, where the per-layer path runs two GEMMs and a pass
// that multiplies their outputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

// The launchers are host code, which NVRTC, compiling a run-time chain's kernels
// (kernels/cuda/jit/), neither takes nor needs.
#ifndef __CUDACC_RTC__
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#endif

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/gemm/pipeline.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/math/bf16_split.h"

namespace fusedlinear {
namespace cuda {
namespace gemm {

// How a tile's sums are formed: kOne, one product of x and W; or bf16x3's three from the operands'
// bfloat16 parts, x_lo W_hi + x_hi W_lo + x_hi W_hi, smallest first at every 16 k. The tensor
// cores' float32 sums drop the low bits of an addend far smaller than the sum (they are not IEEE
// additions), so what a sum loses grows with its magnitude, and so with k:
//   - kBf16x3: the two small products into an accumulator of their own, added to x_hi W_hi's in
//     float32 at the end: small terms summed into the large sum would lose most of their own
//     bits; apart they keep them, as cuBLAS's three GEMMs do: the same error as theirs, a few
//     times float32's (docs/RESULTS.md: the Hopper GEMM alone).
//   - kBf16x3OneSum: all three into one accumulator over the whole k: less accurate still.
//   - kBf16x3Promoted: each k-tile's three products into fresh accumulators, which the consumer
//     then adds into float32 running totals with the ALU's additions (rounded to nearest), as
//     DeepSeek's "promotion" does for FP8: the tensor cores then drop bits relative to one
//     k-tile's 64 k of sums, not the whole k's: about float32's error, at a little more than
//     kBf16x3's time (docs/RESULTS.md: promoted sums). A k-tile's sums go in 64-column pieces
//     into two buffers in turn, so that one piece's products run while the one before is added:
//     totals and two pieces fit a consumer's registers for one 64-row block of at most 128
//     columns (the 128x128, 128x64 and 64x128 turns tiles).
//   - kBf16x6Promoted: bf16x6's six products of x's and W's three parts (split_bf16_three), those
//     of parts i and j with i + j < 3, smallest first, promoted as kBf16x3Promoted's: for inputs
//     of any range, where bf16x3's two parts leave 2^-17 of each value out: more accurate than
//     float32 on the timed problem, and within the check's bound of float32's on wide-range
//     inputs (hopper_gemm_check), where cuBLAS's six GEMMs are far off (docs/RESULTS.md: promoted
//     bf16x6). Its stages hold three parts each: two fit for 128x128. On 128 columns its
//     k-tile's sums span the whole width instead of 64-column pieces (the consumers' products in
//     turn hide each one's additions; kWideSums in the kernel).
// The promoted modes take each order of products (i + j) over a k-tile's 64 k before the next,
// so that the small terms are summed while the k-tile's sums are still small: taking the six at
// each 16 k in turn missed the wide-range bound, in the same time (docs/RESULTS.md: promoted
// bf16x6).
enum class GemmProducts { kOne, kBf16x3, kBf16x3OneSum, kBf16x3Promoted, kBf16x6Promoted };

__host__ __device__ constexpr bool promoted(GemmProducts products) {
  return products == GemmProducts::kBf16x3Promoted || products == GemmProducts::kBf16x6Promoted;
}

// The bfloat16 parts of x and of W a tile's products read.
__host__ __device__ constexpr int operand_parts(GemmProducts products) {
  return products == GemmProducts::kOne ? 1 : products == GemmProducts::kBf16x6Promoted ? 3 : 2;
}
constexpr int kMaxParts = 3;

// Accumulators a consumer thread holds for consumer_rows x cols of a tile (cols / 2 a 64-row
// block): one set of sums, bf16x3's two, or the promoted modes' totals and two 64-column pieces'
// sums (bf16x6's one k-tile's sums of 128 columns: as many).
constexpr int consumer_accumulators(GemmProducts products, int consumer_rows, int cols) {
  const int per_block = products == GemmProducts::kBf16x3 ? cols
                        : promoted(products)              ? cols / 2 + 64
                                                          : cols / 2;
  return consumer_rows / 64 * per_block;
}

// The tile shapes the launcher knows (rows of x x rows of W); kAuto: chosen from the problem's
// size (choose_tile). The "Turns" tiles are the consumers' own, taken in turns (see above).
enum class GemmTile {
  kAuto,
  k128x256,
  k128x128,
  k128x64,
  k256x128,
  k64x256Turns,
  k64x128Turns,
  k128x128Turns
};

constexpr int kGemmThreads = 384;           // the producer warpgroup, then two consumers
constexpr int kGemmSmemBytes = 227 * 1024;  // the most a block may take on sm_90
// Registers a thread after setmaxnreg: 128 x 40 + 256 x 232 fit the SM's 64 Ki; a consumer holds
// up to kMaxAccumulators accumulators (ptxas allocates the whole kernel within 64 Ki / 384 = 168
// registers a thread, setmaxnreg's 232 notwithstanding: 192 spilled).
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232, kMaxAccumulators = 128;
// Rows of tiles a group of TileOrder spans.
constexpr int kGroupRows = 16;
constexpr int kTileK = 64;  // 128-byte rows of 16-bit values: the swizzle's width
constexpr int kMaxStages = 8;

// After the ring, each consumer's copy of its tile's columns' bias and chain terms (floats).
constexpr int column_bytes(int cols) { return 2 * (1 + act::kMaxColumnTerms) * cols * 4; }
// A stage: x's parts (tile_m rows), then W's (cols rows), kTileK 16-bit values each.
constexpr int stage_bytes(GemmProducts products, int tile_m, int cols) {
  return operand_parts(products) * (tile_m + cols) * kTileK * 2;
}
// The stages of the ring that fit beside the column values (1024: room to align the ring; 16 a
// stage: its barriers).
constexpr int ring_stages(GemmProducts products, int tile_m, int cols) {
  const int fit = (kGemmSmemBytes - 1024 - 16 * kMaxStages - column_bytes(cols)) /
                  stage_bytes(products, tile_m, cols);
  return fit < kMaxStages ? fit : kMaxStages;
}
// Whether a tile can be built: a consumer's accumulators fit its registers, and two stages at
// least fit shared memory (bf16x6's three parts a stage leave its widest tiles one).
constexpr bool shape_fits(GemmProducts products, int consumer_rows, int tile_m, int cols) {
  return consumer_accumulators(products, consumer_rows, cols) <= kMaxAccumulators &&
         ring_stages(products, tile_m, cols) >= 2;
}

// kConsumerRowsOf rows of x a consumer takes of each of its tiles (64 or 128: one or two m64
// products a 16-k step), kTileNOf rows of W; kTurnsOf: the consumers' tiles their own (kTileM =
// kConsumerRows) or shared (kTileM = 2 kConsumerRows).
template <GemmProducts kProductsOf, int kTileNOf, int kConsumerRowsOf, bool kTurnsOf>
struct GemmShape {
  static constexpr GemmProducts kProducts = kProductsOf;
  static constexpr int kParts = operand_parts(kProducts);                   // hi (, mid) (, lo)
  static constexpr int kSums = kProducts == GemmProducts::kBf16x3 ? 2 : 1;  // accumulator sets
  static constexpr bool kTurns = kTurnsOf;
  static constexpr int kConsumerRows = kConsumerRowsOf;
  static constexpr int kBlocks = kConsumerRows / 64;
  static constexpr int kTileM = kTurns ? kConsumerRows : 2 * kConsumerRows;
  static constexpr int kTileN = kTileNOf;
  // Accumulators a consumer thread holds; the shape is built only where they fit its registers
  // and its ring shared memory (shape_fits).
  static constexpr int kAccumulators = consumer_accumulators(kProducts, kConsumerRows, kTileN);
  static constexpr bool kFits = shape_fits(kProducts, kConsumerRows, kTileM, kTileN);
  static constexpr int kTileK = gemm::kTileK;
  static constexpr int kABytes = kTileM * kTileK * 2;  // a part of x's tile
  static constexpr int kBBytes = kTileN * kTileK * 2;  // a part of W's tile
  // A stage: x's parts, then W's parts, each 1024-byte aligned (the swizzle's period).
  static constexpr int kStageBytes = stage_bytes(kProducts, kTileM, kTileN);
  static constexpr int kColumnValues = 1 + act::kMaxColumnTerms;
  static constexpr int kColumnBytes = column_bytes(kTileN);
  // (A shape not built keeps a ring of two, so that its type stays well formed.)
  static constexpr int kStages = kFits ? ring_stages(kProducts, kTileM, kTileN) : 2;
  using RingT = Ring<kStages, kStageBytes>;
  // 1024: room to align the ring.
  static constexpr int kSmemBytes = 1024 + RingT::kBytes + kColumnBytes;
  static constexpr int kConsumerWarps = kTurns ? 4 : 8;  // the warps that read each stage
  static_assert(kTileN == 64 || kTileN == 128 || kTileN == 256, "wgmma's N here");
  static_assert(kConsumerRows == 64 || kConsumerRows == 128);
  static_assert(!kFits || kSmemBytes <= kGemmSmemBytes);
};

// The tiles in the order blocks take them: groups of group_m rows of tiles, each group column by
// column, so that the tiles in flight at once read a few rows of x and columns of W, from L2.
struct TileOrder {
  int tiles_m = 0, tiles_n = 0, group_m = 1;
  __host__ __device__ int count() const { return tiles_m * tiles_n; }
  __device__ void coords(int t, int& tm, int& tn) const {
    const int per_group = group_m * tiles_n;
    const int group = t / per_group, first = group * group_m;
    const int rows = min(tiles_m - first, group_m);
    const int in_group = t - group * per_group;
    tm = first + in_group % rows;
    tn = in_group / rows;
  }
};

// The TMA's descriptions of x's and W's parts (hi, then lo, or mid and lo; the first
// operand_parts used), and of a gated pair's gate's W (B).
struct GemmMaps {
  CUtensorMap x[kMaxParts], w[kMaxParts], gate[kMaxParts];
};

// The producer: every k-tile of every tile of this block, in order, into the ring. kGated: a
// tile's W the first kTileN / 2 rows of A from its first column, then the same rows of B.
template <class Shape, bool kGated>
__device__ __forceinline__ void produce_tiles(const GemmMaps& maps,
                                              const typename Shape::RingT& ring,
                                              const TileOrder& order, int k_tiles) {
  using RingT = typename Shape::RingT;
  constexpr int kColumns = kGated ? Shape::kTileN / 2 : Shape::kTileN;  // out's, a tile
  int64_t t = 0;
  for (int tile = blockIdx.x; tile < order.count(); tile += gridDim.x) {
    int tm, tn;
    order.coords(tile, tm, tn);
    const int64_t row_x = int64_t(tm) * Shape::kTileM, row_w = int64_t(tn) * kColumns;
    for (int kt = 0; kt < k_tiles; ++kt, ++t) {
      const int stage = RingT::stage_of(t);
      ring.wait_empty(t);
      const uint32_t full = ring.full(stage), slot = ring.slot(stage);
      expect_bytes(full, Shape::kStageBytes);  // zeros past the matrix count too
      const int64_t k = int64_t(kt) * Shape::kTileK;
#pragma unroll
      for (int p = 0; p < Shape::kParts; ++p) {
        copy_tile(slot + p * Shape::kABytes, maps.x[p], row_x, k, full);
      }
#pragma unroll
      for (int p = 0; p < Shape::kParts; ++p) {
        const uint32_t w_part = slot + Shape::kParts * Shape::kABytes + p * Shape::kBBytes;
        copy_tile(w_part, maps.w[p], row_w, k, full);
        if (kGated) copy_tile(w_part + Shape::kBBytes / 2, maps.gate[p], row_w, k, full);
      }
    }
  }
}

// The epilogue of a consumer's 64 x kTileN accumulators (warpgroup_mma's layout): a split mode's
// sums inside the output that are inf or NaN made eager's (split::eager_sum_if_not_finite; past
// the matrix the tiles' zeros meet x's or W's infinities too, and there is nothing to read), the
// bias and the chain's terms of each column, the chain, then 16-byte stores where vector_stores
// (n a multiple of a store's elements), one element at a time otherwise. `row`: this thread's
// first row; n0: the tile's first column of out. kGated: the accumulators' first half A's sums,
// the second B's (`gate_split` B's operands); each column's chain value and B's sum plus its bias
// are each rounded to Out, then multiplied, as the per-layer path rounds its two outputs before
// it multiplies them.
template <int kTileN, bool kGated, typename Out, class ChainT>
__device__ __forceinline__ void store_tile(const float (&acc)[kTileN / 2], int64_t row, int64_t n0,
                                           int m, int n, bool vector_stores,
                                           const ColumnEpilogue<Out, ChainT>& epilogue,
                                           const split::SplitOperands& split,
                                           const split::SplitOperands& gate_split,
                                           const float* columns, Out* __restrict__ out, int lane) {
  constexpr int kTerms = ChainT::kTerms;
  // 8-column groups a 16-byte store takes: 4 floats of one group's row, or 8 16-bit values of two.
  constexpr int kGroups = sizeof(Out) == 4 ? 1 : 2;
  constexpr int kOutGroups = kTileN / 8 / (kGated ? 2 : 1);  // 8-column groups of out a tile
  const int quad = lane % 4;
  const bool odd = quad & 1, upper = quad & 2;
  // Group `group` of the accumulators (rows row, row, row + 8, row + 8; columns c, c + 1, c, c + 1
  // of out group `of`) plus their columns' bias, a split mode's non-finite sums made eager's.
  const auto sums_plus_bias = [&](int group, int of, const split::SplitOperands& operands,
                                  float(&v)[4]) {
    const float2 bias = *reinterpret_cast<const float2*>(columns + 8 * group + 2 * quad);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = row + 8 * (e / 2), col = n0 + 8 * of + 2 * quad + e % 2;
      const float total = acc[4 * group + e];
      const float sum =
          r < m && col < n ? split::eager_sum_if_not_finite(operands, r, col, total) : total;
      v[e] = sum + (e % 2 ? bias.y : bias.x);
    }
  };
#pragma unroll
  for (int j = 0; j < kOutGroups; j += kGroups) {
    float v[kGroups][4];  // rows row, row, row + 8, row + 8; columns c, c + 1, c, c + 1
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      sums_plus_bias(j + g, j + g, split, v[g]);
      // This group's two columns' terms: every quad of the warp reads the same 8 values.
      const int c = 8 * (j + g) + 2 * quad;
      float terms[act::kMaxColumnTerms][4] = {};
#pragma unroll
      for (int s = 0; s < kTerms; ++s) {
        const float2 term = *reinterpret_cast<const float2*>(columns + (1 + s) * kTileN + c);
        terms[s][0] = terms[s][2] = term.x;
        terms[s][1] = terms[s][3] = term.y;
      }
      act::apply_chain(epilogue.chain, v[g], terms);
      if constexpr (kGated) {
        float gate[4];
        sums_plus_bias(kOutGroups + j + g, j + g, gate_split, gate);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          v[g][e] =
              __fmul_rn(to_float(from_float<Out>(v[g][e])), to_float(from_float<Out>(gate[e])));
        }
      }
    }
    if (vector_stores) {
      // Lanes q and q ^ 1 swap halves: the even lane ends with 4 columns of `row`, the odd one
      // with 4 of row + 8.
      float four[kGroups][4];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const float send0 = odd ? v[g][0] : v[g][2], send1 = odd ? v[g][1] : v[g][3];
        const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1);
        const float got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
        four[g][0] = odd ? got0 : v[g][0];
        four[g][1] = odd ? got1 : v[g][1];
        four[g][2] = odd ? v[g][2] : got0;
        four[g][3] = odd ? v[g][3] : got1;
      }
      const int64_t r = row + (odd ? 8 : 0);
      if constexpr (sizeof(Out) == 4) {
        const int64_t c = n0 + 8 * j + 4 * (quad / 2);
        if (r < m && c < n) {
          *reinterpret_cast<float4*>(out + r * n + c) =
              make_float4(four[0][0], four[0][1], four[0][2], four[0][3]);
        }
      } else {
        // Then lanes q and q ^ 2 swap groups: the lower lane ends with group j's 8 columns, the
        // upper with group j + 1's.
        uint32_t pairs[2][2];
#pragma unroll
        for (int g = 0; g < 2; ++g) {
          pairs[g][0] = pack_pair<Out>(four[g][0], four[g][1]);
          pairs[g][1] = pack_pair<Out>(four[g][2], four[g][3]);
        }
        const uint32_t send0 = upper ? pairs[0][0] : pairs[1][0];
        const uint32_t send1 = upper ? pairs[0][1] : pairs[1][1];
        const uint32_t got0 = __shfl_xor_sync(0xffffffffu, send0, 2);
        const uint32_t got1 = __shfl_xor_sync(0xffffffffu, send1, 2);
        const uint4 eight = upper ? make_uint4(got0, got1, pairs[1][0], pairs[1][1])
                                  : make_uint4(pairs[0][0], pairs[0][1], got0, got1);
        const int64_t c = n0 + 8 * (j + (upper ? 1 : 0));
        if (r < m && c < n) *reinterpret_cast<uint4*>(out + r * n + c) = eight;
      }
    } else {
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t r = row + 8 * (e / 2), c = n0 + 8 * (j + g) + 2 * quad + e % 2;
          if (r < m && c < n) out[r * n + c] = from_float<Out>(v[g][e]);
        }
      }
    }
  }
}

// A promoted mode's products of one k-tile's stage into fresh sums (kBlocks 64-row blocks of kN
// columns): x's parts from `a` (this consumer's first row), W's from `b` (the sums' first column).
// The products of parts i and j, i + j < kParts, by descending i + j (the smallest first), each
// order over the k-tile's 64 k before the next: the small terms then sum while the k-tile's sums
// are small, and the tensor cores drop only their own low bits.
template <class Shape, typename In, int kN>
__device__ __forceinline__ void promoted_products(float (&sums)[Shape::kBlocks][kN / 2], uint32_t a,
                                                  uint32_t b) {
  constexpr int kRowBytes = Shape::kTileK * 2;
#pragma unroll
  for (int order = Shape::kParts - 1; order >= 0; --order) {
#pragma unroll
    for (int k16 = 0; k16 < Shape::kTileK / 16; ++k16) {
#pragma unroll
      for (int blk = 0; blk < Shape::kBlocks; ++blk) {
#pragma unroll
        for (int i = order; i >= 0; --i) {  // part i of x, part order - i of W
          const bool first = order == Shape::kParts - 1 && k16 == 0 && i == order;
          const uint64_t x_part =
              swizzled_tile_descriptor(a + blk * 64 * kRowBytes + i * Shape::kABytes + 32 * k16);
          const uint64_t w_part =
              swizzled_tile_descriptor(b + (order - i) * Shape::kBBytes + 32 * k16);
          warpgroup_mma<kN, In>(sums[blk], x_part, w_part, !first);
        }
      }
    }
  }
}

// One block: the ring's barriers, then the producer warpgroup and the two consumers. Launched
// with Shape::kSmemBytes of dynamic shared memory, kGemmThreads threads, at most a block an SM.
// kGated: a gated pair's (the epilogue's gate_bias B's bias, `gate_split` B's operands).
template <class Shape, typename In, typename Out, class ChainT, bool kGated = false>
__global__ void __launch_bounds__(kGemmThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ GemmMaps maps, Out* __restrict__ out, int m, int n,
                       int k_tiles, TileOrder order, int vector_stores,
                       const __grid_constant__ ColumnEpilogue<Out, ChainT> epilogue,
                       const __grid_constant__ split::SplitOperands split,
                       const __grid_constant__ split::SplitOperands gate_split) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using RingT = typename Shape::RingT;
  constexpr int kTileN = Shape::kTileN;
  extern __shared__ unsigned char shared[];
  const RingT ring{(shared_address(shared) + 1023u) & ~1023u};
  if (threadIdx.x == 0) ring.init(Shape::kConsumerWarps);
  __syncthreads();
  wait_for_previous_kernel();  // x and W may be the kernel before's outputs
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    set_register_count<kProducerRegisters, true>();
    if (threadIdx.x == 0) produce_tiles<Shape, kGated>(maps, ring, order, k_tiles);
  } else {
    set_register_count<kConsumerRegisters, false>();
    constexpr int kBlocks = Shape::kBlocks, kRowBytes = Shape::kTileK * 2;
    const int consumer = warpgroup - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    // Bytes into a stage's x tiles where this consumer's rows start.
    const uint32_t a_offset =
        Shape::kTurns ? 0u : uint32_t(consumer) * Shape::kConsumerRows * kRowBytes;
    const int first = Shape::kTurns ? consumer : 0, step = Shape::kTurns ? 2 : 1;
    const int tiles = order.count();
    // A slot read: this warp's arrival on its empty barrier.
    const auto release = [&](int64_t t) {
      if (lane == 0) arrive(ring.empty(RingT::stage_of(t)));
    };
    // This consumer's copy of its tiles' column values: [value][column], value 0 the bias, 1 ...
    // the chain's terms; named barrier 3 + consumer orders its 128 threads' writes and reads.
    constexpr int kColumnValues = 1 + ChainT::kTerms, kColumnsPerThread = (kTileN + 127) / 128;
    constexpr int kColumns = kGated ? kTileN / 2 : kTileN;  // out's columns a tile
    float* const columns =
        reinterpret_cast<float*>(shared + (ring.first - shared_address(shared)) + RingT::kBytes +
                                 consumer * Shape::kColumnValues * kTileN * 4);
    const int column_thread = threadIdx.x % 128;
    // [set][block]: set 0 the products' sums (x_hi W_hi's for bf16x3, the running totals for the
    // promoted modes), set 1 bf16x3's small terms'; block b rows 64 b ... of this consumer's.
    constexpr bool kPromoted = promoted(Shape::kProducts);
    // bf16x6's sums over the whole width where the tile has more than one 64-column piece.
    constexpr bool kWideSums = Shape::kProducts == GemmProducts::kBf16x6Promoted && kTileN > 64;
    float acc[Shape::kSums][kBlocks][kTileN / 2];
#pragma unroll
    for (int s = 0; s < Shape::kSums; ++s)
#pragma unroll
      for (int b = 0; b < kBlocks; ++b)
#pragma unroll
        for (int i = 0; i < kTileN / 2; ++i) acc[s][b][i] = 0.0f;
    // i: the block's i-th tile, which the producer's ring iterations i k_tiles ... hold.
    for (int i = first; int64_t(blockIdx.x) + int64_t(i) * gridDim.x < tiles; i += step) {
      const int tile = blockIdx.x + i * gridDim.x;
      const bool has_next = int64_t(tile) + gridDim.x < tiles;
      int tm, tn;
      order.coords(tile, tm, tn);
      // The tile's column values loaded now, stored for the epilogue after the products: their
      // latency hides under the products instead of stalling the epilogue's few warps.
      float column_values[kColumnValues][kColumnsPerThread];
#pragma unroll
      for (int j = 0; j < kColumnsPerThread; ++j) {
        // The tile's column c, and out's column it stands for: for a gated pair, A's for the
        // first half of the tile, B's (its bias, no terms) for the second.
        const int c = column_thread + 128 * j;
        const bool gate = kGated && c >= kTileN / 2;
        const int64_t col = int64_t(tn) * kColumns + (gate ? c - kTileN / 2 : c);
        const bool inside = col < n && c < kTileN;
        const Out* const bias = gate ? epilogue.gate_bias : epilogue.bias;
        column_values[0][j] = inside && bias ? to_float(bias[col]) : 0.0f;
#pragma unroll
        for (int v = 1; v < kColumnValues; ++v) {
          const int term = v - 1;
          column_values[v][j] =
              inside && !gate && term < epilogue.term_count
                  ? to_float(epilogue.terms[term][(epilogue.broadcast >> term) & 1 ? 0 : col])
                  : 0.0f;
        }
      }
      // In turns: this tile's products wait for the other consumer's of the tile before, which
      // also keeps every ring wait within a phase of its barrier (Ring::wait_full). pass_turn:
      // once this tile's last products are issued, the other's next tile may queue behind them.
      if (Shape::kTurns && i > 0) named_barrier_sync(1 + consumer, 256);
      const auto pass_turn = [&](bool last_products) {
        if (Shape::kTurns && last_products && has_next) named_barrier_arrive(2 - consumer, 256);
      };
      const int64_t t0 = int64_t(i) * k_tiles;
      if constexpr (kWideSums) {
        // bf16x6 on 128 columns: each k-tile's products into fresh sums of the consumer's whole
        // width (N = 128 a wgmma, where 64-column pieces read shared memory 1.33x as much for
        // the same work), added into the totals (acc[0]) once they end. Only one k-tile's sums
        // fit beside the totals, so while this consumer waits and adds, the other consumer's
        // products run: on a shared tile the two issue each k-tile's products in turn (named
        // barriers 1 and 2). Faster than the pieces for bf16x6's 24 products a k-tile, slower
        // for bf16x3's 12, which are too few to cover the other consumer's wait and additions:
        // bf16x3 keeps the pieces (docs/RESULTS.md: wide sums for bf16x6).
        float sums[kBlocks][kTileN / 2];
        const bool last_tile = !has_next;
#pragma unroll
        for (int blk = 0; blk < kBlocks; ++blk)  // each tile's totals from zero
#pragma unroll
          for (int j = 0; j < kTileN / 2; ++j) acc[0][blk][j] = 0.0f;
        for (int kt = 0; kt < k_tiles; ++kt) {
          const int64_t t = t0 + kt;
          // On a shared tile consumer 0 issues first: it waits on barrier 2 before each k-tile
          // but its first, consumer 1 on barrier 1 before each.
          if (!Shape::kTurns) {
            if (consumer == 1) {
              named_barrier_sync(1, 256);  // consumer 0's products of k-tile t are issued
            } else if (t > 0) {
              named_barrier_sync(2, 256);  // consumer 1's of k-tile t - 1 are issued
            }
          }
          ring.wait_full(t);
          warpgroup_mma_fence();  // also orders the sums' reads by the promotion before
          const uint32_t slot = ring.slot(RingT::stage_of(t));
          promoted_products<Shape, In, kTileN>(sums, slot + a_offset,
                                               slot + Shape::kParts * Shape::kABytes);
          warpgroup_commit();
          // Consumer 0 arrives on barrier 1 after every k-tile, consumer 1 on barrier 2 after
          // every one but its last: each barrier's arrivals pair with the other's waits.
          if (Shape::kTurns) {
            pass_turn(kt == k_tiles - 1);
          } else if (consumer == 0) {
            named_barrier_arrive(1, 256);
          } else if (!(last_tile && kt == k_tiles - 1)) {
            named_barrier_arrive(2, 256);
          }
          warpgroup_wait<0>();
          release(t);
#pragma unroll
          for (int blk = 0; blk < kBlocks; ++blk) {
            fence_accumulators(sums[blk]);  // read after the wait that ended them
#pragma unroll
            for (int j = 0; j < kTileN / 2; ++j) acc[0][blk][j] += sums[blk][j];
          }
        }
      } else if constexpr (kPromoted) {
        // Groups of products, each one 64-column piece of one k-tile's sums (kPieces a k-tile),
        // committed alone into piece_sums[g % 2] for group g: while one group's products run, the
        // group before's sums are added into the totals (acc[0]) and its buffer readied again.
        constexpr int kPieces = kTileN / 64;
        const int groups = k_tiles * kPieces;
        float piece_sums[2][kBlocks][32] = {};
        // The sums of the group in buffer kBuffer, complete, into the totals' columns of its piece.
        const auto promote = [&](auto buffer) {
          constexpr int kBuffer = decltype(buffer)::value, kPiece = kPieces == 1 ? 0 : kBuffer;
#pragma unroll
          for (int blk = 0; blk < kBlocks; ++blk) {
            fence_accumulators(piece_sums[kBuffer][blk]);  // read after the wait that ended them
#pragma unroll
            for (int j = 0; j < 32; ++j)
              acc[0][blk][32 * kPiece + j] += piece_sums[kBuffer][blk][j];
          }
        };
        // Group g's products into buffer kBuffer (g % 2, a constant so that it stays in
        // registers; its piece g % kPieces then one too), then the group before's promoted.
        const auto products = [&](int g, auto buffer) {
          constexpr int kBuffer = decltype(buffer)::value, kPiece = kPieces == 1 ? 0 : kBuffer;
          const int kt = g / kPieces;
          const int64_t t = t0 + kt;
          if (kPiece == 0) ring.wait_full(t);
          warpgroup_mma_fence();  // also orders the buffer's reads by its last promote before
          // Each group's sums start afresh.
          const uint32_t slot = ring.slot(RingT::stage_of(t));
          promoted_products<Shape, In, 64>(
              piece_sums[kBuffer], slot + a_offset,
              slot + Shape::kParts * Shape::kABytes + kPiece * 64 * kRowBytes);
          warpgroup_commit();
          pass_turn(kPiece == kPieces - 1 && kt == k_tiles - 1);
          warpgroup_wait<1>();
          if (g > 0) {
            if (kPiece == 0) release(t - 1);  // the group before: the k-tile before's last
            promote(std::integral_constant<int, 1 - kBuffer>{});
          }
        };
        const std::integral_constant<int, 0> even;
        const std::integral_constant<int, 1> odd;
#pragma unroll
        for (int blk = 0; blk < kBlocks; ++blk)  // each tile's totals from zero
#pragma unroll
          for (int j = 0; j < kTileN / 2; ++j) acc[0][blk][j] = 0.0f;
        // Straight-line pairs, so that every way into the loop and out of it leaves the same
        // buffer's group running (an odd count's `if` inside the loop had ptxas serialize every
        // product, C7514).
        products(0, even);
        int g = 1;
        for (; g + 1 < groups; g += 2) {
          products(g, odd);
          products(g + 1, even);
        }
        if (g < groups) {
          products(g, odd);
          warpgroup_wait<0>();
          release(t0 + k_tiles - 1);
          promote(odd);
        } else {
          warpgroup_wait<0>();
          release(t0 + k_tiles - 1);
          promote(even);
        }
      } else {
        for (int kt = 0; kt < k_tiles; ++kt) {
          const int64_t t = t0 + kt;
          ring.wait_full(t);
          warpgroup_mma_fence();
          const uint32_t a_hi = ring.slot(RingT::stage_of(t)) + a_offset;
          const uint32_t b_hi = ring.slot(RingT::stage_of(t)) + Shape::kParts * Shape::kABytes;
#pragma unroll
          for (int k16 = 0; k16 < Shape::kTileK / 16; ++k16) {
            const bool accumulate = kt > 0 || k16 > 0;  // the tile's first product starts its sums
            const uint64_t b = swizzled_tile_descriptor(b_hi + 32 * k16);
            [[maybe_unused]] const uint64_t b_lo =
                swizzled_tile_descriptor(b_hi + Shape::kBBytes + 32 * k16);
#pragma unroll
            for (int blk = 0; blk < kBlocks; ++blk) {
              const uint32_t a_at = a_hi + blk * 64 * kRowBytes + 32 * k16;
              const uint64_t a = swizzled_tile_descriptor(a_at);
              [[maybe_unused]] const uint64_t a_lo =
                  swizzled_tile_descriptor(a_at + Shape::kABytes);
              if constexpr (Shape::kProducts == GemmProducts::kBf16x3) {
                warpgroup_mma<kTileN, In>(acc[1][blk], a_lo, b, accumulate);
                warpgroup_mma<kTileN, In>(acc[1][blk], a, b_lo, true);
                warpgroup_mma<kTileN, In>(acc[0][blk], a, b, accumulate);
              } else if constexpr (Shape::kProducts == GemmProducts::kBf16x3OneSum) {
                warpgroup_mma<kTileN, In>(acc[0][blk], a_lo, b, accumulate);
                warpgroup_mma<kTileN, In>(acc[0][blk], a, b_lo, true);
                warpgroup_mma<kTileN, In>(acc[0][blk], a, b, true);
              } else {
                warpgroup_mma<kTileN, In>(acc[0][blk], a, b, accumulate);
              }
            }
          }
          warpgroup_commit();
          pass_turn(kt == k_tiles - 1);
          // The k-tile before this one has been read: its slot may be refilled. (Two k-tiles left
          // running in turns measured slower: fewer slots for the producer's copies in flight.)
          warpgroup_wait<1>();
          if (kt > 0) release(t - 1);
        }
        warpgroup_wait<0>();
        release(t0 + k_tiles - 1);
      }
#pragma unroll
      for (int s = 0; s < Shape::kSums; ++s)
#pragma unroll
        for (int blk = 0; blk < kBlocks; ++blk) fence_accumulators(acc[s][blk]);

      named_barrier_sync(3 + consumer, 128);  // the tile before's epilogue has read them
#pragma unroll
      for (int v = 0; v < kColumnValues; ++v)
#pragma unroll
        for (int j = 0; j < kColumnsPerThread; ++j) {
          if (column_thread + 128 * j < kTileN) {
            columns[v * kTileN + column_thread + 128 * j] = column_values[v][j];
          }
        }
      named_barrier_sync(3 + consumer, 128);
      const int64_t row = int64_t(tm) * Shape::kTileM +
                          (Shape::kTurns ? 0 : Shape::kConsumerRows * consumer) + 16 * warp +
                          lane / 4;
#pragma unroll
      for (int blk = 0; blk < kBlocks; ++blk) {
        if constexpr (Shape::kSums == 2) {  // the small terms' sum added once, in float32
#pragma unroll
          for (int i = 0; i < kTileN / 2; ++i) acc[0][blk][i] += acc[1][blk][i];
        }
        store_tile<kTileN, kGated>(acc[0][blk], row + 64 * blk, int64_t(tn) * kColumns, m, n,
                                   vector_stores != 0, epilogue, split, gate_split, columns, out,
                                   lane);
      }
    }
  }
#else
  __trap();  // launched only on sm_90 (launch_hopper_gemm refuses other GPUs)
#endif
}

#ifndef __CUDACC_RTC__
// A tile's shape: rows of x each consumer takes, rows of W, and whether the consumers take tiles
// in turns (their own) or share one.
struct TileShape {
  int consumer_rows = 0, cols = 0;
  bool turns = false;
  constexpr int rows() const { return turns ? consumer_rows : 2 * consumer_rows; }
};
constexpr TileShape shape_of(GemmTile tile) {
  switch (tile) {
    case GemmTile::k128x256:
      return {64, 256, false};
    case GemmTile::k128x128:
      return {64, 128, false};
    case GemmTile::k128x64:
      return {64, 64, false};
    case GemmTile::k256x128:
      return {128, 128, false};
    case GemmTile::k64x256Turns:
      return {64, 256, true};
    case GemmTile::k64x128Turns:
      return {64, 128, true};
    case GemmTile::k128x128Turns:
      return {128, 128, true};

    case GemmTile::kAuto:
      break;
  }
  return {};
}
// Whether `tile` can be built for `products` (GemmShape::kFits): bf16x3's two sets of sums take
// twice one product's registers, the promoted modes' 64 more a block; bf16x6's stages 1.5x
// bf16x3's shared memory.
constexpr bool tile_fits(GemmProducts products, GemmTile tile) {
  if (tile == GemmTile::kAuto) return true;
  const TileShape shape = shape_of(tile);
  return shape_fits(products, shape.consumer_rows, shape.rows(), shape.cols);
}

// The tiles choose_tile picks from, with how well each keeps the tensor cores busy, from their
// timings at 128-1024 rows x 8192 -> 8192 on an H200: one product puts the shared 128-row tiles
// ahead, bf16x3 64 x 128 in turns at 256-1024 rows, and the promoted modes 128 x 128, then
// 128 x 64, then 64 x 128 in turns (docs/RESULTS.md: the Hopper GEMM alone).
struct TileCandidate {
  GemmTile tile;
  double efficiency;
};
constexpr int kTileCandidates = 3;
inline constexpr TileCandidate kOneProductTiles[kTileCandidates] = {
    {GemmTile::k128x256, 1.0}, {GemmTile::k128x128, 0.98}, {GemmTile::k128x64, 0.75}};
inline constexpr TileCandidate kThreeProductTiles[kTileCandidates] = {
    {GemmTile::k64x128Turns, 1.05}, {GemmTile::k128x128, 1.0}, {GemmTile::k128x64, 0.9}};
inline constexpr TileCandidate kPromotedTiles[kTileCandidates] = {
    {GemmTile::k128x128, 1.0}, {GemmTile::k128x64, 0.95}, {GemmTile::k64x128Turns, 0.78}};
constexpr const TileCandidate* tile_candidates(GemmProducts products) {
  return products == GemmProducts::kOne ? kOneProductTiles
         : promoted(products)           ? kPromotedTiles
                                        : kThreeProductTiles;
}

// Whether choose_tile may pick the tile of that shape for `products`.
constexpr bool auto_candidate(GemmProducts products, TileShape shape) {
  for (int i = 0; i < kTileCandidates; ++i) {
    const TileShape c = shape_of(tile_candidates(products)[i].tile);
    if (c.consumer_rows == shape.consumer_rows && c.cols == shape.cols && c.turns == shape.turns) {
      return tile_fits(products, tile_candidates(products)[i].tile);
    }
  }
  return false;
}

// The tile for an m x n problem on `multiprocessors` SMs: the fewest waves of tiles, each tile's
// time taken as its area over its efficiency.
inline GemmTile choose_tile(GemmProducts products, int64_t m, int64_t n, int multiprocessors) {
  GemmTile best = GemmTile::kAuto;
  double best_cost = 0.0;
  for (int i = 0; i < kTileCandidates; ++i) {
    const TileCandidate& c = tile_candidates(products)[i];
    if (!tile_fits(products, c.tile)) continue;
    const TileShape shape = shape_of(c.tile);
    const int64_t tiles = ceil_div(m, shape.rows()) * ceil_div(n, shape.cols);
    const double waves = double(ceil_div(tiles, multiprocessors));
    const double cost = waves * shape.rows() * shape.cols / c.efficiency;
    if (best == GemmTile::kAuto || cost < best_cost) {
      best = c.tile;
      best_cost = cost;
    }
  }
  return best;
}

// The kernels a launcher is built with: every tile (a tile may be asked for: the check tool's
// comparisons), or only those choose_tile picks from (kAuto only: a third of the kernels to
// compile, for the library).
enum class TileSet { kAll, kAutoCandidates };

// A kernel of hopper_gemm_kernel's and the ColumnEpilogue it takes, for one GemmShape: a
// declaration's instance, or the same compiled at run time (kernels/cuda/jit/), whose chain's type
// only the kernel knows (the epilogue is then one of the same layout). A null kernel: none.
struct GemmKernelHandle {
  const void* kernel = nullptr;
  const void* epilogue = nullptr;
};

// The enumerator's name, as a run-time chain's translation unit names the kernel's shape.
constexpr const char* products_name(GemmProducts products) {
  switch (products) {
    case GemmProducts::kOne:
      return "kOne";
    case GemmProducts::kBf16x3:
      return "kBf16x3";
    case GemmProducts::kBf16x3OneSum:
      return "kBf16x3OneSum";
    case GemmProducts::kBf16x3Promoted:
      return "kBf16x3Promoted";
    case GemmProducts::kBf16x6Promoted:
      return "kBf16x6Promoted";
  }
  return "";
}

namespace detail {

// `gate`: a gated pair's B (its parts), the handle's kernel then gated; null otherwise.
template <class Shape, typename Out>
cudaError_t launch_shape(const GemmKernelHandle& handle, const DeviceLimits& limits,
                         const void* const (&x)[kMaxParts], const void* const (&w)[kMaxParts],
                         const void* const* gate, Out* out, int64_t m, int64_t n, int64_t k,
                         const split::SplitOperands& split, const split::SplitOperands& gate_split,
                         cudaStream_t stream) {
  const int columns = gate ? Shape::kTileN / 2 : Shape::kTileN;  // out's columns a tile
  GemmMaps maps{};
  for (int p = 0; p < Shape::kParts; ++p) {
    cudaError_t err = describe_matrix(maps.x[p], x[p], 2, m, k, Shape::kTileM);
    if (err == cudaSuccess) err = describe_matrix(maps.w[p], w[p], 2, n, k, columns);
    if (err == cudaSuccess && gate) err = describe_matrix(maps.gate[p], gate[p], 2, n, k, columns);
    if (err != cudaSuccess) return err;
  }
  TileOrder order;
  const int64_t tiles_m = ceil_div(m, Shape::kTileM), tiles_n = ceil_div(n, columns);
  if (tiles_m * tiles_n >= (int64_t(1) << 31)) return cudaErrorNotSupported;
  order.tiles_m = int(tiles_m);
  order.tiles_n = int(tiles_n);
  order.group_m = int(std::min<int64_t>(tiles_m, kGroupRows));
  const int grid = int(std::min<int64_t>(tiles_m * tiles_n, limits.multiprocessors));
  int rows = int(m), cols = int(n);
  int k_tiles = int(ceil_div(k, Shape::kTileK));
  int vector_stores = n % (16 / int(sizeof(Out))) == 0 ? 1 : 0;
  const cudaError_t err = cudaFuncSetAttribute(
      handle.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes);
  if (err != cudaSuccess) return err;
  // hopper_gemm_kernel's parameters, in order.
  void* args[] = {&maps,
                  &out,
                  &rows,
                  &cols,
                  &k_tiles,
                  &order,
                  &vector_stores,
                  const_cast<void*>(handle.epilogue),
                  const_cast<split::SplitOperands*>(&split),
                  const_cast<split::SplitOperands*>(&gate_split)};
  return launch_dependent_kernel(limits, handle.kernel, dim3(grid), dim3(kGemmThreads),
                                 Shape::kSmemBytes, stream, args);
}

// `kernel_of(Shape{})`: the GemmKernelHandle of the tile's shape, asked once every check has
// passed (a run-time chain's is compiled then); `prepare()`: what the stream must run before the
// kernel (x's split), launched once the kernel is known; `split`: the operands from which a sum
// that is not finite is recomputed as eager's (kernels/math/bf16_split.h). `gate`: a gated pair's
// B, [n][k] as W (A) in parts, kernel_of's kernels then gated, `gate_split` as `split` for B;
// null otherwise.
template <GemmProducts kProducts, TileSet kTiles, typename Out, class KernelOf, class Prepare>
cudaError_t launch_products(const KernelOf& kernel_of, const Prepare& prepare,
                            const void* const (&x)[kMaxParts], const void* const (&w)[kMaxParts],
                            Out* out, int64_t m, int64_t n, int64_t k, cudaStream_t stream,
                            GemmTile tile, const split::SplitOperands& split,
                            const void* const* gate = nullptr,
                            const split::SplitOperands& gate_split = {}) {
  constexpr int kParts = operand_parts(kProducts);
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  // The TMA reads 16-byte aligned rows (k a multiple of 8), from 16-byte aligned bases.
  bool supported = k > 0 && k % 8 == 0 && aligned16(out);
  for (int p = 0; p < kParts; ++p) {
    supported = supported && aligned16(x[p]) && aligned16(w[p]) && (!gate || aligned16(gate[p]));
  }
  if (!supported) return cudaErrorNotSupported;
  DeviceLimits limits;
  cudaError_t err = current_device_limits(limits);
  if (err != cudaSuccess) return err;
  // Built for sm_90a only: its wgmma and setmaxnreg run on compute capability 9.0 alone.
  if (limits.compute_major != 9 || limits.compute_minor != 0 ||
      limits.shared_bytes_per_block < kGemmSmemBytes) {
    return cudaErrorNotSupported;
  }
  if (m == 0 || n == 0) return cudaSuccess;
  if (kTiles == TileSet::kAutoCandidates && tile != GemmTile::kAuto) return cudaErrorInvalidValue;
  // A gated pair's tiles span both Linears' columns.
  if (tile == GemmTile::kAuto)
    tile = choose_tile(kProducts, m, gate ? 2 * n : n, limits.multiprocessors);
  const auto launch = [&](auto shape) {
    using Shape = decltype(shape);
    constexpr bool kBuilt =
        kTiles == TileSet::kAll ||
        auto_candidate(kProducts, {Shape::kConsumerRows, Shape::kTileN, Shape::kTurns});
    if constexpr (Shape::kFits && kBuilt) {
      const GemmKernelHandle handle = kernel_of(shape);
      if (!handle.kernel) return cudaErrorNotSupported;
      const cudaError_t prepared = prepare();
      if (prepared != cudaSuccess) return prepared;
      return launch_shape<Shape>(handle, limits, x, w, gate, out, m, n, k, split, gate_split,
                                 stream);
    } else {
      return cudaErrorNotSupported;  // more accumulators than a consumer's registers, or not built
    }
  };
  switch (tile) {
    case GemmTile::k128x256:
      return launch(GemmShape<kProducts, 256, 64, false>{});
    case GemmTile::k128x128:
      return launch(GemmShape<kProducts, 128, 64, false>{});
    case GemmTile::k128x64:
      return launch(GemmShape<kProducts, 64, 64, false>{});
    case GemmTile::k256x128:
      return launch(GemmShape<kProducts, 128, 128, false>{});
    case GemmTile::k64x256Turns:
      return launch(GemmShape<kProducts, 256, 64, true>{});
    case GemmTile::k64x128Turns:
      return launch(GemmShape<kProducts, 128, 64, true>{});
    case GemmTile::k128x128Turns:
      return launch(GemmShape<kProducts, 128, 128, true>{});

    case GemmTile::kAuto:
      break;
  }
  return cudaErrorInvalidValue;
}

// Nothing to run before the kernel.
inline cudaError_t nothing_before() { return cudaSuccess; }

}  // namespace detail

// The kernels compiled with the library for a ColumnEpilogue<Out, ChainT>: kernel_of for
// detail::launch_products, its x and W of In; kGated: a gated pair's.
template <typename In, bool kGated = false, typename Out, class ChainT>
auto declared_kernels(const ColumnEpilogue<Out, ChainT>& epilogue) {
  return [&epilogue](auto shape) {
    using Shape = decltype(shape);
    return GemmKernelHandle{
        reinterpret_cast<const void*>(&hopper_gemm_kernel<Shape, In, Out, ChainT, kGated>),
        &epilogue};
  };
}

// out = chain(x W^T + bias): x [m][k] and w [n][k] row-major of In (__nv_bfloat16 or __half), out
// [m][n] row-major of Out (float or In); the epilogue's bias and terms of Out, per column (n).
// float32 sums. cudaErrorNotSupported, with nothing launched, where the kernel cannot take the
// call (a GPU other than compute capability 9.0, a base pointer not 16-byte aligned, k not a
// positive multiple of 8): the caller then takes another GEMM. Asynchronous on `stream`. kTiles:
// the tiles built (TileSet). kGated: out = chain(x W^T + bias) * (x gate^T + gate_bias), `gate`
// [n][k] as w, the epilogue's gate_bias the gate's bias; the launchers below likewise.
template <TileSet kTiles = TileSet::kAll, bool kGated = false, typename In, typename Out,
          class ChainT>
cudaError_t launch_hopper_gemm(const In* x, const In* w, Out* out, int64_t m, int64_t n, int64_t k,
                               const ColumnEpilogue<Out, ChainT>& epilogue, cudaStream_t stream,
                               GemmTile tile = GemmTile::kAuto, const In* gate = nullptr) {
  static_assert(std::is_same_v<In, __nv_bfloat16> || std::is_same_v<In, __half>);
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, In>);
  if (kGated != (gate != nullptr)) return cudaErrorInvalidValue;
  const void* const xs[kMaxParts] = {x, x, x};
  const void* const ws[kMaxParts] = {w, w, w};
  const void* const gates[kMaxParts] = {gate, gate, gate};
  return detail::launch_products<GemmProducts::kOne, kTiles>(
      declared_kernels<In, kGated>(epilogue), detail::nothing_before, xs, ws, out, m, n, k, stream,
      tile, {}, kGated ? gates : nullptr);
}

// bf16x3: out = chain(x W^T + bias) from x's and W's bfloat16 parts (x = x_hi + x_lo, W = w_hi +
// w_lo, as split_bf16 gives them; each [m][k] or [n][k] row-major), x_lo W_hi + x_hi W_lo + x_hi
// W_hi; out and the epilogue's terms float32. kProducts: kBf16x3 (the small terms summed apart),
// kBf16x3OneSum (GemmProducts says why not) or kBf16x3Promoted (each k-tile's sums added into
// float32 totals; 128x128, 128x64 and 64x128 turns tiles only). Refuses as launch_hopper_gemm
// does, and a tile whose accumulators would not fit a consumer's registers (tile_fits false:
// cudaErrorNotSupported, nothing launched). `split`: float32 x and W's parts, for sums that come
// out inf or NaN to be given eager's value (split::eager_sum_if_not_finite); none: left as formed.
template <GemmProducts kProducts = GemmProducts::kBf16x3, TileSet kTiles = TileSet::kAll,
          bool kGated = false, class ChainT>
cudaError_t launch_hopper_gemm_bf16x3(const __nv_bfloat16* x_hi, const __nv_bfloat16* x_lo,
                                      const __nv_bfloat16* w_hi, const __nv_bfloat16* w_lo,
                                      float* out, int64_t m, int64_t n, int64_t k,
                                      const ColumnEpilogue<float, ChainT>& epilogue,
                                      cudaStream_t stream, GemmTile tile = GemmTile::kAuto,
                                      const split::SplitOperands& split = {},
                                      const __nv_bfloat16* gate_hi = nullptr,
                                      const __nv_bfloat16* gate_lo = nullptr,
                                      const split::SplitOperands& gate_split = {}) {
  static_assert(operand_parts(kProducts) == 2);
  if (kGated != (gate_hi != nullptr && gate_lo != nullptr)) return cudaErrorInvalidValue;
  const void* const xs[kMaxParts] = {x_hi, x_lo, x_lo};
  const void* const ws[kMaxParts] = {w_hi, w_lo, w_lo};
  const void* const gates[kMaxParts] = {gate_hi, gate_lo, gate_lo};
  return detail::launch_products<kProducts, kTiles>(
      declared_kernels<__nv_bfloat16, kGated>(epilogue), detail::nothing_before, xs, ws, out, m, n,
      k, stream, tile, split, kGated ? gates : nullptr, gate_split);
}

// bf16x6: out = chain(x W^T + bias) from x's and W's three bfloat16 parts (hi, mid, lo, as
// split_bf16_three gives them; each [m][k] or [n][k] row-major), the six products of parts i and
// j with i + j < 3, smallest first, each k-tile's sums promoted into float32 totals (GemmProducts);
// out and the epilogue's terms float32. The promoted tiles only (128x128, 128x64, 64x128 turns);
// refuses as launch_hopper_gemm_bf16x3 does; `split` as there.
template <TileSet kTiles = TileSet::kAll, bool kGated = false, class ChainT>
cudaError_t launch_hopper_gemm_bf16x6(
    const __nv_bfloat16* const (&x)[kMaxParts], const __nv_bfloat16* const (&w)[kMaxParts],
    float* out, int64_t m, int64_t n, int64_t k, const ColumnEpilogue<float, ChainT>& epilogue,
    cudaStream_t stream, GemmTile tile = GemmTile::kAuto, const split::SplitOperands& split = {},
    const __nv_bfloat16* const* gate = nullptr, const split::SplitOperands& gate_split = {}) {
  if (kGated != (gate != nullptr)) return cudaErrorInvalidValue;
  const void* const xs[kMaxParts] = {x[0], x[1], x[2]};
  const void* const ws[kMaxParts] = {w[0], w[1], w[2]};
  const void* const gates[kMaxParts] = {gate ? gate[0] : nullptr, gate ? gate[1] : nullptr,
                                        gate ? gate[2] : nullptr};
  return detail::launch_products<GemmProducts::kBf16x6Promoted, kTiles>(
      declared_kernels<__nv_bfloat16, kGated>(epilogue), detail::nothing_before, xs, ws, out, m, n,
      k, stream, tile, split, kGated ? gates : nullptr, gate_split);
}

#endif  // __CUDACC_RTC__

}  // namespace gemm
}  // namespace cuda
}  // namespace fusedlinear
