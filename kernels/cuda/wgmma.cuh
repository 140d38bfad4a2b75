// Warpgroup MMA (wgmma, sm_90a), for the Hopper GEMM and the small-batch staged kernel: d (64 x N,
// float32) = or += a b^T, a a 64 x 16 tile and b an N x 16 tile of 16-bit values, both K-major in
// shared memory (128-byte swizzled rows, swizzled_tile_descriptor), N = 64, 128 or 256; and the
// instructions around them (the descriptor, commit, wait, the fences, setmaxnreg). Compiled only
// for sm_90a (CMAKE_CUDA_ARCHITECTURES 90a-real, the default); elsewhere they are empty and
// kHasWarpgroupMma is false, so callers take another way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fusedlinear {
namespace cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool kHasWarpgroupMma = true;
#else
constexpr bool kHasWarpgroupMma = false;
#endif

// The descriptor of a K-major tile of 128-byte rows in shared memory at `address` (its 8-row
// groups 1024 bytes apart, 1024-byte aligned at its first row), 128-byte swizzled: 16-byte piece p
// of row r at piece p ^ (r % 8), as the TMA writes it (tma.cuh).
[[maybe_unused]] __device__ __forceinline__ uint64_t swizzled_tile_descriptor(uint32_t address) {
  return uint64_t((address >> 4) & 0x3fff) | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}

// The accumulators as asm operands, d[i] ... d[i + count - 1].
#define FL_WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FL_WGMMA_D16(i) FL_WGMMA_D4(i), FL_WGMMA_D4(i + 4), FL_WGMMA_D4(i + 8), FL_WGMMA_D4(i + 12)
#define FL_WGMMA_D32(i) FL_WGMMA_D16(i), FL_WGMMA_D16(i + 16)
#define FL_WGMMA_D64(i) FL_WGMMA_D32(i), FL_WGMMA_D32(i + 32)
#define FL_WGMMA_D128(i) FL_WGMMA_D64(i), FL_WGMMA_D64(i + 64)

// clang-format off
// m64n64k16: d[32] (+)= a b^T.
#define FL_WGMMA_M64N64K16(TYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
               "%32, %33, p, 1, 1, 0, 0;\n}\n" \
               : FL_WGMMA_D32(0) \
               : "l"(a), "l"(b), "r"(int(accumulate)))

// m64n128k16: d[64] (+)= a b^T.
#define FL_WGMMA_M64N128K16(TYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
               "%64, %65, p, 1, 1, 0, 0;\n}\n" \
               : FL_WGMMA_D64(0) \
               : "l"(a), "l"(b), "r"(int(accumulate)))

// m64n256k16: d[128] (+)= a b^T.
#define FL_WGMMA_M64N256K16(TYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
               "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
               "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
               "%128, %129, p, 1, 1, 0, 0;\n}\n" \
               : FL_WGMMA_D128(0) \
               : "l"(a), "l"(b), "r"(int(accumulate)))

// clang-format on

// d (+)= a b^T for one 16-k step: In is __nv_bfloat16 or __half; thread t of the warpgroup holds
// d[i] at row 16 (t / 32) + (t % 32) / 4 + 8 (i / 2 % 2), column 8 (i / 4) + 2 (t % 4) + i % 2.
// Where !accumulate, d is overwritten (its old values are not read).
template <int kN, typename In>
__device__ __forceinline__ void warpgroup_mma(float (&d)[kN / 2], uint64_t a, uint64_t b,
                                              bool accumulate) {
  static_assert(std::is_same_v<In, __nv_bfloat16> || std::is_same_v<In, __half>);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<In, __nv_bfloat16>) {
    if constexpr (kN == 64) FL_WGMMA_M64N64K16("bf16");
    if constexpr (kN == 128) FL_WGMMA_M64N128K16("bf16");
    if constexpr (kN == 256) FL_WGMMA_M64N256K16("bf16");
  } else {
    if constexpr (kN == 64) FL_WGMMA_M64N64K16("f16");
    if constexpr (kN == 128) FL_WGMMA_M64N128K16("f16");
    if constexpr (kN == 256) FL_WGMMA_M64N256K16("f16");
  }
#else
  (void)d, (void)a, (void)b, (void)accumulate;
#endif
}

#undef FL_WGMMA_M64N64K16
#undef FL_WGMMA_M64N128K16
#undef FL_WGMMA_M64N256K16
#undef FL_WGMMA_D128
#undef FL_WGMMA_D64
#undef FL_WGMMA_D32
#undef FL_WGMMA_D16
#undef FL_WGMMA_D4

// Orders this warpgroup's register accesses before the products issued after it.
__device__ __forceinline__ void warpgroup_mma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

// Makes this thread's writes to shared memory (cp.async's, once waited for) visible to the
// tensor cores' reads (the async proxy); a barrier after it extends that to the block's.
__device__ __forceinline__ void fence_shared_for_async_reads() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Closes the products issued since the last commit into one group.
__device__ __forceinline__ void warpgroup_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

// Waits until at most kPending of this warp's groups are still running.
template <int kPending>
__device__ __forceinline__ void warpgroup_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}

// Ties the accumulators to this point of the program: the compiler may not move their reads or
// writes across it (the asm of a wait names no registers, so without it a read of d could be
// scheduled before the wait that makes d valid).
template <int kCount>
__device__ __forceinline__ void fence_accumulators(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Gives this warpgroup's registers back (kDecrease) or takes more (!kDecrease), kCount a thread;
// every warp of the warpgroup executes it.
template <int kCount, bool kDecrease>
__device__ __forceinline__ void set_register_count() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kDecrease) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kCount));
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kCount));
  }
#endif
}

}  // namespace cuda
}  // namespace fusedlinear
