// The fused epilogue launcher (fused_epilogue_cuda.h) for the two models' chains, in float32,
// float16 and bfloat16. The kernel itself is in fused_epilogue.cuh.
#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/epilogue_launch.h"

namespace fusedlinear {

cudaError_t launch_fused_epilogue(EpilogueKind kind, ElementType type, const void* y,
                                  const void* bias, const void* shift, void* out, int64_t rows,
                                  int64_t cols, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  dispatch_element(type, [&](auto element) {
    using T = cuda::DeviceElement<decltype(element)::value>;
    dispatch_epilogue<kResultPrecisionOf<T>>(kind, [&](auto activations) {
      using Activations = decltype(activations);
      err =
          cuda::launch_fused_epilogue_typed<T, cuda::ProductionShape<T, Activations>, Activations>(
              static_cast<const T*>(y), static_cast<const T*>(bias), static_cast<const T*>(shift),
              static_cast<T*>(out), rows, cols, stream);
    });
  });
  return err;
}

}  // namespace fusedlinear
