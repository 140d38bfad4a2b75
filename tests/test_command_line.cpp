// The command line's checks (app/options.cpp) and the loader's prefix hints as the commands
// give them (app/model_setup.cpp), in process: numbers in their real ranges, options a command does
// not use, output files checked before any work. test_cli runs a few of the same through the
// program, for the one line on stderr and the exit code.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cxxopts.hpp>
#include <fstream>
#include <limits>
#include <sstream>

#include "app/cli.h"
#include "app/model_setup.h"
#include "modules/loader/torch_file.h"
#include "tests/test_files.h"
#include "tests/test_support.h"

namespace fusedlinear {
namespace {

using testing_support::TempDir;

// `line` parsed with the program's option names, values as text as main.cpp declares them.
struct CommandLine {
  explicit CommandLine(const std::string& line) {
    for (const char* name :
         {"model",  "weights",     "weights-key",  "strip-prefix", "input", "output",
          "batch",  "in-features", "out-features", "device",       "dtype", "seed",
          "iters",  "warmup",      "atol",         "rtol",         "json",  "batches",
          "dtypes", "csv",         "plot",         "command"}) {
      options.add_options()(name, "", cxxopts::value<std::string>());
    }
    for (const char* flag : {"no-strict", "overwrite", "cuda-graph"}) {
      options.add_options()(flag, "");
    }
    options.parse_positional({"command"});
    std::istringstream in(line);
    for (std::string word; in >> word;) words.push_back(word);
    std::vector<const char*> argv = {"fusedlinear"};
    for (const auto& word : words) argv.push_back(word.c_str());
    parsed = options.parse(int(argv.size()), argv.data());
  }
  std::string value(const char* name) const {
    return parsed.count(name) ? parsed[name].as<std::string>() : "";
  }

