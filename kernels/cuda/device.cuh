// What the CUDA kernels share: the device type of each element type and its conversions,
// 16-byte packs of elements, alignment, and the current device's limits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

// Host code, which NVRTC (kernels/cuda/jit/) neither takes nor needs.
#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <set>
#include <utility>
#endif

#include "kernels/math/element.h"

namespace fusedlinear {
namespace cuda {

// The shared-memory address of p, a pointer into shared memory, as the TMA, cp.async and wgmma
// instructions take it.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The device type that holds an ElementType.
template <ElementType E>
using DeviceElement =
    std::conditional_t<E == ElementType::kFloat32, float,
                       std::conditional_t<E == ElementType::kFloat16, __half, __nv_bfloat16>>;

// Element conversions, also used on the host (epilogue_bench's inputs and checks).
__host__ __device__ __forceinline__ float to_float(float v) { return v; }
__host__ __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__host__ __device__ __forceinline__ T from_float(float v);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__host__ __device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// kVec elements of T, moved as one access (16 bytes when kVec * sizeof(T) == 16). The 2-byte
// types with an even kVec are held two to a 32-bit word, as they arrive from memory: a pair
// then converts to two floats with one shift or mask each, where 16-bit array elements would
// each need a byte permute to move into and out of a register of their own.
template <typename T, int kVec>
inline constexpr bool kHeldAsPairs = sizeof(T) == 2 && kVec % 2 == 0;
template <typename T, int kVec, bool kAsPairs = kHeldAsPairs<T, kVec>>
struct alignas(sizeof(T) * kVec) Packed {
  T v[kVec];
};
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Packed<T, kVec, true> {
  uint32_t pair[kVec / 2];  // element 2k in the low half (little-endian), 2k + 1 in the high
};

__device__ __forceinline__ float2 unpack_pair(uint32_t word, __nv_bfloat16) {
  // A bfloat16 is the high 16 bits of the float with the same value.
  return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack_pair(uint32_t word, __half) {
  __half2 pair;
  memcpy(&pair, &word, sizeof pair);
  return __half22float2(pair);
}

// Rounds two floats to T, packed as they are stored: one F2FP instruction per pair.
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  uint32_t word;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    memcpy(&word, &pair, sizeof word);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    memcpy(&word, &pair, sizeof word);
  }
  return word;
}

template <typename T, int kVec, bool kAsPairs>
__device__ __forceinline__ void to_floats(const Packed<T, kVec, kAsPairs>& in, float (&v)[kVec]) {
  if constexpr (kAsPairs) {
#pragma unroll
    for (int k = 0; k < kVec / 2; ++k) {
      const float2 pair = unpack_pair(in.pair[k], T{});
      v[2 * k] = pair.x;
      v[2 * k + 1] = pair.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = to_float(in.v[k]);
  }
}

template <typename T, int kVec>
__device__ __forceinline__ Packed<T, kVec> round_to(const float (&v)[kVec]) {
  Packed<T, kVec> out;
  if constexpr (kHeldAsPairs<T, kVec>) {
#pragma unroll
    for (int k = 0; k < kVec / 2; ++k) out.pair[k] = pack_pair<T>(v[2 * k], v[2 * k + 1]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(v[k]);
  }
  return out;
}

__host__ __device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#ifndef __CUDACC_RTC__
// The current device: its number, multiprocessors, resident threads per multiprocessor (2048 on
// sm_80 and sm_90, 1536 on sm_86 and sm_89), compute capability and the shared memory a block may
// opt in to, asked of the runtime once per device.
struct DeviceLimits {
  int device = 0, multiprocessors = 0, threads_per_multiprocessor = 0, compute_major = 0;
  int compute_minor = 0, shared_bytes_per_block = 0;
};
inline cudaError_t current_device_limits(DeviceLimits& limits) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::map<int, DeviceLimits> known;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(device);
  if (it == known.end()) {
    DeviceLimits asked;
    asked.device = device;
    err = cudaDeviceGetAttribute(&asked.multiprocessors, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&asked.threads_per_multiprocessor,
                                   cudaDevAttrMaxThreadsPerMultiProcessor, device);
    }
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&asked.compute_major, cudaDevAttrComputeCapabilityMajor, device);
    }
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&asked.compute_minor, cudaDevAttrComputeCapabilityMinor, device);
    }
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&asked.shared_bytes_per_block,
                                   cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    }
    if (err != cudaSuccess) return err;
    it = known.emplace(device, asked).first;
  }
  limits = it->second;
  return cudaSuccess;
}

// Lets `kernel` (a library kernel or one compiled at run time) take `bytes` of dynamic shared
// memory on `device`: once per kernel and device.
inline cudaError_t allow_shared_bytes_once(const void* kernel, int bytes, int device) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> allowed;
  const std::lock_guard<std::mutex> lock(mutex);
  if (allowed.count({kernel, device}) > 0) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) allowed.insert({kernel, device});
  return err;
}
#endif

}  // namespace cuda
}  // namespace fusedlinear
