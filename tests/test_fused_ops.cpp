// The fused ops against the eager libtorch ops they replace, on CPU (each of its loops: scalar,
// AVX2, AVX-512, as far as this CPU runs them) and (where there is one) CUDA: many shapes, all
// three dtypes, non-contiguous and misaligned inputs, NaN/Inf, float64 on a dense grid, and bad
// arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <tuple>

#include "kernels/cpu/epilogue.h"
#include "kernels/ops/ops.h"
#include "modules/models.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include "tests/cuda_graph_support.h"
#endif

namespace fusedlinear {
namespace {

struct Tolerance {
  double atol, rtol;
};

// Eager rounds after every op; the fused op computes in float and rounds once. In float32 the
// two agree to a few ulp; in the half types, to a few units of the type's last place.
Tolerance tolerance_for(torch::ScalarType dtype) {
  if (dtype == torch::kFloat16) return {4e-3, 4e-3};
  if (dtype == torch::kBFloat16) return {3e-2, 3e-2};
  return {1e-5, 1e-5};
}

// y: the GEMM output without bias. Compares the model's fused epilogue (bias folded in) with
// its eager epilogue on y + bias.
void expect_fused_matches_eager(const std::string& name, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  const int64_t cols = y.size(-1);
  auto model = make_model(name, /*in_features=*/3, cols, /*seed=*/7);
  model->to(y.device(), y.scalar_type());
  const torch::Tensor fused = model->epilogue_fused(y);
  torch::Tensor eager;
  try {
    eager = model->epilogue_eager(y + model->linear()->bias);
  } catch (const c10::Error&) {
    // libtorch 1.13 has no CPU kernels for some ops in float16/bfloat16 (sigmoid, mish, ...):
    // there, eager runs in float32 and its result is rounded to the dtype.
    auto model32 = make_model(name, 3, cols, 7);
    model32->to(y.device());
    const torch::Tensor y32 = y.to(torch::kFloat32);
    eager = model32->epilogue_eager(y32 + model32->linear()->bias).to(y.scalar_type());
  }
  ASSERT_EQ(fused.sizes(), y.sizes());
  ASSERT_EQ(fused.scalar_type(), y.scalar_type());
  ASSERT_EQ(fused.device(), y.device());
  const Tolerance tol = tolerance_for(y.scalar_type());
  const torch::Tensor e = eager.to(torch::kFloat64), f = fused.to(torch::kFloat64);
  EXPECT_TRUE(torch::allclose(f, e, tol.rtol, tol.atol, /*equal_nan=*/true))
      << name << " " << y.scalar_type() << " " << y.sizes() << " on " << y.device()
      << ": max abs diff " << (f - e).abs().nan_to_num(0).max().item<double>();
  // NaN exactly where eager has NaN.
  EXPECT_TRUE(torch::equal(f.isnan(), e.isnan())) << name << " NaN positions differ";
}

using Shape = std::vector<int64_t>;
const std::vector<Shape> kShapes = {{1, 1},   {1, 7},    {3, 5},    {2, 8},     {7, 4099},
                                    {64, 48}, {33, 256}, {1, 4097}, {5, 3, 16}, {0, 8}};
const torch::ScalarType kDtypes[] = {torch::kFloat32, torch::kFloat16, torch::kBFloat16};

torch::Tensor random_gemm_output(const Shape& shape, torch::ScalarType dtype,
                                 torch::Device device) {
  // GEMM outputs of the reference workload are spread over a few units; include the tails.
  return (torch::randn(shape) * 3).to(device, dtype);
}

void run_shapes_and_dtypes(torch::Device device) {
  torch::manual_seed(0);
  for (const auto& name : model_names()) {
    for (const auto dtype : kDtypes) {
      for (const auto& shape : kShapes) {
        expect_fused_matches_eager(name, random_gemm_output(shape, dtype, device));
      }
    }
  }
}

// A transposed (non-contiguous) input, a view whose data starts 4 bytes past an aligned address
// (no 16-byte loads possible), and a row length that is not a multiple of the vector width.
void run_layouts(torch::Device device) {
  torch::manual_seed(1);
  for (const auto& name : model_names()) {
    for (const auto dtype : kDtypes) {
      const torch::Tensor transposed = random_gemm_output({40, 24}, dtype, device).t();
      ASSERT_FALSE(transposed.is_contiguous());
      expect_fused_matches_eager(name, transposed);

      const torch::Tensor flat = random_gemm_output({1 + 24 * 16}, dtype, device);
      const torch::Tensor misaligned = flat.narrow(0, 1, int64_t{24} * 16).view({24, 16});
      ASSERT_NE(reinterpret_cast<uintptr_t>(misaligned.data_ptr()) % 16, 0u);
      expect_fused_matches_eager(name, misaligned);

      expect_fused_matches_eager(name, random_gemm_output({9, 13}, dtype, device));
    }
  }
  // bias and add_value as views one element past an aligned address: the CUDA kernel cannot
  // read them 16 bytes at a time and takes its 1-element path, which must give the same bits.
  for (const auto dtype : kDtypes) {
    const torch::Tensor y = random_gemm_output({6, 32}, dtype, device);
    const torch::Tensor terms = random_gemm_output({1 + 2 * 32}, dtype, device);
    const torch::Tensor bias = terms.narrow(0, 1, 32), add_value = terms.narrow(0, 33, 32);
    ASSERT_NE(reinterpret_cast<uintptr_t>(bias.data_ptr()) % 16, 0u);
    EXPECT_TRUE(torch::equal(fused_swish_chain(y, add_value, bias),
                             fused_swish_chain(y, add_value.clone(), bias.clone())))
        << dtype;
    EXPECT_TRUE(torch::equal(fused_mish_mish(y, bias), fused_mish_mish(y, bias.clone()))) << dtype;
  }
}

// NaN, +-Inf, huge and tiny values spread through an input: same results as eager.
void run_special_values(torch::Device device) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor specials =
      torch::tensor({0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 88.0f, -88.0f, 1e4f, -1e4f, inf,
                     -inf, nan, 3e38f, -3e38f, 0.5f});
  for (const auto& name : model_names()) {
    expect_fused_matches_eager(name, specials.view({2, 8}).to(device));
    expect_fused_matches_eager(name, specials.view({2, 8}).to(device, torch::kFloat16));
    expect_fused_matches_eager(name, specials.view({4, 4}).to(device, torch::kFloat16));
    expect_fused_matches_eager(name, specials.view({1, 16}).to(device, torch::kBFloat16));
  }
}

// Both ops on y (on the CPU; run on `device`) against float64 PyTorch ops: float32 within 1e-6
// relative to max(1, |value|), as the host functors are held to; bfloat16 and float16 within one
// unit in their last place of the float64 value, so every result is one of the two values of the
// type around it. One allowance: the CUDA kernels flush intermediates below 2^-126 to zero
// (-ftz=true), so results below ~1e-36 in magnitude (mish(-88) = -5e-37, which bfloat16 holds)
// may come out as 0. NaN exactly where float64 has NaN.
void expect_within_an_ulp_of_float64(const torch::Tensor& y, const torch::Device& device,
                                     bool verbose = true) {
  namespace F = torch::nn::functional;
  const auto dtype = y.scalar_type();
  const torch::Tensor y64 = y.to(torch::kFloat64);
  const torch::Tensor zeros = torch::zeros({y.size(-1)}, torch::TensorOptions(dtype));
  const torch::Tensor mish64 = F::mish(F::mish(y64));
  const torch::Tensor swish64 = F::hardtanh(torch::gelu(torch::tanh(torch::sigmoid(y64) * y64)),
                                            F::HardtanhFuncOptions().min_val(-1).max_val(1));
  const struct {
    const char* name;
    torch::Tensor got, want;
  } cases[] = {
      {"mish_mish", fused_mish_mish(y.to(device)).cpu(), mish64},
      {"swish_chain", fused_swish_chain(y.to(device), zeros.to(device)).cpu(), swish64},
  };
  for (const auto& c : cases) {
    EXPECT_TRUE(torch::equal(c.got.isnan(), c.want.isnan())) << c.name << " NaN positions differ";
    const torch::Tensor err = (c.got.to(torch::kFloat64) - c.want).abs().nan_to_num(0);
    torch::Tensor bound;
    if (dtype == torch::kFloat32) {
      bound = 1e-6 * c.want.abs().clamp_min(1.0);
    } else {
      // ulp(v) = 2^(max(floor(log2 |v|), smallest normal exponent) - significand bits)
      const bool half = dtype == torch::kFloat16;
      bound =
          torch::exp2(c.want.abs().log2().floor().clamp_min(half ? -14 : -126) - (half ? 10 : 7)) +
          1e-36;
    }
    const torch::Tensor bad = (err > bound).view(-1);
    const int64_t n_bad = bad.sum().item<int64_t>();
    if (n_bad > 0) {
      const int64_t i = bad.nonzero()[0][0].item<int64_t>();
      ADD_FAILURE() << c.name << " " << dtype << " " << y.sizes() << " on " << device << ": "
                    << n_bad << " values off, first at y = " << y64.view(-1)[i].item<double>()
                    << ": " << c.got.view(-1)[i].item<double>() << ", float64 gives "
                    << c.want.view(-1)[i].item<double>();
    }
    if (verbose) {
      std::cout << "  " << c.name << " " << dtype << " " << y.sizes() << ": max error "
                << err.max().item<double>() << ", "
                << (err / bound).nan_to_num(0).max().item<double>() << " of the bound\n";
    }
  }
}

// The same on a dense grid of [-30, 30] and the values where the formulas change, in each
// dtype. Each grid runs twice: as a row of 600016 values (on the GPU 16-byte accesses, 4 or 8
// values a thread) and of 600015 (one value a thread; on the CPU a partial vector at the end).
void expect_accurate_against_float64(const torch::Device& device) {
  const torch::Tensor grid =
      torch::cat({torch::linspace(-30, 30, 600001),
                  torch::tensor({0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 88.0f, -88.0f, 1e4f,
                                 -1e4f, 9.5f, -9.5f, 9.4999f, 9.5001f, 19.99f})});
  ASSERT_EQ(grid.numel() % 8, 0);
  for (const auto dtype : kDtypes) {
    for (const int64_t first : {0, 1}) {
      const torch::Tensor y = grid.narrow(0, first, grid.numel() - first).to(dtype).view({1, -1});
      expect_within_an_ulp_of_float64(y, device);
    }
  }
}

// --- CPU: every test once per loop this CPU runs (the others report themselves skipped). ---

class FusedOpsCpu : public ::testing::TestWithParam<cpu::Capability> {
 protected:
  void SetUp() override {
    const auto supported = cpu::supported_capabilities();
    if (std::find(supported.begin(), supported.end(), GetParam()) == supported.end()) {
      GTEST_SKIP() << "this CPU or build has no " << cpu::capability_name(GetParam()) << " loop";
    }
    previous_ = cpu::capability();
    cpu::set_capability(GetParam());
  }
  void TearDown() override { cpu::set_capability(previous_); }

