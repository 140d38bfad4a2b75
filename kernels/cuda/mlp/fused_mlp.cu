// The fused-MLP kernel's launcher (fused_mlp.h): checks what the kernel takes, picks its tile and
// launches it on the given stream. Compiled with -ftz=true, as the epilogue kernel is, so that
// the chains give the per-layer path's bits.
#include <algorithm>
#include <climits>
#include <mutex>
#include <set>

#include "kernels/cuda/mlp/fused_mlp.cuh"

namespace fusedlinear {
namespace cuda {
namespace {

// Why `call` is not one the kernel takes: cudaErrorNotSupported, else cudaSuccess.
cudaError_t check_call(const MlpCall& call) {
  if (call.layers < 1 || call.layers > kMaxMlpLayers) return cudaErrorNotSupported;
  for (int l = 0; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    if (layer.in < 1 || layer.in > kMaxMlpWidth || layer.out < 1 || layer.out > kMaxMlpWidth) {
      return cudaErrorNotSupported;
    }
    if (l > 0 && layer.in != call.layer[l - 1].out) return cudaErrorNotSupported;
    if (layer.terms.count > MlpChain::kTerms) return cudaErrorNotSupported;
  }
  if (call.residual && call.layer[call.layers - 1].out != call.layer[0].in) {
    return cudaErrorNotSupported;
  }
  return cudaSuccess;
}

// Lets the kernel have more than the default 48 KiB of shared memory (the most any model takes),
// once per device (before a CUDA graph captures it: the first call).
template <typename T, class Shape>
cudaError_t allow_shared_bytes(int device) {
  constexpr int kMostBytes = mlp::shared_bytes_of<T, Shape>(kMaxMlpWidth);
  if (kMostBytes <= 48 * 1024) return cudaSuccess;
  static std::mutex mutex;
  static std::set<int> allowed;
  const std::lock_guard<std::mutex> lock(mutex);
  if (allowed.count(device) > 0) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(
      &mlp::fused_mlp_kernel<T, Shape>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMostBytes);
  if (err == cudaSuccess) allowed.insert(device);
  return err;
}

// The tiles sized for the model's widest layer: narrow models take less shared memory, so more
// blocks share a multiprocessor.
template <typename T, class Shape>
cudaError_t launch_tiles(const MlpCall& call, const DeviceLimits& limits, cudaStream_t stream) {
  int width = 0;
  for (int l = 0; l < call.layers; ++l) {
    width = std::max({width, call.layer[l].in, call.layer[l].out});
  }
  const int stride = Shape::stride_for(width);
  const int bytes = mlp::shared_bytes_of<T, Shape>(width);
  if (bytes > limits.shared_bytes_per_block) return cudaErrorNotSupported;
  const int64_t blocks = ceil_div(call.rows, Shape::kRows);
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  const cudaError_t err = allow_shared_bytes<T, Shape>(limits.device);
  if (err != cudaSuccess) return err;
  mlp::fused_mlp_kernel<T, Shape>
      <<<static_cast<unsigned>(blocks), mlp::kThreads, bytes, stream>>>(call, stride);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fused_mlp(const MlpCall& call, cudaStream_t stream) {
  cudaError_t err = check_call(call);
  if (err != cudaSuccess || call.rows == 0) return err;
  DeviceLimits limits;
  err = current_device_limits(limits);
  if (err != cudaSuccess) return err;
  switch (call.type) {
    case ElementType::kFloat32:
      // Up to a row a multiprocessor, a block a row (each SM reading W from L2 for its row);
      // past that, tiles of 8 rows, which read each W once for 8 rows.
      if (call.rows <= limits.multiprocessors) {
        return launch_tiles<float, mlp::FloatShape<1>>(call, limits, stream);
      }
      return launch_tiles<float, mlp::FloatShape<8>>(call, limits, stream);
    case ElementType::kFloat16:
    case ElementType::kBFloat16:
      if (limits.compute_major < 8) return cudaErrorNotSupported;  // mma.sync from sm_80
      if (call.type == ElementType::kFloat16) {
        return launch_tiles<__half, mlp::MmaShape>(call, limits, stream);
      }
      return launch_tiles<__nv_bfloat16, mlp::MmaShape>(call, limits, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace cuda
}  // namespace fusedlinear
