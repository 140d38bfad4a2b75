// The fusedlinear program end to end: run on a fixture and read the output back, compare,
// the no-argument default, Python round trips, and every bad input giving one line + exit 2.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "kernels/cpu/small_batch.h"
#include "modules/linear_chain.h"
#include "modules/loader/torch_file.h"
#include "tests/test_files.h"
#include "tests/test_support.h"

namespace fusedlinear {
namespace {

using namespace testing_support;
const std::string kBinary = FUSEDLINEAR_BINARY;
const std::string kFixtures = std::string(FUSEDLINEAR_SOURCE_DIR) + "/weights/fixtures/";

struct Result {
  int exit_code;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = std::make_unique<TempDir>(); }
  void TearDown() override { dir_.reset(); }

  // Runs the program (CPU device unless the arguments say otherwise).
  Result run(const std::string& args) {
    const std::string command =
        kBinary + " " + args + " >" + path("stdout") + " 2>" + path("stderr") + " </dev/null";
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, read_file(path("stdout")),
            read_file(path("stderr"))};
  }

  // Bad input: exit 2, exactly one line on stderr, "fusedlinear: error: ...", and no report begun
  // on stdout.
  void expect_usage_error(const std::string& args, const std::string& expected) {
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(r.err.rfind("fusedlinear: error: ", 0), 0u) << args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos)
        << args << "\nstderr: " << r.err << "expected to contain: " << expected;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }

  std::string path(const std::string& name) const { return dir_->file(name); }

  std::unique_ptr<TempDir> dir_;
};

TEST_F(Cli, RunOnFixtureWritesWhatPyTorchComputes) {
  for (const std::string name : {"swish_chain", "mish_mish"}) {
    const std::string out = path(name + "_out.pt");
    const Result r = run("run --device cpu --model " + name + " --weights " + kFixtures + name +
                         ".pt --input " + kFixtures + name + "_input.pt --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(name), std::string::npos) << r.out;  // the model was detected
    const torch::Tensor got = read_tensor(out);
    const torch::Tensor want = read_tensor(kFixtures + name + "_output.pt");
    EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4)) << name;
  }
}

TEST_F(Cli, CompareSmallShapePassesAndWritesJson) {
  const Result r =
      run("compare --device cpu --batch 9 --in-features 40 --out-features 24 "
          "--iters 3 --warmup 1 --json " +
          path("c.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("swish_chain"), std::string::npos);
  EXPECT_NE(r.out.find("mish_mish"), std::string::npos);
  EXPECT_NE(r.out.find("PASS"), std::string::npos);
  const std::string json = read_file(path("c.json"));
  EXPECT_NE(json.find("\"vs_eager\""), std::string::npos);
  EXPECT_NE(json.find("\"eager GEMM + fused chain\""), std::string::npos);
  // The JSON is never silently replaced.
  expect_usage_error(
      "compare --device cpu --batch 2 --in-features 4 --out-features 4 --iters 1 "
      "--json " +
          path("c.json"),
      "already exists; pass --overwrite to replace it");
}

TEST_F(Cli, ComparesEveryPrecision) {
  // 70 rows and --bf16x3-min-batch 1: every mode runs its own GEMM (here the CPU emulations).
  const Result r =
      run("compare --device cpu --model mish_mish --batch 70 --in-features 64 --out-features 48 "
          "--iters 2 --warmup 1 --precision all --bf16x3-min-batch 1 --json " +
          path("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto doc = nlohmann::json::parse(read_file(path("p.json")));
  const auto& paths = doc["models"][0]["paths"];
  ASSERT_EQ(paths.size(), 7u);  // eager, eager GEMM + fused chain, five precisions
  const std::vector<std::string> gemms = {"ieee, CPU GEMM",   "ieee, CPU GEMM",   "ieee, CPU GEMM",
                                          "bf16x3, CPU GEMM", "bf16x6, CPU GEMM", "tf32, CPU GEMM",
                                          "bf16, CPU GEMM"};
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(paths[i]["gemm"], gemms[i]) << i;
    EXPECT_GT(paths[i]["forward"]["median_us"].get<double>(), 0) << i;
    EXPECT_LT(paths[i]["vs_float64"]["max_abs"].get<double>(), 0.1) << i;
  }
  EXPECT_EQ(paths[0]["path"], "eager");
  for (const size_t split :
       {size_t{3}, size_t{4}}) {  // bf16x3 and bf16x6: within 1e-4, in the verdict
    EXPECT_TRUE(paths[split]["vs_eager"]["allclose"].get<bool>()) << split;
    EXPECT_TRUE(paths[split]["counted_in_verdict"].get<bool>()) << split;
  }
  EXPECT_FALSE(paths[5]["counted_in_verdict"].get<bool>());  // tf32 and bf16: reported only
  EXPECT_FALSE(paths[6]["counted_in_verdict"].get<bool>());
  EXPECT_EQ(doc["models"][0]["input_shape"], (std::vector<int64_t>{70, 64}));
  // Below the minimum batch bf16x3 runs ieee and says so.
  const Result small =
      run("compare --device cpu --model mish_mish --batch 1 --in-features 16 --out-features 8 "
          "--iters 1 --warmup 0 --precision bf16x3");
  ASSERT_EQ(small.exit_code, 0) << small.out << small.err;
  EXPECT_NE(small.out.find("ieee, CPU GEMM (bf16x3 from 2 rows)"), std::string::npos) << small.out;
}

// --gemm hopper where the Hopper GEMM cannot run: the CPU's GEMM instead, and the report says why.
TEST_F(Cli, HopperGemmAskedForOnTheCpuSaysWhatRanInstead) {
  const Result r =
      run("compare --device cpu --model mish_mish --batch 9 --in-features 64 --out-features 48 "
          "--iters 1 --warmup 0 --precision bf16x3 --gemm hopper");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bf16x3, CPU GEMM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the Hopper GEMM was asked for, but it runs on a GPU only"),
            std::string::npos)
      << r.out;
}

// --gemm mlp where the fused-MLP kernel cannot run: each Linear as auto plans it, and the report
// says why.
TEST_F(Cli, FusedMlpAskedForOnTheCpuSaysWhatRanInstead) {
  const Result r =
      run("compare --device cpu --chain 'fc1:relu|fc2' --batch 3 --in-features 16 --out-features 8 "
          "--iters 1 --warmup 0 --gemm auto,mlp");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("the fused MLP kernel was asked for, but it runs on a GPU only"),
            std::string::npos)
      << r.out;
}

TEST_F(Cli, RunInEachPrecisionMatchesPyTorch) {
  for (const std::string precision : {"bf16x3", "tf32", "bf16"}) {
    const std::string out = path(precision + ".pt");
    const Result r = run("run --device cpu --model mish_mish --weights " + kFixtures +
                         "mish_mish.pt --input " + kFixtures + "mish_mish_input.pt --output " +
                         out + " --precision " + precision + " --bf16x3-min-batch 1");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("fused GEMM: " + precision), std::string::npos) << r.out;
    const torch::Tensor want = read_tensor(kFixtures + "mish_mish_output.pt");
    const double tolerance = precision == "bf16x3" ? 1e-4 : 5e-2;
    EXPECT_TRUE(torch::allclose(read_tensor(out), want, tolerance, tolerance)) << precision;
  }
}

