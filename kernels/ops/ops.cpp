// Declares the ops (one schema each) and registers their CPU and Meta implementations and their
// Autograd kernel (ops.h: inference ops); the CUDA ones are in ops_cuda.cpp.
#include "kernels/ops/ops.h"

#include <ATen/Dispatch.h>
#include <ATen/core/LegacyTypeDispatch.h>  // AutoDispatchBelowADInplaceOrView
#include <torch/library.h>

#include <algorithm>
#include <string>

#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/small_batch.h"
#include "kernels/ops/chain_registry.h"
#include "kernels/ops/op_support.h"

namespace fusedlinear {
using detail::kEpilogueOp;
using detail::kGemmEpilogueOp;
using detail::kLinearEpilogueOp;

namespace detail {
namespace {

std::string describe(const torch::Tensor& t) {
  return text(t.scalar_type(), " ", t.sym_sizes(), " on ", t.device());
}

// "op: expected a tensor y, got an undefined tensor", or where t has no implementation.
std::string no_implementation(const char* op, const char* name, const torch::Tensor& t) {
  return t.defined() ? text(op, ": no implementation for ", name, " of ", describe(t),
                            " (CPU, CUDA and meta tensors)")
                     : text(op, ": expected a tensor ", name, ", got an undefined tensor");
}

bool is_float_type(torch::ScalarType dtype) {
  return dtype == torch::kFloat32 || dtype == torch::kFloat16 || dtype == torch::kBFloat16;
}

// Where a column count comes from, for messages: a description and the shape it is read from.
// The checks read sizes as SymInts (sym_size), which the Meta kernels' fake tensors may hold
// symbolic under torch.compile; on real tensors they are plain integers.
struct CountSource {
  const char* what;
  c10::SymIntArrayRef shape;
};

// A per-column input: [features] (`whose` says where that count comes from), of `like`'s dtype
// and device; a parameter may also hold one value for every column ([] or [1]). Messages are
// built only on failure: this runs on every call.
void check_column_input(const char* op, const std::string& name, const torch::Tensor& v,
                        const c10::SymInt& features, CountSource whose, const torch::Tensor& like,
                        const char* like_name, bool one_value_allowed) {
  TORCH_CHECK(v.defined(), text(op, ": expected ", name, " to be a tensor, got an undefined one"));
  const bool per_feature = v.dim() == 1 && v.sym_size(0) == features;
  const bool one_value = one_value_allowed && v.dim() <= 1 && v.sym_numel() == 1;
  TORCH_CHECK(
      per_feature || one_value,
      text(op, ": expected ", name, " of shape [", features, "] (", whose.what, " ", whose.shape,
           ")", one_value_allowed ? " or of one element" : "", ", got ", v.sym_sizes()));
  TORCH_CHECK(v.scalar_type() == like.scalar_type(),
              text(op, ": expected ", name, " of dtype ", like.scalar_type(), " (the dtype of ",
                   like_name, "), got ", v.scalar_type()));
  TORCH_CHECK(v.device() == like.device(),
              text(op, ": expected ", name, " on ", like.device(), " (the device of ", like_name,
                   "), got ", v.device()));
}

// The chain's parameters: as many as it takes, each a column input.
void check_params(const char* op, c10::ArrayRef<torch::Tensor> params, size_t chain_params,
                  const c10::SymInt& features, CountSource whose, const torch::Tensor& like,
                  const char* like_name) {
  TORCH_CHECK(params.size() == chain_params, text(op, ": the chain takes ", chain_params,
                                                  " parameter tensor(s), got ", params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    check_column_input(op, "params[" + std::to_string(i) + "]", params[i], features, whose, like,
                       like_name, true);
  }
}

// W [out_features, in_features] for x [..., in_features], on x's device.
void check_weight(const char* op, const torch::Tensor& x, const torch::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.sym_size(1) == x.sym_size(-1),
              text(op, ": expected a weight of shape [out_features, ", x.sym_size(-1),
                   "] (in_features from x, ", x.sym_sizes(), "), got ", w.sym_sizes()));
  TORCH_CHECK(w.device() == x.device(), text(op, ": expected the weight on ", x.device(),
                                             " (the device of x), got ", w.device()));
}

// A tensor (`name`: a part of W past the first, an epilogue's gate) of another's (`first`, named
// `first_name`) shape, dtype and device.
void check_like(const char* op, const torch::Tensor& part, const char* name,
                const torch::Tensor& first, const char* first_name) {
  TORCH_CHECK(part.defined() && part.sym_sizes() == first.sym_sizes() &&
                  part.scalar_type() == first.scalar_type() && part.device() == first.device(),
              text(op, ": expected ", name, " like ", first_name, " (", describe(first), "), got ",
                   part.defined() ? describe(part) : std::string("an undefined tensor")));
}

}  // namespace

void check_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& y,
                           const c10::optional<torch::Tensor>& bias,
                           c10::ArrayRef<torch::Tensor> params, size_t chain_params,
                           const c10::optional<torch::Tensor>& gate) {
  TORCH_CHECK(y.defined(), text(op, ": expected a tensor y, got an undefined tensor"));
  TORCH_CHECK(y.device().type() == device,
              text(op, ": expected y on ", c10::DeviceTypeName(device), ", got ", describe(y)));
  TORCH_CHECK(is_float_type(y.scalar_type()),
              text(op, ": expected y of dtype float32, float16 or bfloat16, got ", describe(y)));
  TORCH_CHECK(
      y.dim() >= 1,
      text(op, ": expected y with at least one dimension [..., features], got ", describe(y)));
  const CountSource whose{"the last dimension of y,", y.sym_sizes()};
  if (bias && bias->defined())
    check_column_input(op, "bias", *bias, y.sym_size(-1), whose, y, "y", false);
  check_params(op, params, chain_params, y.sym_size(-1), whose, y, "y");
  if (gate && gate->defined()) check_like(op, *gate, "gate", y, "y");
}

ColumnInputs column_inputs(const c10::optional<torch::Tensor>& bias,
                           c10::ArrayRef<torch::Tensor> params) {
  ColumnInputs in;
  if (bias && bias->defined()) {
    in.bias = bias->contiguous();
    in.bias_data = in.bias.data_ptr();
  }
  for (size_t j = 0; j < params.size(); ++j) {
    in.params.push_back(params[j].contiguous());
    in.terms.data[j] = in.params.back().data_ptr();
    if (in.params.back().numel() == 1) in.terms.broadcast |= 1u << j;
  }
  in.terms.count = int(params.size());
  return in;
}

EpilogueInputs prepare_epilogue(const char* op, c10::DeviceType device, const torch::Tensor& y,
                                const c10::optional<torch::Tensor>& bias,
                                c10::ArrayRef<torch::Tensor> params, size_t chain_params,
                                const c10::optional<torch::Tensor>& gate, bool write_over_y) {
  check_epilogue_inputs(op, device, y, bias, params, chain_params, gate);
  EpilogueInputs in;
  in.y = y.contiguous();
  if (gate && gate->defined()) {
    in.gate = gate->contiguous();
    in.call.gate = in.gate.data_ptr();
  }
  in.out = write_over_y ? in.y : torch::empty_like(in.y, at::MemoryFormat::Contiguous);
  in.columns = column_inputs(bias, params);
  in.call.type = element_type_of(in.y);
  in.call.y = in.y.data_ptr();
  in.call.bias = in.columns.bias_data;
  in.call.terms = in.columns.terms;
  in.call.out = in.out.data_ptr();
  in.call.cols = in.y.size(-1);
  in.call.rows = in.call.cols > 0 ? in.y.numel() / in.call.cols : 0;
  return in;
}

Precision epilogue_precision_of(const char* op, c10::string_view precision) {
  // bf16x6 on the Hopper GEMM only: the small-batch kernels form no six products.
  const bool takes_bf16x6 = std::string(op) == kGemmEpilogueOp;
  const std::string asked(precision);
  const std::optional<Precision> parsed = parse_precision(asked);
  TORCH_CHECK(
      parsed && *parsed != Precision::kTf32 && (takes_bf16x6 || *parsed != Precision::kBf16x6),
      text(op, ": expected precision ",
           takes_bf16x6 ? "ieee, bf16, bf16x3 or bf16x6" : "ieee, bf16 or bf16x3", ", got '", asked,
           "'"));
  return *parsed;
}

void check_linear_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                                  const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
                                  const c10::optional<torch::Tensor>& bias,
                                  c10::ArrayRef<torch::Tensor> params, size_t chain_params,
                                  Precision precision,
                                  const c10::optional<torch::Tensor>& w_third) {
  TORCH_CHECK(x.defined() && w.defined(),
              text(op, ": expected tensors x and w, got an undefined tensor"));
  TORCH_CHECK(x.device().type() == device,
              text(op, ": expected x on ", c10::DeviceTypeName(device), ", got ", describe(x)));
  TORCH_CHECK(
      is_float_type(x.scalar_type()) && x.dim() >= 1,
      text(op,
           ": expected x of dtype float32, float16 or bfloat16 with shape [..., in_features], "
           "got ",
           describe(x)));
  const char* const mode = precision_name(precision);
  check_weight(op, x, w);
  // W's parts past the first: bf16x3's lo (w_lo); bf16x6's mid (w_lo) and lo (w_third).
  const int parts = std::max(split_parts_of(precision), 1);
  const auto check_part = [&](const c10::optional<torch::Tensor>& part, const char* name,
                              int index) {
    const bool given = part && part->defined();
    if (index >= parts) {
      TORCH_CHECK(!given,
                  text(op, ": precision ", mode, " takes no ", name, " (",
                       index == 1 ? "bf16x3's lo or bf16x6's mid" : "bf16x6's lo", " part of W)"));
      return;
    }
    TORCH_CHECK(given, text(op, ": precision ", mode, " needs ", name, ", W's bfloat16 ",
                            parts == 3 && index == 1 ? "mid" : "lo", " part"));
    check_like(op, *part, name, w, "w");
  };
  if (precision == Precision::kIeee) {
    TORCH_CHECK(w.scalar_type() == x.scalar_type(),
                text(op, ": precision ieee: expected a weight of ", x.scalar_type(),
                     " (the dtype of x), got ", w.scalar_type()));
  } else {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kBFloat16,
                text(op, ": precision ", mode, ": expected float32 x and W's bfloat16 parts (",
                     parts == 3 ? "split_bf16_three" : "split_bf16", "), got ", x.scalar_type(),
                     " x and a ", w.scalar_type(), " weight"));
  }
  check_part(w_lo, "w_lo", 1);
  check_part(w_third, "w_third", 2);
  const CountSource whose{"out_features, from the weight", w.sym_sizes()};
  if (bias && bias->defined())
    check_column_input(op, "bias", *bias, w.sym_size(0), whose, x, "x", false);
  check_params(op, params, chain_params, w.sym_size(0), whose, x, "x");
}

