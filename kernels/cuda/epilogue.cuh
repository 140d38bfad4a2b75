// Fused epilogue kernel: one pass over a GEMM output, reading each element once and writing it
// once, applying a per-column bias/shift and an activation chain (activations.h, epilogues.h).
//
//   out[r, c] = Activations((y[r, c] + bias[c]) + shift[c])
//
// Layout: a 2-D grid. x covers the columns, kVec contiguous columns per thread, so each thread
// loads its bias and shift once; y covers the rows, kRows rows per thread per step, all loads of
// a step issued before the first use so enough bytes are in flight to cover memory latency; a
// grid-stride loop covers the rows past the grid. All indexing is 64-bit. kVec is
// 16 bytes / sizeof(T) when every access is 16-byte aligned, otherwise 1.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>

#include "kernels/math/chains.h"

namespace fusedlinear {
namespace cuda {

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

// A per-column term for this thread's kVec columns, as floats: one access, aligned because the
// launcher takes the kVec > 1 path only when p is 16-byte aligned.
template <typename T, int kVec>
__device__ __forceinline__ void load_column_terms(const T* p, int64_t col0, float (&v)[kVec]) {
  const Packed<T, kVec> terms = *reinterpret_cast<const Packed<T, kVec>*>(p + col0);
  to_floats(terms, v);
}

// How the kernel is launched: rows per thread per step, threads per block, the grid capped at
// that many waves of resident blocks (0: one step per thread, no cap).
template <int kRowsPerThread, int kThreadsPerBlock, int kMaxWaves>
struct LaunchShape {
  static constexpr int kRows = kRowsPerThread;
  static constexpr int kThreads = kThreadsPerBlock;
  static constexpr int kWaves = kMaxWaves;
};

// kHasBias, kHasShift: whether bias and shift are given (else null and unread). Compile-time, so
// a chain without a shift (mish_mish) neither keeps registers for it nor issues its adds.
template <typename T, int kVec, class Shape, bool kHasBias, bool kHasShift, class Activations>
__global__ void fused_epilogue_kernel(const T* __restrict__ y, const T* __restrict__ bias,
                                      const T* __restrict__ shift, T* __restrict__ out,
                                      int64_t rows, int64_t cols) {
  using Pack = Packed<T, kVec>;
  constexpr int kRows = Shape::kRows;
  const int64_t col0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (col0 >= cols) return;

  float col_bias[kVec], col_shift[kVec];
  if constexpr (kHasBias) load_column_terms(bias, col0, col_bias);
  if constexpr (kHasShift) load_column_terms(shift, col0, col_shift);

  const Activations activations;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y * kRows;
  const auto load_rows = [&](int64_t row0, Pack(&in)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r < rows) {
        in[r] = *reinterpret_cast<const Pack*>(y + (row0 + r) * cols + col0);
      }
    }
  };
  // Software pipelined: the next step's loads are in flight while this step computes.
  int64_t row0 = (int64_t(blockIdx.y) * blockDim.y + threadIdx.y) * kRows;
  Pack next[kRows];
  if (row0 < rows) load_rows(row0, next);
  while (row0 < rows) {
    Pack in[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) in[r] = next[r];
    const int64_t next_row0 = row0 + row_step;
    if (next_row0 < rows) load_rows(next_row0, next);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r >= rows) break;
      float result[kVec];
      to_floats(in[r], result);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        float v = result[k];
        if constexpr (kHasBias) v += col_bias[k];
        if constexpr (kHasShift) v += col_shift[k];
        result[k] = activations(v);
      }
      *reinterpret_cast<Pack*>(out + (row0 + r) * cols + col0) = round_to<T>(result);
    }
    row0 = next_row0;
  }
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The current device: its number, multiprocessors, resident threads per multiprocessor (2048 on
// sm_80 and sm_90, 1536 on sm_86 and sm_89), compute capability's major version and the shared
// memory a block may opt in to, asked of the runtime once per device.
struct DeviceLimits {
  int device = 0, multiprocessors = 0, threads_per_multiprocessor = 0, compute_major = 0;
  int shared_bytes_per_block = 0;
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
      err = cudaDeviceGetAttribute(&asked.shared_bytes_per_block,
                                   cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    }
    if (err != cudaSuccess) return err;
    it = known.emplace(device, asked).first;
  }
  limits = it->second;
  return cudaSuccess;
}

