// The small-batch kernels as plan_skinny_linear picks them: each SkinnyVariant (skinny.h) mapped to
// one instantiation (the kernel, what its block covers, its workspace, its launch), the choice of
// variant for a call on a device, and the layout of its grid. Included by plan.cu (the choice, no
// chain), launch.cuh (the launches, for each chain) and, for the kernels alone, by the units NVRTC
// compiles for a run-time chain (kernels/cuda/jit/chain_units.h), which take each variant's
// `kernel` and none of the host code.
//
// Where too few blocks would cover the rows of W to fill the GPU, k is split over blocks: the
// partial sums go to a workspace and skinny_reduce_kernel adds them in split order and applies the
// epilogue, so results are bitwise the same run to run.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/skinny/common.cuh"
#include "kernels/cuda/skinny/cuda_core.cuh"
#include "kernels/cuda/skinny/lane_rows.cuh"
#include "kernels/cuda/skinny/skinny.h"
#include "kernels/cuda/skinny/staged.cuh"
#include "kernels/cuda/skinny/tensor_core.cuh"

#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/tma.cuh"
#endif

namespace fusedlinear {
namespace cuda {
namespace skinny {

#ifndef __CUDACC_RTC__
// What one block of a kernel covers, and how many blocks per multiprocessor fill the GPU.
struct BlockCover {
  int64_t w_rows, x_rows, chunk;  // rows of W and of x; values of k per chunk
  int64_t min_chunks_per_split;   // fewer would leave some of the block's warps idle
  int64_t blocks_per_multiprocessor;
  bool within_one_wave = false;  // never more blocks than blocks_per_multiprocessor fill
};

// Enough blocks to fill the GPU: k is split only when the rows of W (and of x) give fewer, and
// never below the cover's chunks per split.
inline cudaError_t make_plan(int64_t rows, int64_t n_out, int64_t k_in, const BlockCover& cover,
                             const DeviceLimits& limits, SkinnyPlan& plan) {
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
  plan.grid[0] = unsigned(blocks_n);
  plan.grid[1] = unsigned(plan.splits);
  plan.grid[2] = unsigned(tiles_m);
  return cudaSuccess;
}

inline dim3 grid_of(const SkinnyPlan& plan) {
  return dim3(plan.grid[0], plan.grid[1], plan.grid[2]);
}

// The kernels a launch takes: a declaration's instances for its chain (declared_kernels), or a
// run-time chain's compiled by NVRTC (kernels/cuda/jit/), the same instances, as pointers. Each
// variant's launch reads its kernel's parameter types from the function's type (Kernel::Function),
// so that it launches either alike.
struct SkinnyKernels {
  const void* kernel[2] = {};  // without, with the TMA's tile copies (the same where none)
  const void* reduce = nullptr;
};

// The kernels' function types, written without naming an instance (naming a run-time chain's,
// which only NVRTC compiles, would ask the library for its definition): the CUDA-core and
// tensor-core kernels', and the reduce kernel's. declared_kernels checks each against the kernel.
template <typename T, typename WT, class ChainT>
using RowsKernelFunction = void (*)(const T*, const WT*, const __nv_bfloat16*, T*, float*, int64_t,
                                    int64_t, int64_t, int64_t, ColumnEpilogue<T, ChainT>,
                                    split::SplitOperands);
template <typename T, class ChainT>
using ReduceFunction = void (*)(const float*, int, T*, int64_t, int64_t, ColumnEpilogue<T, ChainT>,
                                split::SplitOperands);

// The host side of the CUDA-core and tensor-core kernels, which take the same arguments and differ
// in their threads a block: their function type, their (empty) workspace, and their launch, with
// the call's pointers as their types and what bf16x3's sums that come out inf or NaN read
// (split_operands_of); as the dependent of the kernel before it (launch_dependent_kernel), so
// that its launch and its first requests for W overlap that kernel's end.
template <typename T, typename WT, int kThreads>
struct RowsKernelHost {
  template <class ChainT>
  using Function = RowsKernelFunction<T, WT, ChainT>;
  static int64_t x_workspace_floats(const LinearCall&) { return 0; }
  template <class ChainT>
  static cudaError_t launch(const DeviceLimits& limits, const SkinnyPlan& plan,
                            const LinearCall& call, float*, float* partial,
                            const ColumnEpilogue<T, ChainT>& epilogue, const SkinnyKernels& kernels,
                            cudaStream_t stream) {
    return KernelLauncher<Function<ChainT>>::launch_dependent(
        limits, kernels.kernel[0], grid_of(plan), kThreads, 0, stream,
        static_cast<const T*>(call.x), static_cast<const WT*>(call.w),
        static_cast<const __nv_bfloat16*>(call.w_lo), static_cast<T*>(call.out), partial, call.rows,
        call.out_features, call.in_features, plan.k_per_split, epilogue, split_operands_of(call));
  }
};

// Whether a launch may have the TMA copy its stages (the matrices must also be described:
// describe_matrix): asked for, on sm_90 or newer.
inline bool tile_copies_allowed(const LinearCall& call, const DeviceLimits& limits) {
  return call.tile_copies && limits.compute_major >= 9;
}
#endif  // __CUDACC_RTC__

// One instantiation of the CUDA-core kernel: its element type, its kernel, what its block covers,
// its launch. Each variant gives its kernel's address from a constexpr function, which a unit
// compiled by NVRTC calls in its name expressions (chain_units.h): a variable holding the address
// would be emitted into the module, and a kernel whose address is stored ptxas compiles otherwise
// (more registers, fewer blocks an SM) than the library's copy.
template <typename T, typename WT, bool kHasLo, class Shape>
struct CudaCoreKernel
#ifndef __CUDACC_RTC__
    : RowsKernelHost<T, WT, kWarps * 32>
#endif
{
  using Element = T;
  static constexpr bool kHasTileCopies = false;
  template <class ChainT, bool kTileCopies>
  static constexpr auto kernel() {
    return &skinny_cuda_core_kernel<T, WT, kHasLo, Shape, ChainT>;
  }
#ifndef __CUDACC_RTC__
  // Two blocks an SM fill the GPU; the widest tile's blocks, two an SM, stay within one wave
  // (split in two, into a second wave, it measured slower: docs/PERFORMANCE.md, whole waves).
  static BlockCover cover() {
    BlockCover cover{kWarps * Shape::kWarpRows, Shape::kRows, Shape::kChunk, 1, 2};
    cover.within_one_wave = Shape::kRows == kLargestTile;
    return cover;
  }
#endif
};

template <typename T, typename WT, bool kHasLo>
struct TensorCoreKernel
#ifndef __CUDACC_RTC__
    : RowsKernelHost<T, WT, kMmaWarps * 32>
#endif
{
  using Element = T;
  using Shape = MmaShape<kHasLo, 1>;  // tiles of 8 rows of x; more rows take more tiles
  static constexpr bool kHasTileCopies = false;
  template <class ChainT, bool kTileCopies>
  static constexpr auto kernel() {
    return &skinny_tensor_core_kernel<T, WT, kHasLo, Shape, ChainT>;
  }
#ifndef __CUDACC_RTC__
  static BlockCover cover() { return {kMmaRowsW, Shape::kRows, Shape::kChunk, kMmaWarps, 1}; }
#endif
};

// The staged kernel (bf16x3 only); x is split into its bfloat16 parts in the workspace first.
template <class Shape>
struct StagedKernel {
  using Element = float;
  static constexpr bool kHasTileCopies = Shape::kTmaTiles;
  template <class ChainT, bool kTileCopies>
  static constexpr auto kernel() {
    return &skinny_staged_kernel<Shape, ChainT, kTileCopies>;
  }
#ifndef __CUDACC_RTC__
  template <class ChainT>
  using Function = void (*)(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                            const __nv_bfloat16*, float*, float*, int64_t, int64_t, int64_t,
                            int64_t, StagedMaps, ColumnEpilogue<float, ChainT>,
                            split::SplitOperands);
  static BlockCover cover() {
    return {Shape::kRowsW, Shape::kRows, Shape::kK, Shape::kStages, Shape::kBlocksPerMultiprocessor,
            true};
  }
  static int64_t x_workspace_floats(const LinearCall& call) {
    return call.rows * call.in_features;  // two bfloat16 parts
  }
  template <class ChainT>
  static cudaError_t launch(const DeviceLimits& limits, const SkinnyPlan& plan,
                            const LinearCall& call, float* workspace, float* partial,
                            const ColumnEpilogue<float, ChainT>& epilogue,
                            const SkinnyKernels& kernels, cudaStream_t stream) {
    const int64_t count = call.rows * call.in_features;
    auto* x_hi = reinterpret_cast<__nv_bfloat16*>(workspace);
    __nv_bfloat16* x_lo = x_hi + count;
    cudaError_t err =
        launch_split_bf16(static_cast<const float*>(call.x), x_hi, x_lo, count, stream);
    if (err != cudaSuccess) return err;
    StagedMaps maps{};
    bool described = false;
    if constexpr (Shape::kTmaTiles) {
      described = tile_copies_allowed(call, limits) &&
                  describe_matrix(maps.w_hi, call.w, 2, call.out_features, call.in_features,
                                  Shape::kRowsW) == cudaSuccess &&
                  describe_matrix(maps.w_lo, call.w_lo, 2, call.out_features, call.in_features,
                                  Shape::kRowsW) == cudaSuccess &&
                  describe_matrix(maps.x_hi, x_hi, 2, call.rows, call.in_features, Shape::kRows) ==
                      cudaSuccess &&
                  describe_matrix(maps.x_lo, x_lo, 2, call.rows, call.in_features, Shape::kRows) ==
                      cudaSuccess;
    }
    const void* kernel = kernels.kernel[described ? 1 : 0];
    err = allow_shared_bytes_once(kernel, Shape::kSmemBytes, limits.device);
    if (err != cudaSuccess) return err;
    // Overlapping the split's tail: the kernel waits for it before it reads x's parts.
    return KernelLauncher<Function<ChainT>>::launch_dependent(
        limits, kernel, grid_of(plan), kStagedWarps * 32, Shape::kSmemBytes, stream, x_hi, x_lo,
        static_cast<const __nv_bfloat16*>(call.w), static_cast<const __nv_bfloat16*>(call.w_lo),
        static_cast<float*>(call.out), partial, call.rows, call.out_features, call.in_features,
        plan.k_per_split, maps, epilogue, split_operands_of(call));
  }
#endif
};

// The lane-rows kernel (float32 W, 16-byte aligned rows, sm_80 on): two blocks an SM, within one
// wave (at 8192 outputs 128 blocks of rows of W, k split in two). From sm_90 W and x are staged
// by the TMA, where the driver describes them (describe_matrix); otherwise with cp.async.
struct LaneRowsKernel {
  using Element = float;
  using Shape = LaneRowsShape;
  static constexpr bool kHasTileCopies = true;
  template <class ChainT, bool kTileCopies>
  static constexpr auto kernel() {
    return &skinny_lane_rows_kernel<Shape, ChainT, kTileCopies>;
  }
#ifndef __CUDACC_RTC__
  template <class ChainT>
  using Function = void (*)(const float*, const float*, float*, float*, int64_t, int64_t, int64_t,
                            int64_t, CUtensorMap, CUtensorMap, ColumnEpilogue<float, ChainT>);
  static BlockCover cover() {
    return {Shape::kRowsW, Shape::kRows, Shape::kK, 1, Shape::kBlocks, true};
  }
  static int64_t x_workspace_floats(const LinearCall&) { return 0; }
  template <class ChainT>
  static cudaError_t launch(const DeviceLimits& limits, const SkinnyPlan& plan,
                            const LinearCall& call, float*, float* partial,
                            const ColumnEpilogue<float, ChainT>& epilogue,
                            const SkinnyKernels& kernels, cudaStream_t stream) {
    CUtensorMap w_map{}, x_map{};
    const bool tile_copies =
        tile_copies_allowed(call, limits) &&
        describe_matrix(w_map, call.w, 4, call.out_features, call.in_features, Shape::kRowsW) ==
            cudaSuccess &&
        describe_matrix(x_map, call.x, 4, call.rows, call.in_features, Shape::kRows) == cudaSuccess;
    const void* kernel = kernels.kernel[tile_copies ? 1 : 0];
    const cudaError_t err = allow_shared_bytes_once(kernel, Shape::kSmemBytes, limits.device);
    if (err != cudaSuccess) return err;
    return KernelLauncher<Function<ChainT>>::launch(
        kernel, grid_of(plan), Shape::kWarps * 32, Shape::kSmemBytes, stream,
        static_cast<const float*>(call.x), static_cast<const float*>(call.w),
        static_cast<float*>(call.out), partial, call.rows, call.out_features, call.in_features,
        plan.k_per_split, w_map, x_map, epilogue);
  }
#endif
};

// The staged kernel's shapes: 64 rows of W a block, two blocks an SM, up to 32 rows of x; from 33
// rows 128 rows of W a block, one block an SM (sm_90's 227 KiB).
using StagedUpTo16 = StagedShape<2>;
using StagedUpTo32 = StagedShape<4>;
using StagedFrom33 = StagedShape<8, 128, 64, 1>;

// The instantiation of each variant, for 16-bit models of element type T (the other families are
// float32 x).
template <typename T, SkinnyVariant kVariant>
struct KernelOf;
#define FUSEDLINEAR_KERNEL_OF(variant, ...)    \
  template <typename T>                        \
  struct KernelOf<T, SkinnyVariant::variant> { \
    using type = __VA_ARGS__;                  \
  };
FUSEDLINEAR_KERNEL_OF(kFloatRows1,
                      CudaCoreKernel<float, float, false, SkinnyShape<float, false, 4, 1>>)
FUSEDLINEAR_KERNEL_OF(kFloatRows4,
                      CudaCoreKernel<float, float, false, SkinnyShape<float, false, 4, 4>>)
FUSEDLINEAR_KERNEL_OF(kFloatRows8,
                      CudaCoreKernel<float, float, false, SkinnyShape<float, false, 4, 8>>)
FUSEDLINEAR_KERNEL_OF(kFloatLaneRows, LaneRowsKernel)
FUSEDLINEAR_KERNEL_OF(
    kFloatUnaligned,
    CudaCoreKernel<float, float, false, SkinnyShape<float, false, 1, kLargestTile>>)
FUSEDLINEAR_KERNEL_OF(kBf16TensorCore, TensorCoreKernel<float, __nv_bfloat16, false>)
FUSEDLINEAR_KERNEL_OF(
    kBf16Unaligned,
    CudaCoreKernel<float, __nv_bfloat16, false, SkinnyShape<__nv_bfloat16, false, 1, kLargestTile>>)
FUSEDLINEAR_KERNEL_OF(kBf16x3TensorCore, TensorCoreKernel<float, __nv_bfloat16, true>)
FUSEDLINEAR_KERNEL_OF(kBf16x3Staged16, StagedKernel<StagedUpTo16>)
FUSEDLINEAR_KERNEL_OF(kBf16x3Staged32, StagedKernel<StagedUpTo32>)
FUSEDLINEAR_KERNEL_OF(kBf16x3Staged64, StagedKernel<StagedFrom33>)
FUSEDLINEAR_KERNEL_OF(
    kBf16x3Unaligned,
    CudaCoreKernel<float, __nv_bfloat16, true, SkinnyShape<__nv_bfloat16, true, 1, kLargestTile>>)
FUSEDLINEAR_KERNEL_OF(kHalfTensorCore, TensorCoreKernel<T, T, false>)
FUSEDLINEAR_KERNEL_OF(kHalfUnaligned,
                      CudaCoreKernel<T, T, false, SkinnyShape<T, false, 1, kLargestTile>>)
#undef FUSEDLINEAR_KERNEL_OF

// The variants of each family, in SkinnyVariant's order.
template <SkinnyFamily kFamily>
struct FamilyVariants;
template <>
struct FamilyVariants<SkinnyFamily::kFloat> {
  static constexpr SkinnyVariant kFirst = SkinnyVariant::kFloatRows1,
                                 kLast = SkinnyVariant::kFloatUnaligned;
};
template <>
struct FamilyVariants<SkinnyFamily::kBf16> {
  static constexpr SkinnyVariant kFirst = SkinnyVariant::kBf16TensorCore,
                                 kLast = SkinnyVariant::kBf16Unaligned;
};
template <>
struct FamilyVariants<SkinnyFamily::kBf16x3> {
  static constexpr SkinnyVariant kFirst = SkinnyVariant::kBf16x3TensorCore,
                                 kLast = SkinnyVariant::kBf16x3Unaligned;
};
template <>
struct FamilyVariants<SkinnyFamily::kHalf> {
  static constexpr SkinnyVariant kFirst = SkinnyVariant::kHalfTensorCore,
                                 kLast = SkinnyVariant::kHalfUnaligned;
};

#ifndef __CUDACC_RTC__
// Calls fn(KernelOf<T, variant>::type{}) for `variant`, one of kFamily's (T: a 16-bit model's
// element type; float for the others). The one switch from a plan's variant to its kernel.
template <SkinnyFamily kFamily, typename T, int kV = int(FamilyVariants<kFamily>::kFirst), class Fn>
cudaError_t with_variant(SkinnyVariant variant, Fn&& fn) {
  if constexpr (kV > int(FamilyVariants<kFamily>::kLast)) {
    return cudaErrorInvalidValue;
  } else {
    if (int(variant) == kV) return fn(typename KernelOf<T, SkinnyVariant(kV)>::type{});
    return with_variant<kFamily, T, kV + 1>(variant, fn);
  }
}

// A declaration's (or the interpreter's) instances of variant Kernel's kernels, and of the reduce
// kernel, for chain ChainT on elements T. Each variant's kernel is also its instance with the
// TMA's tile copies where it has none (Kernel::kHasTileCopies).
template <class Kernel, typename T, class ChainT>
SkinnyKernels declared_kernels() {
  static_assert(std::is_same_v<typename Kernel::template Function<ChainT>,
                               decltype(Kernel::template kernel<ChainT, false>())>,
                "a variant's Function is its kernel's type");
  static_assert(
      std::is_same_v<ReduceFunction<T, ChainT>, decltype(&skinny_reduce_kernel<T, ChainT>)>,
      "ReduceFunction is the reduce kernel's type");
  SkinnyKernels kernels;
  kernels.kernel[0] = reinterpret_cast<const void*>(Kernel::template kernel<ChainT, false>());
  kernels.kernel[1] =
      reinterpret_cast<const void*>(Kernel::template kernel<ChainT, Kernel::kHasTileCopies>());
  kernels.reduce = reinterpret_cast<const void*>(&skinny_reduce_kernel<T, ChainT>);
  return kernels;
}

// The variant a call takes on the device `limits` describes.
//   float32 W: where W's and x's rows are aligned for 16-byte loads, the CUDA-core kernel with the
//   narrowest tile of x rows that holds `rows` up to 8 rows, the lane-rows kernel from 9 (where
//   the GPU has cp.async and its shared memory); otherwise the CUDA-core kernel one element a load
//   (correct for any shape and alignment).
//   16-bit W (16-bit models, and float32 W's bfloat16 parts): the tensor-core kernel where the GPU
//   has mma.sync (sm_80 on) and W's and x's rows are 16-byte aligned, in tiles of 8 rows of x;
//   bf16x3 from 9 rows the staged kernel, where the GPU has the shared memory for it; otherwise the
//   CUDA-core kernel one element a load (float32 products of the same values, x not rounded).
inline SkinnyVariant choose_variant(const LinearCall& call, const DeviceLimits& limits) {
  if (call.type == ElementType::kFloat32 && call.precision == Precision::kIeee) {
    const bool vector_loads = call.in_features % 4 == 0 && aligned16(call.w) && aligned16(call.x);
    if (!vector_loads) return SkinnyVariant::kFloatUnaligned;
    if (call.rows <= 1) return SkinnyVariant::kFloatRows1;
    if (call.rows <= 4) return SkinnyVariant::kFloatRows4;
    if (call.rows <= 8) return SkinnyVariant::kFloatRows8;
    if (limits.compute_major >= 8 && limits.shared_bytes_per_block >= LaneRowsShape::kSmemBytes) {
      return SkinnyVariant::kFloatLaneRows;
    }
    return SkinnyVariant::kFloatUnaligned;
  }
  const bool split = call.precision == Precision::kBf16x3;
  const bool tensor_cores = limits.compute_major >= 8 && call.in_features % 8 == 0 &&
                            aligned16(call.w) && (!split || aligned16(call.w_lo)) &&
                            aligned16(call.x);
  if (call.type != ElementType::kFloat32) {
    return tensor_cores ? SkinnyVariant::kHalfTensorCore : SkinnyVariant::kHalfUnaligned;
  }
  if (!split) return tensor_cores ? SkinnyVariant::kBf16TensorCore : SkinnyVariant::kBf16Unaligned;
  if (!tensor_cores) return SkinnyVariant::kBf16x3Unaligned;
  if (call.rows > 8 && limits.shared_bytes_per_block >=
                           std::max(StagedUpTo32::kSmemBytes, StagedFrom33::kSmemBytes)) {
    if (call.rows <= 16) return SkinnyVariant::kBf16x3Staged16;
    if (call.rows <= 32) return SkinnyVariant::kBf16x3Staged32;
    return SkinnyVariant::kBf16x3Staged64;
  }
  return SkinnyVariant::kBf16x3TensorCore;
}

#endif  // __CUDACC_RTC__

}  // namespace skinny
}  // namespace cuda
}  // namespace fusedlinear