void check_linear_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                         const torch::Tensor& w, torch::ScalarType w_dtype,
                         const torch::Tensor* w_lo, const torch::Tensor* w_third) {
  TORCH_CHECK(x.defined() && w.defined(), text(op, ": expected tensors, got an undefined tensor"));
  TORCH_CHECK(x.device().type() == device,
              text(op, ": expected x on ", c10::DeviceTypeName(device), ", got ", describe(x)));
  TORCH_CHECK(
      x.scalar_type() == torch::kFloat32 && x.dim() >= 1,
      text(op, ": expected x of dtype float32 with shape [..., in_features], got ", describe(x)));
  check_weight(op, x, w);
  TORCH_CHECK(w.scalar_type() == w_dtype,
              text(op, ": expected a weight of dtype ", w_dtype, ", got ", w.scalar_type()));
  // With three parts the second is w_mid and the third w_lo.
  if (w_lo) check_like(op, *w_lo, w_third ? "w_mid" : "w_lo", w, "w_hi");
  if (w_third) check_like(op, *w_third, "w_lo", w, "w_hi");
}

void check_split_input(const char* op, c10::DeviceType device, const torch::Tensor& v) {
  const bool on_device =
      device == c10::DeviceType::Meta || (v.defined() && v.device().type() == device);
  TORCH_CHECK(
      v.defined() && v.scalar_type() == torch::kFloat32 && on_device,
      text(op, ": expected a float32 tensor",
           device == c10::DeviceType::Meta ? std::string()
                                           : text(" on ", c10::DeviceTypeName(device, true)),
           ", got ", v.defined() ? describe(v) : std::string("an undefined tensor")));
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
  if (x.dim() == 2 && x.is_contiguous()) return x;
  const auto sizes = x.sizes();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) rows *= sizes[d];
  return x.reshape({rows, sizes.back()}).contiguous();
}

