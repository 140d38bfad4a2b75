// The rules for state-dict key names (modules/loader/key_names.h), which the loader and the
// program share: a Linear's keys and paths, a bare nn.Linear's, and the prefixes that come off.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "modules/loader/key_names.h"

namespace fusedlinear {
namespace {

using Keys = std::vector<std::string>;

TEST(KeyNames, LinearKeysAndPathsGoBothWays) {
  EXPECT_EQ(weight_key("fc1"), "fc1.weight");
  EXPECT_EQ(bias_key("block.0"), "block.0.bias");
  EXPECT_EQ(weight_key(""), "weight");  // a bare nn.Linear's
  EXPECT_EQ(bias_key(""), "bias");
  EXPECT_EQ(weight_path("fc1.weight"), "fc1");
  EXPECT_EQ(weight_path("block.0.weight"), "block.0");
  EXPECT_EQ(weight_path("weight"), "");
  EXPECT_FALSE(weight_path("fc1.bias").has_value());
  EXPECT_FALSE(weight_path("xweight").has_value());
  EXPECT_FALSE(weight_path(".weight").has_value());
  for (const std::string path : {"", "fc1", "model.layers.3.mlp"}) {
    EXPECT_EQ(weight_path(weight_key(path)), path);
  }
}

TEST(KeyNames, BareLinearIsWeightAndOptionalBiasOnly) {
  EXPECT_TRUE(is_bare_linear({"weight", "bias"}));
  EXPECT_TRUE(is_bare_linear({"bias", "weight"}));
  EXPECT_TRUE(is_bare_linear({"weight"}));
  EXPECT_FALSE(is_bare_linear({"bias"}));
  EXPECT_FALSE(is_bare_linear({}));
  EXPECT_FALSE(is_bare_linear({"weight", "bias", "scale"}));
  EXPECT_FALSE(is_bare_linear({"linear.weight", "linear.bias"}));
}

TEST(KeyNames, GivenPrefixComesOffWholeComponents) {
  EXPECT_EQ(as_key_prefix("model"), "model.");
  EXPECT_EQ(as_key_prefix("model."), "model.");
  EXPECT_EQ(as_key_prefix(""), "");
  Keys keys = {"model.fc.weight", "model.fc.bias", "model.", "head.weight"};
  EXPECT_EQ(strip_key_prefix(keys, "model."), 2u);  // "model." alone is a whole key: kept
  EXPECT_EQ(keys, (Keys{"fc.weight", "fc.bias", "model.", "head.weight"}));
  EXPECT_TRUE(under_prefix("a.b", "a."));
  EXPECT_FALSE(under_prefix("a.", "a."));
}

TEST(KeyNames, CommonPrefixIsWholeComponentsAndNeverAWholeKey) {
  EXPECT_EQ(common_key_prefix({"model.fc1.weight", "model.fc2.weight"}), "model.");
  EXPECT_EQ(common_key_prefix({"a.b.c", "a.b.d"}), "a.b.");
  EXPECT_EQ(common_key_prefix({"fc1.weight", "fc2.weight"}), "");  // "fc" is no component
  EXPECT_EQ(common_key_prefix({"a.b", "a."}), "");
  EXPECT_EQ(common_key_prefix({}), "");
}

TEST(KeyNames, WrapperPrefixesComeOffNestedWithANoticeEach) {
  Keys keys = {"module._orig_mod.module.fc.weight", "module._orig_mod.module.fc.bias"};
  EXPECT_EQ(strip_wrapper_prefixes(keys).size(), 3u);
  EXPECT_EQ(keys, (Keys{"fc.weight", "fc.bias"}));
  Keys mixed = {"module.fc.weight", "fc.bias"};  // not every key: left alone
  EXPECT_TRUE(strip_wrapper_prefixes(mixed).empty());
  Keys bare = {"module."};  // nothing after it
  EXPECT_TRUE(strip_wrapper_prefixes(bare).empty());
}

TEST(KeyNames, AttributePrefixOnlyWhereItLeavesExactlyOneModelsKeys) {
  const std::vector<ModelKeys> models = {{"a", {"linear.weight", "linear.bias"}},
                                         {"b", {"matmul.weight", "matmul.bias", "add_value"}}};
  const auto lightning = attribute_prefix({"model.linear.weight", "model.linear.bias"}, models);
  ASSERT_TRUE(lightning.has_value());
  EXPECT_EQ(lightning->prefix, "model.");
  EXPECT_EQ(lightning->keys, (Keys{"linear.weight", "linear.bias"}));
  ASSERT_EQ(lightning->notices.size(), 1u);
  EXPECT_NE(lightning->notices[0].find("a's"), std::string::npos);
  // A wrapper under the attribute: both come off, a notice each.
  const auto wrapped =
      attribute_prefix({"net.module.linear.weight", "net.module.linear.bias"}, models);
  ASSERT_TRUE(wrapped.has_value());
  EXPECT_EQ(wrapped->keys, (Keys{"linear.weight", "linear.bias"}));
  EXPECT_EQ(wrapped->notices.size(), 2u);
  EXPECT_FALSE(attribute_prefix({"linear.weight", "linear.bias"}, models));  // fits as it is
  EXPECT_FALSE(attribute_prefix({"model.linear.weight", "model.extra"}, models));
}

TEST(KeyNames, StripPrefixHintNamesTheModelsPrefixElseTheCommonOne) {
  const std::vector<ModelKeys> models = {{"a", {"linear.weight", "linear.bias"}}};
  EXPECT_EQ(strip_prefix_hint({"enc.linear.weight", "enc.linear.bias", "head.weight"}, models),
            " (a's keys are all there under the prefix 'enc.'; pass --strip-prefix enc. and "
            "--no-strict)");
  EXPECT_EQ(strip_prefix_hint({"x.fc.weight", "x.fc.bias"}, models),
            " (every key starts with 'x.fc.'; if a wrapper added it, pass --strip-prefix x.fc.)");
  EXPECT_EQ(strip_prefix_hint({"weight", "bias"}, models), "");
  // A file with one layer of a layered model: its prefix is the layer's, not a wrapper's.
  const std::vector<ModelKeys> layered = {
      {"b", {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}}};
  EXPECT_EQ(strip_prefix_hint({"fc1.weight", "fc1.bias"}, layered), "");
}

}  // namespace
}  // namespace fusedlinear
