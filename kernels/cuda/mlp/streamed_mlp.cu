// The fused-MLP kernel's streamed form's launcher (streamed_mlp.cuh), in a file of its own so that
// its instances compile beside the other forms'. Compiled with -ftz=true, as fused_mlp.cu is.
#include <climits>
#include <string>

#include "kernels/cuda/mlp/streamed_mlp.cuh"

namespace fusedlinear {
namespace cuda {
namespace mlp {
namespace {

// The form with kSteps steps of k in registers: one wave of persistent blocks, as many a
// multiprocessor as the shared memory the call takes allows.
template <typename T, int kParts, int kSteps>
cudaError_t launch_streamed_sized(const MlpCall& call, const DeviceLimits& limits,
                                  const MlpKernelOf& compiled, cudaStream_t stream) {
  int widest_in = 0;
  for (int l = 0; l < call.layers; ++l) widest_in = std::max(widest_in, call.layer[l].in);
  const bool gated = has_gated_layer(call);
  const int64_t bytes = mlp_streamed_bytes(widest_in, widest_of(call), gated, kParts);
  if (bytes > limits.shared_bytes_per_block) return cudaErrorNotSupported;
  int stride = int(mlp_padded_row(widest_in));
  int chunk_elements = (gated ? 2 : 1) * kParts * mlp_streamed_chunk_rows(kParts) * stride;
  constexpr void (*library)(MlpCall, int64_t, int, int) =
      &streamed_mlp_kernel<T, kParts, kSteps, InterpretedChains>;
  const void* kernel = kernel_for(
      compiled, MlpShape{},
      [] {
        return std::string("streamed_mlp_kernel<") + device_type_name<T>() + ", " +
               std::to_string(kParts) + ", " + std::to_string(kSteps);
      },
      reinterpret_cast<const void*>(library));
  cudaError_t err = allow_shared_bytes(kernel, limits,
                                       mlp_streamed_bytes(16 * kSteps, 16 * kSteps, true, kParts));
  if (err != cudaSuccess) return err;
  int64_t tiles = ceil_div(call.rows, kStreamedRows);
  unsigned blocks = 0;
  err = persistent_blocks(kernel, limits, tiles, bytes, blocks);
  if (err != cudaSuccess) return err;
  MlpCall call_value = call;
  void* args[] = {&call_value, &tiles, &stride, &chunk_elements};
  return cudaLaunchKernel(kernel, dim3(blocks), dim3(kThreads), args, size_t(bytes), stream);
}

template <typename T, int kParts>
cudaError_t launch_streamed_for(const MlpCall& call, const DeviceLimits& limits,
                                const MlpKernelOf& compiled, cudaStream_t stream) {
  switch (mlp_register_steps(widest_of(call))) {
    case 4:
      return launch_streamed_sized<T, kParts, 4>(call, limits, compiled, stream);
    case 8:
      return launch_streamed_sized<T, kParts, 8>(call, limits, compiled, stream);
    default:
      return launch_streamed_sized<T, kParts, 16>(call, limits, compiled, stream);
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

cudaError_t launch_streamed(const MlpCall& call, const DeviceLimits& limits,
                            const MlpKernelOf& compiled, cudaStream_t stream) {
  return with_tensor_core_parts(call, limits, [&](auto type, auto parts) {
    using T = typename decltype(type)::type;
    constexpr int kParts = decltype(parts)::value;
    // A float32 model's W is copied as the parts the per-layer path holds.
    if (std::is_same_v<T, float> && !has_parts(call, kParts)) return cudaErrorNotSupported;
    return launch_streamed_for<T, kParts>(call, limits, compiled, stream);
  });
}

}  // namespace mlp
}  // namespace cuda
}  // namespace fusedlinear
