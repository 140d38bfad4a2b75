// The small-batch kernels (kernels/cuda/skinny/) and their op, linear_epilogue, for every chain
// (the registered models', compiled and as specs, and a few of the vocabulary's): every
// precision's products against a float64 evaluation, at every row count up to 64, on widths that
// are not multiples of the load width or the tile, misaligned weights, split k; bitwise-repeatable
// results, also from a CUDA graph, and the same with the TMA's copies as with cp.async's; and the
// GEMM plan (modules/gemm_plan.h) that picks them. The CPU twin runs everywhere; the CUDA tests
// skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/small_batch.h"
#include "kernels/ops/chain_registry.h"
#include "kernels/ops/linear_forward.h"
#include "kernels/ops/ops.h"
#include "modules/linear_chain.h"
#include "tests/test_support.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "tests/cuda_graph_support.h"
#endif

namespace fusedlinear {
namespace {

using testing_support::message_of;

// The chains under test: each registered model's, compiled and as a spec, and a few specs of
// the vocabulary's ops with parameters.
std::vector<ModelSpec> chains_under_test() {
  std::vector<ModelSpec> specs;
  for (const ModelSpec& model : registered_models()) {
    specs.push_back(model);
    specs.push_back(runtime_model(model.chain, model.linear));
  }
  specs.push_back(runtime_model("gelu(tanh),silu,clamp(-2,2)"));
  specs.push_back(runtime_model("mul(scale),softplus(2,10),add(shift),logsigmoid"));
  return specs;
}

// The products each precision forms, and the error each may carry, relative to |x_k w_k|: none
// for W itself (ieee); for hi + lo, bf16x3's (x and W each split to within 2^-17, x_lo w_lo left
// out: 2^-16 + 2^-18, 2^-15 with room); for hi, mid and lo, bf16x6's (each split to within
// 2^-26, the products of parts i + j > 2 left out: 2^-24 with room); for hi alone, the bf16
// mode's (x and W each rounded to bfloat16, 2^-9: 2^-8 + 2^-18).
const Precision kPrecisions[] = {Precision::kIeee, Precision::kBf16x3, Precision::kBf16,
                                 Precision::kBf16x6};
double per_product_error(Precision precision) {
  return precision == Precision::kIeee     ? 0
         : precision == Precision::kBf16x3 ? std::ldexp(1.0, -15)
         : precision == Precision::kBf16x6 ? std::ldexp(1.0, -24)
                                           : std::ldexp(1.0, -8);
}

// A whole-forward op: fused_linear_epilogue (the small-batch kernels) or fused_gemm_epilogue
// (the Hopper GEMM), which take the same arguments.
using WholeForwardOp = decltype(&fused_linear_epilogue);

struct Problem {
  ModelSpec spec;
  torch::Tensor x, w, bias;
  std::vector<torch::Tensor> params;  // in the chain's slots
};

Problem make_problem(const ModelSpec& spec, int64_t rows, int64_t out, int64_t in,
                     torch::ScalarType dtype, torch::Device device, uint64_t seed) {
  torch::manual_seed(seed);
  Problem p;
  p.spec = spec;
  const double bound = 1 / std::sqrt(double(std::max<int64_t>(in, 1)));
  p.x = torch::rand({rows, in}).to(device, dtype);
  p.w = ((torch::rand({out, in}) * 2 - 1) * bound).to(device, dtype);
  p.bias = ((torch::rand({out}) * 2 - 1) * bound).to(device, dtype);
  for (size_t j = 0; j < spec.parsed_chain().slot_params().size(); ++j) {
    p.params.push_back((torch::rand({out}) + 0.5).to(device, dtype));
  }
  return p;
}

torch::Tensor run_precision(const Problem& p, Precision precision,
                            WholeForwardOp op = &fused_linear_epilogue) {
  if (precision == Precision::kIeee) {
    return op(p.x, p.w, c10::nullopt, p.bias, p.params, p.spec.op_chain(), precision, c10::nullopt);
  }
  if (precision == Precision::kBf16x6) {
    const auto [hi, mid, lo] = split_bf16_three(p.w);
    return op(p.x, hi, mid, p.bias, p.params, p.spec.op_chain(), precision, lo);
  }
  const auto [hi, lo] = split_bf16(p.w);
  return op(p.x, hi,
            precision == Precision::kBf16x3 ? c10::optional<torch::Tensor>(lo) : c10::nullopt,
            p.bias, p.params, p.spec.op_chain(), precision, c10::nullopt);
}

// The chain in float64 on x W^T + bias, with the parameters as given.
torch::Tensor reference(const Problem& p, const torch::Tensor& shift = torch::Tensor()) {
  const torch::Tensor x = p.x.to(torch::kCPU, torch::kFloat64);
  torch::Tensor y = torch::addmm(p.bias.to(torch::kCPU, torch::kFloat64), x,
                                 p.w.to(torch::kCPU, torch::kFloat64).t());
  if (shift.defined()) y = y + shift;
  return reference_chain(p.spec.parsed_chain(), y, p.params);
}

// The largest fraction of its bound an output uses: the GEMM's error (per product, plus a
// float32 sum of K terms: K 2^-22 of sum |x||w|) times the chain's slope there (the larger of its
// one-sided differences in float64 over a step well above that error, plus 0.5), plus the
// output's rounding: 4 float32 ulps, or 2 ulps of the 16-bit type with its chain's cheaper
// functors.
double bound_used(const Problem& p, const torch::Tensor& got, Precision precision) {
  const torch::Tensor x64 = p.x.to(torch::kCPU, torch::kFloat64);
  const torch::Tensor w64 = p.w.to(torch::kCPU, torch::kFloat64);
  const torch::Tensor scale = torch::matmul(x64.abs(), w64.abs().t());
  const double k = double(p.x.size(-1));
  const torch::Tensor gemm = (per_product_error(precision) + k * std::ldexp(1.0, -22)) * scale;
  const torch::Tensor want = reference(p);
  const torch::Tensor step = 1e3 * gemm + 1e-9;
  const torch::Tensor slope =
      torch::max((reference(p, step) - want).abs(), (want - reference(p, -step)).abs()) / step;
  const double ulp = p.x.scalar_type() == torch::kFloat32   ? std::ldexp(1.0, -23)
                     : p.x.scalar_type() == torch::kFloat16 ? std::ldexp(1.0, -10)
                                                            : std::ldexp(1.0, -7);
  const double roundings = p.x.scalar_type() == torch::kFloat32 ? 4 : 2;
  const torch::Tensor bound = (slope + 0.5) * gemm + roundings * ulp * (want.abs() + 1e-3);
  const torch::Tensor err = (got.to(torch::kCPU, torch::kFloat64) - want).abs();
  return (err / bound).max().item<double>();
}

// Every precision a dtype takes: ieee for all; for float32 bf16x3 and bf16, and on the Hopper GEMM
// bf16x6 (its products are bfloat16's: no ieee there; the small-batch kernels form no six).
std::vector<Precision> precisions_of(torch::ScalarType dtype,
                                     WholeForwardOp op = &fused_linear_epilogue) {
  if (dtype != torch::kFloat32) return {kPrecisions[0]};
  if (op == &fused_gemm_epilogue) return {kPrecisions[1], kPrecisions[2], kPrecisions[3]};
  return {kPrecisions[0], kPrecisions[1], kPrecisions[2]};
}

void check_shapes(torch::Device device, const std::vector<int64_t>& row_counts,
                  const std::vector<std::pair<int64_t, int64_t>>& shapes,
                  const std::vector<torch::ScalarType>& dtypes,
                  WholeForwardOp op = &fused_linear_epilogue) {
  torch::NoGradGuard no_grad;
  uint64_t seed = 100;
  for (const ModelSpec& spec : chains_under_test()) {
    for (const auto dtype : dtypes) {
      for (const auto& [out, in] : shapes) {
        for (const int64_t rows : row_counts) {
          const Problem p = make_problem(spec, rows, out, in, dtype, device, ++seed);
          for (const Precision precision : precisions_of(dtype, op)) {
            const torch::Tensor got = run_precision(p, precision, op);
            ASSERT_EQ(got.sizes(), (std::vector<int64_t>{rows, out}));
            ASSERT_EQ(got.scalar_type(), dtype);
            EXPECT_LE(bound_used(p, got, precision), 1.0)
                << spec.name << " " << c10::toString(dtype) << " " << precision_name(precision)
                << " " << rows << "x" << in << " -> " << out << " on " << device;
          }
        }
      }
    }
  }
}

// The CPU twin in every dtype: at 1 and 3 rows the small-batch products (W widened as it is read
// where it is 16-bit), at 17 the CPU's GEMM.
TEST(SkinnyLinear, CpuTwinWithinBoundsOfFloat64) {
  check_shapes(torch::kCPU, {1, 3, 17}, {{19, 37}, {8, 256}, {16, 0}},
               {torch::kFloat32, torch::kFloat16, torch::kBFloat16});
}

// Past the small-batch products' rows the CPU twin of a float32 Linear is eager's GEMM, the bias
// in it (addmm, whose sums over a long k differ from a GEMM then + bias), and the chain over its
// output: with an exact chain (relu, hardtanh) or none, the bits of eager's Linear and chain, for
// 2-D and 3-D x, with and without a bias.
TEST(SkinnyLinear, CpuTwinPastAFewRowsCarriesEagersBits) {
  torch::NoGradGuard no_grad;
  const auto generator = [](uint64_t seed) { return at::detail::createCPUGenerator(seed); };
  const torch::Tensor w = torch::randn({48, 1100}, generator(1));
  const torch::Tensor bias = torch::randn({48}, generator(2));
  const std::vector<std::pair<std::string, std::function<torch::Tensor(const torch::Tensor&)>>>
      chains = {{"relu", [](const torch::Tensor& y) { return torch::relu(y); }},
                {"hardtanh(-0.5,0.5)", [](const torch::Tensor& y) { return y.clamp(-0.5, 0.5); }},
                {"", [](const torch::Tensor& y) { return y; }}};
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{cpu::kSmallBatchMaxRows + 1, 1100}, std::vector<int64_t>{64, 1100},
        std::vector<int64_t>{3, 7, 1100}}) {
    const torch::Tensor x = torch::randn(shape, generator(3));
    const torch::Tensor rows = x.reshape({-1, 1100});
    for (const auto& [chain, eager_chain] : chains) {
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE("'" + chain + "' on " + std::to_string(rows.size(0)) + " rows" +
                     (with_bias ? ", bias" : ""));
        const c10::optional<torch::Tensor> b =
            with_bias ? c10::optional<torch::Tensor>(bias) : c10::nullopt;
        const torch::Tensor fused =
            fused_linear_epilogue(x, w, c10::nullopt, b, {}, chain, Precision::kIeee);
        const torch::Tensor eager =
            eager_chain(with_bias ? torch::addmm(bias, rows, w.t()) : torch::mm(rows, w.t()));
        ASSERT_EQ(fused.dim(), x.dim());
        EXPECT_TRUE(torch::equal(fused.reshape({-1, 48}), eager))
            << (fused.reshape({-1, 48}) - eager).abs().max();
      }
    }
  }
}

