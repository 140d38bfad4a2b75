// The fusedlinear program (cli_main.h): runs Linear -> activation-chain models through libtorch's
// eager ops and through the fused ops, and compares outputs and timings.
//
//   fusedlinear [compare] [options]   eager vs fused on one input: errors, verdict, timings
//   fusedlinear run --weights W --input X --output Y   fused forward of W on X, saved to Y
//   fusedlinear bench [options]       timings over models x batch sizes x dtypes
#include "app/cli_main.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <sstream>

#include "app/cli.h"
#include "app/memory.h"
#include "app/model_setup.h"
#include "app/platform.h"
#include "kernels/cpu/small_batch.h"
#include "modules/loader/torch_file.h"

namespace fusedlinear {
namespace {

const char* kCommands[] = {"compare", "run", "bench"};

// CPU defaults keep `fusedlinear` with no arguments well under a minute on 2 cores; a GPU runs
// the reference workload (1024 x 8192 -> 8192).
struct Defaults {
  int64_t batch, in_features, out_features;
  int iters, warmup;
};
constexpr Defaults kCudaDefaults{1024, 8192, 8192, 50, 10};
constexpr Defaults kCpuDefaults{128, 1024, 1024, 10, 2};

torch::ScalarType parse_dtype(const std::string& name) {
  if (const auto dtype = dtype_named(name)) return *dtype;
  throw UsageError("--dtype: expected float32, float16 or bfloat16, got '" + name + "'");
}

torch::Device parse_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda") {
    if (!torch::cuda::is_available()) {
#ifdef FUSEDLINEAR_WITH_CUDA
      throw UsageError("--device cuda: no CUDA device is visible");
#else
      throw UsageError(
          "--device cuda: this build has no CUDA (libtorch was CPU-only at build time)");
#endif
    }
    return torch::kCUDA;
  }
  throw UsageError("--device: expected auto, cpu or cuda, got '" + name + "'");
}

// --model NAME or all: registered models.
std::vector<ModelSpec> parse_models(const std::string& name) {
  if (name == "all") return registered_models();
  for (const ModelSpec& known : registered_models()) {
    if (name == known.name) return {known};
  }
  std::string expected;
  for (const auto& known : model_names()) expected += (expected.empty() ? "" : ", ") + known;
  throw UsageError("--model: expected " + expected + " or all, got '" + name + "'");
}