// Launch shape: Shape::kThreads threads; narrow rows get several rows of threads per block so
// no block is mostly idle; the grid's y dimension is capped at 65535 (the loop covers the rest).
template <typename T, int kVec, class Shape, class Activations>
cudaError_t launch_fused_epilogue_kernel(const T* y, const T* bias, const T* shift, T* out,
                                         int64_t rows, int64_t cols, cudaStream_t stream) {
  constexpr int kThreads = Shape::kThreads;
  const int64_t vecs_per_row = ceil_div(cols, kVec);
  const int threads_x = int(std::min<int64_t>(kThreads, ceil_div(vecs_per_row, 32) * 32));
  const int threads_y = kThreads / threads_x;
  const int64_t grid_x = ceil_div(vecs_per_row, threads_x);
  int64_t grid_y = std::min<int64_t>(ceil_div(rows, int64_t(threads_y) * Shape::kRows), 65535);
  if (Shape::kWaves > 0) {
    // At most kWaves waves of resident blocks; each thread then loops over several steps.
    DeviceLimits limits;
    const cudaError_t err = current_device_limits(limits);
    if (err != cudaSuccess) return err;
    const int64_t resident_blocks = int64_t(limits.multiprocessors) *
                                    (limits.threads_per_multiprocessor / kThreads) * Shape::kWaves;
    grid_y = std::max<int64_t>(1, std::min(grid_y, resident_blocks / grid_x));
  }
  const dim3 block(threads_x, threads_y);
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  const auto launch = [&](auto has_bias, auto has_shift) {
    fused_epilogue_kernel<T, kVec, Shape, decltype(has_bias)::value, decltype(has_shift)::value,
                          Activations><<<grid, block, 0, stream>>>(y, bias, shift, out, rows, cols);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  if (bias && shift) launch(Yes{}, Yes{});
  if (bias && !shift) launch(Yes{}, No{});
  if (!bias && shift) launch(No{}, Yes{});
  if (!bias && !shift) launch(No{}, No{});
  return cudaGetLastError();
}

// The shape fused_epilogue.cu launches a chain with: the fastest of epilogue_bench's sweep on
// an H200 (docs/PERFORMANCE.md). float32: one row per thread per step, 256 threads, two waves.
// The 2-byte types, whose 16-byte accesses hold twice the elements and whose chains are
// therefore bound by arithmetic rather than memory: the chain's own HalfLaunchOf
// (epilogues.h, next to the chain).
template <typename T, class Activations, bool kFourBytes = sizeof(T) == 4>
struct ProductionShapeOf {
  using type = LaunchShape<1, 256, 2>;
};
template <typename T, class Activations>
struct ProductionShapeOf<T, Activations, false> {
  static constexpr HalfLaunch kHalf = HalfLaunchOf<Activations>::value;
  using type = LaunchShape<kHalf.rows, kHalf.threads, kHalf.waves>;
};
template <typename T, class Activations>
using ProductionShape = typename ProductionShapeOf<T, Activations>::type;

// Picks the vector width: 16-byte accesses when every access would be 16-byte aligned (y and
// out are, and a row is whole vectors; bias and shift, where given, are), else 1. Decided here
// once rather than per thread, whose set-up would otherwise issue both paths.
template <typename T, class Shape, class Activations>
cudaError_t launch_fused_epilogue_typed(const T* y, const T* bias, const T* shift, T* out,
                                        int64_t rows, int64_t cols, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool terms_aligned = (!bias || aligned16(bias)) && (!shift || aligned16(shift));
  if (cols % kVec == 0 && aligned16(y) && aligned16(out) && terms_aligned) {
    return launch_fused_epilogue_kernel<T, kVec, Shape, Activations>(y, bias, shift, out, rows,
                                                                     cols, stream);
  }
  return launch_fused_epilogue_kernel<T, 1, Shape, Activations>(y, bias, shift, out, rows, cols,
                                                                stream);
}

}  // namespace cuda
}  // namespace fusedlinear