// On the CPU the Hopper GEMM's op is the small-batch op's twin: the same products, bitwise.
TEST(HopperGemm, CpuTwinIsTheSmallBatchOpsTwin) {
  torch::NoGradGuard no_grad;
  for (const ModelSpec& spec : chains_under_test()) {
    const Problem p = make_problem(spec, 5, 24, 40, torch::kFloat32, torch::kCPU, 3);
    for (const Precision precision : {Precision::kIeee, Precision::kBf16x3, Precision::kBf16}) {
      EXPECT_TRUE(torch::equal(run_precision(p, precision, &fused_gemm_epilogue),
                               run_precision(p, precision)))
          << spec.name << " " << precision_name(precision);
    }
    // bf16x6: linear_bf16x6's products, then the chain; the small-batch op refuses it.
    const auto [hi, mid, lo] = split_bf16_three(p.w);
    const torch::Tensor six = run_precision(p, Precision::kBf16x6, &fused_gemm_epilogue);
    EXPECT_TRUE(torch::equal(
        six, fused_epilogue(linear_bf16x6(p.x, hi, mid, lo), p.bias, p.params, p.spec.op_chain())))
        << spec.name;
    EXPECT_NE(message_of<c10::Error>([&] {
                run_precision(p, Precision::kBf16x6);
              }).find("expected precision ieee, bf16 or bf16x3, got 'bf16x6'"),
              std::string::npos);
    EXPECT_NE(message_of<c10::Error>([&] {
                fused_gemm_epilogue(p.x, hi, mid, p.bias, p.params, p.spec.op_chain(),
                                    Precision::kBf16x6);
              }).find("precision bf16x6 needs w_third, W's bfloat16 lo part"),
              std::string::npos);
    EXPECT_NE(message_of<c10::Error>([&] {
                fused_gemm_epilogue(p.x, hi, mid, p.bias, p.params, p.spec.op_chain(),
                                    Precision::kBf16x3, lo);
              }).find("precision bf16x3 takes no w_third"),
              std::string::npos);
    EXPECT_NE(message_of<c10::Error>([&] {
                fused_gemm_epilogue(p.x, hi, mid, p.bias, p.params, p.spec.op_chain(),
                                    Precision::kBf16x6, lo.narrow(0, 0, 3));
              }).find("expected w_third like w"),
              std::string::npos);
  }
}

TEST(SkinnyLinear, LeadingDimensionsAndEmptyInputs) {
  torch::NoGradGuard no_grad;
  const Problem p =
      make_problem(find_model("mish_mish"), 6, 10, 12, torch::kFloat32, torch::kCPU, 1);
  const torch::Tensor x3 = p.x.view({2, 3, 12});
  const torch::Tensor got =
      fused_linear_epilogue(x3, p.w, c10::nullopt, p.bias, {}, "mish_mish", Precision::kIeee);
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{2, 3, 10}));
  EXPECT_TRUE(torch::allclose(got.view({6, 10}), run_precision(p, Precision::kIeee)));
  const torch::Tensor none = fused_linear_epilogue(torch::rand({0, 12}), p.w, c10::nullopt, p.bias,
                                                   {}, "mish_mish", Precision::kIeee);
  EXPECT_EQ(none.sizes(), (std::vector<int64_t>{0, 10}));
}

