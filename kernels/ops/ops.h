// The ops of fusedlinear, each declared once (TORCH_LIBRARY in ops.cpp) with CPU, CUDA and Meta
// implementations registered apart (ops.cpp, ops_cuda.cpp), one schema set for every chain:
//
//   epilogue(Tensor y, Tensor? bias, Tensor[]? params, str chain, Tensor? gate=None) -> Tensor
//       chain(y + bias) [* gate] in one pass; `chain` a registered model's name or a chain spec
//   linear_epilogue(Tensor x, Tensor w, Tensor? w_lo, Tensor? bias, Tensor[]? params, str chain,
//                   str precision) -> Tensor
//       the whole forward for few rows (W read once, the chain fused)
//   gemm_epilogue(same arguments) -> Tensor
//       the whole forward on the Hopper GEMM (sm_90), the chain in its epilogue
//   split_bf16(Tensor v) -> (Tensor, Tensor)            float32 -> bfloat16 hi + lo
//   split_bf16_three(Tensor v) -> (Tensor, Tensor, Tensor)   float32 -> bfloat16 hi + mid + lo
//   linear_bf16x6(Tensor x, Tensor w_hi, Tensor w_mid, Tensor w_lo) -> Tensor,
//   linear_bf16x3(Tensor x, Tensor w_hi, Tensor w_lo) -> Tensor,
//   linear_bf16(Tensor x, Tensor w_hi) -> Tensor,
//   linear_tf32(Tensor x, Tensor w) -> Tensor          x W^T from tensor-core products
//   model(Tensor x, Tensor[] weights, Tensor?[] biases, Tensor[]? params, str spec,
//         str precision, str gemm="auto") -> Tensor     a layered model's whole forward
//
// The ops are inference ops: they record no autograd graph, in any grad mode, so their outputs
// never require grad (as if called under torch.no_grad), whatever their inputs. So a model in its
// default grad mode runs, scripted, exported, compiled or not; gradients do not flow through
// them (a backward from their outputs fails: they do not require grad). The wrappers below call
// the dispatcher, which picks the implementation from the inputs' device. They take the precision
// and the GEMM kernel as their types (Precision, GemmKernel) and hand the schema their names only
// at that call; the implementations parse a name once a call, so a bad one from Python or
// TorchScript gets its one-line error there.
#pragma once

#include <torch/types.h>

#include <string>
#include <tuple>
#include <vector>

#include "kernels/math/element.h"
#include "kernels/math/precision.h"
#include "kernels/ops/gemm_plan.h"

