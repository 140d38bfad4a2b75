// The fused-MLP kernel (fused_mlp.h): a block owns a tile of rows and runs every layer on it. x's
// tile is read once into shared memory; each layer reads its W from global memory (small enough
// to stay in L2), forms the products against the tile, applies the bias, the chain and the gate,
// and writes its output, rounded to the model's type, into the other of two shared buffers; only
// the last layer's output leaves the chip.
//
// Each value is rounded where the per-layer path (cuBLAS or the small-batch kernel, then the
// epilogue) rounds it, so that the two differ only where their sums run in another order:
//   y = round(x . w)  (+ bias[n] in float32)            the GEMM's output, as cuBLAS writes it
//   chunked halves:     y = round(y)                     the Linear's output, bias included
//   v = chain(y)                                         float32 forms (the interpreter's)
//   gated:              v = round(v) * round(round(x . w_gate) + gate_bias[n])
//   residual:           v = x + round(v), or round(x . w + x) for a Linear alone (cuBLAS beta = 1)
//   out = round(v)
// where round() is a no-op for float32 models.
//
// Two ways of forming the products, over the same tile loop and epilogue:
//   float32: float32 FMAs on the CUDA cores. A warp takes 32 / kRows columns at a time, its lanes
//            splitting k into 4-wide pieces (16-byte loads of W, 512 contiguous bytes a warp), each
//            lane summing its k in order for every row of the tile; the lanes' sums are then added
//            in a fixed order (skinny::add_across_lanes), one total ending in each lane.
//   16-bit:  mma.sync m16n8k16 with float32 sums: the tile (A, 64 rows) from shared memory, W (B)
//            from global memory, a lane's 16-byte load holding 8 consecutive k of one row; inside
//            each 32-wide step of k, A's and W's k are taken in the same permuted order (the sum
//            does not depend on it), as the small-batch tensor-core kernel takes them.
#pragma once

#include <cstdint>
#include <type_traits>

// The launchers' helpers are host code, which NVRTC (kernels/cuda/jit/) neither takes nor needs.
#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/mlp/fused_mlp.h"
#endif

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/mlp/mlp_call.h"
#include "kernels/cuda/skinny/common.cuh"
#include "kernels/cuda/skinny/tensor_core.cuh"