TEST(SkinnyLinear, RejectBadInputsWithClearMessages) {
  torch::NoGradGuard no_grad;
  const Problem p =
      make_problem(find_model("swish_chain"), 2, 10, 12, torch::kFloat32, torch::kCPU, 2);
  const auto fails = [&](const std::function<void()>& call) {
    return message_of<c10::Error>(call, "(no error)");
  };
  const auto op = [&](const torch::Tensor& x, const torch::Tensor& w,
                      const c10::optional<torch::Tensor>& w_lo, const torch::Tensor& bias,
                      Precision precision) {
    fused_linear_epilogue(x, w, w_lo, bias, p.params, "swish_chain", precision);
  };
  EXPECT_NE(fails([&] {
              op(p.x, p.w.to(torch::kFloat16), c10::nullopt, p.bias, Precision::kIeee);
            }).find("precision ieee: expected a weight of Float (the dtype of x), got Half"),
            std::string::npos);
  EXPECT_NE(fails([&] {
              op(p.x, p.w.t(), c10::nullopt, p.bias, Precision::kIeee);
            }).find("expected a weight of shape [out_features, 12]"),
            std::string::npos);
  const torch::Tensor hi = p.w.to(torch::kBFloat16);
  EXPECT_NE(fails([&] {
              op(p.x.to(torch::kBFloat16), hi, hi, p.bias, Precision::kBf16x3);
            }).find("precision bf16x3: expected float32 x and W's bfloat16 parts"),
            std::string::npos);
  EXPECT_NE(fails([&] {
              op(p.x, hi, hi.narrow(0, 0, 5), p.bias, Precision::kBf16x3);
            }).find("expected w_lo like w"),
            std::string::npos);
  EXPECT_NE(fails([&] {
              op(p.x, hi, c10::nullopt, p.bias, Precision::kBf16x3);
            }).find("precision bf16x3 needs w_lo"),
            std::string::npos);
  EXPECT_NE(fails([&] {
              op(p.x, hi, hi, p.bias, Precision::kBf16);
            }).find("precision bf16 takes no w_lo"),
            std::string::npos);
  EXPECT_NE(fails([&] {
              op(p.x, p.w, c10::nullopt, p.bias, Precision::kTf32);
            }).find("expected precision ieee, bf16 or bf16x3, got 'tf32'"),
            std::string::npos);
  EXPECT_NE(
      fails([&] {
        op(p.x, p.w, c10::nullopt, p.bias.narrow(0, 0, 9), Precision::kIeee);
      }).find("expected bias of shape [10] (out_features, from the weight [10, 12]), got [9]"),
      std::string::npos);
}

// The plan as a pure function: what auto runs at each batch on an H200-class GPU (the table's
// measured rows), on a GPU with no measured rows, on the CPU, and what cublas and skinny force.
TEST(GemmPlan, OneFunctionDecidesWhatRuns) {
  GemmQuery q;
  q.device = {true, 9, 0};
  const SkinnyThresholds* table = skinny_thresholds(q.device);
  ASSERT_TRUE(table);
  for (const Precision precision : all_precisions()) {
    if (precision == Precision::kBf16x6) continue;  // no kernel of its own: below
    q.precision = precision;
    const int64_t most = skinny_max_rows(q, precision);
    q.rows = std::max<int64_t>(1, most);
    const GemmPlan at = plan_gemm(q);
    q.rows = most + 1;
    const GemmPlan above = plan_gemm(q);
    EXPECT_EQ(at.skinny, most > 0) << precision_name(precision);
    EXPECT_FALSE(above.skinny) << precision_name(precision);
    EXPECT_FALSE(at.reason.empty());
    EXPECT_EQ(above.products, precision) << precision_name(precision);
  }
  // bf16x3 runs ieee's small-batch kernel at few rows (and says so), its own above.
  q.precision = Precision::kBf16x3;
  q.rows = 1;
  EXPECT_EQ(plan_gemm(q).products, Precision::kIeee);
  EXPECT_EQ(plan_gemm(q).description,
            "ieee, skinny (bf16x3 from " + std::to_string(table->bf16x3_as_ieee + 1) + " rows)");
  q.rows = table->bf16x3_as_ieee + 1;
  EXPECT_EQ(plan_gemm(q).products, Precision::kBf16x3);
  EXPECT_TRUE(plan_gemm(q).skinny);
  // bf16x6 has no small-batch kernel: ieee's at every row where ieee's runs (reading float32 W,
  // fewer bytes than its three parts), then the Hopper GEMM's products from the next row
  // (GemmPlan.HopperGemmWhereItTakes...), or cuBLAS's where the Hopper GEMM cannot run (here
  // in_features not a multiple of 8); cuBLAS's also when the small-batch kernels are asked for
  // (the reason says why).
  q.precision = Precision::kBf16x6;
  EXPECT_EQ(skinny_max_rows(q, Precision::kBf16x6), 0);
  EXPECT_EQ(table->bf16x6_as_ieee, table->ieee);
  EXPECT_EQ(table->bf16x6_hopper_min, table->bf16x6_as_ieee + 1);
  q.rows = table->bf16x6_as_ieee;
  EXPECT_EQ(plan_gemm(q).description,
            "ieee, skinny (bf16x6 from " + std::to_string(table->bf16x6_as_ieee + 1) + " rows)");
  q.rows = table->bf16x6_as_ieee + 1;
  EXPECT_EQ(plan_gemm(q).description, "bf16x6, Hopper GEMM");
  const int64_t in_features = q.in_features;
  q.in_features = 8191;
  EXPECT_EQ(plan_gemm(q).description, "bf16x6, cuBLAS");
  EXPECT_NE(plan_gemm(q).reason.find("no bf16x6 products"), std::string::npos);
  q.in_features = in_features;
  q.kernel = GemmKernel::kSkinny;
  EXPECT_EQ(plan_gemm(q).description, "bf16x6, cuBLAS");
  EXPECT_NE(plan_gemm(q).reason.find("asked for, but they have no bf16x6 products"),
            std::string::npos);
  q.skinny_max_rows = 100;
  q.kernel = GemmKernel::kAuto;
  EXPECT_FALSE(plan_gemm(q).skinny);
  q.skinny_max_rows = -1;
  // An input-major W is not read by the small-batch kernels under auto; bf16x3 reads its parts.
  q.weight_output_major = false;
  q.precision = Precision::kIeee;
  q.rows = 1;
  EXPECT_FALSE(plan_gemm(q).skinny);
  q.precision = Precision::kBf16x3;
  q.rows = table->bf16x3_as_ieee + 1;
  EXPECT_TRUE(plan_gemm(q).skinny);
  q.weight_output_major = true;
  // 16-bit models take the small-batch kernels up to their own rows, then cuBLAS; GPUs with no
  // measured rows and the CPU take cuBLAS (the CPU's GEMM) under auto; kernels asked for are run;
  // bf16x3 below bf16x3_min_rows with cuBLAS runs ieee.
  q.precision = Precision::kIeee;
  q.float32_model = false;
  ASSERT_GT(table->half_models, 0);
  q.rows = table->half_models;
  EXPECT_TRUE(plan_gemm(q).skinny);
  q.rows = table->half_models + 1;
  EXPECT_FALSE(plan_gemm(q).skinny);
  q.float32_model = true;
  GemmQuery unmeasured;
  unmeasured.rows = 1;
  unmeasured.device = {true, 12, 0};
  EXPECT_FALSE(plan_gemm(unmeasured).skinny);
  EXPECT_EQ(plan_gemm(GemmQuery{}).description, "ieee, CPU GEMM");
  q.kernel = GemmKernel::kSkinny;
  q.rows = 100000;
  EXPECT_TRUE(plan_gemm(q).skinny);
  q.precision = Precision::kTf32;
  EXPECT_EQ(plan_gemm(q).products, Precision::kIeee);  // the small-batch kernels' float32 FMAs
  q.kernel = GemmKernel::kCublas;
  q.precision = Precision::kBf16x3;
  q.rows = 1;
  EXPECT_EQ(plan_gemm(q).products, Precision::kIeee);
  EXPECT_EQ(plan_gemm(q).description, "ieee, cuBLAS (bf16x3 from 2 rows)");
  q.skinny_max_rows = 0;
  q.kernel = GemmKernel::kAuto;
  q.rows = 2;
  EXPECT_FALSE(plan_gemm(q).skinny);
}

