// Layered models (kernels/ops/model_spec.h, modules/layered_model.h): the grammar, its canonical
// form and refusals; the module's state-dict keys (Python's); and 200 seeded random layered models
// (plain, gated, chunked and residual layers) whose fused forward is checked against the eager
// model of the same spec and against float64, on the CPU and, where there is one, on CUDA; and
// layered declarations (tests/layered_declarations.h) against the interpreter.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cmath>
#include <cstdlib>
#include <cxxopts.hpp>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/model_setup.h"
#include "kernels/ops/ops.h"
#include "modules/layered_model.h"
#include "modules/loader/state_dict.h"
#include "tests/test_files.h"
#include "tests/test_support.h"

namespace fusedlinear {
namespace {

using testing_support::message_of;

TEST(ModelSpecs, CanonicalForm) {
  const std::pair<const char*, const char*> cases[] = {
      {"fc1: gelu(tanh) | fc2: relu | fc3", "fc1:gelu(tanh)|fc2:relu|fc3"},
      {"0:gelu|2", "0:gelu|2"},
      {" w1 : silu * w3 | w2 ", "w1:silu*w3|w2"},
      {"w13[1]: gelu * w13[0] | w2", "w13[1]:gelu*w13[0]|w2"},
      {"x + ( fc1: gelu | fc2 )", "x+(fc1:gelu|fc2)"},
      {"x+(fc: swish(beta=1.702))", "x+(fc:swish(1.702))"},
      {"block.0: leaky_relu(negative_slope=0.2), add(block.shift) | head",
       "block.0:leaky_relu(0.2),add(block.shift)|head"},
      {"a: * b", "a:*b"},  // a bilinear unit: a(x) * b(x)
      {"fc1:", "fc1"},
  };
  for (const auto& [spec, canonical] : cases) {
    EXPECT_TRUE(is_layered_spec(spec)) << spec;
    const ParsedModel model = parse_model_spec(spec);
    EXPECT_EQ(model.to_string(), canonical) << spec;
    EXPECT_EQ(parse_model_spec(canonical).to_string(), canonical);
  }
  for (const char* chain : {"gelu", "add(x),relu", "xgelu", "swish(1.702),square"}) {
    EXPECT_FALSE(is_layered_spec(chain)) << chain;
  }
  EXPECT_EQ(parse_model_spec("w1: silu * w3 | w2").description(), "(w1 -> silu) * w3 | w2");
}

TEST(ModelSpecs, RefusedWithOneLineNamingTheLayer) {
  const std::pair<const char*, const char*> cases[] = {
      {"fc1: gelu | | fc3", "expected a layer (a Linear's path) (at character 13)"},
      {"fc1: gelu | fc2: mesh", "layer 2 (fc2): chain 'mesh': unknown op 'mesh'"},
      {"fc1 gelu | fc2", "expected the Linear's attribute path"},
      {"w1: silu * w3 * w4", "expected one '*' a layer"},
      {"w13[0]: silu * w2[1]", "expected the other half of the same Linear (w13[1])"},
      {"w13[0]: silu * w13[0]", "expected the other half of the same Linear (w13[1])"},
      {"w13[2]: silu * w13[1]", "expected [0] or [1]"},
      {"w13[0]: silu", "a Linear's half is gated by the other"},
      {"w1: silu * w1", "a gate other than the Linear itself"},
      {"fc1: gelu | fc1", "a Linear used once; 'fc1' comes twice"},
      {"x + (fc1: gelu | fc2", "the residual's closing ')' at the end"},
      {"x + fc1: gelu", "'(' after 'x +'"},
  };
  for (const auto& [spec, expected] : cases) {
    const std::string message = message_of<ChainSpecError>([&] { parse_model_spec(spec); });
    EXPECT_NE(message.find(expected), std::string::npos) << spec << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  // The interpreter's limits are checked when the model is made, not at its first call.
  EXPECT_NE(message_of<ChainSpecError>([] {
              layered_model("fc1: add(a),add(b),add(c),add(d),add(e) | fc2");
            }).find("more than 4 parameter terms"),
            std::string::npos);
}

TEST(LayeredModels, StateDictKeysArePythons) {
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {"0:gelu|2", {"0.weight", "0.bias", "2.weight", "2.bias"}},
      {"w1:silu*w3|w2", {"w1.weight", "w1.bias", "w3.weight", "w3.bias", "w2.weight", "w2.bias"}},
      {"w13[0]:silu*w13[1]|w2", {"w13.weight", "w13.bias", "w2.weight", "w2.bias"}},
      {"x+(block.fc1:add(block.shift),gelu|block.fc2)",
       {"block.shift", "block.fc1.weight", "block.fc1.bias", "block.fc2.weight", "block.fc2.bias"}},
  };
  for (const auto& [spec, keys] : cases) {
    std::vector<std::string> got = layered_model_keys(layered_model(spec));
    std::vector<std::string> want = keys;
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << spec;
  }
  // Linears without a bias, as the file says.
  EXPECT_EQ(layered_model_keys(layered_model("fc1:relu|fc2", {{"fc1", false}})),
            (std::vector<std::string>{"fc1.weight", "fc2.weight", "fc2.bias"}));
}

TEST(LayeredModels, WidthsAndParametersChecked) {
  EXPECT_NE(message_of<std::invalid_argument>([] {
              LayeredModelImpl(layered_model("x+(fc1:gelu|fc2)"), {8, 16, 4});
            }).find("the widths must match"),
            std::string::npos);
  EXPECT_NE(message_of<std::invalid_argument>([] {
              LayeredModelImpl(layered_model("fc1:add(p)|fc2:add(p)"), {8, 16, 16});
            }).find("the parameter 'p' is used by two layers' chains"),
            std::string::npos);
  LayeredModelImpl chunked(layered_model("w13[1]:add(shift),silu*w13[0]|w2"), {8, 6, 3});
  EXPECT_EQ(chunked.layers().front().linear->out_features(), 12);  // both halves
  EXPECT_EQ(chunked.named_parameters()["shift"].sizes(), (torch::IntArrayRef{6}));
  EXPECT_EQ(chunked.out_features(), 3);
}

// A chain of 0-3 ops, arguments left at their defaults, or a per-feature parameter `key`.
std::string random_chain(std::mt19937& rng, const std::string& key) {
  const std::vector<std::string> ops = {
      "relu",    "gelu",     "gelu(tanh)",      "silu",     "swish(1.702)", "mish",
      "sigmoid", "tanh",     "hardtanh",        "softplus", "square",       "leaky_relu(0.1)",
      "elu",     "mul(0.5)", "add(" + key + ")"};
  std::uniform_int_distribution<int> count(0, 3), pick(0, int(ops.size()) - 1);
  std::string chain;
  bool used_key = false;
  for (int n = count(rng); n > 0; --n) {
    std::string op = ops[pick(rng)];
    if (op[0] == 'a') {
      if (used_key) continue;
      used_key = true;
    }
    chain += (chain.empty() ? "" : ",") + op;
  }
  return chain;
}

// A model of 1-4 layers, some gated or chunked, maybe a residual; `widths` receives the input's
// width and each layer's.
std::string random_model(std::mt19937& rng, std::vector<int64_t>& widths, bool& residual) {
  std::uniform_int_distribution<int> layers(1, 4), kind(0, 3), width(1, 24);
  const int count = layers(rng);
  residual = kind(rng) == 0;
  widths = {width(rng)};
  std::string spec;
  for (int i = 0; i < count; ++i) {
    const std::string name = "l" + std::to_string(i);
    const std::string chain = random_chain(rng, "s" + std::to_string(i));
    std::string layer;
    switch (kind(rng)) {
      case 0:
        layer = name + ":" + chain + "*g" + std::to_string(i);
        break;
      case 1:
        layer = name + "[" + std::to_string(i % 2) + "]:" + chain + "*" + name + "[" +
                std::to_string(1 - i % 2) + "]";
        break;
      default:
        layer = name + (chain.empty() ? "" : ":" + chain);
    }
    spec += (spec.empty() ? "" : "|") + layer;
    widths.push_back(residual && i + 1 == count ? widths.front() : width(rng));
  }
  return residual ? "x+(" + spec + ")" : spec;
}

// FUSEDLINEAR_JIT=0 for a scope, the setting before it restored after. A run-time chain keeps the
// kernels it got when first seen, and the CPU and CUDA tests build the same random models: both run
// under it, or in one process the CUDA test would compile every chain the CPU test saw first.
class InterpreterOnly {
 public:
  InterpreterOnly() {
    if (const char* setting = std::getenv("FUSEDLINEAR_JIT")) before_ = setting;
    ::setenv("FUSEDLINEAR_JIT", "0", 1);
  }
  ~InterpreterOnly() {
    if (before_) {
      ::setenv("FUSEDLINEAR_JIT", before_->c_str(), 1);
    } else {
      ::unsetenv("FUSEDLINEAR_JIT");
    }
  }
  InterpreterOnly(const InterpreterOnly&) = delete;
  InterpreterOnly& operator=(const InterpreterOnly&) = delete;

