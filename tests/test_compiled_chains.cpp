// Run-time chains whose kernels NVRTC compiles (kernels/cuda/jit/): a chain spec's compiled
// epilogue, and its whole forward on the Hopper GEMM in every mode, give bitwise the output of a
// declaration of the same chain (compiled_chain_models.h, registered for this test), in every
// dtype, with and without bias (the epilogue aligned or not); each module is compiled once and
// then found in memory, and written to the disk cache, which a later run reads. GPU only:
// skipped, with the reason, without a CUDA device or without NVRTC in the build (the Hopper
// GEMM's without a GPU of compute capability 9.0).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/ops/chain_registry.h"
#include "kernels/ops/ops.h"
#include "tests/compiled_chain_models.h"
#include "tests/test_support.h"

#ifdef FUSEDLINEAR_WITH_JIT
#include <ATen/cuda/CUDAContext.h>

#include "kernels/cuda/jit/compiled_chains.h"
#include "kernels/cuda/jit/kernel_cache.h"
#endif

namespace fusedlinear {
namespace {

class CompiledChainsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef FUSEDLINEAR_WITH_JIT
    GTEST_SKIP() << "this build has no CUDA kernels compiled at run time (no CUDA or no NVRTC)";
#else
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU tests skipped";
    // Compiling is on by default; set in case the environment turned it off, before the first
    // lookup of a spec makes its kernels.
    setenv("FUSEDLINEAR_JIT", "1", 1);
#endif
  }
};

#ifdef FUSEDLINEAR_WITH_JIT
// Expects the same bits, or says how far apart the two lie and where (`what`).
void expect_same_bits(const torch::Tensor& got, const torch::Tensor& expected,
                      const std::string& what) {
  EXPECT_TRUE(torch::equal(got, expected))
      << what << ": max abs diff "
      << (got.to(torch::kFloat64) - expected.to(torch::kFloat64)).abs().max().item<double>();
}

// The chain's parameters for `cols` features, one of them of one element.
std::vector<torch::Tensor> params_for(const ParsedChain& chain, int64_t cols,
                                      const torch::TensorOptions& options) {
  std::vector<torch::Tensor> params;
  for (const std::string& key : chain.slot_params()) {
    params.push_back(key == "shift" ? torch::randn({1}, options) : torch::randn({cols}, options));
  }
  return params;
}

TEST_F(CompiledChainsGpu, SameBitsAsADeclarationOfTheChain) {
  torch::manual_seed(3);
  for (const std::string name : {CompiledSwishChain::kName, CompiledMixedChain::kName}) {
    const ChainEntry& declared = find_chain(name);
    ASSERT_TRUE(declared.compiled);
    const std::string spec = declared.chain.to_string();
    const ChainEntry& runtime = find_chain(spec);
    ASSERT_FALSE(runtime.compiled);
    for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
      const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
      // Aligned rows (the 16-byte kernels), odd ones (one element a thread), and a view whose
      // base is off 16 bytes.
      for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{257, 1024}, {33, 131}}) {
        const torch::Tensor y = torch::randn({rows, cols}, options) * 3;
        const torch::Tensor bias = torch::randn({cols}, options);
        const std::vector<torch::Tensor> params = params_for(declared.chain, cols, options);
        for (const bool with_bias : {true, false}) {
          const c10::optional<torch::Tensor> b =
              with_bias ? c10::optional<torch::Tensor>(bias) : c10::nullopt;
          const torch::Tensor expected = fused_epilogue(y, b, params, name);
          const torch::Tensor got = fused_epilogue(y, b, params, spec);
          expect_same_bits(got, expected,
                           spec + " " + c10::toString(dtype) + " [" + std::to_string(rows) + ", " +
                               std::to_string(cols) + "] bias " + std::to_string(with_bias));
        }
        const torch::Tensor offset =
            torch::randn({rows * cols + 1}, options).narrow(0, 1, rows * cols).view({rows, cols});
        EXPECT_TRUE(torch::equal(fused_epilogue(offset, bias, params, spec),
                                 fused_epilogue(offset, bias, params, name)))
            << spec << " " << dtype << " misaligned";
      }
    }
  }
  const cuda::jit::CompileCounts counts = cuda::jit::compile_counts();
  EXPECT_EQ(counts.failed, 0);
  EXPECT_GT(counts.compiled + counts.read_from_disk, 0);
}

