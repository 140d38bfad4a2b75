// The fused-MLP kernel's streamed form (mlp_call.h: MlpForm::kStreamed), for models on the tensor
// cores whose weights do not fit a block's shared memory together (up to kMaxMlpWidth wide): 16-bit
// models, and float32 models in bf16 or bf16x3. The layers' W go through shared memory in chunks
// of mlp_streamed_chunk_rows rows (output columns), copied asynchronously into a ring of
// kMlpStreamStages chunks while the block's warps form the products of the chunk before; every warp
// reads each chunk for its 16 rows, so W is read from L2 once a tile of kStreamedRows rows.
//
// As in the resident form (resident_mlp.cuh, whose products and epilogue it shares), a warp keeps
// its rows in registers as the mma's A operand from layer to layer. A chunk's outputs, the next
// layer's A for those k, go to the lane's own slots in shared memory (a lane reads back exactly the
// words it wrote: no barrier), and are read into the registers once the layer is done: the
// registers hold one layer's A and one chunk's sums at a time, not two layers' A.
//
// W is copied in 16-bit parts as they lie in memory: a 16-bit model's own, a float32 model's
// bfloat16 parts (MlpLayer::w_part), rows of `stride` elements, zeros past W's rows and k.
#pragma once

#include "kernels/cuda/mlp/resident_mlp.cuh"