const ChainEntry& chain_for(const char* op, c10::string_view chain) {
  try {
    return find_chain(std::string(chain));
  } catch (const ChainSpecError& e) {
    TORCH_CHECK(false, text(op, ": ", e.what()));
  }
}

}  // namespace detail

namespace {

torch::Tensor epilogue_cpu(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                           const detail::OptionalTensors& params_or_none, c10::string_view chain,
                           const c10::optional<torch::Tensor>& gate) {
  const at::TensorList params = detail::listed(params_or_none);
  const ChainEntry& entry = detail::chain_for(kEpilogueOp, chain);
  detail::EpilogueInputs in = detail::prepare_epilogue(
      kEpilogueOp, c10::DeviceType::CPU, y, bias, params, entry.chain.slot_params().size(), gate);
  cpu::run_epilogue(entry.kernels.cpu, entry.program, in.call);
  return in.out;
}

// x W^T in float32 by the CPU's small-batch products (kernels/cpu/small_batch.h) where they take
// it (cpu::small_batch_takes); none elsewhere.
c10::optional<torch::Tensor> small_batch_products(const torch::Tensor& x, const torch::Tensor& w) {
  if (!cpu::small_batch_takes(x.size(0), w.is_contiguous())) return c10::nullopt;
  const torch::Tensor rows = x.to(torch::kFloat32).contiguous();
  torch::Tensor y = torch::empty({rows.size(0), w.size(0)}, rows.options());
  cpu::small_batch_linear({rows.data_ptr<float>(), rows.size(0), w.data_ptr(), w.size(0), w.size(1),
                           y.data_ptr<float>(), detail::element_type_of(w)});
  return y;
}

// The CPU twin of the whole-forward CUDA ops (the small-batch kernels, the Hopper GEMM): x W^T in
// float32 (the small-batch products at a few rows; for W's bfloat16 parts, the products the
// precision defines: linear_bf16, linear_bf16x3 or linear_bf16x6), then the chain in float32,
// rounded once to x's dtype. A float32 Linear at more rows is eager's addmm, bias included, and
// carries eager's bits; the chain then runs over its output.
torch::Tensor whole_forward_cpu(const char* op, const torch::Tensor& x, const torch::Tensor& w,
                                const c10::optional<torch::Tensor>& w_lo,
                                const c10::optional<torch::Tensor>& bias, at::TensorList params,
                                c10::string_view chain, c10::string_view precision,
                                const c10::optional<torch::Tensor>& w_third) {
  const ChainEntry& entry = detail::chain_for(op, chain);
  const Precision products = detail::epilogue_precision_of(op, precision);
  detail::check_linear_epilogue_inputs(op, c10::DeviceType::CPU, x, w, w_lo, bias, params,
                                       entry.chain.slot_params().size(), products, w_third);
  const torch::Tensor x_rows = detail::linear_rows(x);
  const bool has_bias = bias && bias->defined();
  bool bias_in_gemm = false;
  torch::Tensor y;
  if (products == Precision::kBf16x6) {
    y = detail::linear_bf16x6_cpu(x_rows, w, *w_lo, *w_third);
  } else if (products == Precision::kBf16x3) {
    y = detail::linear_bf16x3_cpu(x_rows, w, *w_lo);
  } else if (products == Precision::kBf16) {
    y = detail::linear_bf16_cpu(x_rows, w);
  } else if (auto few_rows = small_batch_products(x_rows, w)) {
    y = *few_rows;
  } else if (has_bias && x.scalar_type() == torch::kFloat32) {
    // ieee's W and the bias are in x's dtype (checked above): a float32 Linear, as eager's.
    y = torch::addmm(*bias, x_rows, w.t());
    bias_in_gemm = true;
  } else {
    y = torch::mm(x_rows.to(torch::kFloat32), w.to(torch::kFloat32).t());
  }
  // At a few rows a forward is mostly calls like these: each skipped where it would do nothing.
  const auto in_type = [](const torch::Tensor& t, torch::ScalarType type) {
    return t.scalar_type() == type ? t : t.to(type);
  };
  const c10::optional<torch::Tensor> bias32 =
      has_bias && !bias_in_gemm ? c10::optional<torch::Tensor>(in_type(*bias, torch::kFloat32))
                                : c10::nullopt;
  torch::Tensor out = y;
  if (!entry.chain.ops.empty() || bias32) {
    std::vector<torch::Tensor> params32;
    for (const torch::Tensor& p : params) params32.push_back(in_type(p, torch::kFloat32));
    // y is this call's own: the chain writes over it.
    detail::EpilogueInputs in = detail::prepare_epilogue(op, c10::DeviceType::CPU, y, bias32,
                                                         params32, params32.size(), c10::nullopt,
                                                         /*write_over_y=*/true);
    cpu::run_epilogue(entry.kernels.cpu, entry.program, in.call);
    out = in.out;
  }
  out = in_type(out, x.scalar_type());
  return x.dim() == 2 ? out : out.view(detail::linear_output_shape(x.sizes(), w.size(0)));
}

// The Meta twin of the whole-forward ops: their checks and their output.
torch::Tensor whole_forward_meta(const char* op, const torch::Tensor& x, const torch::Tensor& w,
                                 const c10::optional<torch::Tensor>& w_lo,
                                 const c10::optional<torch::Tensor>& bias, at::TensorList params,
                                 c10::string_view chain, c10::string_view precision,
                                 const c10::optional<torch::Tensor>& w_third) {
  const ChainEntry& entry = detail::chain_for(op, chain);
  detail::check_linear_epilogue_inputs(op, c10::DeviceType::Meta, x, w, w_lo, bias, params,
                                       entry.chain.slot_params().size(),
                                       detail::epilogue_precision_of(op, precision), w_third);
  return at::empty_symint(detail::linear_output_shape(x.sym_sizes(), w.sym_size(0)), x.options());
}

// whole_forward_cpu or _meta as op kOp's implementation.
template <const char* const& kOp, auto kBody>
torch::Tensor whole_forward(const torch::Tensor& x, const torch::Tensor& w,
                            const c10::optional<torch::Tensor>& w_lo,
                            const c10::optional<torch::Tensor>& bias,
                            const detail::OptionalTensors& params, c10::string_view chain,
                            c10::string_view precision,
                            const c10::optional<torch::Tensor>& w_third) {
  return kBody(kOp, x, w, w_lo, bias, detail::listed(params), chain, precision, w_third);
}

// The Meta implementations: the CPU and CUDA ones' checks, and outputs of their shapes, dtypes and
// strides (all contiguous), so that torch.compile, torch.export and AOTInductor can trace the ops.
torch::Tensor epilogue_meta(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                            const detail::OptionalTensors& params_or_none, c10::string_view chain,
                            const c10::optional<torch::Tensor>& gate) {
  const at::TensorList params = detail::listed(params_or_none);
  const ChainEntry& entry = detail::chain_for(kEpilogueOp, chain);
  detail::check_epilogue_inputs(kEpilogueOp, c10::DeviceType::Meta, y, bias, params,
                                entry.chain.slot_params().size(), gate);
  return at::empty_symint(y.sym_sizes(), y.options());
}

std::tuple<torch::Tensor, torch::Tensor> split_bf16_meta(const torch::Tensor& v) {
  detail::check_split_input(detail::kSplitBf16Op, c10::DeviceType::Meta, v);
  const auto options = v.options().dtype(torch::kBFloat16);
  return {at::empty_symint(v.sym_sizes(), options), at::empty_symint(v.sym_sizes(), options)};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> split_bf16_three_meta(
    const torch::Tensor& v) {
  detail::check_split_input(detail::kSplitBf16ThreeOp, c10::DeviceType::Meta, v);
  const auto options = v.options().dtype(torch::kBFloat16);
  return {at::empty_symint(v.sym_sizes(), options), at::empty_symint(v.sym_sizes(), options),
          at::empty_symint(v.sym_sizes(), options)};
}

torch::Tensor linear_bf16x6_meta(const torch::Tensor& x, const torch::Tensor& w_hi,
                                 const torch::Tensor& w_mid, const torch::Tensor& w_lo) {
  detail::check_linear_inputs(detail::kLinearBf16x6Op, c10::DeviceType::Meta, x, w_hi,
                              torch::kBFloat16, &w_mid, &w_lo);
  return at::empty_symint(detail::linear_output_shape(x.sym_sizes(), w_hi.sym_size(0)),
                          x.options());
}

torch::Tensor linear_bf16x3_meta(const torch::Tensor& x, const torch::Tensor& w_hi,
                                 const torch::Tensor& w_lo) {
  detail::check_linear_inputs(detail::kLinearBf16x3Op, c10::DeviceType::Meta, x, w_hi,
                              torch::kBFloat16, &w_lo);
  return at::empty_symint(detail::linear_output_shape(x.sym_sizes(), w_hi.sym_size(0)),
                          x.options());
}

torch::Tensor linear_bf16_meta(const torch::Tensor& x, const torch::Tensor& w_hi) {
  detail::check_linear_inputs(detail::kLinearBf16Op, c10::DeviceType::Meta, x, w_hi,
                              torch::kBFloat16);
  return at::empty_symint(detail::linear_output_shape(x.sym_sizes(), w_hi.sym_size(0)),
                          x.options());
}

torch::Tensor linear_tf32_meta(const torch::Tensor& x, const torch::Tensor& w) {
  detail::check_linear_inputs(detail::kLinearTf32Op, c10::DeviceType::Meta, x, w, torch::kFloat32);
  return at::empty_symint(detail::linear_output_shape(x.sym_sizes(), w.sym_size(0)), x.options());
}

// The ops whose first tensor is undefined, or on a device with no implementation: one line saying
// so. libtorch 1.13 takes no dispatch key from a Tensor[]? argument, so an undefined y with params
// alone comes here rather than to the CPU's checks.
torch::Tensor epilogue_elsewhere(const torch::Tensor& y,
                                 const c10::optional<torch::Tensor>& /*bias*/,
                                 const detail::OptionalTensors& /*params*/,
                                 c10::string_view /*chain*/,
                                 const c10::optional<torch::Tensor>& /*gate*/) {
  TORCH_CHECK(false, detail::no_implementation(kEpilogueOp, "y", y));
}
template <const char* const& kOp>
torch::Tensor whole_forward_elsewhere(const torch::Tensor& x, const torch::Tensor& /*w*/,
                                      const c10::optional<torch::Tensor>& /*w_lo*/,
                                      const c10::optional<torch::Tensor>& /*bias*/,
                                      const detail::OptionalTensors& /*params*/,
                                      c10::string_view /*chain*/, c10::string_view /*precision*/,
                                      const c10::optional<torch::Tensor>& /*w_third*/) {
  TORCH_CHECK(false, detail::no_implementation(kOp, "x", x));
}

const char* const kOps[] = {
    "epilogue",      "linear_epilogue", "gemm_epilogue", "split_bf16",  "split_bf16_three",
    "linear_bf16x6", "linear_bf16x3",   "linear_bf16",   "linear_tf32", "model"};

}  // namespace

TORCH_LIBRARY(fusedlinear, m) {
  // params is Tensor[]? though callers pass a list: libtorch 2.11's AOTInductor runtime (its proxy
  // executor) passes an empty list as None, which a Tensor[] argument refuses.
  m.def(
      "epilogue(Tensor y, Tensor? bias, Tensor[]? params, str chain, Tensor? gate=None) -> Tensor");
  // w_third (bf16x6's third part of W, gemm_epilogue only) comes last, with a default, so that
  // calls and packages written for the seven arguments before it still match.
  m.def(
      "linear_epilogue(Tensor x, Tensor w, Tensor? w_lo, Tensor? bias, Tensor[]? params, "
      "str chain, str precision, Tensor? w_third=None) -> Tensor");
  m.def(
      "gemm_epilogue(Tensor x, Tensor w, Tensor? w_lo, Tensor? bias, Tensor[]? params, "
      "str chain, str precision, Tensor? w_third=None) -> Tensor");
  m.def("split_bf16(Tensor v) -> (Tensor, Tensor)");
  m.def("split_bf16_three(Tensor v) -> (Tensor, Tensor, Tensor)");
  m.def("linear_bf16x6(Tensor x, Tensor w_hi, Tensor w_mid, Tensor w_lo) -> Tensor");
  m.def("linear_bf16x3(Tensor x, Tensor w_hi, Tensor w_lo) -> Tensor");
  m.def("linear_bf16(Tensor x, Tensor w_hi) -> Tensor");
  m.def("linear_tf32(Tensor x, Tensor w) -> Tensor");
  // A layered model's whole forward (model_op.cpp): each Linear's W then its parts, one bias per
  // Linear (None where it has none), the layers' chain parameters in order; gemm last, with a
  // default, so that calls written for the six arguments before it still match.
  m.def(
      "model(Tensor x, Tensor[] weights, Tensor?[] biases, Tensor[]? params, str spec, "
      "str precision, str gemm=\"auto\") -> Tensor");
}

// Inference ops (ops.h): run below autograd, so their outputs carry no grad_fn and never require
// grad; torch.compile and AOTAutograd then trace them as they do under no_grad. The C++ entry
// points at the end of this file set the same guard themselves (op_support.h:
// call_below_autograd), so their calls skip this boxed kernel.
namespace {
void run_below_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        torch::jit::Stack* stack) {
  at::AutoDispatchBelowADInplaceOrView guard;
  op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
}
}  // namespace

