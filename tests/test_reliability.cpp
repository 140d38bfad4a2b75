// No crash, no hang, no silent loss: the program under inputs that change while they are read,
// memory limits, failing writes and options that ask too much. Every run must end with a correct
// result or with exit 2 and one line on stderr, within a time limit, never by a signal. And the
// conversions apply_state_dict refuses because they would lose what the file holds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "modules/linear_chain.h"
#include "modules/loader/state_dict.h"
#include "modules/loader/torch_file.h"
#include "tests/test_files.h"
#include "tests/test_support.h"

namespace fusedlinear {
namespace {

using namespace testing_support;
const std::string kBinary = FUSEDLINEAR_BINARY;
const std::string kFixtures = std::string(FUSEDLINEAR_SOURCE_DIR) + "/weights/fixtures/";

struct Outcome {
  int exit_code = -1;  // -1: ended by a signal, or killed at the time limit
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
};

// Runs `sh -c "<shell>"` (which should `exec` the program) with stdout and stderr in files of
// `dir`, killed after `limit_s` seconds. `started`, if given, is called with the child's pid
// while it runs.
Outcome run_shell(const std::string& shell, const TempDir& dir, double limit_s = 120,
                  const std::function<void(pid_t)>& started = nullptr) {
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  if (child == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0) ::_exit(126);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::dup2(in, 0);
    ::execl("/bin/sh", "sh", "-c", shell.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  Outcome r;
  if (started) started(child);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit_s) {
      r.timed_out = true;
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (!r.timed_out && WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::string describe(const Outcome& r) {
  return "exit " + std::to_string(r.exit_code) + ", signal " + std::to_string(r.signal) +
         (r.timed_out ? ", timed out" : "") + " after " + std::to_string(r.seconds) +
         " s; stderr: " + r.err;
}

// Exit 2 and exactly one line on stderr, "fusedlinear: error: ...", containing `expected`.
void expect_one_line_error(const Outcome& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(r.err.rfind("fusedlinear: error: ", 0), 0u) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
  EXPECT_NE(r.err.find(expected), std::string::npos) << describe(r) << "expected: " << expected;
}

void copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
}

// The names in `dir` that a failed write could have left behind.
std::vector<std::string> temporary_files(const TempDir& dir) {
  std::vector<std::string> left;
  for (const auto& name : list_dir(dir.path())) {
    if (name.find(".tmp-fusedlinear-") != std::string::npos) left.push_back(name);
  }
  return left;
}

// mish_mish of 4096 -> 4096: a 64 MiB weights file (a big weights file) and a 64-row input,
// with the output of an undisturbed run.
class BigFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    files_ = new TempDir;
    torch::manual_seed(36);
    save_state_dict(
        {{"linear.weight", torch::randn({4096, 4096}) / 64}, {"linear.bias", torch::randn({4096})}},
        files_->file("big_w.pt"));
    write_tensor(torch::rand({64, 4096}), files_->file("big_x.pt"));
    TempDir dir;
    const Outcome r =
        run_shell("exec " + kBinary + " run --device cpu --model mish_mish --weights " +
                      files_->file("big_w.pt") + " --input " + files_->file("big_x.pt") +
                      " --output " + files_->file("big_y.pt"),
                  dir);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
  }
  static void TearDownTestSuite() {
    delete files_;
    files_ = nullptr;
  }
  static std::string file(const std::string& name) { return files_->file(name); }

  // Each outcome of a run of `run`: the right output (the BLAS may sum in another order on
  // fewer threads), or exit 2 with one line and no output.
  void expect_result_or_one_line(const Outcome& r, const std::string& output) {
    if (r.exit_code == 0) {
      EXPECT_TRUE(torch::allclose(read_tensor(output), read_tensor(file("big_y.pt")), 1e-5, 1e-5))
          << describe(r);
    } else {
      expect_one_line_error(r, "");
      EXPECT_FALSE(file_exists(output)) << describe(r);
    }
  }

  static TempDir* files_;
  TempDir dir_;
};
TempDir* BigFiles::files_ = nullptr;

// torch.save rewriting a file in place while the program reads it: the file shrinks under the
// reader at varying moments of the read (a SIGBUS where the file is mapped).
TEST_F(BigFiles, FilesShrinkingWhileReadEndInOneLineOrAResult) {
  const auto start = std::chrono::steady_clock::now();
  int shrank = 0;
  for (int round = 0; round < 20; ++round) {
    const bool weights = round < 14;  // the input (4 MiB) is read too fast to catch often
    const std::string victim = dir_.file(weights ? "victim_w.pt" : "victim_x.pt");
    copy_file(file(weights ? "big_w.pt" : "big_x.pt"), victim);
    const std::string output = dir_.file("y.pt");
    ::unlink(output.c_str());
    const std::string args = weights ? " --weights " + victim + " --input " + file("big_x.pt")
                                     : " --weights " + file("big_w.pt") + " --input " + victim;
    const Outcome r = run_shell(
        "exec " + kBinary + " run --device cpu --model mish_mish" + args + " --output " + output,
        dir_, 120, [&](pid_t child) {
          // Once the child has the file open, wait 0 to 26 ms, then cut the file to 4 KiB.
          const std::string fds = "/proc/" + std::to_string(child) + "/fd";
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
          for (bool open = false; !open && std::chrono::steady_clock::now() < until;) {
            for (const auto& fd : list_dir(fds)) {
              char target[4096];
              const ssize_t n = ::readlink((fds + "/" + fd).c_str(), target, sizeof target);
              if (n > 0 && std::string(target, size_t(n)) == victim) open = true;
            }
            siginfo_t ended{};
            if (::waitid(P_PID, id_t(child), &ended, WEXITED | WNOHANG | WNOWAIT) != 0 ||
                ended.si_pid != 0) {
              break;  // it ended without opening the file
            }
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(2 * (round % 14)));
          ASSERT_EQ(::truncate(victim.c_str(), 4096), 0);
        });
    SCOPED_TRACE("round " + std::to_string(round));
    EXPECT_FALSE(r.timed_out) << describe(r);
    EXPECT_EQ(r.signal, 0) << describe(r);
    expect_result_or_one_line(r, output);
    shrank += r.err.find("shrank") != std::string::npos;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("shrinking files: %d of 20 rounds cut the file mid-read, %.1f s\n", shrank, seconds);
  EXPECT_GE(shrank, 1) << "no round cut the file while it was read: the test tested nothing";
  EXPECT_LT(seconds, 400);
}

// Under an address-space limit, at every level from ample to where the libraries themselves no
// longer load: a result or the out-of-memory line, promptly (no hang in OpenBLAS).
TEST_F(BigFiles, OutOfMemoryUnderUlimitEndsPromptlyInOneLine) {
  if (testing_support::kAddressSanitizer)
    GTEST_SKIP() << "AddressSanitizer does not start under ulimit -v";
  int results = 0, refusals = 0, reached_main = 0;
  for (const int kib : {4000000, 2000000, 1500000, 1200000, 1100000, 1000000, 900000, 800000,
                        700000, 650000, 600000, 550000, 500000}) {
    const std::string output = dir_.file("y.pt");
    ::unlink(output.c_str());
    const Outcome r =
        run_shell("ulimit -v " + std::to_string(kib) + " && exec " + kBinary +
                      " run --device cpu --model mish_mish --weights " + file("big_w.pt") +
                      " --input " + file("big_x.pt") + " --output " + output,
                  dir_, 60);
    SCOPED_TRACE("ulimit -v " + std::to_string(kib));
    // Below what the libraries need to load, nothing of the program runs: the dynamic loader
    // fails (exit 127), or OpenBLAS cannot start its threads as it loads.
    if ((r.exit_code == 127 &&
         r.err.find("error while loading shared libraries") != std::string::npos) ||
        r.err.rfind("OpenBLAS blas_thread_init: pthread_create failed", 0) == 0) {
      break;
    }
    ++reached_main;
    EXPECT_FALSE(r.timed_out) << describe(r);
    EXPECT_EQ(r.signal, 0) << describe(r);
    expect_result_or_one_line(r, output);
    if (r.exit_code == 0) ++results;
    if (r.exit_code == 2) {
      ++refusals;
      EXPECT_NE(r.err.find("out of memory"), std::string::npos) << describe(r);
    }
    EXPECT_TRUE(temporary_files(dir_).empty());
  }
  if (reached_main == 0) GTEST_SKIP() << "the libraries do not load under 4 GB of address space";
  std::printf("ulimit -v sweep: %d results, %d out-of-memory lines\n", results, refusals);
  // compare under the limit: the out-of-memory line, then a prompt exit (OpenBLAS's shutdown
  // joined a thread spinning on malloc); nothing written.
  for (const int kib : {600000, 800000, 1000000}) {
    const std::string json = dir_.file("j.json");
    ::unlink(json.c_str());
    const Outcome r = run_shell("ulimit -v " + std::to_string(kib) + " && exec " + kBinary +
                                    " compare --device cpu --iters 1 --warmup 0 --json " + json,
                                dir_, 60);
    SCOPED_TRACE("compare, ulimit -v " + std::to_string(kib));
    if (r.exit_code == 127 || r.err.rfind("OpenBLAS", 0) == 0) continue;  // as above
    EXPECT_FALSE(r.timed_out) << describe(r);
    EXPECT_EQ(r.signal, 0) << describe(r);
    if (r.exit_code == 0) {
      EXPECT_NO_THROW(nlohmann::json::parse(read_file(json))) << describe(r);
    } else {
      expect_one_line_error(r, "out of memory on cpu");
      EXPECT_FALSE(file_exists(json));
    }
  }
}

// A write that fails (a file-size limit, a full file system) names the option whose file it is;
// nothing is left behind.
TEST(Reliability, WriteFailuresNameTheOption) {
  TempDir dir;
  const std::string small_run = " run --device cpu --model mish_mish --weights " + kFixtures +
                                "mish_mish.pt --input " + kFixtures + "mish_mish_input.pt";
  // ulimit -f 1 (512 or 1024 bytes, as the shell counts): each file below is larger.
  const std::string limit = "ulimit -f 1 && exec " + kBinary;
  const std::string bench =
      " bench --device cpu --batches 1 --in-features 16 --out-features 8 "
      "--iters 1 --warmup 0";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {small_run + " --output " + dir.file("y.pt"), "--output " + dir.file("y.pt")},
      {" compare --device cpu --batch 2 --in-features 8 --out-features 8 --iters 1 --warmup 0 "
       "--json " +
           dir.file("c.json"),
       "--json " + dir.file("c.json")},
      {bench + " --csv " + dir.file("b.csv"), "--csv " + dir.file("b.csv")},
      {bench + " --plot " + dir.file("b.svg"), "--plot " + dir.file("b.svg")}};
  for (const auto& [args, option] : cases) {
    const Outcome r = run_shell(limit + args, dir, 120);
    expect_one_line_error(r, option + ": cannot write: File too large");
    EXPECT_EQ(r.signal, 0) << "SIGXFSZ is an error, not death: " << describe(r);
  }
  for (const char* name : {"y.pt", "c.json", "b.csv", "b.svg"}) {
    EXPECT_FALSE(file_exists(dir.file(name))) << name;
  }
  EXPECT_TRUE(temporary_files(dir).empty());
  // A full file system: a tiny tmpfs filled up, where a user and mount namespace can be had.
  const std::string full = dir.file("full");
  ASSERT_EQ(::mkdir(full.c_str(), 0755), 0);
  const std::string mount = "unshare -rm sh -c 'mount -t tmpfs -o size=8k tmpfs " + full +
                            " && dd if=/dev/zero of=" + full + "/filler bs=1k count=8 2>/dev/null";
  if (std::system((mount + "; test -s " + full + "/filler' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "no user and mount namespace for a tmpfs here: ENOSPC not checked";
  }
  const Outcome r =
      run_shell(mount + "; exec " + kBinary + small_run + " --output " + full + "/y.pt'", dir);
  expect_one_line_error(r, "--output " + full + "/y.pt: cannot write: No space left on device");
}

TEST(Reliability, CommandLineRefusalsSayWhatWasWrong) {
  TempDir dir;
  const auto refuse = [&](const std::string& args, const std::string& expected) {
    expect_one_line_error(run_shell("exec " + kBinary + " " + args, dir), expected);
  };
  // With the command word as without it: the missing value, not an extra argument.
  for (const std::string command : {"", "compare ", "bench "}) {
    refuse(command + "--batch --iters 3", "--batch: expected a value, got the option '--iters'");
  }
  refuse("run --weights --input x.pt --output y.pt",
         "--weights: expected a value, got the option '--input'");
  // --threads: at most a few times the hardware's threads.
  const int most = 4 * int(std::max(1u, std::thread::hardware_concurrency()));
  const std::string bound = "--threads: expected a positive integer up to " + std::to_string(most) +
                            " (4 x the " + std::to_string(most / 4) + " hardware threads), got '";
  for (const std::string& threads :
       std::vector<std::string>{"10000", "2147483647", std::to_string(most + 1)}) {
    refuse("--threads " + threads, bound + threads + "'");
  }
  const Outcome help = run_shell("exec " + kBinary + " --help", dir);
  EXPECT_NE(help.out.find("at most 4 x the hardware threads (" + std::to_string(most) + " here"),
            std::string::npos)
      << help.out;
  const Outcome at_most =
      run_shell("exec " + kBinary + " --device cpu --threads " + std::to_string(most) +
                    " --batch 2 --in-features 8 --out-features 8 --iters 1",
                dir);
  EXPECT_EQ(at_most.exit_code, 0) << describe(at_most);
}

// bench estimates every batch's memory before it times the first: a batch that cannot fit is
// refused at once, naming --batches, with nothing printed or timed.
TEST(Reliability, BenchChecksEveryBatchsMemoryBeforeTiming) {
  TempDir dir;
  const Outcome r = run_shell("exec " + kBinary +
                                  " bench --device cpu --batches 1,1000000 --in-features 100000 "
                                  "--iters 1 --warmup 0",
                              dir, 60);
  expect_one_line_error(r, "out of memory on cpu: tried to allocate about ");
  EXPECT_NE(r.err.find(" for batch 1000000 of --batches (swish_chain, float32; "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("; lower --batches, --in-features or --out-features"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "") << "nothing timed";
  EXPECT_LT(r.seconds, 30);
  const Outcome huge = run_shell("exec " + kBinary +
                                     " bench --device cpu --batch 2147483647 --in-features "
                                     "2147483647 --iters 1 --warmup 0",
                                 dir, 60);
  expect_one_line_error(huge, " for batch 2147483647 of --batch ");
}

// Shapes whose bytes overflow 64-bit counts, or exceed the memory available, are out of memory
// too, with what to lower, at once (on a system that overcommits memory, a weight of 64 TiB would
// otherwise be drawn page by page for hours).
TEST(Reliability, OverflowingShapesAreOutOfMemory) {
  TempDir dir;
  expect_one_line_error(
      run_shell("exec " + kBinary +
                    " compare --device cpu --in-features 2147483647 --out-features 2147483647",
                dir, 60),
      "out of memory on cpu: tried to allocate more than 8.00 EiB (the size overflows 64-bit byte "
      "counts); "
      "lower --batch, --in-features or --out-features");
  expect_one_line_error(run_shell("exec " + kBinary +
                                      " compare --device cpu --batch 2147483647 --in-features "
                                      "2147483647",
                                  dir, 60),
                        "out of memory on cpu: tried to allocate ");
}

// A FIFO (no writer), a device, a directory as --weights or --input: refused before they are
// opened, at once.
TEST(Reliability, NonRegularInputsAreRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string weights = kFixtures + "mish_mish.pt", input = kFixtures + "mish_mish_input.pt";
  const auto run = [&](const std::string& w, const std::string& x) {
    return run_shell("exec " + kBinary + " run --device cpu --model mish_mish --weights " + w +
                         " --input " + x + " --output " + dir.file("y.pt"),
                     dir, 60);
  };
  expect_one_line_error(run(fifo, input),
                        "--weights " + fifo + ": cannot open: not a regular file (a FIFO)");
  expect_one_line_error(run(weights, fifo),
                        "--input " + fifo + ": cannot open: not a regular file (a FIFO)");
  expect_one_line_error(run(weights, "/dev/zero"),
                        "--input /dev/zero: cannot open: not a regular file (a character device)");
  expect_one_line_error(run(dir.path(), input),
                        "--weights " + dir.path() + ": cannot open: Is a directory");
}

// A problem with --input gets the advice for a tensor, not for a state dict.
TEST(Reliability, InputProblemsGetTheAdviceForATensor) {
  TempDir dir;
  for (const char* name : {"compressed.pt", "torchscript.pt", "legacy.pt"}) {
    const std::string input = kFixtures + "loader/torch1.13/" + name;
    const Outcome r =
        run_shell("exec " + kBinary + " run --device cpu --model mish_mish --weights " + kFixtures +
                      "mish_mish.pt --input " + input + " --output " + dir.file("y.pt"),
                  dir, 60);
    expect_one_line_error(r, "--input " + input + ": ");
    EXPECT_NE(r.err.find("torch.save(tensor, path)"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("state_dict()"), std::string::npos) << r.err;
  }
}

// --- conversions that would lose what the file holds ------------------------------------------

// Buffers of integer types beside a float parameter.
struct Counters : torch::nn::Module {
  Counters() {
    weight = register_parameter("weight", torch::zeros({2}));
    count = register_buffer("count", torch::zeros({2}, torch::kInt));
    flag = register_buffer("flag", torch::zeros({2}, torch::kBool));
  }
  torch::Tensor weight, count, flag;
};

std::string refusal(torch::nn::Module& model,
                    const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  NamedTensors file;
  file.tensors = tensors;
  return message_of<LoadError>([&] { apply_state_dict(model, file, "w.pt"); }, "(loaded)");
}

TEST(LossyConversions, AreRefusedWithTheKeyAndBothDtypes) {
  auto model = make_model("mish_mish", 3, 2, uint64_t{0});
  const torch::Tensor weight = model->linear()->weight.detach().clone();
  const torch::Tensor w = torch::rand({2, 3}), b = torch::rand({2});
  EXPECT_EQ(refusal(*model, {{"linear.weight", torch::complex(w, w)}, {"linear.bias", b}}),
            "w.pt: linear.weight: cannot convert ComplexFloat to the model's Float: the imaginary "
            "part would be dropped (save tensor.real if only it is meant)");
  EXPECT_EQ(refusal(*model, {{"linear.weight", w.to(torch::kDouble) * 1e300}, {"linear.bias", b}}),
            "w.pt: linear.weight: cannot convert Double to the model's Float: 6 finite values "
            "beyond its range would become infinite");
  const torch::Tensor big = torch::full({2}, (int64_t{1} << 24) + 1, torch::kLong);
  EXPECT_EQ(refusal(*model, {{"linear.weight", w}, {"linear.bias", big}}),
            "w.pt: linear.bias: cannot convert Long to the model's Float: integer values from "
            "16777217 to 16777217 would not all come through exactly");
  EXPECT_TRUE(model->linear()->weight.equal(weight)) << "a refused load changes nothing";
  // What loses nothing but rounding keeps its note.
  NamedTensors file;
  file.tensors = {{"linear.weight", w.to(torch::kDouble)},
                  {"linear.bias", torch::tensor({-3, 1 << 24}, torch::kLong)}};
  const auto notices = apply_state_dict(*model, file, "w.pt");
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0], "converted dtype: linear.weight Double->Float, linear.bias Long->Float");
  EXPECT_TRUE(model->linear()->bias.equal(torch::tensor({-3.f, 16777216.f})));

  Counters counters;
  const torch::Tensor zeros = torch::zeros({2});
  EXPECT_EQ(refusal(counters, {{"weight", zeros}, {"count", torch::rand({2})}, {"flag", zeros}}),
            "w.pt: count: cannot convert Float to the model's Int: floating-point values would be "
            "cut to integers");
  EXPECT_EQ(refusal(counters, {{"weight", zeros},
                               {"count", torch::tensor({int64_t{0}, int64_t{1} << 40})},
                               {"flag", torch::tensor({0, 1})}}),
            "w.pt: count: cannot convert Long to the model's Int: values from 0 to 1099511627776 "
            "do not fit its range -2147483648 to 2147483647");
  EXPECT_EQ(refusal(counters, {{"weight", zeros},
                               {"count", torch::tensor({7, -7})},
                               {"flag", torch::tensor({int64_t{0}, int64_t{2}})}}),
            "w.pt: flag: cannot convert Long to the model's Bool: values from 0 to 2 do not fit "
            "its range 0 to 1");
  EXPECT_EQ(refusal(counters, {{"weight", zeros},
                               {"count", torch::tensor({7, -7})},
                               {"flag", torch::tensor({int64_t{0}, int64_t{1}})}}),
            "(loaded)");
}

// Through the program: complex weights are refused, naming the option, the key and the dtypes.
TEST(LossyConversions, ComplexWeightsAreRefusedByTheProgram) {
  TempDir dir;
  const torch::Tensor w = torch::rand({48, 64});
  save_state_dict({{"linear.weight", torch::complex(w, w)}, {"linear.bias", torch::rand({48})}},
                  dir.file("complex.pt"));
  expect_one_line_error(
      run_shell("exec " + kBinary + " run --device cpu --model mish_mish --weights " +
                    dir.file("complex.pt") + " --input " + kFixtures +
                    "mish_mish_input.pt --output " + dir.file("y.pt"),
                dir, 60),
      "--weights " + dir.file("complex.pt") +
          ": linear.weight: cannot convert ComplexFloat to the model's Float: the imaginary part "
          "would be dropped");
  EXPECT_FALSE(file_exists(dir.file("y.pt")));
}

}  // namespace
}  // namespace fusedlinear
