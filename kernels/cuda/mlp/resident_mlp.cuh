// The fused-MLP kernel's resident form (fused_mlp.h), for 16-bit models at most
// kMlpResidentMaxWidth wide: every layer's W is copied into each block's shared memory once, and
// the blocks, one wave of them, then take tiles of rows in turn. A warp owns 16 rows of a tile and
// keeps them in registers from layer to layer: an m16n8k16 product's float32 results for two
// adjacent 8-column tiles, rounded to the model's type and paired, are exactly the A operand of the
// next layer's 16-wide step of k (the two layouts line up), so the hidden activations never leave
// the warp and the warps never wait on each other. Each W is read as the mma's B operand straight
// from shared memory (a row of W holds B's consecutive k), its rows padded so that the 8 rows one
// load reads fall in different banks. The epilogue and its roundings are fused_mlp.cuh's.
#pragma once

#include "kernels/cuda/mlp/fused_mlp.cuh"

namespace fusedlinear {
namespace cuda {
namespace mlp {

constexpr int kResidentSteps = kMlpResidentMaxWidth / 16;  // 16-wide steps of a layer's k
constexpr int kResidentRows = 16 * kWarps;                 // a block's tile

// Elements of a layer's W row in shared memory (mlp_call.h: mlp_resident_layer_bytes).
__device__ __forceinline__ int resident_stride(int in) { return round_up(in, 16) + 8; }

// W [out, in] (16-bit) into shared memory as rows of `stride` elements, zeros past its rows up to
// the next 16 and past its k.
__device__ __forceinline__ void copy_padded(uint16_t* to, const void* from, int in, int out,
                                            int stride) {
  const uint16_t* w = static_cast<const uint16_t*>(from);
  const int elements = round_up(out, 16) * stride;
  for (int i = threadIdx.x; i < elements; i += kThreads) {
    const int n = i / stride, k = i % stride;
    to[i] = n < out && k < in ? w[int64_t(n) * in + k] : uint16_t(0);
  }
}

// The warp's 16 rows of x from row0 on as the first layer's A operand: act[t] holds k 16t to
// 16t + 15 (rows g and g + 8 of the lane's group, k 2q, 2q + 1 and 2q + 8, 2q + 9); zeros past
// the rows and the width.
template <int kSteps>
__device__ __forceinline__ void load_rows(const MlpCall& call, int64_t row0,
                                          uint32_t (&act)[kSteps][4]) {
  const uint16_t* x = static_cast<const uint16_t*>(call.x);
  const int in = call.layer[0].in;
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int t = 0; t < kSteps; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row0 + g + 8 * (i % 2);
      const int k = 16 * t + 2 * q + 8 * (i / 2);
      uint32_t word = 0;
      if (row < call.rows && k < in) {
        word = x[row * in + k];
        if (k + 1 < in) word |= uint32_t(x[row * in + k + 1]) << 16;
      }
      act[t][i] = word;
    }
  }
}

// Layer l on the warp's rows: the products against W (and the gate's W) in shared memory at `w`
// (and `gate_w`, or null), the epilogue, then the values back into `act` as the next layer's A
// operand (zeros past the layer's width), or for the last layer into the call's output.
template <typename T, int kSteps>
__device__ __forceinline__ void resident_layer(const MlpCall& call, int l, const uint16_t* w,
                                               const uint16_t* gate_w, int64_t row0,
                                               uint32_t (&act)[kSteps][4]) {
  const MlpLayer& layer = call.layer[l];
  const bool last = l + 1 == call.layers;
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int stride = resident_stride(layer.in);
  const int k_steps = (layer.in + 15) / 16;
  const int out_steps = (layer.out + 15) / 16;
  float acc[2 * kSteps][4] = {};
  float gate_acc[2 * kSteps][4] = {};
#pragma unroll
  for (int j = 0; j < 2 * kSteps; ++j) {
    if (j >= 2 * out_steps) continue;
    // B's k 2q, 2q + 1 and 2q + 8, 2q + 9 of column 8j + g: row 8j + g of W.
    const int at = (8 * j + g) * stride + 2 * q;
#pragma unroll
    for (int t = 0; t < kSteps; ++t) {
      if (t >= k_steps) continue;
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(w + at + 16 * t);
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(w + at + 16 * t + 8);
      skinny::mma_m16n8k16<T>(acc[j], act[t], b0, b1);
      if (gate_w) {
        const uint32_t c0 = *reinterpret_cast<const uint32_t*>(gate_w + at + 16 * t);
        const uint32_t c1 = *reinterpret_cast<const uint32_t*>(gate_w + at + 16 * t + 8);
        skinny::mma_m16n8k16<T>(gate_acc[j], act[t], c0, c1);
      }
    }
  }
  // acc[j]: rows g (0, 1) and g + 8 (2, 3), columns 8j + 2q and the next.
#pragma unroll
  for (int j = 0; j < 2 * kSteps; ++j) {
    if (j >= 2 * out_steps) continue;
    float p[2][2] = {{acc[j][0], acc[j][1]}, {acc[j][2], acc[j][3]}};
    const float gate_p[2][2] = {{gate_acc[j][0], gate_acc[j][1]}, {gate_acc[j][2], gate_acc[j][3]}};
    const int64_t row[2] = {row0 + g, row0 + g + 8};
    const int col[2] = {8 * j + 2 * q, 8 * j + 2 * q + 1};
    finish_values<T>(layer, call, last, p, gate_p, row, col);
    if (last) {
      T* out = static_cast<T*>(call.out);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          if (row[r] < call.rows && col[c] < layer.out) {
            out[row[r] * layer.out + col[c]] = from_float<T>(p[r][c]);
          }
        }
      }
    } else {
      // Columns 8j... are k 16t + 8(j % 2)... of the next layer's step t = j / 2.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float lo = col[0] < layer.out ? p[r][0] : 0.0f;
        const float hi = col[1] < layer.out ? p[r][1] : 0.0f;
        act[j / 2][2 * (j % 2) + r] = pack_pair<T>(lo, hi);
      }
    }
  }
}

// Every layer's W into shared memory, then tiles of kResidentRows rows, `tiles` in all, a block
// taking every gridDim.x-th.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    resident_mlp_kernel(const __grid_constant__ MlpCall call, int64_t tiles) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  uint16_t* weights = reinterpret_cast<uint16_t*>(shared_bytes);
  int at = 0;
  for (int l = 0; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    const int stride = resident_stride(layer.in);
    const int elements = round_up(layer.out, 16) * stride;
    copy_padded(weights + at, layer.w, layer.in, layer.out, stride);
    at += elements;
    if (layer.gate_w) {
      copy_padded(weights + at, layer.gate_w, layer.in, layer.out, stride);
      at += elements;
    }
  }
  __syncthreads();
  const int warp = threadIdx.x / 32;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row0 = tile * kResidentRows + 16 * warp;
    if (row0 >= call.rows) break;  // the last tile's rows past the batch, and every later tile's
    uint32_t act[kResidentSteps][4];
    load_rows(call, row0, act);
    int w_at = 0;
    for (int l = 0; l < call.layers; ++l) {
      const MlpLayer& layer = call.layer[l];
      const int elements = round_up(layer.out, 16) * resident_stride(layer.in);
      const uint16_t* w = weights + w_at;
      const uint16_t* gate_w = layer.gate_w ? w + elements : nullptr;
      w_at += layer.gate_w ? 2 * elements : elements;
      resident_layer<T>(call, l, w, gate_w, row0, act);
    }
  }
}

}  // namespace mlp
}  // namespace cuda
}  // namespace fusedlinear
