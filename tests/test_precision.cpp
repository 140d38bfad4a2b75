// The GEMM precisions (modules/precision.h): the bfloat16 split, each mode's error against
// float64 on random and adversarial inputs, and the model's handling of the modes. On the CPU the
// modes run as emulations (kernels/linear_cpu.cpp); on a GPU the same tests run the tensor cores.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/ops/ops.h"
#include "modules/linear_chain.h"

namespace fusedlinear {
namespace {

const float kInf = std::numeric_limits<float>::infinity();

std::vector<torch::Device> devices() {
  std::vector<torch::Device> out = {torch::kCPU};
  if (torch::cuda::is_available()) out.emplace_back(torch::kCUDA);
  return out;
}

// Float32 values across the whole exponent range, both signs, and every special kind: zeros,
// subnormals, the normal boundary, values that round up to bfloat16 infinity, +-inf, NaN.
torch::Tensor split_inputs() {
  torch::manual_seed(20);
  const torch::Tensor magnitudes = torch::exp2(torch::rand({20000}) * 250 - 125);
  const torch::Tensor signs = torch::randint(0, 2, {20000}).mul(2).sub(1);
  const float flt_max = std::numeric_limits<float>::max();
  const float flt_min = std::numeric_limits<float>::min();
  const torch::Tensor specials =
      torch::tensor({0.0f,         -0.0f,    1e-45f,
                     -1e-45f,      1e-40f,   5.9e-39f,
                     flt_min,      -flt_min, 1.5f * flt_min,
                     1.0f,         -1.0f,    1.00390625f,
                     1.001953125f, 3.38e38f, 3.3895313e38f,
                     3.39e38f,     flt_max,  -flt_max,
                     kInf,         -kInf,    std::numeric_limits<float>::quiet_NaN(),
                     65504.0f,     1e-20f,   123.456f});
  return torch::cat({magnitudes * signs, specials});
}

void expect_split_exact(const torch::Tensor& v, const torch::Tensor& hi, const torch::Tensor& lo) {
  const torch::Tensor v64 = v.to(torch::kFloat64), hi64 = hi.to(torch::kFloat64),
                      lo64 = lo.to(torch::kFloat64);
  const torch::Tensor finite = v64.isfinite();
  // |v - (hi + lo)| <= 2^-17 |v|, or half of bfloat16's smallest subnormal where lo would need
  // bits below it.
  const torch::Tensor err =
      torch::where(finite, (v64 - (hi64 + lo64)).abs(), torch::zeros_like(v64));
  const torch::Tensor bound = torch::maximum(v64.abs() * std::ldexp(1.0, -17),
                                             torch::full_like(v64, std::ldexp(1.0, -134)));
  const torch::Tensor bad = err > bound;
  EXPECT_EQ(bad.sum().item<int64_t>(), 0)
      << "first bad value: "
      << (bad.any().item<bool>() ? v64.index({bad}).index({0}).item<double>() : 0.0);
  // hi is bfloat16(v), rounded to nearest even as PyTorch rounds, where that is finite.
  const torch::Tensor rounded = v.to(torch::kBFloat16).to(torch::kFloat64);
  const torch::Tensor keeps = finite.logical_and(rounded.isfinite());
  EXPECT_TRUE(torch::equal(hi64.index({keeps}), rounded.index({keeps})));
  // Finite values whose bfloat16 rounding overflows keep the largest finite bfloat16.
  EXPECT_TRUE(hi64.index({finite}).isfinite().all().item<bool>());
  // +-inf and NaN: hi is the value, lo is 0.
  const torch::Tensor infinite = v64.isinf();
  EXPECT_TRUE(torch::equal(hi64.index({infinite}), v64.index({infinite})));
  EXPECT_TRUE(hi64.index({v64.isnan()}).isnan().all().item<bool>());
  EXPECT_TRUE((lo64.index({finite.logical_not()}) == 0).all().item<bool>());
}

TEST(SplitBf16, HiPlusLoIsTheValueTo2ToTheMinus17) {
  const torch::Tensor v = split_inputs();
  const auto [hi, lo] = split_bf16(v);
  ASSERT_EQ(hi.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(hi.sizes(), v.sizes());
  expect_split_exact(v, hi, lo);
}

TEST(SplitBf16, CudaGivesTheCpuBitsAtEverySizeAndAlignment) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
  const torch::Tensor all = split_inputs();
  // Sizes around the 8-value groups, and views 1 and 3 values past an aligned address (the
  // one-value path).
  for (const int64_t offset : std::vector<int64_t>{0, 1, 3}) {
    for (const int64_t n : std::vector<int64_t>{1, 7, 8, 9, 15, 17, 4096, all.numel() - 3}) {
      const torch::Tensor v = all.narrow(0, offset, n);
      const auto [hi_cpu, lo_cpu] = split_bf16(v);
      const torch::Tensor v_cuda = all.cuda().narrow(0, offset, n);
      const auto [hi, lo] = split_bf16(v_cuda);
      EXPECT_TRUE(torch::equal(hi.cpu().view(torch::kInt16), hi_cpu.view(torch::kInt16)))
          << "offset " << offset << " n " << n;
      EXPECT_TRUE(torch::equal(lo.cpu().view(torch::kInt16), lo_cpu.view(torch::kInt16)))
          << "offset " << offset << " n " << n;
    }
  }
}

TEST(SplitBf16, ThreePartsHoldTheValueTo2ToTheMinus26) {
  const torch::Tensor v = split_inputs();
  const auto [hi, mid, lo] = split_bf16_three(v);
  const auto [hi2, lo2] = split_bf16(v);
  // hi and mid are the two-way split's parts; lo what remains, rounded.
  EXPECT_TRUE(torch::equal(hi.view(torch::kInt16), hi2.view(torch::kInt16)));
  EXPECT_TRUE(torch::equal(mid.view(torch::kInt16), lo2.view(torch::kInt16)));
  const torch::Tensor v64 = v.to(torch::kFloat64);
  const torch::Tensor finite = v64.isfinite();
  const torch::Tensor sum =
      hi.to(torch::kFloat64) + mid.to(torch::kFloat64) + lo.to(torch::kFloat64);
  const torch::Tensor err = torch::where(finite, (v64 - sum).abs(), torch::zeros_like(v64));
  const torch::Tensor bound = torch::maximum(v64.abs() * std::ldexp(1.0, -26),
                                             torch::full_like(v64, std::ldexp(1.0, -134)));
  EXPECT_EQ((err > bound).sum().item<int64_t>(), 0);
  // The three parts hold float32's 24 bits: exact for most values (all but the few whose parts
  // would need bits below bfloat16's subnormals, or carry a sign change that costs one).
  const double exact = (err == 0).to(torch::kFloat64).mean().item<double>();
  std::cout << "  three-way split exact for " << exact << " of the values\n";
  EXPECT_GE(exact, 0.9);
  EXPECT_TRUE((lo.to(torch::kFloat64).index({finite.logical_not()}) == 0).all().item<bool>());
  EXPECT_TRUE((mid.to(torch::kFloat64).index({finite.logical_not()}) == 0).all().item<bool>());
}

TEST(SplitBf16, CudaGivesTheCpuBitsOfThreeParts) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
  const torch::Tensor all = split_inputs();
  for (const int64_t offset : std::vector<int64_t>{0, 1, 3}) {
    for (const int64_t n : std::vector<int64_t>{1, 7, 8, 9, 17, 4096, all.numel() - 3}) {
      const auto cpu = split_bf16_three(all.narrow(0, offset, n));
      const auto cuda = split_bf16_three(all.cuda().narrow(0, offset, n));
      const auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
        return torch::equal(a.cpu().view(torch::kInt16), b.view(torch::kInt16));
      };
      EXPECT_TRUE(same(std::get<0>(cuda), std::get<0>(cpu)))
          << "hi, offset " << offset << " n " << n;
      EXPECT_TRUE(same(std::get<1>(cuda), std::get<1>(cpu)))
          << "mid, offset " << offset << " n " << n;
      EXPECT_TRUE(same(std::get<2>(cuda), std::get<2>(cpu)))
          << "lo, offset " << offset << " n " << n;
    }
  }
}