// A chain no other test runs: its first call compiles (or reads the disk cache, where an earlier
// run left it), later calls find it in memory; the entry is on disk under FUSEDLINEAR_CACHE_DIR.
TEST_F(CompiledChainsGpu, CompiledOnceThenFoundInMemoryAndOnDisk) {
  const std::string directory = cuda::jit::kernel_cache_directory();
  if (directory.empty()) GTEST_SKIP() << "no cache directory (HOME unset)";
  const std::string spec = "softsign,mul(0.625),tanhshrink,add(0.375)";
  const torch::Tensor y = torch::randn({64, 256}, torch::TensorOptions().device(torch::kCUDA));
  const cuda::jit::CompileCounts before = cuda::jit::compile_counts();
  const auto start = std::chrono::steady_clock::now();
  fused_epilogue(y, c10::nullopt, {}, spec);
  torch::cuda::synchronize();
  const double first =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const cuda::jit::CompileCounts after_first = cuda::jit::compile_counts();
  EXPECT_EQ(after_first.compiled + after_first.read_from_disk,
            before.compiled + before.read_from_disk + 1);
  const auto again = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) fused_epilogue(y, c10::nullopt, {}, spec);
  torch::cuda::synchronize();
  const double later =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count();
  const cuda::jit::CompileCounts after = cuda::jit::compile_counts();
  EXPECT_EQ(after.compiled, after_first.compiled);
  EXPECT_EQ(after.read_from_disk, after_first.read_from_disk);
  std::cout << "first call " << first * 1e3 << " ms ("
            << (after_first.compiled > before.compiled ? "compiled" : "read from the disk cache")
            << "), three later calls " << later * 1e3 << " ms\n";
  bool on_disk = false;
  for (const std::string& file : testing_support::list_dir(directory)) {
    on_disk = on_disk || (file.size() == 22 && file.substr(16) == ".entry");
  }
  EXPECT_TRUE(on_disk) << "no entry in " << directory;
}

// A Hopper GEMM forward (the gemm_epilogue op) of `chain` in `precision`, W split as it takes it.
torch::Tensor hopper_forward(const torch::Tensor& x, const torch::Tensor& w,
                             const c10::optional<torch::Tensor>& bias,
                             const std::vector<torch::Tensor>& params, const std::string& chain,
                             Precision precision) {
  if (precision == Precision::kIeee) {
    return fused_gemm_epilogue(x, w, c10::nullopt, bias, params, chain, precision);
  }
  if (precision == Precision::kBf16x6) {
    const auto [hi, mid, lo] = split_bf16_three(w);
    return fused_gemm_epilogue(x, hi, mid, bias, params, chain, precision, lo);
  }
  const auto [hi, lo] = split_bf16(w);
  return fused_gemm_epilogue(
      x, hi, precision == Precision::kBf16x3 ? c10::optional<torch::Tensor>(lo) : c10::nullopt,
      bias, params, chain, precision);
}

