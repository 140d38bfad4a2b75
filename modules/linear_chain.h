// LinearChain: a torch::nn::Module for any Linear -> activation-chain model, built from its
// ModelSpec (kernels/ops/model_spec.h: a registered declaration, or a chain spec given at run
// time), with the Python model's state-dict keys.
//
// It has two forwards:
//   forward        the GEMM without bias, in the model's precision (float32 by libtorch, or from
//                  tensor-core products: set_precision), then one fused op for everything after
//                  it (the bias and the chain: kernels/ops/ops.h); or, for few rows on a GPU, all
//                  of it in one op that reads W once (set_gemm_kernel). What runs is plan_gemm's
//                  choice (modules/gemm_plan.h);
//   forward_eager  the unfused libtorch ops, one per Python op, in the Python order: the baseline
//                  the fused path is compared against;
// and a float64 reference (reference), from the functors' own float64 forms.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kernels/ops/chain_registry.h"
#include "kernels/ops/chain_spec.h"
#include "kernels/ops/linear_forward.h"

namespace fusedlinear {

// How the Linear's weight W [out, in] lies in memory: nn.Linear's row-major [out, in]
// (output-major), or the transpose of a contiguous [in, out] (input-major).
enum class WeightLayout { kOutputMajor, kInputMajor };

class LinearChainImpl : public torch::nn::Module {
 public:
  // The model `spec` describes, its parameters drawn as PyTorch's constructors draw them from
  // `generator` (nn.Linear: the weight, then the bias, uniform in +-1/sqrt(in_features); then
  // each chain parameter from a standard normal, in order of first use): by default PyTorch's
  // global generator, as `Model(in, out)` in Python. Registered under the Python keys: the
  // chain's parameters first, then the Linear's (`spec.linear`.weight, .bias).
  // A chain parameter that names the Linear's own tensor (`mul(fc.bias)`) is that tensor, as in
  // Python: neither drawn nor registered again. `bound`: chain parameters that are another
  // module's tensors (another Linear's bias in a layered model), likewise left to bind_param.
  // Throws std::invalid_argument for a parameter naming the Linear's weight, or a tensor of it
  // that it lacks: a chain parameter broadcasts along the features ([out_features], [] or [1]).
  LinearChainImpl(ModelSpec spec, int64_t in_features, int64_t out_features,
                  at::Generator generator = at::detail::getDefaultCPUGenerator(),
                  const std::set<std::string>& bound = {});

  const ModelSpec& spec() const { return spec_; }
  const ParsedChain& chain() const { return chain_; }

  torch::Tensor forward(const torch::Tensor& x);
  // forward(x) [* gate] [+ residual] as a layer adds them (linear_forward.h: LayerTerms): the
  // gate's multiply bitwise forward(x) * gate; the residual rounded once where cuBLAS adds it.
  torch::Tensor forward_with(const torch::Tensor& x, const LayerTerms& terms);
  // forward(x) * gate.forward_without_chain(x), a gated layer (linear_forward.h:
  // linear_forward_gated): one kernel for both products where the plan takes the Hopper GEMM.
  torch::Tensor forward_gated(const torch::Tensor& x, LinearChainImpl& gate);
  torch::Tensor forward_eager(const torch::Tensor& x);
  // The forward in float64 (x, W, b and the parameters upcast; the chain from the functors'
  // float64 forms): the reference of the errors `compare` and `bench` report.
  torch::Tensor reference(const torch::Tensor& x);

  // The Python ops after nn.Linear, unfused (input: the Linear's output, bias included).
  torch::Tensor chain_eager(const torch::Tensor& linear_out);
  // The same as one fused op on y, adding `bias` first where given (none when y holds it).
  torch::Tensor chain_fused(const torch::Tensor& y, const c10::optional<torch::Tensor>& bias,
                            const c10::optional<torch::Tensor>& gate = c10::nullopt);
  // x @ W^T, the GEMM of `forward` when it runs cuBLAS (no bias), in the plan's products.
  torch::Tensor matmul_without_bias(const torch::Tensor& x);
  // The Linear alone (x W^T + bias) as its plan says, no chain: a gate's output, or a chunked
  // Linear's before its chain takes half.
  torch::Tensor forward_without_chain(const torch::Tensor& x);
  // W, and its bfloat16 parts where `products` takes them (split once, kept while W is unchanged).
  LinearWeights weights(Precision products);
  // chain_fused(matmul_out, the Linear's bias): what `forward` applies after its GEMM.
  torch::Tensor epilogue_fused(const torch::Tensor& matmul_out);

  torch::nn::Linear& linear() { return linear_; }
  // The chain's parameter tensors in its slots (ParsedChain::slot_params), as the ops take them.
  std::vector<torch::Tensor> slot_params() const;
  // A chain parameter by its state-dict key (throws std::out_of_range for another key).
  torch::Tensor& param(const std::string& key);
  // Whether the chain parameter `key` is a tensor this chain does not own (the Linear's, or one
  // of `bound`): not drawn nor registered here.
  bool param_is_bound(const std::string& key) const { return bound_.count(key) > 0; }
  // Gives `bound` parameter `key` its tensor (shared, not copied), `what` naming it in messages.
  // Throws std::invalid_argument for a shape a chain parameter cannot take.
  void bind_param(const std::string& key, const torch::Tensor& tensor,
                  const std::string& what = "another module's tensor");

