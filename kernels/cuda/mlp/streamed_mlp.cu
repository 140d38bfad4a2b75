// The fused-MLP kernel's streamed form's launcher (streamed_mlp.cuh), in a file of its own so that
// its instances compile beside the other forms'. Compiled with -ftz=true, as fused_mlp.cu is.
#include <climits>

#include "kernels/cuda/mlp/streamed_mlp.cuh"

namespace fusedlinear {
namespace cuda {
namespace mlp {
namespace {

// The form with kSteps steps of k in registers: one wave of persistent blocks, as many a
// multiprocessor as the shared memory the call takes allows.
template <typename T, int kParts, int kSteps>
cudaError_t launch_streamed_sized(const MlpCall& call, const DeviceLimits& limits,
                                  cudaStream_t stream) {
  int widest_in = 0;
  bool gated = false;
  for (int l = 0; l < call.layers; ++l) {
    widest_in = std::max(widest_in, call.layer[l].in);
    gated = gated || call.layer[l].gate_w != nullptr;
  }
  const int64_t bytes = mlp_streamed_bytes(widest_in, widest_of(call), gated, kParts);
  if (bytes > limits.shared_bytes_per_block) return cudaErrorNotSupported;
  const int stride = (widest_in + 15) / 16 * 16 + 8;
  const int chunk_elements = (gated ? 2 : 1) * kParts * mlp_streamed_chunk_rows(kParts) * stride;
  constexpr auto kernel = &streamed_mlp_kernel<T, kParts, kSteps>;
  cudaError_t err = allow_shared_bytes<kernel>(
      limits, mlp_streamed_bytes(16 * kSteps, 16 * kSteps, true, kParts));
  if (err != cudaSuccess) return err;
  int per_multiprocessor = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, kThreads,
                                                      size_t(bytes));
  if (err != cudaSuccess) return err;
  const int64_t tiles = ceil_div(call.rows, kResidentRows);
  const int64_t blocks =
      std::min<int64_t>(tiles, int64_t(std::max(per_multiprocessor, 1)) * limits.multiprocessors);
  kernel<<<static_cast<unsigned>(blocks), kThreads, size_t(bytes), stream>>>(call, tiles, stride,
                                                                             chunk_elements);
  return cudaGetLastError();
}

template <typename T, int kParts>
cudaError_t launch_streamed_for(const MlpCall& call, const DeviceLimits& limits,
                                cudaStream_t stream) {
  switch (mlp_register_steps(widest_of(call))) {
    case 4:
      return launch_streamed_sized<T, kParts, 4>(call, limits, stream);
    case 8:
      return launch_streamed_sized<T, kParts, 8>(call, limits, stream);
    default:
      return launch_streamed_sized<T, kParts, 16>(call, limits, stream);
  }
}

// Whether every layer of a float32 model carries the `parts` parts of its W (and of its gate's W).
bool has_parts(const MlpCall& call, int parts) {
  for (int l = 0; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    for (int p = 0; p < parts; ++p) {
      if (!layer.w_part[p] || (layer.gate_w && !layer.gate_w_part[p])) return false;
    }
  }
  return true;
}

}  // namespace

cudaError_t launch_streamed(const MlpCall& call, const DeviceLimits& limits, cudaStream_t stream) {
  if (limits.compute_major < 8) return cudaErrorNotSupported;  // mma.sync and cp.async from sm_80
  switch (call.type) {
    case ElementType::kFloat16:
      return launch_streamed_for<__half, 1>(call, limits, stream);
    case ElementType::kBFloat16:
      return launch_streamed_for<__nv_bfloat16, 1>(call, limits, stream);
    case ElementType::kFloat32: {
      const int parts = mlp_resident_parts(call.precision);
      if (call.precision != Precision::kBf16 && call.precision != Precision::kBf16x3) break;
      if (!has_parts(call, parts)) break;
      return parts == 2 ? launch_streamed_for<float, 2>(call, limits, stream)
                        : launch_streamed_for<float, 1>(call, limits, stream);
    }
  }
  return cudaErrorNotSupported;
}

}  // namespace mlp
}  // namespace cuda
}  // namespace fusedlinear