// x W^T in `precision` through the ops (no model): what matmul_without_bias runs.
torch::Tensor linear_in(Precision precision, const torch::Tensor& x, const torch::Tensor& w) {
  switch (precision) {
    case Precision::kIeee:
      break;
    case Precision::kBf16x3: {
      const auto [hi, lo] = split_bf16(w);
      return linear_bf16x3(x, hi, lo);
    }
    case Precision::kBf16x6: {
      const auto [hi, mid, lo] = split_bf16_three(w);
      return linear_bf16x6(x, hi, mid, lo);
    }
    case Precision::kTf32:
      return linear_tf32(x, w);
    case Precision::kBf16:
      return linear_bf16(x, std::get<0>(split_bf16(w)));
  }
  return torch::matmul(x, w.t());
}

// The error each product may carry in `precision`, relative to |x_k w_k|, from the operands'
// rounding. With u = 2^-8, bfloat16's unit roundoff: bf16x3 leaves residuals of at most
// u^2 / 2 in each operand and drops lo x lo (at most u^2): 2^-15 in all; bf16x6 leaves u^3 / 2 in
// each operand and drops the three products of i + j > 2 (u^3 each, with room): 2^-22; bf16
// rounds each operand (2u + u^2); tf32 at most 2^-9 if the tensor cores truncate to 10 bits
// (2^-10 rounding): 2^-8.
double per_product_error(Precision precision) {
  switch (precision) {
    case Precision::kIeee:
      return 0;
    case Precision::kBf16x3:
      return std::ldexp(1.0, -15);
    case Precision::kBf16x6:
      return std::ldexp(1.0, -22);
    case Precision::kTf32:
      return std::ldexp(1.0, -8);
    case Precision::kBf16:
      return std::ldexp(1.0, -7) + std::ldexp(1.0, -16);
  }
  return 1;
}