TORCH_LIBRARY_IMPL(fusedlinear, Autograd, m) {
  for (const char* op : kOps)
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&run_below_autograd>());
}

TORCH_LIBRARY_IMPL(fusedlinear, CPU, m) {
  m.impl("epilogue", &epilogue_cpu);
  m.impl("linear_epilogue", &whole_forward<kLinearEpilogueOp, whole_forward_cpu>);
  m.impl("gemm_epilogue", &whole_forward<kGemmEpilogueOp, whole_forward_cpu>);
  m.impl("split_bf16", &detail::split_bf16_cpu);
  m.impl("split_bf16_three", &detail::split_bf16_three_cpu);
  m.impl("linear_bf16x6", &detail::linear_bf16x6_cpu);
  m.impl("linear_bf16x3", &detail::linear_bf16x3_cpu);
  m.impl("linear_bf16", &detail::linear_bf16_cpu);
  m.impl("linear_tf32", &detail::linear_tf32_cpu);
}

TORCH_LIBRARY_IMPL(fusedlinear, CompositeExplicitAutograd, m) {
  m.impl("epilogue", &epilogue_elsewhere);
  m.impl("linear_epilogue", &whole_forward_elsewhere<kLinearEpilogueOp>);
  m.impl("gemm_epilogue", &whole_forward_elsewhere<kGemmEpilogueOp>);
}