 private:
  cpu::Capability previous_ = cpu::Capability::kScalar;
};

INSTANTIATE_TEST_SUITE_P(Loop, FusedOpsCpu,
                         ::testing::Values(cpu::Capability::kScalar, cpu::Capability::kAvx2,
                                           cpu::Capability::kAvx512),
                         [](const auto& info) { return cpu::capability_name(info.param); });

TEST_P(FusedOpsCpu, MatchEagerAcrossShapesAndDtypes) { run_shapes_and_dtypes(torch::kCPU); }
TEST_P(FusedOpsCpu, NonContiguousAndMisalignedInputs) { run_layouts(torch::kCPU); }
TEST_P(FusedOpsCpu, NanAndInfinityAsEager) { run_special_values(torch::kCPU); }
TEST_P(FusedOpsCpu, AccurateAgainstFloat64OnDenseGrid) {
  expect_accurate_against_float64(torch::kCPU);
}

// Rows of 1 to 33 elements (2 x 16 + 1: up to two whole AVX-512 vectors and a partial one) in
// each dtype, values from [-30, 30] with NaN and +-inf among them: within the float64 bounds,
// NaN where eager has NaN, and each element the same bits as when it sits elsewhere in a vector.
TEST_P(FusedOpsCpu, VectorTailsAccurateAndIndependentOfPosition) {
  torch::manual_seed(8);
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto dtype : kDtypes) {
    for (int64_t cols = 1; cols <= 33; ++cols) {
      torch::Tensor y = torch::rand({3, cols}) * 60 - 30;
      y.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
      y.view(-1)[-1] = cols % 2 ? inf : -inf;
      y = y.to(dtype);
      expect_within_an_ulp_of_float64(y, torch::kCPU, /*verbose=*/false);
      expect_fused_matches_eager("mish_mish", y);
      expect_fused_matches_eager("swish_chain", y);
      // The same values one element further on in a longer row: other lanes, other vectors.
      const torch::Tensor shifted = torch::cat({torch::zeros({3, 1}, dtype), y}, 1);
      const torch::Tensor zeros = torch::zeros({cols}, dtype);
      const torch::Tensor zeros1 = torch::zeros({cols + 1}, dtype);
      EXPECT_TRUE(torch::equal(fused_mish_mish(y).nan_to_num(0),
                               fused_mish_mish(shifted).narrow(1, 1, cols).nan_to_num(0)))
          << dtype << " " << cols;
      EXPECT_TRUE(torch::equal(fused_swish_chain(y, zeros).nan_to_num(0),
                               fused_swish_chain(shifted, zeros1).narrow(1, 1, cols).nan_to_num(0)))
          << dtype << " " << cols;
    }
  }
}

