// Tile copies from global to shared memory by the Tensor Memory Accelerator (TMA, sm_90 on): one
// thread issues a whole 2-D tile, rows 128 bytes long, written 128-byte swizzled and with zeros
// where the tile reaches past the matrix; an mbarrier counts its bytes in.
#pragma once

#include <cstdint>

// Host code, which NVRTC (kernels/cuda/jit/) neither takes nor needs: the descriptions are built on
// the host. NVRTC has no cuda.h, so its kernels see the description's type as the driver lays it
// out (sixteen 64-bit words, 64-byte aligned at least, as the TMA reads it).
#ifndef __CUDACC_RTC__
#include <cuda.h>          // CUtensorMap: the TMA's description of a matrix, built on the host
#include <cudaTypedefs.h>  // the driver's encoder's type
#include <cuda_runtime.h>
#else
typedef struct alignas(64) CUtensorMap_st {
  unsigned long long opaque[16];
} CUtensorMap;
#endif

namespace fusedlinear {
namespace cuda {

// The TMA's instructions exist from sm_90; compiled for older GPUs, kernels that would use them
// take another way.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kHasTensorCopies = false;
#else
constexpr bool kHasTensorCopies = true;
#endif

// Bytes in one row of a tile: the TMA's 128-byte swizzle takes rows of up to 128 bytes.
constexpr int kTileRowBytes = 128;

#ifndef __CUDACC_RTC__
// Describes the row-major matrix [rows][cols] of `element_bytes`-byte elements (2: bfloat16, 4:
// float32) at `base` for tiles of box_rows x 128 bytes: where a tile lands, its 16-byte pieces are
// swizzled (piece p of row r at piece p ^ (r % 8)), and what lies past the matrix is read as
// zeros. base 16-byte aligned, each row a multiple of 16 bytes. cudaErrorNotSupported where the
// driver or the sizes do not allow it (the caller then copies another way).
inline cudaError_t describe_matrix(CUtensorMap& map, const void* base, int element_bytes,
                                   int64_t rows, int64_t cols, int box_rows) {
  // The driver's encoder, found once through the runtime (no link to the driver library).
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                             cudaEnableDefault, &found);
#else
    const cudaError_t err =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
               : nullptr;
  }();
  constexpr int64_t kMaxCoordinate = int64_t(1) << 31;  // copy_tile's coordinates are 32-bit
  if (!encode || rows >= kMaxCoordinate || cols >= kMaxCoordinate || rows <= 0 || cols <= 0 ||
      (element_bytes != 2 && element_bytes != 4))
    return cudaErrorNotSupported;
  const cuuint64_t sizes[2] = {cuuint64_t(cols), cuuint64_t(rows)};  // innermost first
  const cuuint64_t row_bytes[1] = {cuuint64_t(cols) * cuuint64_t(element_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(kTileRowBytes / element_bytes), cuuint32_t(box_rows)};
  const cuuint32_t element_steps[2] = {1, 1};
  const CUresult result = encode(
      &map, element_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      2, const_cast<void*>(base), sizes, row_bytes, box, element_steps,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // "none": zeros, not NaN, past the matrix
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}
#endif

// The tile of box_rows x (128 / element bytes) at (row, col) of the matrix `map` describes,
// copied to shared memory at `dst` (1024-byte aligned), its bytes counted on the mbarrier at
// `barrier`.
__device__ __forceinline__ void copy_tile(uint32_t dst, const CUtensorMap& map, int64_t row,
                                          int64_t col, uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(int(col)), "r"(int(row)), "r"(barrier)
      : "memory");
#endif
}

// Readies the mbarrier at `barrier` for one arrival a phase; the block must synchronise before
// any other thread uses it.
__device__ __forceinline__ void init_barrier(uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "mbarrier.init.shared.b64 [%0], 1;\nfence.mbarrier_init.release.cluster;" ::"r"(barrier)
      : "memory");
#endif
}

// Arrives on the mbarrier at `barrier`, telling it that `bytes` are on their way: its phase ends
// once they have all landed.
__device__ __forceinline__ void expect_bytes(uint32_t barrier, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes)
               : "memory");
#endif
}

// Waits until the phase of parity `parity` (0 for its first, 1 for its second, ...) of the
// mbarrier at `barrier` has ended; what was copied under it is then visible to this thread.
__device__ __forceinline__ void wait_barrier(uint32_t barrier, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}" ::"r"(barrier),
      "r"(parity)
      : "memory");
#endif
}

// The mbarriers of a ring of kStages stages, 8 bytes each from `first` in shared memory: step t of
// a walk fills stage t % kStages, and its copies complete that barrier's (t / kStages)-th phase.
template <int kStages>
struct StageBarriers {
  uint32_t first;
  __device__ uint32_t of(int64_t t) const { return first + uint32_t(t % kStages) * 8; }
  // Readies them for the block; every thread calls it (it ends in a barrier).
  __device__ void init() const {
    if (threadIdx.x < kStages) init_barrier(of(threadIdx.x));
    __syncthreads();
  }
  // Waits until step t's copies have landed.
  __device__ void wait(int64_t t) const { wait_barrier(of(t), uint32_t(t / kStages) % 2); }
};

}  // namespace cuda
}  // namespace fusedlinear
