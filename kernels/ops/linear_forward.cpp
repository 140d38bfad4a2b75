#include "kernels/ops/linear_forward.h"

#include "kernels/cpu/small_batch.h"
#include "kernels/ops/op_support.h"
#include "kernels/ops/ops.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace fusedlinear {

int split_weight_parts(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return 1;
    case Precision::kBf16x3:
      return 2;
    case Precision::kBf16x6:
      return 3;
    case Precision::kIeee:
    case Precision::kTf32:
      return 0;
  }
  return 0;
}

GemmDevice gemm_device_of(const torch::Tensor& x) {
  GemmDevice device;
#ifdef FUSEDLINEAR_WITH_CUDA
  if (x.is_cuda()) {
    const cudaDeviceProp* props = at::cuda::getDeviceProperties(x.device().index());
    device.gpu = true;
    device.compute_major = props->major;
    device.compute_minor = props->minor;
    device.multiprocessors = props->multiProcessorCount;
    device.shared_bytes_per_block = int64_t(props->sharedMemPerBlockOptin);
  }
#endif
  if (!x.is_cuda()) device.cpu_small_batch = cpu::small_batch_runs();
  return device;
}

int64_t rows_of(const torch::Tensor& x) {
  return x.dim() > 0 && x.size(-1) > 0 ? x.numel() / x.size(-1) : 0;
}

torch::Tensor linear_products(const torch::Tensor& x, const LinearWeights& w, Precision products) {
  switch (products) {
    case Precision::kIeee:
      break;
    case Precision::kBf16x3:
      return linear_bf16x3(x, w.hi, w.lo);
    case Precision::kBf16x6:
      return linear_bf16x6(x, w.hi, w.mid, w.lo);
    case Precision::kTf32:
      return linear_tf32(x, w.weight);
    case Precision::kBf16:
      return linear_bf16(x, w.hi);
  }
  return torch::matmul(x, w.weight.t());
}

namespace {

// W as the whole-forward ops take it for `products` (ops.h): W, or its parts, as w, w_lo and
// w_third.
struct WholeForwardWeights {
  torch::Tensor w;
  c10::optional<torch::Tensor> w_lo, w_third;
};
WholeForwardWeights whole_forward_weights(const GemmPlan& plan, const LinearWeights& w,
                                          Precision products) {
  switch (products) {
    case Precision::kIeee:
    case Precision::kTf32:
      return {w.weight, c10::nullopt, c10::nullopt};
    case Precision::kBf16x3:
      return {w.hi, w.lo, c10::nullopt};
    case Precision::kBf16:
      return {w.hi, c10::nullopt, c10::nullopt};
    case Precision::kBf16x6:  // the Hopper GEMM's (plan_gemm: no small-batch kernel)
      return {w.hi, w.mid, w.lo};
  }
  TORCH_CHECK(false, detail::text("linear_forward: the plan gave ", plan.description,
                                  ", which no whole-forward op runs"));
  return {};
}

// The products a whole-forward op forms for the plan: the small-batch kernels form tf32's as
// float32's (plan_gemm).
Precision whole_forward_products(const GemmPlan& plan) {
  return plan.products == Precision::kTf32 ? Precision::kIeee : plan.products;
}

// The whole forward in one op: the small-batch kernels' or the Hopper GEMM's.
torch::Tensor whole_forward(const GemmPlan& plan, const torch::Tensor& x, const LinearWeights& w,
                            const c10::optional<torch::Tensor>& bias,
                            const std::vector<torch::Tensor>& params, const std::string& chain) {
  const auto op = plan.hopper ? &fused_gemm_epilogue : &fused_linear_epilogue;
  const Precision products = whole_forward_products(plan);
  const WholeForwardWeights args = whole_forward_weights(plan, w, products);
  return op(x, args.w, args.w_lo, bias, params, chain, products, args.w_third);
}

}  // namespace

namespace {

bool given(const c10::optional<torch::Tensor>& t) { return t && t->defined(); }

// x W^T + residual by cuBLAS in one GEMM (beta = 1), the sum rounded once.
torch::Tensor products_plus(const torch::Tensor& x, const torch::Tensor& w,
                            const torch::Tensor& residual) {
  const torch::Tensor rows = x.reshape({-1, x.size(-1)});
  return torch::addmm(residual.reshape({rows.size(0), w.size(0)}), rows, w.t())
      .view(residual.sizes());
}

}  // namespace

torch::Tensor linear_forward(const GemmPlan& plan, const torch::Tensor& x, const LinearWeights& w,
                             const c10::optional<torch::Tensor>& bias,
                             const std::vector<torch::Tensor>& params, const std::string& chain,
                             const LayerTerms& terms) {
  const bool alone = chain.empty() && !given(bias) && !given(terms.gate);
  if (!plan.skinny && !plan.hopper && alone && given(terms.residual) &&
      plan.products == Precision::kIeee) {
    return products_plus(x, w.weight, *terms.residual);
  }
  // On the CPU a float32 Linear with a chain is one op: the linear_epilogue op's CPU twin runs the
  // chain over the products it owns, where a second op would allocate an output of its own. (Not
  // where that twin would take the small-batch products, which this plan did not choose.)
  const bool one_cpu_op = x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
                          plan.products == Precision::kIeee && !chain.empty() &&
                          !given(terms.gate) &&
                          !cpu::small_batch_takes(rows_of(x), w.weight.is_contiguous());
  torch::Tensor out;
  if (!plan.skinny && !plan.hopper && !one_cpu_op) {
    // On the CPU the bias goes into the GEMM, as eager's Linear adds it: the BLAS then has no
    // output to zero first, a Linear without a chain needs no second pass, and the products
    // carry eager's bits.
    const bool bias_in_gemm = !x.is_cuda() && plan.products == Precision::kIeee && given(bias);
    const torch::Tensor y =
        bias_in_gemm ? torch::linear(x, w.weight, *bias) : linear_products(x, w, plan.products);
    const c10::optional<torch::Tensor> pass_bias = bias_in_gemm ? c10::nullopt : bias;
    // A Linear alone (a gate, a chunked Linear before its chain): no pass that would only copy.
    out = chain.empty() && !given(pass_bias)
              ? (given(terms.gate) ? y * *terms.gate : y.contiguous())
              : fused_epilogue(y, pass_bias, params, chain, terms.gate);
  } else {
    out = whole_forward(plan, x, w, bias, params, chain);
    if (given(terms.gate)) out = out * *terms.gate;
  }
  return given(terms.residual) ? *terms.residual + out : out;
}

torch::Tensor linear_forward_gated(const GemmPlan& plan, const torch::Tensor& x,
                                   const LinearWeights& w, const c10::optional<torch::Tensor>& bias,
                                   const std::vector<torch::Tensor>& params,
                                   const std::string& chain, const LinearWeights& gate,
                                   const c10::optional<torch::Tensor>& gate_bias,
                                   const std::function<torch::Tensor()>& gate_forward) {
#ifdef FUSEDLINEAR_WITH_CUDA
  if (plan.hopper) {
    const Precision products = whole_forward_products(plan);
    const WholeForwardWeights a = whole_forward_weights(plan, w, products);
    const WholeForwardWeights b = whole_forward_weights(plan, gate, products);
    return fused_gemm_epilogue_gated(x, a.w, a.w_lo, a.w_third, b.w, b.w_lo, b.w_third, bias,
                                     gate_bias, params, chain, products);
  }
#endif
  return linear_forward(plan, x, w, bias, params, chain, LayerTerms{gate_forward(), c10::nullopt});
}

}  // namespace fusedlinear
