// fusedlinear: runs the two reference models through libtorch's eager ops and through the fused
// epilogue ops, and compares outputs and timings.
//
//   fusedlinear [compare] [options]   eager vs fused on one input: errors, verdict, timings
//   fusedlinear run --weights W --input X --output Y   fused forward of W on X, saved to Y
//   fusedlinear bench [options]       timings over models x batch sizes x dtypes
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "app/cli.h"
#include "modules/torch_file.h"

namespace fusedlinear {
namespace {

const char* kCommands[] = {"compare", "run", "bench"};

// CPU defaults keep `fusedlinear` with no arguments well under a minute on 2 cores; a GPU runs
// the reference workload (shared/SPEC.md).
struct Defaults {
  int64_t batch, in_features, out_features;
  int iters, warmup;
};
constexpr Defaults kCudaDefaults{1024, 8192, 8192, 50, 10};
constexpr Defaults kCpuDefaults{128, 1024, 1024, 10, 2};

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "float16") return torch::kFloat16;
  if (name == "bfloat16") return torch::kBFloat16;
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

// Numbers are read as text and converted here, so a bad value's message names its option.
int64_t integer(const cxxopts::ParseResult& parsed, const std::string& name, int64_t fallback,
                int64_t min_value) {
  if (!parsed.count(name)) return fallback;
  const std::string text = parsed[name].as<std::string>();
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < min_value) {
    throw UsageError("--" + name + ": expected " +
                     (min_value > 0 ? "a positive integer" : "an integer >= 0") + ", got '" + text +
                     "'");
  }
  return value;
}

int64_t positive(const cxxopts::ParseResult& parsed, const std::string& name, int64_t fallback) {
  return integer(parsed, name, fallback, 1);
}

double tolerance(const cxxopts::ParseResult& parsed, const std::string& name, double fallback) {
  if (!parsed.count(name)) return fallback;
  const std::string text = parsed[name].as<std::string>();
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(value >= 0)) {
    throw UsageError("--" + name + ": expected a number >= 0, got '" + text + "'");
  }
  return value;
}

// Default atol = rtol per dtype: 1e-4 for float32 (shared/SPEC.md); the half types round each
// eager op's result to 8 (bf16) or 11 (fp16) bits while the fused op rounds once, so the two
// legitimately differ by a few units in the last place.
double default_tolerance(torch::ScalarType dtype) {
  if (dtype == torch::kFloat16) return 1e-2;
  if (dtype == torch::kBFloat16) return 5e-2;
  return 1e-4;
}

