// The fused epilogue op against the eager libtorch ops it replaces and against float64, for every
// chain it runs: each registered model's compiled chain, the same chain given as a spec (the
// interpreter), and every op of the vocabulary as a spec; on the CPU (each of its loops: scalar,
// AVX2, AVX-512, as far as this CPU runs them) and (where there is one) CUDA: many shapes, all
// three dtypes, non-contiguous and misaligned inputs, NaN/Inf, a dense grid, and bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/epilogue.h"
#include "kernels/ops/chain_registry.h"
#include "kernels/ops/ops.h"
#include "modules/linear_chain.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include "tests/cuda_graph_support.h"
#endif

namespace fusedlinear {
namespace {

// Every chain the op runs, as a model: the registered ones (compiled), the same chains as specs
// (run by the interpreter), and each op of the vocabulary, with its defaults and other arguments.
std::vector<ModelSpec> chains_under_test() {
  std::vector<ModelSpec> specs;
  for (const ModelSpec& model : registered_models()) {
    specs.push_back(model);
    specs.push_back(runtime_model(model.chain, model.linear));
  }
  // Each op, and chains of them; the last two take the Half forms in 16 bits, kept by the ops
  // after them (chain.h).
  for (const char* spec : {"relu",
                           "relu6",
                           "leaky_relu(0.2)",
                           "elu(0.5)",
                           "selu",
                           "celu(2)",
                           "gelu",
                           "gelu(tanh)",
                           "silu",
                           "swish(1.702)",
                           "sigmoid,gelu",
                           "tanh",
                           "hardtanh(-2,3)",
                           "clamp(0,inf)",
                           "hardsigmoid",
                           "hardswish",
                           "softplus(2,10)",
                           "softsign,gelu",
                           "tanhshrink",
                           "logsigmoid",
                           "square",
                           "add(1.5)",
                           "sub(0.25),mul(-3)",
                           "div(3)",
                           "sigmoid,mul(scale),add(shift),div(2.5)",
                           "tanh,sigmoid,softsign,relu6",
                           "sigmoid,gelu,mish,clamp(-0.2,2)"}) {
    specs.push_back(runtime_model(spec));
  }
  return specs;
}

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

// A model of `spec` with `cols` outputs on y's device and dtype (parameters seeded).
std::shared_ptr<LinearChainImpl> model_for(const ModelSpec& spec, const torch::Tensor& y) {
  auto model = make_model(spec, /*in_features=*/3, y.size(-1), /*seed=*/7);
  model->to(y.device(), y.scalar_type());
  return model;
}

// y: the GEMM output without bias. Compares the model's fused epilogue (bias folded in) with
// its eager epilogue on y + bias.
void expect_fused_matches_eager(const ModelSpec& spec, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  auto model = model_for(spec, y);
  const torch::Tensor fused = model->epilogue_fused(y);
  torch::Tensor eager;
  try {
    eager = model->chain_eager(y + model->linear()->bias);
  } catch (const c10::Error&) {
    // libtorch 1.13 has no CPU kernels for some ops in float16/bfloat16 (sigmoid, mish, ...):
    // there, eager runs in float32 and its result is rounded to the dtype.
    auto model32 = make_model(spec, 3, y.size(-1), 7);
    model32->to(y.device());
    const torch::Tensor y32 = y.to(torch::kFloat32);
    eager = model32->chain_eager(y32 + model32->linear()->bias).to(y.scalar_type());
  }
  ASSERT_EQ(fused.sizes(), y.sizes());
  ASSERT_EQ(fused.scalar_type(), y.scalar_type());
  ASSERT_EQ(fused.device(), y.device());
  const Tolerance tol = tolerance_for(y.scalar_type());
  const torch::Tensor f = fused.to(torch::kFloat64);
  torch::Tensor e = eager.to(torch::kFloat64);
  // libtorch's kernels depart from the definitions at a few special inputs (2.11's CPU gelu: NaN
  // at +inf, inf at 3.4e38): where eager's NaN/inf disagrees with the float64 definition's (as
  // rounded to the dtype), the fused result may match either.
  std::vector<torch::Tensor> params64;
  for (const auto& p : model->slot_params()) params64.push_back(p.to(torch::kCPU, torch::kFloat64));
  const torch::Tensor defined =
      reference_chain(model->chain(),
                      y.to(torch::kCPU, torch::kFloat64) +
                          model->linear()->bias.to(torch::kCPU, torch::kFloat64),
                      params64)
          .to(y.scalar_type())
          .to(y.device(), torch::kFloat64);
  const torch::Tensor departs =
      e.isnan().ne(defined.isnan()).logical_or(e.isinf().ne(defined.isinf()));
  const torch::Tensor as_eager = torch::isclose(f, e, tol.rtol, tol.atol, /*equal_nan=*/true);
  e = torch::where(departs.logical_and(as_eager.logical_not()), defined, e);
  EXPECT_TRUE(torch::allclose(f, e, tol.rtol, tol.atol, /*equal_nan=*/true))
      << spec.name << " " << y.scalar_type() << " " << y.sizes() << " on " << y.device()
      << ": max abs diff " << (f - e).abs().nan_to_num(0).max().item<double>();
  // NaN exactly where eager has NaN (or, where it departs, the definition).
  EXPECT_TRUE(torch::equal(f.isnan(), e.isnan())) << spec.name << " NaN positions differ";
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
  for (const auto& spec : chains_under_test()) {
    for (const auto dtype : kDtypes) {
      for (const auto& shape : kShapes) {
        expect_fused_matches_eager(spec, random_gemm_output(shape, dtype, device));
      }
    }
  }
}

// A transposed (non-contiguous) input, a view whose data starts 4 bytes past an aligned address
// (no 16-byte loads possible), and a row length that is not a multiple of the vector width.
void run_layouts(torch::Device device) {
  torch::manual_seed(1);
  for (const auto& spec : chains_under_test()) {
    for (const auto dtype : kDtypes) {
      const torch::Tensor transposed = random_gemm_output({40, 24}, dtype, device).t();
      ASSERT_FALSE(transposed.is_contiguous());
      expect_fused_matches_eager(spec, transposed);

      const torch::Tensor flat = random_gemm_output({1 + 24 * 16}, dtype, device);
      const torch::Tensor misaligned = flat.narrow(0, 1, int64_t{24} * 16).view({24, 16});
      ASSERT_NE(reinterpret_cast<uintptr_t>(misaligned.data_ptr()) % 16, 0u);
      expect_fused_matches_eager(spec, misaligned);

      expect_fused_matches_eager(spec, random_gemm_output({9, 13}, dtype, device));
    }
  }
  // The bias and the parameters as views one element past an aligned address: the CUDA kernel
  // cannot read them 16 bytes at a time and takes its 1-element path, which must give the same
  // bits; a one-element parameter is broadcast.
  for (const auto dtype : kDtypes) {
    const torch::Tensor y = random_gemm_output({6, 32}, dtype, device);
    const torch::Tensor terms = random_gemm_output({1 + 3 * 32}, dtype, device);
    const torch::Tensor bias = terms.narrow(0, 1, 32), p = terms.narrow(0, 33, 32);
    ASSERT_NE(reinterpret_cast<uintptr_t>(bias.data_ptr()) % 16, 0u);
    for (const std::string chain : {"swish_chain", "add(p),swish,tanh,gelu,hardtanh(-1,1)"}) {
      EXPECT_TRUE(torch::equal(fused_epilogue(y, bias, {p}, chain),
                               fused_epilogue(y, bias.clone(), {p.clone()}, chain)))
          << chain << " " << dtype;
    }
    const torch::Tensor one = terms.narrow(0, 65, 1);
    EXPECT_TRUE(torch::equal(fused_epilogue(y, bias, {one}, "mul(p)"),
                             fused_epilogue(y, bias, {one.expand({32}).contiguous()}, "mul(p)")))
        << dtype;
  }
}

// NaN, +-Inf, huge and tiny values spread through an input: same results as eager.
void run_special_values(torch::Device device) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor specials =
      torch::tensor({0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 88.0f, -88.0f, 1e4f, -1e4f, inf,
                     -inf, nan, 3e38f, -3e38f, 0.5f});
  for (const auto& spec : chains_under_test()) {
    expect_fused_matches_eager(spec, specials.view({2, 8}).to(device));
    expect_fused_matches_eager(spec, specials.view({2, 8}).to(device, torch::kFloat16));
    expect_fused_matches_eager(spec, specials.view({4, 4}).to(device, torch::kFloat16));
    expect_fused_matches_eager(spec, specials.view({1, 16}).to(device, torch::kBFloat16));
  }
}

// A chain on y (on the CPU; run on `device`) against its float64 form (the functors' own, from
// PyTorch's formulas): float32 within 1e-6 relative to max(1, |value|), as the host functors are
// held to; bfloat16 and float16 within one unit in their last place of the float64 value, so every
// result is one of the two values of the type around it, give or take float32's own absolute
// error on values of y's size (1e-6 max(1, |y|)), which PyTorch's float kernels share: where
// 1 + erf(x) or x - tanh(x) cancel, a 16-bit type can hold a result far below it (gelu(-8.3) =
// -4.6e-16; float32 gives -0, as PyTorch does). One allowance more: the CUDA kernels flush
// intermediates below 2^-126 to zero (-ftz=true), so results below ~1e-36 in magnitude
// (mish(-88) = -5e-37, which bfloat16 holds) may come out as 0. NaN exactly where float64 has NaN,
// and where the float64 value is past the dtype's range (square(1e4) in float16), the infinity it
// rounds to.
void expect_within_an_ulp_of_float64(const ModelSpec& spec, const torch::Tensor& y,
                                     const torch::Device& device, bool verbose = true) {
  torch::NoGradGuard no_grad;
  const auto dtype = y.scalar_type();
  auto model = make_model(spec, 3, y.size(-1), 5);
  model->to(device, dtype);
  const torch::Tensor got = model->chain_fused(y.to(device), c10::nullopt).cpu();
  const torch::Tensor want = reference_chain(model->chain(), y, model->slot_params());
  EXPECT_TRUE(torch::equal(got.isnan(), want.isnan())) << spec.name << " NaN positions differ";
  const torch::Tensor past_range = want.isfinite().logical_and(want.to(dtype).isinf());
  EXPECT_TRUE(torch::equal(got.masked_select(past_range), want.to(dtype).masked_select(past_range)))
      << spec.name << " " << dtype << ": values past its range are not its infinities";
  const torch::Tensor err =
      (got.to(torch::kFloat64) - want).abs().nan_to_num(0).masked_fill(past_range, 0);
  torch::Tensor bound;
  if (dtype == torch::kFloat32) {
    bound = 1e-6 * want.abs().clamp_min(1.0);
  } else {
    // ulp(v) = 2^(max(floor(log2 |v|), smallest normal exponent) - significand bits)
    const bool half = dtype == torch::kFloat16;
    bound = torch::exp2(want.abs().log2().floor().clamp_min(half ? -14 : -126) - (half ? 10 : 7)) +
            1e-6 * y.to(torch::kFloat64).abs().clamp_min(1.0) + 1e-36;
  }
  const torch::Tensor y64 = y.to(torch::kFloat64);
  const torch::Tensor bad = (err > bound).view(-1);
  const int64_t n_bad = bad.sum().item<int64_t>();
  if (n_bad > 0) {
    const int64_t i = bad.nonzero()[0][0].item<int64_t>();
    ADD_FAILURE() << spec.name << " " << dtype << " " << y.sizes() << " on " << device << ": "
                  << n_bad << " values off, first at y = " << y64.view(-1)[i].item<double>() << ": "
                  << got.view(-1)[i].item<double>() << ", float64 gives "
                  << want.view(-1)[i].item<double>();
  }
  if (verbose) {
    std::cout << "  " << spec.name << " " << dtype << " " << y.sizes() << ": max error "
              << err.max().item<double>() << ", "
              << (err / bound).nan_to_num(0).max().item<double>() << " of the bound\n";
  }
}

// The same on a dense grid of [-30, 30] and the values where the formulas change (subnormals
// among them), in each dtype. Each grid runs twice: as a row of 600024 values (on the GPU 16-byte
// accesses, 4 or 8 values a thread) and of 600023 (one value a thread; on the CPU a partial
// vector at the end).
void expect_accurate_against_float64(const torch::Device& device) {
  const torch::Tensor grid =
      torch::cat({torch::linspace(-30, 30, 600001),
                  torch::tensor({0.0f,   -0.0f,  1e-30f, -1e-30f, 1e-40f, -1e-40f, 20.0f,   -20.0f,
                                 88.0f,  -88.0f, 1e4f,   -1e4f,   9.5f,   -9.5f,   9.4999f, 9.5001f,
                                 19.99f, 3.0f,   -3.0f,  6.0f,    1.0f,   -1.0f,   10.0f})});
  ASSERT_EQ(grid.numel() % 8, 0);
  for (const auto& spec : chains_under_test()) {
    for (const auto dtype : kDtypes) {
      for (const int64_t first : {0, 1}) {
        const torch::Tensor y = grid.narrow(0, first, grid.numel() - first).to(dtype).view({1, -1});
        expect_within_an_ulp_of_float64(spec, y, device, /*verbose=*/first == 0);
      }
    }
  }
}

// A gate multiplied in the epilogue's pass: bitwise the fused epilogue then a separate multiply
// (the chain's value rounded to the dtype first), for compiled and run-time chains, with and
// without bias, aligned and odd widths, contiguous and not.
void run_gated(torch::Device device) {
  torch::NoGradGuard no_grad;
  for (const ModelSpec& spec : chains_under_test()) {
    for (const auto dtype : kDtypes) {
      for (const auto& [rows, cols] : {std::pair{5, 64}, std::pair{3, 37}, std::pair{70, 8}}) {
        const torch::Tensor y = random_gemm_output({rows, cols}, dtype, device);
        const torch::Tensor gate = random_gemm_output({cols, rows}, dtype, device).t();
        auto model = model_for(spec, y);
        const std::vector<torch::Tensor> params = model->slot_params();
        for (const bool with_bias : {true, false}) {
          const c10::optional<torch::Tensor> bias =
              with_bias ? c10::optional<torch::Tensor>(model->linear()->bias) : c10::nullopt;
          const torch::Tensor want = fused_epilogue(y, bias, params, spec.op_chain()) * gate;
          const torch::Tensor got = fused_epilogue(y, bias, params, spec.op_chain(), gate);
          EXPECT_TRUE(torch::equal(got.nan_to_num(0), want.nan_to_num(0)) &&
                      torch::equal(got.isnan(), want.isnan()))
              << spec.name << " " << dtype << " [" << rows << ", " << cols << "]"
              << (with_bias ? " with bias" : "");
        }
      }
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
    restore_.emplace();
    cpu::set_capability(GetParam());
  }

 private:
  std::optional<cpu::RestoreCapability> restore_;
};

INSTANTIATE_TEST_SUITE_P(Loop, FusedOpsCpu,
                         ::testing::Values(cpu::Capability::kScalar, cpu::Capability::kAvx2,
                                           cpu::Capability::kAvx512),
                         [](const auto& info) { return cpu::capability_name(info.param); });

TEST_P(FusedOpsCpu, MatchEagerAcrossShapesAndDtypes) { run_shapes_and_dtypes(torch::kCPU); }
TEST_P(FusedOpsCpu, NonContiguousAndMisalignedInputs) { run_layouts(torch::kCPU); }
TEST_P(FusedOpsCpu, NanAndInfinityAsEager) { run_special_values(torch::kCPU); }
TEST_P(FusedOpsCpu, GateMultipliedInThePassAsAfterIt) { run_gated(torch::kCPU); }
TEST_P(FusedOpsCpu, AccurateAgainstFloat64OnDenseGrid) {
  expect_accurate_against_float64(torch::kCPU);
}

// tanh, the op whose vector forms differ most between the loops, on every 256th float of
// [0, 10] and their negatives (every interval of the AVX-512 table, each end among them), in ulp
// of the float nearest the float64 value: the AVX-512 table within 0.6, tanh_from_exp (AVX2)
// within 2, libm's tanhf (scalar) within 2.5 (glibc's errs by a little over 2 ulp).
TEST_P(FusedOpsCpu, TanhWithinItsUlpsOfFloat64) {
  torch::NoGradGuard no_grad;
  const int64_t bits_of_ten = 0x41200000;
  const torch::Tensor positive =
      torch::arange(0, bits_of_ten, 256, torch::kInt32).view(torch::kFloat32);
  const torch::Tensor x = torch::cat({positive, -positive}).view({1, -1});
  auto model = make_model(runtime_model("tanh"), 3, x.size(1), 7);
  const torch::Tensor got = model->chain_fused(x, c10::nullopt).to(torch::kFloat64);
  const torch::Tensor want = x.to(torch::kFloat64).tanh();
  // The spacing toward 0 (that below 1 for values that round up to 1), the smallest subnormal at 0.
  const torch::Tensor nearest = want.to(torch::kFloat32).abs();
  const torch::Tensor ulp = (nearest - nearest.nextafter(torch::zeros_like(nearest)))
                                .clamp_min(std::numeric_limits<float>::denorm_min())
                                .to(torch::kFloat64);
  const double worst = ((got - want).abs() / ulp).max().item<double>();
  const double bound = GetParam() == cpu::Capability::kAvx512 ? 0.6
                       : GetParam() == cpu::Capability::kAvx2 ? 2.0
                                                              : 2.5;
  EXPECT_LE(worst, bound) << "tanh's worst error in ulp";
  std::cout << "  tanh, " << cpu::capability_name(GetParam()) << ": worst " << worst << " ulp\n";
}

// Rows of 1 to 65 elements (up to four whole AVX-512 vectors, a group of the loop, and a partial
// one) in each dtype, values from [-30, 30] with NaN and +-inf among them: within the float64
// bounds, NaN where eager has NaN, and each element the same bits as when it sits elsewhere in a
// vector.
TEST_P(FusedOpsCpu, VectorTailsAccurateAndIndependentOfPosition) {
  torch::manual_seed(8);
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& spec : chains_under_test()) {
    for (const auto dtype : kDtypes) {
      for (int64_t cols : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65}) {
        torch::Tensor y = torch::rand({3, cols}) * 60 - 30;
        y.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
        y.view(-1)[-1] = cols % 2 ? inf : -inf;
        y = y.to(dtype);
        expect_within_an_ulp_of_float64(spec, y, torch::kCPU, /*verbose=*/false);
        expect_fused_matches_eager(spec, y);
        // The same values one element further on in a longer row: other lanes, other vectors.
        // The parameters, per feature, are laid out alike.
        const ParsedChain chain = spec.parsed_chain();
        std::vector<torch::Tensor> params, shifted_params;
        for (size_t j = 0; j < chain.slot_params().size(); ++j) {
          params.push_back((torch::rand({cols}) + 0.5).to(dtype));
          shifted_params.push_back(torch::cat({torch::ones({1}, dtype), params.back()}));
        }
        const torch::Tensor shifted = torch::cat({torch::zeros({3, 1}, dtype), y}, 1);
        EXPECT_TRUE(
            torch::equal(fused_epilogue(y, c10::nullopt, params, spec.op_chain()).nan_to_num(0),
                         fused_epilogue(shifted, c10::nullopt, shifted_params, spec.op_chain())
                             .narrow(1, 1, cols)
                             .nan_to_num(0)))
            << spec.name << " " << dtype << " " << cols;
      }
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
  EXPECT_TRUE(
      torch::allclose(fused_epilogue(y, c10::nullopt, {add}, "swish_chain"), want, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(fused_epilogue(y, c10::nullopt, {}, "mish_mish"), F::mish(F::mish(y)),
                              1e-6, 1e-6));
}

// The clamps (relu, relu6, hardtanh, clamp) give eager's bits, the sign of zero and NaN included:
// the vector loops' one max or min instruction returns x where either operand is NaN or both are
// zeros only with x as its second operand.
TEST_P(FusedOpsCpu, ClampsKeepEagersBitsForZerosAndNan) {
  namespace F = torch::nn::functional;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor y = torch::tensor({0.0f, -0.0f, nan, -nan, inf, -inf, -3.0f, 3.0f, -2.0f,
                                         2.0f, 6.0f, 7.0f, -1e-30f, 1e-30f, 0.5f, -0.5f})
                              .repeat({3})
                              .view({3, 16});
  const std::vector<std::pair<std::string, torch::Tensor>> clamps = {
      {"relu", torch::relu(y)},
      {"relu6", F::hardtanh(y, F::HardtanhFuncOptions().min_val(0).max_val(6))},
      {"hardtanh(-0.0,2)", F::hardtanh(y, F::HardtanhFuncOptions().min_val(-0.0).max_val(2))},
      {"clamp(-2,2)", torch::clamp(y, -2, 2)}};
  for (const auto& [spec, eager] : clamps) {
    const torch::Tensor fused = fused_epilogue(y, c10::nullopt, {}, spec);
    EXPECT_TRUE(torch::equal(fused.view(torch::kInt32), eager.view(torch::kInt32)))
        << spec << ": " << fused << " against eager's " << eager;
  }
}

// Every check at the op boundary fails with a message naming what was expected and what came.
void expect_error(const std::function<void()>& call, const std::string& expected) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing: " << expected;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
        << "message: " << e.what_without_backtrace() << "\nexpected to contain: " << expected;
    EXPECT_EQ(std::string(e.what_without_backtrace()).find('\n'), std::string::npos)
        << "one line: " << e.what_without_backtrace();
  }
}

// Every loop the CPU runs gives the same results as the scalar one, to a few float ulp (their
// exp and tanh are Sleef's where the scalar loop's are libm's).
TEST(FusedOpsCpuLoops, AgreeWithTheScalarLoop) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  const cpu::RestoreCapability restore;
  for (const auto& spec : chains_under_test()) {
    for (const auto dtype : kDtypes) {
      const torch::Tensor y = (torch::randn({37, 1000}) * 4).to(dtype);
      auto model = model_for(spec, y);
      cpu::set_capability(cpu::Capability::kScalar);
      const torch::Tensor scalar = model->epilogue_fused(y).to(torch::kFloat32);
      for (const auto capability : cpu::supported_capabilities()) {
        cpu::set_capability(capability);
        // float32: a few ulp; 16 bits: at most one unit of the type where the float results sit
        // on either side of a rounding boundary.
        const double tol = dtype == torch::kFloat32   ? 1e-6
                           : dtype == torch::kFloat16 ? 2e-3
                                                      : 1.6e-2;
        EXPECT_TRUE(torch::allclose(model->epilogue_fused(y).to(torch::kFloat32), scalar, tol, tol,
                                    /*equal_nan=*/true))
            << spec.name << " " << cpu::capability_name(capability) << " " << dtype;
      }
    }
  }
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

// Every chain, compiled or run by the interpreter, runs the loop of the capability asked for:
// each registration built its SIMD loops and the ops dispatch to them (a chain left on the scalar
// loop still gives the right values, only many times slower).
TEST(FusedOpsCpuLoops, EveryChainRunsTheLoopAskedFor) {
  const auto supported = cpu::supported_capabilities();
#if FUSEDLINEAR_CPU_SIMD && (defined(__x86_64__) || defined(__i386__))
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_NE(std::find(supported.begin(), supported.end(), cpu::Capability::kAvx2),
              supported.end());
  }
#endif
  std::vector<std::string> chains = compiled_chain_names();
  chains.push_back("hardswish,leaky_relu(0.1),softplus(2)");
  const cpu::RestoreCapability restore;
  for (const std::string& name : chains) {
    const ChainEntry& entry = find_chain(name);
    for (const auto capability : supported) {
      cpu::set_capability(capability);
      EXPECT_EQ(cpu::loop_of(entry.kernels.cpu), capability)
          << name << " " << cpu::capability_name(capability);
    }
  }
}

