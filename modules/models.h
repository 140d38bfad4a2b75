// torch::nn::Module equivalents of the two reference PyTorch models (weights/export.py defines
// them in Python).
//
// Each registers its parameters under the Python state-dict keys and has two forwards:
//   forward        the GEMM without bias, in the model's precision (float32 by libtorch, or
//                  from tensor-core products: set_precision), then one fused op for everything
//                  after it (bias, add_value and the activation chain: kernels/ops.h); or, for
//                  few rows on a GPU, all of it in one op that reads W once (set_gemm_kernel);
//   forward_eager  the unfused libtorch ops, one per Python op, in the Python order: the
//                  baseline the fused path is compared against.
// To deploy your own Linear + elementwise model, copy one of these and its epilogue.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "modules/gemm_plan.h"

namespace fusedlinear {

// How the Linear's weight W [out, in] lies in memory: nn.Linear's row-major [out, in]
// (output-major), or the transpose of a contiguous [in, out] (input-major).
enum class WeightLayout { kOutputMajor, kInputMajor };

// What the CLI, the benchmark and the tests need from any model here.
class LinearEpilogueModel : public torch::nn::Module {
 public:
  // The Python ops after nn.Linear, unfused (input: the Linear's output, bias included).
  virtual torch::Tensor epilogue_eager(const torch::Tensor& linear_out) = 0;
  // The same as one fused op on y, adding `bias` first where given (none when y holds it).
  virtual torch::Tensor fused_chain(const torch::Tensor& y,
                                    const c10::optional<torch::Tensor>& bias) = 0;
  // The model's nn.Linear.
  virtual torch::nn::Linear& linear() = 0;
  // The whole forward as one op with the skinny kernel (kernels/ops.h: fused_linear_swish_chain),
  // from W given as `w` (the weight, or its bfloat16 hi part) and `w_lo` (bf16x3's lo part).
  // Models that define it say so with has_fused_linear(); the others always run cuBLAS and
  // their fused_chain.
  virtual bool has_fused_linear() const { return false; }
  virtual torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& w,
                                     const c10::optional<torch::Tensor>& w_lo);

  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor forward_eager(const torch::Tensor& x);
  // x @ W^T, the GEMM of `forward` when it runs cuBLAS (no bias), in gemm_precision(rows of x).
  torch::Tensor matmul_without_bias(const torch::Tensor& x);
  // fused_chain(matmul_out, the Linear's bias): what `forward` applies after its GEMM.
  torch::Tensor epilogue_fused(const torch::Tensor& matmul_out);

  // The GEMM's precision (modules/precision.h; default kIeee, PyTorch's float32 semantics).
  // bf16x3 and bf16 split W into bfloat16 parts once, here, and keep them beside the float32
  // weight on its device (bf16x3: hi and lo, as many bytes as W; bf16: hi, half as many); they
  // are split again if the weight changes (a state-dict load, .to(), store_weight). The state
  // dict stays float32. Needs a float32 model for any mode but ieee (TORCH_CHECK).
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  // What the cuBLAS GEMM runs for an input of `rows` rows: the precision, except bf16x3 below
  // bf16x3_min_rows(), where its three products, each reading its part of W, are slower than
  // ieee reading W once (docs/RESULTS.md); ieee is the more accurate of the two. gemm_plan says
  // what forward runs, the skinny kernel included.
  Precision gemm_precision(int64_t rows) const;
  void set_bf16x3_min_rows(int64_t rows);
  int64_t bf16x3_min_rows() const { return bf16x3_min_rows_; }

  // Which kernel runs the GEMM (modules/precision.h; default kAuto) and, for kAuto, the most
  // rows the skinny kernel takes: by default the crossover measured on an H200 for the model's
  // dtype and each precision (default_skinny_max_rows), or what set_skinny_max_rows gave, for
  // every precision (0: never).
  void set_gemm_kernel(GemmKernel kernel) { gemm_kernel_ = kernel; }
  GemmKernel gemm_kernel() const { return gemm_kernel_; }
  void set_skinny_max_rows(int64_t rows);
  int64_t skinny_max_rows(Precision precision);
  int64_t skinny_max_rows() { return skinny_max_rows(precision_); }

