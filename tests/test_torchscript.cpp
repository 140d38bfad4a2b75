// A TorchScript module that calls fusedlinear's ops, scripted and saved in Python
// (tests/python/ops_library.py), loaded with torch::jit::load into this program, which links
// the library statically: the op registrations must have survived the link. This is how
// TorchServe and Triton's libtorch backend run such a model with the ops library preloaded.
#include <gtest/gtest.h>
#include <torch/script.h>

#include "modules/loader/torch_file.h"
#include "tests/test_support.h"

namespace fusedlinear {
namespace {

TEST(TorchScript, ModuleCallingTheOpsRunsAsInPython) {
  const std::string folder = FUSEDLINEAR_SCRIPT_DIR;
  if (!testing_support::file_exists(folder + "/mish_mish.ts")) {
    GTEST_SKIP() << "no scripted module in " << folder
                 << " (written by the Python ops test where a matching python3 torch exists)";
  }
  // In the default grad mode, as a server runs it: the module's parameters require grad.
  torch::jit::Module module = torch::jit::load(folder + "/mish_mish.ts");
  const torch::Tensor x = read_tensor(folder + "/mish_mish_ts_input.pt");
  const torch::Tensor want = read_tensor(folder + "/mish_mish_ts_output.pt");
  const torch::Tensor got = module.forward({x}).toTensor().detach();
  EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6))
      << "max abs difference " << (got - want).abs().max().item<double>();
}

TEST(TorchScript, OpsAreFoundThroughTheDispatcher) {
  // What a program that never calls the C++ wrappers sees (the static registrations linked in).
  for (const char* op : {"fusedlinear::epilogue", "fusedlinear::linear_epilogue",
                         "fusedlinear::split_bf16", "fusedlinear::linear_bf16x3",
                         "fusedlinear::split_bf16_three", "fusedlinear::linear_bf16x6"}) {
    EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({op, ""}).has_value()) << op;
  }
}

}  // namespace
}  // namespace fusedlinear
