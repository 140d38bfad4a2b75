// Skinny linear layers fused with their epilogue, for inputs of few rows (batch 1-16):
//
//   out[m, n] = Activations((sum_k x[m, k] W[n, k] + bias[n]) + shift[n])
//
// W [n, k] (row-major: output-major, as nn.Linear keeps it) is read once, straight from memory,
// with 16-byte loads, a chunk of k at a time with all of a chunk's loads in flight at once; x is
// read where it lies (small, it stays in the caches); products and sums are float32 FMAs on the
// CUDA cores, and the epilogue runs in registers before the one store of each output. Each warp
// owns kWarpRows rows of W; each lane sums its own k's, and the warp's lanes are added in a fixed
// tree, so results are bitwise the same run to run. Where too few warps would cover the rows of W
// to fill the GPU, k is split over blocks, the partial sums written to a workspace and added in
// split order by a second kernel that applies the epilogue.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fused_epilogue.cuh"
#include "linear_cuda.h"

namespace fusedlinear {
namespace cuda {
namespace {

constexpr int kWarps = 4;         // per block
constexpr int kLoadsPerLane = 8;  // 16-byte loads of W in flight per lane per chunk
constexpr int kLargestTile = 16;  // rows of x per block; more rows take more blocks (grid z)

// Rows of W per warp: each x value a lane reads (from L1) serves that many rows, so wider tiles
// of x, with more values to read per load of W, take more: about one read of x per load of W
// keeps L1 from binding before memory does. 16 rows would need 16 (too many registers): the
// widest tile is correct but slower, and not chosen automatically.
template <int kRows>
inline constexpr int kWarpRowsFor = kRows == 1   ? 2
                                    : kRows == 4 ? 4
                                    : kRows == 8 ? 8
                                                 : 4;

// The shape of one instantiation: kVec elements of W per load (16 bytes, or 1 where W's rows are
// not 16-byte aligned), kParts loads per element group (2 with a lo part), kSteps loads per row
// per lane per chunk, kChunk values of k per chunk.
template <typename WT, bool kHasLo, int kVecOf, int kRowsOf>
struct SkinnyShape {
  static constexpr int kVec = kVecOf;
  static constexpr int kRows = kRowsOf;
  static constexpr int kWarpRows = kWarpRowsFor<kRows>;
  static constexpr int kParts = kHasLo ? 2 : 1;
  static constexpr int kSteps = std::max(1, kLoadsPerLane / (kWarpRows * kParts));
  static constexpr int kChunk = kSteps * 32 * kVec;
};

// W's kVec values at `p` as floats (hi + lo where a lo part is given: exact in float32, as the
// two bfloat16 parts together hold at most 16 significant bits).
template <bool kHasLo, typename WT, int kVec>
__device__ __forceinline__ void weight_floats(const Packed<WT, kVec>& hi,
                                              const Packed<__nv_bfloat16, kVec>& lo,
                                              float (&w)[kVec]) {
  to_floats(hi, w);
  if constexpr (kHasLo) {
    float low[kVec];
    to_floats(lo, low);
#pragma unroll
    for (int v = 0; v < kVec; ++v) w[v] += low[v];
  }
}

template <typename T, class Activations>
__device__ __forceinline__ T finish(float sum, const T* bias, const T* shift, int64_t n) {
  if (bias) sum += to_float(bias[n]);
  if (shift) sum += to_float(shift[n]);
  return from_float<T>(Activations{}(sum));
}

// x [rows, k_in], W [n_out, k_in] (and W's lo part, bfloat16, where kHasLo), out [rows, n_out];
// T is x's, bias's, shift's and out's type. Block (x, y, z): kWarps * kWarpRows rows of W, the
// y-th split of k (k_per_split values, a multiple of kChunk), kRows rows of x. With one split the
// block applies the epilogue and writes out; with several it writes its sums to
// partial[split][row][n] for skinny_reduce_kernel.
template <typename T, typename WT, bool kHasLo, class Shape, class Activations>
__global__ void __launch_bounds__(kWarps * 32)
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
  const int64_t k_begin = int64_t(blockIdx.y) * k_per_split;
  const int64_t k_end = k_begin + k_per_split < k_in ? k_begin + k_per_split : k_in;

  // Rows of x past the last (a tile's padding) read the last row; their sums are not stored.
  const T* x_rows[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) x_rows[m] = x + (m0 + m < rows ? m0 + m : rows - 1) * k_in;

