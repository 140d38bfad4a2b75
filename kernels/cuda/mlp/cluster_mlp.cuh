// The fused-MLP kernel for a few rows, on sm_90 (fused_mlp.h): a cluster of kClusterBlocks blocks
// shares one tile of rows. Each block forms a slice of every layer's columns and writes its values
// into every block's copy of the next layer's input (distributed shared memory), so that W is read
// by as many multiprocessors as the cluster holds, where one block a tile (fused_mlp.cuh) reads
// every layer's W alone. The values are counted in on the receiving block's mbarrier (st.async),
// so a block waits only for its next input: no barrier of the whole cluster a layer, whose fence
// would also wait for every copy the block has in flight. W depends on nothing computed, so each
// block copies its slice of the next layers' W into shared memory (cp.async, a ring of
// kClusterStages layers) while it forms the layer before: a layer then waits on its input, not
// on a read of W from memory. Once the first layers' copies and x are issued, each block also
// asks L2 for its slices of the later layers' W, so that their copies find them there.
//
// Products: float32 FMAs on the CUDA cores for every type (a product of two 16-bit values is exact
// in float32, so this is the tensor cores' float32 sum in another order). A lane takes k in
// 16-byte pieces of W, a warp kCols columns at a time for each row of the tile; the lanes' sums are
// added in a fixed order (skinny::add_across_lanes). The epilogue and its roundings are
// fused_mlp.cuh's (finish_values); the tiles hold the values as floats, rounded to the model's
// type.
#pragma once

#include <cooperative_groups.h>

#include "kernels/cuda/mlp/fused_mlp.cuh"
#include "kernels/cuda/tma.cuh"

namespace fusedlinear {
namespace cuda {
namespace mlp {

// Blocks a cluster: the largest cluster every sm_90 GPU runs (larger ones are not portable).
constexpr int kClusterBlocks = kMlpClusterBlocks;
// Layers' slices of W a block holds in shared memory: the one it forms and the next, in flight.
constexpr int kClusterStages = 2;

// The tile of kRowsOf rows (1, or kMlpClusterTileRows); W's elements as a lane loads them.
template <typename T, int kRowsOf>
struct ClusterShape {
  static constexpr int kRows = kRowsOf;
  static constexpr int kVec = 16 / int(sizeof(T));  // elements of W in a lane's 16-byte load
  static constexpr int kKStep = 32 * kVec;          // the k a warp covers in one step
  static constexpr int kCols = 4;                   // columns a warp forms at a time
  static constexpr int kValues = kRows * kCols;     // sums a lane holds, added across the warp
  static_assert(kValues <= 32 && (kValues & (kValues - 1)) == 0);
  // A tile row's floats, and a row of W's slice's elements, for a model at most `width` wide: its
  // last step of k.
  static constexpr int stride_for(int width) { return (width + kKStep - 1) / kKStep * kKStep; }
  // The rows of a stage's slice of W: a block's share of the widest layer's columns, and the
  // kCols - 1 rows a warp's last columns past the slice read (their sums are never stored).
  static constexpr int slice_rows_for(int width) {
    return (width + kClusterBlocks - 1) / kClusterBlocks + kCols - 1;
  }
  // A stage: a layer's slice of W, then, where the model has a gated layer, of the gate's W.
  static constexpr int stage_elements_for(int width, bool gated) {
    return (gated ? 2 : 1) * slice_rows_for(width) * stride_for(width);
  }
  // The two tiles of rows (floats), then the stages (T), then a tile's mbarrier each.
  static constexpr int64_t shared_bytes_of(int width, bool gated) {
    return 2 * kRows * stride_for(width) * int64_t(sizeof(float)) +
           kClusterStages * int64_t(stage_elements_for(width, gated)) * int64_t(sizeof(T)) + 2 * 8;
  }
};

// The columns [begin, end) of a layer `out` wide that block `rank` of the cluster forms.
struct Slice {
  int begin, end;
};
__device__ __forceinline__ Slice slice_of(int out, int rank) {
  const int size = (out + kClusterBlocks - 1) / kClusterBlocks;
  return {min(out, rank * size), min(out, (rank + 1) * size)};
}

// Asks L2 for rows [slice) of w [out, in], a 128-byte line a thread at a time.
template <typename T>
__device__ __forceinline__ void prefetch_rows(const void* w, Slice slice, int in) {
  if (w == nullptr || slice.end <= slice.begin) return;
  const char* first = static_cast<const char*>(w) + int64_t(slice.begin) * in * int64_t(sizeof(T));
  const int64_t bytes = int64_t(slice.end - slice.begin) * in * int64_t(sizeof(T));
  for (int64_t at = int64_t(threadIdx.x) * 128; at < bytes; at += int64_t(kThreads) * 128) {
    asm volatile("prefetch.L2 [%0];" ::"l"(first + at));  // a generic address
  }
}

// Stores v at `address` (this block's shared memory) in block `rank` of the cluster, counted in
// on that block's mbarrier at `barrier` (also this block's address): the receiver waits on its
// own mbarrier for a layer's values, with no barrier of the whole cluster and no fence.
__device__ __forceinline__ void store_to_block(uint32_t address, uint32_t barrier, int rank,
                                               float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote_address, remote_barrier;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote_address)
               : "r"(address), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote_barrier)
               : "r"(barrier), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                   remote_address),
               "r"(__float_as_uint(v)), "r"(remote_barrier)
               : "memory");