// |y - y64| <= (per_product_error + K 2^-22) * sum_k |x_k| |w_k| elementwise: the products'
// rounding plus a float32 sum of K terms in any order (2^-22 leaves room for accumulators that
// truncate). Returns the largest fraction of the bound used, printed with ieee's on the same
// inputs.
double error_fraction(Precision precision, const torch::Tensor& x, const torch::Tensor& w) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x64 = x.to(torch::kFloat64).cpu(), w64 = w.to(torch::kFloat64).cpu();
  const torch::Tensor exact = torch::matmul(x64, w64.t());
  const torch::Tensor scale = torch::matmul(x64.abs(), w64.abs().t());
  const double k = double(x.size(-1));
  const double c = per_product_error(precision) + k * std::ldexp(1.0, -22);
  const torch::Tensor got = linear_in(precision, x, w).to(torch::kFloat64).cpu();
  const torch::Tensor err = (got - exact).abs();
  return (err / (c * scale).clamp_min(1e-300)).max().item<double>();
}

struct Inputs {
  std::string name;
  torch::Tensor x, w;
};

// Random inputs like the reference workload's, inputs whose magnitudes span 1e-6 to 1e3 within
// one row (random signs), rows whose products cancel exactly, and single products (K = 1, 2),
// where a missing or misplaced term of a split shows in full.
std::vector<Inputs> error_inputs(torch::Device device) {
  torch::manual_seed(21);
  const int64_t m = 24, k = 512, n = 40;
  std::vector<Inputs> out;
  out.push_back(
      {"random", torch::rand({m, k}), (torch::rand({n, k}) * 2 - 1) / std::sqrt(double(k))});
  const auto spanning = [](const std::vector<int64_t>& shape) {
    const torch::Tensor magnitude = torch::pow(10.0, torch::rand(shape) * 9 - 6);
    return magnitude * (torch::randint(0, 2, shape).mul(2).sub(1));
  };
  out.push_back({"magnitudes 1e-6..1e3", spanning({m, k}), spanning({n, k})});
  const torch::Tensor half_x = torch::rand({m, k / 2}) + 0.5, half_w = spanning({n, k / 2});
  out.push_back({"cancelling", torch::cat({half_x, half_x}, 1), torch::cat({half_w, -half_w}, 1)});
  for (const int64_t small_k : {1, 2}) {
    out.push_back(
        {"K = " + std::to_string(small_k), spanning({m, small_k}), spanning({n, small_k})});
  }
  for (auto& in : out) {
    in.x = in.x.to(device, torch::kFloat32);
    in.w = in.w.to(device, torch::kFloat32);
  }
  return out;
}