  float acc[kWarpRows][kRows] = {};
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kChunk) {
    // This chunk's W first: its loads are all in flight before the first product.
    Pack hi[kWarpRows][kSteps];
    [[maybe_unused]] LoPack lo[kWarpRows][kSteps];
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int64_t k = k0 + (s * 32 + lane) * kVec;
        const bool inside = n0 + r < n_out && k < k_end;
        const int64_t at = (n0 + r) * k_in + k;
        hi[r][s] = inside ? *reinterpret_cast<const Pack*>(w + at) : Pack{};
        if constexpr (kHasLo) {
          lo[r][s] = inside ? *reinterpret_cast<const LoPack*>(w_lo + at) : LoPack{};
        }
      }
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t k = k0 + (s * 32 + lane) * kVec;
      if (k >= k_end) break;
      float wv[kWarpRows][kVec];
#pragma unroll
      for (int r = 0; r < kWarpRows; ++r) weight_floats<kHasLo>(hi[r][s], lo[r][s], wv[r]);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        // x's values, read where they lie (they stay in L1 and L2: every warp reads them).
        float xv[kVec];
        to_floats(*reinterpret_cast<const Packed<T, kVec>*>(x_rows[m] + k), xv);
#pragma unroll
        for (int r = 0; r < kWarpRows; ++r) {
#pragma unroll
          for (int v = 0; v < kVec; ++v) acc[r][m] = fmaf(xv[v], wv[r][v], acc[r][m]);
        }
      }
    }
  }

  // The lanes' sums added in a butterfly: partners add the same two values, so every lane ends
  // with the same, order-fixed total.
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r) {
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], offset);
      }
    }
  }
  // Each total stored by one lane, the stores spread over the warp.
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r) {
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int64_t n = n0 + r, row = m0 + m;
      if (lane != (r * kRows + m) % 32 || n >= n_out || row >= rows) continue;
      if (partial) {
        partial[(int64_t(blockIdx.y) * rows + row) * n_out + n] = acc[r][m];
      } else {
        out[row * n_out + n] = finish<T, Activations>(acc[r][m], bias, shift, n);
      }
    }
  }
}

// out[i] = epilogue(sum over the splits, in order, of partial[split][i]) for i < count.
template <typename T, class Activations>
__global__ void skinny_reduce_kernel(const float* __restrict__ partial, int splits,
                                     const T* __restrict__ bias, const T* __restrict__ shift,
                                     T* __restrict__ out, int64_t count, int64_t n_out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    float sum = partial[i];
    for (int s = 1; s < splits; ++s) sum += partial[s * count + i];
    out[i] = finish<T, Activations>(sum, bias, shift, i % n_out);
  }
}

// How one call is laid out: the grid of skinny_linear_kernel and its splits of k.
struct Plan {
  dim3 grid;
  int64_t k_per_split = 0;
  int splits = 1;
};

// Enough blocks for two per multiprocessor: k is split only when the rows of W (and of x) give
// fewer, and never below one chunk per split.
template <class Shape>
cudaError_t make_plan(int64_t rows, int64_t n_out, int64_t k_in, Plan& plan) {
  DeviceLimits limits;
  const cudaError_t err = current_device_limits(limits);
  if (err != cudaSuccess) return err;
  const int64_t blocks_n = ceil_div(n_out, int64_t(kWarps) * Shape::kWarpRows);
  const int64_t tiles_m = ceil_div(rows, Shape::kRows);
  if (blocks_n > 2147483647 || tiles_m > 65535) return cudaErrorInvalidConfiguration;
  const int64_t chunks = ceil_div(k_in, Shape::kChunk);
  const int64_t wanted = 2 * int64_t(limits.multiprocessors);
  int64_t splits = 1;
  if (blocks_n * tiles_m < wanted) splits = std::min(chunks, ceil_div(wanted, blocks_n * tiles_m));
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, 65535));
  plan.k_per_split = ceil_div(chunks, splits) * Shape::kChunk;
  plan.splits = int(ceil_div(k_in, plan.k_per_split));
  plan.grid = dim3(unsigned(blocks_n), unsigned(plan.splits), unsigned(tiles_m));
  return cudaSuccess;
}