TORCH_LIBRARY_IMPL(fusedlinear, Meta, m) {
  m.impl("epilogue", &epilogue_meta);
  m.impl("linear_epilogue", &whole_forward<kLinearEpilogueOp, whole_forward_meta>);
  m.impl("gemm_epilogue", &whole_forward<kGemmEpilogueOp, whole_forward_meta>);
  m.impl("split_bf16", &split_bf16_meta);
  m.impl("split_bf16_three", &split_bf16_three_meta);
  m.impl("linear_bf16x6", &linear_bf16x6_meta);
  m.impl("linear_bf16x3", &linear_bf16x3_meta);
  m.impl("linear_bf16", &linear_bf16_meta);
  m.impl("linear_tf32", &linear_tf32_meta);
}

torch::Tensor fused_epilogue(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                             const std::vector<torch::Tensor>& params, const std::string& chain,
                             const c10::optional<torch::Tensor>& gate) {
  using Signature = torch::Tensor(const torch::Tensor&, const c10::optional<torch::Tensor>&,
                                  const detail::OptionalTensors&, c10::string_view,
                                  const c10::optional<torch::Tensor>&);
  return detail::call_op<kEpilogueOp, Signature>(y, bias, detail::OptionalTensors(params), chain,
                                                 gate);
}

namespace {
// A whole-forward op (kOp: linear_epilogue or gemm_epilogue), the precision as the schema's name.
template <const char* const& kOp>
torch::Tensor call_whole_forward(const torch::Tensor& x, const torch::Tensor& w,
                                 const c10::optional<torch::Tensor>& w_lo,
                                 const c10::optional<torch::Tensor>& bias,
                                 const std::vector<torch::Tensor>& params, const std::string& chain,
                                 Precision precision, const c10::optional<torch::Tensor>& w_third) {
  using Signature =
      torch::Tensor(const torch::Tensor&, const torch::Tensor&, const c10::optional<torch::Tensor>&,
                    const c10::optional<torch::Tensor>&, const detail::OptionalTensors&,
                    c10::string_view, c10::string_view, const c10::optional<torch::Tensor>&);
  return detail::call_op<kOp, Signature>(x, w, w_lo, bias, detail::OptionalTensors(params), chain,
                                         precision_name(precision), w_third);
}

using Operand = const torch::Tensor&;
using TwoParts = std::tuple<torch::Tensor, torch::Tensor>;
using ThreeParts = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>;
}  // namespace