// Skips a test of the Hopper GEMM on another GPU.
#define SKIP_UNLESS_HOPPER()                                                          \
  do {                                                                                \
    const cudaDeviceProp* props = at::cuda::getCurrentDeviceProperties();             \
    if (props->major != 9 || props->minor != 0) {                                     \
      GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0, this GPU has " \
                   << props->major << "." << props->minor;                            \
    }                                                                                 \
  } while (0)

// The Hopper GEMM's whole forward of a chain spec, its kernels compiled at run time: bitwise the
// declaration's, in every mode the Hopper GEMM takes (float32 x: bf16, bf16x3, bf16x6; 16-bit x:
// its own products), with bias and without, on rows and columns that are not multiples of the
// tiles. Each kernel instance a forward picks is compiled once (or read from the disk cache),
// then found in memory.
TEST_F(CompiledChainsGpu, HopperGemmSameBitsAsADeclarationOfTheChain) {
  SKIP_UNLESS_HOPPER();
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const cuda::jit::CompileCounts before = cuda::jit::compile_counts();
  const int64_t rows = 300, out = 520, in = 256;
  int instances = 0;
  for (const std::string name : {CompiledSwishChain::kName, CompiledMixedChain::kName}) {
    const ChainEntry& declared = find_chain(name);
    const std::string spec = declared.chain.to_string();
    ASSERT_EQ(gpu_chain_kernels(find_chain(spec)), ChainKernelKind::kCompiledAtRunTime);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
      const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
      const torch::Tensor x = torch::rand({rows, in}, options);
      const torch::Tensor w = (torch::rand({out, in}, options) * 2 - 1) * 0.0625;
      const torch::Tensor bias = torch::randn({out}, options) * 0.1;
      const std::vector<torch::Tensor> params = params_for(declared.chain, out, options);
      const std::vector<Precision> precisions =
          dtype == torch::kFloat32
              ? std::vector<Precision>{Precision::kBf16, Precision::kBf16x3, Precision::kBf16x6}
              : std::vector<Precision>{Precision::kIeee};
      for (const Precision precision : precisions) {
        ++instances;  // one kernel a mode and dtype at this shape
        for (const bool with_bias : {true, false}) {
          const c10::optional<torch::Tensor> b =
              with_bias ? c10::optional<torch::Tensor>(bias) : c10::nullopt;
          const torch::Tensor expected = hopper_forward(x, w, b, params, name, precision);
          const torch::Tensor got = hopper_forward(x, w, b, params, spec, precision);
          expect_same_bits(got, expected,
                           spec + " " + c10::toString(dtype) + " " + precision_name(precision) +
                               " bias " + std::to_string(with_bias));
        }
      }
    }
  }
  const cuda::jit::CompileCounts after = cuda::jit::compile_counts();
  EXPECT_EQ(after.failed, before.failed);
  EXPECT_EQ(after.compiled + after.read_from_disk,
            before.compiled + before.read_from_disk + instances);
}

// The small-batch kernels' whole forward of a chain spec, compiled at run time: bitwise the
// declaration's in every variant (the rows and alignments pick them: float32 W one, four and eight
// rows and the lane-rows kernel from 9; bf16 and bf16x3 on the tensor cores, bf16x3 staged at 9-16,
// 17-32 and 33-64 rows; 16-bit models; each one element a load where k is odd), with bias and
// without, k split over blocks (few outputs, a long k) so that the reduce kernel runs too.
TEST_F(CompiledChainsGpu, SmallBatchSameBitsAsADeclarationOfTheChain) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  const cuda::jit::CompileCounts before = cuda::jit::compile_counts();
  const int64_t out = 136;
  struct Case {
    torch::ScalarType dtype;
    Precision precision;
    std::vector<int64_t> rows;
  };
  const std::vector<Case> cases = {{torch::kFloat32, Precision::kIeee, {1, 4, 8, 20}},
                                   {torch::kFloat32, Precision::kBf16, {3}},
                                   {torch::kFloat32, Precision::kBf16x3, {3, 12, 24, 48}},
                                   {torch::kFloat16, Precision::kIeee, {5}},
                                   {torch::kBFloat16, Precision::kIeee, {5}}};
  for (const std::string name : {CompiledSwishChain::kName, CompiledMixedChain::kName}) {
    const ChainEntry& declared = find_chain(name);
    const std::string spec = declared.chain.to_string();
    for (const Case& one : cases) {
      const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(one.dtype);
      for (const int64_t in : {int64_t(4096), int64_t(4099)}) {
        const torch::Tensor w = (torch::rand({out, in}, options) * 2 - 1) * 0.03;
        const torch::Tensor bias = torch::randn({out}, options) * 0.1;
        const std::vector<torch::Tensor> params = params_for(declared.chain, out, options);
        torch::Tensor w_main = w;
        c10::optional<torch::Tensor> w_lo;
        if (one.precision != Precision::kIeee) {
          const auto [hi, lo] = split_bf16(w);
          w_main = hi;
          if (one.precision == Precision::kBf16x3) w_lo = lo;
        }
        for (const int64_t rows : one.rows) {
          const torch::Tensor x = torch::rand({rows, in}, options);
          for (const bool with_bias : {true, false}) {
            const c10::optional<torch::Tensor> b =
                with_bias ? c10::optional<torch::Tensor>(bias) : c10::nullopt;
            const torch::Tensor expected =
                fused_linear_epilogue(x, w_main, w_lo, b, params, name, one.precision);
            const torch::Tensor got =
                fused_linear_epilogue(x, w_main, w_lo, b, params, spec, one.precision);
            expect_same_bits(got, expected,
                             spec + " " + c10::toString(one.dtype) + " " +
                                 precision_name(one.precision) + " rows " + std::to_string(rows) +
                                 " in " + std::to_string(in) + " bias " +
                                 std::to_string(with_bias));
          }
        }
      }
    }
  }
  const cuda::jit::CompileCounts after = cuda::jit::compile_counts();
  EXPECT_EQ(after.failed, before.failed);
  EXPECT_GT(after.compiled + after.read_from_disk, before.compiled + before.read_from_disk);
}

