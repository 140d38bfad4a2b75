// The fused-MLP kernel's launcher (fused_mlp.h): checks what the kernel takes, picks its tile and
// launches it on the given stream: the library's instance, or the same instance compiled with the
// model's chains in (kernel_for). Compiled with -ftz=true, as the epilogue kernel is, so that the
// chains give the per-layer path's bits.
#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/mlp/cluster_mlp.cuh"
#include "kernels/cuda/mlp/fused_mlp.cuh"
#include "kernels/cuda/mlp/resident_mlp.cuh"
#include "kernels/cuda/mlp/streamed_mlp.cuh"

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
  // Split products are the resident form's; the cluster form forms float32's (ieee) instead.
  if (call.precision != Precision::kIeee && call.form == MlpForm::kTiles) {
    return cudaErrorNotSupported;
  }
  return cudaSuccess;
}

// The tiles sized for the model's widest layer: narrow models take less shared memory, so more
// blocks share a multiprocessor.
// `shape`: Shape as a unit names it.
template <typename T, class Shape>
cudaError_t launch_tiles(const MlpCall& call, const DeviceLimits& limits, const char* shape,
                         const MlpKernelOf& compiled, cudaStream_t stream) {
  const int width = mlp::widest_of(call);
  int stride = Shape::stride_for(width);
  const int bytes = mlp::shared_bytes_of<T, Shape>(width);
  if (bytes > limits.shared_bytes_per_block) return cudaErrorNotSupported;
  const int64_t blocks = ceil_div(call.rows, Shape::kRows);
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  constexpr void (*library)(MlpCall, int) =
      &mlp::fused_mlp_kernel<T, Shape, mlp::InterpretedChains>;
  const void* kernel = mlp::kernel_for(
      compiled, MlpShape{},
      [&] { return std::string("fused_mlp_kernel<") + mlp::device_type_name<T>() + ", " + shape; },
      reinterpret_cast<const void*>(library));
  const cudaError_t err =
      mlp::allow_shared_bytes(kernel, limits, mlp::shared_bytes_of<T, Shape>(kMaxMlpWidth));
  if (err != cudaSuccess) return err;
  MlpCall call_value = call;
  void* args[] = {&call_value, &stride};
  return cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(mlp::kThreads), args,
                          size_t(bytes), stream);
}

// A cluster of blocks a tile of Shape::kRows rows (cluster_mlp.cuh).
template <typename T, class Shape>
cudaError_t launch_clusters(const MlpCall& call, const DeviceLimits& limits,
                            const MlpKernelOf& compiled, cudaStream_t stream) {
  const int width = mlp::widest_of(call);
  const int64_t blocks = ceil_div(call.rows, Shape::kRows) * mlp::kClusterBlocks;
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  const bool gated = mlp::has_gated_layer(call);
  const int64_t bytes = Shape::shared_bytes_of(width, gated);
  if (bytes > limits.shared_bytes_per_block) return cudaErrorNotSupported;
  constexpr void (*library)(MlpCall, int, int) =
      &mlp::cluster_mlp_kernel<T, Shape, mlp::InterpretedChains>;
  const void* kernel = mlp::kernel_for(
      compiled, MlpShape{},
      [] {
        return std::string("cluster_mlp_kernel<") + mlp::device_type_name<T>() +
               ", fusedlinear::cuda::mlp::ClusterShape<" + mlp::device_type_name<T>() + ", " +
               std::to_string(Shape::kRows) + ">";
      },
      reinterpret_cast<const void*>(library));
  const cudaError_t err =
      mlp::allow_shared_bytes(kernel, limits, Shape::shared_bytes_of(kMaxMlpWidth, true));
  if (err != cudaSuccess) return err;
  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = mlp::kClusterBlocks;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(mlp::kThreads);
  config.dynamicSmemBytes = size_t(bytes);
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  MlpCall call_value = call;
  int stride = Shape::stride_for(width), stage_elements = Shape::stage_elements_for(width, gated);
  void* args[] = {&call_value, &stride, &stage_elements};
  return cudaLaunchKernelExC(&config, kernel, args);
}

// The cluster form's tile: one row for one row (no work on rows that are not there).
template <typename T>
cudaError_t launch_clusters_for(const MlpCall& call, const DeviceLimits& limits,
                                const MlpKernelOf& compiled, cudaStream_t stream) {
  if (limits.compute_major < 9) return cudaErrorNotSupported;  // clusters from sm_90
  if (call.rows == 1) {
    return launch_clusters<T, mlp::ClusterShape<T, 1>>(call, limits, compiled, stream);
  }
  return launch_clusters<T, mlp::ClusterShape<T, kMlpClusterTileRows>>(call, limits, compiled,
                                                                       stream);
}

