// `fusedlinear run`: the fused forward of saved weights on a saved input, saved for Python.
#include <iostream>

#include "app/cli.h"
#include "app/memory.h"
#include "app/model_setup.h"
#include "app/report.h"
#include "modules/loader/torch_file.h"

namespace fusedlinear {

int run_run(const Settings& settings) {
  if (settings.weights.empty()) throw UsageError("run needs --weights FILE");
  if (settings.input.empty()) throw UsageError("run needs --input FILE");
  if (settings.output.empty()) throw UsageError("run needs --output FILE");
  if (settings.models.size() != 1) {
    throw UsageError("run takes one model: --model NAME or --chain SPEC");
  }
  torch::NoGradGuard no_grad;
  const ModelSpec& spec = settings.models.front();
  const std::string& name = spec.name;
  at::Generator stream;
  auto model = build_model(spec, settings, &stream);
  const torch::Tensor x = build_input(settings, model->in_features(), stream);
  configure_fused(*model, settings.precisions.front(), settings.gemm_kernels.front(), settings);
  const std::string layout = choose_weight_layout(*model, x);
  torch::Tensor y;
  run_in_context(name, settings, [&] { y = model->forward(x); });
  write_for_option("--output", [&] { write_tensor(y.cpu(), settings.output, settings.overwrite); });
  std::cout << "fusedlinear run: " << name << " (" << settings.model_source << ", "
            << settings.weights << ") on " << x.sizes() << " " << dtype_name(settings.dtype) << ", "
            << settings.device << " -> " << settings.output << " " << y.sizes() << "\n";
  const MlpChoice mlp = model->mlp_choice(x);
  if (mlp.fused) {
    std::cout << "fused GEMM: " << model->gemm_description(x) << " (" << mlp.reason << ")\n";
  }
  for (LinearChainImpl* linear : mlp.fused ? std::vector<LinearChainImpl*>() : model->linears()) {
    const GemmPlan plan = linear->gemm_plan(x);
    std::cout << "fused GEMM" << (spec.layered() ? " " + linear->spec().linear : "") << ": "
              << plan.description << " (" << plan.reason << ")\n";
  }
  if (x.is_cuda()) std::cout << "fused path: " << layout << "\n";
  return 0;
}

}  // namespace fusedlinear