TEST_P(FusedOpsCpu, WithoutBiasIsTheChainAlone) {
  torch::manual_seed(2);
  const torch::Tensor y = torch::randn({6, 10});
  const torch::Tensor add = torch::randn({10});
  namespace F = torch::nn::functional;
  torch::Tensor want = y + add;
  want = torch::tanh(torch::sigmoid(want) * want);
  want = F::hardtanh(torch::gelu(want), F::HardtanhFuncOptions().min_val(-1).max_val(1));
  EXPECT_TRUE(torch::allclose(fused_swish_chain(y, add), want, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(fused_mish_mish(y), F::mish(F::mish(y)), 1e-6, 1e-6));
}

// Every check at the op boundary fails with a message naming what was expected and what came.
void expect_error(const std::function<void()>& call, const std::string& expected) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing: " << expected;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
        << "message: " << e.what_without_backtrace() << "\nexpected to contain: " << expected;
  }
}

// Every loop the CPU runs gives the same results as the scalar one, to a few float ulp (their
// exp and tanh are Sleef's where the scalar loop's are libm's).
TEST(FusedOpsCpuLoops, AgreeWithTheScalarLoop) {
  torch::manual_seed(9);
  const cpu::Capability previous = cpu::capability();
  for (const auto dtype : kDtypes) {
    const torch::Tensor y = (torch::randn({37, 1000}) * 4).to(dtype);
    const torch::Tensor add = torch::randn({1000}).to(dtype);
    cpu::set_capability(cpu::Capability::kScalar);
    const torch::Tensor mish = fused_mish_mish(y).to(torch::kFloat32);
    const torch::Tensor swish = fused_swish_chain(y, add).to(torch::kFloat32);
    for (const auto capability : cpu::supported_capabilities()) {
      cpu::set_capability(capability);
      // float32: a few ulp; 16 bits: at most one unit of the type where the float results sit
      // on either side of a rounding boundary.
      const double tol = dtype == torch::kFloat32 ? 1e-6 : dtype == torch::kFloat16 ? 2e-3 : 1.6e-2;
      EXPECT_TRUE(torch::allclose(fused_mish_mish(y).to(torch::kFloat32), mish, tol, tol))
          << cpu::capability_name(capability) << " " << dtype;
      EXPECT_TRUE(torch::allclose(fused_swish_chain(y, add).to(torch::kFloat32), swish, tol, tol))
          << cpu::capability_name(capability) << " " << dtype;
    }
  }
  cpu::set_capability(previous);
}

