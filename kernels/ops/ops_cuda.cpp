// Registers the CUDA implementations of the ops: checks inputs, allocates the outputs and calls
// the torch-free launchers (a chain's, from the chain registry; split_bf16.cu,
// cublas_products.cpp) on the current CUDA stream (cuBLAS through libtorch's handle for it).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <vector>

#include "kernels/cuda/chain_kernels.h"
#include "kernels/cuda/linear.h"
#include "kernels/ops/op_support.h"
#include "kernels/ops/ops.h"

namespace fusedlinear {
namespace {

using detail::text;

void check_launch(const char* op, cudaError_t err) {
  TORCH_CHECK(err == cudaSuccess,
              text(op, ": CUDA kernel launch failed: ", cudaGetErrorString(err)));
}

using detail::kEpilogueOp;
using detail::kGemmEpilogueOp;
using detail::kLinearEpilogueOp;

torch::Tensor epilogue_cuda(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                            const detail::OptionalTensors& params_or_none, c10::string_view chain,
                            const c10::optional<torch::Tensor>& gate) {
  const at::TensorList params = detail::listed(params_or_none);
  const ChainEntry& entry = detail::chain_for(kEpilogueOp, chain);
  const c10::cuda::CUDAGuard device_guard(y.device());
  detail::EpilogueInputs in = detail::prepare_epilogue(
      kEpilogueOp, c10::DeviceType::CUDA, y, bias, params, entry.chain.slot_params().size(), gate);
  if (in.y.numel() == 0) return in.out;
  check_launch(kEpilogueOp, entry.kernels.cuda.epilogue(entry.program, in.call,
                                                        at::cuda::getCurrentCUDAStream()));
  return in.out;
}

void check_cublas(const char* op, cublasStatus_t status) {
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS,
              text(op, ": cuBLAS failed: ", cublasGetStatusString(status)));
}

torch::Tensor empty_bf16(const torch::Tensor& like) {
  return torch::empty(like.sizes(), like.options().dtype(torch::kBFloat16));
}

// v's bfloat16 parts, two or three (launch_split_bf16_parts).
std::vector<torch::Tensor> split_parts_cuda(const char* op, const torch::Tensor& v, int parts) {
  detail::check_split_input(op, c10::DeviceType::CUDA, v);
  const c10::cuda::CUDAGuard device_guard(v.device());
  const torch::Tensor input = v.contiguous();
  std::vector<torch::Tensor> out(static_cast<size_t>(parts));
  for (torch::Tensor& part : out) part = empty_bf16(input);
  check_launch(
      op, launch_split_bf16_parts(input.data_ptr<float>(), out[0].data_ptr(), out[1].data_ptr(),
                                  parts == 3 ? out[2].data_ptr() : nullptr, input.numel(),
                                  at::cuda::getCurrentCUDAStream()));
  return out;
}

std::tuple<torch::Tensor, torch::Tensor> split_bf16_cuda(const torch::Tensor& v) {
  const std::vector<torch::Tensor> parts = split_parts_cuda(detail::kSplitBf16Op, v, 2);
  return {parts[0], parts[1]};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> split_bf16_three_cuda(
    const torch::Tensor& v) {
  const std::vector<torch::Tensor> parts = split_parts_cuda(detail::kSplitBf16ThreeOp, v, 3);
  return {parts[0], parts[1], parts[2]};
}

// How w lies in memory for cuBLAS: nn.Linear's row-major [out, in], the transpose of a row-major
// [in, out], or neither (then a contiguous copy is made, as `keep` holds).
WeightMajor weight_major(const torch::Tensor& w, torch::Tensor& keep) {
  if (w.is_contiguous()) {
    keep = w;
    return WeightMajor::kOutput;
  }
  if (w.t().is_contiguous()) {
    keep = w;
    return WeightMajor::kInput;
  }
  keep = w.contiguous();
  return WeightMajor::kOutput;
}

// x W^T's operands as cuBLAS takes them: x as a contiguous [rows, in] matrix and the output y
// [rows, out] (returned in x's leading shape by `result`).
struct LinearCall {
  torch::Tensor x_rows, y;
  std::vector<int64_t> shape;
  int rows = 0, out_features = 0, in_features = 0;
  torch::Tensor result() const { return y.view(shape); }
};

// false when there is nothing to multiply (no rows, no outputs, or in_features 0: y then holds
// the result, zeros for the last); throws when a size does not fit cuBLAS's int.
bool prepare_linear(const char* op, const torch::Tensor& x, int64_t out_features,
                    LinearCall& call) {
  const int64_t in_features = x.size(-1);
  call.x_rows = detail::linear_rows(x);
  const int64_t rows = call.x_rows.size(0);
  call.y = torch::empty({rows, out_features}, x.options());
  call.shape = detail::linear_output_shape(x.sizes(), out_features);
  if (rows == 0 || out_features == 0) return false;
  if (in_features == 0) {
    call.y.zero_();
    return false;
  }
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  TORCH_CHECK(rows <= kMax && out_features <= kMax && in_features <= kMax,
              text(op, ": too large for one cuBLAS call: ", rows, " rows, ", in_features, " -> ",
                   out_features, " features (each must be below 2^31)"));
  call.rows = int(rows);
  call.out_features = int(out_features);
  call.in_features = int(in_features);
  return true;
}

// x W^T from bfloat16 parts: x split per call into as many parts as W comes in (1: hi; 2: hi, lo;
// 3: hi, mid, lo), then the products (gemm_bf16_parts).
torch::Tensor linear_bf16_parts_cuda(const char* op, const torch::Tensor& x,
                                     const std::vector<torch::Tensor>& w_parts) {
  const int parts = int(w_parts.size());
  detail::check_linear_inputs(op, c10::DeviceType::CUDA, x, w_parts[0], torch::kBFloat16,
                              parts > 1 ? &w_parts[1] : nullptr, parts > 2 ? &w_parts[2] : nullptr);
  const c10::cuda::CUDAGuard device_guard(x.device());
  LinearCall call;
  if (!prepare_linear(op, x, w_parts[0].size(0), call)) return call.result();

  std::vector<torch::Tensor> x_parts(static_cast<size_t>(parts));
  for (torch::Tensor& part : x_parts) part = empty_bf16(call.x_rows);
  check_launch(op, launch_split_bf16_parts(call.x_rows.data_ptr<float>(), x_parts[0].data_ptr(),
                                           parts > 1 ? x_parts[1].data_ptr() : nullptr,
                                           parts > 2 ? x_parts[2].data_ptr() : nullptr,
                                           call.x_rows.numel(), at::cuda::getCurrentCUDAStream()));
  // W's parts in one layout for all products: each as it lies where they agree, else [out, in].
  std::vector<torch::Tensor> w_kept(parts);
  WeightMajor major = weight_major(w_parts[0], w_kept[0]);
  bool agree = true;
  for (int i = 1; i < parts; ++i) agree = agree && weight_major(w_parts[i], w_kept[i]) == major;
  if (!agree) {
    for (int i = 0; i < parts; ++i) w_kept[i] = w_parts[i].contiguous();
    major = WeightMajor::kOutput;
  }
  const void* x_data[3] = {};
  const void* w_data[3] = {};
  for (int i = 0; i < parts; ++i) {
    x_data[i] = x_parts[i].data_ptr();
    w_data[i] = w_kept[i].data_ptr();
  }
  check_cublas(op, gemm_bf16_parts(at::cuda::getCurrentCUDABlasHandle(), call.rows,
                                   call.out_features, call.in_features, parts, x_data, w_data,
                                   major, call.y.data_ptr<float>()));
  // Sums made inf or NaN by an operand's inf or NaN as eager's (bf16_split.h says why the
  // products alone cannot): a pass over y that writes only those.
  const split::SplitOperands operands =
      split::split_operands(call.x_rows.data_ptr<float>(), w_data, parts, call.in_features,
                            call.out_features, major == WeightMajor::kInput);
  check_launch(op,
               launch_eager_non_finite_sums(call.y.data_ptr<float>(), call.rows, call.out_features,
                                            operands, at::cuda::getCurrentCUDAStream()));
  return call.result();
}

torch::Tensor linear_bf16x6_cuda(const torch::Tensor& x, const torch::Tensor& w_hi,
                                 const torch::Tensor& w_mid, const torch::Tensor& w_lo) {
  return linear_bf16_parts_cuda(detail::kLinearBf16x6Op, x, {w_hi, w_mid, w_lo});
}

torch::Tensor linear_bf16x3_cuda(const torch::Tensor& x, const torch::Tensor& w_hi,
                                 const torch::Tensor& w_lo) {
  return linear_bf16_parts_cuda(detail::kLinearBf16x3Op, x, {w_hi, w_lo});
}

torch::Tensor linear_bf16_cuda(const torch::Tensor& x, const torch::Tensor& w_hi) {
  return linear_bf16_parts_cuda(detail::kLinearBf16Op, x, {w_hi});
}

torch::Tensor linear_tf32_cuda(const torch::Tensor& x, const torch::Tensor& w) {
  const char* op = detail::kLinearTf32Op;
  detail::check_linear_inputs(op, c10::DeviceType::CUDA, x, w, torch::kFloat32);
  const c10::cuda::CUDAGuard device_guard(x.device());
  LinearCall call;
  if (!prepare_linear(op, x, w.size(0), call)) return call.result();
  torch::Tensor weight;
  const WeightMajor major = weight_major(w, weight);
  check_cublas(op, gemm_tf32(at::cuda::getCurrentCUDABlasHandle(), call.rows, call.out_features,
                             call.in_features, call.x_rows.data_ptr<float>(),
                             weight.data_ptr<float>(), major, call.y.data_ptr<float>()));
  return call.result();
}

// A weight's parts as the kernels read them, contiguous: W (or its bfloat16 hi part), bf16x3's lo
// or bf16x6's mid, bf16x6's lo; the parts not given stay undefined.
struct WeightParts {
  torch::Tensor w, lo, third;
};
WeightParts contiguous_parts(const torch::Tensor& w, const c10::optional<torch::Tensor>& lo,
                             const c10::optional<torch::Tensor>& third) {
  const auto given = [](const c10::optional<torch::Tensor>& part) {
    return part && part->defined() ? part->contiguous() : torch::Tensor();
  };
  return {w.contiguous(), given(lo), given(third)};
}
const void* data_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// What the whole-forward ops share: their checks, x as rows (copied where its base is not 16-byte
// aligned, which the tensor cores' tile copies need), W's parts contiguous, and the call the
// launchers take, with its output allocated.
struct WholeForward {
  torch::Tensor x_rows, out;
  WeightParts weight;
  detail::ColumnInputs columns;
  cuda::LinearCall call;
  std::vector<int64_t> view;  // the output's shape
};

WholeForward prepare_whole_forward(const char* op, const ChainEntry& entry, const torch::Tensor& x,
                                   const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
                                   const c10::optional<torch::Tensor>& bias, at::TensorList params,
                                   Precision products,
                                   const c10::optional<torch::Tensor>& w_third) {
  detail::check_linear_epilogue_inputs(op, c10::DeviceType::CUDA, x, w, w_lo, bias, params,
                                       entry.chain.slot_params().size(), products, w_third);
  WholeForward f;
  f.x_rows = detail::linear_rows(x);
  if (reinterpret_cast<uintptr_t>(f.x_rows.data_ptr()) % 16 != 0) f.x_rows = f.x_rows.clone();
  f.weight = contiguous_parts(w, w_lo, w_third);
  f.columns = detail::column_inputs(bias, params);
  f.out = torch::empty({f.x_rows.size(0), w.size(0)}, x.options());
  cuda::LinearCall& call = f.call;
  call.type = detail::element_type_of(x);
  call.precision = products;
  call.x = f.x_rows.data_ptr();
  call.w = f.weight.w.data_ptr();
  call.w_lo = data_or_null(f.weight.lo);
  call.w_third = data_or_null(f.weight.third);
  call.bias = f.columns.bias_data;
  call.terms = f.columns.terms;
  call.out = f.out.data_ptr();
  call.rows = f.x_rows.size(0);
  call.out_features = w.size(0);
  call.in_features = w.size(1);
  f.view = detail::linear_output_shape(x.sizes(), w.size(0));
  return f;
}

torch::Tensor float_workspace(int64_t floats, const torch::Tensor& like) {
  return floats > 0 ? torch::empty({floats}, like.options().dtype(torch::kFloat32))
                    : torch::Tensor();
}

// The small-batch kernels' whole forward (ops.h: fused_linear_epilogue). Their workspace, for the
// partial sums when k is split and bf16x3's split of x from 9 rows, comes from libtorch's caching
// allocator on the current stream.
torch::Tensor linear_epilogue_cuda(const torch::Tensor& x, const torch::Tensor& w,
                                   const c10::optional<torch::Tensor>& w_lo,
                                   const c10::optional<torch::Tensor>& bias,
                                   const detail::OptionalTensors& params_or_none,
                                   c10::string_view chain, c10::string_view precision,
                                   const c10::optional<torch::Tensor>& w_third) {
  const ChainEntry& entry = detail::chain_for(kLinearEpilogueOp, chain);
  const c10::cuda::CUDAGuard device_guard(x.device());
  WholeForward f = prepare_whole_forward(
      kLinearEpilogueOp, entry, x, w, w_lo, bias, detail::listed(params_or_none),
      detail::epilogue_precision_of(kLinearEpilogueOp, precision), w_third);
  const cuda::LinearCall& call = f.call;
  if (call.rows == 0 || call.out_features == 0) return f.out.view(f.view);
  cuda::SkinnyPlan plan;
  const cudaError_t planned = cuda::plan_skinny_linear(call, plan);
  TORCH_CHECK(planned != cudaErrorInvalidConfiguration,
              text(kLinearEpilogueOp, ": too many rows for the small-batch kernels' grid (",
                   call.rows, "; they take up to 65535 tiles of 8 to 64 rows)"));
  check_launch(kLinearEpilogueOp, planned);
  const torch::Tensor workspace = float_workspace(plan.workspace_floats(), x);
  const cuda::CudaSkinnyFn launch = entry.kernels.cuda.skinny[int(cuda::family_of(plan.variant))];
  check_launch(
      kLinearEpilogueOp,
      launch(entry.program, call, plan, workspace.defined() ? workspace.data_ptr<float>() : nullptr,
             at::cuda::getCurrentCUDAStream()));
  return f.out.view(f.view);
}

// The Hopper GEMM's whole forward of a prepared call (one Linear's or a gated pair's); the
// workspace, float32 x's bfloat16 parts, from libtorch's caching allocator on the current stream.
torch::Tensor launch_gemm(const ChainEntry& entry, WholeForward& f, const torch::Tensor& x) {
  const cuda::LinearCall& call = f.call;
  TORCH_CHECK(call.type != ElementType::kFloat32 || call.precision != Precision::kIeee,
              text(kGemmEpilogueOp,
                   ": float32 x takes precision bf16, bf16x3 or bf16x6 (the Hopper GEMM "
                   "forms bfloat16 products), got 'ieee'"));
  if (call.rows == 0 || call.out_features == 0) return f.out.view(f.view);
  const torch::Tensor workspace = float_workspace(cuda::hopper_workspace_floats(call), x);
  const cuda::CudaHopperFn launch = entry.kernels.cuda.hopper[int(cuda::hopper_family_of(call))];
  const cudaError_t err =
      launch(entry.program, call, workspace.defined() ? workspace.data_ptr<float>() : nullptr,
             at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err != cudaErrorNotSupported,
              text(kGemmEpilogueOp,
                   ": the Hopper GEMM takes a GPU of compute capability 9.0 and "
                   "in_features a multiple of 8, got in_features ",
                   call.in_features, " on ", x.device()));
  check_launch(kGemmEpilogueOp, err);
  return f.out.view(f.view);
}

// The Hopper GEMM's whole forward (ops.h: fused_gemm_epilogue).
torch::Tensor gemm_epilogue_cuda(const torch::Tensor& x, const torch::Tensor& w,
                                 const c10::optional<torch::Tensor>& w_lo,
                                 const c10::optional<torch::Tensor>& bias,
                                 const detail::OptionalTensors& params_or_none,
                                 c10::string_view chain, c10::string_view precision,
                                 const c10::optional<torch::Tensor>& w_third) {
  const ChainEntry& entry = detail::chain_for(kGemmEpilogueOp, chain);
  const c10::cuda::CUDAGuard device_guard(x.device());
  WholeForward f = prepare_whole_forward(
      kGemmEpilogueOp, entry, x, w, w_lo, bias, detail::listed(params_or_none),
      detail::epilogue_precision_of(kGemmEpilogueOp, precision), w_third);
  return launch_gemm(entry, f, x);
}

}  // namespace

torch::Tensor fused_gemm_epilogue_gated(
    const torch::Tensor& x, const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
    const c10::optional<torch::Tensor>& w_third, const torch::Tensor& gate,
    const c10::optional<torch::Tensor>& gate_lo, const c10::optional<torch::Tensor>& gate_third,
    const c10::optional<torch::Tensor>& bias, const c10::optional<torch::Tensor>& gate_bias,
    const std::vector<torch::Tensor>& params, const std::string& chain, Precision precision) {
  const ChainEntry& entry = detail::chain_for(kGemmEpilogueOp, chain);
  const c10::cuda::CUDAGuard device_guard(x.device());
  WholeForward f =
      prepare_whole_forward(kGemmEpilogueOp, entry, x, w, w_lo, bias, params, precision, w_third);
  // The gate as the same op would take it alone: W's shape, parts and dtype, no chain.
  detail::check_linear_epilogue_inputs(kGemmEpilogueOp, c10::DeviceType::CUDA, x, gate, gate_lo,
                                       gate_bias, {}, 0, precision, gate_third);
  TORCH_CHECK(gate.sizes() == w.sizes(),
              text(kGemmEpilogueOp, ": a gated pair's gate is W's shape ", w.sym_sizes(), ", got ",
                   gate.sym_sizes()));
  const WeightParts gate_parts = contiguous_parts(gate, gate_lo, gate_third);
  const detail::ColumnInputs gate_columns = detail::column_inputs(gate_bias, {});
  cuda::LinearCall& call = f.call;
  call.gate_w = gate_parts.w.data_ptr();
  call.gate_w_lo = data_or_null(gate_parts.lo);
  call.gate_w_third = data_or_null(gate_parts.third);
  call.gate_bias = gate_columns.bias_data;
  return launch_gemm(entry, f, x);
}

TORCH_LIBRARY_IMPL(fusedlinear, CUDA, m) {
  m.impl("epilogue", &epilogue_cuda);
  m.impl("split_bf16", &split_bf16_cuda);
  m.impl("split_bf16_three", &split_bf16_three_cuda);
  m.impl("linear_bf16x6", &linear_bf16x6_cuda);
  m.impl("linear_bf16x3", &linear_bf16x3_cuda);
  m.impl("linear_bf16", &linear_bf16_cuda);
  m.impl("linear_tf32", &linear_tf32_cuda);
  m.impl("linear_epilogue", &linear_epilogue_cuda);
  m.impl("gemm_epilogue", &gemm_epilogue_cuda);
}

}  // namespace fusedlinear
