// The fused-MLP kernel's resident form (fused_mlp.h), for models on the tensor cores at most
// mlp_resident_max_width wide (mlp_call.h): 16-bit models, and float32 models in bf16 or bf16x3.
// Every layer's W is copied into each block's shared memory once (a float32 W split there into its
// bfloat16 parts), and the blocks, one wave of them, then take tiles of rows in turn. A warp owns
// one or two 16-row tiles and keeps them in registers from layer to layer: an m16n8k16 product's
// float32 results for two adjacent 8-column tiles, rounded to the model's type (or split into
// bfloat16 parts) and paired, are exactly the A operand of the next layer's 16-wide step of k (the
// two layouts line up), so the hidden activations never leave the warp and the warps never wait on
// each other. Each W is read as the mma's B operand from shared memory by ldmatrix (a row of W
// holds B's consecutive k), two 8-column tiles at a time, each B serving every row tile of the
// warp; W's rows are padded so that the 8 rows one phase of the load reads fall in different
// banks. The epilogue and its roundings are fused_mlp.cuh's.
//
// bf16x3 (kParts 2): x_hi W_hi^T in one accumulator, x_hi W_lo^T + x_lo W_hi^T in another, added
// once in float32 (the small products apart, as cuBLAS's three GEMMs add them). A non-finite
// x_hi W_hi^T stands alone: an infinite operand's part meets the other's zero lo (inf * 0), where
// eager's sum is that infinity, or NaN where the hi products already are.
#pragma once

#include "kernels/cuda/mlp/fused_mlp.cuh"
#include "kernels/math/bf16_split.h"

