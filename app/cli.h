// What the command line asked for, shared by the commands (compare, run, bench).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cxxopts.hpp>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "modules/layered_model.h"
#include "modules/linear_chain.h"

namespace fusedlinear {

// A bad command line or a bad value: reported as one line on stderr, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Settings {
  std::string command;  // compare | run | bench
  // From --model (`all` expanded), --chain, or the model --weights holds.
  std::vector<ModelSpec> models;
  std::string model_source;  // how: "given", "inferred from the keys of --weights", ...
  std::string weights;       // empty: seeded random parameters
  std::string weights_key;
  std::string strip_prefix;  // --strip-prefix: removed from the file's keys before matching
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
  int iters = 0, warmup = 0;  // at most kMaxCount (checked when parsed)
  int threads = 0;            // --threads; 0: libtorch's default
  double atol = 0, rtol = 0;
  bool tolerance_given = false;  // --atol or --rtol set: every path's verdict counts
  std::string json;
  // The fused GEMM's precisions (--precision; `all` expanded); float32 runs only for any but ieee.
  std::vector<Precision> precisions = {Precision::kIeee};
  int64_t bf16x3_min_rows = kDefaultBf16x3MinRows;
  // The fused forward's GEMM kernels (--gemm; `all` expanded): each precision runs with each.
  std::vector<GemmKernel> gemm_kernels = {GemmKernel::kAuto};
};

// Each command: returns the process exit code; throws UsageError or LoadError on bad input.
int run_compare(const Settings& settings);
int run_run(const Settings& settings);
// bench has options of its own: added to the parser by add_bench_options, read from `parsed`.
void add_bench_options(cxxopts::Options& options);
int run_bench(const Settings& settings, const cxxopts::ParseResult& parsed);

// The largest batch, feature count, --iters and --warmup: GEMM dimensions are 32-bit in
// cuBLAS, and a count of runs needs no more.
constexpr int64_t kMaxCount = 2147483647;

// Checking the command line (options.cpp), before any work; each throws a UsageError naming
// the option.
// `text` as a base-10 integer in [min_value, max_value], without wrapping ("--iters: expected
// a positive integer up to 2147483647, got '4294967296'").
int64_t parse_integer(const std::string& option, const std::string& text, int64_t min_value,
                      int64_t max_value);
// The same for the full range of uint64_t (--seed).
uint64_t parse_unsigned(const std::string& option, const std::string& text);
// A tolerance: a finite number >= 0.
double parse_tolerance(const std::string& option, const std::string& text);
// Each option's value is given once, is not empty and is not the next option (cxxopts takes
// `--batch --iters 3` as --batch "--iters").
void check_option_values(const cxxopts::ParseResult& parsed);
// Each option is one `command` uses, and means something with the others given (--batch not
// with --input, --weights-key only with --weights, ...).
void check_option_uses(const cxxopts::ParseResult& parsed, const std::string& command);
// The output files (--output, --json, --csv, --plot): no two the same, and each one
// check_output_path accepts (modules/output_file.h), the run's inputs being --weights and
// --input.
void check_output_files(const cxxopts::ParseResult& parsed, const Settings& settings);

// Helpers the commands share (common.cpp).
// The dtype named "float32", "float16" or "bfloat16" (dtype_name's names); nullopt otherwise.
std::optional<torch::ScalarType> dtype_named(const std::string& name);
// "float32", "float16", "bfloat16".
std::string dtype_name(torch::ScalarType dtype);
// Default atol = rtol of the fused-vs-eager check, per dtype: 1e-4 in float32 (the tolerance
// the reference models are held to);
// the half types differ by design, since eager rounds after every op and the fused op once at
// the end: a few units in the last place of 11 (float16) or 8 (bfloat16) bits.
double default_tolerance(torch::ScalarType dtype);

// The model `spec` describes for this run: seeded-random parameters, or those of settings.weights
// (read once, strictness per settings), on the run's device and in its dtype, the weight laid out
// as nn.Linear lays it out. Prints the loader's notices to stderr, once. The parameters are drawn
// from a generator of its own, seeded with settings.seed (PyTorch's global one is not touched);
// `rest_of_stream`, if given, receives that generator where the draws left it, for
// build_input.
std::shared_ptr<LayeredModelImpl> build_model(const ModelSpec& spec, const Settings& settings,
                                              at::Generator* rest_of_stream = nullptr);
// The model's input and output widths: its Linears' in --weights (checked as build_model checks
// them), else --in-features and --out-features.
std::pair<int64_t, int64_t> model_in_out(const ModelSpec& spec, const Settings& settings);
// build_model's one LinearChain, for the commands that time a model of one Linear (bench); a
// UsageError for a layered model.
std::shared_ptr<LinearChainImpl> build_linear_model(const ModelSpec& spec,
                                                    const Settings& settings);