#endif
}

// The two halves of a cluster barrier: this thread's arrival, which releases its earlier writes
// (a fence that waits for its memory operations in flight), and the wait for every thread's.
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}

// kVec consecutive elements of a row of W's slice in shared memory, as floats.
__device__ __forceinline__ void shared_w_floats(const float* w, float (&v)[4]) {
  const float4 f = *reinterpret_cast<const float4*>(w);
  v[0] = f.x;
  v[1] = f.y;
  v[2] = f.z;
  v[3] = f.w;
}
template <typename T>
__device__ __forceinline__ void shared_w_floats(const T* w, float (&v)[8]) {
  const skinny::Words words = *reinterpret_cast<const skinny::Words*>(w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = unpack_pair(words.v[i], T());
    v[2 * i] = pair.x;
    v[2 * i + 1] = pair.y;
  }
}

// Layer l: this block's slice of columns for every row of the tile (`in`, zeros past the
// layer's in up to the next step of k) from its slice of W in shared memory (`w`, and the gate's
// at `gate_w`; copy_rows), its values written into `out_tile` of every block of the cluster
// (counted in on each block's `out_barrier`), or for the last layer into the call's output.
template <typename T, class Shape, class Chains>
__device__ __forceinline__ void cluster_layer(const MlpCall& call, int l, bool last,
                                              const float* in, float* out_tile,
                                              uint32_t out_barrier, int stride, const T* w,
                                              const T* gate_w, int64_t row0,
                                              cooperative_groups::cluster_group& cluster) {
  const MlpLayer& layer = call.layer[l];
  constexpr int kRows = Shape::kRows, kCols = Shape::kCols, kVec = Shape::kVec;
  constexpr int kValues = Shape::kValues;
  constexpr int kLanesAValue = 32 / kValues;  // lanes that end holding the same total
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool gated = layer.gate_w != nullptr;
  const int k_end = round_up(layer.in, Shape::kKStep);
  const Slice slice = slice_of(layer.out, int(cluster.block_rank()));
  for (int n0 = slice.begin + warp * kCols; n0 < slice.end; n0 += kWarps * kCols) {
    float sums[kValues] = {};
    float gate_sums[kValues] = {};
    for (int k = kVec * lane; k < k_end; k += Shape::kKStep) {
      float h[kRows][kVec];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int j = 0; j < kVec; j += 4) {
          const float4 f = *reinterpret_cast<const float4*>(in + r * stride + k + j);
          h[r][j] = f.x;
          h[r][j + 1] = f.y;
          h[r][j + 2] = f.z;
          h[r][j + 3] = f.w;
        }
      }
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int at = (n0 + c - slice.begin) * stride + k;
        float wv[kVec];
        shared_w_floats(w + at, wv);
        float gv[kVec] = {};
        if (gated) shared_w_floats(gate_w + at, gv);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            sums[c * kRows + r] = fmaf(h[r][j], wv[j], sums[c * kRows + r]);
            if (gated) gate_sums[c * kRows + r] = fmaf(h[r][j], gv[j], gate_sums[c * kRows + r]);
          }
        }
      }
    }
    // Lane l then holds the total of index l / kLanesAValue: column n0 + i / kRows, row i % kRows.
    skinny::add_across_lanes<kValues, 16>(sums, lane);
    if (gated) skinny::add_across_lanes<kValues, 16>(gate_sums, lane);
    const int i = lane / kLanesAValue, c = i / kRows, r = i % kRows;
    float p[1][1] = {{sums[0]}};
    const float gate_p[1][1] = {{gate_sums[0]}};
    const int64_t row[1] = {row0 + r};
    const int col[1] = {n0 + c};
    finish_values<T, Chains>(call, l, last, p, gate_p, row, col);
    if (lane % kLanesAValue != 0 || col[0] >= slice.end) continue;
    if (last) {
      if (row[0] < call.rows) {
        static_cast<T*>(call.out)[row[0] * layer.out + col[0]] = from_float<T>(p[0][0]);
      }
    } else {
      const uint32_t address = shared_address(out_tile + r * stride + col[0]);
#pragma unroll
      for (int b = 0; b < kClusterBlocks; ++b) store_to_block(address, out_barrier, b, p[0][0]);
    }
  }
}

