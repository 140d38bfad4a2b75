// The fused-MLP kernel's launcher: a small layered model's whole forward (mlp_call.h) in one
// launch, the hidden activations kept on the chip and only the last layer's output written.
// Torch-free: raw pointers, sizes, a stream.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/mlp/mlp_call.h"

namespace fusedlinear {
namespace cuda {

// Runs `call` on the current device in its form (call.form): float32 models with float32 FMAs on
// the CUDA cores, 16-bit models on the tensor cores (mma.sync, float32 sums; compute capability 8.0
// and newer) or, in the cluster form, float32 FMAs. cudaErrorNotSupported, with nothing launched,
// where the kernel cannot take the call (a width of 0 or above kMaxMlpWidth, more than
// kMaxMlpLayers layers, a 16-bit model before sm_80, widths that do not chain, the cluster form
// before sm_90, the resident form for a float32 model in ieee, one wider than its width or
// whose weights do not fit a block's shared memory); else the launch's error. Each form's kernel
// is the library's, which interprets the layers' chains, or where `compiled` gives it, the same
// kernel compiled with the model's chains in (mlp_call.h: MlpKernelOf).
cudaError_t launch_fused_mlp(const MlpCall& call, cudaStream_t stream,
                             const MlpKernelOf& compiled = {});

}  // namespace cuda
}  // namespace fusedlinear
