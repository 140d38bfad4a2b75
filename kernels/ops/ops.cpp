// Declares the ops (one schema each), registers their CPU implementations, and refuses calls
// that would need a backward (the ops are inference-only).
#include "kernels/ops/ops.h"

#include <ATen/Dispatch.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <sstream>
#include <string>

namespace fusedlinear {
namespace detail {
namespace {

std::string describe(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.scalar_type() << " " << t.sizes() << " on " << t.device();
  return s.str();
}

// A per-column term: [features] (`whose` and `whose_shape` say where that count comes from), of
// `like`'s dtype and device. Messages are built only on failure: this runs on every call.
void check_column_vector(const char* op, const char* name, const torch::Tensor& v, int64_t features,
                         const char* whose, c10::IntArrayRef whose_shape, const torch::Tensor& like,
                         const char* like_name) {
  TORCH_CHECK(v.dim() == 1 && v.size(0) == features, op, ": expected ", name, " of shape [",
              features, "] (", whose, whose_shape, "), got ", v.sizes());
  TORCH_CHECK(v.scalar_type() == like.scalar_type(), op, ": expected ", name, " of dtype ",
              like.scalar_type(), " (the dtype of ", like_name, "), got ", v.scalar_type());
  TORCH_CHECK(v.device() == like.device(), op, ": expected ", name, " on ", like.device(),
              " (the device of ", like_name, "), got ", v.device());
}

void check_column_vector(const char* op, const char* name, const torch::Tensor& v,
                         const torch::Tensor& y) {
  check_column_vector(op, name, v, y.size(-1), "the last dimension of y, ", y.sizes(), y, "y");
}

bool is_float_type(torch::ScalarType dtype) {
  return dtype == torch::kFloat32 || dtype == torch::kFloat16 || dtype == torch::kBFloat16;
}

}  // namespace

void check_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& y,
                           const c10::optional<torch::Tensor>& bias,
                           const c10::optional<torch::Tensor>& shift) {
  TORCH_CHECK(y.defined(), op, ": expected a tensor y, got an undefined tensor");
  TORCH_CHECK(y.device().type() == device, op, ": expected y on ", c10::DeviceTypeName(device),
              ", got ", describe(y));
  TORCH_CHECK(is_float_type(y.scalar_type()), op,
              ": expected y of dtype float32, float16 or bfloat16, got ", describe(y));
  TORCH_CHECK(y.dim() >= 1, op, ": expected y with at least one dimension [..., features], got ",
              describe(y));
  if (bias && bias->defined()) check_column_vector(op, "bias", *bias, y);
  if (shift && shift->defined()) check_column_vector(op, "add_value", *shift, y);
}

void check_linear_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                         const torch::Tensor& w, torch::ScalarType w_dtype,
                         const torch::Tensor* w_lo) {
  TORCH_CHECK(x.defined() && w.defined(), op, ": expected tensors, got an undefined tensor");
  TORCH_CHECK(x.device().type() == device, op, ": expected x on ", c10::DeviceTypeName(device),
              ", got ", describe(x));
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.dim() >= 1, op,
              ": expected x of dtype float32 with shape [..., in_features], got ", describe(x));
  TORCH_CHECK(w.dim() == 2 && w.size(1) == x.size(-1), op, ": expected a weight of shape [",
              "out_features, ", x.size(-1), "] (in_features from x, ", x.sizes(), "), got ",
              w.sizes());
  TORCH_CHECK(w.scalar_type() == w_dtype, op, ": expected a weight of dtype ", w_dtype, ", got ",
              w.scalar_type());
  TORCH_CHECK(w.device() == x.device(), op, ": expected the weight on ", x.device(),
              " (the device of x), got ", w.device());
  if (w_lo) {
    TORCH_CHECK(w_lo->defined() && w_lo->sizes() == w.sizes() &&
                    w_lo->scalar_type() == w.scalar_type() && w_lo->device() == w.device(),
                op, ": expected w_lo like w_hi (", describe(w), "), got ",
                w_lo->defined() ? describe(*w_lo) : std::string("an undefined tensor"));
  }
}

