// Non-finite values in the split modes (bf16x3, bf16x6; kernels/math/bf16_split.h says why the
// parts alone cannot carry them): +inf, -inf and NaN in x, in W, in both at one k, inf against a
// zero, +inf and -inf in one row, through every kernel that forms the split products: cuBLAS's
// products (linear_bf16x3, linear_bf16x6), the small-batch kernels (linear_epilogue, each variant
// its rows and widths pick), the Hopper GEMM (gemm_epilogue), and their CPU twins. Each output
// must have eager float32's class (NaN where eager gives NaN, inf of eager's sign), and every
// finite output the bits the same kernel gives with the non-finite values replaced by finite ones.
// The CUDA tests skip without a GPU (the Hopper GEMM's without compute capability 9.0).
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops/ops.h"
#include "modules/linear_chain.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace fusedlinear {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  std::string name;
  torch::Tensor x, w;  // [rows, in] and [out, in] float32, on the CPU
};

// Random x (positive, no zeros) and W (both signs, no zeros), then each case's special values.
// in >= 16, out >= 5.
std::vector<Case> cases(int64_t rows, int64_t out, int64_t in) {
  torch::manual_seed(31);
  const torch::Tensor x = torch::rand({rows, in}) + 0.25;
  const torch::Tensor w = (torch::rand({out, in}) * 2 - 1) / std::sqrt(double(in));
  const int64_t last = rows - 1, middle = rows / 2;
  std::vector<Case> all;
  const auto add = [&](const std::string& name,
                       const std::function<void(torch::Tensor&, torch::Tensor&)>& place) {
    Case c{name, x.clone(), w.clone()};
    place(c.x, c.w);
    all.push_back(c);
  };
  add("+inf in x", [&](torch::Tensor& a, torch::Tensor&) { a[0][3] = kInf; });
  add("-inf in x", [&](torch::Tensor& a, torch::Tensor&) { a[last][5] = -kInf; });
  add("NaN in x", [&](torch::Tensor& a, torch::Tensor&) { a[middle][7] = kNaN; });
  add("+inf in W", [&](torch::Tensor&, torch::Tensor& b) { b[1][4] = kInf; });
  add("-inf in W", [&](torch::Tensor&, torch::Tensor& b) { b[2][6] = -kInf; });
  add("NaN in W", [&](torch::Tensor&, torch::Tensor& b) { b[3][8] = kNaN; });
  add("inf in x and W at one k", [&](torch::Tensor& a, torch::Tensor& b) {
    a[0][9] = kInf;
    b[4][9] = -kInf;
  });
  add("inf in x against a zero weight", [&](torch::Tensor& a, torch::Tensor& b) {
    a[0][10] = -kInf;
    b[0][10] = 0.0f;
  });
  add("inf in W against a zero input", [&](torch::Tensor& a, torch::Tensor& b) {
    b[1][11] = kInf;
    a[last][11] = 0.0f;
  });
  add("+inf and -inf in one row", [&](torch::Tensor& a, torch::Tensor& b) {
    a[0][12] = kInf;
    a[0][13] = -kInf;
    b.select(1, 12).abs_();  // both terms' weights positive: inf - inf in every output of row 0
    b.select(1, 13).abs_();
  });
  return all;
}

// Eager float32's sums, each product formed on its own (inf * 0 = NaN, as IEEE defines it).
torch::Tensor eager_sums(const torch::Tensor& x, const torch::Tensor& w) {
  return (x.unsqueeze(1) * w.unsqueeze(0)).sum(-1);
}

// x W^T in a split mode by one kernel family, from W's parts (the ops' arguments).
using SplitLinear = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& w)>;

SplitLinear cublas_products(Precision precision) {
  return [precision](const torch::Tensor& x, const torch::Tensor& w) {
    if (precision == Precision::kBf16x6) {
      const auto [hi, mid, lo] = split_bf16_three(w);
      return linear_bf16x6(x, hi, mid, lo);
    }
    const auto [hi, lo] = split_bf16(w);
    return linear_bf16x3(x, hi, lo);
  };
}

// The whole-forward ops with the empty chain and no bias: the sums themselves.
SplitLinear whole_forward(decltype(&fused_linear_epilogue) op, Precision precision) {
  return [op, precision](const torch::Tensor& x, const torch::Tensor& w) {
    if (precision == Precision::kBf16x6) {
      const auto [hi, mid, lo] = split_bf16_three(w);
      return op(x, hi, mid, c10::nullopt, {}, "", Precision::kBf16x6, lo);
    }
    const auto [hi, lo] = split_bf16(w);
    return op(x, hi, lo, c10::nullopt, {}, "", Precision::kBf16x3, c10::nullopt);
  };
}

