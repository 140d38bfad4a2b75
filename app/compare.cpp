// `fusedlinear compare`: for each model, eager and fused forward on the same input; their
// difference, each one's error against a float64 evaluation, and their timings.
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/report.h"
#include "app/timing.h"

namespace fusedlinear {
namespace {

struct ModelResult {
  std::string name;
  double max_abs_err = 0, max_rel_err = 0;
  bool within_tolerance = false;
  double eager_err_vs_fp64 = 0, fused_err_vs_fp64 = 0;
  std::string weight_layout;  // the fused model's (choose_weight_layout)
  TimingStats eager, fused;
  NonFinite non_finite;                            // NaN and inf in the two outputs
  std::vector<int64_t> input_shape, output_shape;  // what ran
};

ModelResult compare_model(const std::string& name, const Settings& settings) {
  torch::NoGradGuard no_grad;
  // Two copies of the model, the same parameters: eager's with the weight as nn.Linear lays it
  // out, the fused one's laid out for its GEMM (choose_weight_layout).
  at::Generator stream;
  const auto model = build_model(name, settings, &stream);
  const auto fused_model = build_model(name, settings);
  const torch::Tensor x = build_input(settings, model->in_features(), stream);

  ModelResult r;
  r.name = name;
  r.weight_layout = choose_weight_layout(*fused_model, x);
  torch::Tensor eager, fused;
  run_in_context(name, settings, [&] {
    eager = model->forward_eager(x).to(torch::kFloat64);
    fused = fused_model->forward(x).to(torch::kFloat64);
  });
  r.input_shape = x.sizes().vec();
  r.output_shape = fused.sizes().vec();
  r.non_finite = count_non_finite(eager, fused);
  const torch::Tensor diff = (fused - eager).abs();
  r.max_abs_err = max_abs_finite(diff);
  // Relative error with |eager| floored at atol, so outputs near zero are judged by the
  // absolute error (as allclose does) instead of dividing by ~0.
  r.max_rel_err = max_abs_finite(diff / eager.abs().clamp_min(std::max(settings.atol, 1e-30)));
  r.within_tolerance = torch::allclose(fused, eager, settings.rtol, settings.atol,
                                       /*equal_nan=*/true);

  // float64 evaluation of the same parameters (as the model holds them) and input.
  const auto& linear = model->linear();
  const torch::Tensor reference = model->epilogue_eager(torch::nn::functional::linear(
      x.to(torch::kFloat64), linear->weight.to(torch::kFloat64), linear->bias.to(torch::kFloat64)));
  r.eager_err_vs_fp64 = max_abs_finite(eager - reference);
  r.fused_err_vs_fp64 = max_abs_finite(fused - reference);

  // In turns, so drifts of the device's clocks weigh on both alike.
  const auto times = time_interleaved(
      settings.device, settings.warmup, settings.iters,
      {[&](int) { model->forward_eager(x); }, [&](int) { fused_model->forward(x); }});
  r.eager = times[0];
  r.fused = times[1];
  return r;
}

// The input's rows (all dimensions but the last) that the models ran on.
int64_t rows_that_ran(const std::vector<ModelResult>& results) {
  if (results.empty()) return 0;
  int64_t rows = 1;
  const auto& shape = results.front().input_shape;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  return rows;
}

std::string time_cell(const TimingStats& t) {
  return fixed(t.median_us / 1000, 3) + " (" + fixed(t.p10_us / 1000, 3) + "-" +
         fixed(t.p90_us / 1000, 3) + ")";
}

}  // namespace

int run_compare(const Settings& settings) {
  const std::string shape = std::to_string(settings.batch) + "x" +
                            (settings.in_features ? std::to_string(settings.in_features) : "?") +
                            " -> " +
                            (settings.out_features ? std::to_string(settings.out_features) : "?");
  std::cout << "fusedlinear compare: " << platform_description(settings.device) << "; "
            << dtype_name(settings.dtype) << "; "
            << (settings.input.empty() ? "input torch.rand " + shape : "input " + settings.input)
            << "; " << (settings.weights.empty() ? "seeded-random parameters" : settings.weights)
            << "; seed " << settings.seed << "\n";
  if (settings.shape_defaulted && !settings.device.is_cuda() && settings.weights.empty()) {
    std::cout << "(CPU defaults: the reference shape 1024x8192 -> 8192 is the GPU default; "
                 "set --batch, --in-features, --out-features to change)\n";
  }
  std::cout << "times: whole forward in ms, median (p10-p90) of " << settings.iters
            << " runs each, eager and fused in turns, after " << settings.warmup
            << " warm-up; tolerance atol " << settings.atol << ", rtol " << settings.rtol << "\n\n";

  std::vector<ModelResult> results;
  for (const auto& name : settings.models) results.push_back(compare_model(name, settings));

  Table table({"model", "max abs err", "max rel err", "allclose", "eager err vs fp64",
               "fused err vs fp64", "eager ms", "fused ms", "speedup"});
  bool all_pass = true;
  for (const auto& r : results) {
    all_pass = all_pass && r.within_tolerance;
    table.add_row({r.name, scientific(r.max_abs_err, 2), scientific(r.max_rel_err, 2),
                   r.within_tolerance ? "yes" : "NO", scientific(r.eager_err_vs_fp64, 2),
                   scientific(r.fused_err_vs_fp64, 2), time_cell(r.eager), time_cell(r.fused),
                   fixed(r.eager.median_us / r.fused.median_us, 3) + "x"});
  }
  table.print(std::cout);
  std::cout << "\n";
  for (const auto& r : results) std::cout << r.name << " fused path: " << r.weight_layout << "\n";
  for (const auto& r : results) {
    if (r.non_finite.any()) std::cout << r.name << ": " << r.non_finite.describe() << "\n";
  }
  std::cout << (all_pass ? "PASS: every model's fused output is within tolerance of eager"
                         : "FAIL: a fused output differs from eager beyond tolerance")
            << "\n";

  if (!settings.json.empty()) {
    nlohmann::ordered_json models = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      models.push_back({{"model", r.name},
                        {"max_abs_err", r.max_abs_err},
                        {"max_rel_err", r.max_rel_err},
                        {"allclose", r.within_tolerance},
                        {"eager_err_vs_fp64", r.eager_err_vs_fp64},
                        {"fused_err_vs_fp64", r.fused_err_vs_fp64},
                        {"eager_forward", timing_json(r.eager)},
                        {"fused_forward", timing_json(r.fused)},
                        {"fused_weight_layout", r.weight_layout},
                        {"input_shape", r.input_shape},
                        {"output_shape", r.output_shape},
                        {"non_finite", r.non_finite.json()},
                        {"speedup", r.eager.median_us / r.fused.median_us}});
    }
    const nlohmann::ordered_json doc = {{"command", "compare"},
                                        {"platform", platform_description(settings.device)},
                                        {"device", settings.device.str()},
                                        {"dtype", dtype_name(settings.dtype)},
                                        {"batch", rows_that_ran(results)},
                                        {"weights", settings.weights},
                                        {"input", settings.input},
                                        {"seed", settings.seed},
                                        {"iters", settings.iters},
                                        {"warmup", settings.warmup},
                                        {"atol", settings.atol},
                                        {"rtol", settings.rtol},
                                        {"pass", all_pass},
                                        {"models", models}};
    write_output_file(settings.json, doc.dump(2) + "\n", settings.overwrite);
  }
  return all_pass ? 0 : 1;
}

}  // namespace fusedlinear
