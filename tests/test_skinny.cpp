// The skinny kernels (kernels/skinny_*.cuh, launched from skinny_linear.cu) and their ops,
// linear_swish_chain and linear_mish_mish: every weight variant against a float64 evaluation, at
// every row count up to 64, on widths that are not multiples of the load width or the tile,
// misaligned weights, split k; bitwise-repeatable results, also from a CUDA graph, and the same
// with the TMA's copies as with cp.async's; and the model's choice of kernel. The CPU twin runs
// everywhere; the CUDA tests skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops/ops.h"
#include "modules/models.h"
#include "tests/test_support.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "kernels/cuda/linear.h"
#include "tests/cuda_graph_support.h"
#endif

namespace fusedlinear {
namespace {

using testing_support::message_of;

// What the kernel reads as W, and the error each product may carry, relative to |x_k w_k|: none
// for W itself; for hi + lo, bf16x3's (x and W each split to within 2^-17, x_lo w_lo left out:
// 2^-16 + 2^-18, 2^-15 with room); for hi alone, the bf16 mode's (x and W each rounded to
// bfloat16, 2^-9: 2^-8 + 2^-18, within the bound's 1.5 with the chain's slope below 1.3).
enum class Variant { kWeight, kHiLo, kHi };
const char* variant_name(Variant v) {
  return v == Variant::kWeight ? "W" : v == Variant::kHiLo ? "hi+lo" : "hi";
}
double per_product_error(Variant v) {
  return v == Variant::kWeight ? 0
         : v == Variant::kHiLo ? std::ldexp(1.0, -15)
                               : std::ldexp(1.0, -8);
}

struct Problem {
  std::string model;
  torch::Tensor x, w, bias, shift;  // shift: swish_chain's add_value, else undefined
};

Problem make_problem(const std::string& model, int64_t rows, int64_t out, int64_t in,
                     torch::ScalarType dtype, torch::Device device, uint64_t seed) {
  torch::manual_seed(seed);
  Problem p;
  p.model = model;
  const double bound = 1 / std::sqrt(double(std::max<int64_t>(in, 1)));
  p.x = torch::rand({rows, in});
  p.w = (torch::rand({out, in}) * 2 - 1) * bound;
  p.bias = (torch::rand({out}) * 2 - 1) * bound;
  if (model == "swish_chain") p.shift = torch::randn({out});
  for (torch::Tensor* t : {&p.x, &p.w, &p.bias, &p.shift}) {
    if (t->defined()) *t = t->to(device, dtype);
  }
  return p;
}

torch::Tensor run_op(const Problem& p, const torch::Tensor& w,
                     const c10::optional<torch::Tensor>& w_lo) {
  if (p.model == "swish_chain") return fused_linear_swish_chain(p.x, w, w_lo, p.bias, p.shift);
  return fused_linear_mish_mish(p.x, w, w_lo, p.bias);
}

torch::Tensor run_variant(const Problem& p, Variant v) {
  if (v == Variant::kWeight) return run_op(p, p.w, c10::nullopt);
  const auto [hi, lo] = split_bf16(p.w);
  return run_op(p, hi, v == Variant::kHiLo ? c10::optional<torch::Tensor>(lo) : c10::nullopt);
}

// The model's chain in float64 on x W^T + bias (+ shift), with the parameters as given.
torch::Tensor reference(const Problem& p) {
  const torch::Tensor x = p.x.to(torch::kCPU, torch::kFloat64);
  torch::Tensor y = torch::addmm(p.bias.to(torch::kCPU, torch::kFloat64), x,
                                 p.w.to(torch::kCPU, torch::kFloat64).t());
  if (p.model == "swish_chain") {
    y = y + p.shift.to(torch::kCPU, torch::kFloat64);
    y = torch::sigmoid(y) * y;
    return torch::nn::functional::hardtanh(torch::gelu(torch::tanh(y)));
  }
  namespace F = torch::nn::functional;
  return F::mish(F::mish(y));
}

// The largest fraction of its bound an output uses: the GEMM's error (per product, plus a
// float32 sum of K terms: K 2^-22 of sum |x||w|) times the chain's slope (both chains' slopes
// stay below 1.3: 1.5 leaves room), plus the output's rounding: 4 float32 ulps, or 2 ulps of the
// 16-bit type with its chain's cheaper functors.
double bound_used(const Problem& p, const torch::Tensor& got, Variant v) {
  const torch::Tensor x64 = p.x.to(torch::kCPU, torch::kFloat64);
  const torch::Tensor w64 = p.w.to(torch::kCPU, torch::kFloat64);
  const torch::Tensor scale = torch::matmul(x64.abs(), w64.abs().t());
  const double k = double(p.x.size(-1));
  const double gemm = 1.5 * (per_product_error(v) + k * std::ldexp(1.0, -22));
  const torch::Tensor want = reference(p);
  const double ulp = p.x.scalar_type() == torch::kFloat32   ? std::ldexp(1.0, -23)
                     : p.x.scalar_type() == torch::kFloat16 ? std::ldexp(1.0, -10)
                                                            : std::ldexp(1.0, -7);
  const double roundings = p.x.scalar_type() == torch::kFloat32 ? 4 : 2;
  const torch::Tensor bound = gemm * scale + roundings * ulp * (want.abs() + 1e-3);
  const torch::Tensor err = (got.to(torch::kCPU, torch::kFloat64) - want).abs();
  return (err / bound).max().item<double>();
}

// Every variant a dtype takes: W for all; hi + lo and hi for float32.
std::vector<Variant> variants_of(torch::ScalarType dtype) {
  if (dtype == torch::kFloat32) return {Variant::kWeight, Variant::kHiLo, Variant::kHi};
  return {Variant::kWeight};
}

void check_shapes(torch::Device device, const std::vector<int64_t>& row_counts,
                  const std::vector<std::pair<int64_t, int64_t>>& shapes,
                  const std::vector<torch::ScalarType>& dtypes) {
  torch::NoGradGuard no_grad;
  uint64_t seed = 100;
  for (const std::string model : {"swish_chain", "mish_mish"}) {
    for (const auto dtype : dtypes) {
      for (const auto& [out, in] : shapes) {
        for (const int64_t rows : row_counts) {
          const Problem p = make_problem(model, rows, out, in, dtype, device, ++seed);
          for (const Variant v : variants_of(dtype)) {
            const torch::Tensor got = run_variant(p, v);
            ASSERT_EQ(got.sizes(), (std::vector<int64_t>{rows, out}));
            ASSERT_EQ(got.scalar_type(), dtype);
            EXPECT_LE(bound_used(p, got, v), 1.0)
                << model << " " << c10::toString(dtype) << " " << variant_name(v) << " " << rows
                << "x" << in << " -> " << out << " on " << device;
          }
        }
      }
    }
  }
}

TEST(SkinnyLinear, CpuTwinWithinBoundsOfFloat64) {
  check_shapes(torch::kCPU, {1, 3, 17}, {{19, 37}, {8, 256}, {16, 0}}, {torch::kFloat32});
}

TEST(SkinnyLinear, LeadingDimensionsAndEmptyInputs) {
  torch::NoGradGuard no_grad;
  const Problem p = make_problem("mish_mish", 6, 10, 12, torch::kFloat32, torch::kCPU, 1);
  const torch::Tensor x3 = p.x.view({2, 3, 12});
  const torch::Tensor got = fused_linear_mish_mish(x3, p.w, c10::nullopt, p.bias);
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{2, 3, 10}));
  EXPECT_TRUE(torch::allclose(got.view({6, 10}), run_variant(p, Variant::kWeight)));
  const torch::Tensor none =
      fused_linear_mish_mish(torch::rand({0, 12}), p.w, c10::nullopt, p.bias);
  EXPECT_EQ(none.sizes(), (std::vector<int64_t>{0, 10}));
}