TEST(LinearPrecisions, ErrorsAgainstFloat64WithinTheirBounds) {
  for (const auto device : devices()) {
    for (const auto& in : error_inputs(device)) {
      const double ieee = error_fraction(Precision::kIeee, in.x, in.w);
      for (const Precision precision : all_precisions()) {
        const double used = error_fraction(precision, in.x, in.w);
        std::cout << "  " << device << " " << in.name << ": " << precision_name(precision)
                  << " uses " << used << " of its bound (ieee " << ieee << " of its own)\n";
        EXPECT_LE(used, 1.0) << device << " " << in.name << " " << precision_name(precision);
      }
    }
  }
}

TEST(LinearPrecisions, Bf16x3IsFloat32GradeOnTheReferenceKindOfInput) {
  // x = torch.rand, W as nn.Linear draws it, K = 2048. bf16x3's error against float64 is the
  // split's own (the residuals and the dropped lo x lo term: 5.5e-6 here even with exact sums),
  // a few times float32's and far inside PyTorch's 1e-4; bf16 alone is ~500 times worse.
  torch::manual_seed(22);
  for (const auto device : devices()) {
    const int64_t k = 2048;
    const torch::Tensor x = torch::rand({64, k}).to(device);
    const torch::Tensor w = ((torch::rand({96, k}) * 2 - 1) / std::sqrt(double(k))).to(device);
    const torch::Tensor exact =
        torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t()).cpu();
    const auto err = [&](Precision p) {
      return (linear_in(p, x, w).to(torch::kFloat64).cpu() - exact).abs().max().item<double>();
    };
    const double ieee = err(Precision::kIeee), bf16x3 = err(Precision::kBf16x3),
                 bf16 = err(Precision::kBf16);
    std::cout << "  " << device << ": max error ieee " << ieee << ", bf16x3 " << bf16x3 << ", tf32 "
              << err(Precision::kTf32) << ", bf16 " << bf16 << "\n";
    EXPECT_LE(bf16x3, 2e-5) << device;
    EXPECT_GE(bf16, 20 * bf16x3) << device << ": the bf16 mode should be far coarser";
  }
}

TEST(LinearPrecisions, ShapesAndEmptyInputs) {
  for (const auto device : devices()) {
    const auto opts = torch::TensorOptions().device(device);
    const torch::Tensor w = torch::randn({5, 3}, opts);
    for (const Precision precision : all_precisions()) {
      const torch::Tensor y = linear_in(precision, torch::randn({2, 4, 3}, opts), w);
      EXPECT_EQ(y.sizes(), (torch::IntArrayRef{2, 4, 5})) << precision_name(precision);
      EXPECT_EQ(y.scalar_type(), torch::kFloat32);
      EXPECT_EQ(linear_in(precision, torch::randn({0, 3}, opts), w).sizes(),
                (torch::IntArrayRef{0, 5}));
      const torch::Tensor no_inputs =
          linear_in(precision, torch::randn({2, 0}, opts), torch::randn({5, 0}, opts));
      EXPECT_TRUE(torch::equal(no_inputs, torch::zeros({2, 5}, opts))) << precision_name(precision);
    }
  }
}