TEST(FusedOpsCpuLoops, ScalarAlwaysSupportedAndUnsupportedRefused) {
  const auto supported = cpu::supported_capabilities();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.back(), cpu::Capability::kScalar);
  EXPECT_NE(std::find(supported.begin(), supported.end(), cpu::capability()), supported.end());
  for (const auto capability : {cpu::Capability::kAvx2, cpu::Capability::kAvx512}) {
    if (std::find(supported.begin(), supported.end(), capability) == supported.end()) {
      EXPECT_THROW(cpu::set_capability(capability), std::invalid_argument);
    }
  }
}

TEST(FusedOpsCpuInputs, RejectsBadInputsWithClearMessages) {
  const torch::Tensor y = torch::randn({4, 8});
  expect_error([&] { fused_mish_mish(y.to(torch::kFloat64)); },
               "expected y of dtype float32, float16 or bfloat16, got Double");
  expect_error(
      [&] {
        fused_mish_mish(torch::ones({4, 8}, torch::kInt32));
      },
      "expected y of dtype float32, float16 or bfloat16, got Int");
  expect_error([&] { fused_mish_mish(torch::tensor(1.0f)); },
               "expected y with at least one dimension");
  expect_error([&] { fused_swish_chain(y, torch::randn({7})); },
               "expected add_value of shape [8] (the last dimension of y, [4, 8]), got [7]");
  expect_error(
      [&] {
        fused_swish_chain(y, torch::randn({2, 4}));
      },
      "expected add_value of shape [8]");
  expect_error([&] { fused_swish_chain(y, torch::randn({8}, torch::kFloat16)); },
               "expected add_value of dtype Float (the dtype of y), got Half");
  expect_error([&] { fused_mish_mish(y, torch::randn({9})); },
               "expected bias of shape [8] (the last dimension of y, [4, 8]), got [9]");
  expect_error([&] { fused_swish_chain(torch::Tensor(), torch::randn({8})); }, "undefined");
}