namespace fusedlinear {

// chain(y + bias, params) in one pass, for y [..., features] float32, float16 or bfloat16; bias
// (optional) [features] and each of `params` [features] or of one element, all of y's dtype and
// device; `params` in the chain's parameter slots (ParsedChain::slot_params). `chain`: a
// registered model's name (its compiled kernels) or a chain spec (the interpreter). `gate`
// (optional, shaped like y, of y's dtype and device): a gated layer's other product, multiplied in
// the same pass, the chain's value rounded to y's dtype first as the unfused multiply would round
// it (bitwise the same as fused_epilogue(y, bias, params, chain) * gate). Returns a new
// contiguous tensor shaped like y.
torch::Tensor fused_epilogue(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                             const std::vector<torch::Tensor>& params, const std::string& chain,
                             const c10::optional<torch::Tensor>& gate = c10::nullopt);

// A model's whole forward in one op, for inputs of few rows (batch 1-64), where the GEMM is bound
// by reading W: out = chain(x W^T + bias, params) with W read once, the products summed in float32
// and the chain applied before the one store (kernels/cuda/skinny/). `precision` the products:
// kIeee (W of x's dtype: float32 FMAs, or for 16-bit x tensor-core products), kBf16 (float32 x,
// w = bfloat16(W): x rounded, as linear_bf16) or kBf16x3 (float32 x, w and w_lo = split_bf16(W):
// x split, as linear_bf16x3); kTf32 and kBf16x6 are refused in one line; w_third is bf16x6's
// (fused_gemm_epilogue), absent here. x [..., in]; w [out, in]; bias and params as
// fused_epilogue's, of x's dtype. Returns [..., out] in x's dtype; bitwise the same run to run.
// W is read as a contiguous [out, in] tensor (a transposed one is copied first). On the CPU: the
// same products in float32, then the fused epilogue (for testing; no faster than the two ops).
torch::Tensor fused_linear_epilogue(const torch::Tensor& x, const torch::Tensor& w,
                                    const c10::optional<torch::Tensor>& w_lo,
                                    const c10::optional<torch::Tensor>& bias,
                                    const std::vector<torch::Tensor>& params,
                                    const std::string& chain, Precision precision,
                                    const c10::optional<torch::Tensor>& w_third = c10::nullopt);

// The same forward, arguments and checks as fused_linear_epilogue's, for inputs of many rows: on
// the Hopper GEMM (kernels/cuda/gemm/: TMA, wgmma, the chain applied to the float32 accumulators
// before the one store), which takes a GPU of compute capability 9.0 and in_features a multiple
// of 8 (elsewhere a one-line error). Its products: kIeee for 16-bit x only (x's type on the
// tensor cores); kBf16 and kBf16x3 as fused_linear_epilogue's, x split into its bfloat16 parts
// first; kBf16x6 (float32 x; w, w_lo and w_third = split_bf16_three(W)'s hi, mid and lo: x split
// three ways, the six products of linear_bf16x6, each k-tile's sums added into float32 totals).
// On the CPU: fused_linear_epilogue's twin.
torch::Tensor fused_gemm_epilogue(const torch::Tensor& x, const torch::Tensor& w,
                                  const c10::optional<torch::Tensor>& w_lo,
                                  const c10::optional<torch::Tensor>& bias,
                                  const std::vector<torch::Tensor>& params,
                                  const std::string& chain, Precision precision,
                                  const c10::optional<torch::Tensor>& w_third = c10::nullopt);

// A gated pair's whole forward on the Hopper GEMM in one kernel, out = chain(x W^T + bias) *
// (x G^T + gate_bias): W and G (the gate) each as fused_gemm_epilogue takes W (the same parts for
// `precision`), gate_bias as bias; the chain's value and the gate's sum rounded to x's dtype,
// then multiplied, as fused_gemm_epilogue of each then a multiply give them. Not an op: the
// layered models' forwards call it (linear_forward.h), in CUDA builds only.
torch::Tensor fused_gemm_epilogue_gated(
    const torch::Tensor& x, const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
    const c10::optional<torch::Tensor>& w_third, const torch::Tensor& gate,
    const c10::optional<torch::Tensor>& gate_lo, const c10::optional<torch::Tensor>& gate_third,
    const c10::optional<torch::Tensor>& bias, const c10::optional<torch::Tensor>& gate_bias,
    const std::vector<torch::Tensor>& params, const std::string& chain, Precision precision);

// A layered model's whole forward (kernels/ops/model_spec.h's spec, e.g. "w1:silu*w3|w2"), each
// Linear run as the plan for `gemm` says for its input (gemm_plan.h; linear_forward.h: the
// small-batch kernels, the Hopper GEMM, or the products then the fused epilogue), as LayeredModel
// runs it; the whole model in one launch of the fused-MLP kernel where choose_mlp says so (kMlp:
// where it takes the model; kAuto: where that measured faster), else each Linear as kAuto plans
// it. `weights`: each Linear in the spec's order (a gate after its layer's Linear), its W
// [out, in] of x's dtype followed by the bfloat16 parts `precision` takes (bf16: hi; bf16x3: hi,
// lo = split_bf16(W); bf16x6: hi, mid, lo = split_bf16_three(W)); `biases`: one per Linear,
// nullopt where it has none; `params`: each layer's chain parameters in its slot order, layer
// after layer. `precision`: any mode (all but kIeee take float32 x). Returns [..., out]. Every
// count, shape, dtype and device is checked first, the Meta implementation included.
torch::Tensor fused_model(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                          const std::vector<c10::optional<torch::Tensor>>& biases,
                          const std::vector<torch::Tensor>& params, const std::string& spec,
                          Precision precision, GemmKernel gemm = GemmKernel::kAuto);
// What fused_model with `gemm` runs for these arguments: whether the fused-MLP kernel takes them
// and why (gemm_plan.h: choose_mlp), and then the kernel's form (mlp_description). Checks the
// arguments as the op does.
struct FusedMlpPlan {
  MlpChoice choice;
  std::string description;
};
FusedMlpPlan fused_model_mlp_plan(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                  const std::vector<c10::optional<torch::Tensor>>& biases,
                                  const std::vector<torch::Tensor>& params, const std::string& spec,
                                  Precision precision, GemmKernel gemm);

// v ~= hi + lo, both bfloat16 (kernels/math/bf16_split.h): hi = bfloat16(v), lo = bfloat16(v -
// hi); |v - (hi + lo)| <= 2^-17 |v| for normal v; +-inf and NaN in hi with lo = 0. v: float32,
// any shape; hi and lo are new contiguous tensors of v's shape.
std::tuple<torch::Tensor, torch::Tensor> split_bf16(const torch::Tensor& v);

// v ~= hi + mid + lo, all bfloat16 (split::split_bf16_three): hi and mid are split_bf16(v)'s hi and
// lo, lo = bfloat16(v - hi - mid); |v - (hi + mid + lo)| <= 2^-26 |v| for normal v. As split_bf16.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> split_bf16_three(const torch::Tensor& v);

// x W^T from bfloat16 tensor-core products for inputs of any range (bf16x6): x split in three per
// call, W given split (w_hi, w_mid, w_lo = split_bf16_three(W)), and the six products of parts i
// and j with i + j <= 2 (0 = hi), each accumulated in float32 on its own and added smallest
// first: x_lo w_hi, x_mid w_mid, x_hi w_lo, then x_mid w_hi, x_hi w_mid, then x_hi w_hi. The
// parts' error (~2^-25 sum_k |x||w|) is below float32's rounding of the sum. Shapes and the CPU
// emulation as linear_bf16x3's.
torch::Tensor linear_bf16x6(const torch::Tensor& x, const torch::Tensor& w_hi,
                            const torch::Tensor& w_mid, const torch::Tensor& w_lo);

// x W^T (nn.Linear without bias) to about float32's accuracy from bfloat16 tensor-core products:
// x is split per call, W is given split (w_hi, w_lo = split_bf16(W)), and
//   y = x_lo w_hi^T + x_hi w_lo^T + x_hi w_hi^T
// with each product accumulated in float32 on its own, smallest first (the x_lo w_lo^T term,
// ~2^-18 of each product, is left out). x: float32 [..., in]; w_hi, w_lo: bfloat16 [out, in];
// returns float32 [..., out]. On the CPU the same products are formed exactly in float32 and
// summed by float32 matrix products: an emulation for testing, slower than x W^T.
torch::Tensor linear_bf16x3(const torch::Tensor& x, const torch::Tensor& w_hi,
                            const torch::Tensor& w_lo);

// x W^T from bfloat16 operands (x rounded per call; w_hi = bfloat16(W)), float32 accumulation and
// output: about 2^-8 relative error per product. Same shapes as linear_bf16x3.
torch::Tensor linear_bf16(const torch::Tensor& x, const torch::Tensor& w_hi);

// x W^T with TF32 products (operands to 10 significand bits), float32 accumulation: about 2^-10
// relative error per product. x: float32 [..., in]; w: float32 [out, in]; returns [..., out].
torch::Tensor linear_tf32(const torch::Tensor& x, const torch::Tensor& w);

namespace detail {

// The bias and the chain's parameters made contiguous and described for a kernel
// (kernels/math/element.h: a one-element parameter is broadcast). Kept alive as long as the call.
struct ColumnInputs {
  torch::Tensor bias;
  std::vector<torch::Tensor> params;
  const void* bias_data = nullptr;
  ColumnTerms terms;
};
ColumnInputs column_inputs(const c10::optional<torch::Tensor>& bias,
                           c10::ArrayRef<torch::Tensor> params);

// An epilogue's inputs, checked (each failure one line saying what was expected and what came:
// dtype, device, shapes, the number of parameters the chain takes) and described for a kernel,
// with its output allocated like y, or y itself where the caller lets the kernel write over it (a
// tensor of its own: the CPU loops read each value before they write it).
struct EpilogueInputs {
  torch::Tensor y, gate, out;
  ColumnInputs columns;
  EpilogueCall call;
};
EpilogueInputs prepare_epilogue(const char* op, c10::DeviceType device, const torch::Tensor& y,
                                const c10::optional<torch::Tensor>& bias,
                                c10::ArrayRef<torch::Tensor> params, size_t chain_params,
                                const c10::optional<torch::Tensor>& gate = c10::nullopt,
                                bool write_over_y = false);

// The precision that fused_linear_epilogue's or fused_gemm_epilogue's (`op`) schema string names,
// parsed once a call at the op's boundary; a mode the op does not take throws, naming those it
// does.
Precision epilogue_precision_of(const char* op, c10::string_view precision);
// The checks of fused_linear_epilogue and fused_gemm_epilogue (`op`), on `device`, for the
// precision given.
void check_linear_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                                  const torch::Tensor& w, const c10::optional<torch::Tensor>& w_lo,
                                  const c10::optional<torch::Tensor>& bias,
                                  c10::ArrayRef<torch::Tensor> params, size_t chain_params,
                                  Precision precision, const c10::optional<torch::Tensor>& w_third);

// The ElementType of a float32, float16 or bfloat16 tensor (ATen's AT_DISPATCH_SWITCH: any
// other dtype throws; the ops check dtypes with clearer messages before). The one place the
// torch side maps a dtype.
ElementType element_type_of(const torch::Tensor& t);

// Checks of the linear ops: x float32 [..., in] on `device`; w [out, in] of `w_dtype` on the same
// device; the further parts of W, where given (w_lo; w_mid and w_lo), like w. Each failure says
// what was expected and what came.
void check_linear_inputs(const char* op, c10::DeviceType device, const torch::Tensor& x,
                         const torch::Tensor& w, torch::ScalarType w_dtype,
                         const torch::Tensor* w_lo = nullptr,
                         const torch::Tensor* w_third = nullptr);
// The split ops' check: v a float32 tensor on `device` (any device for Meta).
void check_split_input(const char* op, c10::DeviceType device, const torch::Tensor& v);
// x's leading dimensions with `out_features` last: the shape of x W^T, of int64_t sizes or of the
// Meta kernels' SymInts.
template <class Size>
std::vector<Size> linear_output_shape(c10::ArrayRef<Size> x_shape, Size out_features) {
  std::vector<Size> shape(x_shape.begin(), x_shape.end());
  shape.back() = out_features;
  return shape;
}
// x [..., in] as a contiguous [rows, in] matrix (rows: the product of the leading dimensions).
torch::Tensor linear_rows(const torch::Tensor& x);

// The CPU implementations (kernels/ops/ops_cpu.cpp).
std::tuple<torch::Tensor, torch::Tensor> split_bf16_cpu(const torch::Tensor& v);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> split_bf16_three_cpu(
    const torch::Tensor& v);
torch::Tensor linear_bf16x6_cpu(const torch::Tensor& x, const torch::Tensor& w_hi,
                                const torch::Tensor& w_mid, const torch::Tensor& w_lo);
torch::Tensor linear_bf16x3_cpu(const torch::Tensor& x, const torch::Tensor& w_hi,
                                const torch::Tensor& w_lo);
torch::Tensor linear_bf16_cpu(const torch::Tensor& x, const torch::Tensor& w_hi);
torch::Tensor linear_tf32_cpu(const torch::Tensor& x, const torch::Tensor& w);
}  // namespace detail

}  // namespace fusedlinear
