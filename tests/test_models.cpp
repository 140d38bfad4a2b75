// The modules (LinearChain, one per registered model and for chain specs): state-dict keys,
// initialisation, fused vs eager forward, and the committed Python fixtures (weights/fixtures,
// written by weights/export.py).
#include <gtest/gtest.h>

#include <algorithm>

#include "modules/layered_model.h"
#include "modules/linear_chain.h"
#include "modules/loader/state_dict.h"
#include "modules/loader/torch_file.h"
#include "tests/test_support.h"

namespace fusedlinear {
namespace {

const std::string kFixtures = std::string(FUSEDLINEAR_SOURCE_DIR) + "/weights/fixtures/";

std::vector<std::string> keys(torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& item : m.named_parameters()) out.push_back(item.key());
  for (const auto& item : m.named_buffers()) out.push_back(item.key());
  return out;
}

// Keys and their order as Python's state_dict() lists them (a module's own parameters first).
TEST(Models, StateDictKeysAndShapesAreThePythonOnes) {
  auto swish = make_model("swish_chain", 64, 48, 0);
  EXPECT_EQ(keys(*swish), (std::vector<std::string>{"add_value", "matmul.weight", "matmul.bias"}));
  auto mish = make_model("mish_mish", 64, 48, 0);
  EXPECT_EQ(keys(*mish), (std::vector<std::string>{"linear.weight", "linear.bias"}));
  for (auto* m : {swish.get(), mish.get()}) {
    EXPECT_EQ(m->linear()->weight.sizes(), (torch::IntArrayRef{48, 64}));
    EXPECT_EQ(m->linear()->bias.sizes(), (torch::IntArrayRef{48}));
    EXPECT_EQ(m->in_features(), 64);
    EXPECT_EQ(m->out_features(), 48);
  }
  EXPECT_THROW(make_model("mlp", 4, 4, 0), std::invalid_argument);
}

// The registry is the one list: names, constructors and keys agree, and an unknown name is
// refused with the known ones.
TEST(Models, RegistryIsTheOnePlace) {
  const std::vector<std::string> names = model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "swish_chain"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "mish_mish"), names.end());
  for (const auto& info : registered_models()) {
    EXPECT_EQ(info.description().rfind("Linear -> ", 0), 0u) << info.name;
    EXPECT_TRUE(info.compiled) << info.name;
    auto model = make_model(info.name, 6, 5, uint64_t{1});
    EXPECT_EQ(model->in_features(), 6);
    EXPECT_EQ(model->out_features(), 5);
    EXPECT_EQ(model_keys(info.name), keys(*model)) << info.name;
  }
  try {
    make_model("mlp", 4, 4, uint64_t{0});
    ADD_FAILURE() << "an unknown model was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of: swish_chain, mish_mish"),
              std::string::npos)
        << e.what();
  }
}

TEST(Models, InitialisedLikePyTorch) {
  const int64_t in = 400, out = 300;
  auto m = make_model("swish_chain", in, out, 123);
  const double bound = 1.0 / std::sqrt(double(in));
  for (const torch::Tensor& t : {m->linear()->weight, m->linear()->bias}) {
    EXPECT_LE(t.abs().max().item<double>(), bound);
    EXPECT_GT(t.abs().max().item<double>(), 0.95 * bound);  // uniform: fills the range
    EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.1 * bound);
  }
  EXPECT_NEAR(m->param("add_value").mean().item<double>(), 0.0, 0.2);  // standard normal
  EXPECT_NEAR(m->param("add_value").std().item<double>(), 1.0, 0.15);
  // Seeded: the same seed gives the same parameters, another seed others.
  auto again = make_model("swish_chain", in, out, 123);
  auto other = make_model("swish_chain", in, out, 124);
  EXPECT_TRUE(torch::equal(m->linear()->weight, again->linear()->weight));
  EXPECT_FALSE(torch::equal(m->linear()->weight, other->linear()->weight));
}

