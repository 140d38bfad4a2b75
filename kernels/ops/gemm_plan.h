// The fused forward's GEMM: the kernel asked for (LinearChain::set_gemm_kernel) and the one
// function that decides what a forward runs (plan_gemm), which the module, the reports and bench
// all call. The precision modes are kernels/math/precision.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/mlp/mlp_call.h"
#include "kernels/math/precision.h"

namespace fusedlinear {

// Which kernel runs the fused forward's GEMM (LinearChain::set_gemm_kernel).
//   auto    the skinny kernel on a GPU for inputs of up to skinny_max_rows() rows (where it
//           measured faster: it reads W once and fuses the epilogue); above them bf16x3 and bf16x6
//           on the Hopper GEMM where it takes the forward, at the rows where it measured faster
//           (from SkinnyThresholds::bf16x3_hopper_min and bf16x6_hopper_min rows), for a
//           compiled chain, a declaration's or one compiled at run time (a run-time chain's
//           interpreter in its epilogue measured slower than cuBLAS and the chain's own kernel);
//           cuBLAS otherwise; on a CPU with AVX2, models in ieee (float32 or 16-bit) at up to
//           cpu::kSmallBatchMaxRows rows: the skinny kernel's CPU twin, whose small-batch
//           products (kernels/cpu/small_batch.h) read W once; a layered model's whole forward in
//           the fused-MLP kernel where it takes the model in a form and mode that measured faster
//           than the per-layer path (choose_mlp);
//   cublas  always cuBLAS (or libtorch's CPU GEMM), then the fused epilogue;
//   skinny  always the skinny kernel (any number of rows, W then read once per tile of x's rows:
//           16 for float32 W, 64 on the tensor cores; on the CPU its twin: the same products in
//           float32, by the small-batch products at up to cpu::kSmallBatchMaxRows rows, and the
//           fused epilogue).
//   hopper  the Hopper GEMM, the chain in its epilogue (kernels/cuda/gemm/), where it takes the
//           forward: a GPU of compute capability 9.0, in_features a multiple of 8, the bf16,
//           bf16x3 and bf16x6 modes of float32 models or any mode of 16-bit ones (their own
//           products); cuBLAS otherwise, the plan's reason says why.
//   mlp     a layered model's whole forward in one kernel (kernels/cuda/mlp/): every layer at most
//           256 wide, at most 8 layers, run-time chains, on a GPU, float32 models in ieee (float32
//           FMAs) and 16-bit models (tensor cores); where it cannot (mlp_refusal says why), and
//           for a Linear on its own, each Linear as auto plans it.
enum class GemmKernel { kAuto, kCublas, kSkinny, kHopper, kMlp };

inline const std::vector<GemmKernel>& all_gemm_kernels() {
  static const std::vector<GemmKernel> all = {GemmKernel::kAuto, GemmKernel::kCublas,
                                              GemmKernel::kSkinny, GemmKernel::kHopper,
                                              GemmKernel::kMlp};
  return all;
}

inline const char* gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kAuto:
      return "auto";
    case GemmKernel::kCublas:
      return "cublas";
    case GemmKernel::kSkinny:
      return "skinny";
    case GemmKernel::kHopper:
      return "hopper";
    case GemmKernel::kMlp:
      return "mlp";
  }
  return "?";
}

// "auto", "cublas", "skinny", "hopper", "mlp"; nothing for any other name.
inline std::optional<GemmKernel> parse_gemm_kernel(const std::string& name) {
  for (const GemmKernel kernel : all_gemm_kernels()) {
    if (name == gemm_kernel_name(kernel)) return kernel;
  }
  return std::nullopt;
}

// Whose kernels run a Linear's chain on a GPU: a declaration's (compiled with the library), a
// run-time chain's compiled by NVRTC at their first call (kernels/cuda/jit/: the epilogue, the
// small-batch kernels and the Hopper GEMM), or the interpreter's (a run-time chain's where
// compiling is off or NVRTC is missing).
enum class ChainKernelKind { kDeclaration, kCompiledAtRunTime, kInterpreter };

// The device a forward runs on, as the plan needs it.
struct GemmDevice {
  bool gpu = false;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  int64_t shared_bytes_per_block = 0;  // the most a block may ask for
  bool cpu_small_batch = false;        // on a CPU: its small-batch products run here
};

// What auto runs on one architecture, as measured: the most rows at which each mode's small-batch
// kernel measured faster than cuBLAS with the epilogue (0: never), up to how many rows bf16x3 and
// bf16x6 run ieee's kernel instead of their products (faster there, and at least as accurate: at
// most ieee's own rows), and the rows from which bf16x3 and bf16x6 run on the Hopper GEMM (never
// where 0), where its promoted sums measured closer to float64 than cuBLAS's products and, for
// bf16x3, faster.
struct SkinnyThresholds {
  int compute_major;
  int64_t ieee, bf16x3, tf32, bf16;  // float32 models
  int64_t half_models;               // float16 and bfloat16 models
  int64_t bf16x3_as_ieee, bf16x6_as_ieee;
  int64_t bf16x3_hopper_min = 0, bf16x6_hopper_min = 0;
};
// The measured rows for `device`'s architecture; null where none were measured (auto then runs
// cuBLAS at every batch).
const SkinnyThresholds* skinny_thresholds(const GemmDevice& device);

// Below this many rows bf16x3 and bf16x6 with cuBLAS run ieee (default 2: at one row cuBLAS's
// float32 GEMM, reading W once, beats the three products, which each read their part of W).
constexpr int64_t kDefaultBf16x3MinRows = 2;

