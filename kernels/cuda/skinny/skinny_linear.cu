// Skinny linear layers fused with their epilogue, for inputs of few rows (batch 1-64):
//
//   out[m, n] = Activations((sum_k x[m, k] W[n, k] + bias[n]) + shift[n])
//
// W [n, k] (row-major: output-major, as nn.Linear keeps it) is read once, straight from memory,
// with all of a block's loads of a chunk of k in flight at once; x is small and stays on chip, and
// the epilogue runs in registers before the one store of each output. Four kernels, a file each:
//   - skinny_cuda_core.cuh: float32 W up to 8 rows of x (and any W whose rows are not 16-byte
//     aligned, or on a GPU before sm_80), float32 FMAs on the CUDA cores;
//   - skinny_tensor_core.cuh: 16-bit W (16-bit models, and float32 W's bfloat16 parts), mma.sync
//     with fragments straight from the lanes' own loads;
//   - skinny_staged.cuh: bf16x3 from 9 rows, W's and x's parts staged through shared memory so
//     that x crosses L2 once per 64 or 128 rows of W; launched to start while the split of x
//     before it ends (dependent_launch.cuh);
//   - skinny_lane_rows.cuh: float32 W from 9 rows, W and x staged the same way, each lane summing
//     8 rows of W against 4 of x.
// From sm_90 the TMA copies the last two kernels' stages (tma.cuh). What they share, and the
// reduce of split k, is in skinny_common.cuh. This file picks the kernel for a call (dispatch_*),
// lays out its grid (make_plan) and launches it. Results are bitwise the same run to run: where
// too few blocks would cover the rows of W to fill the GPU, k is split over blocks, the partial
// sums written to a workspace and added in split order by another kernel that applies the
// epilogue.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/skinny/common.cuh"
#include "kernels/cuda/skinny/cuda_core.cuh"
#include "kernels/cuda/skinny/lane_rows.cuh"
#include "kernels/cuda/skinny/staged.cuh"
#include "kernels/cuda/skinny/tensor_core.cuh"
#include "kernels/cuda/tma.cuh"

namespace fusedlinear {
namespace cuda {
namespace skinny {
namespace {

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
    launch_kernel<T, WT>(skinny_cuda_core_kernel<T, WT, kHasLo, Shape, Activations>, kWarps * 32,
                         plan, args, partial, stream);
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
    launch_kernel<T, WT>(skinny_tensor_core_kernel<T, WT, kHasLo, Shape, Activations>,
                         kMmaWarps * 32, plan, args, partial, stream);
    return cudaGetLastError();
  }
};

// Lets kKernel take `bytes` of dynamic shared memory on `device`: once per device (each kernel
// keeps its own record, bit d for device d), not per launch.
template <auto kKernel>
cudaError_t allow_shared_bytes_once(int bytes, int device) {
  static std::atomic<uint64_t> allowed{0};
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;  // past 64: every launch
  if (bit != 0 && (allowed.load(std::memory_order_relaxed) & bit)) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void*>(kKernel),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
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
    constexpr auto kernel = skinny_staged_kernel<Shape, Activations, kTileCopies>;
    const cudaError_t err = allow_shared_bytes_once<kernel>(Shape::kSmemBytes, limits.device);
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
    constexpr auto kernel = skinny_lane_rows_kernel<Shape, Activations, kTileCopies>;
    const cudaError_t err = allow_shared_bytes_once<kernel>(Shape::kSmemBytes, limits.device);
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
}  // namespace skinny
}  // namespace cuda

cudaError_t plan_skinny_linear(const SkinnyLinearArgs& args, int64_t& workspace_floats) {
  using namespace cuda::skinny;
  workspace_floats = 0;
  return with_plan(args, [&](auto kernel, const cuda::DeviceLimits&, const Plan& plan) {
    workspace_floats = workspace_layout<decltype(kernel)>(args, plan).total();
    return cudaSuccess;
  });
}

cudaError_t launch_skinny_linear(const SkinnyLinearArgs& args, float* workspace,
                                 cudaStream_t stream) {
  using namespace cuda::skinny;
  if (args.rows == 0 || args.out_features == 0) return cudaSuccess;
  return with_plan(args, [&](auto kernel, const cuda::DeviceLimits& limits, const Plan& plan) {
    using Kernel = decltype(kernel);
    using T = typename Kernel::Element;
    const WorkspaceLayout layout = workspace_layout<Kernel>(args, plan);
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
          limits, skinny_reduce_kernel<T, Activations>, unsigned(blocks), threads, 0, stream,
          static_cast<const float*>(partial), plan.splits, static_cast<const T*>(args.bias),
          static_cast<const T*>(args.shift), static_cast<T*>(args.out), count, args.out_features);
    });
    return err;
  });
}

}  // namespace fusedlinear