TEST(LinearPrecisions, RejectBadInputsWithClearMessages) {
  const auto expect_error = [](const std::function<void()>& call, const std::string& expected) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one containing: " << expected;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << e.what_without_backtrace() << "\nexpected to contain: " << expected;
    }
  };
  const torch::Tensor x = torch::rand({4, 8}), w = torch::rand({6, 8});
  torch::Tensor hi, lo;  // not a structured binding: C++17 lambdas cannot capture one
  std::tie(hi, lo) = split_bf16(w);
  expect_error([&] { linear_bf16x3(x.to(torch::kFloat64), hi, lo); },
               "expected x of dtype float32");
  expect_error([&] { linear_bf16x3(x, w, lo); }, "expected a weight of dtype BFloat16, got Float");
  expect_error([&] { linear_bf16x3(x, hi, lo.narrow(0, 0, 5)); }, "expected w_lo like w_hi");
  expect_error(
      [&] {
        linear_tf32(x, torch::rand({6, 7}));
      },
      "expected a weight of shape [out_features, 8]");
  expect_error([&] { split_bf16(w.to(torch::kFloat16)); }, "expected a float32 tensor");
  expect_error([&] { split_bf16_three(w.to(torch::kFloat64)); },
               "fusedlinear::split_bf16_three: expected a float32 tensor on cpu, got Double");
  expect_error([&] { linear_bf16x6(x, hi, lo, lo.narrow(1, 0, 7)); }, "expected w_lo like w_hi");
  expect_error([&] { linear_bf16x6(x, hi, lo.narrow(0, 0, 5), lo); }, "expected w_mid like w_hi");
}