// The CPU's small-batch products (kernels/cpu/small_batch.h) in each loop this CPU runs, against
// float64, for a float32, float16 and bfloat16 W (widened as read: its values exactly): every row
// count up to auto's most and past it (groups of x's rows and their tails), widths that leave
// partial blocks of W's rows and partial vectors of k, and k = 0.
TEST(SkinnyLinear, CpuSmallBatchProductsInEachLoop) {
  const cpu::RestoreCapability restore;
  cpu::set_capability(cpu::Capability::kScalar);
  EXPECT_FALSE(cpu::small_batch_runs());
  int loops = 0;
  for (const cpu::Capability loop : cpu::supported_capabilities()) {
    if (loop == cpu::Capability::kScalar) continue;
    ++loops;
    cpu::set_capability(loop);
    ASSERT_TRUE(cpu::small_batch_runs());
    uint64_t seed = 7;
    for (const auto w_dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
      for (int64_t rows = 1; rows <= cpu::kSmallBatchMaxRows + 1; ++rows) {
        for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
                 {1, 1}, {5, 7}, {37, 19}, {9, 33}, {64, 256}, {3, 0}}) {
          torch::manual_seed(++seed);
          const torch::Tensor x = torch::randn({rows, k}), w = torch::randn({n, k}).to(w_dtype);
          torch::Tensor y = torch::full({rows, n}, std::nan(""));
          cpu::small_batch_linear({x.data_ptr<float>(), rows, w.data_ptr(), n, k,
                                   y.data_ptr<float>(), detail::element_type_of(w)});
          const torch::Tensor x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64);
          // A float32 sum of k products: within k float32 ulps of the sum of their magnitudes.
          const torch::Tensor bound =
              double(k + 1) * std::ldexp(1.0, -24) * torch::mm(x64.abs(), w64.abs().t()) + 1e-30;
          const torch::Tensor err = (y.to(torch::kFloat64) - torch::mm(x64, w64.t())).abs();
          EXPECT_LE((err / bound).max().item<double>(), 1.0)
              << cpu::capability_name(loop) << " " << w_dtype << " " << rows << " x " << k << " -> "
              << n;
        }
      }
    }
  }
  if (loops == 0) GTEST_SKIP() << "this CPU or build has no AVX2 or AVX-512 loop";
}

// On a CPU, auto gives models in ieee (float32 or 16-bit) at a few rows the skinny kernel's twin,
// whose products are the small-batch ones, where the CPU runs them; the CPU's GEMM elsewhere.
TEST(GemmPlan, CpuSmallBatchProductsAtFewRows) {
  GemmQuery q;
  q.device.cpu_small_batch = true;
  q.rows = cpu::kSmallBatchMaxRows;
  EXPECT_TRUE(plan_gemm(q).skinny);
  EXPECT_EQ(plan_gemm(q).description, "ieee, skinny");
  EXPECT_NE(plan_gemm(q).reason.find("small-batch products"), std::string::npos);
  q.rows = cpu::kSmallBatchMaxRows + 1;
  EXPECT_EQ(plan_gemm(q).description, "ieee, CPU GEMM");
  q.rows = 1;
  for (const Precision precision : {Precision::kBf16x3, Precision::kBf16, Precision::kTf32}) {
    q.precision = precision;
    EXPECT_FALSE(plan_gemm(q).skinny) << precision_name(precision);
  }
  q.precision = Precision::kIeee;
  q.float32_model = false;
  EXPECT_TRUE(plan_gemm(q).skinny);
  q.weight_output_major = false;
  EXPECT_FALSE(plan_gemm(q).skinny);
  q.weight_output_major = true;
  q.skinny_max_rows = 0;
  EXPECT_FALSE(plan_gemm(q).skinny);
  q.skinny_max_rows = -1;
  q.kernel = GemmKernel::kCublas;
  EXPECT_FALSE(plan_gemm(q).skinny);
  q.kernel = GemmKernel::kAuto;
  q.device.cpu_small_batch = false;
  EXPECT_FALSE(plan_gemm(q).skinny);
}

