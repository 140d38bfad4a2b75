// The fused-MLP kernel's call: a small layered model's whole forward in one launch, every layer at
// most kMaxMlpWidth wide (fused_mlp.h launches it). Torch-free and CUDA-free, so that the plan
// (kernels/ops/gemm_plan.h) names the kernel's limits and forms as the kernel does.
#pragma once

#include <cstdint>

#ifndef __CUDACC_RTC__
#include <array>
#include <functional>
#include <string>
#include <tuple>
#endif

#include "kernels/math/element.h"
#include "kernels/math/precision.h"
#include "kernels/math/program.h"

namespace fusedlinear {
namespace cuda {

// The widest layer (inputs and outputs) and the most layers one launch takes: a block holds a tile
// of rows at this width twice in shared memory, and the layers travel in the kernel's parameters.
constexpr int kMaxMlpWidth = 256;
constexpr int kMaxMlpLayers = 8;
constexpr int kMlpThreads = 256;  // a block's threads, in every form

// How the kernel runs a call (the plan's choice, gemm_plan.h: mlp_form):
//   kTiles     a block a tile of rows (fused_mlp.cuh): the general form.
//   kClusters  a cluster of kMlpClusterBlocks blocks a tile of kMlpClusterTileRows rows (one row
//              for one row), each block forming a slice of every layer (cluster_mlp.cuh, sm_90):
//              few rows, which one block a tile would leave waiting on its read of every W.
//   kResident  models on the tensor cores at most mlp_resident_max_width wide (16-bit models,
//              float32 models in bf16 or bf16x3): every layer's W resident in each block's shared
//              memory, a warp's 16 rows held in registers from layer to layer (resident_mlp.cuh):
//              many rows, bound by the tensor cores.
//   kStreamed  models on the tensor cores whose weights do not fit a block's shared memory
//              together (wider, or more layers): each layer's W streamed through shared memory
//              in chunks of its rows, shared by the block's warps, a warp's rows held in registers
//              as in the resident form (streamed_mlp.cuh).
enum class MlpForm { kTiles, kClusters, kResident, kStreamed };
constexpr int kMlpClusterBlocks = 8;
constexpr int kMlpClusterTileRows = 8;
constexpr int kMlpResidentMaxWidth = 128;

// The 16-bit parts of W the resident form holds for a mode: a float32 W's bfloat16 hi and lo for
// bf16x3, else one (a 16-bit model's own W, a float32 W's bfloat16 hi for bf16).
inline int mlp_resident_parts(Precision precision) {
  return precision == Precision::kBf16x3 ? 2 : 1;
}

// The widest layer the resident form takes with W in `parts` parts: a warp holds its rows' values
// and each output's sums (bf16x3's two sums each) in registers, which 128 wide fills with one part.
inline int mlp_resident_max_width(int parts) { return parts == 2 ? 64 : kMlpResidentMaxWidth; }

// The elements of a row of W (of `in` k) in the resident and streamed forms' shared memory: its k
// to the next 16 and 8 past them, so that the 8 rows one load of the mma's B operand reads fall in
// different banks.
FL_HOST_DEVICE constexpr int64_t mlp_padded_row(int64_t in) { return (in + 15) / 16 * 16 + 8; }

// The 8-column tiles of output a warp of the resident and streamed forms forms together: at each
// step of k their products are independent, so the tensor cores overlap them, where one tile's
// chain of steps would wait on each product before the next.
constexpr int kMlpTileGroup = 4;

// The elements of one 16-bit plane of a layer's W in the resident form's shared memory: its rows
// padded to whole groups of tiles (kMlpTileGroup), each mlp_padded_row.
FL_HOST_DEVICE constexpr int64_t mlp_resident_plane(int64_t in, int64_t out) {
  return (out + 8 * kMlpTileGroup - 1) / (8 * kMlpTileGroup) * (8 * kMlpTileGroup) *
         mlp_padded_row(in);
}

// The shared memory the resident form takes for a layer `in` x `out` whose W it holds in `parts`
// 16-bit parts (resident_mlp.cuh); twice that for a gated layer.
inline int64_t mlp_resident_layer_bytes(int64_t in, int64_t out, bool gated, int parts) {
  return (gated ? 2 : 1) * parts * mlp_resident_plane(in, out) * 2;
}

// The streamed form's ring of chunks of W in shared memory, and the rows of W a chunk holds: fewer
// for bf16x3, whose two parts and the warps' two sums an output fill more room.
constexpr int kMlpStreamStages = 3;
FL_HOST_DEVICE constexpr int mlp_streamed_chunk_rows(int parts) { return parts == 2 ? 16 : 32; }

// The 16-wide steps of k a warp of the resident and streamed forms holds in registers for a model
// at most `widest` wide.
inline int mlp_register_steps(int64_t widest) { return widest <= 64 ? 4 : widest <= 128 ? 8 : 16; }

// The 16-row tiles of x a warp of the resident form holds in registers with `steps` steps of k in
// `parts` parts: two where they fit (one part, at most 64 wide), so that each B operand read from
// shared memory serves two products; one where two would overflow the registers.
FL_HOST_DEVICE constexpr int mlp_resident_row_tiles(int parts, int steps) {
  return parts == 1 && steps <= 4 ? 2 : 1;
}

// The rows a block of the resident form takes at a time: its warps' tiles.
FL_HOST_DEVICE constexpr int mlp_resident_block_rows(int parts, int steps) {
  return 16 * mlp_resident_row_tiles(parts, steps) * (kMlpThreads / 32);
}

// The shared memory the streamed form takes: the ring (each chunk's rows of W, and of the gate's W
// where a layer is gated, in `parts` 16-bit parts, each row mlp_padded_row of the widest input)
// and each thread's slots for the next layer's A operand (its 16-bit pairs of
// mlp_register_steps(widest) steps in `parts` parts).
inline int64_t mlp_streamed_bytes(int64_t widest_in, int64_t widest, bool gated, int parts) {
  const int64_t row_bytes = mlp_padded_row(widest_in) * 2;
  const int64_t chunk = (gated ? 2 : 1) * parts * mlp_streamed_chunk_rows(parts) * row_bytes;
  const int64_t slots = int64_t(parts) * mlp_register_steps(widest) * 4 * 4 * kMlpThreads;
  return kMlpStreamStages * chunk + slots;
}

// The chain of a layer, as the interpreter runs it (program.h): its ops as the per-layer path's
// epilogue runs them for the model's element type (act::with_result_precision).
using MlpChain = act::ProgramChain<act::ResultPrecision::kFloat32>;

// One layer: out[m, n] = chain(x[m, :] . w[n, :] + bias[n], terms[.][n]) [* gate[m, n]], each
// rounding to the model's type where the per-layer path rounds (fused_mlp.cuh says where).
//   w [out, in] row-major (output-major) in the model's type; bias [out] or null;
//   gate_w, gate_bias: a gated layer's other product (a Linear of its own, or the other half of
//   a chunked Linear: then `round_before_chain`, as the chunked layer's chain reads the Linear's
//   rounded output); null for a plain layer.
//   w_part, gate_w_part: a float32 model's W (and gate W) as the per-layer path splits them for
//   bf16 (hi) and bf16x3 (hi, lo), [out, in] bfloat16, which the streamed form copies as they
//   are; null otherwise.
struct MlpLayer {
  const void* w = nullptr;
  const void* bias = nullptr;
  const void* gate_w = nullptr;
  const void* gate_bias = nullptr;
  const void* w_part[2] = {};
  const void* gate_w_part[2] = {};
  bool round_before_chain = false;
  ColumnTerms terms;  // the chain's per-feature parameters, [out] or one value each
  MlpChain chain;
  int in = 0, out = 0;
};

// A whole forward: x [rows, layer[0].in] row-major, out [rows, layer[layers - 1].out]. With
// `residual`, x is added to the last layer's output (in == out); `residual_in_product`: the last
// layer is a Linear alone (no bias, chain or gate), whose product x takes in one rounding, as
// cuBLAS adds it (beta = 1) on the per-layer path.
struct MlpCall {
  ElementType type = ElementType::kFloat32;
  const void* x = nullptr;
  void* out = nullptr;
  int64_t rows = 0;
  int layers = 0;
  MlpLayer layer[kMaxMlpLayers];
  bool residual = false;
  bool residual_in_product = false;
  MlpForm form = MlpForm::kTiles;
  // The products: ieee (float32 FMAs, or a 16-bit model's own), or for a float32 model in the
  // resident form bf16 or bf16x3.
  Precision precision = Precision::kIeee;
};

#ifndef __CUDACC_RTC__
// A model's layer widths and gated layers, as an instance compiled for them takes them
// (fused_mlp.cuh: CompiledShape): every loop over its layers, steps of k and tiles of output then
// has known bounds. Empty (no layers) for an instance that reads them from the call.
struct MlpShape {
  int layers = 0;
  std::array<int, kMaxMlpLayers + 1> width = {};  // layer 0's input, then each layer's output
  unsigned gated = 0;                             // bit l: layer l is gated

