// Splits float32 values into bfloat16 hi and lo parts, or hi, mid and lo (bf16_split.h), in one
// pass: 8 values a thread, read as two 16-byte loads and written as one 16-byte store per part;
// and gives the split products' sums that come out inf or NaN eager's values.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/math/bf16_split.h"

namespace fusedlinear {
namespace {

constexpr int kValuesPerThread = 8;
constexpr int kThreads = 256;
constexpr int kPiecesInFlight = 4;

// Two bfloat16 bit patterns in one 32-bit word, element 2k in the low half (little-endian).
__device__ __forceinline__ uint32_t pair_word(uint16_t low, uint16_t high) {
  return uint32_t(low) | (uint32_t(high) << 16);
}

// How many parts a call asks for: hi alone, hi and lo, or all three.
__device__ __forceinline__ int part_count(const void* lo, const void* third) {
  return third ? 3 : lo ? 2 : 1;
}

// n8: how many whole groups of 8 values; the last n % 8 values go through split_bf16_one_kernel.
// `third` is null for two parts (and lo too for hi alone).
__global__ void split_bf16_kernel(const float4* __restrict__ v, uint4* __restrict__ hi,
                                  uint4* __restrict__ lo, uint4* __restrict__ third, int64_t n8) {
  cuda::allow_next_kernel_start();  // the staged skinny kernel's first copies of W may start
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8; i += stride) {
    const float4 a = v[2 * i], b = v[2 * i + 1];
    const float values[kValuesPerThread] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    const int parts = part_count(lo, third);
    uint32_t hi_words[4], lo_words[4], third_words[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const split::Bf16Triple first = split::split_into_parts(values[2 * k], parts);
      const split::Bf16Triple second = split::split_into_parts(values[2 * k + 1], parts);
      hi_words[k] = pair_word(first.hi, second.hi);
      lo_words[k] = pair_word(first.mid, second.mid);
      third_words[k] = pair_word(first.lo, second.lo);
    }
    hi[i] = make_uint4(hi_words[0], hi_words[1], hi_words[2], hi_words[3]);
    if (lo) lo[i] = make_uint4(lo_words[0], lo_words[1], lo_words[2], lo_words[3]);
    if (third)
      third[i] = make_uint4(third_words[0], third_words[1], third_words[2], third_words[3]);
  }
}

// One value a thread: the tail after the groups of 8, or everything when a pointer is not
// 16-byte aligned.
__global__ void split_bf16_one_kernel(const float* __restrict__ v, uint16_t* __restrict__ hi,
                                      uint16_t* __restrict__ lo, uint16_t* __restrict__ third,
                                      int64_t n) {
  cuda::allow_next_kernel_start();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const split::Bf16Triple parts = split::split_into_parts(v[i], part_count(lo, third));
    hi[i] = parts.hi;
    if (lo) lo[i] = parts.mid;
    if (third) third[i] = parts.lo;
  }
}

// y [m][n]: each sum that is inf or NaN as eager's (split::eager_sum_if_not_finite), finite ones
// left as they are. Where n allows, a thread reads kPiecesInFlight 16-byte pieces of 4 sums, a grid
// stride apart, before it tests any: one piece a thread left too few loads in flight to read y at
// memory's pace.
__global__ void eager_non_finite_sums_kernel(float* __restrict__ y, int64_t m, int64_t n,
                                             const split::SplitOperands operands) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n % 4 != 0) {
    for (int64_t i = first; i < m * n; i += stride)
      y[i] = split::eager_sum_if_not_finite(operands, i / n, i % n, y[i]);
    return;
  }
  const int64_t pieces = m * n / 4;
  const float4* const y4 = reinterpret_cast<const float4*>(y);
  for (int64_t base = first; base < pieces; base += stride * kPiecesInFlight) {
    float4 four[kPiecesInFlight];
#pragma unroll
    for (int j = 0; j < kPiecesInFlight; ++j) {
      const int64_t i = base + j * stride;
      four[j] = i < pieces ? y4[i] : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kPiecesInFlight; ++j) {
      if (split::is_finite(four[j].x) && split::is_finite(four[j].y) &&
          split::is_finite(four[j].z) && split::is_finite(four[j].w)) {
        continue;
      }
      const float sums[4] = {four[j].x, four[j].y, four[j].z, four[j].w};
      for (int lane = 0; lane < 4; ++lane) {
        const int64_t at = 4 * (base + j * stride) + lane;
        y[at] = split::eager_sum_if_not_finite(operands, at / n, at % n, sums[lane]);
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One thread per unit of work, up to 2^20 blocks (many waves on any GPU); the grid-stride loops
// cover what is left.
unsigned blocks_for(int64_t work) {
  return unsigned(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}

}  // namespace

cudaError_t launch_eager_non_finite_sums(float* y, int64_t m, int64_t n,
                                         const split::SplitOperands& operands,
                                         cudaStream_t stream) {
  if (m <= 0 || n <= 0 || operands.parts < 2) return cudaSuccess;
  if (!aligned16(y)) return cudaErrorInvalidValue;
  const int64_t work = n % 4 == 0 ? (m * n / 4 + kPiecesInFlight - 1) / kPiecesInFlight : m * n;
  eager_non_finite_sums_kernel<<<blocks_for(work), kThreads, 0, stream>>>(y, m, n, operands);
  return cudaGetLastError();
}

cudaError_t launch_split_bf16_parts(const float* v, void* hi, void* lo, void* third, int64_t n,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (third && !lo) return cudaErrorInvalidValue;  // three parts need all three
  auto* hi16 = static_cast<uint16_t*>(hi);
  auto* lo16 = static_cast<uint16_t*>(lo);
  auto* third16 = static_cast<uint16_t*>(third);
  const auto at = [](uint16_t* part, int64_t offset) { return part ? part + offset : nullptr; };
  int64_t done = 0;
  if (aligned16(v) && aligned16(hi) && (!lo || aligned16(lo)) && (!third || aligned16(third))) {
    const int64_t n8 = n / kValuesPerThread;
    if (n8 > 0) {
      split_bf16_kernel<<<blocks_for(n8), kThreads, 0, stream>>>(
          reinterpret_cast<const float4*>(v), reinterpret_cast<uint4*>(hi16),
          reinterpret_cast<uint4*>(lo16), reinterpret_cast<uint4*>(third16), n8);
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return err;
    }
    done = n8 * kValuesPerThread;
  }
  if (done < n) {
    split_bf16_one_kernel<<<blocks_for(n - done), kThreads, 0, stream>>>(
        v + done, hi16 + done, at(lo16, done), at(third16, done), n - done);
  }
  return cudaGetLastError();
}

}  // namespace fusedlinear
