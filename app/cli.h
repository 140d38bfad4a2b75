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
// check_output_path accepts (modules/output/output_file.h), the run's inputs being --weights and
// --input.
void check_output_files(const cxxopts::ParseResult& parsed, const Settings& settings);

// Names of the run's settings (options.cpp).
// The dtype named "float32", "float16" or "bfloat16" (dtype_name's names); nullopt otherwise.
std::optional<torch::ScalarType> dtype_named(const std::string& name);
// "float32", "float16", "bfloat16".
std::string dtype_name(torch::ScalarType dtype);
// Default atol = rtol of the fused-vs-eager check, per dtype: 1e-4 in float32 (the tolerance
// the reference models are held to);
// the half types differ by design, since eager rounds after every op and the fused op once at
// the end: a few units in the last place of 11 (float16) or 8 (bfloat16) bits.
double default_tolerance(torch::ScalarType dtype);

// The most --threads accepts: kThreadsPerHardwareThread times the hardware's threads (more only
// oversubscribes the cores, and a run crawls for minutes).
constexpr int kThreadsPerHardwareThread = 4;
int max_threads();
// --threads' value, a positive integer up to max_threads(); a UsageError saying the bound.
int parse_threads(const std::string& text);

// Runs `write`, which writes the file of `option` ("--output", "--json", ...): an OutputError
// becomes a UsageError naming the option ("--json r.json: cannot write: No space left on
// device").
void write_for_option(const std::string& option, const std::function<void()>& write);

}  // namespace fusedlinear