// Two queries are the same only where every field is: a module keeps its last plan for the query
// that asked it, and any change of rows, device or setting must ask plan_gemm anew.
TEST(GemmPlan, SameQueryComparesEveryField) {
  const GemmQuery base;
  EXPECT_TRUE(same_query(base, GemmQuery{}));
  const std::vector<void (*)(GemmQuery&)> changes = {
      [](GemmQuery& q) { q.precision = Precision::kBf16; },
      [](GemmQuery& q) { q.kernel = GemmKernel::kCublas; },
      [](GemmQuery& q) { q.rows = 1; },
      [](GemmQuery& q) { q.in_features = 8; },
      [](GemmQuery& q) { q.float32_model = false; },
      [](GemmQuery& q) { q.device.gpu = true; },
      [](GemmQuery& q) { q.device.compute_major = 9; },
      [](GemmQuery& q) { q.device.compute_minor = 1; },
      [](GemmQuery& q) { q.device.multiprocessors = 132; },
      [](GemmQuery& q) { q.device.shared_bytes_per_block = 1; },
      [](GemmQuery& q) { q.device.cpu_small_batch = true; },
      [](GemmQuery& q) { q.weight_output_major = false; },
      [](GemmQuery& q) { q.skinny_max_rows = 0; },
      [](GemmQuery& q) { q.bf16x3_min_rows = 1; },
      [](GemmQuery& q) { q.chain_kernels = ChainKernelKind::kInterpreter; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    GemmQuery changed = base;
    changes[i](changed);
    EXPECT_FALSE(same_query(base, changed)) << "change " << i;
  }
}

// A kept plan is handed back for the query it answers and replaced for any other; a plan handed
// out stays valid after it is replaced.
TEST(GemmPlan, KeptPlanAnswersItsOwnQuery) {
  KeptPlan kept;
  GemmQuery small;
  small.device.cpu_small_batch = true;
  small.rows = 1;
  const std::shared_ptr<const GemmPlan> first = kept.plan_for(small);
  EXPECT_EQ(kept.plan_for(small).get(), first.get());
  GemmQuery asked = small;
  asked.kernel = GemmKernel::kCublas;
  const std::shared_ptr<const GemmPlan> second = kept.plan_for(asked);
  EXPECT_NE(second.get(), first.get());
  EXPECT_EQ(second->description, plan_gemm(asked).description);
  EXPECT_EQ(first->description, plan_gemm(small).description);
  EXPECT_NE(kept.plan_for(small).get(), first.get());  // planned anew: only the last is kept
  EXPECT_EQ(kept.plan_for(small)->description, "ieee, skinny");
}

// A kept answer is asked for once per query: again only when the query changes.
TEST(GemmPlan, KeptAnswerAsksOncePerQuery) {
  KeptAnswer<MlpQuery, bool> kept;
  int asked = 0;
  const auto choose = [&](const MlpQuery& query) {
    ++asked;
    return choose_mlp(query, GemmKernel::kAuto).fused;
  };
  MlpQuery query;
  query.widths = {16, 16, 16};
  query.compiled_chains = {false, false};
  query.gated = {false, false};
  query.rows = 1;
  EXPECT_EQ(*kept.answer_for(query, choose), choose_mlp(query, GemmKernel::kAuto).fused);
  EXPECT_EQ(*kept.answer_for(query, choose), choose_mlp(query, GemmKernel::kAuto).fused);
  EXPECT_EQ(asked, 1);
  query.rows = 2;
  kept.answer_for(query, choose);
  EXPECT_EQ(asked, 2);
}

// The same for the fused-MLP kernel's query: a model keeps auto's last choice for it.
TEST(GemmPlan, SameMlpQueryComparesEveryField) {
  MlpQuery base;
  base.widths = {16, 16};
  base.compiled_chains = {false};
  base.gated = {false};
  EXPECT_TRUE(same_query(base, MlpQuery(base)));
  const std::vector<void (*)(MlpQuery&)> changes = {
      [](MlpQuery& q) { q.precision = Precision::kBf16x3; },
      [](MlpQuery& q) { q.float32_model = false; },
      [](MlpQuery& q) { q.device.gpu = true; },
      [](MlpQuery& q) { q.device.multiprocessors = 132; },
      [](MlpQuery& q) { q.device.shared_bytes_per_block = 1; },
      [](MlpQuery& q) { q.widths.back() = 32; },
      [](MlpQuery& q) { q.compiled_chains = {true}; },
      [](MlpQuery& q) { q.gated = {true}; },
      [](MlpQuery& q) { q.rows = 1; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    MlpQuery changed = base;
    changes[i](changed);
    EXPECT_FALSE(same_query(base, changed)) << "change " << i;
  }
}

// A module's kept plan follows its settings and x: what it reports is what plan_gemm says now.
TEST(GemmPlan, ModulePlanFollowsSettingsAndRows) {
  auto model = make_model("swish_chain", 40, 24, 3);
  const torch::Tensor one = torch::rand({1, 40}), many = torch::rand({300, 40});
  const auto fresh = [&](const torch::Tensor& x) {
    GemmQuery q;
    q.kernel = model->gemm_kernel();
    q.rows = x.size(0);
    q.in_features = 40;
    q.device = gemm_device_of(x);
    q.skinny_max_rows = -1;
    q.chain_kernels = gpu_chain_kernels(find_chain("swish_chain"));
    return plan_gemm(q).description;
  };
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(model->gemm_plan(one).description, fresh(one));
    EXPECT_EQ(model->gemm_plan(many).description, fresh(many));
    model->set_gemm_kernel(GemmKernel::kCublas);
    EXPECT_EQ(model->gemm_plan(one).description, fresh(one));
    EXPECT_EQ(model->gemm_plan(one).description, "ieee, CPU GEMM");
    model->set_gemm_kernel(GemmKernel::kAuto);
  }
}

// The Hopper GEMM runs where it was asked for and takes the forward; elsewhere cuBLAS, and the
// reason says why. Auto picks it for bf16x3 and bf16x6 from the row after the small-batch kernel
// that runs the mode, where it measured faster than cuBLAS's products and closer to float64.
TEST(GemmPlan, HopperGemmWhereItTakesTheForward) {
  GemmQuery q;
  q.device = {true, 9, 0};
  q.rows = 1024;
  q.in_features = 8192;
  q.precision = Precision::kBf16x3;
  const SkinnyThresholds* table = skinny_thresholds(q.device);
  ASSERT_TRUE(table);
  ASSERT_GT(table->bf16x3_hopper_min, table->bf16x3);
  for (const int64_t rows : {table->bf16x3_hopper_min, int64_t(1) << 24}) {
    q.rows = rows;
    EXPECT_TRUE(plan_gemm(q).hopper) << rows;  // auto
    EXPECT_EQ(plan_gemm(q).description, "bf16x3, Hopper GEMM");
    EXPECT_NE(plan_gemm(q).reason.find("measured faster than cuBLAS"), std::string::npos);
  }
  // From the row after bf16x3's small-batch kernel: no rows between are left to cuBLAS.
  q.rows = table->bf16x3_hopper_min - 1;
  EXPECT_TRUE(plan_gemm(q).skinny);
  // bf16x6 likewise, at its own rows.
  GemmQuery six_auto = q;
  six_auto.precision = Precision::kBf16x6;
  for (const int64_t rows : {table->bf16x6_hopper_min, int64_t(1) << 24}) {
    six_auto.rows = rows;
    EXPECT_EQ(plan_gemm(six_auto).description, "bf16x6, Hopper GEMM") << rows;
    EXPECT_NE(plan_gemm(six_auto).reason.find("closer to float64"), std::string::npos);
  }
  six_auto.rows = table->bf16x6_hopper_min - 1;
  EXPECT_EQ(plan_gemm(six_auto).description,
            "ieee, skinny (bf16x6 from " + std::to_string(table->bf16x6_hopper_min) + " rows)");
  // A run-time chain: cuBLAS and the interpreter's own kernel, where a compiled chain takes the
  // Hopper GEMM (the interpreter in its epilogue measured slower).
  for (const Precision precision : {Precision::kBf16x3, Precision::kBf16x6}) {
    GemmQuery spec = q;
    spec.precision = precision;
    spec.rows = 256;  // where both modes take the Hopper GEMM
    spec.chain_kernels = ChainKernelKind::kInterpreter;
    EXPECT_FALSE(plan_gemm(spec).hopper) << precision_name(precision);
    EXPECT_NE(plan_gemm(spec).reason.find("a run-time chain"), std::string::npos);
    EXPECT_EQ(plan_gemm(spec).description,
              std::string(precision_name(precision)) + ", cuBLAS, chain by the interpreter");
    // Compiled at run time: what a declaration gets.
    GemmQuery compiled = spec;
    compiled.chain_kernels = ChainKernelKind::kCompiledAtRunTime;
    EXPECT_TRUE(plan_gemm(compiled).hopper) << precision_name(precision);
    EXPECT_EQ(plan_gemm(compiled).description,
              std::string(precision_name(precision)) + ", Hopper GEMM, chain compiled at run time");
    EXPECT_NE(plan_gemm(compiled).reason.find("compiled as a declaration"), std::string::npos);
    // The small-batch kernels run what the chain's entry has: compiled, or the interpreter.
    compiled.rows = 4;  // ieee's small-batch kernel, in both modes
    ASSERT_TRUE(plan_gemm(compiled).skinny) << precision_name(precision);
    EXPECT_NE(plan_gemm(compiled).description.find(", chain compiled at run time"),
              std::string::npos);
    GemmQuery interpreted = spec;
    interpreted.rows = compiled.rows;
    ASSERT_TRUE(plan_gemm(interpreted).skinny) << precision_name(precision);
    EXPECT_NE(plan_gemm(interpreted).description.find(", chain by the interpreter"),
              std::string::npos);
    spec.kernel = GemmKernel::kHopper;  // asked for: it runs
    EXPECT_TRUE(plan_gemm(spec).hopper) << precision_name(precision);
  }
  q.rows = 1024;
  GemmQuery not_auto = q;  // auto leaves the other modes, other GPUs and odd K to cuBLAS
  not_auto.precision = Precision::kBf16;
  EXPECT_FALSE(plan_gemm(not_auto).hopper);
  not_auto = q;
  not_auto.in_features = 1003;
  EXPECT_FALSE(plan_gemm(not_auto).hopper);
  not_auto = q;
  not_auto.float32_model = false;
  not_auto.precision = Precision::kIeee;
  EXPECT_FALSE(plan_gemm(not_auto).hopper);
  not_auto = q;
  not_auto.skinny_max_rows = 16;  // an override of the table: auto as before, cuBLAS above it
  EXPECT_FALSE(plan_gemm(not_auto).hopper);
  q.kernel = GemmKernel::kHopper;
  EXPECT_TRUE(plan_gemm(q).hopper);
  EXPECT_EQ(plan_gemm(q).description, "bf16x3, Hopper GEMM");
  q.rows = 1;  // asked for: any rows, bf16x3's own products
  EXPECT_EQ(plan_gemm(q).description, "bf16x3, Hopper GEMM");
  q.precision = Precision::kBf16;
  EXPECT_TRUE(plan_gemm(q).hopper);
  const auto refused = [&](const GemmQuery& query) {
    const GemmPlan plan = plan_gemm(query);
    EXPECT_FALSE(plan.hopper || plan.skinny);
    return plan.reason;
  };
  for (const Precision precision : {Precision::kIeee, Precision::kTf32}) {
    GemmQuery float32_products = q;
    float32_products.precision = precision;
    EXPECT_NE(refused(float32_products).find("it forms bfloat16 products, not"), std::string::npos);
  }
  GemmQuery six = q;
  six.precision = Precision::kBf16x6;
  six.rows = 1024;
  EXPECT_EQ(plan_gemm(six).description, "bf16x6, Hopper GEMM");
  GemmQuery half = q;
  half.precision = Precision::kIeee;
  half.float32_model = false;
  EXPECT_EQ(plan_gemm(half).description, "ieee, Hopper GEMM");
  half.weight_output_major = false;
  EXPECT_NE(refused(half).find("W lies input-major"), std::string::npos);
  GemmQuery other = q;
  other.device = {true, 10, 0};
  EXPECT_NE(refused(other).find("compute capability 9.0 only, not 10.0"), std::string::npos);
  other.device = {};
  EXPECT_NE(refused(other).find("on a GPU only"), std::string::npos);
  EXPECT_EQ(plan_gemm(other).description, "bf16, CPU GEMM");
  other = q;
  other.in_features = 1003;
  EXPECT_NE(refused(other).find("in_features (1003) is not a multiple of 8"), std::string::npos);
  EXPECT_EQ(parse_gemm_kernel("hopper"), GemmKernel::kHopper);
}

TEST(SkinnyLinear, ModelFollowsThePlan) {
  torch::NoGradGuard no_grad;
  auto model = make_model("swish_chain", 40, 24, 3);
  const torch::Tensor x = torch::rand({2, 40});
  EXPECT_EQ(model->gemm_kernel(), GemmKernel::kAuto);
  // auto on a CPU: the small-batch products at a few rows where the CPU runs them.
  EXPECT_EQ(model->runs_skinny(x), cpu::small_batch_runs());
  EXPECT_FALSE(model->runs_skinny(torch::rand({cpu::kSmallBatchMaxRows + 1, 40})));
  model->set_gemm_kernel(GemmKernel::kCublas);
  const torch::Tensor cublas = model->forward(x);
  model->set_gemm_kernel(GemmKernel::kSkinny);
  EXPECT_TRUE(model->runs_skinny(x));
  EXPECT_TRUE(model->runs_skinny(torch::rand({500, 40})));  // forced: any rows
  EXPECT_TRUE(torch::allclose(model->forward(x), cublas, 1e-5, 1e-5));
  model->set_gemm_kernel(GemmKernel::kCublas);
  EXPECT_FALSE(model->runs_skinny(x));
  EXPECT_NE(message_of<c10::Error>([&] { model->set_skinny_max_rows(-1); }).find(">= 0"),
            std::string::npos);
  for (const GemmKernel kernel : all_gemm_kernels()) {
    EXPECT_EQ(parse_gemm_kernel(gemm_kernel_name(kernel)), kernel);
  }
  EXPECT_FALSE(parse_gemm_kernel("cuBLAS").has_value());
}

TEST(SkinnyLinear, EveryPrecisionThroughTheModel) {
  // Forced onto the small-batch kernels, each precision's forward stays as close to eager as its
  // cuBLAS forward: bf16x3 reads hi + lo, bf16 hi, ieee and tf32 W itself.
  torch::NoGradGuard no_grad;
  const std::vector<torch::Device> devices =
      torch::cuda::is_available() ? std::vector<torch::Device>{torch::kCPU, torch::kCUDA}
                                  : std::vector<torch::Device>{torch::kCPU};
  for (const auto device : devices) {
    for (const ModelSpec& spec : chains_under_test()) {
      auto model = make_model(spec, 256, 96, 4);
      model->to(device);
      const torch::Tensor x = torch::rand({5, 256}).to(device);
      const torch::Tensor eager = model->forward_eager(x);
      for (const Precision precision : all_precisions()) {
        model->set_precision(precision);
        model->set_gemm_kernel(GemmKernel::kSkinny);
        const torch::Tensor skinny = model->forward(x);
        const double tolerance = precision == Precision::kBf16 ? 2e-2 : 1e-5;
        EXPECT_TRUE(torch::allclose(skinny, eager, tolerance, tolerance))
            << spec.name << " " << precision_name(precision) << " on " << device;
      }
    }
  }
}

class SkinnyLinearCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
  }
};

