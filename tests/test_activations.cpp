// The activation functors (kernels/activations.h) against float64 evaluations of PyTorch's
// definitions, on a dense grid and at the extremes, including NaN and +-Inf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/math/functors_vec.h"
#include "kernels/math/chains.h"

namespace fusedlinear {
namespace {

// float64 references, written from the PyTorch docs' formulas.
double swish_ref(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double hardtanh_ref(double x) { return std::isnan(x) ? x : std::min(1.0, std::max(-1.0, x)); }
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
double swish_chain_ref(double x) { return hardtanh_ref(gelu_ref(std::tanh(swish_ref(x)))); }
double mish_mish_ref(double x) { return mish_ref(mish_ref(x)); }

// Dense grid over [-30, 30] plus the extremes: zeros, tiny and huge values, the branch points.
std::vector<float> inputs() {
  std::vector<float> xs;
  for (int i = -30000; i <= 30000; ++i) xs.push_back(float(i) * 1e-3f);
  const float extremes[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 1e-7f, -1e-7f, 20.0f,   -20.0f,
                            88.0f, -88.0f, 89.0f,  -89.0f,  1e4f,  -1e4f,  3.4e38f, -3.4e38f};
  xs.insert(xs.end(), std::begin(extremes), std::end(extremes));
  return xs;
}

// Within 1e-6 of the float64 value, relative to max(1, |value|): a few float32 roundings,
// while a wrong formula or a lost branch is off by far more.
template <class F>
void expect_close(F f, double (*ref)(double), const char* name) {
  int failures = 0;
  for (float x : inputs()) {
    const double want = ref(double(x));
    const float got = f(x);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << name << "(" << x << ") = " << got << ", want NaN";
      continue;
    }
    const double tol = 1e-6 * std::max(1.0, std::fabs(want));
    if (!(std::fabs(double(got) - want) <= tol) && ++failures <= 10) {
      ADD_FAILURE() << name << "(" << x << ") = " << got << ", float64 gives " << want;
    }
  }
  EXPECT_EQ(failures, 0) << name;
}

// On the host: exp, division and TanhHalfPrecision's tanh take their host branches (libm, exact
// division) here. Their device forms (__expf, rcp.approx, tanh.approx) are held to float64 by
// FusedOpsCuda.AccurateAgainstFloat64OnDenseGrid, which runs every chain in the kernels.
TEST(Activations, MatchFloat64OnGridAndExtremes) {
  expect_close(act::Swish{}, swish_ref, "swish");
  expect_close(
      act::Tanh{}, [](double x) { return std::tanh(x); }, "tanh");
  expect_close(act::literal::GeluErf{}, gelu_ref, "gelu");
  expect_close(act::Hardtanh{}, hardtanh_ref, "hardtanh");
  expect_close(act::Mish{}, mish_ref, "mish");
  expect_close(SwishChainActivations{}, swish_chain_ref, "swish_chain");
  expect_close(SwishChainActivationsHalf{}, swish_chain_ref, "swish_chain, 16-bit results");
  expect_close(MishMishActivations{}, mish_mish_ref, "mish_mish");
  expect_close(MishMishActivationsHalf{}, mish_mish_ref, "mish_mish, 16-bit results");
  expect_close(act::MishHalfPrecision{}, mish_ref, "mish, 16-bit results");
  // PyTorch's own formulas, the baseline of the kernel benchmark.
  expect_close(act::literal::Swish{}, swish_ref, "literal swish");
  expect_close(act::literal::Mish{}, mish_ref, "literal mish");
  expect_close(literal::SwishChainActivations{}, swish_chain_ref, "literal swish_chain");
  expect_close(literal::MishMishActivations{}, mish_mish_ref, "literal mish_mish");
}

// The rewrites give the same float as PyTorch's formulas to within a few ulp everywhere
// (on the host, where both use libm): every 97th float of [-100, 100], both signs.
TEST(Activations, RewritesAgreeWithPyTorchFormulas) {
  const float top = 100.0f;
  uint32_t top_bits;
  std::memcpy(&top_bits, &top, sizeof top);
  for (uint32_t bits = 0; bits <= top_bits; bits += 97) {
    float magnitude;
    std::memcpy(&magnitude, &bits, sizeof magnitude);
    for (float x : {magnitude, -magnitude}) {
      const float tol = 4e-7f * std::max(1.0f, std::fabs(x));
      ASSERT_NEAR(act::Mish{}(x), act::literal::Mish{}(x), tol) << "mish(" << x << ")";
      ASSERT_NEAR(act::Swish{}(x), act::literal::Swish{}(x), tol) << "swish(" << x << ")";
    }
  }
}

TEST(Activations, NanAndInfinityBehaveAsPyTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Values PyTorch 1.13 and 2.x give for these inputs (torch.sigmoid(x) * x, F.mish, ...).
  EXPECT_EQ(act::Swish{}(inf), inf);
  EXPECT_TRUE(std::isnan(act::Swish{}(-inf)));  // sigmoid(-inf) * -inf = 0 * -inf
  EXPECT_EQ(act::Mish{}(inf), inf);
  EXPECT_TRUE(std::isnan(act::Mish{}(-inf)));  // -inf * tanh(log1p(0)) = -inf * 0
  EXPECT_EQ(act::Hardtanh{}(inf), 1.0f);
  EXPECT_EQ(act::Hardtanh{}(-inf), -1.0f);
  EXPECT_EQ(act::Tanh{}(-inf), -1.0f);
  EXPECT_TRUE(std::isnan(act::literal::GeluErf{}(-inf)));  // 0.5 * -inf * (1 + erf(-inf))
  EXPECT_EQ(act::literal::GeluErf{}(inf), inf);
  for (float v : {act::Swish{}(nan), act::Tanh{}(nan), act::literal::GeluErf{}(nan),
                  act::GeluErfOnUnitInterval{}(nan), act::GeluErfOnUnitIntervalHalfPrecision{}(nan),
                  act::Hardtanh{}(nan), act::Mish{}(nan), SwishChainActivations{}(nan),
                  SwishChainActivationsHalf{}(nan), MishMishActivations{}(nan),
                  MishMishActivationsHalf{}(nan)}) {
    EXPECT_TRUE(std::isnan(v));
  }
  // The chains end where the composition says: swish_chain(+inf) = gelu(tanh(inf)).
  EXPECT_FLOAT_EQ(SwishChainActivations{}(inf), float(gelu_ref(1.0)));
  EXPECT_TRUE(std::signbit(SwishChainActivations{}(-0.0f)));  // -0 all the way, as eager
  EXPECT_EQ(MishMishActivations{}(inf), inf);
  EXPECT_EQ(MishMishActivationsHalf{}(inf), inf);
  EXPECT_TRUE(std::isnan(act::MishHalfPrecision{}(-inf)));
}

// gelu(x) on a grid of [-1, 1] with step 1e-6 (the GELU polynomials' domain): the error against
// float64 within max_abs and within max_rel relative.
template <class Gelu>
void expect_gelu_on_unit_interval(Gelu gelu, const char* name, double max_abs, double max_rel) {
  int failures = 0;
  for (int i = -1000000; i <= 1000000; ++i) {
    const float x = float(i) * 1e-6f;
    const double want = gelu_ref(double(x));
    const double err = std::fabs(double(gelu(x)) - want);
    if (!(err <= max_abs && err <= max_rel * std::fabs(want) + 1e-38) && ++failures <= 10) {
      ADD_FAILURE() << name << "(" << x << ") is off by " << err << " (float64 gives " << want
                    << ")";
    }
  }
  EXPECT_EQ(failures, 0) << name;
  EXPECT_TRUE(std::signbit(gelu(-0.0f))) << name;
  EXPECT_EQ(gelu(0.0f), 0.0f) << name;
}

// The GELU polynomial on its domain: within 2^-23 (two ulp at the top of the range; a wrong
// coefficient is off by far more) and 1e-6 relative; outside the domain it is not used (the
// chains compose it after tanh only).
TEST(Activations, GeluPolynomialOnTheUnitInterval) {
  expect_gelu_on_unit_interval(act::GeluErfOnUnitInterval{}, "gelu polynomial",
                               std::ldexp(1.0, -23), 1e-6);
  for (float x : {1.0f, -1.0f, 1e-30f, -1e-30f, 0.5f}) {
    EXPECT_NEAR(act::GeluErfOnUnitInterval{}(x), gelu_ref(x), 1e-7 * std::max(1.0f, x)) << x;
  }
}

// The 16-bit GELU polynomial (degree 3): within 5e-6 relative of float64 (its fit is 4.4e-6;
// float16's last place is 2^-10 relative, so this is under 0.02 of it).
TEST(Activations, HalfPrecisionGeluPolynomialOnTheUnitInterval) {
  expect_gelu_on_unit_interval(act::GeluErfOnUnitIntervalHalfPrecision{}, "16-bit gelu polynomial",
                               1.0, 5e-6);
}

// swish_chain's functor chains leave the model's last Hardtanh(-1, 1) out because GELU maps
// tanh's range into [-0.17, 0.85]. Checked twice: both GELU polynomials stay inside [-0.17,
// 0.85] on a grid of [-1, 1] with step 1e-6; and with Hardtanh appended, the chains give the
// same bits (NaN included) for every 997th float of the whole range.
TEST(Activations, HardtanhAfterTheChainsChangesNothing) {
  for (int i = -1000000; i <= 1000000; ++i) {
    const float x = float(i) * 1e-6f;
    for (float g :
         {act::GeluErfOnUnitInterval{}(x), act::GeluErfOnUnitIntervalHalfPrecision{}(x)}) {
      ASSERT_TRUE(g >= -0.17f && g <= 0.85f) << "gelu polynomial(" << x << ") = " << g;
    }
  }
  using WithHardtanh = act::Chain<SwishChainActivations, act::Hardtanh>;
  using HalfWithHardtanh = act::Chain<SwishChainActivationsHalf, act::Hardtanh>;
  const auto same_bits = [](float a, float b) {
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): the bits are what is compared
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
  };
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 997) {
    const uint32_t b32 = uint32_t(bits);
    float x;
    std::memcpy(&x, &b32, sizeof x);
    ASSERT_TRUE(same_bits(SwishChainActivations{}(x), WithHardtanh{}(x))) << x;
    ASSERT_TRUE(same_bits(SwishChainActivationsHalf{}(x), HalfWithHardtanh{}(x))) << x;
  }
}