  bool operator<(const MlpShape& other) const {
    return std::tie(layers, width, gated) < std::tie(other.layers, other.width, other.gated);
  }
  // The CompiledShape type of these widths, as a unit names it.
  std::string type_name() const {
    std::string name = "fusedlinear::cuda::mlp::CompiledShape<" + std::to_string(gated) + "u";
    for (int l = 0; l <= layers; ++l) name += ", " + std::to_string(width[l]);
    return name + ">";
  }
};

inline MlpShape shape_of(const MlpCall& call) {
  MlpShape shape;
  shape.layers = call.layers;
  shape.width[0] = call.layer[0].in;
  for (int l = 0; l < call.layers; ++l) {
    shape.width[l + 1] = call.layer[l].out;
    if (call.layer[l].gate_w) shape.gated |= 1u << l;
  }
  return shape;
}

// A model's kernels compiled with its layers' chains in (kernels/cuda/jit/compiled_chains.h:
// compiled_mlp_kernels): given the library's kernel of an instance, the shape it is compiled for
// (empty: none) and a function that writes the instance's name (kernel_for in fused_mlp.cuh), that
// instance compiled at its first call, or null where it is not (the library's instance, which
// interprets the chains and reads the shape from the call, runs instead); the name is written only
// to compile it. Empty: the library's instances.
using MlpKernelOf = std::function<const void*(const void* library, const MlpShape& shape,
                                              const std::function<std::string()>& instance_name)>;
#endif

}  // namespace cuda
}  // namespace fusedlinear