// The whole forward of one tile of Shape::kRows rows a cluster; `stride`: Shape::stride_for the
// model's widest layer; `stage_elements`: Shape::stage_elements_for it. Launched with clusters of
// kClusterBlocks blocks along x.
template <typename T, class Shape, class Chains>
__global__ void __launch_bounds__(kThreads)
    cluster_mlp_kernel(const __grid_constant__ MlpCall call, int stride, int stage_elements) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = int(cluster.block_rank());
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  float* tiles[2] = {reinterpret_cast<float*>(shared_bytes),
                     reinterpret_cast<float*>(shared_bytes) + Shape::kRows * stride};
  T* stages = reinterpret_cast<T*>(tiles[1] + Shape::kRows * stride);
  // Tile t's mbarrier: its phase ends once every block's values of a layer have landed in it.
  const uint32_t barriers = shared_address(stages + kClusterStages * stage_elements);
  const auto barrier_of = [&](int t) { return barriers + 8u * uint32_t(t); };
  const int gate_at = stage_elements / 2;  // a stage's gate slice, where the model is gated
  const int64_t row0 = int64_t(blockIdx.x / kClusterBlocks) * Shape::kRows;
  // This block's mbarriers ready, then its arrival at the barrier every block passes before any
  // block writes into another's tiles: arrived before W's copies are issued, so that its fence
  // waits for none of them.
  if (threadIdx.x < 2) init_barrier(barrier_of(threadIdx.x));
  cluster_arrive();
  // Layer l's slices of W (and of the gate's W) into stage l % kClusterStages, one group of copies
  // a layer (an empty one past the last: the waits count groups).
  const auto fill = [&](int l) {
    if (l < call.layers) {
      const MlpLayer& layer = call.layer[l];
      const Slice slice = slice_of(layer.out, rank);
      const int rows = slice.end - slice.begin, k_end = round_up(layer.in, Shape::kKStep);
      T* stage = stages + l % kClusterStages * stage_elements;
      copy_rows(static_cast<const T*>(layer.w), slice.begin, rows, layer.out, layer.in, k_end,
                stage, stride);
      if (layer.gate_w) {
        copy_rows(static_cast<const T*>(layer.gate_w), slice.begin, rows, layer.out, layer.in,
                  k_end, stage + gate_at, stride);
      }
    }
    skinny::copy_async_commit();
  };
  for (int l = 0; l < kClusterStages; ++l) fill(l);
  load_x_tile<Shape, T>(call, tiles[0], stride, row0);
  // The later layers' slices asked of L2 once the first layers' copies and x are under way, so
  // that their copies find them there.
  for (int l = kClusterStages; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    const Slice slice = slice_of(layer.out, rank);
    prefetch_rows<T>(layer.w, slice, layer.in);
    prefetch_rows<T>(layer.gate_w, slice, layer.in);
  }
  cluster_wait();
  for (int l = 0; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    const bool last = l + 1 == call.layers;
    float* tile_out = tiles[(l + 1) % 2];
    // This layer's input: the layer before's values from every block, the ((l - 1) / 2)-th phase
    // of tile l % 2's mbarrier (the first layer's input is x, loaded by this block) ...
    if (l > 0) wait_barrier(barrier_of(l % 2), uint32_t((l - 1) / 2) % 2);
    // ... and its slice of W, every thread's copies of it (the later layers' may be in flight).
    skinny::copy_async_wait<kClusterStages - 1>();
    __syncthreads();
    if (!last) {
      // The values every block will send into tile_out: every column for every row. The other
      // blocks have read tile_out as their input already (they sent this layer's input after),
      // and may count theirs in before this arrival: the phase ends only with it.
      if (threadIdx.x == 0) {
        expect_bytes(barrier_of((l + 1) % 2),
                     uint32_t(Shape::kRows * layer.out * int(sizeof(float))));
      }
      // The k past this layer's width that the next layer's last step reads: this block's own
      // copy (the other blocks write only columns within the width).
      zero_columns<float, Shape>(tile_out, stride, layer.out, round_up(layer.out, Shape::kKStep));
    }
    const T* stage = stages + l % kClusterStages * stage_elements;
    cluster_layer<T, Shape, Chains>(call, l, last, tiles[l % 2], tile_out, barrier_of((l + 1) % 2),
                                    stride, stage, layer.gate_w ? stage + gate_at : nullptr, row0,
                                    cluster);
    if (last) break;
    // Every read of this layer's stage done before its copy of a later layer's W overwrites it.
    __syncthreads();
    fill(l + kClusterStages);
  }
  skinny::copy_async_wait<0>();  // no copy outlives the block
#endif
}

}  // namespace mlp
}  // namespace cuda
}  // namespace fusedlinear