// A list option's values in the order given ("bf16x3,ieee"), or `all` of them: "ieee",
// "bf16x3,ieee", "all" for --precision, "cublas,skinny" for --gemm. run takes one value.
template <class T, class Parse>
std::vector<T> parse_list(const std::string& option, const std::string& one,
                          const std::string& text, const std::string& command,
                          const std::vector<T>& all, const std::string& expected, Parse parse) {
  std::vector<T> values;
  if (text == "all") {
    values = all;
  } else {
    for (size_t start = 0;;) {
      const size_t comma = text.find(',', start);
      const auto value = parse(text.substr(start, comma - start));
      if (!value) {
        throw UsageError(option + ": expected " + expected +
                         std::string(command == "run" ? "" : ", a comma-separated list or all") +
                         ", got '" + text + "'");
      }
      values.push_back(*value);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (command == "run" && values.size() != 1) {
    throw UsageError(option + ": run takes one " + one + ", got '" + text + "'");
  }
  return values;
}

bool given(const cxxopts::ParseResult& parsed, const char* option) {
  return parsed.count(option) > 0;
}

// A number option: absent, the fallback; otherwise an integer in [min_value, kMaxCount].
int64_t count_option(const cxxopts::ParseResult& parsed, const std::string& name, int64_t fallback,
                     int64_t min_value) {
  if (!parsed.count(name)) return fallback;
  return parse_integer("--" + name, parsed[name].as<std::string>(), min_value, kMaxCount);
}

// "swish_chain, mish_mish".
std::string registered_names() {
  std::string names;
  for (const auto& name : model_names()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

void add_options(cxxopts::Options& options) {
  // clang-format off
  options.add_options()
      ("model", "a registered model (" + registered_names() + ") or all (default: all, or "
       "the model --weights holds)", cxxopts::value<std::string>())
      ("chain", "a chain spec, the ops after the Linear, e.g. 'gelu(tanh),silu,clamp(-2,2)' "
       "(docs/CHAINS.md); default: the model's, or the chain --weights carries",
       cxxopts::value<std::string>())
      ("weights", "state dict saved from Python (torch.save or .safetensors); default: "
       "seeded-random parameters", cxxopts::value<std::string>())
      ("weights-key", "the key of the state dict inside a checkpoint dict",
       cxxopts::value<std::string>())
      ("strip-prefix", "remove this prefix from the keys of --weights (e.g. model.)",
       cxxopts::value<std::string>())
      ("no-strict", "load the keys that match; list missing and unexpected ones")
      ("input", "compare, run: input tensor saved with torch.save (default: torch.rand, "
       "seeded)", cxxopts::value<std::string>())
      ("output", "run: where to save the output (torch.load reads it)",
       cxxopts::value<std::string>())
      ("overwrite", "replace output files that already exist (regular files only)")
      ("batch", "compare, bench: rows of the input (GPU default 1024, CPU 128)",
       cxxopts::value<std::string>())
      ("in-features", "GPU default 8192, CPU 1024; with --weights: from the file",
       cxxopts::value<std::string>())
      ("out-features", "GPU default 8192, CPU 1024; with --weights: from the file",
       cxxopts::value<std::string>())
      ("device", "auto, cpu or cuda", cxxopts::value<std::string>()->default_value("auto"))
      ("dtype", "float32, float16 or bfloat16",
       cxxopts::value<std::string>()->default_value("float32"))
      ("seed", "seed of the random parameters and input (default 0)",
       cxxopts::value<std::string>())
      ("iters", "compare, bench: timed runs (GPU default 50, CPU 10)",
       cxxopts::value<std::string>())
      ("warmup", "compare, bench: untimed runs first (GPU default 10, CPU 2)",
       cxxopts::value<std::string>())
      ("atol", "compare, bench: absolute tolerance (default 1e-4; float16 1e-2, bfloat16 5e-2)",
       cxxopts::value<std::string>())
      ("rtol", "compare, bench: relative tolerance (default as --atol)",
       cxxopts::value<std::string>())
      ("json", "compare, bench: also write the results as JSON to this file",
       cxxopts::value<std::string>())
      ("threads", "CPU threads of libtorch's ops and the BLAS, at most " +
       std::to_string(kThreadsPerHardwareThread) + " x the hardware threads (" +
       std::to_string(max_threads()) + " here; default: libtorch's)",
       cxxopts::value<std::string>())
      ("precision", "the fused GEMM: ieee (float32, default), bf16x3 (float32-grade from bf16 "
       "tensor cores for inputs of moderate range), bf16x6 (float32-grade for any range, about "
       "twice bf16x3's time), tf32 or bf16 (faster, less accurate); compare and bench: a "
       "comma-separated list or all", cxxopts::value<std::string>()->default_value("ieee"))
      ("bf16x3-min-batch", "with cuBLAS, bf16x3 and bf16x6 run ieee below this many rows "
       "(default 2: at "
       "one row cuBLAS's float32 GEMM, reading W once, is faster on an H200)",
       cxxopts::value<std::string>())
      ("gemm", std::string("the fused forward's kernel: auto (default: on a GPU the skinny "
       "kernel, which reads W once and fuses the chain, up to the batch where it measured "
       "faster; on sm_90 the Hopper GEMM for bf16x3 and bf16x6 at the batches where it measured "
       "faster; cuBLAS elsewhere; on a CPU with AVX2, float32 models in ieee at up to ") +
       std::to_string(cpu::kSmallBatchMaxRows) + " rows: the CPU's small-batch products, which "
       "read W once), cublas, skinny, hopper (the Hopper GEMM with the chain in its epilogue, "
       "on sm_90 for 16-bit models and the bf16, bf16x3 and bf16x6 modes; cuBLAS elsewhere), "
       "or mlp (a layered model's whole forward in one kernel, every layer at most 256 wide, "
       "on a GPU, ieee float32 or 16-bit models; each Linear as auto plans it elsewhere); "
       "compare and bench: a comma-separated list or all",
       cxxopts::value<std::string>()->default_value("auto"))
      ("jit", "on or off: a run-time chain's CUDA kernels (the epilogue, the small-batch "
       "kernels, the Hopper GEMM, a layered model's fused-MLP kernel) "
       "compiled by NVRTC as a declaration's are, at their first use, and cached on disk "
       "(default: on, unless FUSEDLINEAR_JIT=0; off: the interpreter's kernels)",
       cxxopts::value<std::string>())
      ("h,help", "this help")
      ("command", "compare (default), run or bench", cxxopts::value<std::string>());
  // clang-format on
  add_bench_options(options);
  options.parse_positional({"command"});
  options.positional_help("[compare|run|bench]");
}

Settings parse_command_line(int argc, char** argv, cxxopts::Options& options,
                            cxxopts::ParseResult& parsed) {
  try {
    parsed = options.parse(argc, argv);
  } catch (const cxxopts::exceptions::missing_argument&) {
    // cxxopts takes any next word as the value, so only the last argument can lack one; said as
    // the other refusals of a value are.
    throw UsageError(std::string(argv[argc - 1]) +
                     ": expected a value, got the end of the command line");
  }
  // The values first: in `[compare] --batch --iters 3` the fault is the missing value, not a
  // command or an extra argument "3".
  check_option_values(parsed);
  if (!parsed.unmatched().empty()) {
    throw UsageError("unexpected argument '" + parsed.unmatched().front() + "'");
  }
  Settings s;
  s.command = parsed.count("command") ? parsed["command"].as<std::string>() : "compare";
  if (std::find(std::begin(kCommands), std::end(kCommands), s.command) == std::end(kCommands)) {
    throw UsageError("unknown command '" + s.command + "' (expected compare, run or bench)");
  }
  check_option_uses(parsed, s.command);

  const auto text = [&](const char* name) {
    return given(parsed, name) ? parsed[name].as<std::string>() : "";
  };
  if (given(parsed, "jit")) {
    // The library reads the variable when it first meets a chain: set before any is parsed.
    const std::string jit = text("jit");
    if (jit != "on" && jit != "off") throw UsageError("--jit " + jit + ": expected on or off");
    ::setenv("FUSEDLINEAR_JIT", jit == "on" ? "1" : "0", 1);
  }
  s.weights = text("weights");
  s.weights_key = text("weights-key");
  s.strip_prefix = text("strip-prefix");
  s.strict = !given(parsed, "no-strict");
  s.input = text("input");
  s.output = text("output");
  s.overwrite = given(parsed, "overwrite");
  s.json = text("json");
  s.device = parse_device(parsed["device"].as<std::string>());
  s.dtype = parse_dtype(parsed["dtype"].as<std::string>());
  s.seed = given(parsed, "seed") ? parse_unsigned("--seed", text("seed")) : 0;

  const Defaults& d = s.device.is_cuda() ? kCudaDefaults : kCpuDefaults;
  s.shape_defaulted =
      !given(parsed, "batch") && !given(parsed, "in-features") && !given(parsed, "out-features");
  s.batch = count_option(parsed, "batch", d.batch, 1);
  const bool from_file = !s.weights.empty();
  s.in_features = count_option(parsed, "in-features", from_file ? 0 : d.in_features, 1);
  s.out_features = count_option(parsed, "out-features", from_file ? 0 : d.out_features, 1);
  s.iters = int(count_option(parsed, "iters", d.iters, 1));
  s.warmup = int(count_option(parsed, "warmup", d.warmup, 0));
  s.atol =
      given(parsed, "atol") ? parse_tolerance("--atol", text("atol")) : default_tolerance(s.dtype);
  s.rtol = given(parsed, "rtol") ? parse_tolerance("--rtol", text("rtol")) : s.atol;
  s.tolerance_given = given(parsed, "atol") || given(parsed, "rtol");
  s.threads = given(parsed, "threads") ? parse_threads(text("threads")) : 0;
  s.precisions = parse_list<Precision>(
      "--precision", "precision", parsed["precision"].as<std::string>(), s.command,
      all_precisions(), "ieee, bf16x3, bf16x6, tf32, bf16", parse_precision);
  s.gemm_kernels = parse_list<GemmKernel>("--gemm", "kernel", parsed["gemm"].as<std::string>(),
                                          s.command, all_gemm_kernels(),
                                          "auto, cublas, skinny, hopper, mlp", parse_gemm_kernel);
  s.bf16x3_min_rows = count_option(parsed, "bf16x3-min-batch", kDefaultBf16x3MinRows, 1);
  if (s.precisions != std::vector<Precision>{Precision::kIeee} && s.dtype != torch::kFloat32 &&
      s.command != "bench") {
    throw UsageError("--precision " + text("precision") +
                     ": the tensor-core modes take float32 models, got --dtype " +
                     dtype_name(s.dtype) + " (use --precision ieee)");
  }
  check_output_files(parsed, s);
  if (given(parsed, "model") && given(parsed, "chain")) {
    throw UsageError("--model and --chain: give one of them");
  }
  if (given(parsed, "chain")) {
    s.models = {chain_model(text("chain"), s)};
    s.model_source = "--chain";
  } else if (given(parsed, "model")) {
    s.models = parse_models(parsed["model"].as<std::string>());
    for (const ModelSpec& model : s.models) check_carried_chain(model, s);
    s.model_source = "given";
  } else if (!s.weights.empty()) {
    s.models = {detect_model(s)};
    s.model_source = s.models.front().compiled ? "inferred from the keys of --weights"
                                               : "the chain --weights carries";
  } else {
    s.models = registered_models();
    s.model_source = "all, the default";
  }
  return s;
}

// c10::Error messages carry a backtrace and "Exception raised from ..." lines: keep the first.
std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

int fail(const std::string& message) {
  std::cerr << "fusedlinear: error: " << first_line(message) << "\n";
  return 2;
}

// --- ending the process promptly, whatever the BLAS's threads are doing ---

// Everything printed, then _exit: exit() would run the libraries' destructors, OpenBLAS's
// among them, which joins threads that spin forever on an allocation failing under ulimit -v.
// Output files are complete, or removed, before this is called.
[[noreturn]] void exit_now(int code) {
  std::cout.flush();
  if ((std::fflush(stdout) != 0 || std::ferror(stdout)) && code != 2) {
    std::cerr << "fusedlinear: error: cannot write the report to standard output\n";
    code = 2;
  }
  std::cerr.flush();
  std::fflush(stderr);
  ::_exit(code);
}

// An allocation failing where nothing catches it (libtorch's static initialisers, before main;
// a thread inside an op) ends in std::terminate: said in one line as out of memory, exit 2.
std::terminate_handler g_default_terminate = nullptr;
[[noreturn]] void terminate_handler() {
  if (const std::exception_ptr error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::bad_alloc&) {
      static const char kLine[] =
          "fusedlinear: error: out of memory on cpu (where nothing could catch it, e.g. as "
          "libtorch started); free memory or raise the memory limit\n";
      if (::write(2, kLine, sizeof kLine - 1) < 0) {
        // Nothing more to say it with.
      }
      ::_exit(2);
    } catch (...) {
    }
  }
  if (g_default_terminate) g_default_terminate();
  std::abort();
}
void install_terminate_handler(int, char**, char**) {
  g_default_terminate = std::set_terminate(terminate_handler);
}
// In .preinit_array, which runs before any shared library's initialisers (libtorch's).
__attribute__((section(".preinit_array"),
               used)) void (*const g_install_terminate_handler)(int, char**,
                                                                char**) = install_terminate_handler;

int run_program(int argc, char** argv) {
  cxxopts::Options options(
      "fusedlinear", "Linear -> activation-chain models, eager against fused, on CPU or CUDA");
  Settings settings;  // what is known of the run, for errors after parsing (out of memory)
  try {
    add_options(options);
    // Help before anything is parsed or checked, so that a bad value does not hide it.
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
        std::cout << options.help({"", "bench"}) << "\n";
        return 0;
      }
    }
    prepare_blas_for_memory_limits();  // before anything large is allocated
    cxxopts::ParseResult parsed;
    settings = parse_command_line(argc, argv, options, parsed);
    set_cpu_threads(settings.threads);
    if (settings.command == "run") return run_run(settings);
    if (settings.command == "bench") return run_bench(settings, parsed);
    return run_compare(settings);
  } catch (const UsageError& e) {
    return fail(e.what());
  } catch (const LoadError& e) {
    return fail(e.what());
  } catch (const cxxopts::exceptions::exception& e) {
    return fail(std::string(e.what()) + " (see --help)");
  } catch (const c10::Error& e) {
    return fail(usage_error(e, settings, "").what());
  } catch (const std::bad_alloc&) {
    return fail(out_of_memory_error(settings).what());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // namespace

int app_main(int argc, char** argv) {
  // A write beyond ulimit -f fails with EFBIG, reported for its option, instead of a signal.
  std::signal(SIGXFSZ, SIG_IGN);
  // exit() called from a library (libgomp's fatal errors) ends as promptly as main does.
  ::on_exit([](int status, void*) { exit_now(status); }, nullptr);
  exit_now(run_program(argc, argv));
}

}  // namespace fusedlinear
