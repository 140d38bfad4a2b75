// What the command line asked for, shared by the commands (compare, run, bench).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cxxopts.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "modules/models.h"

namespace fusedlinear {

// A bad command line or a bad value: reported as one line on stderr, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Settings {
  std::string command;              // compare | run | bench
  std::vector<std::string> models;  // from --model, `all` expanded, or the model --weights holds
  std::string weights;              // empty: seeded random parameters
  std::string weights_key;
  bool strict = true;
  std::string input, output;
  bool overwrite = false;
  int64_t batch = 0;
  // Given, or the device's defaults; with --weights, 0 when not given (taken from the file).
  int64_t in_features = 0, out_features = 0;
  bool shape_defaulted = false;  // the user gave no shape: the device's defaults were used
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat32;
  uint64_t seed = 0;
  int iters = 0, warmup = 0;
  int threads = 0;  // --threads; 0: libtorch's default
  double atol = 0, rtol = 0;
  bool tolerance_given = false;  // --atol or --rtol set: every path's verdict counts
  std::string json;
  // The fused GEMM's precisions (--precision; `all` expanded); float32 runs only for any but ieee.
  std::vector<Precision> precisions = {Precision::kIeee};
  int64_t bf16x3_min_rows = LinearEpilogueModel::kDefaultBf16x3MinRows;
};

// Each command: returns the process exit code; throws UsageError or LoadError on bad input.
int run_compare(const Settings& settings);
int run_run(const Settings& settings);
// bench has options of its own: added to the parser by add_bench_options, read from `parsed`.
void add_bench_options(cxxopts::Options& options);
int run_bench(const Settings& settings, const cxxopts::ParseResult& parsed);

// Helpers the commands share (common.cpp).
// The model `name` for this run: seeded-random parameters, or those of settings.weights (read
// once, strictness per settings), on the run's device and in its dtype, the weight laid out as
// nn.Linear lays it out. Prints the loader's notices to stderr, once.
std::shared_ptr<LinearEpilogueModel> build_model(const std::string& name, const Settings& settings);
// For the fused path on a GPU: times the bias-free GEMM x @ W^T with the weight as it is and
// re-laid (output-major <-> input-major, LinearEpilogueModel::weight_in), in
// turns, 10 calls each after 3 warm-up, and keeps the faster layout. Returns a line saying
// which and the two median times. On the CPU it changes nothing and says so.
std::string choose_weight_layout(LinearEpilogueModel& model, const torch::Tensor& x);
// The run's input: settings.input when given (checked against in_features), otherwise
// torch.rand(batch, in_features) drawn from the CPU generator where build_model left it, as
// `torch.manual_seed(seed); model = Model(...); x = torch.rand(batch, in_features)` does in
// Python. Call it right after build_model. (Reseeding here would draw x from the same numbers
// as the weight's first rows, which makes x @ W^T's diagonal ~15 instead of ~0.3.) On the run's
// device and dtype.
torch::Tensor build_input(const Settings& settings, int64_t in_features);
// Runs fn; a c10::Error from libtorch (typically an op with no kernel for this dtype on this
// device, e.g. float16 matmul on the CPU in libtorch 1.13) becomes a UsageError saying which
// model, dtype and device could not run and why.
void run_in_context(const std::string& model, const Settings& settings,
                    const std::function<void()>& fn);
// The model whose keys settings.weights holds (swish_chain has add_value, mish_mish linear.*).
std::string detect_model(const Settings& settings);
// Sets `precision` on the model (and the batch below which bf16x3 runs ieee, from settings).
void configure_precision(LinearEpilogueModel& model, Precision precision, const Settings& settings);
// What the fused GEMM runs for `rows` rows: "bf16x3", or "ieee (bf16x3 from 2 rows)" when the
// model falls back, and so on.
std::string gemm_description(const LinearEpilogueModel& model, int64_t rows);
// Whether a path's allclose verdict counts toward the exit code: always for the float32-grade
// precisions (ieee, bf16x3) and when the user set --atol/--rtol; tf32 and bf16 are outside the
// default 1e-4 by design and are only reported.
bool verdict_counts(Precision precision, const Settings& settings);

// One output against another (`want`: eager's, or a float64 evaluation): largest absolute and
// relative differences over the positions where both are finite (relative to max(|want|, atol),
// so values near zero are judged by the absolute difference, as allclose does), NaN and +-inf
// counts of each, whether those positions and values match, and allclose(got, want, rtol, atol)
// with NaN equal to NaN.
struct OutputDifference {
  double max_abs = 0, max_rel = 0;
  int64_t got_nonfinite = 0, want_nonfinite = 0;
  bool nonfinite_match = true;
  bool allclose = true;
};
OutputDifference compare_outputs(const torch::Tensor& got, const torch::Tensor& want, double atol,
                                 double rtol);
// A report's NaN/inf column: "0"; "3 (same)" when the reference has them at the same positions;
// "3 (ref 0)" when it does not.
std::string nonfinite_cell(const OutputDifference& d);

// "float32", "float16", "bfloat16".
std::string dtype_name(torch::ScalarType dtype);
// "libtorch 2.11.0, CUDA 13.0, NVIDIA H200" or, on the CPU, "libtorch 1.13.1, CPU AMD EPYC (2
// threads); GEMM: <blas_description()>; fused ops: avx512 loop".
std::string platform_description(const torch::Device& device);
// The BLAS that libtorch's CPU GEMM calls and the threads it may use, e.g. "OpenBLAS 0.3.21
// DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64, pthreads, Haswell kernels, 2 threads
// (/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3)". The first call warns on stderr, in
// one line, when it is the reference BLAS.
std::string blas_description();
// --threads N: libtorch's threads (at::set_num_threads) and, where the BLAS keeps threads of its
// own (OpenBLAS, BLIS), the BLAS's. 0 changes nothing.
void set_cpu_threads(int threads);

}  // namespace fusedlinear