// An infinite input gives bf16x3's run eager's infinities, where its cross products alone would
// give NaN (inf * 0, inf - inf): the same NaN and inf positions as ieee's run, some of them inf.
TEST_F(Cli, RunWithAnInfiniteInputInBf16x3GivesInfNotNaN) {
  torch::Tensor x = read_tensor(kFixtures + "mish_mish_input.pt").clone();
  x[1][3] = std::numeric_limits<float>::infinity();
  write_tensor(x, path("inf_input.pt"));
  const auto run_in = [&](const std::string& precision) {
    const std::string out = path(precision + "_inf.pt");
    const Result r = run("run --device cpu --model mish_mish --weights " + kFixtures +
                         "mish_mish.pt --input " + path("inf_input.pt") + " --output " + out +
                         " --precision " + precision + " --bf16x3-min-batch 1");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return read_tensor(out);
  };
  const torch::Tensor ieee = run_in("ieee"), bf16x3 = run_in("bf16x3");
  EXPECT_TRUE(ieee.isposinf().any().item<bool>());
  EXPECT_TRUE(torch::equal(bf16x3.isnan(), ieee.isnan())) << bf16x3[1];
  EXPECT_TRUE(torch::equal(bf16x3.isposinf(), ieee.isposinf())) << bf16x3[1];
  EXPECT_TRUE(torch::equal(bf16x3.isneginf(), ieee.isneginf())) << bf16x3[1];
}

TEST_F(Cli, CompareSaysEachLoaderNoteOnce) {
  // compare builds the model twice (eager's copy and the fused path's); the notes come once.
  const Result r =
      run("compare --device cpu --no-strict --iters 1 --warmup 0 --model mish_mish "
          "--weights " +
          kFixtures + "loader/torch1.13/data_parallel.pt");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string note : {"stripped the prefix 'module.'", "ignored from"}) {
    size_t count = 0;
    for (size_t at = r.err.find(note); at != std::string::npos; at = r.err.find(note, at + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 1u) << note << "\nstderr: " << r.err;
  }
}