// "ieee", "bf16x3,ieee", "all", ...: the fused GEMM's precisions, in the order given.
std::vector<Precision> parse_precisions(const std::string& text, const std::string& command) {
  std::vector<Precision> precisions;
  if (text == "all") {
    precisions = all_precisions();
  } else {
    for (size_t start = 0;;) {
      const size_t comma = text.find(',', start);
      const auto precision = parse_precision(text.substr(start, comma - start));
      if (!precision) {
        throw UsageError("--precision: expected ieee, bf16x3, tf32, bf16" +
                         std::string(command == "run" ? "" : ", a comma-separated list or all") +
                         ", got '" + text + "'");
      }
      precisions.push_back(*precision);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (command == "run" && precisions.size() != 1) {
    throw UsageError("--precision: run takes one precision, got '" + text + "'");
  }
  return precisions;
}

std::vector<std::string> parse_models(const std::string& name) {
  if (name == "all") return model_names();
  for (const auto& known : model_names()) {
    if (name == known) return {name};
  }
  throw UsageError("--model: expected swish_chain, mish_mish or all, got '" + name + "'");
}

Settings parse_command_line(int argc, char** argv, cxxopts::Options& options,
                            cxxopts::ParseResult& parsed) {
  // clang-format off
  options.add_options()
      ("model", "swish_chain, mish_mish or all (default: all, or the model --weights holds)",
       cxxopts::value<std::string>())
      ("weights", "state dict saved from Python (torch.save or .safetensors); default: "
       "seeded-random parameters", cxxopts::value<std::string>())
      ("weights-key", "the key of the state dict inside a checkpoint dict",
       cxxopts::value<std::string>())
      ("no-strict", "load the keys that match; list missing and unexpected ones")
      ("input", "input tensor saved with torch.save (default: torch.rand, seeded)",
       cxxopts::value<std::string>())
      ("output", "run: where to save the output (torch.load reads it)",
       cxxopts::value<std::string>())
      ("overwrite", "replace output files that already exist")
      ("batch", "rows of the input (GPU default 1024, CPU 128)", cxxopts::value<std::string>())
      ("in-features", "GPU default 8192, CPU 1024; with --weights: from the file",
       cxxopts::value<std::string>())
      ("out-features", "GPU default 8192, CPU 1024; with --weights: from the file",
       cxxopts::value<std::string>())
      ("device", "auto, cpu or cuda", cxxopts::value<std::string>()->default_value("auto"))
      ("dtype", "float32, float16 or bfloat16",
       cxxopts::value<std::string>()->default_value("float32"))
      ("seed", "seed of the random parameters and input (default 0)",
       cxxopts::value<std::string>())
      ("iters", "timed runs (GPU default 50, CPU 10)", cxxopts::value<std::string>())
      ("warmup", "untimed runs first (GPU default 10, CPU 2)", cxxopts::value<std::string>())
      ("threads", "CPU threads of libtorch's ops and the BLAS (default: libtorch's)",
       cxxopts::value<std::string>())
      ("atol", "absolute tolerance (default 1e-4; float16 1e-2, bfloat16 5e-2)",
       cxxopts::value<std::string>())
      ("rtol", "relative tolerance (default as --atol)", cxxopts::value<std::string>())
      ("precision", "the fused GEMM: ieee (float32, default), bf16x3 (float32-grade from bf16 "
       "tensor cores), tf32 or bf16 (faster, less accurate); compare and bench: a "
       "comma-separated list or all", cxxopts::value<std::string>()->default_value("ieee"))
      ("bf16x3-min-batch", "bf16x3 runs ieee below this many rows (default 2: at one row "
       "cuBLAS's float32 GEMM, reading W once, is faster on an H200)",
       cxxopts::value<std::string>())
      ("json", "also write the results as JSON to this file", cxxopts::value<std::string>())
      ("h,help", "this help")
      ("command", "compare (default), run or bench", cxxopts::value<std::string>());
  // clang-format on
  add_bench_options(options);
  options.parse_positional({"command"});
  options.positional_help("[compare|run|bench]");
  parsed = options.parse(argc, argv);
  if (!parsed.unmatched().empty()) {
    throw UsageError("unexpected argument '" + parsed.unmatched().front() + "'");
  }

  Settings s;
  s.command = parsed.count("command") ? parsed["command"].as<std::string>() : "compare";
  if (std::find(std::begin(kCommands), std::end(kCommands), s.command) == std::end(kCommands)) {
    throw UsageError("unknown command '" + s.command + "' (expected compare, run or bench)");
  }
  s.weights = parsed.count("weights") ? parsed["weights"].as<std::string>() : "";
  s.weights_key = parsed.count("weights-key") ? parsed["weights-key"].as<std::string>() : "";
  s.strict = !parsed.count("no-strict");
  s.input = parsed.count("input") ? parsed["input"].as<std::string>() : "";
  s.output = parsed.count("output") ? parsed["output"].as<std::string>() : "";
  s.overwrite = parsed.count("overwrite") > 0;
  s.json = parsed.count("json") ? parsed["json"].as<std::string>() : "";
  s.device = parse_device(parsed["device"].as<std::string>());
  s.dtype = parse_dtype(parsed["dtype"].as<std::string>());
  s.seed = uint64_t(integer(parsed, "seed", 0, 0));
  if (parsed.count("model")) {
    s.models = parse_models(parsed["model"].as<std::string>());
  } else if (!s.weights.empty()) {
    s.models = {detect_model(s)};
  } else {
    s.models = model_names();
  }

  const Defaults& d = s.device.is_cuda() ? kCudaDefaults : kCpuDefaults;
  s.shape_defaulted =
      !parsed.count("batch") && !parsed.count("in-features") && !parsed.count("out-features");
  s.batch = positive(parsed, "batch", d.batch);
  const bool from_file = !s.weights.empty();
  s.in_features = positive(parsed, "in-features", from_file ? 0 : d.in_features);
  s.out_features = positive(parsed, "out-features", from_file ? 0 : d.out_features);
  s.iters = int(positive(parsed, "iters", d.iters));
  s.warmup = int(integer(parsed, "warmup", d.warmup, 0));
  s.threads = int(positive(parsed, "threads", 0));
  s.atol = tolerance(parsed, "atol", default_tolerance(s.dtype));
  s.rtol = tolerance(parsed, "rtol", parsed.count("atol") ? s.atol : default_tolerance(s.dtype));
  s.tolerance_given = parsed.count("atol") || parsed.count("rtol");
  s.precisions = parse_precisions(parsed["precision"].as<std::string>(), s.command);
  s.bf16x3_min_rows =
      integer(parsed, "bf16x3-min-batch", LinearEpilogueModel::kDefaultBf16x3MinRows, 1);
  const bool float32_only = s.precisions != std::vector<Precision>{Precision::kIeee};
  if (float32_only && s.dtype != torch::kFloat32 && s.command != "bench") {
    throw UsageError("--precision " + parsed["precision"].as<std::string>() +
                     ": the tensor-core modes take float32 models, got --dtype " +
                     dtype_name(s.dtype) + " (use --precision ieee)");
  }
  return s;
}

// c10::Error messages carry a backtrace and "Exception raised from ..." lines: keep the first.
std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

int fail(const std::string& message) {
  std::cerr << "fusedlinear: error: " << first_line(message) << "\n";
  return 2;
}

}  // namespace
}  // namespace fusedlinear

int main(int argc, char** argv) {
  using namespace fusedlinear;
  cxxopts::Options options("fusedlinear",
                           "Eager vs fused epilogues of two Linear models, on CPU or CUDA");
  try {
    cxxopts::ParseResult parsed;
    const Settings settings = parse_command_line(argc, argv, options, parsed);
    if (parsed.count("help")) {
      std::cout << options.help({"", "bench"}) << "\n";
      return 0;
    }
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
    return fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
