// The Hopper GEMM's shared-memory ring and the barriers around it: kStages slots of operand tiles,
// each with a "full" mbarrier (the producer's tile copies counted in, tma.cuh) and an "empty" one
// (each consumer warp arrives once its products have read the slot); named barriers that let the
// two consumer warpgroups take the tensor cores in turn.
#pragma once

#include <cstdint>

#include "kernels/cuda/tma.cuh"

namespace fusedlinear {
namespace cuda {
namespace gemm {

// Readies the mbarrier at `barrier` for `count` arrivals a phase (init_barrier's, for more than
// one); the block must synchronise before another thread uses it.
__device__ __forceinline__ void init_barrier_for(uint32_t barrier, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(barrier), "r"(count) : "memory");
#endif
}

// Makes the barriers' initialisation visible to the TMA (the async proxy).
__device__ __forceinline__ void fence_barrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// One arrival on the mbarrier at `barrier`, releasing this thread's earlier reads of the slot.
__device__ __forceinline__ void arrive(uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(barrier) : "memory");
#endif
}

// Named barrier `id` (1-15; 0 is __syncthreads') of `threads` threads: sync waits for all of them,
// arrive counts this warp in and goes on.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// The ring: from `first` (1024-byte aligned), kStages slots of kStageBytes, then the full
// barriers, then the empty ones. Ring iteration t (every k-tile of every tile, in the order the
// producer fills them) takes slot t % kStages, and completes that slot's (t / kStages)-th phase.
template <int kStages, int kStageBytes>
struct Ring {
  uint32_t first;
  static constexpr int kBytes = kStages * kStageBytes + 2 * 8 * kStages;

  __device__ uint32_t slot(int stage) const { return first + uint32_t(stage) * kStageBytes; }
  __device__ uint32_t full(int stage) const {
    return first + uint32_t(kStages * kStageBytes + 8 * stage);
  }
  __device__ uint32_t empty(int stage) const {
    return first + uint32_t(kStages * kStageBytes + 8 * (kStages + stage));
  }
  static __device__ int stage_of(int64_t t) { return int(t % kStages); }
  static __device__ uint32_t parity_of(int64_t t) { return uint32_t(t / kStages) & 1; }

  // One thread readies the barriers; the block synchronises after.
  __device__ void init(uint32_t consumer_arrivals) const {
    for (int s = 0; s < kStages; ++s) {
      init_barrier_for(full(s), 1);
      init_barrier_for(empty(s), consumer_arrivals);
    }
    fence_barrier_init();
  }
  // Producer: waits until iteration t's slot has been read by every consumer of iteration
  // t - kStages (at once for the first kStages: the phase before a barrier's first counts as
  // ended).
  __device__ void wait_empty(int64_t t) const {
    wait_barrier(empty(stage_of(t)), parity_of(t) ^ 1);
  }
  // Consumer: waits until iteration t's tiles have landed. Valid while iteration t - kStages has
  // landed already (a phase parity tells two phases apart, not three).
  __device__ void wait_full(int64_t t) const { wait_barrier(full(stage_of(t)), parity_of(t)); }
};

}  // namespace gemm
}  // namespace cuda
}  // namespace fusedlinear
