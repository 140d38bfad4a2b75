// Checking the command line (cli.h): numbers in their ranges, options the command uses, and
// the output files, all before any work is done. Each failure is a UsageError naming the option.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "app/cli.h"
#include "kernels/ops/chain_spec.h"
#include "modules/output/output_file.h"

namespace fusedlinear {
namespace {

// Which commands use an option; an option given to a command that does not use it is an error
// rather than silently ignored. Options not listed are used by every command.
struct OptionUse {
  const char* option;
  std::vector<std::string> commands;
};
const OptionUse kOptionUses[] = {{"input", {"compare", "run"}},
                                 {"output", {"run"}},
                                 {"batch", {"compare", "bench"}},
                                 {"iters", {"compare", "bench"}},
                                 {"warmup", {"compare", "bench"}},
                                 {"atol", {"compare", "bench"}},
                                 {"rtol", {"compare", "bench"}},
                                 {"json", {"compare", "bench"}},
                                 {"batches", {"bench"}},
                                 {"dtypes", {"bench"}},
                                 {"csv", {"bench"}},
                                 {"plot", {"bench"}},
                                 {"cuda-graph", {"bench"}}};
// Options without a value.
const char* const kFlags[] = {"no-strict", "overwrite", "cuda-graph", "help"};
// The options that name files the program writes.
const char* const kOutputs[] = {"output", "json", "csv", "plot"};

// "a, b and c".
std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  }
  return out;
}

bool given(const cxxopts::ParseResult& parsed, const char* option) {
  return parsed.count(option) > 0;
}

}  // namespace

int64_t parse_integer(const std::string& option, const std::string& text, int64_t min_value,
                      int64_t max_value) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  const bool digits = !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) ||
                                        (text[0] == '-' && text.size() > 1));
  if (!digits || *end != '\0' || errno == ERANGE || value < min_value || value > max_value) {
    const std::string range =
        min_value == 1
            ? "a positive integer up to " + std::to_string(max_value)
            : "an integer from " + std::to_string(min_value) + " to " + std::to_string(max_value);
    throw UsageError(option + ": expected " + range + ", got " + spec_excerpt(text, 0));
  }
  return value;
}

uint64_t parse_unsigned(const std::string& option, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || *end != '\0' ||
      errno == ERANGE) {
    throw UsageError(option + ": expected an integer from 0 to " +
                     std::to_string(std::numeric_limits<uint64_t>::max()) + ", got " +
                     spec_excerpt(text, 0));
  }
  return value;
}

double parse_tolerance(const std::string& option, const std::string& text) {
  // The decimal numbers of a chain spec (docs/CHAINS.md): strtod alone would take 0x10 or INF.
  const double value = is_spec_number(text) ? std::strtod(text.c_str(), nullptr) : -1;
  if (!std::isfinite(value) || value < 0) {
    // Escaped and excerpted as a chain spec's text is: the value goes to a terminal or a log.
    throw UsageError(option + ": expected a finite number >= 0, got " + spec_excerpt(text, 0));
  }
  return value;
}

int max_threads() {
  const unsigned hardware = std::thread::hardware_concurrency();
  return kThreadsPerHardwareThread * int(std::clamp(hardware, 1u, 65536u));
}

int parse_threads(const std::string& text) {
  const int most = max_threads();
  try {
    return int(parse_integer("--threads", text, 1, most));
  } catch (const UsageError&) {
    throw UsageError("--threads: expected a positive integer up to " + std::to_string(most) + " (" +
                     std::to_string(kThreadsPerHardwareThread) + " x the " +
                     std::to_string(most / kThreadsPerHardwareThread) + " hardware threads), got " +
                     spec_excerpt(text, 0));
  }
}

// Each option's value is given once, not empty and not the next option (cxxopts takes
// `--batch --iters 3` as --batch "--iters").
void check_option_values(const cxxopts::ParseResult& parsed) {
  for (const auto& argument : parsed.arguments()) {
    const std::string& key = argument.key();
    const std::string option = "--" + key;
    if (key == "command") continue;
    if (parsed.count(key) > 1) throw UsageError(option + ": given more than once");
    if (std::find(std::begin(kFlags), std::end(kFlags), key) != std::end(kFlags)) continue;
    const std::string& value = argument.value();
    if (value.empty()) throw UsageError(option + ": expected a value, got an empty one");
    if (value.size() > 2 && value.compare(0, 2, "--") == 0) {
      throw UsageError(option + ": expected a value, got the option '" + value + "'");
    }
  }
}

// Each option is one `command` uses, and means something with the others given.
void check_option_uses(const cxxopts::ParseResult& parsed, const std::string& command) {
  for (const OptionUse& use : kOptionUses) {
    if (!given(parsed, use.option)) continue;
    if (std::find(use.commands.begin(), use.commands.end(), command) == use.commands.end()) {
      throw UsageError("--" + std::string(use.option) + ": not used by " + command + " (only by " +
                       join(use.commands) + ")");
    }
  }
  for (const char* option : {"weights-key", "no-strict", "strip-prefix"}) {
    if (given(parsed, option) && !given(parsed, "weights")) {
      throw UsageError("--" + std::string(option) + ": needs --weights");
    }
  }
  if (command == "compare" && given(parsed, "batch") && given(parsed, "input")) {
    throw UsageError("--batch: not used with --input (the input's rows are the batch)");
  }
  if (given(parsed, "batch") && given(parsed, "batches")) {
    throw UsageError("--batch and --batches: give one of them");
  }
  if (given(parsed, "dtype") && given(parsed, "dtypes")) {
    throw UsageError("--dtype and --dtypes: give one of them");
  }
  if (given(parsed, "overwrite") &&
      std::none_of(std::begin(kOutputs), std::end(kOutputs),
                   [&](const char* output) { return given(parsed, output); })) {
    throw UsageError("--overwrite: no output file is given (--output, --json, --csv or --plot)");
  }
}

// The run's output files, each checked before any work is done, and no two the same.
void check_output_files(const cxxopts::ParseResult& parsed, const Settings& s) {
  std::vector<std::pair<std::string, std::string>> outputs;  // option, path
  for (const char* option : kOutputs) {
    if (given(parsed, option)) outputs.emplace_back(option, parsed[option].as<std::string>());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      if (same_output_path(outputs[i].second, outputs[j].second)) {
        throw UsageError("--" + outputs[i].first + " and --" + outputs[j].first +
                         " name the same file (" + outputs[j].second +
                         "); give each output its own path");
      }
    }
  }
  for (const auto& [option, path] : outputs) {
    try {
      check_output_path(path, s.overwrite, {s.weights, s.input});
    } catch (const OutputError& e) {
      throw UsageError("--" + option + " " + e.what());
    }
  }
}

std::optional<torch::ScalarType> dtype_named(const std::string& name) {
  for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    if (name == dtype_name(dtype)) return dtype;
  }
  return std::nullopt;
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return "float32";
    case torch::kFloat16:
      return "float16";
    case torch::kBFloat16:
      return "bfloat16";
    default:
      return c10::toString(dtype);
  }
}

double default_tolerance(torch::ScalarType dtype) {
  if (dtype == torch::kFloat16) return 1e-2;
  if (dtype == torch::kBFloat16) return 5e-2;
  return 1e-4;
}

void write_for_option(const std::string& option, const std::function<void()>& write) {
  try {
    write();
  } catch (const OutputError& e) {
    throw UsageError(option + " " + e.what());
  }
}

}  // namespace fusedlinear