TEST(SkinnyLinear, RejectBadInputsWithClearMessages) {
  torch::NoGradGuard no_grad;
  const Problem p = make_problem("swish_chain", 2, 10, 12, torch::kFloat32, torch::kCPU, 2);
  const auto fails = [&](const std::function<void()>& call) {
    return message_of<c10::Error>(call, "(no error)");
  };
  EXPECT_NE(
      fails([&] {
        fused_linear_swish_chain(p.x, p.w.to(torch::kFloat16), c10::nullopt, p.bias, p.shift);
      }).find("expected a weight of dtype Float (the dtype of x) or bfloat16 parts, got Half"),
      std::string::npos);
  EXPECT_NE(fails([&] {
              fused_linear_swish_chain(p.x, p.w.t(), c10::nullopt, p.bias, p.shift);
            }).find("expected a weight of shape [out_features, 12]"),
            std::string::npos);
  const torch::Tensor hi = p.w.to(torch::kBFloat16);
  EXPECT_NE(fails([&] {
              fused_linear_swish_chain(p.x.to(torch::kBFloat16), hi, hi,
                                       p.bias.to(torch::kBFloat16), p.shift.to(torch::kBFloat16));
            }).find("w_lo is the lo part of a float32 model's weight"),
            std::string::npos);
  EXPECT_NE(fails([&] {
              fused_linear_swish_chain(p.x, hi, hi.narrow(0, 0, 5), p.bias, p.shift);
            }).find("expected w_lo like w"),
            std::string::npos);
  EXPECT_NE(
      fails([&] {
        fused_linear_swish_chain(p.x, p.w, c10::nullopt, p.bias.narrow(0, 0, 9), p.shift);
      }).find("expected bias of shape [10] (out_features, from the weight [10, 12]), got [9]"),
      std::string::npos);
}