namespace fusedlinear {
namespace cuda {
namespace mlp {

constexpr int kThreads = kMlpThreads;
constexpr int kWarps = kThreads / 32;

// The float32 kernel's tile: kRows rows (1: one row a block, for batches that fill the GPU with
// blocks of one row; 8 otherwise), k in steps of 128 (4 a lane).
template <int kRowsOf>
struct FloatShape {
  static constexpr int kRows = kRowsOf;
  static constexpr int kKStep = 128;
  // A tile row's elements for a model at most `width` wide: its last step of k (a warp reads one
  // row at a time: no bank conflicts).
  static constexpr int stride_for(int width) { return (width + kKStep - 1) / kKStep * kKStep; }
};

// The 16-bit kernel's tile: 64 rows (four 16-row tiles of the mma), k in steps of 32.
struct MmaShape {
  static constexpr int kRows = 64;
  static constexpr int kKStep = 32;
  static constexpr int kTilesN = 2;  // 8-column tiles a warp takes at a time
  // Each row 64 bytes past a multiple of 128, so that the 8 rows one load phase reads fall in
  // different banks.
  static constexpr int stride_for(int width) { return (width + 63) / 64 * 64 + 32; }
};

// The shared memory a block of Shape takes for a model at most `width` wide: two tiles.
template <typename T, class Shape>
constexpr int shared_bytes_of(int width) {
  return 2 * Shape::kRows * Shape::stride_for(width) * int(sizeof(T));
}

__device__ __forceinline__ int round_up(int v, int step) { return (v + step - 1) / step * step; }

// v as T holds it (a no-op for float).
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_float(from_float<T>(v));
}

// A model's layer widths and gated layers as the resident form reads them: RuntimeShape from the
// call, in the library's instances, which take any model; CompiledShape compiled into a model's own
// instance (mlp_call.h: MlpShape), where the loop over the layers unrolls and every bound and guard
// of a layer's steps and tiles is a constant.
struct RuntimeShape {
  static constexpr int kLayerUnroll = 1;  // one copy of a layer's code, whatever the model
  static constexpr int kMinBlocks = 1;    // a block a multiprocessor: any model's registers
  static __device__ __forceinline__ int layers(const MlpCall& call) { return call.layers; }
  static __device__ __forceinline__ int in(const MlpCall& call, int l) { return call.layer[l].in; }
  static __device__ __forceinline__ int out(const MlpCall& call, int l) {
    return call.layer[l].out;
  }
  static __device__ __forceinline__ bool gated(const MlpCall& call, int l) {
    return call.layer[l].gate_w != nullptr;
  }
};

// kGated: bit l set where layer l is gated; kWidths: layer 0's input, then each layer's output.
template <unsigned kGated, int... kWidths>
struct CompiledShape {
  static constexpr int kLayers = int(sizeof...(kWidths)) - 1;
  static constexpr int kLayerUnroll = kLayers;
  // Two blocks a multiprocessor, their registers capped to allow it, where no layer is gated (a
  // gate's sums would then spill): twice the warps to overlap one warp's epilogue with another's
  // products.
  static constexpr int kMinBlocks = kGated == 0 ? 2 : 1;
  static __device__ __forceinline__ constexpr int width(int i) {
    int value = 0, at = 0;
    ((value = at++ == i ? kWidths : value), ...);
    return value;
  }
  static __device__ __forceinline__ constexpr int layers(const MlpCall&) { return kLayers; }
  static __device__ __forceinline__ constexpr int in(const MlpCall&, int l) { return width(l); }
  static __device__ __forceinline__ constexpr int out(const MlpCall&, int l) {
    return width(l + 1);
  }
  static __device__ __forceinline__ constexpr bool gated(const MlpCall&, int l) {
    return (kGated >> l) & 1u;
  }
};

// How the library's kernels apply a layer's chain: the interpreter of its op list (call.layer[l]'s
// chain). A unit NVRTC compiles for a model (kernels/cuda/jit/chain_units.h: mlp_unit) passes its
// own Chains instead, each layer's chain compiled in, with the same apply.
// apply<P> applies layer l's chain as it runs for results of precision P (model.h's device_chain:
// the interpreter's op list is given so by the host).
struct InterpretedChains {
  template <act::ResultPrecision P, int R, int C>
  static __device__ __forceinline__ void apply(const MlpLayer& layer, int /*l*/, float (&v)[R][C],
                                               const float (&terms)[act::kMaxColumnTerms][C]) {
    act::apply_chain(layer.chain, v, terms);
  }
};

// Layer l's epilogue on a thread's R x C products `p` (and the gate's `gate_p`), rows `row` of x
// and columns `col` (those past the layer's width are computed from clamped columns and never
// stored): the formula at the top of this file. `p` receives the values, rounded to T. The gate's
// multiply and the residual's add are rounded on their own (__fmul_rn, __fadd_rn: never contracted
// into one FMA), as the separate ops of the per-layer path round them. Chains applies the layer's
// chain (InterpretedChains, or a model's chains compiled in).
template <typename T, class Chains, int R, int C>
__device__ __forceinline__ void finish_values(const MlpCall& call, int l, bool last,
                                              float (&p)[R][C], const float (&gate_p)[R][C],
                                              const int64_t (&row)[R], const int (&col)[C]) {
  const MlpLayer& layer = call.layer[l];
  const T* bias = static_cast<const T*>(layer.bias);
  int n[C];
#pragma unroll
  for (int c = 0; c < C; ++c) n[c] = min(col[c], layer.out - 1);
  float v[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      v[r][c] = rounded<T>(p[r][c]);
      if (bias) v[r][c] += to_float(bias[n[c]]);
      if (layer.round_before_chain) v[r][c] = rounded<T>(v[r][c]);
    }
  }
  float terms[act::kMaxColumnTerms][C] = {};
#pragma unroll
  for (int j = 0; j < MlpChain::kTerms; ++j) {
    if (j < layer.terms.count) {
      const T* term = static_cast<const T*>(layer.terms.data[j]);
      const bool broadcast = (layer.terms.broadcast >> j) & 1;
#pragma unroll
      for (int c = 0; c < C; ++c) terms[j][c] = to_float(term[broadcast ? 0 : n[c]]);
    }
  }
  Chains::template apply<act::kResultPrecisionFor<T>>(layer, l, v, terms);
  if (layer.gate_w) {
    const T* gate_bias = static_cast<const T*>(layer.gate_bias);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        float gate = rounded<T>(gate_p[r][c]);
        if (gate_bias) gate = rounded<T>(gate + to_float(gate_bias[n[c]]));
        v[r][c] = __fmul_rn(rounded<T>(v[r][c]), gate);
      }
    }
  }
  if (last && call.residual) {
    const T* x = static_cast<const T*>(call.x);
    const int width = call.layer[0].in;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const float input = row[r] < call.rows ? to_float(x[row[r] * width + n[c]]) : 0.0f;
        v[r][c] = call.residual_in_product ? __fadd_rn(p[r][c], input)
                                           : __fadd_rn(input, rounded<T>(v[r][c]));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) p[r][c] = rounded<T>(v[r][c]);
  }
}