// make_model draws from a generator of its own the very values Python's
// `torch.manual_seed(seed); Model(in, out)` draws from the global one (what the fixtures and
// weights/export.py rely on), and leaves the global generator alone.
TEST(Models, SeededLikePythonWithoutTouchingTheGlobalGenerator) {
  torch::NoGradGuard no_grad;
  for (const uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{123}, uint64_t{1} << 40}) {
    for (const auto& [in, out] :
         {std::pair<int64_t, int64_t>{64, 48}, {3, 1000}, {1, 1}, {37, 29}}) {
      // What the constructors did before they took a generator: nn.Linear, then randn.
      torch::manual_seed(seed);
      const torch::nn::Linear linear(in, out);
      const torch::Tensor add_value = torch::randn({out});
      torch::manual_seed(seed);
      const torch::nn::Linear mish_linear(in, out);

      torch::manual_seed(7);
      const torch::Tensor untouched = torch::rand({4});
      torch::manual_seed(7);
      auto swish = make_model("swish_chain", in, out, seed);
      auto mish = make_model("mish_mish", in, out, seed);
      EXPECT_TRUE(torch::equal(torch::rand({4}), untouched)) << "the global generator was used";

      const std::string at =
          "seed " + std::to_string(seed) + ", " + std::to_string(in) + " -> " + std::to_string(out);
      EXPECT_TRUE(torch::equal(swish->linear()->weight, linear->weight)) << at;
      EXPECT_TRUE(torch::equal(swish->linear()->bias, linear->bias)) << at;
      EXPECT_TRUE(torch::equal(swish->param("add_value"), add_value)) << at;
      EXPECT_TRUE(torch::equal(mish->linear()->weight, mish_linear->weight)) << at;
      EXPECT_TRUE(torch::equal(mish->linear()->bias, mish_linear->bias)) << at;
      EXPECT_EQ(swish->linear()->options.in_features(), in);
      EXPECT_EQ(swish->linear()->options.out_features(), out);
    }
  }
  // A caller's generator is left where the draws end: what follows continues the stream.
  at::Generator stream = at::detail::createCPUGenerator(5);
  make_model("mish_mish", 16, 8, stream);
  const torch::Tensor next = torch::rand({3}, stream);
  torch::manual_seed(5);
  LinearChain python_order(find_model("mish_mish"), 16, 8);
  EXPECT_TRUE(torch::equal(next, torch::rand({3})));
}

// A chain given at run time: the module Python's would be, its Linear at a dotted path (an
// nn.Sequential's "block.0"), its parameters under their keys, before the Linear's, as Python
// orders its own parameters before a child's; one-element parameters where the spec says.
TEST(Models, RuntimeChainsHaveThePythonKeys) {
  torch::NoGradGuard no_grad;
  ModelSpec spec = runtime_model("add(shift),softplus(2,10),mul(scale),elu(0.5)", "block.0");
  spec.param_shapes["scale"] = {};
  auto model = make_model(spec, 12, 7, 3);
  EXPECT_EQ(keys(*model),
            (std::vector<std::string>{"shift", "scale", "block.0.weight", "block.0.bias"}));
  EXPECT_EQ(model->param("shift").sizes(), (torch::IntArrayRef{7}));
  EXPECT_EQ(model->param("scale").dim(), 0);
  EXPECT_FALSE(spec.compiled);
  EXPECT_EQ(spec.name, "add(shift),softplus(2,10),mul(scale),elu(0.5)");
  const torch::Tensor x = torch::rand({5, 12});
  EXPECT_TRUE(torch::allclose(model->forward(x), model->forward_eager(x), 1e-5, 1e-5));
  EXPECT_TRUE(
      torch::allclose(model->forward(x).to(torch::kFloat64), model->reference(x), 1e-5, 1e-5));
  ModelSpec nobias = runtime_model("relu", "fc", /*linear_bias=*/false);
  EXPECT_EQ(keys(*make_model(nobias, 3, 2, 0)), (std::vector<std::string>{"fc.weight"}));
  EXPECT_THROW(runtime_model("relu,bogus"), ChainSpecError);
}