// What one forward's GEMM may take.
struct GemmQuery {
  Precision precision = Precision::kIeee;  // the mode set
  GemmKernel kernel = GemmKernel::kAuto;   // the kernel asked for
  int64_t rows = 0;                        // of the input
  int64_t in_features = 0;                 // of the Linear
  bool float32_model = true;               // the bf16 modes and the thresholds are float32's
  GemmDevice device;
  // W lies output-major, as the small-batch kernels read it (ieee's and tf32's read W itself; the
  // bfloat16 parts always lie so).
  bool weight_output_major = true;
  int64_t skinny_max_rows = -1;  // an override of the table for every mode (auto then leaves the
                                 // Hopper GEMM out); -1: the table's
  int64_t bf16x3_min_rows = kDefaultBf16x3MinRows;
  ChainKernelKind chain_kernels = ChainKernelKind::kDeclaration;
};

// What the forward runs: the products (bf16x3 may run ieee's), the kernel (the small-batch
// kernels, the Hopper GEMM, or cuBLAS / the CPU's GEMM followed by the fused epilogue), and why.
struct GemmPlan {
  Precision products = Precision::kIeee;
  bool skinny = false;
  bool hopper = false;
  std::string reason;
  // "bf16x3, cuBLAS", "ieee, skinny (bf16x3 from 9 rows)", "ieee, CPU GEMM", "bf16, Hopper GEMM";
  // on a GPU, for a run-time chain, whose kernels run it: "bf16x3, Hopper GEMM, chain compiled at
  // run time", "bf16x3, cuBLAS, chain by the interpreter".
  std::string description;
};

GemmPlan plan_gemm(const GemmQuery& query);

// Whether two queries ask the same of plan_gemm, field by field: it then gives the same plan.
bool same_query(const GemmQuery& a, const GemmQuery& b);

// Why the Hopper GEMM cannot take `query`'s forward ("it runs on compute capability 9.0 only,
// not 8.0"); empty where it can.
std::string hopper_refusal(const GemmQuery& query);

// What the fused-MLP kernel (GemmKernel::kMlp) needs to know of a layered model to take it.
struct MlpQuery {
  Precision precision = Precision::kIeee;
  bool float32_model = true;
  GemmDevice device;
  // The model's widths: its input's, then each layer's output (a chunked Linear's half).
  std::vector<int64_t> widths;
  // Whether each layer's chain is a declaration's compiled chain (the kernel runs the
  // interpreter's op lists).
  std::vector<bool> compiled_chains;
  std::vector<bool> gated;  // whether each layer forms a gate's product too
  int64_t rows = 0;         // x's rows
};

// How the fused-MLP kernel runs a model it takes (kernels/cuda/mlp/mlp_call.h: MlpForm):
// clusters on sm_90 and newer while a cluster for each tile fits one wave of the multiprocessors
// (each block reads a slice of every W, where a block a tile reads all of it alone, and few rows
// wait on that read); past that, models on the tensor cores (16-bit models; float32 models in bf16
// or bf16x3) at most mlp_resident_max_width wide whose weights fit a block's shared memory
// resident; other models on the tensor cores whose chunks of W fit it (mlp_streamed_bytes)
// streamed; else a block a tile.
cuda::MlpForm mlp_form(const MlpQuery& query);
// What the form runs, for reports: "fused MLP, tensor cores, weights resident in shared memory".
std::string mlp_description(const MlpQuery& query);

// Why the fused-MLP kernel cannot run `query`'s model ("layer 2 is 512 wide; it takes at most
// 256"); empty where it can.
std::string mlp_refusal(const MlpQuery& query);

// Whether a layered model's forward runs in the fused-MLP kernel under `kernel`, and why: asked
// for (kMlp) where the kernel takes the model; under auto where it takes it in a form and mode
// that measured faster than the per-layer path (docs/RESULTS.md, "Small MLPs"): the cluster
// form (one launch where the per-layer path makes several at few rows), the resident form of
// 16-bit models at most 64 wide, and float32 models in bf16x3 on the tensor cores; never under
// the other kernels.
struct MlpChoice {
  bool fused = false;
  std::string reason;  // for reports: why it runs, or why each Linear runs as its plan says
};
MlpChoice choose_mlp(const MlpQuery& query, GemmKernel kernel);
// Whether two queries ask the same of choose_mlp and mlp_form, field by field.
bool same_query(const MlpQuery& a, const MlpQuery& b);

// The most rows the small-batch kernels take under auto for `query`'s mode and model (the
// override, or the table's; 0 off the GPU or where nothing was measured).
int64_t skinny_max_rows(const GemmQuery& query, Precision precision);

// The last query asked and its answer, kept: a call that asks the same (same_query) takes that
// answer, where plan_gemm and choose_mlp would decide again and write their reasons. Safe to share
// between threads; an answer handed out stays valid after the next query replaces it.
template <class Query, class Answer>
class KeptAnswer {
 public:
  template <class AnswerOf>
  std::shared_ptr<const Answer> answer_for(const Query& query, const AnswerOf& answer_of) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (last_ && same_query(last_->query, query)) return {last_, &last_->answer};
    }
    auto made = std::make_shared<const Asked>(Asked{query, answer_of(query)});
    const std::lock_guard<std::mutex> lock(mutex_);
    last_ = made;
    return {made, &made->answer};
  }

 private:
  struct Asked {
    Query query;
    Answer answer;
  };
  std::mutex mutex_;
  std::shared_ptr<const Asked> last_;
};

// A Linear's last plan: a forward like the one before it (the same rows, device and settings)
// takes that plan.
class KeptPlan {
 public:
  std::shared_ptr<const GemmPlan> plan_for(const GemmQuery& query) {
    return kept_.answer_for(query, &plan_gemm);
  }

 private:
  KeptAnswer<GemmQuery, GemmPlan> kept_;
};

}  // namespace fusedlinear
