// Registers the CUDA implementations of the fused ops: checks inputs, allocates the output and
// calls the torch-free launcher (fused_epilogue.cu) on the current CUDA stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "fused_epilogue_cuda.h"
#include "ops.h"

namespace fusedlinear {
namespace {

ElementType element_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return ElementType::kFloat32;
    case torch::kFloat16:
      return ElementType::kFloat16;
    case torch::kBFloat16:
      return ElementType::kBFloat16;
    default:
      TORCH_CHECK(false, "fusedlinear: unsupported dtype ", dtype);
  }
}

const void* data_or_null(const c10::optional<torch::Tensor>& t, torch::Tensor& keep_alive) {
  if (!t || !t->defined()) return nullptr;
  keep_alive = t->contiguous();
  return keep_alive.data_ptr();
}

torch::Tensor fused_epilogue_cuda(EpilogueKind kind, const torch::Tensor& y,
                                  const c10::optional<torch::Tensor>& bias,
                                  const c10::optional<torch::Tensor>& shift) {
  const c10::cuda::CUDAGuard device_guard(y.device());
  const torch::Tensor input = y.contiguous();
  torch::Tensor out = torch::empty_like(input, at::MemoryFormat::Contiguous);
  if (input.numel() == 0) return out;
  torch::Tensor bias_c, shift_c;
  const int64_t cols = input.size(-1);
  const cudaError_t err = launch_fused_epilogue(
      kind, element_type(input.scalar_type()), input.data_ptr(), data_or_null(bias, bias_c),
      data_or_null(shift, shift_c), out.data_ptr(), input.numel() / cols, cols,
      at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "fusedlinear::", epilogue_name(kind),
              ": CUDA kernel launch failed: ", cudaGetErrorString(err));
  return out;
}

torch::Tensor swish_chain_cuda(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                               const torch::Tensor& add_value) {
  detail::check_epilogue_inputs("fusedlinear::swish_chain", c10::DeviceType::CUDA, y, bias,
                                add_value);
  return fused_epilogue_cuda(EpilogueKind::kSwishChain, y, bias, add_value);
}

torch::Tensor mish_mish_cuda(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias) {
  detail::check_epilogue_inputs("fusedlinear::mish_mish", c10::DeviceType::CUDA, y, bias,
                                c10::nullopt);
  return fused_epilogue_cuda(EpilogueKind::kMishMish, y, bias, c10::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedlinear, CUDA, m) {
  m.impl("swish_chain", &swish_chain_cuda);
  m.impl("mish_mish", &mish_mish_cuda);
}

}  // namespace fusedlinear