void check_fused_linear_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                               const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
                               const c10::optional<torch::Tensor>& bias,
                               const c10::optional<torch::Tensor>& shift) {
  TORCH_CHECK(x.defined() && w.defined(), op, ": expected tensors, got an undefined tensor");
  TORCH_CHECK(x.device().type() == device, op, ": expected x on ", c10::DeviceTypeName(device),
              ", got ", describe(x));
  TORCH_CHECK(is_float_type(x.scalar_type()) && x.dim() >= 1, op,
              ": expected x of dtype float32, float16 or bfloat16 with shape [..., in_features], "
              "got ",
              describe(x));
  TORCH_CHECK(w.dim() == 2 && w.size(1) == x.size(-1), op, ": expected a weight of shape [",
              "out_features, ", x.size(-1), "] (in_features from x, ", x.sizes(), "), got ",
              w.sizes());
  const bool parts = x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kBFloat16;
  TORCH_CHECK(w.scalar_type() == x.scalar_type() || parts, op, ": expected a weight of dtype ",
              x.scalar_type(), " (the dtype of x)",
              x.scalar_type() == torch::kFloat32 ? " or bfloat16 parts" : "", ", got ",
              w.scalar_type());
  TORCH_CHECK(w.device() == x.device(), op, ": expected the weight on ", x.device(),
              " (the device of x), got ", w.device());
  if (w_lo && w_lo->defined()) {
    TORCH_CHECK(parts, op, ": w_lo is the lo part of a float32 model's weight: expected float32 x ",
                "and a bfloat16 w, got ", x.scalar_type(), " x and ", w.scalar_type(), " w");
    TORCH_CHECK(w_lo->sizes() == w.sizes() && w_lo->scalar_type() == w.scalar_type() &&
                    w_lo->device() == w.device(),
                op, ": expected w_lo like w (", describe(w), "), got ", describe(*w_lo));
  }
  const char* whose = "out_features, from the weight ";
  if (bias && bias->defined()) {
    check_column_vector(op, "bias", *bias, w.size(0), whose, w.sizes(), x, "x");
  }
  if (shift && shift->defined()) {
    check_column_vector(op, "add_value", *shift, w.size(0), whose, w.sizes(), x, "x");
  }
}

std::vector<int64_t> linear_output_shape(const torch::Tensor& x, int64_t out_features) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out_features;
  return shape;
}

ElementType element_type_of(const torch::Tensor& t) {
  ElementType type = ElementType::kFloat32;
  AT_DISPATCH_SWITCH(
      t.scalar_type(), "fusedlinear::element_type_of",
      AT_DISPATCH_CASE(at::kFloat, [&] { type = ElementType::kFloat32; })
          AT_DISPATCH_CASE(at::kHalf, [&] { type = ElementType::kFloat16; })
              AT_DISPATCH_CASE(at::kBFloat16, [&] { type = ElementType::kBFloat16; }));
  return type;
}

torch::Tensor linear_rows(const torch::Tensor& x) {
  const auto sizes = x.sizes();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) rows *= sizes[d];
  return x.reshape({rows, sizes.back()}).contiguous();
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

// The CPU twin of the skinny CUDA kernels: x W^T in float32 (for W's bfloat16 parts, the
// products the precision mode defines: linear_bf16 or linear_bf16x3), then the fused epilogue in
// float32, rounded once to x's dtype.
torch::Tensor fused_linear_cpu(const char* op, EpilogueKind kind, const torch::Tensor& x,
                               const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
                               const c10::optional<torch::Tensor>& bias,
                               const c10::optional<torch::Tensor>& shift) {
  detail::check_fused_linear_inputs(op, c10::DeviceType::CPU, x, w, w_lo, bias, shift);
  const torch::Tensor x_rows = detail::linear_rows(x);
  torch::Tensor y;
  if (w.scalar_type() == x.scalar_type()) {
    y = torch::mm(x_rows.to(torch::kFloat32), w.to(torch::kFloat32).t());
  } else if (w_lo && w_lo->defined()) {
    y = detail::linear_bf16x3_cpu(x_rows, w, *w_lo);
  } else {
    y = detail::linear_bf16_cpu(x_rows, w);
  }
  const auto as_float = [](const c10::optional<torch::Tensor>& t) -> c10::optional<torch::Tensor> {
    if (!t || !t->defined()) return c10::nullopt;
    return t->to(torch::kFloat32);
  };
  const torch::Tensor out = detail::fused_epilogue_cpu(kind, y, as_float(bias), as_float(shift));
  return out.to(x.scalar_type()).view(detail::linear_output_shape(x, w.size(0)));
}

torch::Tensor linear_swish_chain_cpu(const torch::Tensor& x, const torch::Tensor& w,
                                     const c10::optional<torch::Tensor>& w_lo,
                                     const c10::optional<torch::Tensor>& bias,
                                     const torch::Tensor& add_value) {
  return fused_linear_cpu("fusedlinear::linear_swish_chain", EpilogueKind::kSwishChain, x, w, w_lo,
                          bias, add_value);
}