namespace fusedlinear {
namespace cuda {
namespace mlp {

constexpr int kStreamedRows = 16 * kWarps;  // a block's tile: 16 rows a warp

// The chunks of a tile's stream: each layer's rows of W, kRows at a time.
template <int kRows>
__device__ __forceinline__ int chunks_of(const MlpCall& call) {
  int chunks = 0;
  for (int l = 0; l < call.layers; ++l) chunks += (call.layer[l].out + kRows - 1) / kRows;
  return chunks;
}

// Chunk `index` of a tile's stream as its layer and first row of W.
struct StreamChunk {
  int layer, row0;
};
template <int kRows>
__device__ __forceinline__ StreamChunk chunk_at(const MlpCall& call, int index) {
  for (int l = 0; l < call.layers; ++l) {
    const int chunks = (call.layer[l].out + kRows - 1) / kRows;
    if (index < chunks) return {l, index * kRows};
    index -= chunks;
  }
  return {0, 0};
}

// The 16-bit plane `part` of W (`gate`: of the gate's W) of a layer, as the stream copies it.
template <typename T>
__device__ __forceinline__ const uint16_t* plane_of(const MlpLayer& layer, bool gate, int part) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<const uint16_t*>(gate ? layer.gate_w_part[part] : layer.w_part[part]);
  } else {
    return static_cast<const uint16_t*>(gate ? layer.gate_w : layer.w);
  }
}

// A chunk into `to`: [W, gate W][part][kRows rows][stride], each row's k up to the next 16, zeros
// past W's rows and k (copy_rows).
template <typename T, int kParts, int kRows>
__device__ __forceinline__ void copy_chunk(const MlpCall& call, StreamChunk chunk, uint16_t* to,
                                           int stride) {
  const MlpLayer& layer = call.layer[chunk.layer];
  const int planes = (layer.gate_w ? 2 : 1) * kParts;
  for (int p = 0; p < planes; ++p) {
    copy_rows(plane_of<T>(layer, p >= kParts, p % kParts), chunk.row0, kRows, layer.out, layer.in,
              round_up(layer.in, 16), to + p * kRows * stride, stride);
  }
}

// A thread's slot for word i of step t of part p of the next layer's A operand.
template <int kSteps>
__device__ __forceinline__ uint32_t& slot(uint32_t* slots, int p, int t, int i) {
  return slots[((p * kSteps + t) * 4 + i) * kThreads + threadIdx.x];
}

// The chunk's rows of W (columns row0... of layer l's output) on the warp's rows: the products
// against the chunk at `w` (the gate's kParts planes after W's, where the layer is gated), the
// epilogue, then the values into the thread's slots as the next layer's A operand (zeros past the
// layer's width), or for the last layer into the call's output.
template <typename T, class Chains, int kParts, int kSteps, int kRows>
__device__ __forceinline__ void streamed_chunk(const MlpCall& call, int l, int col0,
                                               const uint16_t* w, int stride, int64_t row0,
                                               const uint32_t (&act)[1][kParts][kSteps][4],
                                               uint32_t* slots) {
  constexpr int kTiles = kRows / 8;  // 8-column tiles of the chunk
  const MlpLayer& layer = call.layer[l];
  const int plane = kRows * stride;
  const uint16_t* gate_w = layer.gate_w ? w + kParts * plane : nullptr;
  const int k_steps = (layer.in + 15) / 16;
  const int tile_bytes = 8 * stride * 2, plane_bytes = plane * 2;
  float acc[1][kTiles][4] = {}, small[1][kTiles][4] = {};
  float gate_acc[1][kTiles][4] = {}, gate_small[1][kTiles][4] = {};
  tile_products<PartType<T>, kTiles>(acc, small, 0, act, lane_row_of(w, stride), tile_bytes,
                                     plane_bytes, k_steps);
  if (gate_w) {
    tile_products<PartType<T>, kTiles>(gate_acc, gate_small, 0, act, lane_row_of(gate_w, stride),
                                       tile_bytes, plane_bytes, k_steps);
  }
  // Chunks hold whole steps of the next layer's k: kRows is a multiple of 16.
  finish_tiles<T, Chains, kParts, kTiles>(
      call, l, l + 1 == call.layers, layer.out, col0, 0, row0, acc[0], small[0], gate_acc[0],
      gate_small[0], [&](int part, int i, int r, uint32_t word) {
        slot<kSteps>(slots, part, (col0 + 8 * i) / 16, 2 * (i % 2) + r) = word;
      });
}

// Tiles of kStreamedRows rows, `tiles` in all, a block taking every gridDim.x-th, each through
// the whole stream of chunks; `stride`: a chunk row's elements (for the widest input),
// `chunk_elements`: a chunk's. T: the model's type; kParts: 2 for a float32 model in bf16x3,
// else 1; kSteps: the 16-wide steps of the model's widest layer it holds in registers; Chains: how
// the layers' chains are applied (finish_values).
template <typename T, int kParts, int kSteps, class Chains>
__global__ void __launch_bounds__(kThreads)
    streamed_mlp_kernel(const __grid_constant__ MlpCall call, int64_t tiles, int stride,
                        int chunk_elements) {
  constexpr int kRows = mlp_streamed_chunk_rows(kParts);
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  uint16_t* ring = reinterpret_cast<uint16_t*>(shared_bytes);
  uint32_t* slots = reinterpret_cast<uint32_t*>(ring + kMlpStreamStages * chunk_elements);
  const int per_tile = chunks_of<kRows>(call);
  const int64_t my_tiles =
      tiles > int64_t(blockIdx.x) ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int64_t chunks = my_tiles * per_tile;
  const auto fill = [&](int64_t index) {  // chunk `index` of the block's stream into its stage
    if (index < chunks) {
      copy_chunk<T, kParts, kRows>(call, chunk_at<kRows>(call, int(index % per_tile)),
                                   ring + index % kMlpStreamStages * chunk_elements, stride);
    }
    skinny::copy_async_commit();  // a group even when empty: the waits count groups
  };
  for (int s = 0; s + 1 < kMlpStreamStages; ++s) fill(s);
  const int warp = threadIdx.x / 32;
  int64_t index = 0;
  for (int64_t i = 0; i < my_tiles; ++i) {
    const int64_t row0 = (blockIdx.x + i * gridDim.x) * kStreamedRows + 16 * warp;
    uint32_t act[1][kParts][kSteps][4];  // one row tile a warp
    load_rows<T>(call, call.layer[0].in, row0, act[0]);
    for (int l = 0; l < call.layers; ++l) {
      for (int col0 = 0; col0 < call.layer[l].out; col0 += kRows, ++index) {
        skinny::copy_async_wait<kMlpStreamStages - 2>();
        // Chunk `index` is in for every thread, and every warp is done with the stage refilled
        // next (the chunk before).
        __syncthreads();
        fill(index + kMlpStreamStages - 1);
        streamed_chunk<T, Chains, kParts, kSteps, kRows>(
            call, l, col0, ring + index % kMlpStreamStages * chunk_elements, stride, row0, act,
            slots);
      }
      if (l + 1 == call.layers) break;
      const int steps = (call.layer[l].out + 15) / 16;
#pragma unroll
      for (int p = 0; p < kParts; ++p) {
#pragma unroll
        for (int t = 0; t < kSteps; ++t) {
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            act[0][p][t][w] = t < steps ? slot<kSteps>(slots, p, t, w) : 0u;
          }
        }
      }
    }
  }
  skinny::copy_async_wait<0>();  // no copy outlives the block
}

#ifndef __CUDACC_RTC__
// Launches the streamed form for `call` (fused_mlp.h), its kernel from `compiled` where that gives
// one: cudaErrorNotSupported where it does not take the call (its type and mode, its width, or more
// shared memory than a block may have).
cudaError_t launch_streamed(const MlpCall& call, const DeviceLimits& limits,
                            const MlpKernelOf& compiled, cudaStream_t stream);
#endif

}  // namespace mlp
}  // namespace cuda
}  // namespace fusedlinear