TEST(SkinnyLinear, ModelChoosesTheKernel) {
  torch::NoGradGuard no_grad;
  auto model = make_model("swish_chain", 40, 24, 3);
  const torch::Tensor x = torch::rand({2, 40});
  EXPECT_EQ(model->gemm_kernel(), GemmKernel::kAuto);
  EXPECT_FALSE(model->runs_skinny(x));  // auto: GPUs only
  const torch::Tensor cublas = model->forward(x);
  model->set_gemm_kernel(GemmKernel::kSkinny);
  EXPECT_TRUE(model->runs_skinny(x));
  EXPECT_TRUE(model->runs_skinny(torch::rand({500, 40})));  // forced: any rows
  EXPECT_TRUE(torch::allclose(model->forward(x), cublas, 1e-5, 1e-5));
  model->set_gemm_kernel(GemmKernel::kCublas);
  EXPECT_FALSE(model->runs_skinny(x));
  EXPECT_GT(LinearEpilogueModel::default_skinny_max_rows(Precision::kIeee, torch::kFloat32), 0);
  for (const Precision precision : all_precisions()) {
    EXPECT_GE(LinearEpilogueModel::default_skinny_max_rows(precision, torch::kFloat32), 0);
  }
  model->set_skinny_max_rows(0);
  EXPECT_EQ(model->skinny_max_rows(), 0);
  EXPECT_NE(message_of<c10::Error>([&] { model->set_skinny_max_rows(-1); }).find(">= 0"),
            std::string::npos);
  for (const GemmKernel kernel : all_gemm_kernels()) {
    EXPECT_EQ(parse_gemm_kernel(gemm_kernel_name(kernel)), kernel);
  }
  EXPECT_FALSE(parse_gemm_kernel("cuBLAS").has_value());
}