// Calls fn(Shape{}) for the instantiation `rows` and the alignment of the operands take: 16-byte
// loads of W (and as many values of x per load) where W's rows and parts and x's rows are
// aligned for them, the narrowest tile of x rows that holds `rows`; one element per load
// otherwise, with the widest tile (correct for any shape and alignment, not tuned).
template <typename T, typename WT, bool kHasLo, class Fn>
void dispatch_shape(const SkinnyLinearArgs& args, Fn&& fn) {
  constexpr int kVec = 16 / sizeof(WT);
  const auto aligned = [](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const bool vector_loads = args.in_features % kVec == 0 && aligned(args.w, 16) &&
                            (!kHasLo || aligned(args.w_lo, 16)) &&
                            aligned(args.x, sizeof(T) * kVec);
  if (!vector_loads) return fn(SkinnyShape<WT, kHasLo, 1, kLargestTile>{});
  if (args.rows <= 1) return fn(SkinnyShape<WT, kHasLo, kVec, 1>{});
  if (args.rows <= 4) return fn(SkinnyShape<WT, kHasLo, kVec, 4>{});
  if (args.rows <= 8) return fn(SkinnyShape<WT, kHasLo, kVec, 8>{});
  return fn(SkinnyShape<WT, kHasLo, kVec, kLargestTile>{});
}

// x's element type T, W's WT, and whether W has a lo part: one instantiation's types.
template <typename T, typename WT, bool kHasLo>
struct Types {
  using Element = T;
  using Weight = WT;
  static constexpr bool kLo = kHasLo;
};

// Calls fn(Types<...>{}) for the argument's element types: W in x's type, or, for float32 x,
// W's bfloat16 hi part with or without its lo part.
template <class Fn>
void dispatch_types(const SkinnyLinearArgs& args, Fn&& fn) {
  dispatch_element(args.type, [&](auto element) {
    using T = DeviceElement<decltype(element)::value>;
    if (args.weight == SkinnyWeight::kAsInput) return fn(Types<T, T, false>{});
    if constexpr (std::is_same_v<T, float>) {
      if (args.weight == SkinnyWeight::kBf16) return fn(Types<T, __nv_bfloat16, false>{});
      if (args.weight == SkinnyWeight::kBf16HiLo) return fn(Types<T, __nv_bfloat16, true>{});
    }
  });
}

}  // namespace
}  // namespace cuda

cudaError_t plan_skinny_linear(const SkinnyLinearArgs& args, int64_t& workspace_floats) {
  cudaError_t err = cudaErrorInvalidValue;
  workspace_floats = 0;
  cuda::dispatch_types(args, [&](auto types) {
    using Types = decltype(types);
    cuda::dispatch_shape<typename Types::Element, typename Types::Weight, Types::kLo>(
        args, [&](auto shape) {
          cuda::Plan plan;
          err = cuda::make_plan<decltype(shape)>(args.rows, args.out_features, args.in_features,
                                                 plan);
          if (err == cudaSuccess && plan.splits > 1) {
            workspace_floats = int64_t(plan.splits) * args.rows * args.out_features;
          }
        });
  });
  return err;
}

cudaError_t launch_skinny_linear(const SkinnyLinearArgs& args, float* workspace,
                                 cudaStream_t stream) {
  if (args.rows == 0 || args.out_features == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  cuda::dispatch_types(args, [&](auto types) {
    using T = typename decltype(types)::Element;
    using WT = typename decltype(types)::Weight;
    constexpr bool kHasLo = decltype(types)::kLo;
    cuda::dispatch_shape<T, WT, kHasLo>(args, [&](auto shape) {
      using Shape = decltype(shape);
      cuda::Plan plan;
      err = cuda::make_plan<Shape>(args.rows, args.out_features, args.in_features, plan);
      if (err != cudaSuccess) return;
      if (plan.splits > 1 && !workspace) {
        err = cudaErrorInvalidValue;
        return;
      }
      dispatch_epilogue<kResultPrecisionOf<T>>(args.kind, [&](auto activations) {
        using Activations = decltype(activations);
        const T* bias = static_cast<const T*>(args.bias);
        const T* shift = static_cast<const T*>(args.shift);
        T* out = static_cast<T*>(args.out);
        cuda::skinny_linear_kernel<T, WT, kHasLo, Shape, Activations>
            <<<plan.grid, cuda::kWarps * 32, 0, stream>>>(
                static_cast<const T*>(args.x), static_cast<const WT*>(args.w),
                static_cast<const __nv_bfloat16*>(args.w_lo), bias, shift, out,
                plan.splits > 1 ? workspace : nullptr, args.rows, args.out_features,
                args.in_features, plan.k_per_split);
        err = cudaGetLastError();
        if (err != cudaSuccess || plan.splits == 1) return;
        const int64_t count = args.rows * args.out_features;
        const int threads = 256;
        const int64_t blocks = std::min<int64_t>(cuda::ceil_div(count, threads), 65535);
        cuda::skinny_reduce_kernel<T, Activations><<<unsigned(blocks), threads, 0, stream>>>(
            workspace, plan.splits, bias, shift, out, count, args.out_features);
        err = cudaGetLastError();
      });
    });
  });
  return err;
}

}  // namespace fusedlinear