 private:
  std::optional<std::string> before_;
};

void expect_random_models_match_eager(const torch::Device& device) {
  const InterpreterOnly interpreter_only;
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> widths;
    bool residual = false;
    const std::string spec = random_model(rng, widths, residual);
    SCOPED_TRACE(spec);
    LayeredModelImpl model(layered_model(spec), widths,
                           at::detail::createCPUGenerator(uint64_t(trial)));
    model.to(device);
    const torch::Tensor x = torch::randn({int64_t(1 + trial % 7), widths.front()},
                                         at::detail::createCPUGenerator(uint64_t(trial) + 1000))
                                .to(device);
    torch::NoGradGuard no_grad;
    const torch::Tensor fused = model.forward(x), eager = model.forward_eager(x);
    ASSERT_EQ(fused.sizes(), eager.sizes());
    EXPECT_TRUE(torch::allclose(fused, eager, 1e-4, 1e-5, /*equal_nan=*/true))
        << (fused - eager).abs().max();
    EXPECT_TRUE(torch::allclose(model.forward_eager_gemms(x), eager, 1e-4, 1e-5, true));
    const torch::Tensor reference = model.reference(x);
    EXPECT_TRUE(torch::allclose(fused.cpu().to(torch::kFloat64), reference, 1e-4, 1e-5, true));
  }
}

TEST(LayeredModels, RandomModelsMatchEagerOnTheCpu) {
  expect_random_models_match_eager(torch::kCPU);
}

// The interpreter's kernels: compiling every random model's chains would take many minutes
// (CompiledChainsGpu and ChainSpecs.RandomSpecsMatchEagerOnCudaCompiled test compiled chains).
TEST(LayeredModels, RandomModelsMatchEagerOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_random_models_match_eager(torch::kCUDA);
}

// On the CPU in ieee with the CPU's GEMM a Linear's products and bias are eager's (one addmm, the
// bias in the GEMM), so a model whose chains are exact (relu, hardtanh) gives eager's bits: plain,
// gated and residual layers, 1 to 64 rows, a long K that the BLAS sums in blocks. A 3-D input
// gives the bits of its rows, as Python's nn.Linear does (libtorch's C++ Linear runs it as matmul,
// then + bias). (Under auto, a few rows run the CPU's small-batch products, whose sums are
// within float32's rounding of eager's: RandomModelsMatchEagerOnTheCpu.)
TEST(LayeredModels, CpuLinearsCarryEagersBits) {
  torch::NoGradGuard no_grad;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> models = {
      {"l0|l1:relu|l2", {2048, 96, 80, 64}},
      {"w1:relu*w3|w2:hardtanh", {1536, 128, 40}},
      {"x+(l0:relu|l1)", {1100, 72, 1100}}};
  for (const auto& [spec, widths] : models) {
    LayeredModelImpl model(layered_model(spec), widths, at::detail::createCPUGenerator(7));
    for (LinearChainImpl* linear : model.linears()) linear->set_gemm_kernel(GemmKernel::kCublas);
    for (const int64_t rows : {1, 7, 64}) {
      SCOPED_TRACE(spec + " on " + std::to_string(rows) + " rows");
      const torch::Tensor x =
          torch::randn({rows, widths.front()}, at::detail::createCPUGenerator(11));
      const torch::Tensor fused = model.forward(x), eager = model.forward_eager(x);
      EXPECT_TRUE(torch::equal(fused, eager)) << (fused - eager).abs().max();
    }
    const torch::Tensor x =
        torch::randn({3, 5, widths.front()}, at::detail::createCPUGenerator(13));
    const torch::Tensor rows = model.forward_eager(x.reshape({15, widths.front()}));
    EXPECT_TRUE(torch::equal(model.forward(x), rows.view({3, 5, widths.back()}))) << spec;
  }
}

// The whole-model op (fusedlinear::model) runs each Linear as the module does under auto: the
// same bits, in every precision, biases present or not.
void expect_whole_model_op_equals_module(const torch::Device& device) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<int64_t> widths;
    bool residual = false;
    const std::string spec = random_model(rng, widths, residual);
    const Precision precision = all_precisions()[size_t(trial) % all_precisions().size()];
    SCOPED_TRACE(spec + " in " + precision_name(precision));
    LayeredModelImpl model(layered_model(spec, {{"l0", trial % 3 != 0}}), widths,
                           at::detail::createCPUGenerator(uint64_t(trial)));
    model.to(device);
    model.set_precision(precision);
    const torch::Tensor x = torch::randn({int64_t(1 + trial % 5), 3, widths.front()},
                                         at::detail::createCPUGenerator(uint64_t(trial) + 500))
                                .to(device);
    torch::NoGradGuard no_grad;
    const torch::Tensor module = model.forward(x), op = model.forward_op(x);
    ASSERT_EQ(op.sizes(), module.sizes());
    EXPECT_TRUE(torch::equal(op, module)) << (op - module).abs().max();
    // The Meta implementation: the same checks, the output's shape.
    ModelOpArguments meta = model.op_arguments();
    for (torch::Tensor& w : meta.weights) w = w.to(torch::kMeta);
    for (auto& b : meta.biases) {
      if (b) b = b->to(torch::kMeta);
    }
    for (torch::Tensor& p : meta.params) p = p.to(torch::kMeta);
    const torch::Tensor shape_only = fused_model(x.to(torch::kMeta), meta.weights, meta.biases,
                                                 meta.params, meta.spec, meta.precision);
    EXPECT_EQ(shape_only.sizes(), module.sizes());
    EXPECT_EQ(shape_only.scalar_type(), module.scalar_type());
  }
}