// Four consecutive k of row n of w [out, in] from k on, zeros past the matrix: one 16-byte load
// where `vector` (w aligned, in a multiple of 4).
__device__ __forceinline__ float4 load_w4(const float* w, int n, int k, int in, int out,
                                          bool vector) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (n >= out || k >= in) return v;
  const float* p = w + int64_t(n) * in + k;
  if (vector) return *reinterpret_cast<const float4*>(p);
  v.x = p[0];
  if (k + 1 < in) v.y = p[1];
  if (k + 2 < in) v.z = p[2];
  if (k + 3 < in) v.w = p[3];
  return v;
}

// s += h . w over four k, in order.
__device__ __forceinline__ float dot4(float s, const float4& h, const float4& w) {
  s = fmaf(h.x, w.x, s);
  s = fmaf(h.y, w.y, s);
  s = fmaf(h.z, w.z, s);
  return fmaf(h.w, w.w, s);
}

// Layer l of the float32 kernel: `in` the tile's inputs (zeros past the layer's in, up to the
// next step of k), `out` its outputs.
template <class Shape, class Chains>
__device__ __forceinline__ void float_layer(const MlpCall& call, int l, bool last, const float* in,
                                            float* out, int stride, int64_t row0) {
  const MlpLayer& layer = call.layer[l];
  constexpr int kRows = Shape::kRows;
  constexpr int kCols = 32 / kRows;  // 32 sums a lane: one total a lane after the adds
  static_assert(kRows * kCols == 32);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* w = static_cast<const float*>(layer.w);
  const float* gate_w = static_cast<const float*>(layer.gate_w);
  const bool gated = gate_w != nullptr;
  const bool vector = layer.in % 4 == 0 && aligned16(w) && (!gated || aligned16(gate_w));
  const int k_end = round_up(layer.in, Shape::kKStep);
  for (int n0 = warp * kCols; n0 < layer.out; n0 += kWarps * kCols) {
    float sums[kCols * kRows] = {};
    float gate_sums[kCols * kRows] = {};
    for (int k = 4 * lane; k < k_end; k += Shape::kKStep) {
      float4 h[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        h[r] = *reinterpret_cast<const float4*>(in + r * stride + k);
      }
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float4 wv = load_w4(w, n0 + c, k, layer.in, layer.out, vector);
#pragma unroll
        for (int r = 0; r < kRows; ++r) sums[c * kRows + r] = dot4(sums[c * kRows + r], h[r], wv);
        if (gated) {
          const float4 gv = load_w4(gate_w, n0 + c, k, layer.in, layer.out, vector);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            gate_sums[c * kRows + r] = dot4(gate_sums[c * kRows + r], h[r], gv);
          }
        }
      }
    }
    // Lane l then holds the total of index l: column n0 + l / kRows, row l % kRows.
    skinny::add_across_lanes<32, 16>(sums, lane);
    if (gated) skinny::add_across_lanes<32, 16>(gate_sums, lane);
    const int c = lane / kRows, r = lane % kRows;
    float p[1][1] = {{sums[0]}};
    const float gate_p[1][1] = {{gate_sums[0]}};
    const int64_t row[1] = {row0 + r};
    const int col[1] = {n0 + c};
    finish_values<float, Chains>(call, l, last, p, gate_p, row, col);
    if (col[0] < layer.out) out[r * stride + col[0]] = p[0][0];
  }
}

