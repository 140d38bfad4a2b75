// Declares the fused ops (one schema each) and registers their CPU implementations.
#include "ops.h"

#include <torch/library.h>

namespace fusedlinear {
namespace detail {
namespace {

std::string describe(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.scalar_type() << " " << t.sizes() << " on " << t.device();
  return s.str();
}

void check_column_vector(const char* op, const char* name, const torch::Tensor& v,
                         const torch::Tensor& y) {
  const int64_t features = y.size(-1);
  TORCH_CHECK(v.dim() == 1 && v.size(0) == features, op, ": expected ", name, " of shape [",
              features, "] (the last dimension of y, ", y.sizes(), "), got ", v.sizes());
  TORCH_CHECK(v.scalar_type() == y.scalar_type(), op, ": expected ", name, " of dtype ",
              y.scalar_type(), " (the dtype of y), got ", v.scalar_type());
  TORCH_CHECK(v.device() == y.device(), op, ": expected ", name, " on ", y.device(),
              " (the device of y), got ", v.device());
}

}  // namespace

void check_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& y,
                           const c10::optional<torch::Tensor>& bias,
                           const c10::optional<torch::Tensor>& shift) {
  TORCH_CHECK(y.defined(), op, ": expected a tensor y, got an undefined tensor");
  TORCH_CHECK(y.device().type() == device, op, ": expected y on ", c10::DeviceTypeName(device),
              ", got ", describe(y));
  const auto dtype = y.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kFloat16 || dtype == torch::kBFloat16, op,
              ": expected y of dtype float32, float16 or bfloat16, got ", describe(y));
  TORCH_CHECK(y.dim() >= 1, op, ": expected y with at least one dimension [..., features], got ",
              describe(y));
  if (bias && bias->defined()) check_column_vector(op, "bias", *bias, y);
  if (shift && shift->defined()) check_column_vector(op, "add_value", *shift, y);
}

}  // namespace detail

namespace {

torch::Tensor swish_chain_cpu(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                              const torch::Tensor& add_value) {
  detail::check_epilogue_inputs("fusedlinear::swish_chain", c10::DeviceType::CPU, y, bias,
                                add_value);
  return detail::fused_epilogue_cpu(EpilogueKind::kSwishChain, y, bias, add_value);
}

torch::Tensor mish_mish_cpu(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias) {
  detail::check_epilogue_inputs("fusedlinear::mish_mish", c10::DeviceType::CPU, y, bias,
                                c10::nullopt);
  return detail::fused_epilogue_cpu(EpilogueKind::kMishMish, y, bias, c10::nullopt);
}

}  // namespace

TORCH_LIBRARY(fusedlinear, m) {
  m.def("swish_chain(Tensor y, Tensor? bias, Tensor add_value) -> Tensor");
  m.def("mish_mish(Tensor y, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(fusedlinear, CPU, m) {
  m.impl("swish_chain", &swish_chain_cpu);
  m.impl("mish_mish", &mish_mish_cpu);
}

torch::Tensor fused_swish_chain(const torch::Tensor& y, const torch::Tensor& add_value,
                                const c10::optional<torch::Tensor>& bias) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("fusedlinear::swish_chain", "")
          .typed<torch::Tensor(const torch::Tensor&, const c10::optional<torch::Tensor>&,
                               const torch::Tensor&)>();
  return op.call(y, bias, add_value);
}

torch::Tensor fused_mish_mish(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("fusedlinear::mish_mish", "")
          .typed<torch::Tensor(const torch::Tensor&, const c10::optional<torch::Tensor>&)>();
  return op.call(y, bias);
}

}  // namespace fusedlinear
