// fusedlinear: runs the two reference models through libtorch's eager ops and through the fused
// epilogue ops, and compares outputs and timings.
//
//   fusedlinear [compare] [options]   eager vs fused on one input: errors, verdict, timings
//   fusedlinear run --weights W --input X --output Y   fused forward of W on X, saved to Y
//   fusedlinear bench [options]       timings over models x batch sizes x dtypes
#include <cstdlib>
#include <iostream>
#include <new>
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
      ("strip-prefix", "remove this prefix from the keys of --weights (e.g. model.)",
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
      ("atol", "absolute tolerance (default 1e-4; float16 1e-2, bfloat16 5e-2)",
       cxxopts::value<std::string>())
      ("rtol", "relative tolerance (default as --atol)", cxxopts::value<std::string>())
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
  s.strip_prefix = parsed.count("strip-prefix") ? parsed["strip-prefix"].as<std::string>() : "";
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
  s.atol = tolerance(parsed, "atol", default_tolerance(s.dtype));
  s.rtol = tolerance(parsed, "rtol", parsed.count("atol") ? s.atol : default_tolerance(s.dtype));
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
  Settings settings;  // what is known of the run, for errors after parsing (out of memory)
  try {
    cxxopts::ParseResult parsed;
    settings = parse_command_line(argc, argv, options, parsed);
    if (parsed.count("help")) {
      std::cout << options.help({"", "bench"}) << "\n";
      return 0;
    }
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