// The CPU's vector tanh (tanh_from_exp) on a grid of [-12, 12] with step 1e-5, over both of its
// branches and the switch at |x| = 0.625: within 2 ulp of float64 (measured 1.7 with Sleef's exp;
// compiled here without SIMD flags, at::vec evaluates the same formula lane by lane with libm's
// exp). Then -0, +-inf, NaN and huge values.
TEST(Activations, VectorTanhWithinTwoUlpOfFloat64) {
  using Vec = act::FloatVec;
  constexpr int kLanes = Vec::size();
  double worst = 0;
  for (int i = -1200000; i <= 1200000; i += kLanes) {
    float x[kLanes], t[kLanes];
    for (int k = 0; k < kLanes; ++k) x[k] = float(i + k) * 1e-5f;
    act::tanh_from_exp(Vec::loadu(x)).store(t);
    for (int k = 0; k < kLanes; ++k) {
      const double want = std::tanh(double(x[k]));
      const double ulp = std::nextafter(float(std::fabs(want)), 2.0f) - float(std::fabs(want));
      worst = std::max(worst, std::fabs(t[k] - want) / (want == 0 ? 1e-45 : ulp));
    }
  }
  EXPECT_LE(worst, 2.0) << "worst error in ulp";
  const float inf = std::numeric_limits<float>::infinity();
  float x[kLanes] = {-0.0f, 0.0f,  inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                     3e38f, -3e38f};
  float t[kLanes];
  act::tanh_from_exp(Vec::loadu(x)).store(t);
  EXPECT_TRUE(std::signbit(t[0]) && t[0] == 0.0f);
  EXPECT_TRUE(!std::signbit(t[1]) && t[1] == 0.0f);
  EXPECT_EQ(t[2], 1.0f);
  EXPECT_EQ(t[3], -1.0f);
  EXPECT_TRUE(std::isnan(t[4]));
  EXPECT_EQ(t[5], 1.0f);
  EXPECT_EQ(t[6], -1.0f);
}

TEST(Activations, SignedZeroAndTinyInputs) {
  EXPECT_EQ(act::Mish{}(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(act::Mish{}(-0.0f)));
  EXPECT_TRUE(std::signbit(act::Swish{}(-0.0f)));
  // mish(x) ~ x * tanh(log 2) for tiny x: no underflow to zero, no loss of the sign.
  EXPECT_NEAR(act::Mish{}(1e-30f) / 1e-30f, std::tanh(std::log(2.0)), 1e-6);
  EXPECT_NEAR(act::Mish{}(-1e-30f) / -1e-30f, std::tanh(std::log(2.0)), 1e-6);
}

TEST(Activations, ChainAppliesLeftToRight) {
  // Chain<Mish, Tanh> is tanh(mish(x)), not mish(tanh(x)).
  const float x = 1.7f;
  EXPECT_FLOAT_EQ((act::Chain<act::Mish, act::Tanh>{}(x)), std::tanh(act::Mish{}(x)));
  EXPECT_FLOAT_EQ(act::Chain<>{}(x), x);
}

}  // namespace
}  // namespace fusedlinear