torch::Tensor linear_mish_mish_cpu(const torch::Tensor& x, const torch::Tensor& w,
                                   const c10::optional<torch::Tensor>& w_lo,
                                   const c10::optional<torch::Tensor>& bias) {
  return fused_linear_cpu("fusedlinear::linear_mish_mish", EpilogueKind::kMishMish, x, w, w_lo,
                          bias, c10::nullopt);
}

// The ops compute values only, with no backward. Registered for the Autograd key, this refuses a
// call in grad mode on a tensor that requires grad (which could not be differentiated), and
// passes every other call on to the CPU or CUDA implementation.
void inference_only(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (at::GradMode::is_enabled()) {
    for (const c10::IValue& value : torch::jit::last(*stack, op.schema().arguments().size())) {
      TORCH_CHECK(!value.isTensor() || !value.toTensor().requires_grad(), op.schema().name(),
                  " is inference-only (it has no backward) and was called on a tensor that "
                  "requires grad: call it under torch.no_grad() (torch::NoGradGuard in C++) or "
                  "on tensors that do not require grad");
    }
  }
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  op.callBoxed(stack);
}

}  // namespace

TORCH_LIBRARY(fusedlinear, m) {
  m.def("swish_chain(Tensor y, Tensor? bias, Tensor add_value) -> Tensor");
  m.def("mish_mish(Tensor y, Tensor? bias) -> Tensor");
  m.def("split_bf16(Tensor v) -> (Tensor, Tensor)");
  m.def("linear_bf16x3(Tensor x, Tensor w_hi, Tensor w_lo) -> Tensor");
  m.def("linear_bf16(Tensor x, Tensor w_hi) -> Tensor");
  m.def("linear_tf32(Tensor x, Tensor w) -> Tensor");
  m.def(
      "linear_swish_chain(Tensor x, Tensor w, Tensor? w_lo, Tensor? bias, Tensor add_value) -> "
      "Tensor");
  m.def("linear_mish_mish(Tensor x, Tensor w, Tensor? w_lo, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(fusedlinear, Autograd, m) {
  for (const char* op : {"swish_chain", "mish_mish", "split_bf16", "linear_bf16x3", "linear_bf16",
                         "linear_tf32", "linear_swish_chain", "linear_mish_mish"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&inference_only>());
  }
}

TORCH_LIBRARY_IMPL(fusedlinear, CPU, m) {
  m.impl("swish_chain", &swish_chain_cpu);
  m.impl("mish_mish", &mish_mish_cpu);
  m.impl("split_bf16", &detail::split_bf16_cpu);
  m.impl("linear_bf16x3", &detail::linear_bf16x3_cpu);
  m.impl("linear_bf16", &detail::linear_bf16_cpu);
  m.impl("linear_tf32", &detail::linear_tf32_cpu);
  m.impl("linear_swish_chain", &linear_swish_chain_cpu);
  m.impl("linear_mish_mish", &linear_mish_mish_cpu);
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

std::tuple<torch::Tensor, torch::Tensor> split_bf16(const torch::Tensor& v) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fusedlinear::split_bf16", "")
                       .typed<std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor&)>();
  return op.call(v);
}

torch::Tensor linear_bf16x3(const torch::Tensor& x, const torch::Tensor& w_hi,
                            const torch::Tensor& w_lo) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("fusedlinear::linear_bf16x3", "")
          .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>();
  return op.call(x, w_hi, w_lo);
}

torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w_hi) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fusedlinear::linear_bf16", "")
                       .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>();
  return op.call(x, w_hi);
}

torch::Tensor linear_tf32(const torch::Tensor& x, const torch::Tensor& w) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fusedlinear::linear_tf32", "")
                       .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>();
  return op.call(x, w);
}

torch::Tensor fused_linear_swish_chain(const torch::Tensor& x, const torch::Tensor& w,
                                       const c10::optional<torch::Tensor>& w_lo,
                                       const c10::optional<torch::Tensor>& bias,
                                       const torch::Tensor& add_value) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("fusedlinear::linear_swish_chain", "")
          .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                               const c10::optional<torch::Tensor>&,
                               const c10::optional<torch::Tensor>&, const torch::Tensor&)>();
  return op.call(x, w, w_lo, bias, add_value);
}

torch::Tensor fused_linear_mish_mish(const torch::Tensor& x, const torch::Tensor& w,
                                     const c10::optional<torch::Tensor>& w_lo,
                                     const c10::optional<torch::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fusedlinear::linear_mish_mish", "")
                       .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                            const c10::optional<torch::Tensor>&,
                                            const c10::optional<torch::Tensor>&)>();
  return op.call(x, w, w_lo, bias);
}

}  // namespace fusedlinear