// Every case at rows x in -> out through `linear` on `device`: the classes of eager's, and the
// finite outputs' bits as with the special values replaced by finite ones.
void expect_eager_classes(const std::string& what, const SplitLinear& linear, torch::Device device,
                          int64_t rows, int64_t out, int64_t in) {
  torch::NoGradGuard no_grad;
  for (const Case& c : cases(rows, out, in)) {
    const std::string where = what + ", " + c.name + ", " + std::to_string(rows) + " x " +
                              std::to_string(in) + " -> " + std::to_string(out);
    const torch::Tensor want = eager_sums(c.x, c.w);
    const torch::Tensor got = linear(c.x.to(device), c.w.to(device)).cpu();
    ASSERT_EQ(got.sizes(), want.sizes()) << where;
    EXPECT_TRUE(torch::equal(got.isnan(), want.isnan())) << where << "\ngot\n" << got;
    EXPECT_TRUE(torch::equal(got.isposinf(), want.isposinf())) << where << "\ngot\n" << got;
    EXPECT_TRUE(torch::equal(got.isneginf(), want.isneginf())) << where << "\ngot\n" << got;
    // The case has a non-finite output at all (else it tests nothing).
    EXPECT_FALSE(want.isfinite().all().item<bool>()) << where;
    const torch::Tensor finite_x = torch::nan_to_num(c.x, 0.5, 0.5, -0.5);
    const torch::Tensor finite_w = torch::nan_to_num(c.w, 0.5, 0.5, -0.5);
    const torch::Tensor clean = linear(finite_x.to(device), finite_w.to(device)).cpu();
    const torch::Tensor finite = want.isfinite();
    EXPECT_TRUE(torch::equal(got.index({finite}).view(torch::kInt32),
                             clean.index({finite}).view(torch::kInt32)))
        << where << ": finite outputs changed";
  }
}

const Precision kSplitModes[] = {Precision::kBf16x3, Precision::kBf16x6};

TEST(NonFiniteCpu, CublasProductsTwin) {
  for (const Precision precision : kSplitModes) {
    for (const int64_t rows : {1, 8, 256}) {
      expect_eager_classes(std::string(precision_name(precision)) + " products",
                           cublas_products(precision), torch::kCPU, rows, 24, 40);
    }
  }
}

TEST(NonFiniteCpu, WholeForwardTwins) {
  for (const Precision precision : kSplitModes) {
    for (const auto op : {&fused_linear_epilogue, &fused_gemm_epilogue}) {
      if (precision == Precision::kBf16x6 && op == &fused_linear_epilogue) continue;  // Hopper's
      for (const int64_t rows : {1, 8, 32}) {
        expect_eager_classes(std::string(precision_name(precision)) + " whole forward",
                             whole_forward(op, precision), torch::kCPU, rows, 24, 40);
      }
    }
  }
}

// The model in each split mode (a Linear and a chain that keeps every class: + a parameter), each
// case's weight and input, against its own eager forward.
TEST(NonFiniteCpu, ModelForwardKeepsEagerClasses) {
  torch::NoGradGuard no_grad;
  auto model = make_model(runtime_model("add(shift)"), 40, 24, 5);
  for (const Case& c : cases(8, 24, 40)) {
    model->linear()->weight.copy_(c.w);
    const torch::Tensor want = model->forward_eager(c.x);
    for (const Precision precision : kSplitModes) {
      model->set_precision(precision);
      model->set_bf16x3_min_rows(1);
      const torch::Tensor got = model->forward(c.x);
      EXPECT_TRUE(torch::equal(got.isnan(), want.isnan())) << c.name;
      EXPECT_TRUE(torch::equal(got.isposinf(), want.isposinf())) << c.name;
      EXPECT_TRUE(torch::equal(got.isneginf(), want.isneginf())) << c.name;
    }
    model->set_precision(Precision::kIeee);
  }
}

class NonFiniteCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
  }
};

// 256 and 3 rows; k a multiple of 8 and not; W as the split gives it (output-major).
TEST_F(NonFiniteCuda, CublasProducts) {
  for (const Precision precision : kSplitModes) {
    for (const int64_t rows : {3, 256}) {
      for (const int64_t in : {40, 37}) {
        expect_eager_classes(std::string(precision_name(precision)) + " cuBLAS products",
                             cublas_products(precision), torch::kCUDA, rows, 24, in);
      }
    }
  }
}

// bf16x3's small-batch kernels (bf16x6 has none): the tensor-core kernel (1, 8 rows), the staged
// kernel (16, 32, 64 rows), the CUDA-core kernel (k not a multiple of 8), and k split over blocks
// with the reduce kernel (a long k and few outputs).
TEST_F(NonFiniteCuda, SmallBatchKernels) {
  const SplitLinear linear = whole_forward(&fused_linear_epilogue, Precision::kBf16x3);
  for (const int64_t rows : {1, 8, 16, 32, 64}) {
    for (const int64_t in : {40, 37, 4096}) {
      expect_eager_classes("bf16x3 small-batch kernels", linear, torch::kCUDA, rows, 24, in);
    }
  }
}

TEST_F(NonFiniteCuda, HopperGemm) {
#ifdef FUSEDLINEAR_WITH_CUDA
  const cudaDeviceProp* props = at::cuda::getCurrentDeviceProperties();
  if (props->major != 9 || props->minor != 0) {
    GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0, this GPU has " << props->major
                 << "." << props->minor;
  }
#endif
  for (const Precision precision : kSplitModes) {
    for (const int64_t rows : {8, 256}) {
      expect_eager_classes(std::string(precision_name(precision)) + " Hopper GEMM",
                           whole_forward(&fused_gemm_epilogue, precision), torch::kCUDA, rows, 24,
                           40);
    }
  }
}

}  // namespace
}  // namespace fusedlinear
