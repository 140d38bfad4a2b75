// The fused-MLP kernel's interface: a small layered model's whole forward in one launch, every
// layer at most kMaxMlpWidth wide, the hidden activations kept in shared memory and only the last
// layer's output written (fused_mlp.cuh). Torch-free: raw pointers, sizes, a stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/element.h"
#include "kernels/math/program.h"

namespace fusedlinear {
namespace cuda {

// The widest layer (inputs and outputs) and the most layers one launch takes: a block holds a tile
// of rows at this width twice in shared memory, and the layers travel in the kernel's parameters.
constexpr int kMaxMlpWidth = 256;
constexpr int kMaxMlpLayers = 8;

// The cluster form (cluster_mlp.cuh, sm_90): blocks a cluster, and the rows of its tile (one row
// where the call has one).
constexpr int kMlpClusterBlocks = 8;
constexpr int kMlpClusterTileRows = 8;

// The chain of a layer, as the interpreter runs it (program.h): the float32 forms of its ops,
// as the per-layer path's epilogue runs a run-time chain for every element type.
using MlpChain = act::ProgramChain<act::ResultPrecision::kFloat32>;

// One layer: out[m, n] = chain(x[m, :] . w[n, :] + bias[n], terms[.][n]) [* gate[m, n]], each
// rounding to the model's type where the per-layer path rounds (fused_mlp.cuh says where).
//   w [out, in] row-major (output-major) in the model's type; bias [out] or null;
//   gate_w, gate_bias: a gated layer's other product (a Linear of its own, or the other half of
//   a chunked Linear: then `round_before_chain`, as the chunked layer's chain reads the Linear's
//   rounded output); null for a plain layer.
struct MlpLayer {
  const void* w = nullptr;
  const void* bias = nullptr;
  const void* gate_w = nullptr;
  const void* gate_bias = nullptr;
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
  // The cluster form: a cluster of kMlpClusterBlocks blocks a tile, each forming a slice of every
  // layer's columns (the plan's choice: few rows on sm_90); else one block a tile.
  bool clusters = false;
};

// Runs `call` on the current device: float32 models with float32 FMAs on the CUDA cores, 16-bit
// models on the tensor cores (mma.sync, float32 sums; compute capability 8.0 and newer).
// cudaErrorNotSupported, with nothing launched, where the kernel cannot take the call (a width
// of 0 or above kMaxMlpWidth, more than kMaxMlpLayers layers, a 16-bit model before sm_80, widths
// that do not chain, the cluster form before sm_90); else the launch's error.
cudaError_t launch_fused_mlp(const MlpCall& call, cudaStream_t stream);

}  // namespace cuda
}  // namespace fusedlinear