// A chain no other test runs, in a cache of its own: its first forward compiles its kernel, and
// once the process's modules are unloaded, the next forward reads it from the disk cache instead
// of compiling it again, with the same bits.
TEST_F(CompiledChainsGpu, HopperGemmKernelReadFromTheDiskCacheOnTheSecondRun) {
  SKIP_UNLESS_HOPPER();
  torch::NoGradGuard no_grad;
  const testing_support::TempDir cache;
  const char* saved = std::getenv("FUSEDLINEAR_CACHE_DIR");
  const std::string kept = saved ? saved : "";
  setenv("FUSEDLINEAR_CACHE_DIR", cache.path().c_str(), 1);
  const std::string spec = "selu,mul(0.75),softsign";
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor x = torch::rand({256, 512}, options);
  const torch::Tensor w = torch::rand({384, 512}, options) * 0.05;
  const auto timed_forward = [&](double& seconds) {
    const auto start = std::chrono::steady_clock::now();
    const torch::Tensor y = hopper_forward(x, w, c10::nullopt, {}, spec, Precision::kBf16x3);
    torch::cuda::synchronize();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return y;
  };
  const cuda::jit::CompileCounts before = cuda::jit::compile_counts();
  double first = 0, second = 0;
  const torch::Tensor compiled = timed_forward(first);
  const cuda::jit::CompileCounts after_first = cuda::jit::compile_counts();
  EXPECT_EQ(after_first.compiled, before.compiled + 1);
  EXPECT_EQ(testing_support::list_dir(cache.path()).size(), 1u);
  cuda::jit::unload_compiled_modules();
  const torch::Tensor read = timed_forward(second);
  const cuda::jit::CompileCounts after = cuda::jit::compile_counts();
  EXPECT_EQ(after.compiled, after_first.compiled);
  EXPECT_EQ(after.read_from_disk, after_first.read_from_disk + 1);
  EXPECT_EQ(after.failed, before.failed);
  EXPECT_TRUE(torch::equal(read, compiled));
  std::cout << "the Hopper GEMM's bf16x3 kernel: first forward " << first * 1e3
            << " ms (compiled), after unloading " << second * 1e3 << " ms (read from disk)\n";
  if (saved) {
    setenv("FUSEDLINEAR_CACHE_DIR", kept.c_str(), 1);
  } else {
    unsetenv("FUSEDLINEAR_CACHE_DIR");
  }
}

#else
// Listed, and skipped with SetUp's reason, in builds without compiled chains.
TEST_F(CompiledChainsGpu, SameBitsAsADeclarationOfTheChain) {}
TEST_F(CompiledChainsGpu, CompiledOnceThenFoundInMemoryAndOnDisk) {}
TEST_F(CompiledChainsGpu, HopperGemmSameBitsAsADeclarationOfTheChain) {}
TEST_F(CompiledChainsGpu, HopperGemmKernelReadFromTheDiskCacheOnTheSecondRun) {}
TEST_F(CompiledChainsGpu, SmallBatchSameBitsAsADeclarationOfTheChain) {}
#endif

}  // namespace
}  // namespace fusedlinear
