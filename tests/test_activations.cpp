// The activation functors (kernels/math/functors.h) on the host, against their own float64 forms
// (each written from PyTorch's documented formula) and against libtorch's eager ops: every op of
// the vocabulary, run by the interpreter (kernels/math/program.h) on floats and on SIMD vectors,
// and every library declaration's compiled chain (kernels/math/reference_models.h), over a dense
// grid with +-0, +-inf, NaN, subnormals and the ops' branch points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/math/primitives_vec.h"
#include "kernels/math/reference_models.h"
#include "kernels/ops/chain_spec.h"

namespace fusedlinear {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// A dense grid over [-30, 30] and the extremes: zeros, subnormals, tiny and huge values, and the
// points where the ops change formula (0, +-3, 6, 9.5, 20, the overflow of exp near 88), each with
// its float neighbours.
std::vector<float> inputs() {
  std::vector<float> xs;
  for (int i = -30000; i <= 30000; ++i) xs.push_back(float(i) * 1e-3f);
  const float points[] = {0.0f,   -0.0f,  1e-30f, -1e-30f, 1e-40f, -1e-40f, 1.4e-45f, -1.4e-45f,
                          1e-7f,  -1e-7f, 1.0f,   -1.0f,   3.0f,   -3.0f,   6.0f,     -6.0f,
                          9.5f,   -9.5f,  10.0f,  20.0f,   -20.0f, 88.0f,   -88.0f,   89.0f,
                          -89.0f, 1e4f,   -1e4f,  1e30f,   -1e30f, kInf,    -kInf,    kNan};
  for (float p : points) {
    xs.push_back(p);
    if (std::isfinite(p) && p != 0.0f) {
      xs.push_back(std::nextafter(p, kInf));
      xs.push_back(std::nextafter(p, -kInf));
    }
  }
  return xs;
}

// Within 1e-6 of the float64 value, relative to max(1, |value|): a few float32 roundings, while a
// wrong formula or a lost branch is off by far more; the forms for 16-bit results within 5e-6
// (the 16-bit GELU polynomial's fit: under 0.02 of float16's last place). NaN exactly where
// float64 has NaN, and infinities where it has them or has a value that rounds to one in float
// (square(1e30)).
constexpr double kFloat32Bound = 1e-6, kHalfBound = 5e-6;
constexpr double kRoundsToInf = 0x1.ffffffp127;  // float's largest value and half its last place
bool close_to(float got, double want, double bound = kFloat32Bound) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want) || std::fabs(want) >= kRoundsToInf) {
    return std::isinf(got) && std::signbit(got) == std::signbit(want);
  }
  return std::fabs(double(got) - want) <= bound * std::max(1.0, std::fabs(want));
}

// Ops with their defaults and with other arguments, and what a parameter term takes here.
const char* const kSpecs[] = {"relu",
                              "relu6",
                              "leaky_relu",
                              "leaky_relu(0.2)",
                              "elu",
                              "elu(0.5)",
                              "selu",
                              "celu",
                              "celu(2)",
                              "gelu",
                              "gelu(tanh)",
                              "silu",
                              "swish",
                              "swish(1.702)",
                              "swish(-0.5)",
                              "swish(0)",
                              "mish",
                              "sigmoid",
                              "tanh",
                              "hardtanh",
                              "hardtanh(-2,3)",
                              "clamp(-1,2)",
                              "clamp(0,inf)",
                              "hardsigmoid",
                              "hardswish",
                              "softplus",
                              "softplus(2,10)",
                              "softsign",
                              "tanhshrink",
                              "logsigmoid",
                              "square",
                              "add(1.5)",
                              "sub(0.25)",
                              "mul(-3)",
                              "div(3)",
                              "add(p)",
                              "sub(p)",
                              "mul(p)",
                              "div(p)",
                              "tanh,gelu",
                              "sigmoid,gelu",
                              "softsign,gelu",
                              "hardsigmoid,gelu",
                              "tanh,hardtanh",
                              "tanh,gelu,clamp(-2,2)"};
constexpr float kTerm = 1.75f;

// The interpreter's result for `chain` on one float, at precision P.
template <act::ResultPrecision P>
float run_program(const act::Program& program, float x) {
  float v[1] = {x};
  float t[act::kMaxColumnTerms][1] = {{kTerm}, {kTerm}, {kTerm}, {kTerm}};
  act::apply_chain(act::ProgramChain<P>{program}, v, t);
  return v[0];
}