namespace fusedlinear {
namespace cuda {
namespace mlp {

// The products' type: the model's for 16-bit models, bfloat16 parts for float32 models.
template <typename T>
using PartType = std::conditional_t<std::is_same_v<T, float>, __nv_bfloat16, T>;

// v as kParts bfloat16 bits (hi, then lo), or a 16-bit value's own bits.
template <int kParts>
__device__ __forceinline__ void parts_of(float v, uint16_t (&part)[kParts]) {
  const split::Bf16Pair pair = split::split_bf16(v);
  part[0] = pair.hi;
  if constexpr (kParts == 2) part[1] = pair.lo;
}
template <int kParts>
__device__ __forceinline__ void parts_of(uint16_t v, uint16_t (&part)[kParts]) {
  part[0] = v;
}

// W [out, in] into shared memory as kParts planes of mlp_resident_plane elements, rows of `stride`
// (its parts, or its own 16-bit values), zeros past its rows and its k.
template <typename T, int kParts>
__device__ __forceinline__ void copy_padded(uint16_t* to, const void* from, int in, int out,
                                            int stride) {
  using Stored = std::conditional_t<std::is_same_v<T, float>, float, uint16_t>;
  const Stored* w = static_cast<const Stored*>(from);
  const int elements = int(mlp_resident_plane(in, out));
  for (int i = threadIdx.x; i < elements; i += kThreads) {
    const int n = i / stride, k = i % stride;
    uint16_t part[kParts] = {};
    if (n < out && k < in) parts_of<kParts>(w[int64_t(n) * in + k], part);
#pragma unroll
    for (int p = 0; p < kParts; ++p) to[p * elements + i] = part[p];
  }
}

// The bits of a pair of values as the A operand holds them: element 2k in the low half.
__device__ __forceinline__ uint32_t pair_of(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | uint32_t(hi) << 16;
}

// The warp's 16 rows of x (`in` wide) from row0 on as the first layer's A operand: act[p][t] holds
// part p of k 16t to 16t + 15 (rows g and g + 8 of the lane's group, k 2q, 2q + 1 and 2q + 8,
// 2q + 9); zeros past the rows and the width. Each pair of k is one load where `in` is even and x
// holds pairs aligned.
template <typename T, int kParts, int kSteps>
__device__ __forceinline__ void load_rows(const MlpCall& call, int in, int64_t row0,
                                          uint32_t (&act)[kParts][kSteps][4]) {
  using Stored = std::conditional_t<std::is_same_v<T, float>, float, uint16_t>;
  const Stored* x = static_cast<const Stored*>(call.x);
  const bool pairs = in % 2 == 0 && reinterpret_cast<uintptr_t>(x) % (2 * sizeof(Stored)) == 0;
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int t = 0; t < kSteps; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row0 + g + 8 * (i % 2);
      const int k = 16 * t + 2 * q + 8 * (i / 2);
      uint16_t first[kParts] = {}, second[kParts] = {};
      if (row < call.rows && k < in) {
        const Stored* at = x + row * in + k;
        if (pairs) {
          if constexpr (std::is_same_v<Stored, float>) {
            const float2 both = *reinterpret_cast<const float2*>(at);
            parts_of<kParts>(both.x, first);
            parts_of<kParts>(both.y, second);
          } else {
            const uint32_t both = *reinterpret_cast<const uint32_t*>(at);
            parts_of<kParts>(uint16_t(both), first);
            parts_of<kParts>(uint16_t(both >> 16), second);
          }
        } else {
          parts_of<kParts>(at[0], first);
          if (k + 1 < in) parts_of<kParts>(at[1], second);
        }
      }
#pragma unroll
      for (int p = 0; p < kParts; ++p) act[p][t][i] = pair_of(first[p], second[p]);
    }
  }
}

// acc[m][j0 + i] += the products of A (act[m]'s parts, the warp's row tile m) and B over the
// layer's k for kTiles 8-column tiles (an even count), B read from W in shared memory with
// ldmatrix, two tiles' 16 k at a time: `w_lane` is the shared address of the lane's row of W for
// the first pair (lanes 0-7 give rows 0-7 of tile j0, k 0-7; lanes 8-15 the same rows, k 8-15;
// lanes 16-31 the next tile's), a tile `tile_bytes` on, each part `plane_bytes` on. One product a
// tile, step and row tile (16-bit models, bf16), or bf16x3's three with the small ones in `small`;
// every row tile's products share the B just read. The steps go outermost, so that a step's
// products are independent of each other and the tensor cores overlap them; the one guard a step
// keeps the layer's k a run-time bound where the shape is not compiled in.
template <typename WT, int kTiles, int kParts, int kRowTiles, int kSteps, int kAll>
__device__ __forceinline__ void tile_products(float (&acc)[kRowTiles][kAll][4],
                                              float (&small)[kRowTiles][kAll][4], int j0,
                                              const uint32_t (&act)[kRowTiles][kParts][kSteps][4],
                                              uint32_t w_lane, int tile_bytes, int plane_bytes,
                                              int k_steps) {
  static_assert(kTiles % 2 == 0, "ldmatrix takes B two tiles at a time");
#pragma unroll
  for (int t = 0; t < kSteps; ++t) {
    if (t >= k_steps) break;
#pragma unroll
    for (int i = 0; i < kTiles; i += 2) {
      // hi[0], hi[1]: tile j0 + i's B; hi[2], hi[3]: tile j0 + i + 1's.
      uint32_t hi[4], lo[4];
      const uint32_t at = w_lane + uint32_t(i * tile_bytes + 32 * t);
      skinny::load_matrices(hi, at);
      if constexpr (kParts == 2) skinny::load_matrices(lo, at + uint32_t(plane_bytes));
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float(&d)[4] = acc[m][j0 + i + h];
          skinny::mma_m16n8k16<WT>(d, act[m][0][t], hi[2 * h], hi[2 * h + 1]);
          if constexpr (kParts == 2) {
            float(&e)[4] = small[m][j0 + i + h];
            skinny::mma_m16n8k16<WT>(e, act[m][0][t], lo[2 * h], lo[2 * h + 1]);
            skinny::mma_m16n8k16<WT>(e, act[m][1][t], hi[2 * h], hi[2 * h + 1]);
          }
        }
      }
    }
  }
}

// The shared address of the lane's row of W for tile_products, the first pair of tiles at row 0 of
// `w` (rows of `stride` elements).
__device__ __forceinline__ uint32_t lane_row_of(const uint16_t* w, int stride) {
  const int lane = threadIdx.x % 32;
  const int row = 8 * (lane / 16) + lane % 8, k = 8 * (lane / 8 % 2);
  return shared_address(w + row * stride + k);
}

// The sum of bf16x3's products (the hi product alone where it is not finite), or the one product.
template <int kParts>
__device__ __forceinline__ float total_of(float hi, float small) {
  if constexpr (kParts == 2) return isfinite(hi) ? __fadd_rn(hi, small) : hi;
  return hi;
}

// Two values of a row of the last layer's output, columns `col` and `col` + 1 (`col` even), into
// `out`: one store where the row's width is even and `out` holds pairs aligned, else the columns
// inside the width one at a time.
template <typename T>
__device__ __forceinline__ void store_pair(T* out, int64_t row, int col, int width, float first,
                                           float second) {
  T* at = out + row * width + col;
  if (width % 2 == 0 && reinterpret_cast<uintptr_t>(out) % (2 * sizeof(T)) == 0) {
    if (col >= width) return;
    if constexpr (std::is_same_v<T, float>) {
      *reinterpret_cast<float2*>(at) = make_float2(first, second);
    } else {
      *reinterpret_cast<uint32_t*>(at) = pack_pair<T>(first, second);
    }
    return;
  }
  if (col < width) at[0] = from_float<T>(first);
  if (col + 1 < width) at[1] = from_float<T>(second);
}