TEST(FusedOpsCpuInputs, RejectsBadInputsWithClearMessages) {
  const torch::Tensor y = torch::randn({4, 8});
  const torch::Tensor p = torch::randn({8});
  expect_error([&] { fused_epilogue(y.to(torch::kFloat64), c10::nullopt, {}, "mish_mish"); },
               "expected y of dtype float32, float16 or bfloat16, got Double");
  expect_error(
      [&] {
        fused_epilogue(torch::ones({4, 8}, torch::kInt32), c10::nullopt, {}, "mish_mish");
      },
      "expected y of dtype float32, float16 or bfloat16, got Int");
  expect_error([&] { fused_epilogue(torch::tensor(1.0f), c10::nullopt, {}, "mish_mish"); },
               "expected y with at least one dimension");
  expect_error([&] { fused_epilogue(y, c10::nullopt, {}, "gelu", y.narrow(1, 0, 4)); },
               "expected gate like y (Float [4, 8]");
  expect_error([&] { fused_epilogue(y, c10::nullopt, {}, "gelu", y.to(torch::kBFloat16)); },
               "expected gate like y (Float [4, 8]");
  expect_error([&] { fused_epilogue(y, c10::nullopt, {torch::randn({7})}, "swish_chain"); },
               "expected params[0] of shape [8] (the last dimension of y, [4, 8]) or of one "
               "element, got [7]");
  expect_error(
      [&] {
        fused_epilogue(y, c10::nullopt, {torch::randn({2, 4})}, "swish_chain");
      },
      "expected params[0] of shape [8]");
  expect_error(
      [&] { fused_epilogue(y, c10::nullopt, {torch::randn({8}, torch::kFloat16)}, "swish_chain"); },
      "expected params[0] of dtype Float (the dtype of y), got Half");
  expect_error([&] { fused_epilogue(y, torch::randn({9}), {}, "mish_mish"); },
               "expected bias of shape [8] (the last dimension of y, [4, 8]), got [9]");
  expect_error([&] { fused_epilogue(torch::Tensor(), c10::nullopt, {p}, "swish_chain"); },
               "undefined");
  // The chain's parameters, as many as it takes; the chain a registered name or a spec.
  expect_error([&] { fused_epilogue(y, c10::nullopt, {}, "swish_chain"); },
               "fusedlinear::epilogue: the chain takes 1 parameter tensor(s), got 0");
  expect_error(
      [&] {
        fused_epilogue(y, c10::nullopt, {p, p}, "add(a),mul(b),div(c)");
      },
      "the chain takes 3 parameter tensor(s), got 2");
  expect_error([&] { fused_epilogue(y, c10::nullopt, {}, "mish_mesh"); },
               "fusedlinear::epilogue: chain 'mish_mesh': unknown op 'mish_mesh' (the vocabulary: "
               "relu, relu6");
  expect_error([&] { fused_epilogue(y, c10::nullopt, {}, "leaky_relu(slope=2)"); },
               "leaky_relu takes 1 argument (negative_slope), not 'slope'");
  expect_error([&] { fused_epilogue(y, c10::nullopt, {p}, "add(p),,relu"); },
               "expected an op (the vocabulary: ");
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
TEST_F(FusedOpsCuda, GateMultipliedInThePassAsAfterIt) { run_gated(torch::kCUDA); }

TEST_F(FusedOpsCuda, MatchesTheCpuImplementation) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  for (const auto& spec : chains_under_test()) {
    const torch::Tensor y = torch::randn({37, 1000}) * 4;
    auto model = make_model(spec, 3, 1000, 11);
    const torch::Tensor cpu = model->epilogue_fused(y);
    model->to(torch::kCUDA);
    const torch::Tensor cuda = model->epilogue_fused(y.to(torch::kCUDA)).cpu();
    // Same formulas; the GPU's exp and division are the hardware approximations (a few ulp,
    // up to ~25 ulp for exp(+-20)), the CPU's are exact.
    EXPECT_TRUE(torch::allclose(cuda, cpu, 1e-5, 1e-5, /*equal_nan=*/true)) << spec.name;
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
  for (const auto& spec : chains_under_test()) {
    for (int64_t cols : {1, 3, 4, 5, 8, 255, 256, 257, 1023, 1025, 8192}) {
      for (int64_t rows : {1, 3, 17}) {
        for (const auto dtype : kDtypes) {
          expect_fused_matches_eager(spec, random_gemm_output({rows, cols}, dtype, torch::kCUDA));
        }
      }
    }
  }
}

TEST_F(FusedOpsCuda, RejectsInputsOnDifferentDevices) {
  const torch::Tensor y = torch::randn({4, 8}, torch::kCUDA);
  expect_error([&] { fused_epilogue(y, c10::nullopt, {torch::randn({8})}, "swish_chain"); },
               "expected params[0] on cuda:0 (the device of y), got cpu");
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
  for (const auto& spec : chains_under_test()) {
    for (const Precision precision : all_precisions()) {
      auto model = make_model(spec, 96, 512, 1);
      model->to(torch::kCUDA);
      model->set_bf16x3_min_rows(1);
      model->set_precision(precision);
      const torch::Tensor want = model->forward(x);
      const torch::Tensor got =
          testing_support::replayed_from_cuda_graph([&] { return model->forward(x); });
      EXPECT_TRUE(torch::equal(got.nan_to_num(0), want.nan_to_num(0)))
          << spec.name << " " << precision_name(precision);
    }
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
  for (const std::string name : {"mish_mish", "swish_chain"}) {
    auto model = make_model(name, 3, cols, 2);
    model->to(torch::kCUDA, torch::kFloat16);
    torch::Tensor y =
        torch::empty({rows, cols}, torch::TensorOptions(torch::kCUDA).dtype(torch::kFloat16));
    y.uniform_(-4, 4);
    const torch::Tensor fused = model->epilogue_fused(y);
    const Tolerance tol = tolerance_for(torch::kFloat16);
    for (int64_t start : {int64_t{0}, rows / 2, rows - 3}) {
      const torch::Tensor y_rows = y.narrow(0, start, 3);
      const torch::Tensor eager = model->chain_eager(y_rows + model->linear()->bias);
      EXPECT_TRUE(torch::allclose(fused.narrow(0, start, 3).to(torch::kFloat32),
                                  eager.to(torch::kFloat32), tol.rtol, tol.atol))
          << name << " rows from " << start;
    }
  }
}

}  // namespace
}  // namespace fusedlinear
