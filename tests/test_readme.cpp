// README's "Your own model, declared in C++" header, as the README shows it: tests/CMakeLists.txt
// extracts the block at configure time (FUSEDLINEAR_README_MODEL), so a README that does not
// compile fails the build. Here it is compiled with what fusedlinear_add_models instantiates for
// the CPU (the model's spec and its scalar loop), and its functor checked against its float64
// and eager forms.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>

#include FUSEDLINEAR_README_MODEL
#include "kernels/register/register_declarations.h"

namespace fusedlinear {
namespace {

TEST(Readme, OwnModelDeclarationCompilesAndIsTheModelItSays) {
  const ModelSpec spec = layer_spec<example::MyModel>(example::MyModel::kName);
  EXPECT_EQ(spec.name, "my_model");
  EXPECT_EQ(spec.linear, "fc");
  EXPECT_NE(spec.chain.find("squared_relu"), std::string::npos) << spec.chain;
  EXPECT_NE(spec.chain.find("scale"), std::string::npos) << spec.chain;
  EXPECT_TRUE(cpu::scalar::chain_span_at<std::tuple<example::MyModel>>(0));
  const example::SquaredRelu f;
  for (const float x : {-1.5f, -0.0f, 0.0f, 0.5f, 3.0f}) {
    EXPECT_FLOAT_EQ(f(x), float(example::SquaredRelu::reference(x))) << x;
    EXPECT_FLOAT_EQ(example::SquaredRelu::eager(torch::tensor(x)).item<float>(), f(x)) << x;
  }
}

}  // namespace
}  // namespace fusedlinear