// Eight consecutive k of row n of w [out, in] (16-bit) from k on as four words, zeros past the
// matrix: one 16-byte load where `vector` (w aligned, in a multiple of 8).
__device__ __forceinline__ skinny::Words load_w8(const uint16_t* w, int n, int k, int in, int out,
                                                 bool vector) {
  skinny::Words v = {{0u, 0u, 0u, 0u}};
  if (n >= out || k >= in) return v;
  const uint16_t* p = w + int64_t(n) * in + k;
  if (vector) return *reinterpret_cast<const skinny::Words*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (k + i < in) v.v[i / 2] |= uint32_t(p[i]) << (16 * (i % 2));
  }
  return v;
}

// d += the 16 x 8 x 32 product of a step of k: the tile's rows g and g + 8 (`a_top`, `a_bottom`,
// the lane's 8 k of each) against W's row (`b`, the same 8 k), as two m16n8k16 products. Within
// the step, lane quad q's words 2s and 2s + 1 stand for the mma's k 2q and 2q + 8 of product s,
// in A and B alike.
template <typename T>
__device__ __forceinline__ void mma_step(float (&d)[4], const skinny::Words& a_top,
                                         const skinny::Words& a_bottom, const skinny::Words& b) {
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const uint32_t a[4] = {a_top.v[2 * s], a_bottom.v[2 * s], a_top.v[2 * s + 1],
                           a_bottom.v[2 * s + 1]};
    skinny::mma_m16n8k16<T>(d, a, b.v[2 * s], b.v[2 * s + 1]);
  }
}

// Layer l of the 16-bit kernel. A warp's work item: a 16-row tile of the block's rows and
// Shape::kTilesN 8-column tiles of the layer's outputs, over the whole k.
template <typename T, class Shape, class Chains>
__device__ __forceinline__ void mma_layer(const MlpCall& call, int l, bool last, const T* in,
                                          T* out, int stride, int64_t row0) {
  const MlpLayer& layer = call.layer[l];
  constexpr int kTilesM = Shape::kRows / 16;
  constexpr int kTilesN = Shape::kTilesN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const uint16_t* w = static_cast<const uint16_t*>(layer.w);
  const uint16_t* gate_w = static_cast<const uint16_t*>(layer.gate_w);
  const bool gated = gate_w != nullptr;
  const bool vector = layer.in % 8 == 0 && aligned16(w) && (!gated || aligned16(gate_w));
  const int k_end = round_up(layer.in, Shape::kKStep);
  const int items = kTilesM * ((layer.out + 8 * kTilesN - 1) / (8 * kTilesN));
  for (int item = warp; item < items; item += kWarps) {
    const int m0 = (item % kTilesM) * 16;
    const int n0 = (item / kTilesM) * 8 * kTilesN;
    float acc[kTilesN][4] = {};
    float gate_acc[kTilesN][4] = {};
    for (int k0 = 0; k0 < k_end; k0 += Shape::kKStep) {
      const int k = k0 + 8 * q;
      const skinny::Words a_top =
          *reinterpret_cast<const skinny::Words*>(in + (m0 + g) * stride + k);
      const skinny::Words a_bottom =
          *reinterpret_cast<const skinny::Words*>(in + (m0 + g + 8) * stride + k);
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) {
        const int n = n0 + 8 * j + g;
        mma_step<T>(acc[j], a_top, a_bottom, load_w8(w, n, k, layer.in, layer.out, vector));
        if (gated) {
          mma_step<T>(gate_acc[j], a_top, a_bottom,
                      load_w8(gate_w, n, k, layer.in, layer.out, vector));
        }
      }
    }
    // acc[j]: rows m0 + g (0, 1) and m0 + g + 8 (2, 3), columns n0 + 8j + 2q and the next.
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
      float p[2][2] = {{acc[j][0], acc[j][1]}, {acc[j][2], acc[j][3]}};
      const float gate_p[2][2] = {{gate_acc[j][0], gate_acc[j][1]},
                                  {gate_acc[j][2], gate_acc[j][3]}};
      const int64_t row[2] = {row0 + m0 + g, row0 + m0 + g + 8};
      const int col[2] = {n0 + 8 * j + 2 * q, n0 + 8 * j + 2 * q + 1};
      finish_values<T, Chains>(call, l, last, p, gate_p, row, col);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          if (col[c] < layer.out) {
            out[(m0 + g + 8 * r) * stride + col[c]] = from_float<T>(p[r][c]);
          }
        }
      }
    }
  }
}