TEST(LayeredModels, WholeModelOpEqualsTheModuleOnTheCpu) {
  expect_whole_model_op_equals_module(torch::kCPU);
}

TEST(LayeredModels, WholeModelOpEqualsTheModuleOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_whole_model_op_equals_module(torch::kCUDA);
}

// Each wrong argument of the whole-model op: one line naming it, what was expected and what came.
TEST(LayeredModels, WholeModelOpRefusesInOneLine) {
  LayeredModelImpl model(layered_model("w1:silu*w3|w2:add(s)"), {8, 6, 4});
  const torch::Tensor x = torch::rand({2, 8});
  const ModelOpArguments good = model.op_arguments();
  EXPECT_EQ(good.spec, "w1:silu*w3|w2:add(s)");
  EXPECT_EQ(good.weights.size(), 3u);
  const auto message = [&](const std::function<void(ModelOpArguments&)>& change) {
    ModelOpArguments a = good;
    change(a);
    try {
      fused_model(x, a.weights, a.biases, a.params, a.spec, a.precision);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  const std::vector<std::pair<std::function<void(ModelOpArguments&)>, std::string>> cases = {
      {[](ModelOpArguments& a) { a.spec = "gelu"; }, "expected a layered spec"},
      {[](ModelOpArguments& a) { a.spec = "w1:nope|w2"; }, "nope"},
      {[](ModelOpArguments& a) { a.precision = Precision::kBf16x3; }, "so 9 weights, got 3"},
      {[](ModelOpArguments& a) { a.weights.pop_back(); }, "so 3 weights, got 2"},
      {[](ModelOpArguments& a) { a.biases.pop_back(); }, "expected 3 biases"},
      {[](ModelOpArguments& a) { a.params.clear(); }, "take 1 parameter tensor(s), got 0"},
      {[](ModelOpArguments& a) {
         a.weights[2] = torch::rand({4, 5});
       },
       "expected weights[2] of shape [4, 6], got [4, 5]"},
      {[](ModelOpArguments& a) {
         a.weights[1] = torch::rand({5, 8});
         a.biases[1] = c10::nullopt;
       },
       "layer 1's gate gives 5 outputs, its Linear 6"},
      {[](ModelOpArguments& a) { a.biases[0] = torch::rand({7}); },
       "expected biases[0] of shape [6], got [7]"},
      {[](ModelOpArguments& a) { a.params[0] = torch::rand({3}); },
       "expected params[0] of shape [4] or of one element, got [3]"},
      {[](ModelOpArguments& a) { a.weights[0] = a.weights[0].to(torch::kFloat64); },
       "expected weights[0] of dtype Float, got Double"},
      {[](ModelOpArguments& a) { a.spec = "x+(w1:silu*w3|w2:add(s))"; },
       "the residual adds x (8 wide) to an output 4 wide"},
  };
  for (const auto& [change, expected] : cases) {
    const std::string what = message(change);
    EXPECT_NE(what.find(expected), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_THROW(LayeredModelImpl(runtime_model("gelu"), {8, 6}).op_arguments(),
               std::invalid_argument);
}

// A gated layer on the Hopper GEMM: both products in one kernel (linear_forward_gated), bitwise
// the gate's forward and then the chain Linear's times it (two launches and a multiply), through
// the module and the whole-model op, in each mode the GEMM takes; widths a multiple of 8 (16-byte
// stores) and not (one element at a time), tails of a tile's rows and columns.
TEST(LayeredModels, GatedPairInOneHopperKernelAsInTwo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const GemmDevice device = gemm_device_of(torch::empty({1}, torch::kCUDA));
  if (device.compute_major != 9 || device.compute_minor != 0) {
    GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0, this GPU has "
                 << device.compute_major << "." << device.compute_minor;
  }
  struct Case {
    torch::ScalarType dtype;
    Precision precision;
  };
  const Case cases[] = {{torch::kFloat32, Precision::kBf16x3},
                        {torch::kFloat32, Precision::kBf16x6},
                        {torch::kFloat32, Precision::kBf16},
                        {torch::kBFloat16, Precision::kIeee},
                        {torch::kFloat16, Precision::kIeee}};
  const std::pair<std::string, std::vector<int64_t>> models[] = {{"w1:gelu*w3|w2", {256, 520, 128}},
                                                                 {"w1:silu*w3", {136, 261}}};
  for (const auto& [spec, widths] : models) {
    for (const Case& c : cases) {
      SCOPED_TRACE(spec + " " + c10::toString(c.dtype) + " " + precision_name(c.precision));
      LayeredModelImpl model(layered_model(spec), widths, at::detail::createCPUGenerator(11));
      model.to(torch::kCUDA, c.dtype);
      model.set_precision(c.precision);
      model.set_gemm_kernel(GemmKernel::kHopper);
      const torch::Tensor x =
          torch::randn({300, widths.front()}, at::detail::createCPUGenerator(12))
              .to(torch::kCUDA, c.dtype);
      torch::NoGradGuard no_grad;
      const torch::Tensor fused = model.forward(x);
      torch::Tensor apart = x;
      for (const LayeredModelImpl::Layer& layer : model.layers()) {
        apart = layer.gate
                    ? layer.linear->forward_with(
                          apart, LayerTerms{layer.gate->forward_without_chain(apart), c10::nullopt})
                    : layer.linear->forward(apart);
      }
      EXPECT_TRUE(torch::equal(fused, apart)) << (fused - apart).abs().max();
      EXPECT_TRUE(torch::equal(model.forward_op(x), fused));
    }
  }
}

// The float32-grade modes run in every Linear of a model: bf16x6 as close to float64 as float32
// is; bf16x3, whose split drops ~2^-17 of each product, within an order of magnitude at these
// short sums (where float32's own rounding is small), far from bf16's ~2^-8.
TEST(LayeredModels, PrecisionsThroughEveryLayer) {
  for (const Precision precision : {Precision::kBf16x3, Precision::kBf16x6, Precision::kBf16}) {
    LayeredModelImpl model(layered_model("w1:silu*w3|w2:gelu|x3"), {512, 384, 256, 512},
                           at::detail::createCPUGenerator(7));
    model.set_precision(precision);
    const torch::Tensor x = torch::rand({9, 512}, at::detail::createCPUGenerator(8));
    torch::NoGradGuard no_grad;
    const torch::Tensor reference = model.reference(x);
    const auto error_of = [&](const torch::Tensor& y) {
      return (y.to(torch::kFloat64) - reference).abs().max().item<double>();
    };
    const double error = error_of(model.forward(x)),
                 float32_error = error_of(model.forward_eager(x));
    // bf16x6 is float32-grade; bf16x3 drops the low parts' product, about 2^-16 of each term
    // (a bound relative to the output's scale: float32's own error depends on the BLAS), and
    // bfloat16 alone is far outside that.
    const double scale = reference.abs().max().item<double>();
    const double bound =
        precision == Precision::kBf16x6 ? 2 * float32_error : std::ldexp(scale, -16);
    EXPECT_EQ(error <= bound, precision != Precision::kBf16)
        << precision_name(precision) << ": " << error << " against a bound of " << bound
        << " (float32's error " << float32_error << ", output scale " << scale << ")";
    EXPECT_GT(model.split_weight_bytes(), 0);
  }
}

// A layered declaration is the model its spec describes, its layers' chains compiled: the same
// keys and parameters, and on the CPU the same bits as the interpreter's kernels through the
// module, the whole-model op (which takes the model's name for a spec) and the program's model
// for `--model NAME` with a file of its keys.
TEST(LayeredDeclarations, RunAsTheirSpecsWithCompiledChains) {
  struct Case {
    std::string name, spec;
    std::vector<int64_t> widths;
  };
  const std::vector<Case> cases = {
      {"test_mlp", "fc1:gelu|fc2:add(shift),gelu(tanh)|fc3", {12, 16, 8, 5}},
      {"test_swiglu", "w1:silu*w3|w2:mish", {12, 16, 7}},
      {"test_chunked_residual", "x+(w13[1]:silu*w13[0]|w2)", {12, 9, 12}},
  };
  testing_support::TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ModelSpec declared = find_model(c.name);
    ASSERT_TRUE(declared.layered());
    for (const ModelSpec& layer : declared.layers) {
      EXPECT_EQ(layer.op_chain(), c.name + "." + layer.linear);
      EXPECT_TRUE(find_chain(layer.op_chain()).compiled);
    }
    const ModelSpec from_spec = layered_model(c.spec);
    EXPECT_EQ(declared.description(), from_spec.description());
    EXPECT_EQ(model_keys(declared), model_keys(from_spec));
    LayeredModelImpl compiled(declared, c.widths, at::detail::createCPUGenerator(5));
    LayeredModelImpl interpreted(from_spec, c.widths, at::detail::createCPUGenerator(5));
    const auto ours = compiled.named_parameters(), theirs = interpreted.named_parameters();
    ASSERT_EQ(ours.keys(), theirs.keys());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::equal(ours[i].value(), theirs[i].value())) << ours[i].key();
    }
    const torch::Tensor x = torch::randn({5, c.widths.front()}, at::detail::createCPUGenerator(6));
    torch::NoGradGuard no_grad;
    const torch::Tensor fused = compiled.forward(x);
    EXPECT_TRUE(torch::equal(fused, interpreted.forward(x)));
    EXPECT_TRUE(torch::equal(compiled.forward_op(x), fused));
    EXPECT_TRUE(torch::allclose(fused, compiled.forward_eager(x), 1e-4, 1e-5));

    c10::Dict<std::string, at::Tensor> file;
    for (const auto& item : theirs) file.insert(item.key(), item.value().detach());
    const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(file));
    Settings settings;
    settings.command = "run";
    settings.weights = dir.file(c.name + ".pt");
    std::ofstream(settings.weights, std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size()));
    const std::shared_ptr<LayeredModelImpl> loaded = build_model(find_model(c.name), settings);
    EXPECT_TRUE(torch::equal(loaded->forward(x), fused));

    // `--model NAME` with a file that carries a chain: taken where it is the declaration's spec
    // (in any spelling), refused with both named otherwise.
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& item : theirs) tensors.emplace_back(item.key(), item.value().detach());
    Settings carrying = settings;
    carrying.weights = dir.file(c.name + "_same.safetensors");
    testing_support::write_safetensors(carrying.weights, tensors,
                                       testing_support::chain_metadata(c.spec, ""));
    EXPECT_NO_THROW(check_carried_chain(declared, carrying));
    carrying.weights = dir.file(c.name + "_other.safetensors");
    const bool residual = c.spec.rfind("x+(", 0) == 0;
    const std::string other = residual ? c.spec.substr(3, c.spec.size() - 4) : "x+(" + c.spec + ")";
    testing_support::write_safetensors(carrying.weights, tensors,
                                       testing_support::chain_metadata(other, ""));
    const std::string refusal =
        message_of<UsageError>([&] { check_carried_chain(declared, carrying); }, "none");
    EXPECT_NE(refusal.find("carries the chain '" + other + "'"), std::string::npos) << refusal;
    EXPECT_NE(refusal.find("not " + c.name + "'s '" + c.spec + "'"), std::string::npos) << refusal;
  }
  // A layered declaration is no one-Linear model.
  EXPECT_THROW(LinearChainImpl(find_model("test_mlp"), 4, 4), std::invalid_argument);
}

}  // namespace
}  // namespace fusedlinear
