// fusedlinear_pt2 PACKAGE WEIGHTS INPUT WANT [TOLERANCE]: runs an AOTInductor package (.pt2) whose
// graph calls fusedlinear's ops, loaded by AOTIModelPackageLoader in this program, which links the
// ops (a server does the same with the ops library preloaded); tests/python/pytorch2_path.py writes
// one of swish_chain and one of a layered model (the whole-model op). Compares its output with
// PyTorch's (WANT) and times it; with swish_chain's WEIGHTS (not "-"), in turns against
// fusedlinear's own swish_chain module on the same weights, eager and fused. Exit code 0 when the
// package's output is within TOLERANCE (default 1e-6) of PyTorch's (docs/RESULTS.md: PyTorch 2).
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdio>
#include <exception>
#include <string>

#include "app/cli.h"
#include "app/timing.h"
#include "app/tools/check_support.h"
#include "modules/linear_chain.h"
#include "modules/loader/state_dict.h"
#include "modules/loader/torch_file.h"

int main(int argc, char** argv) {
  using namespace fusedlinear;
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: fusedlinear_pt2 PACKAGE WEIGHTS|- INPUT WANT [TOLERANCE]\n");
    return 2;
  }
  try {
    const double tolerance = argc == 6 ? parse_tolerance("TOLERANCE", argv[5]) : 1e-6;
    torch::NoGradGuard no_grad;
    const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
    torch::inductor::AOTIModelPackageLoader package(argv[1]);
    const torch::Tensor x = read_tensor(argv[3]).to(device);
    const torch::Tensor want = read_tensor(argv[4]);
    const torch::Tensor got = package.run({x})[0].cpu();
    const double diff = max_abs_difference(got, want);
    if (std::string(argv[2]) == "-") {  // no module of ours to time it against
      const auto times = time_interleaved(device, 10, 50, {[&](int) { package.run({x}); }});
      std::printf(
          "AOTInductor package on %s, %s input: max abs difference from PyTorch %.3g; "
          "median %.1f us\n",
          device.str().c_str(), c10::str(x.sizes()).c_str(), diff, times[0].median_us);
      return diff <= tolerance ? 0 : 1;
    }
    auto model = make_model("swish_chain", x.size(-1), want.size(-1), uint64_t{0});
    load_state_dict(*model, argv[2]);
    model->to(device);
    const double fused_diff = max_abs_difference(model->forward(x), want);
    const auto times =
        time_interleaved(device, 10, 50,
                         {[&](int) { package.run({x}); }, [&](int) { model->forward_eager(x); },
                          [&](int) { model->forward(x); }});
    std::printf(
        "AOTInductor package on %s, %s input: max abs difference from PyTorch %.3g "
        "(fusedlinear's fused module: %.3g)\n",
        device.str().c_str(), c10::str(x.sizes()).c_str(), diff, fused_diff);
    std::printf("median us: package %.1f, fusedlinear eager %.1f, fusedlinear fused %.1f\n",
                times[0].median_us, times[1].median_us, times[2].median_us);
    return diff <= tolerance ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedlinear_pt2: error: %s\n", error_line(e).c_str());
    return 2;
  }
}