  // The GEMM's precision (modules/gemm_plan.h; default kIeee, PyTorch's float32 semantics).
  // bf16x3, bf16x6 and bf16 split W into bfloat16 parts once, here, and keep them beside the
  // float32 weight on its device (bf16x3: hi and lo, as many bytes as W; bf16x6: hi, mid and lo,
  // 1.5 times as many; bf16: hi, half as many); they
  // are split again if the weight changes (a state-dict load, .to(), store_weight). The state
  // dict stays float32. Needs a float32 model for any mode but ieee (TORCH_CHECK).
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  // Below this many rows bf16x3 and bf16x6 with cuBLAS run ieee (kDefaultBf16x3MinRows).
  void set_bf16x3_min_rows(int64_t rows);
  int64_t bf16x3_min_rows() const { return bf16x3_min_rows_; }
  // Which kernel runs the GEMM (default kAuto) and, for kAuto, the most rows the small-batch
  // kernels take: by default the table's for the device's architecture (gemm_plan.h), or what
  // set_skinny_max_rows gave, for every precision (0: never).
  void set_gemm_kernel(GemmKernel kernel) { gemm_kernel_ = kernel; }
  GemmKernel gemm_kernel() const { return gemm_kernel_; }
  void set_skinny_max_rows(int64_t rows);

  // What forward(x) runs (plan_gemm for this model, x and its device).
  GemmPlan gemm_plan(const torch::Tensor& x);
  bool runs_skinny(const torch::Tensor& x) { return gemm_plan(x).skinny; }
  // Bytes the split weight takes on the weight's device (0 for ieee and tf32).
  int64_t split_weight_bytes();

  // The Linear's weight W [out, in] in `layout`: W itself when it is laid out so, else a copy.
  // Input-major is the same [out, in] tensor laid out as the transpose of a contiguous [in, out]
  // one, so that x @ W^T runs cuBLAS's NN GEMM instead of its TN one: faster at some shapes,
  // slower at others, so the app times both and keeps the faster (choose_weight_layout).
  torch::Tensor weight_in(WeightLayout layout);
  // Stores `weight`, W's values in some layout (from weight_in), as the Linear's weight: the
  // values, shape and state-dict entry stay; both forwards use the weight as it is laid out;
  // moving the model keeps the layout, loading a state dict into it too.
  void store_weight(const torch::Tensor& weight);
  void store_weight_in(WeightLayout layout) { store_weight(weight_in(layout)); }
  WeightLayout weight_layout();

  int64_t in_features();
  int64_t out_features();
  // Whether a declaration's compiled kernels run the chain (else the op list, interpreted or
  // compiled at run time).
  bool compiled_chain() const;

 private:
  // W's bfloat16 parts (lo undefined for bf16, mid for all but bf16x6, whose parts are hi, mid and
  // lo; bf16x3's are hi and lo), and the weight they were split from: a tensor
  // on its storage, which keeps that address from being reused by a new weight, and the
  // weight's version counter then (in-place changes such as a state-dict load bump it).
  struct SplitWeight {
    torch::Tensor hi, mid, lo, source;
    int64_t source_version = -1;
  };
  SplitWeight split_weight();
  GemmQuery gemm_query(const torch::Tensor& x);

  ModelSpec spec_;
  ParsedChain chain_;
  std::string
      chain_name_;  // the ops' chain argument: the model's name where compiled, else the spec
  torch::nn::Linear linear_{nullptr};
  std::map<std::string, torch::Tensor> params_;
  std::set<std::string> bound_;  // keys of params_ whose tensors are the Linear's or bind_param's
  std::vector<std::string> slot_keys_;

  Precision precision_ = Precision::kIeee;
  int64_t bf16x3_min_rows_ = kDefaultBf16x3MinRows;
  GemmKernel gemm_kernel_ = GemmKernel::kAuto;
  int64_t skinny_max_rows_ = -1;  // -1: the table's
  std::mutex split_mutex_;
  SplitWeight split_;
  KeptPlan kept_plan_;
};
TORCH_MODULE(LinearChain);

// The module at attribute path `path`'s parent ("block" for "block.0.weight") below `root`, made
// (empty) where missing: libtorch's names may not hold dots, so a dotted Python path is a chain of
// modules, as in Python.
torch::nn::Module& module_at(torch::nn::Module& root, const std::string& path);
// The last part of a dotted path ("weight" for "block.0.weight").
std::string last_component(const std::string& path);

// A registered model by name ("swish_chain", "mish_mish", ...), its parameters drawn as PyTorch's
// constructor draws them from `generator`, which is left where the draws end: what Python's
// `torch.manual_seed(seed); model = Model(...)` does with the global generator, here with one of
// the caller's (at::detail::createCPUGenerator(seed)), so that PyTorch's global generator is
// neither used nor reseeded. Throws std::invalid_argument for an unknown name.
std::shared_ptr<LinearChainImpl> make_model(const std::string& name, int64_t in_features,
                                            int64_t out_features, at::Generator generator);
// The same from a fresh generator seeded with `seed`.
std::shared_ptr<LinearChainImpl> make_model(const std::string& name, int64_t in_features,
                                            int64_t out_features, uint64_t seed);
// Any model spec (a registered one, or runtime_model's), seeded likewise.
std::shared_ptr<LinearChainImpl> make_model(const ModelSpec& spec, int64_t in_features,
                                            int64_t out_features, uint64_t seed);

// The state-dict keys of `spec`'s model, in Python's order.
std::vector<std::string> model_keys(const ModelSpec& spec);
std::vector<std::string> model_keys(const std::string& name);

}  // namespace fusedlinear