// --- CUDA: the same on the GPU, plus the cases only the vectorised kernel has. ---

class FusedOpsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
  }
};

TEST_F(FusedOpsCuda, MatchEagerAcrossShapesAndDtypes) { run_shapes_and_dtypes(torch::kCUDA); }
TEST_F(FusedOpsCuda, NonContiguousAndMisalignedInputs) { run_layouts(torch::kCUDA); }
TEST_F(FusedOpsCuda, NanAndInfinityAsEager) { run_special_values(torch::kCUDA); }

TEST_F(FusedOpsCuda, MatchesTheCpuImplementation) {
  torch::NoGradGuard no_grad;  // the ops are inference-only; the model's parameters need grad
  torch::manual_seed(3);
  for (const auto& name : model_names()) {
    const torch::Tensor y = torch::randn({37, 1000}) * 4;
    auto model = make_model(name, 3, 1000, 11);
    const torch::Tensor cpu = model->epilogue_fused(y);
    model->to(torch::kCUDA);
    const torch::Tensor cuda = model->epilogue_fused(y.to(torch::kCUDA)).cpu();
    // Same formulas; the GPU's exp and division are the hardware approximations (a few ulp,
    // up to ~25 ulp for exp(+-20)), the CPU's are exact.
    EXPECT_TRUE(torch::allclose(cuda, cpu, 1e-5, 1e-5)) << name;
  }
}

