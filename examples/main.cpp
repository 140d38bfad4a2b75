// fusedlinear_example [fixtures folder]: what a project of its own does with fusedlinear.
//   1. Loads a state dict saved from Python (torch.save(model.state_dict(), path)) into MishMish
//      and checks its fused forward against the output PyTorch saved beside it: on the CPU, and
//      on the GPU in float32 and with bf16x3 GEMMs where there is one.
//   2. Runs its own model, ReluSigmoid (relu_sigmoid.h), fused against eager, on the same devices.
// Exit code 0 when every check passes.
#include <fusedlinear/models.h>
#include <fusedlinear/state_dict.h>
#include <fusedlinear/torch_file.h>
#include <torch/torch.h>

#include <iostream>
#include <string>

#include "relu_sigmoid.h"

namespace {

bool check(const std::string& what, const torch::Tensor& got, const torch::Tensor& want,
           double tolerance) {
  const double diff =
      (got.cpu().to(torch::kFloat64) - want.cpu().to(torch::kFloat64)).abs().max().item<double>();
  const bool ok = torch::allclose(got.cpu(), want.cpu(), tolerance, tolerance);
  std::cout << (ok ? "ok    " : "FAIL  ") << what << ": max abs difference " << diff << "\n";
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fixtures = argc > 1 ? argv[1] : "weights/fixtures";
  torch::NoGradGuard no_grad;  // the fused ops are inference-only
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA);
  bool ok = true;
  try {
    // 1. A model and its weights from Python.
    fusedlinear::MishMish model(64, 48);
    for (const std::string& note :
         fusedlinear::load_state_dict(*model, fixtures + "/mish_mish.pt")) {
      std::cout << "note: " << note << "\n";
    }
    const torch::Tensor x = fusedlinear::read_tensor(fixtures + "/mish_mish_input.pt");
    const torch::Tensor want = fusedlinear::read_tensor(fixtures + "/mish_mish_output.pt");
    for (const auto& device : devices) {
      model->to(device);
      ok &= check("MishMish fused on " + device.str(), model->forward(x.to(device)), want, 1e-4);
      if (device.is_cuda()) {
        model->set_precision(fusedlinear::Precision::kBf16x3);
        ok &=
            check("MishMish fused on cuda, bf16x3 GEMM", model->forward(x.to(device)), want, 1e-4);
        model->set_precision(fusedlinear::Precision::kIeee);
      }
    }

    // 2. A model of this project's own.
    torch::manual_seed(0);
    example::ReluSigmoid own(96, 80);
    const torch::Tensor input = torch::randn({33, 96});
    for (const auto& device : devices) {
      own->to(device);
      const torch::Tensor x_dev = input.to(device);
      ok &= check("ReluSigmoid fused vs eager on " + device.str(), own->forward(x_dev),
                  own->forward_eager(x_dev), 1e-5);
    }
  } catch (const std::exception& e) {
    std::cerr << "fusedlinear_example: error: " << e.what() << "\n";
    return 2;
  }
  std::cout << (ok ? "PASS" : "FAIL") << "\n";
  return ok ? 0 : 1;
}