// Rows 1-64 (each tile, and counts past it), widths that are a multiple of 8 (16-byte loads),
// odd (one element per load), an out_features count that splits k over blocks, and no inputs at
// all (the chain of the bias alone).
TEST_F(SkinnyLinearCuda, EveryVariantWithinBoundsOfFloat64) {
  check_shapes(torch::kCUDA, {1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64, 100},
               {{515, 1000}, {67, 1003}, {64, 4096}, {16, 0}},
               {torch::kFloat32, torch::kBFloat16, torch::kFloat16});
}

// Unaligned rows take the CUDA-core kernel, one element per load, with the same products (the
// bfloat16 parts' split of x included) as the aligned path's tensor cores or vector loads.
TEST_F(SkinnyLinearCuda, MisalignedWeightAndInput) {
  torch::NoGradGuard no_grad;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    Problem p = make_problem(find_model("mish_mish"), 3, 70, 520, dtype, torch::kCUDA, 7);
    std::vector<torch::Tensor> want;
    for (const Precision precision : precisions_of(dtype))
      want.push_back(run_precision(p, precision));
    // The same values one element past a 16-byte boundary: contiguous, not aligned.
    const torch::Tensor w_store = torch::empty({p.w.numel() + 1}, p.w.options());
    const torch::Tensor w_shifted = w_store.narrow(0, 1, p.w.numel()).view(p.w.sizes());
    w_shifted.copy_(p.w);
    const torch::Tensor x_store = torch::empty({p.x.numel() + 1}, p.x.options());
    const torch::Tensor x_shifted = x_store.narrow(0, 1, p.x.numel()).view(p.x.sizes());
    x_shifted.copy_(p.x);
    p.w = w_shifted;
    p.x = x_shifted;
    const std::vector<Precision> precisions = precisions_of(dtype);
    for (size_t i = 0; i < precisions.size(); ++i) {
      const torch::Tensor got = run_precision(p, precisions[i]);
      EXPECT_LE(bound_used(p, got, precisions[i]), 1.0)
          << c10::toString(dtype) << " " << precision_name(precisions[i]);
      EXPECT_TRUE(torch::allclose(got.to(torch::kFloat32), want[i].to(torch::kFloat32), 1e-2, 1e-5))
          << c10::toString(dtype) << " " << precision_name(precisions[i]);
    }
  }
}