// For the fused path on a GPU: times the bias-free GEMM x @ W^T with the weight as it is and
// re-laid (output-major <-> input-major, LinearEpilogueModel::weight_in), in
// turns, 10 calls each after 3 warm-up, and keeps the faster layout. Returns a line saying
// which and the two median times. Where the model runs the skinny kernel for x, which reads W
// output-major, and on the CPU, it changes nothing and says so. Call it after configure_fused.
std::string choose_weight_layout(LinearChainImpl& model, const torch::Tensor& x);
// The same for each Linear of a model, each timed on an input of its width.
std::string choose_weight_layout(LayeredModelImpl& model, const torch::Tensor& x);
// The run's input: settings.input when given (checked against in_features), otherwise
// torch.rand(batch, in_features) drawn from `stream`, the generator build_model drew the
// parameters from, as `torch.manual_seed(seed); model = Model(...); x = torch.rand(batch,
// in_features)` does in Python. (A fresh seed would draw x from the same numbers as the
// weight's first rows, which makes x @ W^T's diagonal ~15 instead of ~0.3.) On the run's
// device and dtype.
torch::Tensor build_input(const Settings& settings, int64_t in_features, at::Generator stream);
// A c10::Error from libtorch as a UsageError. Out of memory (CPU or GPU) says how much was
// asked for and what to lower; anything else (typically an op with no kernel for this dtype on
// this device, e.g. float16 matmul on the CPU in libtorch 1.13) says that `what` (e.g.
// "swish_chain in float16 on cpu"; may be empty) could not run, and libtorch's first line.
UsageError usage_error(const c10::Error& error, const Settings& settings, const std::string& what);
// "7.50 GiB", "12 bytes".
std::string byte_size(double bytes);
// The bytes this process may still allocate on `device` (infinity where it cannot tell), and the
// out-of-memory UsageError for `bytes` of `what` that cannot fit there.
double available_bytes(const torch::Device& device);
void check_fits(const Settings& settings, double bytes, const torch::Device& device,
                const std::string& what);
// std::bad_alloc as a UsageError: out of memory, and what to lower.
UsageError out_of_memory_error(const Settings& settings, const std::string& requested = "");
// Runs fn; a c10::Error becomes usage_error(..., "<model> in <dtype> on <device>").
void run_in_context(const std::string& model, const Settings& settings,
                    const std::function<void()>& fn);
// The model settings.weights holds, never guessed: the chain the file carries (its metadata,
// weights/fx_chain.py), else the one registered model whose keys the file's are and whose chain
// parameters name it (swish_chain's add_value; with --no-strict, whose keys it holds). A file of
// a Linear's keys alone fits any chain: a UsageError says to give --model or --chain; one that
// several models fit, to give --model; a LoadError lists the keys when none does.
ModelSpec detect_model(const Settings& settings);
// Throws a UsageError when settings.weights carries a chain other than `model`'s (canonically,
// and after the same Linear): --model NAME contradicting the file.
void check_carried_chain(const ModelSpec& model, const Settings& settings);
// The model of --chain SPEC: its Linear the file's (the one the file's metadata names, else its
// one 2-D "<path>.weight"), or "linear" for seeded-random parameters; each parameter the spec
// names must be in the file (a UsageError lists the keys there), and a chain the file carries
// must be the same (a UsageError otherwise). Throws ChainSpecError for a malformed spec.
ModelSpec chain_model(const std::string& spec, const Settings& settings);
// Sets `precision` and the GEMM `kernel` on the model (and the batch below which bf16x3 with
// cuBLAS runs ieee, from settings).
void configure_fused(LinearChainImpl& model, Precision precision, GemmKernel kernel,
                     const Settings& settings);
void configure_fused(LayeredModelImpl& model, Precision precision, GemmKernel kernel,
                     const Settings& settings);
// What the fused forward runs for input x: "bf16x3, cuBLAS", "ieee, skinny (bf16x3 from 5
// rows)" when the model runs ieee for bf16x3, and so on.
std::string gemm_description(LinearChainImpl& model, const torch::Tensor& x);
// Whether a path's allclose verdict counts toward the exit code: always for the float32-grade
// precisions (ieee, bf16x3) and when the user set --atol/--rtol; tf32 and bf16 are outside the
// default 1e-4 by design and are only reported.
bool verdict_counts(Precision precision, const Settings& settings);

// "NVIDIA H200" on a GPU, "CPU AMD EPYC 9654 (2 threads)" on the CPU.
std::string device_name(const torch::Device& device);
// The CUDA runtime's version, "13.0"; "" without CUDA.
std::string cuda_version();
// "libtorch 2.11.0, CUDA 13.0, NVIDIA H200" or, on the CPU, "libtorch 1.13.1, CPU AMD EPYC (2
// threads); GEMM: <blas_description()>; fused ops: avx512 loop".
std::string platform_description(const torch::Device& device);
// The BLAS that libtorch's CPU GEMM calls and the threads it may use, e.g. "OpenBLAS 0.3.21
// DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64, pthreads, Haswell kernels, 2 threads
// (/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3)". The first call warns on stderr, in
// one line, when it is the reference BLAS.
std::string blas_description();
// --threads N: libtorch's threads (at::set_num_threads) and, where the BLAS keeps threads of its
// own (OpenBLAS, BLIS), the BLAS's (one under a memory limit: prepare_blas_for_memory_limits).
// 0 changes nothing.
void set_cpu_threads(int threads);

// The most --threads accepts: kThreadsPerHardwareThread times the hardware's threads (more only
// oversubscribes the cores, and a run crawls for minutes).
constexpr int kThreadsPerHardwareThread = 4;
int max_threads();
// --threads' value, a positive integer up to max_threads(); a UsageError saying the bound.
int parse_threads(const std::string& text);

// Under an address-space or data limit (ulimit -v, ulimit -d): OpenBLAS retries forever, in a
// loop, when it cannot allocate a thread's work buffer, so a GEMM would hang instead of failing.
// Called first, before anything large is allocated: its GEMMs run on the calling thread only,
// and that thread's buffer is taken now, by one small GEMM, while memory is free. If even that
// cannot finish within seconds, the process ends with the out-of-memory line (exit 2). Changes
// nothing without a limit or with another BLAS.
void prepare_blas_for_memory_limits();

// Runs `write`, which writes the file of `option` ("--output", "--json", ...): an OutputError
// becomes a UsageError naming the option ("--json r.json: cannot write: No space left on
// device").
void write_for_option(const std::string& option, const std::function<void()>& write);

}  // namespace fusedlinear
