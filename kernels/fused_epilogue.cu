// The fused epilogue launcher (fused_epilogue_cuda.h) for the two models' chains, in float32,
// float16 and bfloat16. The kernel itself is in fused_epilogue.cuh.
#include "fused_epilogue.cuh"
#include "fused_epilogue_cuda.h"

namespace fusedlinear {

cudaError_t launch_fused_epilogue(EpilogueKind kind, ElementType type, const void* y,
                                  const void* bias, const void* shift, void* out, int64_t rows,
                                  int64_t cols, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  const auto launch = [&](auto element) {
    using T = decltype(element);
    dispatch_epilogue<kResultPrecisionOf<T>>(kind, [&](auto activations) {
      using Activations = decltype(activations);
      err =
          cuda::launch_fused_epilogue_typed<T, cuda::ProductionShape<T, Activations>, Activations>(
              static_cast<const T*>(y), static_cast<const T*>(bias), static_cast<const T*>(shift),
              static_cast<T*>(out), rows, cols, stream);
    });
  };
  switch (type) {
    case ElementType::kFloat32:
      launch(float{});
      break;
    case ElementType::kFloat16:
      launch(__half{});
      break;
    case ElementType::kBFloat16:
      launch(__nv_bfloat16{});
      break;
  }
  return err;
}

}  // namespace fusedlinear
