// `fusedlinear compare`: for each model, on one input, three kinds of path side by side:
//   eager                      libtorch's ops, as the Python model runs them (PyTorch float32);
//   eager GEMM + fused chain   the same GEMM (addmm, bias included), then the fused op: what the
//                              custom op alone gives;
//   fused                      the fused forward (bias-free GEMM in the weight layout that times
//                              faster, the op adding the bias; or, for few rows on a GPU, the
//                              skinny kernel), once per --precision and --gemm.
// Each output against eager's and against a float64 evaluation; timings in turns.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "app/cli.h"
#include "app/floors.h"
#include "app/memory.h"
#include "app/model_setup.h"
#include "app/platform.h"
#include "app/report.h"
#include "app/timing.h"

namespace fusedlinear {
namespace {

struct PathResult {
  std::string path;  // "eager", "eager GEMM + fused chain", "fused"
  Precision precision = Precision::kIeee;
  GemmKernel kernel = GemmKernel::kAuto;  // fused paths: the kernel asked for (--gemm)
  std::string gemm;                       // what the GEMM ran (gemm_description)
  std::string weight;  // fused paths: the weight layout chosen, and the split's memory
  OutputDifference vs_eager, vs_float64;
  bool counted = true;  // whether vs_eager.allclose counts toward the exit code
  TimingStats time;
  bool is_eager() const { return path == "eager"; }
};

struct ModelResult {
  std::string name;
  std::vector<int64_t> input_shape, output_shape;  // what ran
  int64_t in_features = 0, out_features = 0;
  std::vector<PathResult> paths;  // eager first
  ForwardFloors floors;
};

std::string split_memory(LayeredModelImpl& model) {
  const int64_t bytes = model.split_weight_bytes();
  if (bytes == 0) return "";
  return "; bfloat16 parts of W kept beside it: " + fixed(double(bytes) / (1 << 20), 1) + " MiB";
}

ModelResult compare_model(const ModelSpec& spec, const Settings& settings) {
  torch::NoGradGuard no_grad;
  // The eager model keeps the weight as nn.Linear lays it out; each fused model (same
  // parameters) lays it out for its GEMM and sets its precision.
  at::Generator stream;
  const std::string& name = spec.name;
  const auto model = build_model(spec, settings, &stream);
  const torch::Tensor x = build_input(settings, model->in_features(), stream);
  const int64_t rows = x.numel() / x.size(-1);

  ModelResult r;
  r.name = name;
  r.input_shape = x.sizes().vec();
  r.in_features = model->in_features();
  r.out_features = model->out_features();
  std::vector<std::shared_ptr<LayeredModelImpl>> fused_models;
  for (const Precision precision : settings.precisions) {
    for (const GemmKernel kernel : settings.gemm_kernels) {
      auto fused_model = build_model(spec, settings);
      PathResult p;
      p.path = "fused";
      p.precision = precision;
      p.kernel = kernel;
      configure_fused(*fused_model, precision, kernel, settings);
      p.weight = choose_weight_layout(*fused_model, x);
      p.weight += split_memory(*fused_model);
      // A kernel asked for that cannot take this forward: what ran instead says why.
      // The fused-MLP kernel asked for but refused, or taken by auto: the reason.
      if (kernel == GemmKernel::kMlp || kernel == GemmKernel::kAuto) {
        const MlpChoice mlp = fused_model->mlp_choice(x);
        if (kernel == GemmKernel::kMlp && !mlp.fused) {
          p.weight += "; the fused MLP kernel was asked for, but " + mlp.reason;
        }
        if (kernel == GemmKernel::kAuto && mlp.fused) p.weight += "; " + mlp.reason;
      }
      if (kernel == GemmKernel::kHopper) {
        for (LinearChainImpl* linear : fused_model->linears()) {
          const GemmPlan plan = linear->gemm_plan(x);
          if (!plan.hopper) p.weight += "; " + plan.reason;
        }
      }
      p.gemm = fused_model->gemm_description(x);
      p.counted = verdict_counts(precision, settings);
      r.paths.push_back(p);
      fused_models.push_back(fused_model);
    }
  }
  PathResult eager_path, chain_path;
  eager_path.path = "eager";
  chain_path.path = "eager GEMM + fused chain";
  eager_path.gemm = chain_path.gemm = settings.device.is_cuda() ? "ieee, cuBLAS" : "ieee, CPU GEMM";
  r.paths.insert(r.paths.begin(), {eager_path, chain_path});

  // Each path as a function of the call index (the index is unused: one fixed input).
  std::vector<std::function<void(int)>> calls = {[&](int) { model->forward_eager(x); },
                                                 [&](int) { model->forward_eager_gemms(x); }};
  for (const auto& fused_model : fused_models) {
    calls.emplace_back([&, fused_model](int) { fused_model->forward(x); });
  }

  // Outputs: eager's is the reference of the verdict; a float64 evaluation of the same
  // parameters (as the model holds them) and input is the reference of accuracy.
  torch::Tensor eager;
  std::vector<torch::Tensor> outputs;
  run_in_context(name, settings, [&] {
    eager = model->forward_eager(x);
    outputs.push_back(eager);
    outputs.push_back(model->forward_eager_gemms(x));
    for (const auto& fused_model : fused_models) outputs.push_back(fused_model->forward(x));
  });
  const torch::Tensor reference = model->reference(x);
  for (size_t i = 0; i < r.paths.size(); ++i) {
    r.paths[i].vs_eager = compare_outputs(outputs[i], eager, settings.atol, settings.rtol);
    r.paths[i].vs_float64 = compare_outputs(outputs[i], reference, settings.atol, settings.rtol);
  }
  r.output_shape = eager.sizes().vec();

  // In turns, so drifts of the device's clocks weigh on every path alike.
  const auto times = time_interleaved(settings.device, settings.warmup, settings.iters, calls);
  for (size_t i = 0; i < r.paths.size(); ++i) r.paths[i].time = times[i];
  r.floors = ForwardFloors::time(
      settings.device, settings.warmup, settings.iters, *model,
      [&](int) -> const torch::Tensor& { return x; }, rows);
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

std::string verdict_cell(const PathResult& p) {
  if (p.is_eager()) return "-";
  if (p.vs_eager.allclose) return "yes";
  return p.counted ? "NO" : "no (" + std::string(precision_name(p.precision)) + ")";
}

}  // namespace

int run_compare(const Settings& settings) {
  // The widths given, else those of the file's model (the first, where several are compared).
  int64_t in_features = settings.in_features, out_features = settings.out_features;
  if (settings.input.empty() && !settings.weights.empty() && !settings.models.empty()) {
    std::tie(in_features, out_features) = model_in_out(settings.models.front(), settings);
  }
  const std::string shape = std::to_string(settings.batch) + "x" + std::to_string(in_features) +
                            " -> " + std::to_string(out_features);
  const std::string platform = platform_description(settings.device);  // may warn: first
  // The models run before anything is printed: a failure is then the one line it gives.
  std::vector<ModelResult> results;
  for (const auto& spec : settings.models) results.push_back(compare_model(spec, settings));

  std::cout << "fusedlinear compare: " << platform << "; " << dtype_name(settings.dtype) << "; "
            << (settings.input.empty() ? "input torch.rand " + shape : "input " + settings.input)
            << "; " << (settings.weights.empty() ? "seeded-random parameters" : settings.weights)
            << "; seed " << settings.seed << "\n";
  std::string names;
  for (const auto& spec : settings.models) names += (names.empty() ? "" : ", ") + spec.name;
  std::cout << "model: " << names << " (" << settings.model_source << ")\n";
  if (settings.shape_defaulted && !settings.device.is_cuda() && settings.weights.empty()) {
    std::cout << "(CPU defaults: the reference shape 1024x8192 -> 8192 is the GPU default; "
                 "set --batch, --in-features, --out-features to change)\n";
  }
  std::cout << "times: whole forward in ms, median (p10-p90) of " << settings.iters
            << " runs each, all paths in turns, after " << settings.warmup
            << " warm-up; tolerance atol " << settings.atol << ", rtol " << settings.rtol << "\n\n";

  Table table({"model", "path", "GEMM", "ms (p10-p90)", "speedup", "max abs err", "max rel err",
               "allclose", "err vs fp64", "NaN/inf"});
  bool all_pass = true, uncounted_failure = false;
  for (const auto& r : results) {
    const double eager_us = r.paths.front().time.median_us;
    for (const auto& p : r.paths) {
      const bool pass = p.is_eager() || p.vs_eager.allclose;
      all_pass = all_pass && (pass || !p.counted);
      uncounted_failure = uncounted_failure || (!pass && !p.counted);
      table.add_row({r.name, p.path, p.gemm, time_cell(p.time),
                     fixed(eager_us / p.time.median_us, 3) + "x",
                     p.is_eager() ? "-" : scientific(p.vs_eager.max_abs, 2),
                     p.is_eager() ? "-" : scientific(p.vs_eager.max_rel, 2), verdict_cell(p),
                     scientific(p.vs_float64.max_abs, 2), nonfinite_cell(p.vs_eager.non_finite)});
    }
  }
  table.print(std::cout);
  std::cout << "\nerrors: max abs and rel err against eager's output (PyTorch float32) over the "
               "finite values, err vs fp64 against a float64 evaluation; NaN/inf: how many in "
               "the output (at eager's positions, or eager's count); speedup: eager ms / path "
               "ms\n";
  for (const auto& r : results) {
    for (const auto& p : r.paths) {
      if (!p.is_eager() && p.vs_eager.non_finite.any()) {
        std::cout << r.name << " " << p.path << " " << p.gemm << ": "
                  << p.vs_eager.non_finite.describe() << "\n";
      }
    }
  }
  for (const auto& r : results) {
    std::cout << r.name
              << " eager GEMMs alone (addmm): " << fixed(r.floors.gemms.median_us / 1000, 3)
              << " ms, " << fixed(r.floors.gemm_gflops(), 1)
              << " GFLOP/s; weights read at a copy's pace: "
              << fixed(r.floors.weight_read_us() / 1000, 3) << " ms\n";
  }
  for (const auto& r : results) {
    for (const auto& p : r.paths) {
      if (p.path == "fused") {
        std::cout << r.name << " fused " << p.gemm << ": " << p.weight << "; "
                  << fixed(p.time.median_us / r.floors.gemms.median_us, 3) << "x the eager GEMMs, "
                  << fixed(p.time.median_us / r.floors.weight_read_us(), 3)
                  << "x the weight read\n";
      }
    }
  }
  if (uncounted_failure) {
    std::cout << "tf32 and bf16 trade accuracy for speed: outside the default tolerance by design, "
                 "reported but not part of the verdict (set --atol/--rtol to judge them)\n";
  }
  std::cout << (all_pass ? "PASS: every fused output is within tolerance of eager"
                         : "FAIL: a fused output differs from eager beyond tolerance")
            << "\n";

  if (!settings.json.empty()) {
    nlohmann::ordered_json models = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      nlohmann::ordered_json paths = nlohmann::ordered_json::array();
      const double eager_us = r.paths.front().time.median_us;
      for (const auto& p : r.paths) {
        nlohmann::ordered_json path = {{"path", p.path},
                                       {"precision", precision_name(p.precision)},
                                       {"gemm", p.gemm},
                                       {"forward", timing_json(p.time)},
                                       {"speedup", eager_us / p.time.median_us},
                                       {"vs_float64", difference_json(p.vs_float64)}};
        if (!p.is_eager()) {
          path["vs_eager"] = difference_json(p.vs_eager);
          path["counted_in_verdict"] = p.counted;
        }
        if (!p.weight.empty()) path["weight"] = p.weight;
        if (!p.is_eager() && p.path == "fused") path["gemm_kernel"] = gemm_kernel_name(p.kernel);
        paths.push_back(path);
      }
      nlohmann::ordered_json model = {{"model", r.name},
                                      {"input_shape", r.input_shape},
                                      {"output_shape", r.output_shape},
                                      {"in_features", r.in_features},
                                      {"out_features", r.out_features}};
      model.update(r.floors.json());
      model["paths"] = paths;
      models.push_back(model);
    }
    const nlohmann::ordered_json doc = {{"command", "compare"},
                                        {"platform", platform},
                                        {"threads", at::get_num_threads()},
                                        {"blas", blas_description()},
                                        {"device", settings.device.str()},
                                        {"dtype", dtype_name(settings.dtype)},
                                        {"batch", rows_that_ran(results)},
                                        {"model_source", settings.model_source},
                                        {"weights", settings.weights},
                                        {"input", settings.input},
                                        {"seed", settings.seed},
                                        {"iters", settings.iters},
                                        {"warmup", settings.warmup},
                                        {"atol", settings.atol},
                                        {"rtol", settings.rtol},
                                        {"bf16x3_min_rows", settings.bf16x3_min_rows},
                                        {"pass", all_pass},
                                        {"models", models}};
    write_for_option("--json", [&] {
      write_output_file(settings.json, doc.dump(2) + "\n", settings.overwrite);
    });
  }
  return all_pass ? 0 : 1;
}

}  // namespace fusedlinear