// The GPU's formulas (hardware exp, reciprocal and, for 16-bit results, tanh) against float64
// on the dense grid (expect_accurate_against_float64).
TEST_F(FusedOpsCuda, AccurateAgainstFloat64OnDenseGrid) {
  expect_accurate_against_float64(torch::kCUDA);
}

TEST_F(FusedOpsCuda, EveryElementWrittenForOddSizes) {
  // Sizes around the vector width and block size; the output must have no unwritten element,
  // checked by comparing against eager (an unwritten element would hold garbage or NaN).
  torch::manual_seed(4);
  for (int64_t cols : {1, 3, 4, 5, 8, 255, 256, 257, 1023, 1024, 1025, 8192}) {
    for (int64_t rows : {1, 2, 3, 17}) {
      for (const auto dtype : kDtypes) {
        expect_fused_matches_eager("mish_mish",
                                   random_gemm_output({rows, cols}, dtype, torch::kCUDA));
      }
    }
  }
}

TEST_F(FusedOpsCuda, RejectsInputsOnDifferentDevices) {
  const torch::Tensor y = torch::randn({4, 8}, torch::kCUDA);
  expect_error([&] { fused_swish_chain(y, torch::randn({8})); },
               "expected add_value on cuda:0 (the device of y), got cpu");
}

#ifdef FUSEDLINEAR_WITH_CUDA
// The whole fused forward (split kernel, cuBLAS products, epilogue kernel), in every precision,
// captured into a CUDA graph on a side stream. A launch on any other stream either breaks the
// capture (the legacy default stream) or is missing from the graph: then replaying it leaves
// the poisoned output as it was.
TEST_F(FusedOpsCuda, RunsOnTheCurrentStream) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const torch::Tensor x = torch::rand({64, 96}, torch::kCUDA);
  for (const Precision precision : all_precisions()) {
    auto model = make_model("swish_chain", 96, 512, 1);
    model->to(torch::kCUDA);
    model->set_bf16x3_min_rows(1);
    model->set_precision(precision);
    const torch::Tensor want = model->forward(x);
    const torch::Tensor got =
        testing_support::replayed_from_cuda_graph([&] { return model->forward(x); });
    EXPECT_TRUE(torch::equal(got, want)) << precision_name(precision);
  }
}
#endif

TEST_F(FusedOpsCuda, MoreThan2To31Elements) {
  torch::NoGradGuard no_grad;
  // 2^31 + 2^15 fp16 elements (4 GiB in, 4 GiB out): 64-bit indexing and a grid-stride loop
  // over more rows than one grid dimension holds. Checked on slices at both ends.
  const int64_t cols = 32768, rows = 65537;
  size_t free_bytes = 0;
#ifdef FUSEDLINEAR_WITH_CUDA
  size_t total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
#endif
  if (free_bytes < (size_t(20) << 30)) GTEST_SKIP() << "needs 20 GiB of free GPU memory";
  torch::manual_seed(6);
  auto model = make_model("mish_mish", 3, cols, 2);
  model->to(torch::kCUDA, torch::kFloat16);
  torch::Tensor y =
      torch::empty({rows, cols}, torch::TensorOptions(torch::kCUDA).dtype(torch::kFloat16));
  y.uniform_(-4, 4);
  const torch::Tensor fused = model->epilogue_fused(y);
  const Tolerance tol = tolerance_for(torch::kFloat16);
  for (int64_t start : {int64_t{0}, rows / 2, rows - 3}) {
    const torch::Tensor y_rows = y.narrow(0, start, 3);
    const torch::Tensor eager = model->epilogue_eager(y_rows + model->linear()->bias);
    EXPECT_TRUE(torch::allclose(fused.narrow(0, start, 3).to(torch::kFloat32),
                                eager.to(torch::kFloat32), tol.rtol, tol.atol))
        << "rows from " << start;
  }
}

}  // namespace
}  // namespace fusedlinear