// Zeros in columns [from, to) of the tile's rows: the k past a layer's width that the next
// layer's last step of k reads.
template <typename T, class Shape>
__device__ __forceinline__ void zero_columns(T* tile, int stride, int from, int to) {
  const int width = to - from;
  for (int i = threadIdx.x; i < Shape::kRows * width; i += kThreads) {
    tile[(i / width) * stride + from + i % width] = from_float<T>(0.0f);
  }
}

// x's tile of Shape::kRows rows from row0 into `tile` (as T, or as floats), zeros past its rows and
// its width, up to the first layer's last step of k.
template <class Shape, typename T, typename Tile>
__device__ __forceinline__ void load_x_tile(const MlpCall& call, Tile* tile, int stride,
                                            int64_t row0) {
  const T* x = static_cast<const T*>(call.x);
  const int in = call.layer[0].in;
  const int in_padded = round_up(in, Shape::kKStep);
  for (int i = threadIdx.x; i < Shape::kRows * in_padded; i += kThreads) {
    const int r = i / in_padded, k = i % in_padded;
    const bool inside = row0 + r < call.rows && k < in;
    tile[r * stride + k] = from_float<Tile>(inside ? to_float(x[(row0 + r) * in + k]) : 0.0f);
  }
}

// The whole forward of one tile of Shape::kRows rows a block; `stride`: Shape::stride_for the
// model's widest layer, the elements of a tile's row in shared memory.
template <typename T, class Shape, class Chains>
__global__ void __launch_bounds__(kThreads)
    fused_mlp_kernel(const __grid_constant__ MlpCall call, int stride) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* tiles[2] = {reinterpret_cast<T*>(shared_bytes),
                 reinterpret_cast<T*>(shared_bytes) + Shape::kRows * stride};
  const int64_t row0 = int64_t(blockIdx.x) * Shape::kRows;
  load_x_tile<Shape, T>(call, tiles[0], stride, row0);
  __syncthreads();
  for (int l = 0; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    const T* tile_in = tiles[l % 2];
    T* tile_out = tiles[(l + 1) % 2];
    zero_columns<T, Shape>(tile_out, stride, layer.out, round_up(layer.out, Shape::kKStep));
    const bool last = l + 1 == call.layers;
    if constexpr (std::is_same_v<T, float>) {
      float_layer<Shape, Chains>(call, l, last, tile_in, tile_out, stride, row0);
    } else {
      mma_layer<T, Shape, Chains>(call, l, last, tile_in, tile_out, stride, row0);
    }
    __syncthreads();
  }
  // The last layer's outputs, row after row (consecutive threads, consecutive columns).
  const T* result = tiles[call.layers % 2];
  const int width = call.layer[call.layers - 1].out;
  T* out = static_cast<T*>(call.out);
  for (int i = threadIdx.x; i < Shape::kRows * width; i += kThreads) {
    const int r = i / width, n = i % width;
    if (row0 + r < call.rows) out[(row0 + r) * width + n] = result[r * stride + n];
  }
}

// Rows [first, first + rows) of w [out, in] into `to`, rows of `stride` elements, each up to k_end
// (whole 16-byte pieces), zeros past W's rows and k; the block's threads share the copy, 16 bytes
// at a time with cp.async where W's rows allow it (in a multiple of a piece, w 16-byte aligned),
// else element by element. The streamed form's chunks and the cluster form's slices.
template <typename T>
__device__ __forceinline__ void copy_rows(const T* w, int first, int rows, int out, int in,
                                          int k_end, T* to, int stride) {
  constexpr int kVec = 16 / int(sizeof(T));  // elements a piece
  const int pieces = k_end / kVec;
  const bool vector = in % kVec == 0 && aligned16(w) && skinny::kHasCopyAsync;
  for (int i = threadIdx.x; i < rows * pieces; i += kThreads) {
    const int r = i / pieces, k = i % pieces * kVec, n = first + r;
    const bool inside = n < out && k < in;
    const T* src = inside ? w + int64_t(n) * in + k : w;
    T* dst = to + r * stride + k;
    if (vector) {
      skinny::copy16_async(shared_address(dst), src, inside);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) dst[e] = inside && k + e < in ? src[e] : T{};
    }
  }
}

