// Programmatic dependent launch (sm_90 on): a kernel launched with launch_dependent may start
// while the kernel before it on the stream is still running, so that its launch, and its reads of
// memory that kernel does not write, overlap that kernel's tail.
#pragma once

#include "kernels/cuda/device.cuh"

// The launchers are host code, which NVRTC (kernels/cuda/jit/) neither takes nor needs.
#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>

#include <tuple>
#endif

namespace fusedlinear {
namespace cuda {

// Waits until the kernel before this one on the stream has ended and its writes are visible;
// returns at once in a kernel launched the ordinary way. A kernel launched with launch_dependent
// calls it before it reads what that kernel writes, and before it writes anything.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the kernel launched after this one with launch_dependent start once every block of this
// one has called it (or ended); that kernel's blocks then wait in wait_for_previous_kernel.
__device__ __forceinline__ void allow_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 for the line at `p` (a hint: no value is read, so it may come before
// wait_for_previous_kernel even where the kernel before writes that memory).
__device__ __forceinline__ void prefetch_to_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

#ifndef __CUDACC_RTC__
// `kernel` (a __global__ function, or a kernel handle that cudaLibraryGetKernel gave, as a
// pointer) launched as kernel<<<grid, threads, shared_bytes, stream>>>, each of `args` pointing to
// a parameter's value, on the device `limits` describes (the current one): as a programmatic
// dependent of the kernel before it on the stream where the GPU has them (sm_90 on), an ordinary
// launch before.
inline cudaError_t launch_dependent_kernel(const DeviceLimits& limits, const void* kernel,
                                           dim3 grid, dim3 threads, size_t shared_bytes,
                                           cudaStream_t stream, void** args) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = threads;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = limits.compute_major >= 9 ? 1 : 0;
  return cudaLaunchKernelExC(&config, kernel, args);
}

// Launches of `kernel`, a pointer to a __global__ function of type Fn or a kernel handle of one
// (a run-time chain's, compiled by NVRTC, kernels/cuda/jit/), args... converted to Fn's parameters
// first: `launch` as kernel<<<grid, threads, shared_bytes, stream>>>(args...), `launch_dependent`
// as launch_dependent_kernel does.
template <class Fn>
struct KernelLauncher;
template <typename... Params>
struct KernelLauncher<void (*)(Params...)> {
  template <class Launch, typename... Args>
  static cudaError_t with_pointers(const Launch& launch, Args... args) {
    std::tuple<Params...> values(args...);
    return std::apply(
        [&](auto&... value) {
          void* pointers[] = {&value...};
          return launch(pointers);
        },
        values);
  }
  template <typename... Args>
  static cudaError_t launch(const void* kernel, dim3 grid, dim3 threads, size_t shared_bytes,
                            cudaStream_t stream, Args... args) {
    return with_pointers(
        [&](void** pointers) {
          return cudaLaunchKernel(kernel, grid, threads, pointers, shared_bytes, stream);
        },
        args...);
  }
  template <typename... Args>
  static cudaError_t launch_dependent(const DeviceLimits& limits, const void* kernel, dim3 grid,
                                      dim3 threads, size_t shared_bytes, cudaStream_t stream,
                                      Args... args) {
    return with_pointers(
        [&](void** pointers) {
          return launch_dependent_kernel(limits, kernel, grid, threads, shared_bytes, stream,
                                         pointers);
        },
        args...);
  }
};

// launch_dependent_kernel for a __global__ function: args... converted to its parameters' types.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(const DeviceLimits& limits, void (*kernel)(Params...), dim3 grid,
                             dim3 threads, size_t shared_bytes, cudaStream_t stream, Args... args) {
  return KernelLauncher<void (*)(Params...)>::launch_dependent(
      limits, reinterpret_cast<const void*>(kernel), grid, threads, shared_bytes, stream, args...);
}
#endif

}  // namespace cuda
}  // namespace fusedlinear