TEST(SkinnyLinear, EveryPrecisionThroughTheModel) {
  // Forced onto the skinny kernel, each precision's forward stays as close to eager as its
  // cuBLAS forward: bf16x3 reads hi + lo, bf16 hi, ieee and tf32 W itself.
  torch::NoGradGuard no_grad;
  const std::vector<torch::Device> devices =
      torch::cuda::is_available() ? std::vector<torch::Device>{torch::kCPU, torch::kCUDA}
                                  : std::vector<torch::Device>{torch::kCPU};
  for (const auto device : devices) {
    for (const std::string name : {"swish_chain", "mish_mish"}) {
      auto model = make_model(name, 256, 96, 4);
      model->to(device);
      const torch::Tensor x = torch::rand({5, 256}).to(device);
      const torch::Tensor eager = model->forward_eager(x);
      for (const Precision precision : all_precisions()) {
        model->set_precision(precision);
        model->set_gemm_kernel(GemmKernel::kSkinny);
        const torch::Tensor skinny = model->forward(x);
        const double tolerance = precision == Precision::kBf16 ? 2e-2 : 1e-5;
        EXPECT_TRUE(torch::allclose(skinny, eager, tolerance, tolerance))
            << name << " " << precision_name(precision) << " on " << device;
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
  check_shapes(torch::kCUDA, {1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64},
               {{515, 1000}, {67, 1003}, {64, 4096}, {16, 0}},
               {torch::kFloat32, torch::kBFloat16, torch::kFloat16});
}

// Unaligned rows take the CUDA-core kernel, one element per load, with the same products (the
// bfloat16 parts' split of x included) as the aligned path's tensor cores or vector loads.
TEST_F(SkinnyLinearCuda, MisalignedWeightAndInput) {
  torch::NoGradGuard no_grad;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    Problem p = make_problem("mish_mish", 3, 70, 520, dtype, torch::kCUDA, 7);
    std::vector<torch::Tensor> want;
    for (const Variant v : variants_of(dtype)) want.push_back(run_variant(p, v));
    // The same values one element past a 16-byte boundary: contiguous, not aligned.
    const torch::Tensor w_store = torch::empty({p.w.numel() + 1}, p.w.options());
    const torch::Tensor w_shifted = w_store.narrow(0, 1, p.w.numel()).view(p.w.sizes());
    w_shifted.copy_(p.w);
    const torch::Tensor x_store = torch::empty({p.x.numel() + 1}, p.x.options());
    const torch::Tensor x_shifted = x_store.narrow(0, 1, p.x.numel()).view(p.x.sizes());
    x_shifted.copy_(p.x);
    p.w = w_shifted;
    p.x = x_shifted;
    const std::vector<Variant> variants = variants_of(dtype);
    for (size_t i = 0; i < variants.size(); ++i) {
      const torch::Tensor got = run_variant(p, variants[i]);
      EXPECT_LE(bound_used(p, got, variants[i]), 1.0)
          << c10::toString(dtype) << " " << variant_name(variants[i]);
      EXPECT_TRUE(torch::allclose(got.to(torch::kFloat32), want[i].to(torch::kFloat32), 1e-2, 1e-5))
          << c10::toString(dtype) << " " << variant_name(variants[i]);
    }
  }
}

// x's split on the tensor cores takes split_bf16's path for values the hardware's rounding would
// carry to infinity (finite results, as on the CPU) and for inf and NaN (non-finite rows).
TEST_F(SkinnyLinearCuda, SplitOfExtremeInputsMatchesTheCpuTwin) {
  torch::NoGradGuard no_grad;
  for (const int64_t rows : {4, 24, 40}) {  // x split in the kernel, and beforehand (from 9 rows)
    Problem p = make_problem("mish_mish", rows, 64, 256, torch::kFloat32, torch::kCPU, 9);
    p.x = p.x * 1e-3;
    p.x[0][5] = 3.39e38f;  // rounds up to bfloat16's infinity
    p.x[1][7] = -3.39e38f;
    p.x[2][9] = std::numeric_limits<float>::infinity();
    p.x[3][11] = std::numeric_limits<float>::quiet_NaN();
    const auto [hi, lo] = split_bf16(p.w);
    for (const Variant v : {Variant::kHiLo, Variant::kHi}) {
      const c10::optional<torch::Tensor> w_lo =
          v == Variant::kHiLo ? c10::optional<torch::Tensor>(lo) : c10::nullopt;
      const torch::Tensor want = run_op(p, hi, w_lo);
      const torch::Tensor got =
          fused_linear_mish_mish(p.x.cuda(), hi.cuda(),
                                 w_lo ? c10::optional<torch::Tensor>(w_lo->cuda()) : c10::nullopt,
                                 p.bias.cuda())
              .cpu();
      const torch::Tensor finite_rows = got.narrow(0, 0, 2);
      EXPECT_TRUE(torch::isfinite(finite_rows).all().item<bool>()) << variant_name(v);
      EXPECT_TRUE(torch::allclose(finite_rows, want.narrow(0, 0, 2), 1e-4, 1e-6))
          << variant_name(v);
      EXPECT_FALSE(torch::isfinite(got.narrow(0, 2, 2)).any().item<bool>()) << variant_name(v);
      EXPECT_FALSE(torch::isfinite(want.narrow(0, 2, 2)).any().item<bool>()) << variant_name(v);
      EXPECT_TRUE(
          torch::allclose(got.narrow(0, 4, rows - 4), want.narrow(0, 4, rows - 4), 1e-4, 1e-6))
          << variant_name(v);
    }
  }
}

TEST_F(SkinnyLinearCuda, BitwiseRepeatable) {
  torch::NoGradGuard no_grad;
  for (const auto& [rows, out, in] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 64, 8192}, {8, 8192, 1024}, {16, 300, 3000}, {32, 300, 3000}, {40, 16384, 256}}) {
    const Problem p = make_problem("swish_chain", rows, out, in, torch::kFloat32, torch::kCUDA, 8);
    for (const Variant v : variants_of(torch::kFloat32)) {
      const torch::Tensor first = run_variant(p, v);
      for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(torch::equal(run_variant(p, v), first)) << rows << "x" << in << " -> " << out;
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
  for (const auto& [rows, out, in] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {9, 515, 1000}, {16, 8192, 1024}, {17, 515, 1000}, {33, 515, 1000}, {64, 300, 3000}}) {
    const Problem p = make_problem("swish_chain", rows, out, in, torch::kFloat32, torch::kCUDA, 21);
    const auto [hi, lo] = split_bf16(p.w);
    for (const Variant v : {Variant::kWeight, Variant::kHiLo}) {
      SkinnyLinearArgs args;
      args.kind = EpilogueKind::kSwishChain;
      args.type = ElementType::kFloat32;
      args.weight = v == Variant::kWeight ? SkinnyWeight::kAsInput : SkinnyWeight::kBf16HiLo;
      args.x = p.x.data_ptr();
      args.w = v == Variant::kWeight ? p.w.data_ptr() : hi.data_ptr();
      args.w_lo = v == Variant::kWeight ? nullptr : lo.data_ptr();
      args.bias = p.bias.data_ptr();
      args.shift = p.shift.data_ptr();
      args.rows = rows;
      args.out_features = out;
      args.in_features = in;
      auto run = [&](bool tile_copies) {
        args.tile_copies = tile_copies;
        const torch::Tensor y = torch::empty({args.rows, args.out_features}, p.x.options());
        args.out = y.data_ptr();
        int64_t floats = 0;
        EXPECT_EQ(plan_skinny_linear(args, floats), cudaSuccess);
        const torch::Tensor workspace = torch::empty({std::max<int64_t>(floats, 1)}, p.x.options());
        EXPECT_EQ(launch_skinny_linear(args, workspace.data_ptr<float>(),
                                       at::cuda::getCurrentCUDAStream()),
                  cudaSuccess);
        return y;
      };
      const torch::Tensor tile_copies = run(true);
      EXPECT_TRUE(torch::equal(tile_copies, run(false)))
          << variant_name(v) << " " << rows << "x" << in << " -> " << out;
      EXPECT_TRUE(torch::equal(tile_copies, run_variant(p, v)))  // the op: tile copies too
          << variant_name(v) << " " << rows << "x" << in << " -> " << out;
      EXPECT_LE(bound_used(p, tile_copies, v), 1.0);
    }
  }
}

TEST_F(SkinnyLinearCuda, SameResultFromACudaGraph) {
  // Captured on a side stream (the kernels must run on the current stream to be captured) and
  // replayed: bitwise the launch's result, split k (64 outputs) and not (2048) alike.
  torch::NoGradGuard no_grad;
  for (const int64_t out : {64, 2048}) {
    for (const Precision precision : all_precisions()) {
      auto model = make_model("mish_mish", 4096, out, 5);
      model->to(torch::kCUDA);
      model->set_precision(precision);
      model->set_gemm_kernel(GemmKernel::kSkinny);
      for (const int64_t rows : {8, 32, 64}) {
        const torch::Tensor x = torch::rand({rows, 4096}, torch::kCUDA);
        const torch::Tensor want = model->forward(x);
        const torch::Tensor got =
            testing_support::replayed_from_cuda_graph([&] { return model->forward(x); });
        EXPECT_TRUE(torch::equal(got, want))
            << rows << "x4096 -> " << out << " " << precision_name(precision);
      }
    }
  }
}
#endif

TEST_F(SkinnyLinearCuda, AutoPicksSkinnyForFewRowsOnly) {
  torch::NoGradGuard no_grad;
  auto model = make_model("swish_chain", 512, 256, 6);
  model->to(torch::kCUDA);
  const int64_t most = model->skinny_max_rows();
  ASSERT_GT(most, 0);
  EXPECT_TRUE(model->runs_skinny(torch::rand({most, 512}, torch::kCUDA)));
  EXPECT_FALSE(model->runs_skinny(torch::rand({most + 1, 512}, torch::kCUDA)));
  // bf16x3 runs ieee's skinny kernel up to kBf16x3IeeeSkinnyMaxRows rows (as fast and more
  // accurate there), its own skinny kernel above that up to its limit, then cuBLAS.
  model->set_precision(Precision::kBf16x3);
  const int64_t ieee_most = std::min(LinearEpilogueModel::kBf16x3IeeeSkinnyMaxRows,
                                     model->skinny_max_rows(Precision::kIeee));
  const int64_t bf16x3_most = model->skinny_max_rows(Precision::kBf16x3);
  ASSERT_GT(bf16x3_most, ieee_most);
  for (const int64_t rows : {int64_t{1}, ieee_most, ieee_most + 1, bf16x3_most, bf16x3_most + 1}) {
    const auto plan = model->gemm_plan(torch::rand({rows, 512}, torch::kCUDA));
    EXPECT_EQ(plan.precision, rows <= ieee_most ? Precision::kIeee : Precision::kBf16x3) << rows;
    EXPECT_EQ(plan.skinny, rows <= bf16x3_most) << rows;
  }
  model->set_precision(Precision::kIeee);
  // An input-major weight is not read by the skinny kernel in auto (it would be copied).
  model->store_weight_in(WeightLayout::kInputMajor);
  EXPECT_FALSE(model->runs_skinny(torch::rand({1, 512}, torch::kCUDA)));
  model->set_precision(Precision::kBf16x3);  // reads the split parts, always output-major
  EXPECT_TRUE(model->runs_skinny(torch::rand({1, 512}, torch::kCUDA)));
}

}  // namespace
}  // namespace fusedlinear