// --- for the forms' launchers ---------------------------------------------------------------
#ifndef __CUDACC_RTC__

// The widest layer's input or output.
inline int widest_of(const MlpCall& call) {
  int width = 0;
  for (int l = 0; l < call.layers; ++l) {
    width = std::max({width, call.layer[l].in, call.layer[l].out});
  }
  return width;
}

// Whether a layer of the call is gated (the forms then keep room for a gate's W beside each W).
inline bool has_gated_layer(const MlpCall& call) {
  for (int l = 0; l < call.layers; ++l) {
    if (call.layer[l].gate_w) return true;
  }
  return false;
}

// Lets `kernel` have more than the default 48 KiB of shared memory: `most` (the most any call of it
// takes), or what a block may have where that is less; once per kernel and device (before a CUDA
// graph captures it: the first call).
inline cudaError_t allow_shared_bytes(const void* kernel, const DeviceLimits& limits,
                                      int64_t most) {
  if (most <= 48 * 1024) return cudaSuccess;
  return allow_shared_bytes_once(
      kernel, int(std::min<int64_t>(most, limits.shared_bytes_per_block)), limits.device);
}

// A wave of persistent blocks of `kernel` for `tiles` tiles of rows (the resident and streamed
// forms): as many a multiprocessor as a block's `bytes` of shared memory allow (at least one),
// never more than the tiles.
inline cudaError_t persistent_blocks(const void* kernel, const DeviceLimits& limits, int64_t tiles,
                                     int64_t bytes, unsigned& blocks) {
  int per_multiprocessor = 0;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel,
                                                                        kThreads, size_t(bytes));
  if (err != cudaSuccess) return err;
  blocks = static_cast<unsigned>(
      std::min<int64_t>(tiles, int64_t(std::max(per_multiprocessor, 1)) * limits.multiprocessors));
  return cudaSuccess;
}

// The kernel a launch takes: where `compiled` gives one, the instance `name_of()` names (a unit's
// name for it, its template's arguments but the chains': "fused_mlp_kernel<__half, ...MmaShape")
// compiled with the model's chains in, and with `shape` where it is not empty; else `library`, the
// library's instance, which interprets them. The name is written only where the instance is
// compiled.
template <class NameOf>
const void* kernel_for(const MlpKernelOf& compiled, const MlpShape& shape, const NameOf& name_of,
                       const void* library) {
  const void* kernel = compiled ? compiled(library, shape, name_of) : nullptr;
  return kernel ? kernel : library;
}

// T as a unit names it.
template <typename T>
const char* device_type_name() {
  return std::is_same_v<T, float>    ? "float"
         : std::is_same_v<T, __half> ? "__half"
                                     : "__nv_bfloat16";
}

template <typename T>
struct TypeTag {
  using type = T;
};

// launch(TypeTag<T>{}, std::integral_constant<int, kParts>{}) for the models the forms on the
// tensor cores take (mma.sync, sm_80 on): 16-bit models as they are (one part of W, their own),
// float32 models in bf16 (W's hi) or bf16x3 (hi and lo); cudaErrorNotSupported for the others.
template <class Launch>
cudaError_t with_tensor_core_parts(const MlpCall& call, const DeviceLimits& limits,
                                   const Launch& launch) {
  if (limits.compute_major < 8) return cudaErrorNotSupported;
  switch (call.type) {
    case ElementType::kFloat16:
      return launch(TypeTag<__half>{}, std::integral_constant<int, 1>{});
    case ElementType::kBFloat16:
      return launch(TypeTag<__nv_bfloat16>{}, std::integral_constant<int, 1>{});
    case ElementType::kFloat32:
      if (call.precision == Precision::kBf16) {
        return launch(TypeTag<float>{}, std::integral_constant<int, 1>{});
      }
      if (call.precision == Precision::kBf16x3) {
        return launch(TypeTag<float>{}, std::integral_constant<int, 2>{});
      }
      return cudaErrorNotSupported;
  }
  return cudaErrorNotSupported;
}

#endif  // __CUDACC_RTC__

}  // namespace mlp
}  // namespace cuda
}  // namespace fusedlinear