// The epilogue of kTiles of the warp's output tiles of layer l (`out` wide; `last`: the model's
// last) on its row tile from row0, the first at column col0 and accumulators j0 (acc[j0 + i]: rows
// g (0, 1) and g + 8 (2, 3), columns col0 + 8i + 2q and the next; bf16x3's small products apart),
// in one pass of the chain over all their values (the interpreter's jump to each op taken once for
// them all): the values into the call's output for the last layer, else, as the next layer's A
// operand, handed to `keep(part, i, r, word)`: part `part` of the lane's two values of tile i's row
// g + 8r, paired (zeros past the layer's width). Tile i's columns are k 16t + 8((col0 / 8 + i) % 2)
// ... of the next layer's step t = (col0 + 8i) / 16, the words 2((col0 / 8 + i) % 2) + r of the
// lane's A of that step.
template <typename T, class Chains, int kParts, int kTiles, int kAll, class Keep>
__device__ __forceinline__ void finish_tiles(const MlpCall& call, int l, bool last, int out,
                                             int col0, int j0, int64_t row0,
                                             const float (&acc)[kAll][4],
                                             const float (&small)[kAll][4],
                                             const float (&gate_acc)[kAll][4],
                                             const float (&gate_small)[kAll][4], Keep&& keep) {
  constexpr int kCols = 2 * kTiles;  // the lane's columns, two a tile
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  float p[2][kCols], gate_p[2][kCols];
  int col[kCols];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      p[e / 2][2 * i + e % 2] = total_of<kParts>(acc[j0 + i][e], small[j0 + i][e]);
      gate_p[e / 2][2 * i + e % 2] = total_of<kParts>(gate_acc[j0 + i][e], gate_small[j0 + i][e]);
    }
    col[2 * i] = col0 + 8 * i + 2 * q;
    col[2 * i + 1] = col0 + 8 * i + 2 * q + 1;
  }
  const int64_t row[2] = {row0 + g, row0 + g + 8};
  finish_values<T, Chains>(call, l, last, p, gate_p, row, col);
  if (last) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] >= call.rows) continue;
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        store_pair(static_cast<T*>(call.out), row[r], col[2 * i], out, p[r][2 * i],
                   p[r][2 * i + 1]);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int c = 2 * i;
      uint16_t first[kParts] = {}, second[kParts] = {};
      if constexpr (std::is_same_v<T, float>) {
        if (col[c] < out) parts_of<kParts>(p[r][c], first);
        if (col[c + 1] < out) parts_of<kParts>(p[r][c + 1], second);
      } else {
        const uint32_t both =
            pack_pair<T>(col[c] < out ? p[r][c] : 0.0f, col[c + 1] < out ? p[r][c + 1] : 0.0f);
        first[0] = uint16_t(both);
        second[0] = uint16_t(both >> 16);
      }
#pragma unroll
      for (int part = 0; part < kParts; ++part)
        keep(part, i, r, pair_of(first[part], second[part]));
    }
  }
}