// A chain parameter naming a Linear's own tensor is that tensor, as `self.fc.bias` is in Python:
// no second parameter (or submodule) of that name; a layered model's chain may name another
// Linear's bias. A weight is refused with both shapes: a chain parameter broadcasts along the
// features.
TEST(Models, ChainParametersMayBeALinearsBias) {
  torch::NoGradGuard no_grad;
  auto model = make_model(runtime_model("tanh,mul(fc.bias)", "fc"), 8, 6, 1);
  EXPECT_EQ(keys(*model), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_TRUE(model->param("fc.bias").is_same(model->linear()->bias));
  const torch::Tensor x = torch::rand({5, 8});
  const torch::Tensor& b = model->linear()->bias;
  const torch::Tensor want = torch::tanh(torch::addmm(b, x, model->linear()->weight.t())) * b;
  EXPECT_TRUE(torch::allclose(model->forward_eager(x), want, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(model->forward(x), want, 1e-5, 1e-5));
  // Loading a state dict and converting the model keep the term the bias.
  model->linear()->bias.fill_(2);
  model->to(torch::kFloat64);
  EXPECT_TRUE(model->slot_params().front().is_same(model->linear()->bias));
  EXPECT_EQ(model->slot_params().front().scalar_type(), torch::kFloat64);

  const std::string refused = testing_support::message_of<std::invalid_argument>(
      [] { make_model(runtime_model("mul(fc.weight)", "fc"), 8, 6, 1); });
  EXPECT_NE(refused.find("'fc.weight' is Linear fc's weight, of shape [6, 8]"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("expected [6], [] or [1]"), std::string::npos) << refused;
  EXPECT_NE(testing_support::message_of<std::invalid_argument>([] {
              make_model(runtime_model("add(fc.bias)", "fc", /*linear_bias=*/false), 8, 6, 1);
            }).find("names a tensor of Linear fc, which holds a weight and no bias"),
            std::string::npos);

  LayeredModel layered(layered_model("fc1:add(fc2.bias),relu|fc2:add(fc1.bias)"),
                       std::vector<int64_t>{4, 6, 6}, at::detail::createCPUGenerator(2));
  EXPECT_EQ(keys(*layered),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  const auto& fc1 = layered->layers()[0].linear->linear();
  const auto& fc2 = layered->layers()[1].linear->linear();
  const torch::Tensor x4 = torch::rand({3, 4});
  const torch::Tensor h = torch::relu(torch::addmm(fc1->bias, x4, fc1->weight.t()) + fc2->bias);
  const torch::Tensor y = torch::addmm(fc2->bias, h, fc2->weight.t()) + fc1->bias;
  EXPECT_TRUE(torch::allclose(layered->forward_eager(x4), y, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(layered->forward(x4), y, 1e-5, 1e-5));
  const std::string wide = testing_support::message_of<std::invalid_argument>([] {
    LayeredModel(layered_model("fc1:add(fc2.bias)|fc2"), std::vector<int64_t>{4, 6, 3});
  });
  EXPECT_NE(wide.find("'fc2.bias' is Linear fc2's bias, of shape [3]"), std::string::npos) << wide;
  EXPECT_NE(wide.find("expected [6], [] or [1]"), std::string::npos) << wide;
}

TEST(Models, FusedForwardMatchesEagerForward) {
  torch::NoGradGuard no_grad;
  for (const auto& name : model_names()) {
    auto model = make_model(name, 96, 80, 3);
    const torch::Tensor x = torch::rand({17, 96});
    EXPECT_TRUE(torch::allclose(model->forward(x), model->forward_eager(x), 1e-5, 1e-5)) << name;
    // Leading batch dimensions pass through, as nn.Linear allows.
    const torch::Tensor x3 = torch::rand({2, 5, 96});
    EXPECT_EQ(model->forward(x3).sizes(), (torch::IntArrayRef{2, 5, 80}));
    EXPECT_TRUE(torch::allclose(model->forward(x3), model->forward_eager(x3), 1e-5, 1e-5));
  }
}

// The input-major weight layout changes how W is stored, not what it is: same state dict
// (keys, shapes, values), same outputs, kept by .to() and by loading a state dict into it.
TEST(Models, InputMajorWeightIsTheSameWeight) {
  torch::NoGradGuard no_grad;
  for (const auto& name : model_names()) {
    auto model = make_model(name, 24, 40, 5);
    auto reference = make_model(name, 24, 40, 5);
    const torch::Tensor x = torch::rand({9, 24});
    const torch::Tensor before = model->forward(x);
    EXPECT_EQ(model->weight_layout(), WeightLayout::kOutputMajor);
    model->store_weight_in(WeightLayout::kInputMajor);
    EXPECT_EQ(model->weight_layout(), WeightLayout::kInputMajor);
    EXPECT_EQ(model->linear()->weight.sizes(), (torch::IntArrayRef{40, 24}));
    EXPECT_TRUE(model->linear()->weight.t().is_contiguous());
    const auto params = model->named_parameters(), want = reference->named_parameters();
    ASSERT_EQ(params.keys(), want.keys());
    for (const auto& p : params) EXPECT_TRUE(torch::equal(p.value(), want[p.key()])) << p.key();
    EXPECT_TRUE(torch::allclose(model->forward(x), before, 1e-6, 1e-6)) << name;
    EXPECT_TRUE(torch::allclose(model->forward_eager(x), before, 1e-5, 1e-5)) << name;
    model->to(torch::kFloat64);
    EXPECT_EQ(model->weight_layout(), WeightLayout::kInputMajor) << "after .to()";
    model->to(torch::kFloat32);
    NamedTensors file;
    for (const auto& p : make_model(name, 24, 40, 6)->named_parameters()) {
      file.tensors.emplace_back(p.key(), p.value().clone());
    }
    apply_state_dict(*model, file, "seed-6 parameters", /*strict=*/true);
    EXPECT_EQ(model->weight_layout(), WeightLayout::kInputMajor) << "after loading a state dict";
    // Every loaded value is in place, the weight's included.
    for (const auto& [key, value] : file.tensors) {
      EXPECT_TRUE(torch::equal(model->named_parameters()[key], value)) << name << " " << key;
    }
    const torch::Tensor loaded_weight = model->linear()->weight.clone();
    // weight_in gives W itself in its own layout, a copy in the other; back to nn.Linear's.
    const torch::Tensor weight = model->linear()->weight;
    EXPECT_EQ(model->weight_in(WeightLayout::kInputMajor).data_ptr(), weight.data_ptr());
    const torch::Tensor output_major = model->weight_in(WeightLayout::kOutputMajor);
    EXPECT_NE(output_major.data_ptr(), weight.data_ptr());
    model->store_weight(output_major);
    EXPECT_EQ(model->weight_layout(), WeightLayout::kOutputMajor);
    EXPECT_TRUE(model->linear()->weight.is_contiguous());
    EXPECT_TRUE(torch::equal(model->linear()->weight, loaded_weight)) << name;
  }
}

// A weight in neither layout (here a column slice) is not output-major for weight_in: asked for
// output-major, it gives a contiguous copy with the same values.
TEST(Models, WeightInOutputMajorIsContiguous) {
  torch::NoGradGuard no_grad;
  auto model = make_model("mish_mish", 24, 40, 5);
  model->store_weight(torch::randn({40, 48}).narrow(1, 0, 24));
  ASSERT_FALSE(model->linear()->weight.is_contiguous());
  const torch::Tensor output_major = model->weight_in(WeightLayout::kOutputMajor);
  EXPECT_TRUE(output_major.is_contiguous());
  EXPECT_TRUE(torch::equal(output_major, model->linear()->weight));
}

TEST(Models, StoreWeightRejectsAnotherShape) {
  auto model = make_model("mish_mish", 24, 40, 5);
  try {
    model->store_weight(torch::zeros({24, 40}));
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("store_weight: expected a [40, 24] float tensor on cpu "
                                         "(the weight's), got [24, 40] float on cpu"),
              std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_EQ(model->linear()->weight.sizes(), (torch::IntArrayRef{40, 24}));
}

// Both modules reproduce PyTorch's own output for the committed fixtures within 1e-4.
TEST(Models, ReproduceThePythonFixtures) {
  torch::NoGradGuard no_grad;
  for (const auto& name : model_names()) {
    if (!testing_support::file_exists(kFixtures + name + ".pt")) continue;  // the reference models'
    auto model = make_model(name, 64, 48, 0);
    const auto notices = load_state_dict(*model, kFixtures + name + ".pt");
    const torch::Tensor x = read_tensor(kFixtures + name + "_input.pt");
    const torch::Tensor want = read_tensor(kFixtures + name + "_output.pt");
    ASSERT_EQ(x.sizes(), (torch::IntArrayRef{5, 64}));
    EXPECT_TRUE(torch::allclose(model->forward(x), want, 1e-4, 1e-4)) << name << " fused";
    EXPECT_TRUE(torch::allclose(model->forward_eager(x), want, 1e-4, 1e-4)) << name << " eager";
    if (torch::cuda::is_available()) {
      model->to(torch::kCUDA);
      EXPECT_TRUE(torch::allclose(model->forward(x.cuda()).cpu(), want, 1e-4, 1e-4))
          << name << " fused on CUDA";
    }
  }
}

// Prefixes of training wrappers: DataParallel's "module." and torch.compile's "_orig_mod.",
// nested in any order, when every key has them; an attribute prefix (Lightning's "model.") only
// when removing it makes the keys exactly one model's.
TEST(Models, WrapperAndAttributePrefixes) {
  using Keys = std::vector<std::string>;
  Keys keys = {"module._orig_mod.module.a.w", "module._orig_mod.module.b"};
  EXPECT_EQ(strip_wrapper_prefixes(keys).size(), 3u);
  EXPECT_EQ(keys, (Keys{"a.w", "b"}));
  for (const Keys& kept :
       {Keys{"module.a", "b"}, Keys{"module."}, Keys{"_orig_mod.x", "module.y"}}) {
    keys = kept;
    EXPECT_TRUE(strip_wrapper_prefixes(keys).empty());
    EXPECT_EQ(keys, kept);
  }

  const auto file_with = [](const Keys& names) {
    NamedTensors file;
    for (const auto& name : names) file.tensors.emplace_back(name, torch::zeros({1}));
    return file;
  };
  const auto keys_of = [](const NamedTensors& file) {
    Keys out;
    for (const auto& item : file.tensors) out.push_back(item.first);
    return out;
  };
  const std::vector<ModelKeys> models = {{"mish", {"linear.weight", "linear.bias"}},
                                         {"swish", {"matmul.weight", "matmul.bias", "add_value"}}};
  NamedTensors lightning =
      file_with({"model._orig_mod.linear.weight", "model._orig_mod.linear.bias"});
  EXPECT_EQ(strip_attribute_prefix(lightning, models), "model.");
  EXPECT_EQ(keys_of(lightning), (Keys{"linear.weight", "linear.bias"}));
  EXPECT_EQ(lightning.notices.size(), 2u);  // the attribute, then torch.compile's prefix
  // Two components of attributes, removed together.
  NamedTensors nested =
      file_with({"net.body.matmul.weight", "net.body.matmul.bias", "net.body.add_value"});
  EXPECT_EQ(strip_attribute_prefix(nested, models), "net.body.");
  // Nothing to remove, no model matched exactly, or two matched: the keys stay.
  for (const Keys& kept : {Keys{"linear.weight", "linear.bias"},
                           Keys{"model.linear.weight", "model.linear.bias", "model.extra"},
                           Keys{"model.linear.weight"}}) {
    NamedTensors file = file_with(kept);
    EXPECT_EQ(strip_attribute_prefix(file, models), "");
    EXPECT_EQ(keys_of(file), kept);
    EXPECT_TRUE(file.notices.empty());
  }
  NamedTensors twice = file_with({"model.linear.weight", "model.linear.bias"});
  EXPECT_EQ(strip_attribute_prefix(twice, {models[0], {"copy", models[0].second}}), "");

  EXPECT_EQ(
      strip_prefix_hint(file_with({"model.linear.weight", "model.linear.bias", "loss.w"}), models),
      " (mish's keys are all there under the prefix 'model.'; pass --strip-prefix model. "
      "and --no-strict)");
  EXPECT_EQ(strip_prefix_hint(file_with({"enc.l.w", "enc.l.b"}), models),
            " (every key starts with 'enc.l.'; if a wrapper added it, pass --strip-prefix enc.l.)");
  EXPECT_EQ(strip_prefix_hint(file_with({"linear.weight", "matmul.bias"}), models), "");
  // The common prefix is of whole components, and never a whole key.
  EXPECT_EQ(strip_prefix_hint(file_with({"enc.ab", "enc.ac"}), models).find("'enc.a"),
            std::string::npos);
  EXPECT_EQ(strip_prefix_hint(file_with({"enc.a", "enc.a.b"}), models).find("'enc.a.'"),
            std::string::npos);
}

TEST(Models, LoadErrorsNameTheFileAndTheProblem) {
  const std::string path = kFixtures + "swish_chain.pt";
  auto expect_load_error = [&](torch::nn::Module& m, const std::string& expected,
                               bool strict = true) {
    try {
      apply_state_dict(m, read_state_dict(path), path, strict);
      ADD_FAILURE() << "loaded; expected an error containing: " << expected;
    } catch (const LoadError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(expected), std::string::npos) << message;
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    }
  };
  auto wrong_model = make_model("mish_mish", 64, 48, 0);
  expect_load_error(*wrong_model,
                    "missing key(s) linear.weight, linear.bias; the file has add_value, "
                    "matmul.weight, matmul.bias");
  auto wrong_shape = make_model("swish_chain", 40, 48, 0);
  expect_load_error(*wrong_shape, "matmul.weight has shape [48, 64], expected [48, 40]");
  expect_load_error(*wrong_shape, "expected [48, 40]", /*strict=*/false);

  // Unexpected keys: strict refuses and lists them; non-strict loads the rest and says so.
  NamedTensors extra = read_state_dict(path);
  extra.tensors.emplace_back("scale", torch::ones({1}));
  auto model = make_model("swish_chain", 64, 48, 0);
  EXPECT_THROW(apply_state_dict(*model, extra, "extra.pt"), LoadError);
  const auto notices = apply_state_dict(*model, extra, "extra.pt", /*strict=*/false);
  ASSERT_FALSE(notices.empty());
  EXPECT_NE(notices.back().find("ignored from extra.pt: scale"), std::string::npos);

  // A failed load leaves the model as it was.
  auto untouched = make_model("swish_chain", 64, 48, 9);
  const torch::Tensor before = untouched->linear()->weight.clone();
  NamedTensors bad = read_state_dict(path);
  for (auto& [key, tensor] : bad.tensors) {
    if (key == "add_value") tensor = torch::ones({3});  // the wrong shape
  }
  EXPECT_THROW(apply_state_dict(*untouched, bad, "bad.pt"), LoadError);
  EXPECT_TRUE(torch::equal(untouched->linear()->weight, before));
}

TEST(Models, OtherDtypesAreConvertedWithOneNotice) {
  NamedTensors file = read_state_dict(kFixtures + "mish_mish.pt");
  for (auto& item : file.tensors) item.second = item.second.to(torch::kFloat64);
  auto model = make_model("mish_mish", 64, 48, 0);
  const auto notices = apply_state_dict(*model, file, "f64.pt");
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("converted dtype: linear.weight Double->Float, linear.bias "
                            "Double->Float"),
            std::string::npos)
      << notices[0];
  EXPECT_EQ(model->linear()->weight.scalar_type(), torch::kFloat32);
}

}  // namespace
}  // namespace fusedlinear