// x's split on the tensor cores takes split_bf16's path for values the hardware's rounding would
// carry to infinity (finite results, as on the CPU) and for inf and NaN (non-finite rows).
TEST_F(SkinnyLinearCuda, SplitOfExtremeInputsMatchesTheCpuTwin) {
  torch::NoGradGuard no_grad;
  for (const int64_t rows : {4, 24, 40}) {  // x split in the kernel, and beforehand (from 9 rows)
    Problem p =
        make_problem(find_model("mish_mish"), rows, 64, 256, torch::kFloat32, torch::kCPU, 9);
    p.x = p.x * 1e-3;
    p.x[0][5] = 3.39e38f;  // rounds up to bfloat16's infinity
    p.x[1][7] = -3.39e38f;
    p.x[2][9] = std::numeric_limits<float>::infinity();
    p.x[3][11] = std::numeric_limits<float>::quiet_NaN();
    const auto [hi, lo] = split_bf16(p.w);
    for (const Precision precision : {Precision::kBf16x3, Precision::kBf16}) {
      const c10::optional<torch::Tensor> w_lo =
          precision == Precision::kBf16x3 ? c10::optional<torch::Tensor>(lo) : c10::nullopt;
      const torch::Tensor want =
          fused_linear_epilogue(p.x, hi, w_lo, p.bias, {}, "mish_mish", precision);
      const torch::Tensor got =
          fused_linear_epilogue(p.x.cuda(), hi.cuda(),
                                w_lo ? c10::optional<torch::Tensor>(w_lo->cuda()) : c10::nullopt,
                                p.bias.cuda(), {}, "mish_mish", precision)
              .cpu();
      const torch::Tensor finite_rows = got.narrow(0, 0, 2);
      EXPECT_TRUE(torch::isfinite(finite_rows).all().item<bool>()) << precision_name(precision);
      EXPECT_TRUE(torch::allclose(finite_rows, want.narrow(0, 0, 2), 1e-4, 1e-6))
          << precision_name(precision);
      EXPECT_FALSE(torch::isfinite(got.narrow(0, 2, 2)).any().item<bool>())
          << precision_name(precision);
      EXPECT_FALSE(torch::isfinite(want.narrow(0, 2, 2)).any().item<bool>())
          << precision_name(precision);
      EXPECT_TRUE(
          torch::allclose(got.narrow(0, 4, rows - 4), want.narrow(0, 4, rows - 4), 1e-4, 1e-6))
          << precision_name(precision);
    }
  }
}

TEST_F(SkinnyLinearCuda, BitwiseRepeatable) {
  torch::NoGradGuard no_grad;
  for (const ModelSpec& spec : chains_under_test()) {
    for (const auto& [rows, out, in] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1, 64, 8192}, {8, 8192, 1024}, {16, 300, 3000}, {32, 300, 3000}, {40, 16384, 256}}) {
      const Problem p = make_problem(spec, rows, out, in, torch::kFloat32, torch::kCUDA, 8);
      for (const Precision precision : precisions_of(torch::kFloat32)) {
        const torch::Tensor first = run_precision(p, precision);
        for (int i = 0; i < 3; ++i) {
          EXPECT_TRUE(torch::equal(run_precision(p, precision), first))
              << spec.name << " " << rows << "x" << in << " -> " << out;
        }
      }
    }
  }
}

#ifdef FUSEDLINEAR_WITH_CUDA
// From sm_90 the TMA copies the stages of the lane-rows kernel (float32 W from 9 rows) and of the
// staged kernel at 64 k a stage (bf16x3 from 33 rows); older GPUs copy them thread by thread with
// cp.async. Both feed the same products in the same order: the same bits, at odd widths, split k,
// and tiles that reach past the last row of x and of W.
TEST_F(SkinnyLinearCuda, TileCopiesGiveTheBitsOfThreadCopies) {
  if (at::cuda::getCurrentDeviceProperties()->major < 9) GTEST_SKIP() << "the TMA needs sm_90";
  torch::NoGradGuard no_grad;
  const std::string name = "swish_chain";
  const ChainEntry& entry = find_chain(name);
  for (const auto& [rows, out, in] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {9, 515, 1000}, {16, 8192, 1024}, {17, 515, 1000}, {33, 515, 1000}, {64, 300, 3000}}) {
    const Problem p =
        make_problem(find_model("swish_chain"), rows, out, in, torch::kFloat32, torch::kCUDA, 21);
    const auto [hi, lo] = split_bf16(p.w);
    for (const Precision precision : {Precision::kIeee, Precision::kBf16x3}) {
      const bool split = precision == Precision::kBf16x3;
      cuda::LinearCall call;
      call.type = ElementType::kFloat32;
      call.precision = precision;
      call.x = p.x.data_ptr();
      call.w = split ? hi.data_ptr() : p.w.data_ptr();
      call.w_lo = split ? lo.data_ptr() : nullptr;
      call.bias = p.bias.data_ptr();
      call.terms.data[0] = p.params[0].data_ptr();
      call.terms.count = 1;
      call.rows = rows;
      call.out_features = out;
      call.in_features = in;
      auto run = [&](bool tile_copies) {
        call.tile_copies = tile_copies;
        const torch::Tensor y = torch::empty({call.rows, call.out_features}, p.x.options());
        call.out = y.data_ptr();
        cuda::SkinnyPlan plan;
        EXPECT_EQ(cuda::plan_skinny_linear(call, plan), cudaSuccess);
        const torch::Tensor workspace =
            torch::empty({std::max<int64_t>(plan.workspace_floats(), 1)}, p.x.options());
        const cuda::CudaSkinnyFn launch =
            entry.kernels.cuda.skinny[int(cuda::family_of(plan.variant))];
        EXPECT_EQ(launch(entry.program, call, plan, workspace.data_ptr<float>(),
                         at::cuda::getCurrentCUDAStream()),
                  cudaSuccess);
        return y;
      };
      const torch::Tensor tile_copies = run(true);
      EXPECT_TRUE(torch::equal(tile_copies, run(false)))
          << precision_name(precision) << " " << rows << "x" << in << " -> " << out;
      EXPECT_TRUE(
          torch::equal(tile_copies, run_precision(p, precision)))  // the op: tile copies too
          << precision_name(precision) << " " << rows << "x" << in << " -> " << out;
      EXPECT_LE(bound_used(p, tile_copies, precision), 1.0);
    }
  }
}