double reference_of(const ParsedChain& chain, double x) {
  for (const ChainOp& op : chain.ops) x = op.op->reference(op.args, x, kTerm);
  return x;
}

TEST(Activations, EveryOpMatchesItsFloat64FormOnTheGrid) {
  const std::vector<float> xs = inputs();
  for (const char* spec : kSpecs) {
    const ParsedChain chain = parse_chain(spec);
    const act::Program program = program_of(chain);
    int failures = 0;
    for (float x : xs) {
      const double want = reference_of(chain, double(x));
      const float full = run_program<act::ResultPrecision::kFloat32>(program, x);
      const float half = run_program<act::ResultPrecision::kHalf>(program, x);
      if (!(close_to(full, want) && close_to(half, want, kHalfBound)) && ++failures <= 5) {
        ADD_FAILURE() << spec << "(" << x << ") = " << full << " (for 16-bit results " << half
                      << "), float64 gives " << want;
      }
    }
    EXPECT_EQ(failures, 0) << spec;
  }
}

// The same on SIMD vectors (here at::vec's lanes one by one, as built without SIMD flags: the
// AVX2 and AVX-512 loops run the same code through the ops, tests/test_fused_ops.cpp).
TEST(Activations, EveryOpOnVectorsAsOnFloats) {
  using Vec = act::FloatVec;
  constexpr int kLanes = Vec::size();
  std::vector<float> xs = inputs();
  while (xs.size() % kLanes) xs.push_back(0.5f);
  for (const char* spec : kSpecs) {
    const ParsedChain chain = parse_chain(spec);
    const act::Program program = program_of(chain);
    int failures = 0;
    for (size_t i = 0; i < xs.size(); i += kLanes) {
      Vec v[1] = {Vec::loadu(&xs[i])};
      Vec t[act::kMaxColumnTerms][1] = {{Vec(kTerm)}, {Vec(kTerm)}, {Vec(kTerm)}, {Vec(kTerm)}};
      act::apply_chain(act::ProgramChain<act::ResultPrecision::kFloat32>{program}, v, t);
      float got[kLanes];
      v[0].store(got);
      for (int k = 0; k < kLanes; ++k) {
        if (!close_to(got[k], reference_of(chain, double(xs[i + k]))) && ++failures <= 5) {
          ADD_FAILURE() << spec << "(" << xs[i + k] << ") = " << got[k] << " on a vector";
        }
      }
    }
    EXPECT_EQ(failures, 0) << spec;
  }
}

// NaN, infinities and signed zeros as PyTorch's own float32 ops give them (libtorch's eager forms,
// on the CPU) where those follow the ops' definitions, and finite values within the tolerance.
TEST(Activations, SpecialValuesAsLibtorch) {
  const std::vector<float> specials = {0.0f,    -0.0f,    1e-40f, -1e-40f, 1e-30f,
                                       -1e-30f, 20.0f,    -20.0f, 88.0f,   -88.0f,
                                       3.4e38f, -3.4e38f, kInf,   -kInf,   kNan};
  const torch::Tensor x = torch::tensor(specials);
  const torch::Tensor term = torch::full({1}, kTerm);
  for (const char* spec : kSpecs) {
    const ParsedChain chain = parse_chain(spec);
    const act::Program program = program_of(chain);
    std::vector<torch::Tensor> params(chain.slot_params().size(), term);
    const torch::Tensor eager = eager_chain(chain, x, params);
    for (size_t i = 0; i < specials.size(); ++i) {
      // libtorch's kernels depart from the definitions at a few of these (2.11's CPU gelu: NaN at
      // +inf, inf at 3.4e38): there the result may match eager or the definition (in float64,
      // rounded to float).
      const float got = run_program<act::ResultPrecision::kFloat32>(program, specials[i]);
      const float eager_value = eager[int64_t(i)].item<float>();
      const float defined = float(reference_of(chain, double(specials[i])));
      const bool eager_departs = std::isnan(eager_value) != std::isnan(defined) ||
                                 std::isinf(eager_value) != std::isinf(defined);
      const bool as_defined = (std::isnan(got) && std::isnan(defined)) || got == defined;
      const float want = eager_departs && as_defined ? defined : eager_value;
      if (std::isnan(want) || std::isinf(want)) {
        EXPECT_TRUE((std::isnan(want) && std::isnan(got)) || got == want)
            << spec << "(" << specials[i] << ") = " << got << ", libtorch gives " << want;
      } else {
        EXPECT_NEAR(got, want, 1e-6 * std::max(1.0f, std::fabs(want)))
            << spec << "(" << specials[i] << ")";
      }
    }
  }
}