// Every layer's W resident in each block's shared memory, one wave of blocks taking tiles in turn
// (resident_mlp.cuh), the rows of kSteps 16-wide steps in registers. A model's own instance is
// compiled for its shape as well as its chains. The kernel may take the most any model within the
// form's width takes, or what a block may have where that is less; a model needing more is not run.
template <typename T, int kParts, int kSteps>
cudaError_t launch_resident(const MlpCall& call, const DeviceLimits& limits,
                            const MlpKernelOf& compiled, cudaStream_t stream) {
  int64_t bytes = 0;
  for (int l = 0; l < call.layers; ++l) {
    const MlpLayer& layer = call.layer[l];
    bytes += mlp_resident_layer_bytes(layer.in, layer.out, layer.gate_w != nullptr, kParts);
  }
  if (bytes > limits.shared_bytes_per_block) return cudaErrorNotSupported;
  constexpr void (*library)(MlpCall, int64_t) =
      &mlp::resident_mlp_kernel<T, kParts, kSteps, mlp::RuntimeShape, mlp::InterpretedChains>;
  const MlpShape shape = shape_of(call);
  const void* kernel = mlp::kernel_for(
      compiled, shape,
      [&] {
        return std::string("resident_mlp_kernel<") + mlp::device_type_name<T>() + ", " +
               std::to_string(kParts) + ", " + std::to_string(kSteps) + ", " + shape.type_name();
      },
      reinterpret_cast<const void*>(library));
  cudaError_t err = mlp::allow_shared_bytes(
      kernel, limits,
      kMaxMlpLayers * mlp_resident_layer_bytes(16 * kSteps, 16 * kSteps, true, kParts));
  if (err != cudaSuccess) return err;
  int64_t tiles = ceil_div(call.rows, mlp_resident_block_rows(kParts, kSteps));
  unsigned blocks = 0;
  err = mlp::persistent_blocks(kernel, limits, tiles, bytes, blocks);
  if (err != cudaSuccess) return err;
  MlpCall call_value = call;
  void* args[] = {&call_value, &tiles};
  return cudaLaunchKernel(kernel, dim3(blocks), dim3(mlp::kThreads), args, size_t(bytes), stream);
}

// The registers for the model's widest layer: 64 wide, or 128 (one part only).
template <typename T, int kParts>
cudaError_t launch_resident_sized(const MlpCall& call, const DeviceLimits& limits,
                                  const MlpKernelOf& compiled, cudaStream_t stream) {
  const int width = mlp::widest_of(call);
  if (width > mlp_resident_max_width(kParts)) return cudaErrorNotSupported;
  if (width <= 64) return launch_resident<T, kParts, 4>(call, limits, compiled, stream);
  if constexpr (kParts == 1) return launch_resident<T, kParts, 8>(call, limits, compiled, stream);
  return cudaErrorNotSupported;
}

// The resident form for the call's type and mode (with_tensor_core_parts).
cudaError_t launch_resident_for(const MlpCall& call, const DeviceLimits& limits,
                                const MlpKernelOf& compiled, cudaStream_t stream) {
  return mlp::with_tensor_core_parts(call, limits, [&](auto type, auto parts) {
    return launch_resident_sized<typename decltype(type)::type, decltype(parts)::value>(
        call, limits, compiled, stream);
  });
}

}  // namespace

cudaError_t launch_fused_mlp(const MlpCall& call, cudaStream_t stream,
                             const MlpKernelOf& compiled) {
  cudaError_t err = check_call(call);
  if (err != cudaSuccess || call.rows == 0) return err;
  DeviceLimits limits;
  err = current_device_limits(limits);
  if (err != cudaSuccess) return err;
  if (call.type != ElementType::kFloat32 && limits.compute_major < 8) {
    return cudaErrorNotSupported;  // mma.sync from sm_80
  }
  switch (call.form) {
    case MlpForm::kClusters:
      if (call.type == ElementType::kFloat16) {
        return launch_clusters_for<__half>(call, limits, compiled, stream);
      }
      if (call.type == ElementType::kBFloat16) {
        return launch_clusters_for<__nv_bfloat16>(call, limits, compiled, stream);
      }
      return launch_clusters_for<float>(call, limits, compiled, stream);
    case MlpForm::kResident:
      return launch_resident_for(call, limits, compiled, stream);
    case MlpForm::kStreamed:
      return mlp::launch_streamed(call, limits, compiled, stream);
    case MlpForm::kTiles:
      break;
  }
  switch (call.type) {
    case ElementType::kFloat32:
      // Up to a row a multiprocessor, a block a row (each SM reading W from L2 for its row);
      // past that, tiles of 8 rows, which read each W once for 8 rows.
      if (call.rows <= limits.multiprocessors) {
        return launch_tiles<float, mlp::FloatShape<1>>(
            call, limits, "fusedlinear::cuda::mlp::FloatShape<1>", compiled, stream);
      }
      return launch_tiles<float, mlp::FloatShape<8>>(
          call, limits, "fusedlinear::cuda::mlp::FloatShape<8>", compiled, stream);
    case ElementType::kFloat16:
      return launch_tiles<__half, mlp::MmaShape>(call, limits, "fusedlinear::cuda::mlp::MmaShape",
                                                 compiled, stream);
    case ElementType::kBFloat16:
      return launch_tiles<__nv_bfloat16, mlp::MmaShape>(
          call, limits, "fusedlinear::cuda::mlp::MmaShape", compiled, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace cuda
}  // namespace fusedlinear
