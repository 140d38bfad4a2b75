// LayeredModel: a torch::nn::Module for a model of layers (kernels/ops/model_spec.h's ModelSpec:
// one Linear and its chain, or several layers, gated pairs and a residual among them), with the
// Python model's state-dict keys. Each Linear runs as a LinearChain (linear_chain.h): its fused
// forward on every path (the CPU loops; cuBLAS and the fused epilogue, the small-batch kernels
// and the Hopper GEMM on a GPU), in the model's precision. A gated pair runs both Linears' fused
// forwards and multiplies; a Linear split in halves (chunk(2, -1)) runs its GEMM once and the
// chain on its half.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/math/precision.h"
#include "kernels/ops/chain_registry.h"
#include "kernels/ops/gemm_plan.h"
#include "modules/linear_chain.h"

namespace fusedlinear {

// A layered model as the whole-model op (ops.h: fused_model, torch.ops.fusedlinear.model) takes
// it: each Linear's W and parts, its bias, the chains' parameters, the canonical spec, the
// precision and the kernel asked for.
struct ModelOpArguments {
  std::vector<torch::Tensor> weights;
  std::vector<c10::optional<torch::Tensor>> biases;
  std::vector<torch::Tensor> params;
  std::string spec;
  Precision precision = Precision::kIeee;
  GemmKernel gemm = GemmKernel::kAuto;
};

class LayeredModelImpl : public torch::nn::Module {
 public:
  // One layer: chain(linear(x)), times gate(x) for a gated pair (gate: a Linear of its own, run
  // with no chain), or with half 0 or 1, the chain on that half of linear's output times the
  // other half.
  struct Layer {
    std::shared_ptr<LinearChainImpl> linear, gate;
    int half = -1;
  };

  // The model `spec` describes: in_features, then each layer's output width in `widths` (one a
  // layer; a chunked Linear is twice its layer's width). Its parameters drawn as PyTorch's
  // constructors draw them, layer by layer, from `generator`; registered under the Python keys.
  // Throws std::invalid_argument for widths that do not fit the spec (a residual of other
  // widths).
  LayeredModelImpl(ModelSpec spec, const std::vector<int64_t>& widths,
                   at::Generator generator = at::detail::getDefaultCPUGenerator());

  const ModelSpec& spec() const { return spec_; }
  const std::vector<Layer>& layers() const { return layers_; }
  // Every LinearChain of the model, layer by layer (a gate after its layer's Linear).
  std::vector<LinearChainImpl*> linears() const;
  // The one LinearChain of a one-Linear model; throws std::invalid_argument for any other.
  LinearChainImpl& single_linear() const;

  // The fused forward: the whole model in the fused-MLP kernel where it was asked for
  // (set_gemm_kernel(GemmKernel::kMlp)) and takes the model, or under auto where that measured
  // faster (gemm_plan.h: choose_mlp), else each Linear as its plan says.
  torch::Tensor forward(const torch::Tensor& x);
  // libtorch's ops, one per Python op, in the Python order: the baseline.
  torch::Tensor forward_eager(const torch::Tensor& x);
  // Each Linear by libtorch (addmm, bias included), each chain by the fused op: what the custom
  // op alone gives.
  torch::Tensor forward_eager_gemms(const torch::Tensor& x);
  // The Linears alone, as libtorch runs them, on inputs of their widths (for timing the GEMMs).
  void run_gemms(const torch::Tensor& x);
  // The arguments of the whole-model op for this model in its precision and kernel (the split
  // weights shared, not copied); forward_op(x) runs that op, which equals forward(x) under auto
  // and mlp. Throws std::invalid_argument for a one-Linear model (the per-Linear ops run it).
  ModelOpArguments op_arguments();
  torch::Tensor forward_op(const torch::Tensor& x);
  // The forward in float64 (the chains from the functors' float64 forms).
  torch::Tensor reference(const torch::Tensor& x);

  // Each LinearChain's setting (linear_chain.h).
  void set_precision(Precision precision);
  void set_bf16x3_min_rows(int64_t rows);
  void set_gemm_kernel(GemmKernel kernel);
  // Whether forward(x) runs the fused-MLP kernel, and why (gemm_plan.h: choose_mlp; "not asked
  // for" under cublas, skinny and hopper).
  MlpChoice mlp_choice(const torch::Tensor& x);
  // Why forward(x) does not run the fused-MLP kernel (mlp_choice's reason); empty where it runs it.
  std::string mlp_refusal(const torch::Tensor& x);
  // What forward(x) runs: "fused MLP, ..." or each Linear's plan, "; " between Linears ("ieee, CPU
  // GEMM").
  std::string gemm_description(const torch::Tensor& x);
  // Bytes the split weights take (0 for ieee and tf32).
  int64_t split_weight_bytes();
  // Multiply-adds of one row's forward (the GEMMs').
  double flops_per_row();

  int64_t in_features();
  int64_t out_features();

 private:
  // The kernel every Linear was set to; kCublas where they differ (each Linear then runs alone).
  GemmKernel model_kernel() const;
  // Whether forward(x) goes to the whole-model op: the fused-MLP kernel asked for (the op runs it
  // or says why not), or under auto where choose_mlp takes it for this model and x.
  bool may_run_mlp(const torch::Tensor& x);
  // The model as the fused-MLP kernel's plan sees it (the whole-model op builds the same query
  // from its arguments).
  MlpQuery mlp_query(const torch::Tensor& x);

  ModelSpec spec_;
  std::vector<Layer> layers_;
  // Auto's last fused-MLP choice, for the query it answers.
  KeptAnswer<MlpQuery, bool> kept_mlp_choice_;
};
TORCH_MODULE(LayeredModel);

// The state-dict keys of `spec`'s model (one Linear or layered), in Python's order.
std::vector<std::string> layered_model_keys(const ModelSpec& spec);

}  // namespace fusedlinear