  // What forward(x) runs: the GEMM's precision and whether the skinny kernel runs it.
  //   kCublas: cuBLAS (or the CPU's GEMM) in gemm_precision(rows).
  //   kSkinny: the skinny kernel in the precision as set, on any device.
  //   kAuto:   on a GPU, the skinny kernel where it measured faster and can read W as it lies
  //            (output-major, or the split parts); bf16x3 runs ieee's skinny kernel up to
  //            kBf16x3IeeeSkinnyMaxRows rows (where ieee's takes them): as fast there and more
  //            accurate. Elsewhere cuBLAS.
  struct GemmPlan {
    Precision precision = Precision::kIeee;
    bool skinny = false;
  };
  GemmPlan gemm_plan(const torch::Tensor& x);
  bool runs_skinny(const torch::Tensor& x) { return gemm_plan(x).skinny; }
  // The most rows at which the skinny kernel measured faster than cuBLAS at 8192 -> 8192 on an
  // H200 (docs/RESULTS.md): float32 ieee 32, bf16x3 64, tf32 1, bf16 8; 16-bit models 0.
  static int64_t default_skinny_max_rows(Precision precision, torch::ScalarType dtype);
  // Up to this many rows bf16x3 runs ieee's skinny kernel (where ieee's limit takes them): faster
  // than bf16x3's own tensor-core kernel there (docs/RESULTS.md, both forced in one run), and
  // 20-50x more accurate.
  static constexpr int64_t kBf16x3IeeeSkinnyMaxRows = 8;
  // The most rows at which auto runs bf16x3 as ieee's skinny kernel: kBf16x3IeeeSkinnyMaxRows,
  // within ieee's own limit (gemm_plan; reports say "bf16x3 from" one row more).
  int64_t bf16x3_ieee_skinny_max_rows() {
    return std::min(kBf16x3IeeeSkinnyMaxRows, skinny_max_rows(Precision::kIeee));
  }
  // The smallest batch at which bf16x3 measured faster than ieee on an H200 at 8192 -> 8192:
  // 108 us against 119 at 2 rows; at 1 row cuBLAS's float32 kernel takes 66 us.
  static constexpr int64_t kDefaultBf16x3MinRows = 2;
  // Bytes the split weight takes on the weight's device (0 for ieee and tf32).
  int64_t split_weight_bytes();

  // The Linear's weight W [out, in] in `layout`: W itself when it is laid out so, else a copy.
  // Input-major is the same [out, in] tensor laid out as the transpose of a contiguous [in, out]
  // one, so that x @ W^T runs cuBLAS's NN GEMM instead of its TN one. On an H200 in float32
  // that measured 1.4% faster at 1024 x 8192 -> 8192 and 10-27% at batch 1-64, but 10% slower
  // at batch 256 (docs/RESULTS.md), so the app times both and keeps the faster
  // (choose_weight_layout).
  torch::Tensor weight_in(WeightLayout layout);
  // Stores `weight`, W's values in some layout (from weight_in), as the Linear's weight: the
  // values, shape and state-dict entry stay; both forwards use the weight as it is laid out;
  // moving the model keeps the layout, loading a state dict into it too.
  void store_weight(const torch::Tensor& weight);
  // store_weight(weight_in(layout)); needs one extra copy of W while it converts.
  void store_weight_in(WeightLayout layout) { store_weight(weight_in(layout)); }
  // kInputMajor when W is laid out input-major, else kOutputMajor.
  WeightLayout weight_layout();

  int64_t in_features();
  int64_t out_features();

 private:
  // W's bfloat16 parts (lo undefined for bf16), and the weight they were split from: a tensor
  // on its storage, which keeps that address from being reused by a new weight, and the
  // weight's version counter then (in-place changes such as a state-dict load bump it).
  struct SplitWeight {
    torch::Tensor hi, lo, source;
    int64_t source_version = -1;
  };
  // The parts of the current weight, split again first if it changed. Thread-safe.
  SplitWeight split_weight();