// swish(beta) and square on the grid, past square's overflow (sqrt of float's largest value) too,
// against PyTorch's own expressions, `x * torch.sigmoid(beta * x)` and `torch.square(x)`, and
// against float64: the interpreter on floats and on vectors, and the ops' eager forms. swish with
// beta = 1 is silu's value bitwise (the compiled swish_chain's results stay as they were), and
// square, one rounded product, is torch.square's bitwise.
TEST(Activations, SwishBetaAndSquareAsPyTorchOnTheGrid) {
  using Vec = act::FloatVec;
  constexpr int kLanes = Vec::size();
  std::vector<float> xs = inputs();
  for (float p : {1.8446743e19f, -1.8446743e19f, 3.4028235e38f, -3.4028235e38f}) {
    xs.insert(xs.end(), {p, std::nextafter(p, kInf), std::nextafter(p, -kInf)});
  }
  while (xs.size() % kLanes) xs.push_back(0.5f);
  const torch::Tensor x = torch::tensor(xs);
  // Each interpreter result against PyTorch's (NaN and infinities where PyTorch has them, finite
  // values within 1e-6 of max(1, |value|); where `bitwise`, the same bits) and against float64.
  const auto expect_as_pytorch = [&](const char* spec, const torch::Tensor& pytorch, bool bitwise) {
    const ParsedChain chain = parse_chain(spec);
    const act::Program program = program_of(chain);
    // The eager form the fused op is compared with in `compare`: PyTorch's expression, bitwise
    // (the same ops in the same order, up to commuted products and swish's exact 1 * x).
    const torch::Tensor eager = eager_chain(chain, x, {});
    EXPECT_TRUE(torch::isclose(eager, pytorch, 0, 0, /*equal_nan=*/true).all().item<bool>())
        << spec << ": its eager form departs from PyTorch's expression";
    std::vector<float> vector_results(xs.size());
    for (size_t i = 0; i < xs.size(); i += kLanes) {
      Vec v[1] = {Vec::loadu(&xs[i])};
      Vec t[act::kMaxColumnTerms][1] = {};
      act::apply_chain(act::ProgramChain<act::ResultPrecision::kFloat32>{program}, v, t);
      v[0].store(&vector_results[i]);
    }
    const float* want = pytorch.data_ptr<float>();
    int failures = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const float got = run_program<act::ResultPrecision::kFloat32>(program, xs[i]);
      const float on_vector = vector_results[i];
      const double defined = reference_of(chain, double(xs[i]));
      bool ok = close_to(got, defined) && close_to(on_vector, defined);
      for (const float g : {got, on_vector}) {
        if (std::isnan(want[i])) {
          ok = ok && std::isnan(g);
        } else if (bitwise) {
          ok = ok && std::memcmp(&g, &want[i], sizeof g) == 0;
        } else if (std::isinf(want[i])) {
          ok = ok && g == want[i];
        } else {
          ok = ok &&
               std::fabs(double(g) - want[i]) <= 1e-6 * std::max(1.0, std::fabs(double(want[i])));
        }
      }
      if (!ok && ++failures <= 5) {
        ADD_FAILURE() << spec << "(" << xs[i] << ") = " << got << " (on a vector " << on_vector
                      << "), PyTorch gives " << want[i] << ", float64 " << defined;
      }
    }
    EXPECT_EQ(failures, 0) << spec;
  };
  const std::pair<const char*, double> swishes[] = {{"swish", 1.0},
                                                    {"swish(beta=1)", 1.0},
                                                    {"swish(1.702)", 1.702},
                                                    {"swish(-0.5)", -0.5},
                                                    {"swish(0)", 0.0}};
  for (const auto& [spec, beta] : swishes) {
    expect_as_pytorch(spec, x * torch::sigmoid(beta * x), /*bitwise=*/false);
  }
  expect_as_pytorch("square", torch::square(x), /*bitwise=*/true);
  expect_as_pytorch("square", x * x, /*bitwise=*/true);
  expect_as_pytorch("square", torch::pow(x, 2), /*bitwise=*/true);

  // swish with beta = 1, as a declaration writes it (Swish{}) and as a spec gives it, is silu's
  // value bitwise, on floats and on vectors (each against silu of the same form: the vectors' exp
  // is their own, primitives_vec.h).
  const act::Program swish = program_of(parse_chain("swish"));
  int failures = 0;
  for (size_t i = 0; i < xs.size(); i += kLanes) {
    float silu[kLanes], swish_vec[kLanes];
    act::Silu{}(Vec::loadu(&xs[i])).store(silu);
    act::Swish{}(Vec::loadu(&xs[i])).store(swish_vec);
    for (int k = 0; k < kLanes; ++k) {
      const float x_k = xs[i + k];
      const float silu_k = act::Silu{}(x_k);
      const float got[] = {act::Swish{}(x_k),
                           run_program<act::ResultPrecision::kFloat32>(swish, x_k)};
      for (const float g : got) {
        if (std::memcmp(&g, &silu_k, sizeof g) != 0 && ++failures <= 5) {
          ADD_FAILURE() << "swish(" << x_k << ") = " << g << ", silu gives " << silu_k;
        }
      }
      if (std::memcmp(&swish_vec[k], &silu[k], sizeof silu[k]) != 0 && ++failures <= 5) {
        ADD_FAILURE() << "swish(" << x_k << ") on a vector = " << swish_vec[k] << ", silu gives "
                      << silu[k];
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// Each library declaration's compiled chain, as the kernels run it at both result precisions
// (rewritten: chain.h; its Half forms where its chain allows them: model.h), against the float64
// forms of the chain it declares.
template <class Model>
void expect_declaration_matches_float64() {
  const ParsedChain chain = chain_of(Model::kChain);
  const auto full = act::rewrite<act::ResultPrecision::kFloat32>(Model::kChain);
  const auto half = device_chain<Model, act::ResultPrecision::kHalf>(act::Program{});
  const float terms[act::kMaxColumnTerms] = {kTerm, kTerm, kTerm, kTerm};
  int failures = 0;
  for (float x : inputs()) {
    const double want = reference_of(chain, double(x));
    const float got = full(x, terms), got_half = half(x, terms);
    if (!(close_to(got, want) && close_to(got_half, want, kHalfBound)) && ++failures <= 5) {
      ADD_FAILURE() << Model::kName << "(" << x << ") = " << got << " (for 16-bit results "
                    << got_half << "), float64 gives " << want;
    }
  }
  EXPECT_EQ(failures, 0) << Model::kName;
}

TEST(Activations, LibraryDeclarationsMatchFloat64) {
  std::apply([](auto... models) { (expect_declaration_matches_float64<decltype(models)>(), ...); },
             LibraryModels{});
}

// A declaration whose chain does not allow the Half forms: a GELU after the Half-form ops, which
// kHalfFormsHold does not count as keeping errors.
struct NotOptedIn {
  static constexpr auto kChain = act::Chain(act::Tanh{}, act::Gelu{}, act::Gelu{});
};

// The rewrites: GELU after an op whose results lie in [-1, 1] becomes the polynomial, and 16-bit
// results take the cheaper forms; elsewhere a functor stays.
TEST(Activations, RewritesFollowTheRange) {
  using act::ResultPrecision;
  const auto chain = act::Chain(act::Tanh{}, act::Gelu{}, act::Gelu{});
  using Full = decltype(act::rewrite<ResultPrecision::kFloat32>(chain));
  using Half = decltype(act::rewrite<ResultPrecision::kHalf>(chain));
  static_assert(std::is_same_v<Full, act::Chain<act::Tanh, act::GeluOnUnitInterval, act::Gelu>>);
  static_assert(std::is_same_v<Half, act::Chain<act::TanhHalfPrecision,
                                                act::GeluOnUnitIntervalHalfPrecision, act::Gelu>>);
  // The polynomials are taken by the rewrite only: a chain that names one does not compile
  // (Chain's constructor), and the spec parser does not know them.
  static_assert(act::kRewriteOnly<act::GeluOnUnitInterval> &&
                act::kRewriteOnly<act::GeluOnUnitIntervalHalfPrecision> &&
                !act::kRewriteOnly<act::Gelu>);
  EXPECT_THROW(parse_chain("gelu_on_unit_interval"), ChainSpecError);
  // Half forms only where the chain allows them (model.h), for a declaration and an op list alike.
  static_assert(
      std::is_same_v<decltype(device_chain<NotOptedIn, ResultPrecision::kHalf>({})), Full>);
  static_assert(std::is_same_v<decltype(device_chain<RuntimeChain, ResultPrecision::kHalf>({})),
                               act::ProgramChain<ResultPrecision::kFloat32>>);
  const act::Program program = program_of(parse_chain("tanh,gelu,gelu"));
  EXPECT_EQ(program.ops[1].code, act::OpCode::kGeluOnUnitInterval);
  EXPECT_EQ(program.ops[2].code, act::OpCode::kGelu);
  const act::Program half =
      device_chain<RuntimeChain, ResultPrecision::kHalf>(program_of(parse_chain("tanh,relu")))
          .program;
  EXPECT_EQ(half.ops[0].code, act::OpCode::kTanhHalfPrecision);
  EXPECT_EQ(half.ops[1].code, act::OpCode::kRelu);
}

// A declaration of chain type C (its functors' arguments their defaults: only the types matter).
template <class C>
struct DeclarationOf {
  static constexpr C kChain{};
};

// Whether a chain's 16-bit results take the Half forms (chain.h's kHalfFormsHold) and whether an
// op list of the same chain does (program.h's half_forms_hold): the same answer, and the one
// written here.
template <class... Fs>
void expect_half_forms(const act::Chain<Fs...>& /*chain*/, const char* spec, bool hold) {
  const act::Program program = program_of(parse_chain(spec));
  EXPECT_EQ(act::kHalfFormsHold<act::Chain<Fs...>>, hold) << spec;
  EXPECT_EQ(act::half_forms_hold(program), hold) << spec;
  // The op list's Half forms are the compiled chain's, op for op.
  const act::Program half = act::with_result_precision(program, act::ResultPrecision::kHalf);
  int i = 0;
  device_chain<DeclarationOf<act::Chain<Fs...>>, act::ResultPrecision::kHalf>({}).for_each(
      [&](const auto& functor) {
        using F = std::decay_t<decltype(functor)>;
        EXPECT_EQ(int(half.ops[i].code), act::op_code_of<F>()) << spec << " op " << i;
        ++i;
      });
  EXPECT_EQ(half.count, i) << spec;
}

TEST(Activations, HalfFormsWhereNoLaterOpMagnifiesTheirError) {
  using namespace act;
  // The library's chains, and ops that keep errors after a Half form.
  expect_half_forms(Chain(Mish{}, Mish{}), "mish,mish", true);
  // (swish_chain's clamp narrowed: the interpreter leaves out one that changes no value)
  expect_half_forms(Chain(AddParam{"p"}, Swish{}, Tanh{}, Gelu{}, Hardtanh{-0.5f, 0.5f}),
                    "add(p),swish,tanh,gelu,hardtanh(-0.5,0.5)", true);
  expect_half_forms(Chain(Relu{}, Tanh{}, Relu{}), "relu,tanh,relu", true);
  expect_half_forms(Chain(Tanh{}, Sigmoid{}, Softsign{}, Relu6{}, Clamp{-0.5f, 0.5f}),
                    "tanh,sigmoid,softsign,relu6,clamp(-0.5,0.5)", true);
  expect_half_forms(Chain(Sigmoid{}, Gelu{}, Mish{}), "sigmoid,gelu,mish", true);
  // Anything before the first Half form; a chain with none.
  expect_half_forms(Chain(AddScalar{1.0f}, Square{}, Tanh{}), "add(1),square,tanh", true);
  expect_half_forms(Chain(Gelu{}, Softplus{}), "gelu,softplus", true);
  // An op that may magnify the error after one: refused.
  expect_half_forms(Chain(Tanh{}, Gelu{}, Gelu{}), "tanh,gelu,gelu", false);
  expect_half_forms(Chain(Mish{}, MulParam{"s"}), "mish,mul(s)", false);
  expect_half_forms(Chain(Tanh{}, AddScalar{1.0f}), "tanh,add(1)", false);
  expect_half_forms(Chain(Mish{}, Softplus{}), "mish,softplus", false);
  expect_half_forms(Chain(Sigmoid{}, Gelu{}, Square{}), "sigmoid,gelu,square", false);
  expect_half_forms(Chain(Tanh{}, LeakyRelu{2.0f}), "tanh,leaky_relu(2)", false);
}

// The interpreter leaves out a clamp that cannot change a value (program.h's
// without_identity_clamps), and only such a clamp: bitwise the same results as with every op.
TEST(Activations, ClampsLeftOutChangeNoValue) {
  const struct {
    const char* spec;
    int ops;  // in the op list the interpreter runs
  } cases[] = {
      {"add(p),swish,tanh,gelu,hardtanh(-1,1)", 4},  // swish_chain's: gelu of [-1, 1]
      {"sigmoid,gelu(tanh),clamp(-2,2)", 2},
      {"hardtanh(-0.5,0.5),clamp(-1,1)", 1},
      {"tanh,hardtanh(-0.5,0.5),gelu,gelu(tanh),hardtanh", 4},  // inside [-1, 1] throughout
      {"tanh,gelu,hardtanh(-0.5,1)", 3},                        // bounds narrower than [-1, 1]
      {"tanh,hardtanh", 2},                                     // tanh reaches +-1
      {"sigmoid,clamp(-2,2)", 2},
      {"gelu,hardtanh", 2},  // gelu of any value
      {"tanh,gelu,mul(2),hardtanh", 4},
      {"tanh,gelu,add(p),hardtanh", 4},
      {"relu,hardtanh", 2},
  };
  const std::vector<float> xs = inputs();
  for (const auto& c : cases) {
    const ParsedChain chain = parse_chain(c.spec);
    const act::Program program = program_of(chain);
    EXPECT_EQ(program.count, c.ops) << c.spec;
    act::Program every_op;  // the same ops, none left out
    bool after_unit_interval = false;
    for (const ChainOp& op : chain.ops) {
      act::append_op(every_op, op.op->code, op.args, op.op->takes_param, after_unit_interval);
      after_unit_interval = op.op->output_in_unit_interval;
    }
    ASSERT_EQ(every_op.count, int(chain.ops.size())) << c.spec;
    int failures = 0;
    for (float x : xs) {
      const float got = run_program<act::ResultPrecision::kFloat32>(program, x);
      const float want = run_program<act::ResultPrecision::kFloat32>(every_op, x);
      if (std::memcmp(&got, &want, sizeof got) != 0 && ++failures <= 5) {
        ADD_FAILURE() << c.spec << "(" << x << ") = " << got << ", with every op " << want;
      }
    }
    EXPECT_EQ(failures, 0) << c.spec;
  }
}

// gelu(x) on a grid of [-1, 1] with step 1e-6 (the GELU polynomials' domain): the error against
// float64 within max_abs and within max_rel relative.
template <class Gelu>
void expect_gelu_on_unit_interval(Gelu gelu, const char* name, double max_abs, double max_rel) {
  int failures = 0;
  for (int i = -1000000; i <= 1000000; ++i) {
    const float x = float(i) * 1e-6f;
    const double want = act::Gelu::reference(double(x));
    const double err = std::fabs(double(gelu(x)) - want);
    if (!(err <= max_abs && err <= max_rel * std::fabs(want) + 1e-38) && ++failures <= 10) {
      ADD_FAILURE() << name << "(" << x << ") is off by " << err << " (float64 gives " << want
                    << ")";
    }
  }
  EXPECT_EQ(failures, 0) << name;
  EXPECT_TRUE(std::signbit(gelu(-0.0f))) << name;
  EXPECT_EQ(gelu(0.0f), 0.0f) << name;
  EXPECT_TRUE(std::isnan(gelu(kNan))) << name;
}

// The GELU polynomial on its domain: within 2^-23 (two ulp at the top of the range; a wrong
// coefficient is off by far more) and 1e-6 relative.
TEST(Activations, GeluPolynomialOnTheUnitInterval) {
  expect_gelu_on_unit_interval(act::GeluOnUnitInterval{}, "gelu polynomial", std::ldexp(1.0, -23),
                               1e-6);
}

// The 16-bit GELU polynomial (degree 3): within 5e-6 relative of float64 (its fit is 4.4e-6;
// float16's last place is 2^-10 relative, so this is under 0.02 of it).
TEST(Activations, HalfPrecisionGeluPolynomialOnTheUnitInterval) {
  expect_gelu_on_unit_interval(act::GeluOnUnitIntervalHalfPrecision{}, "16-bit gelu polynomial",
                               1.0, 5e-6);
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
  float x[kLanes] = {-0.0f, 0.0f, kInf, -kInf, kNan, 3e38f, -3e38f};
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

// The CPU's vector exp and expm1 (primitives_vec.h: computed inline, not Sleef's) on dense grids
// over their whole range and near zero, where expm1 must keep its relative accuracy: within 2 ulp
// of float64 (subnormal results to the smallest subnormal); then +-0, +-inf, NaN and huge values.
// Compiled here without SIMD flags, at::vec evaluates the same formulas lane by lane.
double ulps_off(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : kInf;
  if (std::fabs(want) >= kRoundsToInf) {
    return std::isinf(got) && std::signbit(got) == std::signbit(want) ? 0 : kInf;
  }
  const float rounded = std::fabs(float(want));
  const double ulp = rounded < std::numeric_limits<float>::min()
                         ? std::numeric_limits<float>::denorm_min()
                         : std::nextafter(rounded, kInf) - rounded;
  return std::fabs(double(got) - want) / ulp;
}

template <class VectorFn, class Float64Fn>
double worst_ulps(VectorFn vector_fn, Float64Fn float64_fn, double lo, double hi, double step) {
  using Vec = act::FloatVec;
  constexpr int kLanes = Vec::size();
  double worst = 0;
  for (double start = lo; start < hi; start += step * kLanes) {
    float x[kLanes], got[kLanes];
    for (int k = 0; k < kLanes; ++k) x[k] = float(start + k * step);
    vector_fn(Vec::loadu(x)).store(got);
    for (int k = 0; k < kLanes; ++k) {
      worst = std::max(worst, ulps_off(got[k], float64_fn(double(x[k]))));
    }
  }
  return worst;
}

TEST(Activations, VectorExpAndExpm1WithinTwoUlpOfFloat64) {
  using Vec = act::FloatVec;
  const auto exp = [](Vec v) { return act::vector_exp(v); };
  const auto expm1 = [](Vec v) { return act::vector_expm1(v); };
  const auto exp64 = [](double x) { return std::exp(x); };
  const auto expm164 = [](double x) { return std::expm1(x); };
  EXPECT_LE(worst_ulps(exp, exp64, -110, 92, 1e-3), 2.0) << "exp";
  EXPECT_LE(worst_ulps(expm1, expm164, -110, 92, 1e-3), 2.0) << "expm1";
  EXPECT_LE(worst_ulps(expm1, expm164, -1e-3, 1e-3, 1e-8), 2.0) << "expm1 near 0";
  const std::vector<float> specials = {0.0f, -0.0f, kInf, -kInf, kNan, 3e38f, -3e38f, 1e-40f};
  for (const float x : specials) {
    float lanes[Vec::size()];
    std::fill(lanes, lanes + Vec::size(), x);
    const auto at = [&](Vec v) {
      v.store(lanes);
      return lanes[0];
    };
    const float e = at(exp(Vec(x))), m = at(expm1(Vec(x)));
    EXPECT_EQ(ulps_off(e, std::exp(double(x))), 0.0) << "exp(" << x << ") = " << e;
    EXPECT_LE(ulps_off(m, std::expm1(double(x))), 1.0) << "expm1(" << x << ") = " << m;
    if (x == 0.0f) {
      EXPECT_EQ(std::signbit(m), std::signbit(x)) << "expm1 keeps the zero's sign";
    }
  }
}

// The CPU's vector GELU (vector_gelu: x Phi(x) in one formula, no erf) against float64's
// x / 2 erfc(-x / sqrt 2), which keeps its relative accuracy for x < 0: within 7e-7 of the value
// from -3 up (the rounding of t = 1 / (1 + p |x|) in the fitted polynomial, and of x^2), 5e-7
// near 0, 1.5e-5 on to -13 (the rounding of x^2 in the exponent), where x / 2 (1 + erf) would
// lose every digit; results below float's normal range (to -15) measured against its smallest
// normal value. Then +-0, +-inf, NaN and huge values as PyTorch gives them. Compiled here without
// FMA, as the SIMD loops are not: both stay within these bounds.
TEST(Activations, VectorGeluAgainstFloat64) {
  using Vec = act::FloatVec;
  constexpr int kLanes = Vec::size();
  const auto gelu64 = [](double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); };
  const auto worst_relative = [&](double lo, double hi, double step) {
    double worst = 0;
    for (double start = lo; start < hi; start += step * kLanes) {
      float x[kLanes], got[kLanes];
      for (int k = 0; k < kLanes; ++k) x[k] = float(start + k * step);
      act::vector_gelu(Vec::loadu(x)).store(got);
      for (int k = 0; k < kLanes; ++k) {
        const double want = gelu64(double(x[k]));
        // Below float's normal range, relative to its smallest normal value.
        const double scale = std::max(std::fabs(want), double(std::numeric_limits<float>::min()));
        worst = std::max(worst, std::fabs(got[k] - want) / scale);
      }
    }
    return worst;
  };
  EXPECT_LE(worst_relative(-3, 8, 1e-5), 7e-7);
  EXPECT_LE(worst_relative(-1e-3, 1e-3, 1e-9), 5e-7) << "near 0";
  EXPECT_LE(worst_relative(-13, -3, 1e-5), 1.5e-5) << "the negative tail";
  EXPECT_LE(worst_relative(-15, -13, 1e-4), 1.5e-5) << "results below float's normal range";
  float x[kLanes] = {0.0f, -0.0f, kInf, -kInf, kNan, 3e38f, -3e38f, -20.0f}, got[kLanes];
  act::vector_gelu(Vec::loadu(x)).store(got);
  EXPECT_TRUE(got[0] == 0.0f && !std::signbit(got[0]));
  EXPECT_TRUE(got[1] == 0.0f && std::signbit(got[1]));
  EXPECT_EQ(got[2], kInf);
  EXPECT_TRUE(std::isnan(got[3])) << "-inf * 0, as PyTorch";
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_EQ(got[5], 3e38f);
  EXPECT_TRUE(got[6] == 0.0f && std::signbit(got[6]));
  EXPECT_TRUE(got[7] == 0.0f && std::signbit(got[7]));
}

TEST(Activations, SignedZeroAndTinyInputs) {
  EXPECT_EQ(act::Mish{}(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(act::Mish{}(-0.0f)));
  EXPECT_TRUE(std::signbit(act::Swish{}(-0.0f)));
  EXPECT_TRUE(std::signbit(act::Swish{1.702f}(-0.0f)));
  EXPECT_TRUE(std::signbit(act::Swish{-0.5f}(-0.0f)));
  EXPECT_EQ(act::Swish{0.0f}(-3.0f), -1.5f);  // beta = 0: x / 2
  EXPECT_FALSE(std::signbit(act::Square{}(-0.0f)));
  EXPECT_EQ(act::Square{}(-kInf), kInf);
  EXPECT_EQ(act::Square{}(-1e-30f), 0.0f);            // below float's subnormals
  EXPECT_EQ(act::Square{}(1e-20f), 1e-20f * 1e-20f);  // a subnormal result
  // mish(x) ~ x * tanh(log 2) for tiny x: no underflow to zero, no loss of the sign.
  EXPECT_NEAR(act::Mish{}(1e-30f) / 1e-30f, std::tanh(std::log(2.0)), 1e-6);
  EXPECT_NEAR(act::Mish{}(-1e-30f) / -1e-30f, std::tanh(std::log(2.0)), 1e-6);
}

TEST(Activations, ChainAppliesLeftToRightWithItsTerms) {
  // Chain(Mish, Tanh) is tanh(mish(x)), not mish(tanh(x)); column functors take the terms in
  // their order.
  const float x = 1.7f;
  EXPECT_FLOAT_EQ(act::Chain(act::Mish{}, act::Tanh{})(x), std::tanh(act::Mish{}(x)));
  const float terms[2] = {2.0f, 10.0f};
  EXPECT_FLOAT_EQ(act::Chain(act::AddParam{}, act::MulParam{})(x, terms), (x + 2.0f) * 10.0f);
  EXPECT_FLOAT_EQ(act::Chain(act::LeakyRelu{0.5f}, act::Clamp{-0.2f, 9.0f})(-1.0f), -0.2f);
  EXPECT_FLOAT_EQ(act::Chain<>{}(x), x);
}

}  // namespace
}  // namespace fusedlinear