TEST_F(Cli, CompareFailsWhenToleranceIsImpossible) {
  // atol = rtol = 0 on the half type: eager rounds after every op, fused once, so they differ.
  const Result r =
      run("compare --device cpu --model swish_chain --dtype bfloat16 --batch 16 "
          "--in-features 64 --out-features 64 --iters 1 --warmup 0 --atol 0 --rtol 0");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST_F(Cli, NoArgumentsRunsTheDefaultQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = run("");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_LT(seconds, 60) << "the default run must stay well under a minute";
}

TEST_F(Cli, HelpListsTheCommands) {
  const Result r = run("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("compare"), std::string::npos);
  EXPECT_NE(r.out.find("--weights"), std::string::npos);
}

TEST_F(Cli, BadInputsGiveOneLineAndExitCode2) {
  const std::string weights = kFixtures + "swish_chain.pt";
  const std::string input = kFixtures + "swish_chain_input.pt";
  expect_usage_error("frobnicate", "unknown command 'frobnicate'");
  expect_usage_error("--dtype float64", "--dtype: expected float32, float16 or bfloat16");
  expect_usage_error("--device tpu", "--device: expected auto, cpu or cuda");
  expect_usage_error("--model mlp", "--model: expected swish_chain, mish_mish or all");
  expect_usage_error("--batch 0", "--batch: expected a positive integer");
  expect_usage_error("--batch many", "--batch");
  expect_usage_error("--threads 0", "--threads: expected a positive integer");
  expect_usage_error("--no-such-option", "no-such-option");
  expect_usage_error("--precision fp8", "--precision: expected ieee, bf16x3, bf16x6, tf32, bf16");
  expect_usage_error("--precision bf16x3,", "--precision: expected");
  expect_usage_error("--precision bf16x3 --dtype bfloat16",
                     "the tensor-core modes take float32 models, got --dtype bfloat16");
  expect_usage_error("run --precision all --weights " + weights + " --input " + input +
                         " --output " + path("o.pt"),
                     "--precision: run takes one precision, got 'all'");
  expect_usage_error("--bf16x3-min-batch 0", "--bf16x3-min-batch: expected a positive integer");
  expect_usage_error("--iters 2 --weights " + path("missing.pt"), "missing.pt");
  expect_usage_error("run --weights " + weights + " --input " + input, "run needs --output");
  expect_usage_error("run --input " + input + " --output " + path("o.pt"), "run needs --weights");
  expect_usage_error(
      "run --model all --weights " + weights + " --input " + input + " --output " + path("o.pt"),
      "run takes one model");
  expect_usage_error(
      "run --weights " + weights + " --input " + input + " --output " + input + " --overwrite",
      "is also an input of this run");
  expect_usage_error("run --model mish_mish --weights " + weights + " --input " + input +
                         " --output " + path("o.pt"),
                     "missing key linear.weight");
  expect_usage_error("run --weights " + weights + " --in-features 10 --input " + input +
                         " --output " + path("o.pt"),
                     "matmul.weight has shape [48, 64], expected [48, 10]");
  // An input whose last dimension is not in_features.
  expect_usage_error("run --weights " + weights + " --input " + kFixtures +
                         "swish_chain_output.pt --output " + path("o.pt"),
                     "expected a floating-point tensor [..., 64]");
  // The same found by compare while it runs the models: before its report's header.
  expect_usage_error("compare --iters 1 --warmup 0 --weights " + weights + " --input " + kFixtures +
                         "swish_chain_output.pt",
                     "expected a floating-point tensor [..., 64]");
  // Not a torch file at all.
  std::ofstream(path("junk.pt")) << "this is not a state dict\n";
  expect_usage_error(
      "run --weights " + path("junk.pt") + " --input " + input + " --output " + path("o.pt"),
      "junk.pt");
  EXPECT_FALSE(file_exists(path("o.pt"))) << "no output is written when a run fails";
  if (!torch::cuda::is_available()) {
    expect_usage_error("--device cuda", "--device cuda:");
  }
  // libtorch 1.13 has no float16 matmul on the CPU: said with the model, dtype and device.
  if (std::string(TORCH_VERSION).rfind("1.", 0) == 0) {
    expect_usage_error("--device cpu --dtype float16 --batch 2 --in-features 8 --out-features 8",
                       "swish_chain in float16 on cpu: libtorch 1.13");
  }
}

// The CPU headers say what the GEMM runs on and with how many threads, and which loop the fused
// ops take (FUSEDLINEAR_CPU_CAPABILITY picks it for them alone); the JSON too.
TEST_F(Cli, CpuHeaderNamesBlasThreadsAndLoop) {
  ::setenv("FUSEDLINEAR_CPU_CAPABILITY", "default", 1);
  const Result r =
      run("compare --device cpu --threads 1 --batch 3 --in-features 16 "
          "--out-features 8 --iters 2 --warmup 0 --json " +
          path("c.json"));
  ::unsetenv("FUSEDLINEAR_CPU_CAPABILITY");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string header = r.out.substr(0, r.out.find('\n'));
  EXPECT_NE(header.find("(1 thread); GEMM: "), std::string::npos) << header;
  EXPECT_NE(header.find("; fused ops: scalar loop"), std::string::npos) << header;
  EXPECT_NE(r.out.find("GFLOP/s"), std::string::npos) << r.out;
  const std::string json = read_file(path("c.json"));
  EXPECT_NE(json.find("\"threads\": 1,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"blas\": \""), std::string::npos) << json;
  EXPECT_NE(json.find("\"gemm_gflops\""), std::string::npos) << json;
}

// bench --ops writes what it prints to --json and --csv, a result an op; --plot (the models'
// chart) is refused before anything runs.
TEST_F(Cli, BenchOpsWritesJsonAndCsv) {
  const Result r =
      run("bench --device cpu --ops --batches 2 --out-features 8 --threads 1 "
          "--iters 1 --warmup 0 --json " +
          path("ops.json") + " --csv " + path("ops.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string json = read_file(path("ops.json"));
  EXPECT_NE(json.find("\"op\": \"tanh\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"eager\": {"), std::string::npos) << json;
  EXPECT_NE(json.find("\"allclose\": true"), std::string::npos) << json;
  const std::string csv = read_file(path("ops.csv"));
  EXPECT_EQ(csv.rfind("op,dtype,batch,cols,copy_median_us,", 0), 0u) << csv;
  EXPECT_NE(csv.find("\nadd(p),float32,2,8,"), std::string::npos) << csv;
  expect_usage_error("bench --device cpu --ops --plot " + path("ops.svg"), "--plot");
  EXPECT_FALSE(std::ifstream(path("ops.svg")).good());
}

TEST_F(Cli, HelpComesBeforeAnyCheck) {
  const Result r = run("--batch many --iters 4294967296 --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--strip-prefix"), std::string::npos) << r.out;
}

// The command line's new refusals, through the program: one line, exit 2 (the checks
// themselves: test_command_line.cpp).
TEST_F(Cli, CommandLineRefusalsAreOneLine) {
  expect_usage_error("--iters 4294967296",
                     "--iters: expected a positive integer up to 2147483647, got '4294967296'");
  // A tolerance's text as a chain spec's is shown: control bytes escaped, a long one excerpted.
  expect_usage_error("compare --atol \"$(printf '1\\033[2J\\nx')\"",
                     "--atol: expected a finite number >= 0, got '1\\x1b[2J\\nx'");
  expect_usage_error(
      "compare --rtol " + std::string(100, '9') + "x",
      "--rtol: expected a finite number >= 0, got '" + std::string(40, '9') + "...'");
  expect_usage_error("--batch --iters 3", "--batch: expected a value, got the option '--iters'");
  expect_usage_error("--iters 3 --batch",
                     "--batch: expected a value, got the end of the command line");
  expect_usage_error("run --json", "--json: expected a value, got the end of the command line");
  expect_usage_error("--jit yes", "--jit yes: expected on or off");
  expect_usage_error("compare --output " + path("o.pt"),
                     "--output: not used by compare (only by run)");
  EXPECT_EQ(list_dir(dir_->path()).size(), 2u) << "nothing written but stdout and stderr";
}

// --jit turns the run-time chains' compiled kernels on or off, on by default: on a GPU of a build
// with NVRTC the report's GEMM column says which ran the chain; the CPU takes the option and
// changes nothing.
TEST_F(Cli, JitTurnsRunTimeCompilationOnAndOff) {
  const std::string args =
      "compare --chain 'gelu,tanh' --batch 256 --in-features 256 --out-features 256 --iters 1 "
      "--warmup 0 --precision bf16x3 --gemm auto";
  if (!torch::cuda::is_available()) {
    const Result r = run(args + " --device cpu --jit on");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    GTEST_SKIP() << "no CUDA device: the compiled kernels not checked";
  }
#ifndef FUSEDLINEAR_WITH_JIT
  GTEST_SKIP() << "this build has no NVRTC: nothing is compiled at run time";
#endif
  ::setenv("FUSEDLINEAR_CACHE_DIR", path("cache").c_str(), 1);
  ::unsetenv("FUSEDLINEAR_JIT");
  for (const std::string jit : {"", "on", "off"}) {  // "": the default, on
    const Result r = run(args + (jit.empty() ? "" : " --jit " + jit));
    EXPECT_EQ(r.exit_code, 0) << jit << ": " << r.err;
    const bool compiled = r.out.find("chain compiled at run time") != std::string::npos;
    EXPECT_EQ(compiled, jit != "off") << r.out;
  }
  ::unsetenv("FUSEDLINEAR_CACHE_DIR");
}

// --overwrite replaces a regular file and nothing else: a device is refused with exit 2 before
// any work and left as it was, and so is a symbolic link (OutputFile's tests: every other kind).
TEST_F(Cli, OverwriteReplacesOnlyRegularFiles) {
  const std::string run_args = "run --device cpu --model mish_mish --weights " + kFixtures +
                               "mish_mish.pt --input " + kFixtures + "mish_mish_input.pt";
  expect_usage_error(run_args + " --output /dev/null --overwrite",
                     "--output /dev/null: is a character device; only a regular file is ever "
                     "replaced");
  struct stat st {};
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null is still a device";
  // Into a missing folder: refused before the run (no PASS first), with the reason.
  const Result r = run("compare --device cpu --batch 2 --in-features 4 --out-features 4 --json " +
                       path("missing/c.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "") << "refused before any work";
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
  // A character device made here (needs CAP_MKNOD).
  if (::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod not permitted here: the device made by the test skipped";
  }
  expect_usage_error(run_args + " --output " + path("null") + " --overwrite",
                     "is a character device");
  ASSERT_EQ(::lstat(path("null").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
}

// A symbolic link planted at the temporary name older versions used is not written through.
TEST_F(Cli, PlantedLinkAtATemporaryNameIsNotFollowed) {
  const std::string weights = path("weights.pt");
  const std::string original = read_file(kFixtures + "mish_mish.pt");
  std::ofstream(weights, std::ios::binary) << original;
  ASSERT_EQ(::symlink(weights.c_str(), path("report.json.tmp-fusedlinear").c_str()), 0);
  const Result r = run("--device cpu --iters 1 --warmup 0 --model mish_mish --weights " + weights +
                       " --json " + path("report.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(weights), original);
  EXPECT_NO_THROW(nlohmann::json::parse(read_file(path("report.json"))));
}

// Two programs writing one JSON at once: both finish, the file is one complete JSON document.
TEST_F(Cli, ConcurrentWritersOfOneJsonLeaveOneCompleteFile) {
  const std::string json = path("same.json");
  std::string script;
  for (int i = 0; i < 2; ++i) {
    script += "(" + kBinary +
              " compare --device cpu --batch 4 --in-features 16 --out-features 8 --iters 1 "
              "--warmup 0 --overwrite --json " +
              json + " >/dev/null 2>" + path("err" + std::to_string(i)) + "; echo $? >" +
              path("rc" + std::to_string(i)) + ") & ";
  }
  ASSERT_EQ(std::system(("sh -c '" + script + "wait'").c_str()), 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(read_file(path("rc" + std::to_string(i))), "0\n")
        << read_file(path("err" + std::to_string(i)));
  }
  EXPECT_NO_THROW(nlohmann::json::parse(read_file(json)));
  for (const auto& name : list_dir(dir_->path())) {
    EXPECT_EQ(name.find("tmp"), std::string::npos) << "left behind: " << name;
  }
}

// Out of memory: one line saying how much was asked for and what to lower; nothing written.
TEST_F(Cli, OutOfMemorySaysHowMuchAndWhatToLower) {
  // Far beyond any memory (8 PiB): refused before it is asked for, saying what is available.
  const std::string args =
      "--device cpu --model mish_mish --batch 2147483647 --in-features 1048576 "
      "--out-features 1 --iters 1 --json " +
      path("c.json");
  expect_usage_error(args, "out of memory on cpu: tried to allocate 8.00 PiB for the input (");
  expect_usage_error(args, " available on cpu); lower --batch, --in-features or --out-features");
  EXPECT_FALSE(file_exists(path("c.json")));
}

// Which file is wrong, and the advice that fits it: an input is a tensor, weights a state dict.
TEST_F(Cli, MessagesSayWhichFileAndWhatIsWrong) {
  std::ofstream(path("empty.pt")).close();
  const std::string weights = kFixtures + "mish_mish.pt";
  const Result r = run("run --model mish_mish --weights " + weights + " --input " +
                       path("empty.pt") + " --output " + path("o.pt"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--input " + path("empty.pt") + ": the file is empty (0 bytes)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("torch.save(tensor, path)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("state_dict"), std::string::npos) << r.err;
}

// NaN in the outputs is counted and compared, never printed as an error of "nan" beside a
// pass; the JSON records the shapes that ran.
TEST_F(Cli, NanInOutputsIsReportedAsSuch) {
  torch::Tensor x = read_tensor(kFixtures + "mish_mish_input.pt").clone();
  x[1][3] = std::numeric_limits<float>::quiet_NaN();
  write_tensor(x, path("nan_input.pt"));
  const Result r =
      run("compare --device cpu --iters 1 --warmup 0 --model mish_mish --weights " + kFixtures +
          "mish_mish.pt --input " + path("nan_input.pt") + " --json " + path("c.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string ran = cpu::small_batch_runs() ? "ieee, skinny" : "ieee, CPU GEMM";
  EXPECT_NE(r.out.find("mish_mish fused " + ran +
                       ": 48 NaN and 0 inf in eager's output, 48 NaN and 0 inf in fused's, at the "
                       "same positions"),
            std::string::npos)
      << r.out;
  // Every row of the table: no "nan" printed as an error; the fused rows pass.
  size_t fused_rows = 0;
  for (size_t row = r.out.find("\nmish_mish  "); row != std::string::npos;
       row = r.out.find("\nmish_mish  ", row + 1)) {
    const std::string table_row = r.out.substr(row + 1, r.out.find('\n', row + 1) - row - 1);
    EXPECT_EQ(table_row.find("nan"), std::string::npos) << table_row;
    if (table_row.find(" fused ") != std::string::npos) {
      ++fused_rows;
      EXPECT_NE(table_row.find(" yes "), std::string::npos) << table_row;
      EXPECT_NE(table_row.find("48 (as eager)"), std::string::npos) << table_row;
    }
  }
  EXPECT_EQ(fused_rows, 2u) << r.out;  // eager GEMM + fused chain, fused
  const auto doc = nlohmann::json::parse(read_file(path("c.json")));
  EXPECT_EQ(doc["batch"], 5);
  const auto& m = doc["models"][0];
  EXPECT_EQ(m["input_shape"], nlohmann::json::array({5, 64}));
  EXPECT_EQ(m["output_shape"], nlohmann::json::array({5, 48}));
  const auto& fused = m["paths"][2]["vs_eager"];
  EXPECT_EQ(fused["non_finite"]["eager_nan"], 48);
  EXPECT_EQ(fused["non_finite"]["fused_nan"], 48);
  EXPECT_TRUE(fused["non_finite"]["same_positions"].get<bool>());
  EXPECT_TRUE(fused["max_abs"].is_number());
  EXPECT_LT(fused["max_abs"].get<double>(), 1e-4);
  EXPECT_TRUE(fused["allclose"].get<bool>());
}

// Keys as torch.compile, DataParallel and PyTorch Lightning save them load, each prefix with a
// notice; what cannot be told apart gets the longest common prefix and --strip-prefix.
TEST_F(Cli, PrefixesOfCompiledAndLightningModelsAreStripped) {
  const NamedTensors fixture = read_state_dict(kFixtures + "mish_mish.pt");
  const auto save = [&](const std::string& name, const std::string& prefix,
                        const std::string& under, bool extra) {
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& [key, tensor] : fixture.tensors) dict.insert(prefix + key, tensor);
    if (extra) dict.insert("loss.pos_weight", torch::ones({3}));
    c10::IValue value(dict);
    if (!under.empty()) {
      c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
      checkpoint.insert(under, value);
      checkpoint.insert("epoch", int64_t{3});
      value = c10::IValue(checkpoint);
    }
    const std::vector<char> bytes = torch::jit::pickle_save(value);
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), bytes.size());
    return path(name);
  };
  const torch::Tensor want = read_tensor(kFixtures + "mish_mish_output.pt");
  const auto run_on = [&](const std::string& weights, const std::string& more = "") {
    ::unlink(path("o.pt").c_str());
    return run("run --device cpu --model mish_mish --weights " + weights + " --input " + kFixtures +
               "mish_mish_input.pt --output " + path("o.pt") + more);
  };
  struct Case {
    std::string file, prefix, under;
    std::vector<std::string> notes;
  };
  for (const Case& c :
       std::vector<Case>{{"compiled_ddp.pt",
                          "module._orig_mod.",
                          "",
                          {"'module.' from every key",
                           "'_orig_mod.' from every key (saved from a torch.compile"}},
                         {"lightning_compiled.pt",
                          "model._orig_mod.",
                          "state_dict",
                          {"took the state dict under key 'state_dict'",
                           "stripped the prefix 'model.'", "'_orig_mod.'"}}}) {
    const Result r = run_on(save(c.file, c.prefix, c.under, false));
    ASSERT_EQ(r.exit_code, 0) << c.file << ": " << r.err;
    EXPECT_TRUE(torch::allclose(read_tensor(path("o.pt")), want, 1e-4, 1e-4)) << c.file;
    for (const auto& note : c.notes) {
      EXPECT_NE(r.err.find(note), std::string::npos) << c.file << ": " << r.err;
    }
  }
  // Beside another key, the prefix is not removed by itself (the error names it:
  // test_command_line.cpp); --strip-prefix with --no-strict loads the model.
  const std::string extra = save("lightning_extra.pt", "model.", "state_dict", true);
  const Result r = run_on(extra, " --strip-prefix model --no-strict");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(torch::allclose(read_tensor(path("o.pt")), want, 1e-4, 1e-4));
  EXPECT_NE(r.err.find("stripped the prefix 'model.' (--strip-prefix) from 2 of 3 keys"),
            std::string::npos)
      << r.err;
}

TEST_F(Cli, ExistingOutputIsKeptWithoutOverwrite) {
  const std::string out = path("out.pt");
  std::ofstream(out) << "precious";
  const std::string args = "run --device cpu --model mish_mish --weights " + kFixtures +
                           "mish_mish.pt --input " + kFixtures + "mish_mish_input.pt --output " +
                           out;
  expect_usage_error(args, "already exists; pass --overwrite to replace it");
  EXPECT_EQ(read_file(out), "precious");
  const Result r = run(args + " --overwrite");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(torch::allclose(read_tensor(out), read_tensor(kFixtures + "mish_mish_output.pt"),
                              1e-4, 1e-4));
}

// A python3 that imports torch ("python3" or Debian's /usr/bin/python3), or "".
std::string python_with_torch() {
  for (std::string candidate : {"python3", "/usr/bin/python3"}) {
    if (std::system((candidate + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) {
      return candidate;
    }
  }
  return "";
}

// --model may be left out only when one registered model fits the file's keys: several fitting
// is an error naming them (a file with both models' keys here), and every report says whether
// the model was given or inferred.
TEST_F(Cli, ModelIsInferredOnlyWhenOneFits) {
  const torch::Tensor w = torch::rand({4, 3}), b = torch::rand({4});
  write_safetensors(path("both.safetensors"), {{"add_value", b},
                                               {"matmul.weight", w},
                                               {"matmul.bias", b},
                                               {"linear.weight", w},
                                               {"linear.bias", b}});
  write_tensor(torch::rand({2, 3}), path("x.pt"));
  const std::string io = " --input " + path("x.pt") + " --output " + path("o.pt");
  expect_usage_error("run --weights " + path("both.safetensors") + io,
                     "its keys fit swish_chain and mish_mish; say which with --model");
  Result r = run("run --device cpu --model mish_mish --no-strict --weights " +
                 path("both.safetensors") + io);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mish_mish (given, "), std::string::npos) << r.out;
  // A Linear's keys alone are never taken for a model: any chain may follow them.
  expect_usage_error(
      "compare --device cpu --iters 1 --warmup 0 --weights " + kFixtures + "mish_mish.pt",
      "its keys (linear.weight, linear.bias) are a Linear's, which any chain may "
      "follow: say which with --model (swish_chain, mish_mish) or --chain SPEC");
  r = run("compare --device cpu --iters 1 --warmup 0 --weights " + kFixtures + "swish_chain.pt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model: swish_chain (inferred from the keys of --weights)"),
            std::string::npos)
      << r.out;
  r = run("compare --device cpu --iters 1 --warmup 0 --chain mish,mish --weights " + kFixtures +
          "mish_mish.pt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model: mish,mish (--chain)"), std::string::npos) << r.out;
}

// A chain parameter naming a Linear's own bias (`tanh(self.fc(x)) * self.fc.bias`, as the
// exporter writes it), or another Linear's in a layered spec, is that tensor; a weight is refused
// with both shapes.
TEST_F(Cli, ChainParametersMayNameALinearsBias) {
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({6, 8}), b = torch::randn({6});
  const torch::Tensor w2 = torch::randn({6, 6}), b2 = torch::randn({6});
  const torch::Tensor x = torch::randn({5, 8});
  write_tensor(x, path("x.pt"));
  const torch::Tensor y = torch::addmm(b, x, w.t());
  const auto run_on = [&](const std::string& weights, const std::string& more = "") {
    ::unlink(path("o.pt").c_str());
    const Result r = run("run --device cpu --weights " + weights + " --input " + path("x.pt") +
                         " --output " + path("o.pt") + more);
    EXPECT_EQ(r.exit_code, 0) << weights << more << ": " << r.err;
    return r.exit_code == 0 ? read_tensor(path("o.pt")) : torch::Tensor();
  };
  write_safetensors(path("own.safetensors"), {{"fc.weight", w}, {"fc.bias", b}},
                    chain_metadata("tanh,mul(fc.bias)"));
  torch::Tensor got = run_on(path("own.safetensors"));
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(torch::allclose(got, torch::tanh(y) * b, 1e-5, 1e-5));
  write_safetensors(path("plain.safetensors"), {{"fc.weight", w}, {"fc.bias", b}});
  got = run_on(path("plain.safetensors"), " --chain 'add(fc.bias)'");
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(torch::allclose(got, y + b, 1e-5, 1e-5));
  write_safetensors(path("mlp.safetensors"),
                    {{"fc1.weight", w}, {"fc1.bias", b}, {"fc2.weight", w2}, {"fc2.bias", b2}});
  got = run_on(path("mlp.safetensors"), " --chain 'fc1:add(fc2.bias)|fc2'");
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(torch::allclose(got, torch::addmm(b2, y + b2, w2.t()), 1e-5, 1e-5));

  write_safetensors(path("weight.safetensors"), {{"fc.weight", w}, {"fc.bias", b}},
                    chain_metadata("mul(fc.weight)"));
  expect_usage_error("run --device cpu --weights " + path("weight.safetensors") + " --input " +
                         path("x.pt") + " --output " + path("refused.pt"),
                     "the chain's parameter 'fc.weight' has shape [6, 8] in --weights " +
                         path("weight.safetensors") +
                         ", expected [6] (the width of fc), [] or [1]");
}

// The metadata's version is the one weights/fx_chain.py writes, exactly.
TEST_F(Cli, MetadataOfAnotherVersionIsRefused) {
  const torch::Tensor w = torch::rand({6, 8}), b = torch::rand({6});
  write_tensor(torch::rand({2, 8}), path("x.pt"));
  const std::string io = " --input " + path("x.pt") + " --output " + path("o.pt");
  for (const std::string version : {"2", "0", "-1", "01", " 1"}) {
    write_safetensors(path("v.safetensors"), {{"fc.weight", w}, {"fc.bias", b}},
                      chain_metadata("tanh", "fc", version));
    expect_usage_error("run --device cpu --weights " + path("v.safetensors") + io,
                       "--weights " + path("v.safetensors") +
                           ": its fusedlinear metadata (chain, linear, version) says version '" +
                           version + "'; this reads version 1 only");
  }
  write_safetensors(path("v.safetensors"), {{"fc.weight", w}, {"fc.bias", b}},
                    chain_metadata("tanh"));
  const Result r = run("run --device cpu --weights " + path("v.safetensors") + io);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// What the exporter refuses of a model that traces (tests/python/test_fx_chain.py,
// test_what_run_refuses_is_refused_first), run refuses of its file in the same words; and
// metadata that names no model (an empty chain, a Linear's path with an empty part) is refused
// in one line, not run or passed to libtorch.
TEST_F(Cli, ExporterRefusalsAreRunsOwn) {
  write_tensor(torch::rand({2, 8}), path("x.pt"));
  const std::string io = " --input " + path("x.pt") + " --output " + path("o.pt");
  const auto refused = [&](const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata,
                           const std::string& reason) {
    write_safetensors(path("w.safetensors"), tensors, metadata);
    expect_usage_error("run --device cpu --weights " + path("w.safetensors") + io, reason);
  };
  refused({{"0.weight", torch::rand({4, 0})}, {"0.bias", torch::rand({4})}},
          chain_metadata("gelu", "0"),
          "0.weight has shape [4, 0]: a Linear of 0 input features; fusedlinear runs Linears "
          "of at least 1 of each");
  refused({{"fc1.weight", torch::rand({0, 8})},
           {"fc1.bias", torch::rand({0})},
           {"fc2.weight", torch::rand({3, 0})},
           {"fc2.bias", torch::rand({3})}},
          chain_metadata("fc1:gelu|fc2", ""),
          "fc1.weight has shape [0, 8]: a Linear of 0 output features");
  refused({{"fc1.weight", torch::rand({16, 8})},
           {"fc1.bias", torch::rand({16})},
           {"fc2.weight", torch::rand({4, 12})},
           {"fc2.bias", torch::rand({4})}},
          chain_metadata("fc1:gelu|fc2", ""),
          "fc2.weight takes 12 inputs, but the layer before (fc1) gives 16");
  refused({{"fc1.weight", torch::rand({16, 8})},
           {"gate.weight", torch::rand({16, 6})},
           {"fc2.weight", torch::rand({4, 16})}},
          chain_metadata("fc1:gelu*gate|fc2", ""),
          "fc1.weight is [16, 8] and its gate's gate.weight is [16, 6]: a gated pair's Linears "
          "take the same shape");
  refused({{"fc.weight", torch::rand({4, 8})},
           {"fc.bias", torch::rand({4})},
           {"steps", torch::rand({})}},
          chain_metadata("tanh"), "unexpected key(s) steps; the model expects fc.weight, fc.bias");

  const std::vector<std::pair<std::string, torch::Tensor>> linear = {
      {"fc.weight", torch::rand({4, 8})}, {"fc.bias", torch::rand({4})}};
  refused(linear, chain_metadata(""),
          "--weights " + path("w.safetensors") + "'s chain '': expected an op");
  refused(linear, chain_metadata(" \t"), "'s chain ' \\t': expected an op");
  for (const std::string bad : {"", "fc.", "a..b", ".fc", "fc[0]"}) {
    refused(linear, chain_metadata("tanh", bad),
            "its fusedlinear metadata names the Linear '" + bad +
                "', not an attribute path ([A-Za-z0-9_.], e.g. fc or block.0)");
  }
  EXPECT_FALSE(file_exists(path("o.pt")));
}

// Input values beyond the run's dtype are refused, as weights' are, not made infinite.
TEST_F(Cli, InputBeyondTheRunsDtypeIsRefused) {
  torch::Tensor x = read_tensor(kFixtures + "mish_mish_input.pt").to(torch::kFloat64);
  const std::string args = "run --device cpu --model mish_mish --weights " + kFixtures +
                           "mish_mish.pt --output " + path("o.pt") + " --input " + path("x.pt");
  write_tensor(x, path("x.pt"));
  const Result r = run(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  x[1][2] = 1e39;
  x[3][0] = -1e300;
  write_tensor(x, path("x.pt"), /*overwrite=*/true);
  expect_usage_error(args + " --overwrite",
                     "--input " + path("x.pt") +
                         ": cannot convert the input's Double to the run's Float (--dtype "
                         "float32): 2 finite values beyond its range would become infinite");
}

// A file is loaded in the run's dtype: bfloat16 weights run in bfloat16 get no conversion notice,
// run in float32 one that names them.
TEST_F(Cli, FileLoadedInTheRunsDtype) {
  torch::manual_seed(5);
  save_state_dict({{"fc.weight", torch::randn({6, 8}).to(torch::kBFloat16)},
                   {"fc.bias", torch::randn({6}).to(torch::kBFloat16)}},
                  path("bf16.pt"));
  write_tensor(torch::rand({3, 8}), path("x.pt"));
  const std::string io =
      " --chain tanh --input " + path("x.pt") + " --output " + path("o.pt") + " --overwrite";
  Result r = run("run --device cpu --dtype bfloat16 --weights " + path("bf16.pt") + io);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("converted dtype"), std::string::npos) << r.err;
  r = run("run --device cpu --weights " + path("bf16.pt") + io);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("converted dtype: fc.weight BFloat16->Float, fc.bias BFloat16->Float"),
            std::string::npos)
      << r.err;
}

// Messages point to what resolves the case: the chain a file of Linears lacks (a layered spec
// for several), a contradiction between the command line and the file's chain, the widths of
// the file's model, and the small-batch kernels only where they were asked for.
TEST_F(Cli, MessagesPointToWhatResolvesTheCase) {
  const torch::Tensor w = torch::rand({6, 8}), b = torch::rand({6});
  write_tensor(torch::rand({2, 8}), path("x.pt"));
  const std::string io = " --input " + path("x.pt") + " --output " + path("o.pt") + " --overwrite";
  write_safetensors(path("lin.safetensors"), {{"fc.weight", w}, {"fc.bias", b}});
  Result r = run("run --device cpu --weights " + path("lin.safetensors") + io);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("carries no chain; its keys: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; it holds one Linear (fc), which any chain may follow: give it with "
                       "--chain SPEC"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("weights/fx_chain.py save_with_chain"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--strip-prefix"), std::string::npos) << r.err;

  write_safetensors(path("mlp.safetensors"), {{"fc1.weight", w},
                                              {"fc1.bias", b},
                                              {"fc2.weight", torch::rand({3, 6})},
                                              {"fc2.bias", torch::rand({3})}});
  const std::string layered =
      "holds several Linears (fc1, fc2), and a chain spec follows one: "
      "name each in a layered spec, e.g. --chain 'fc1:gelu|fc2' "
      "(docs/CHAINS.md, \"Layered models\")";
  for (const std::string more : {"", " --chain gelu"}) {
    r = run("run --device cpu --weights " + path("mlp.safetensors") + io + more);
    EXPECT_EQ(r.exit_code, 2) << more;
    EXPECT_NE(r.err.find(layered), std::string::npos) << more << ": " << r.err;
    EXPECT_EQ(r.err.find("--strip-prefix"), std::string::npos) << r.err;
  }

  // --chain or --model against the chain the file carries: refused unless the same.
  write_safetensors(path("tanh.safetensors"), {{"fc.weight", w}, {"fc.bias", b}},
                    chain_metadata("tanh,hardtanh(-1,1)"));
  expect_usage_error(
      "run --device cpu --weights " + path("tanh.safetensors") + io + " --chain relu",
      "--chain 'relu': --weights " + path("tanh.safetensors") +
          " carries the chain 'tanh,hardtanh(-1,1)'; leave out --chain to run it");
  // A --chain of several lines is shown in the message's one line, escaped.
  expect_usage_error("run --device cpu --weights " + path("tanh.safetensors") + io +
                         " --chain \"$(printf 'relu\\nx')\"",
                     "--chain 'relu\\nx': --weights " + path("tanh.safetensors") +
                         " carries the chain 'tanh,hardtanh(-1,1)'; leave out --chain to run it");

  r = run("run --device cpu --weights " + path("tanh.safetensors") + io +
          " --chain 'tanh, hardtanh(min_val=-1, max_val=1)'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  write_safetensors(path("gelu.safetensors"), {{"linear.weight", w}, {"linear.bias", b}},
                    chain_metadata("gelu", "linear"));
  expect_usage_error(
      "run --device cpu --weights " + path("gelu.safetensors") + io + " --model mish_mish",
      "--model mish_mish: --weights " + path("gelu.safetensors") +
          " carries the chain 'gelu' after Linear linear, not mish_mish's "
          "'mish,mish' after Linear linear; leave out --model");
  write_safetensors(path("mish.safetensors"), {{"linear.weight", w}, {"linear.bias", b}},
                    chain_metadata("mish,mish", "linear"));
  r = run("run --device cpu --weights " + path("mish.safetensors") + io + " --model mish_mish");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // compare's header: the file's widths; the small-batch products named where they run: under
  // auto at a few rows where the CPU runs them, and asked for.
  r = run("compare --device cpu --iters 1 --warmup 0 --batch 4 --weights " +
          path("tanh.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("; input torch.rand 4x8 -> 6; "), std::string::npos) << r.out;
  r = run("run --device cpu --weights " + path("tanh.safetensors") + io);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("the CPU's small-batch products, which read W once, measured faster") !=
                std::string::npos,
            cpu::small_batch_runs())
      << r.out;
  r = run("run --device cpu --weights " + path("tanh.safetensors") + io + " --gemm cublas");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("small-batch"), std::string::npos) << r.out;
  r = run("run --device cpu --weights " + path("tanh.safetensors") + io + " --gemm skinny");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("asked for; on a CPU their twin: the CPU's small-batch products"),
            std::string::npos)
      << r.out;
}

// A bare nn.Linear's state dict (keys "weight", "bias"), as torch.save(nn.Linear(...).state_dict())
// writes it: the message says what runs it (never --strip-prefix), and --chain SPEC does, with
// the chain or with none ("linear:", the Linear alone), matching PyTorch.
TEST_F(Cli, BareLinearRunsWithAChainSpec) {
  const torch::Tensor w = torch::rand({6, 8}) - 0.5, b = torch::rand({6}) - 0.5;
  const torch::Tensor x = torch::rand({3, 8}) - 0.5;
  write_tensor(x, path("x.pt"));
  write_safetensors(path("bare.safetensors"), {{"weight", w}, {"bias", b}});
  const std::string io = " --input " + path("x.pt") + " --output " + path("o.pt") + " --overwrite";
  const std::string weights = "run --device cpu --weights " + path("bare.safetensors");
  Result r = run(weights + io);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("holds a bare nn.Linear's state dict (weight, bias), which any chain may "
                       "follow: give the chain with --chain SPEC (e.g. --chain gelu, or --chain "
                       "'linear:' for the Linear alone"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("weights/fx_chain.py save_with_chain"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--strip-prefix"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  const torch::Tensor y = torch::addmm(b, x, w.t());
  for (const auto& [chain, expected] : std::vector<std::pair<std::string, torch::Tensor>>{
           {"gelu", torch::gelu(y)}, {"linear:", y}}) {
    r = run(weights + io + " --chain '" + chain + "'");
    ASSERT_EQ(r.exit_code, 0) << chain << ": " << r.err;
    EXPECT_NE(r.err.find("the keys are a bare nn.Linear's (weight, bias): taken as the Linear "
                         "'linear'"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(torch::allclose(read_tensor(path("o.pt")), expected, 1e-5, 1e-5)) << chain;
  }
  // A layered spec naming other Linears: the path the keys were given, not a prefix to strip.
  r = run(weights + io + " --chain 'fc1:gelu|fc2'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("missing key fc1.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("named 'linear': name it so in the spec"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--strip-prefix"), std::string::npos) << r.err;
}

// weights/export.py defines the same models as the registry, with the same state-dict keys.
TEST_F(Cli, ExportPyKnowsTheRegisteredModels) {
  const std::string python = python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch: export.py not checked";
  ASSERT_EQ(std::system((python + " " + FUSEDLINEAR_SOURCE_DIR + "/weights/export.py --list >" +
                         path("list.txt"))
                            .c_str()),
            0);
  std::string want;
  for (const auto& model : registered_models()) {
    want += model.name;
    for (const auto& key : model_keys(model.name)) want += " " + key;
    want += "\n";
  }
  EXPECT_EQ(read_file(path("list.txt")), want);
}

// With a Python that has torch: fresh weights of odd sizes from export.py, C++ against
// PyTorch's output, and torch.load reading what fusedlinear wrote.
TEST_F(Cli, PythonRoundTripOddSizes) {
  const std::string python = python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch: Python round trip skipped";
  const std::string exported = path("py");
  const std::string export_cmd = python + " " + FUSEDLINEAR_SOURCE_DIR +
                                 "/weights/export.py --batch 7 --in-features 37 "
                                 "--out-features 29 --seed 5 --out " +
                                 exported + " >/dev/null";
  ASSERT_EQ(std::system(export_cmd.c_str()), 0);
  // The forms people save state dicts in, each through `run`: what Python computed comes out.
  for (const std::string form : {"dict", "checkpoint", "dataparallel"}) {
    const std::string dir = path(form);
    ASSERT_EQ(
        std::system((python + " " + FUSEDLINEAR_SOURCE_DIR + "/weights/export.py --form " + form +
                     " --model swish_chain --batch 3 --in-features 20 "
                     "--out-features 12 --out " +
                     dir + " >/dev/null")
                        .c_str()),
        0);
    const Result r = run("run --device cpu --weights " + dir + "/swish_chain.pt --input " + dir +
                         "/swish_chain_input.pt --output " + dir + "/out.pt");
    ASSERT_EQ(r.exit_code, 0) << form << ": " << r.err;
    EXPECT_TRUE(torch::allclose(read_tensor(dir + "/out.pt"),
                                read_tensor(dir + "/swish_chain_output.pt"), 1e-4, 1e-4))
        << form;
    if (form != "dict") {
      EXPECT_NE(r.err.find("fusedlinear: note:"), std::string::npos) << form;
    }
  }
  for (const std::string name : {"swish_chain", "mish_mish"}) {
    const std::string out = path(name + "_cpp.pt");
    const Result r =
        run("run --device cpu --model " + name + " --weights " + exported + "/" + name +
            ".pt --input " + exported + "/" + name + "_input.pt --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string check = python + " -c \"import torch,sys; a=torch.load('" + out +
                              "'); b=torch.load('" + exported + "/" + name +
                              "_output.pt'); sys.exit(0 if a.shape==b.shape and "
                              "torch.allclose(a,b,atol=1e-4,rtol=1e-4) else 1)\"";
    EXPECT_EQ(std::system(check.c_str()), 0) << name << ": torch.load of fusedlinear's output";
  }
}

}  // namespace
}  // namespace fusedlinear