TEST_F(SkinnyLinearCuda, SameResultFromACudaGraph) {
  // Captured on a side stream (the kernels must run on the current stream to be captured) and
  // replayed: bitwise the launch's result, split k (64 outputs) and not (2048) alike.
  torch::NoGradGuard no_grad;
  for (const ModelSpec& spec : chains_under_test()) {
    for (const int64_t out : {64, 2048}) {
      for (const Precision precision : all_precisions()) {
        auto model = make_model(spec, 4096, out, 5);
        model->to(torch::kCUDA);
        model->set_precision(precision);
        model->set_gemm_kernel(GemmKernel::kSkinny);
        for (const int64_t rows : {8, 32, 64}) {
          const torch::Tensor x = torch::rand({rows, 4096}, torch::kCUDA);
          const torch::Tensor want = model->forward(x);
          const torch::Tensor got =
              testing_support::replayed_from_cuda_graph([&] { return model->forward(x); });
          EXPECT_TRUE(torch::equal(got, want))
              << spec.name << " " << rows << "x4096 -> " << out << " " << precision_name(precision);
        }
      }
    }
  }
}
#endif

// The Hopper GEMM's tests: on a GPU of compute capability 9.0 only.
class HopperGemmCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
#ifdef FUSEDLINEAR_WITH_CUDA
    const cudaDeviceProp* props = at::cuda::getCurrentDeviceProperties();
    if (props->major != 9 || props->minor != 0) {
      GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0, this GPU has "
                   << props->major << "." << props->minor;
    }
#else
    GTEST_SKIP() << "built without the CUDA kernels";
#endif
  }
};

// Rows and out_features that are not multiples of the tiles (1, 100, 300; 515, 67, 16), k a
// multiple of 8 down to 8 itself: every chain, dtype and mode within the bounds of float64.
TEST_F(HopperGemmCuda, EveryModeWithinBoundsOfFloat64) {
  check_shapes(torch::kCUDA, {1, 100, 300}, {{515, 1000}, {67, 1000}, {256, 4096}, {16, 8}},
               {torch::kFloat32, torch::kBFloat16, torch::kFloat16}, &fused_gemm_epilogue);
}

// Through the model (set_gemm_kernel): bitwise the same run to run and from a CUDA graph captured
// on a side stream, in each mode it takes.
TEST_F(HopperGemmCuda, RepeatableAndTheSameFromACudaGraph) {
  torch::NoGradGuard no_grad;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const Precision precision :
         {Precision::kBf16x3, Precision::kBf16x6, Precision::kBf16, Precision::kIeee}) {
      if ((dtype == torch::kFloat32) == (precision == Precision::kIeee)) continue;
      auto model = make_model("swish_chain", 1024, 520, 11);
      model->to(torch::kCUDA, dtype);
      model->set_precision(precision);
      model->set_gemm_kernel(GemmKernel::kHopper);
      const torch::Tensor x = torch::rand({300, 1024}, torch::kCUDA).to(dtype);
      ASSERT_TRUE(model->gemm_plan(x).hopper) << model->gemm_plan(x).reason;
      const torch::Tensor want = model->forward(x);
      EXPECT_TRUE(torch::equal(model->forward(x), want)) << precision_name(precision);
#ifdef FUSEDLINEAR_WITH_CUDA
      const torch::Tensor got =
          testing_support::replayed_from_cuda_graph([&] { return model->forward(x); });
      EXPECT_TRUE(torch::equal(got, want)) << precision_name(precision);
#endif
      const bool float32_grade = dtype == torch::kFloat32 && keeps_float32_accuracy(precision);
      const double tolerance = float32_grade ? 1e-4 : 2e-2;
      EXPECT_TRUE(torch::allclose(want.to(torch::kFloat32),
                                  model->forward_eager(x).to(torch::kFloat32), tolerance,
                                  tolerance))
          << precision_name(precision);
    }
  }
}

// What the kernel cannot take: k not a multiple of 8 is refused by the op in one line, and the
// model asked for the Hopper GEMM runs cuBLAS instead; an x whose base is not 16-byte aligned is
// copied first, with the same result.
TEST_F(HopperGemmCuda, RefusedOrCopiedNeverWrong) {
  torch::NoGradGuard no_grad;
  const Problem odd =
      make_problem(find_model("mish_mish"), 40, 64, 12, torch::kBFloat16, torch::kCUDA, 12);
  EXPECT_NE(message_of<c10::Error>([&] {
              run_precision(odd, Precision::kIeee, &fused_gemm_epilogue);
            }).find("in_features a multiple of 8, got in_features 12"),
            std::string::npos);
  auto model = make_model("mish_mish", 12, 64, 13);
  model->to(torch::kCUDA);
  model->set_precision(Precision::kBf16x3);
  model->set_gemm_kernel(GemmKernel::kHopper);
  const torch::Tensor x12 = torch::rand({40, 12}, torch::kCUDA);
  EXPECT_FALSE(model->gemm_plan(x12).hopper);
  EXPECT_TRUE(torch::allclose(model->forward(x12), model->forward_eager(x12), 1e-4, 1e-5));

  Problem p =
      make_problem(find_model("mish_mish"), 40, 64, 256, torch::kBFloat16, torch::kCUDA, 14);
  const torch::Tensor aligned = run_precision(p, Precision::kIeee, &fused_gemm_epilogue);
  const int64_t count = int64_t(40) * 256;
  const torch::Tensor flat = torch::empty({count + 1}, p.x.options());
  p.x = flat.narrow(0, 1, count).view({40, 256}).copy_(p.x);  // 2 bytes past the base
  EXPECT_TRUE(torch::equal(run_precision(p, Precision::kIeee, &fused_gemm_epilogue), aligned));
}

TEST_F(SkinnyLinearCuda, AutoPicksSkinnyForFewRowsOnly) {
  torch::NoGradGuard no_grad;
  auto model = make_model("swish_chain", 512, 256, 6);
  model->to(torch::kCUDA);
  if (!model->gemm_plan(torch::rand({1, 512}, torch::kCUDA)).skinny) {
    GTEST_SKIP() << "no small-batch thresholds measured for this GPU";
  }
  int64_t most = 0;
  while (model->runs_skinny(torch::rand({most + 1, 512}, torch::kCUDA))) ++most;
  EXPECT_GT(most, 0);
  EXPECT_LT(most, 1024);
  model->store_weight_in(WeightLayout::kInputMajor);
  EXPECT_FALSE(model->runs_skinny(torch::rand({1, 512}, torch::kCUDA)));
  model->set_precision(Precision::kBf16x3);  // reads the split parts, always output-major
  EXPECT_TRUE(model->runs_skinny(torch::rand({16, 512}, torch::kCUDA)));
}

}  // namespace
}  // namespace fusedlinear