  cxxopts::Options options{"fusedlinear"};
  std::vector<std::string> words;
  cxxopts::ParseResult parsed;
};

// The UsageError the command-line checks give for `line`, "" when they accept it.
std::string refusal(const std::string& line) {
  const CommandLine c(line);
  Settings s;
  s.overwrite = c.parsed.count("overwrite") > 0;
  s.weights = c.value("weights");
  s.input = c.value("input");
  const std::string command = c.parsed.count("command") ? c.value("command") : "compare";
  try {
    check_option_values(c.parsed);
    check_option_uses(c.parsed, command);
    check_output_files(c.parsed, s);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

template <typename Fn>
std::string usage_error_of(Fn&& fn) {
  return testing_support::message_of<UsageError>(fn);
}

TEST(CommandLine, NumbersHaveTheirRealRange) {
  const int64_t max = kMaxCount;
  EXPECT_EQ(parse_integer("--iters", "2147483647", 1, max), 2147483647);
  EXPECT_EQ(parse_integer("--warmup", "0", 0, max), 0);
  for (const char* bad : {"4294967296", "2147483648", "0", "-1", "", "1e3", "0x10", " 5", "5 ",
                          "+5", "99999999999999999999999"}) {
    EXPECT_EQ(
        usage_error_of([&] { parse_integer("--iters", bad, 1, max); }),
        "--iters: expected a positive integer up to 2147483647, got '" + std::string(bad) + "'");
  }
  EXPECT_EQ(usage_error_of([&] { parse_integer("--warmup", "3000000000", 0, max); }),
            "--warmup: expected an integer from 0 to 2147483647, got '3000000000'");
  EXPECT_EQ(parse_unsigned("--seed", "18446744073709551615"), std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"-1", "18446744073709551616", "", "1.0", "-0"}) {
    EXPECT_EQ(usage_error_of([&] { parse_unsigned("--seed", bad); }),
              "--seed: expected an integer from 0 to 18446744073709551615, got '" +
                  std::string(bad) + "'");
  }
  EXPECT_EQ(parse_tolerance("--atol", "1e-3"), 1e-3);
  EXPECT_EQ(parse_tolerance("--atol", "0"), 0.0);
  EXPECT_EQ(parse_tolerance("--atol", ".5e-2"), 0.005);
  for (const char* bad : {"inf", "nan", "-1e-3", "", "1e-3x", "1e999", "0x10", "0x1p-3", "+INF",
                          "-Infinity", " 1e-3", "1_0"}) {
    EXPECT_NE(usage_error_of([&] {
                parse_tolerance("--rtol", bad);
              }).find("--rtol: expected a finite number >= 0"),
              std::string::npos)
        << bad;
  }
}

// An option a command does not use, a repeated or empty value, a value that is the next option,
// or options that contradict each other: refused, naming the option.
TEST(CommandLine, OptionsThatWouldBeIgnoredAreRefused) {
  const std::map<std::string, std::string> refused = {
      {"--batch --iters 3", "--batch: expected a value, got the option '--iters'"},
      {"--weights=", "--weights: expected a value, got an empty one"},
      {"--json a.json --json b.json", "--json: given more than once"},
      {"compare --output o.pt", "--output: not used by compare (only by run)"},
      {"run --json r.json", "--json: not used by run (only by compare and bench)"},
      {"run --iters 3", "--iters: not used by run (only by compare and bench)"},
      {"run --atol 1", "--atol: not used by run (only by compare and bench)"},
      {"run --batch 3", "--batch: not used by run (only by compare and bench)"},
      {"bench --input x.pt", "--input: not used by bench (only by compare and run)"},
      {"bench --output o.pt", "--output: not used by bench (only by run)"},
      {"compare --csv x.csv", "--csv: not used by compare (only by bench)"},
      {"run --plot x.svg", "--plot: not used by run (only by bench)"},
      {"compare --batches 1,2", "--batches: not used by compare (only by bench)"},
      {"compare --cuda-graph", "--cuda-graph: not used by compare (only by bench)"},
      {"--batch 3 --input x.pt", "--batch: not used with --input (the input's rows are the batch)"},
      {"--weights-key model", "--weights-key: needs --weights"},
      {"--no-strict", "--no-strict: needs --weights"},
      {"--strip-prefix model.", "--strip-prefix: needs --weights"},
      {"--overwrite", "--overwrite: no output file is given (--output, --json, --csv or --plot)"},
      {"bench --batch 2 --batches 4", "--batch and --batches: give one of them"},
      {"bench --dtype float32 --dtypes float32", "--dtype and --dtypes: give one of them"}};
  for (const auto& [line, message] : refused) EXPECT_EQ(refusal(line), message) << line;
  for (const char* accepted :
       {"", "compare --batch 3 --iters 2 --warmup 0 --atol 1 --rtol 1", "--input x.pt",
        "run --weights w.pt --input x.pt --in-features 4 --seed 3 --no-strict",
        "bench --batches 1,2 --dtypes float32 --cuda-graph", "bench --batch 2 --dtype float16",
        "--weights w.pt --weights-key model --strip-prefix model."}) {
    EXPECT_EQ(refusal(accepted), "") << accepted;
  }
}

// Outputs: refused before any work when they are not regular files, exist without --overwrite,
// are an input, lie in a missing folder, or are another output of the run.
TEST(CommandLine, OutputFilesAreCheckedBeforeAnyWork) {
  TempDir dir;
  const std::string file = dir.file("file.json"), input = dir.file("input.pt");
  std::ofstream(file) << "x";
  std::ofstream(input) << "x";
  ASSERT_EQ(::symlink(file.c_str(), dir.file("link.json").c_str()), 0);
  ASSERT_EQ(::symlink(input.c_str(), dir.file("input_link.pt").c_str()), 0);
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0644), 0);
  const std::string d = dir.path() + "/";
  const std::map<std::string, std::string> refused = {
      {"--json " + file, "--json " + file + ": already exists; pass --overwrite to replace it"},
      {"--json " + d + "link.json --overwrite",
       "--json " + d + "link.json: is a symbolic link (to " + file + ")"},
      {"--json " + d + "fifo --overwrite", "--json " + d + "fifo: is a FIFO (named pipe)"},
      {"--json " + dir.path() + " --overwrite", "is a directory, expected a file path"},
      {"run --input " + input + " --output " + d + "input_link.pt --overwrite",
       "is also an input of this run"},
      {"--weights " + input + " --json " + input + " --overwrite", "is also an input of this run"},
      {"--json " + d + "missing/c.json", "--json " + d +
                                             "missing/c.json: cannot write there: folder " + d +
                                             "missing: No such file or directory"},
      {"bench --json " + d + "x --csv " + d + "x",
       "--json and --csv name the same file (" + d + "x); give each output its own path"},
      {"bench --csv " + d + "x --plot " + d + "./x", "--csv and --plot name the same file"}};
  for (const auto& [line, message] : refused) {
    EXPECT_NE(refusal(line).find(message), std::string::npos)
        << line << "\n"
        << refusal(line) << "\nexpected to contain: " << message;
  }
  EXPECT_EQ(refusal("--json " + file + " --overwrite"), "");
  EXPECT_EQ(refusal("bench --json " + d + "a --csv " + d + "b --plot " + d + "c"), "");
}

// A state dict whose keys do not fit: the error shows the prefix and --strip-prefix.
TEST(CommandLine, PrefixErrorsSuggestStripPrefix) {
  TempDir dir;
  const auto save = [&](const std::string& name, const std::vector<std::string>& keys) {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& key : keys) tensors.emplace_back(key, torch::ones({2, 2}));
    testing_support::save_state_dict(tensors, dir.file(name));
    return dir.file(name);
  };
  const auto load_error_of = [](const auto& fn) {
    return testing_support::message_of<LoadError>(fn);
  };
  Settings s;
  s.command = "run";
  s.weights = save("extra.pt", {"model.linear.weight", "model.linear.bias", "loss.weight"});
  EXPECT_EQ(load_error_of([&] { detect_model(s); }),
            "--weights " + s.weights +
                ": holds no model's keys (swish_chain: add_value, matmul.weight, matmul.bias; "
                "mish_mish: linear.weight, linear.bias); its keys: model.linear.weight, "
                "model.linear.bias, loss.weight "
                "(mish_mish's keys are all there under the prefix 'model.'; pass --strip-prefix "
                "model. and --no-strict); for a model of your own give --chain SPEC");
  s.weights = save("unrelated.pt", {"encoder.layer.w", "encoder.layer.b"});
  EXPECT_NE(load_error_of([&] { build_model(find_model("mish_mish"), s); })
                .find("missing key linear.weight (model mish_mish); the file has "
                      "encoder.layer.w, encoder.layer.b (every key starts with 'encoder.layer.'; "
                      "if a wrapper added it, pass --strip-prefix encoder.layer.)"),
            std::string::npos);
  s.weights = save("nothing.pt", {"linear.weight", "linear.bias"});
  s.strip_prefix = "nothing";
  EXPECT_NE(load_error_of([&] { detect_model(s); })
                .find(": --strip-prefix 'nothing.': no key starts with it; the keys: "
                      "linear.weight, linear.bias"),
            std::string::npos);
}

}  // namespace
}  // namespace fusedlinear