  Precision precision_ = Precision::kIeee;
  int64_t bf16x3_min_rows_ = kDefaultBf16x3MinRows;
  GemmKernel gemm_kernel_ = GemmKernel::kAuto;
  int64_t skinny_max_rows_ = -1;  // -1: default_skinny_max_rows
  std::mutex split_mutex_;
  SplitWeight split_;
};

// Linear -> + add_value -> Swish -> Tanh -> GELU(erf) -> Hardtanh(-1, 1).
// Keys: matmul.weight [out, in], matmul.bias [out], add_value [out].
// The constructors draw the parameters as PyTorch's do (nn.Linear: the weight, then the bias,
// uniform in +-1/sqrt(in_features); add_value: standard normal), in the Python order, from
// `generator`: by default PyTorch's global one, as `Model(in, out)` in Python.
class SwishChainImpl : public LinearEpilogueModel {
 public:
  SwishChainImpl(int64_t in_features, int64_t out_features,
                 at::Generator generator = at::detail::getDefaultCPUGenerator());
  torch::Tensor epilogue_eager(const torch::Tensor& linear_out) override;
  torch::Tensor fused_chain(const torch::Tensor& y,
                            const c10::optional<torch::Tensor>& bias) override;
  torch::nn::Linear& linear() override { return matmul; }
  bool has_fused_linear() const override { return true; }
  torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& w,
                             const c10::optional<torch::Tensor>& w_lo) override;

  torch::nn::Linear matmul{nullptr};
  torch::Tensor add_value;
};
TORCH_MODULE(SwishChain);

// Linear -> Mish -> Mish. Keys: linear.weight [out, in], linear.bias [out].
class MishMishImpl : public LinearEpilogueModel {
 public:
  MishMishImpl(int64_t in_features, int64_t out_features,
               at::Generator generator = at::detail::getDefaultCPUGenerator());
  torch::Tensor epilogue_eager(const torch::Tensor& linear_out) override;
  torch::Tensor fused_chain(const torch::Tensor& y,
                            const c10::optional<torch::Tensor>& bias) override;
  torch::nn::Linear& linear() override { return linear_; }
  bool has_fused_linear() const override { return true; }
  torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& w,
                             const c10::optional<torch::Tensor>& w_lo) override;

 private:
  torch::nn::Linear linear_{nullptr};
};
TORCH_MODULE(MishMish);

// The models this library defines, registered in one place (models.cpp): the CLI (--model,
// inferring the model from a file's keys), bench, the tests and, checked against it by a test,
// weights/export.py take their names, keys and constructors from here. A model added to the
// list is known to all of them; its chains and their launch shapes are in kernels/epilogues.h.
struct ModelInfo {
  std::string name;      // as the CLI and weights/export.py call it
  std::string computes;  // its forward, in a line
  // The model with PyTorch's initialisation, drawn from `generator`.
  std::shared_ptr<LinearEpilogueModel> (*construct)(int64_t in_features, int64_t out_features,
                                                    at::Generator generator);
};
const std::vector<ModelInfo>& registered_models();

// The registered names, in the order `--model all` runs them.
std::vector<std::string> model_names();

// The state-dict keys of model `name`, in Python's order. Throws std::invalid_argument for an
// unknown name.
std::vector<std::string> model_keys(const std::string& name);

// A model by name ("swish_chain" or "mish_mish"), its parameters drawn as PyTorch's
// constructor draws them from `generator`, which is left where the draws end: what Python's
// `torch.manual_seed(seed); model = Model(...)` does with the global generator, here with one
// of the caller's (at::detail::createCPUGenerator(seed)), so that PyTorch's global generator is
// neither used nor reseeded. Throws std::invalid_argument for an unknown name.
std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, at::Generator generator);
// The same from a fresh generator seeded with `seed`: the same parameters as Python's
// `torch.manual_seed(seed); model = Model(in_features, out_features)`.
std::shared_ptr<LinearEpilogueModel> make_model(const std::string& name, int64_t in_features,
                                                int64_t out_features, uint64_t seed);

}  // namespace fusedlinear