// Wide-range inputs: x = rand * logspace(-6, 3) permuted along K, 32 and 64 x 2048 -> 1024,
// swish_chain. Float32's error is ~2^-24 of the large terms; bf16x3's split keeps 17 bits of
// each, so its error (~2^-17 sum |x||w|) falls outside PyTorch's allclose(1e-4, 1e-4). bf16x6's
// three parts keep float32's 24, and allclose passes. Its error against float64: within 2x
// float32's on the CPU (the products summed by float32 matrix products, rounded to nearest), on
// the Hopper GEMM (each k-tile's sums promoted into float32 totals, `--gemm hopper`) and under
// auto on a GPU (ieee's small-batch kernel, float32's products, at 32 rows; the Hopper GEMM at
// 64); through cuBLAS's tensor cores (`--gemm cublas`), whose float32 accumulators drop the low
// bits of each addend over the whole k, within 4x (the hi x hi product's accumulation, not the
// split).
TEST(PrecisionModes, Bf16x6IsFloat32GradeOnWideRangeInputs) {
  torch::NoGradGuard no_grad;
  for (const auto device : devices()) {
    auto model = make_model("swish_chain", 2048, 1024, 35);
    model->to(device);
    for (const int64_t rows : {32, 64}) {
      torch::manual_seed(35);
      const torch::Tensor scale = torch::logspace(-6, 3, 2048).index({torch::randperm(2048)});
      const torch::Tensor x = (torch::rand({rows, 2048}) * scale).to(device);
      const torch::Tensor y64 = model->reference(x);
      const torch::Tensor eager = model->forward_eager(x);
      const auto err = [&](const torch::Tensor& y) {
        return (y.cpu().to(torch::kFloat64) - y64).abs().max().item<double>();
      };
      const double float32 = err(eager);
      double bf16x3 = 0;
      // bf16x3 and bf16x6 as auto runs them, and on a GPU bf16x6 on cuBLAS and on the Hopper GEMM
      // (cuBLAS where it cannot take the forward) too.
      std::vector<std::pair<Precision, GemmKernel>> runs = {
          {Precision::kBf16x3, GemmKernel::kAuto}, {Precision::kBf16x6, GemmKernel::kAuto}};
      if (device.is_cuda()) {
        runs.emplace_back(Precision::kBf16x6, GemmKernel::kCublas);
        runs.emplace_back(Precision::kBf16x6, GemmKernel::kHopper);
      }
      for (const auto& [precision, kernel] : runs) {
        model->set_precision(precision);
        model->set_gemm_kernel(kernel);
        const torch::Tensor y = model->forward(x);
        const GemmPlan plan = model->gemm_plan(x);
        // Under auto on a GPU bf16x6 runs ieee's small-batch kernel at these rows: float32's own
        // products, faster there.
        const bool as_ieee = precision == Precision::kBf16x6 && kernel == GemmKernel::kAuto &&
                             device.is_cuda() && plan.skinny;
        EXPECT_EQ(plan.products, as_ieee ? Precision::kIeee : precision) << device;
        const double e = err(y);
        std::cout << "  " << device << " " << rows << " rows, " << plan.description
                  << ": error vs float64 " << e << " (float32 eager " << float32 << ", "
                  << e / float32 << "x), allclose(1e-4, 1e-4) vs eager "
                  << (torch::allclose(y, eager, 1e-4, 1e-4) ? "yes" : "no") << "\n";
        if (precision == Precision::kBf16x3) {
          bf16x3 = e;
          continue;
        }
        const bool cublas = device.is_cuda() && !plan.hopper && !plan.skinny;
        EXPECT_LE(e, (cublas ? 4 : 2) * float32)
            << device << " " << rows << " " << plan.description;
        EXPECT_TRUE(torch::allclose(y, eager, 1e-4, 1e-4))
            << device << " " << rows << " " << plan.description;
        EXPECT_LT(e, bf16x3 / 2) << device << ": the inputs should defeat bf16x3's split";
      }
    }
  }
}

// --- the modes on a model ---

TEST(PrecisionModes, BackToIeeeIsBitIdenticalToAFreshModel) {
  torch::NoGradGuard no_grad;
  for (const auto device : devices()) {
    for (const auto& name : model_names()) {
      auto fresh = make_model(name, 96, 80, 5);
      auto switched = make_model(name, 96, 80, 5);
      fresh->to(device);
      switched->to(device);
      const torch::Tensor x = torch::rand({70, 96}).to(device);
      for (const Precision precision : all_precisions()) {
        switched->set_precision(precision);
        switched->forward(x);
      }
      switched->set_precision(Precision::kIeee);
      EXPECT_EQ(switched->split_weight_bytes(), 0);
      EXPECT_TRUE(torch::equal(switched->forward(x), fresh->forward(x))) << name << " " << device;
    }
  }
}

TEST(PrecisionModes, StateDictStaysFloat32AndUnchanged) {
  torch::NoGradGuard no_grad;
  auto model = make_model("swish_chain", 64, 48, 6);
  auto copy = make_model("swish_chain", 64, 48, 6);
  model->set_precision(Precision::kBf16x3);
  EXPECT_EQ(model->split_weight_bytes(), 2 * 64 * 48 * 2);  // hi and lo: W's own bytes
  const auto params = model->named_parameters(), expected = copy->named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (const auto& item : expected) {
    ASSERT_TRUE(params.contains(item.key())) << item.key();
    EXPECT_EQ(params[item.key()].scalar_type(), torch::kFloat32) << item.key();
    EXPECT_TRUE(torch::equal(params[item.key()], item.value())) << item.key();
  }
  EXPECT_TRUE(model->named_buffers().is_empty());
  model->set_precision(Precision::kBf16);
  EXPECT_EQ(model->split_weight_bytes(), 64 * 48 * 2);  // hi only
  model->set_precision(Precision::kBf16x6);
  EXPECT_EQ(model->split_weight_bytes(), 3 * 64 * 48 * 2);  // hi, mid and lo
  const auto after = model->named_parameters();
  for (const auto& item : expected) EXPECT_TRUE(torch::equal(after[item.key()], item.value()));
}