torch::Tensor fused_linear_epilogue(const torch::Tensor& x, const torch::Tensor& w,
                                    const c10::optional<torch::Tensor>& w_lo,
                                    const c10::optional<torch::Tensor>& bias,
                                    const std::vector<torch::Tensor>& params,
                                    const std::string& chain, Precision precision,
                                    const c10::optional<torch::Tensor>& w_third) {
  return call_whole_forward<kLinearEpilogueOp>(x, w, w_lo, bias, params, chain, precision, w_third);
}

torch::Tensor fused_gemm_epilogue(const torch::Tensor& x, const torch::Tensor& w,
                                  const c10::optional<torch::Tensor>& w_lo,
                                  const c10::optional<torch::Tensor>& bias,
                                  const std::vector<torch::Tensor>& params,
                                  const std::string& chain, Precision precision,
                                  const c10::optional<torch::Tensor>& w_third) {
  return call_whole_forward<kGemmEpilogueOp>(x, w, w_lo, bias, params, chain, precision, w_third);
}

std::tuple<torch::Tensor, torch::Tensor> split_bf16(const torch::Tensor& v) {
  return detail::call_op<detail::kSplitBf16Op, TwoParts(Operand)>(v);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> split_bf16_three(const torch::Tensor& v) {
  return detail::call_op<detail::kSplitBf16ThreeOp, ThreeParts(Operand)>(v);
}

torch::Tensor linear_bf16x6(const torch::Tensor& x, const torch::Tensor& w_hi,
                            const torch::Tensor& w_mid, const torch::Tensor& w_lo) {
  using Signature = torch::Tensor(Operand, Operand, Operand, Operand);
  return detail::call_op<detail::kLinearBf16x6Op, Signature>(x, w_hi, w_mid, w_lo);
}

torch::Tensor linear_bf16x3(const torch::Tensor& x, const torch::Tensor& w_hi,
                            const torch::Tensor& w_lo) {
  using Signature = torch::Tensor(Operand, Operand, Operand);
  return detail::call_op<detail::kLinearBf16x3Op, Signature>(x, w_hi, w_lo);
}

torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w_hi) {
  return detail::call_op<detail::kLinearBf16Op, torch::Tensor(Operand, Operand)>(x, w_hi);
}

torch::Tensor linear_tf32(const torch::Tensor& x, const torch::Tensor& w) {
  return detail::call_op<detail::kLinearTf32Op, torch::Tensor(Operand, Operand)>(x, w);
}

}  // namespace fusedlinear