// Layer l (`in` x `out`; `last`: the model's last) on the warp's kRowTiles row tiles from row0: the
// products against W (and the gate's W) in shared memory at `w` (and `gate_w`, or null), each
// `plane` elements a part, then each output tile's epilogue, its values back into `act` as the next
// layer's A operand, or for the last layer into the output.
template <typename T, class Chains, int kParts, int kRowTiles, int kSteps>
__device__ __forceinline__ void resident_layer(const MlpCall& call, int l, bool last, int in,
                                               int out, const uint16_t* w, const uint16_t* gate_w,
                                               int plane, int64_t row0,
                                               uint32_t (&act)[kRowTiles][kParts][kSteps][4]) {
  const int stride = int(mlp_padded_row(in));
  const int k_steps = (in + 15) / 16;
  const int out_steps = (out + 15) / 16;
  const int tile_bytes = 8 * stride * 2, plane_bytes = plane * 2;
  float acc[kRowTiles][2 * kSteps][4] = {}, small[kRowTiles][2 * kSteps][4] = {};
  float gate_acc[kRowTiles][2 * kSteps][4] = {}, gate_small[kRowTiles][2 * kSteps][4] = {};
  const uint32_t w_lane = lane_row_of(w, stride);
  const uint32_t gate_lane = gate_w ? lane_row_of(gate_w, stride) : 0u;
  // Whole groups of tiles: W's rows are padded to them (mlp_resident_plane), zeros past its own.
#pragma unroll
  for (int j = 0; j < 2 * kSteps; j += kMlpTileGroup) {
    if (j >= 2 * out_steps) break;
    const uint32_t at = uint32_t(j * tile_bytes);
    tile_products<PartType<T>, kMlpTileGroup>(acc, small, j, act, w_lane + at, tile_bytes,
                                              plane_bytes, k_steps);
    if (gate_w) {
      tile_products<PartType<T>, kMlpTileGroup>(gate_acc, gate_small, j, act, gate_lane + at,
                                                tile_bytes, plane_bytes, k_steps);
    }
  }
  // The epilogue a group of kEpilogueTiles at a time (W's rows are padded to whole groups): a
  // group's tiles past the layer's width give zeros to the next layer's A. A group takes the
  // interpreter's jump to each op once for all its values; a narrow 16-bit model, light on
  // registers, measured as fast one tile at a time, and slower in pairs (docs/RESULTS.md).
  constexpr int kEpilogueTiles = kSteps >= 8 ? kMlpTileGroup : kParts > 1 ? kMlpTileGroup / 2 : 1;
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
    for (int j = 0; j < 2 * kSteps; j += kEpilogueTiles) {
      if (j >= 2 * out_steps) break;
      finish_tiles<T, Chains, kParts, kEpilogueTiles>(
          call, l, last, out, 8 * j, j, row0 + 16 * m, acc[m], small[m], gate_acc[m], gate_small[m],
          [&](int part, int i, int r, uint32_t word) {
            act[m][part][(j + i) / 2][2 * ((j + i) % 2) + r] = word;
          });
    }
  }
}

// Every layer's W into shared memory, then tiles of mlp_resident_block_rows rows, `tiles` in all,
// a block taking every gridDim.x-th. T: the model's type; kParts: 2 for a float32 model in bf16x3,
// else 1; kSteps: the 16-wide steps of the model's widest layer it holds in registers; Shape: the
// layers' widths (RuntimeShape, or a model's CompiledShape); Chains: how the layers' chains are
// applied (finish_values).
template <typename T, int kParts, int kSteps, class Shape, class Chains>
__global__ void __launch_bounds__(kThreads, Shape::kMinBlocks)
    resident_mlp_kernel(const __grid_constant__ MlpCall call, int64_t tiles) {
  constexpr int kRowTiles = mlp_resident_row_tiles(kParts, kSteps);
  constexpr int kBlockRows = mlp_resident_block_rows(kParts, kSteps);
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  uint16_t* weights = reinterpret_cast<uint16_t*>(shared_bytes);
  int at = 0;
  for (int l = 0; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    const int stride = int(mlp_padded_row(layer.in));
    const int plane = int(mlp_resident_plane(layer.in, layer.out));
    copy_padded<T, kParts>(weights + at, layer.w, layer.in, layer.out, stride);
    at += kParts * plane;
    if (layer.gate_w) {
      copy_padded<T, kParts>(weights + at, layer.gate_w, layer.in, layer.out, stride);
      at += kParts * plane;
    }
  }
  __syncthreads();
  const int warp = threadIdx.x / 32;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row0 = tile * kBlockRows + 16 * kRowTiles * warp;
    if (row0 >= call.rows) break;  // the last tile's rows past the batch, and every later tile's
    uint32_t act[kRowTiles][kParts][kSteps][4];
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m) {
      load_rows<T>(call, Shape::in(call, 0), row0 + 16 * m, act[m]);
    }
    int w_at = 0;
#pragma unroll(Shape::kLayerUnroll)
    for (int l = 0; l < Shape::layers(call); ++l) {
      const int in = Shape::in(call, l), out = Shape::out(call, l);
      const int plane = int(mlp_resident_plane(in, out));
      const uint16_t* w = weights + w_at;
      const uint16_t* gate_w = Shape::gated(call, l) ? w + kParts * plane : nullptr;
      w_at += (gate_w ? 2 : 1) * kParts * plane;
      const bool last = l + 1 == Shape::layers(call);
      resident_layer<T, Chains, kParts, kRowTiles>(call, l, last, in, out, w, gate_w, plane, row0,
                                                   act);
    }
  }
}

}  // namespace mlp
}  // namespace cuda
}  // namespace fusedlinear