TEST(PrecisionModes, SplitFollowsTheWeight) {
  // After set_precision the weight changes three ways (in place, as a state-dict load does; a new
  // layout; a move between devices): the forward must use the new weight each time.
  torch::NoGradGuard no_grad;
  for (const auto device : devices()) {
    auto model = make_model("mish_mish", 64, 48, 7);
    auto reference = make_model("mish_mish", 64, 48, 8);
    model->to(device);
    reference->to(device);
    model->set_bf16x3_min_rows(1);
    model->set_precision(Precision::kBf16x3);
    const torch::Tensor x = torch::rand({16, 64}).to(device);
    const auto expect_matches_reference = [&](const std::string& step) {
      EXPECT_TRUE(torch::allclose(model->forward(x), reference->forward(x), 1e-5, 1e-5))
          << step << " on " << device;
    };
    model->linear()->weight.copy_(reference->linear()->weight);
    model->linear()->bias.copy_(reference->linear()->bias);
    expect_matches_reference("in-place copy");
    model->store_weight_in(WeightLayout::kInputMajor);
    expect_matches_reference("input-major layout");
    if (device.is_cuda()) {
      model->to(torch::kCPU);
      reference->to(torch::kCPU);
      const torch::Tensor x_cpu = x.cpu();
      EXPECT_TRUE(torch::allclose(model->forward(x_cpu), reference->forward(x_cpu), 1e-5, 1e-5))
          << "moved to the CPU";
    }
  }
}

// A split mode below its minimum rows forms ieee's products: the ieee model's bits, at rows past
// the CPU's small-batch products, where both run the CPU's GEMM.
TEST(PrecisionModes, SplitModesRunIeeeBelowTheirMinimumRows) {
  torch::NoGradGuard no_grad;
  for (const Precision precision : {Precision::kBf16x3, Precision::kBf16x6}) {
    auto model = make_model("swish_chain", 64, 48, 9);
    auto ieee = make_model("swish_chain", 64, 48, 9);
    model->set_precision(precision);
    model->set_bf16x3_min_rows(24);
    EXPECT_EQ(model->gemm_plan(torch::rand({23, 64})).products, Precision::kIeee);
    EXPECT_EQ(model->gemm_plan(torch::rand({24, 64})).products, precision);
    const torch::Tensor few = torch::rand({3, 7, 64});  // 21 rows
    EXPECT_TRUE(torch::equal(model->forward(few), ieee->forward(few)));
    const torch::Tensor many = torch::rand({24, 64});
    EXPECT_FALSE(torch::equal(model->matmul_without_bias(many), ieee->matmul_without_bias(many)));
    EXPECT_TRUE(torch::allclose(model->forward(many), ieee->forward(many), 1e-5, 1e-5));
  }
}

TEST(PrecisionModes, NeedAFloat32Model) {
  auto model = make_model("mish_mish", 16, 8, 10);
  model->to(torch::kBFloat16);
  EXPECT_THROW(model->set_precision(Precision::kBf16x3), c10::Error);
  model->set_precision(Precision::kIeee);  // always allowed
  auto converted = make_model("mish_mish", 16, 8, 10);
  converted->set_precision(Precision::kBf16x3);
  converted->set_bf16x3_min_rows(1);
  converted->to(torch::kFloat16);
  try {
    converted->forward(torch::rand({2, 16}).to(torch::kFloat16));
    ADD_FAILURE() << "a float16 model ran the bf16x3 GEMM";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a float32 weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fusedlinear
