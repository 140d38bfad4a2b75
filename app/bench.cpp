// `fusedlinear bench`: timings over models x batch sizes x dtypes, side by side in one run.
//
// Per configuration: the GEMM (addmm with bias, what eager runs; and x @ W^T without bias, what
// the fused forward runs), the eager and the fused activation chain, a copy of the same bytes,
// and the eager and the fused forward; with --cuda-graph, the fused forward replayed from a CUDA
// Graph against eager launches of it. Every timed call allocates a fresh output and reads the
// next of several rotating input buffers, which together span ~4x the last-level cache, so no
// version is timed out of a warm cache. Both chains read the same buffers (x @ W^T of the rotating
// inputs, bias not added): the chains' cost does not depend on the values.
#include "app/bench.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/report.h"
#include "app/svg_plot.h"
#include "app/timing.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace fusedlinear {
namespace {

// The timings of one configuration, in the order of the JSON and CSV columns.
const char* const kTimings[] = {"gemm_addmm",    "gemm_matmul",          "copy",
                                "chain_eager",   "chain_fused",          "forward_eager",
                                "forward_fused", "forward_fused_static", "graph_replay"};
constexpr int64_t kAssumedCacheBytes = 60'000'000;  // an H200's L2, the largest here

struct Result {
  std::string model;
  torch::ScalarType dtype = torch::kFloat32;
  int64_t batch = 0, in_features = 0, out_features = 0;
  int x_buffers = 0, y_buffers = 0;
  std::map<std::string, TimingStats> timings;  // absent: not timed (graph without --cuda-graph)
  double max_abs_diff = 0, atol = 0, rtol = 0;
  bool check_ok = true;
  bool graph_ok = true;  // with --cuda-graph: the replay's output matches an eager launch's
  bool fused_weight_input_major = false;  // the layout choose_weight_layout kept for this batch
  const char* fused_weight_layout() const {
    return fused_weight_input_major ? "input-major" : "output-major";
  }

  double median(const std::string& name) const {
    const auto it = timings.find(name);
    return it == timings.end() ? NAN : it->second.median_us;
  }
  // Bytes a chain (and the copy) must move: its input read once and its output written once.
  double chain_bytes() const {
    return 2.0 * double(batch * out_features) * double(c10::elementSize(dtype));
  }
  // Derived figures, NaN where an input is missing. GB/s = 1e9 bytes per second.
  std::vector<std::pair<std::string, double>> derived() const {
    const double bytes = chain_bytes(), flops = 2.0 * double(batch * in_features * out_features);
    return {{"copy_gbps", bytes / median("copy") / 1e3},
            {"chain_eager_gbps", bytes / median("chain_eager") / 1e3},
            {"chain_fused_gbps", bytes / median("chain_fused") / 1e3},
            {"chain_eager_x_copy", median("chain_eager") / median("copy")},
            {"chain_fused_x_copy", median("chain_fused") / median("copy")},
            {"chain_fused_percent_of_copy_speed", 100 * median("copy") / median("chain_fused")},
            {"chain_speedup", median("chain_eager") / median("chain_fused")},
            {"forward_speedup", median("forward_eager") / median("forward_fused")},
            {"epilogue_share_of_fused_forward", median("chain_fused") / median("forward_fused")},
            {"gemm_addmm_tflops", flops / median("gemm_addmm") / 1e6},
            {"gemm_matmul_tflops", flops / median("gemm_matmul") / 1e6},
            {"graph_speedup", median("forward_fused_static") / median("graph_replay")}};
  }
  double figure(const std::string& name) const {
    for (const auto& [key, value] : derived()) {
      if (key == name) return value;
    }
    return NAN;
  }
};

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

// This process's command line, from /proc (Linux); empty elsewhere.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string out, arg;
  const auto flush = [&] {
    const bool quote = arg.empty() || arg.find_first_of(" \t'\"") != std::string::npos;
    out += (out.empty() ? "" : " ") + (quote ? "'" + arg + "'" : arg);
    arg.clear();
  };
  for (char c; in.get(c);) {
    if (c == '\0') {
      flush();
    } else {
      arg += c;
    }
  }
  if (!arg.empty()) flush();
  return out;
}

int64_t cache_bytes(const torch::Device& device) {
#ifdef FUSEDLINEAR_WITH_CUDA
  if (device.is_cuda()) {
    return std::max<int64_t>(at::cuda::getCurrentDeviceProperties()->l2CacheSize,
                             kAssumedCacheBytes);
  }
#endif
  return kAssumedCacheBytes;
}

// A one-line progress indicator on a terminal's stderr; nothing when stderr is not a terminal.
class Progress {
 public:
  explicit Progress(int total) : total_(total), enabled_(isatty(2) == 1) {}
  ~Progress() { clear(); }
  void show(int done, const std::string& what) {
    if (!enabled_) return;
    const std::string line =
        "[" + std::to_string(done + 1) + "/" + std::to_string(total_) + "] " + what + " ...";
    std::cerr << "\r" << line << std::string(line.size() < width_ ? width_ - line.size() : 0, ' ')
              << std::flush;
    width_ = std::max(width_, line.size());
  }
  void clear() {
    if (enabled_ && width_ > 0) std::cerr << "\r" << std::string(width_, ' ') << "\r" << std::flush;
    width_ = 0;
  }

 private:
  int total_;
  bool enabled_;
  size_t width_ = 0;
};

// Fails early, with one line, for a dtype the device's libtorch cannot run (float16 matrix
// products on an old CPU libtorch), instead of minutes into the sweep.
void check_dtype_runs(const std::string& model_name, const Settings& settings) {
  run_in_context(model_name, settings, [&] {
    torch::NoGradGuard no_grad;
    auto model = make_model(model_name, 8, 8, 0);
    model->to(settings.device, settings.dtype);
    const auto x = torch::rand({2, 8}).to(settings.device, settings.dtype);
    model->forward(x);
    model->forward_eager(x);
    synchronize(settings.device);
  });
}

#ifdef FUSEDLINEAR_WITH_CUDA
// Captures model.forward(x) in a CUDA Graph (after warm-up, on a side stream, as capture needs)
// and times its replays against eager launches of the same call on the same fixed input.
void time_cuda_graph(LinearEpilogueModel& model, const torch::Tensor& x, const Settings& s,
                     Result& r) {
  synchronize(s.device);
  at::cuda::CUDAGraph graph;
  torch::Tensor captured_out;
  {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
    for (int i = 0; i < 3; ++i) model.forward(x);  // cuBLAS handle, workspace, allocator
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    captured_out = model.forward(x);
    graph.capture_end();
  }
  const auto times = time_interleaved(
      s.device, s.warmup, s.iters, {[&](int) { graph.replay(); }, [&](int) { model.forward(x); }});
  r.timings["graph_replay"] = times[0];
  r.timings["forward_fused_static"] = times[1];
  graph.replay();
  const torch::Tensor launched = model.forward(x);
  if (!torch::allclose(captured_out.to(torch::kFloat32), launched.to(torch::kFloat32), r.rtol,
                       r.atol)) {
    std::cerr << "fusedlinear: warning: " << r.model << " " << dtype_name(r.dtype) << " batch "
              << r.batch << ": the CUDA Graph's output differs from the eager launch's\n";
    r.graph_ok = false;
  }
}
#endif

// Times one configuration. `model` runs the eager side, `fused_model` (the same parameters, its
// weight laid out for this batch by choose_weight_layout) the fused side. x_all: [N, batch, in]
// rotating inputs; y_all: [M, batch, out], the GEMM outputs the chains read.
Result bench_one(LinearEpilogueModel& model, LinearEpilogueModel& fused_model,
                 const std::string& name, int64_t batch, const Settings& s, bool cuda_graph,
                 double atol, double rtol) {
  Result r;
  r.model = name;
  r.dtype = s.dtype;
  r.batch = batch;
  r.in_features = model.in_features();
  r.out_features = model.out_features();
  const int64_t elem = int64_t(c10::elementSize(s.dtype)), cache = cache_bytes(s.device);
  r.x_buffers = bench::rotation_count(batch * r.in_features * elem, cache);
  r.y_buffers = bench::rotation_count(batch * r.out_features * elem, cache);

  // torch.rand inputs (uniform in [0, 1), as the reference workload), drawn on the device.
  torch::manual_seed(s.seed + uint64_t(batch));
  const auto options = torch::TensorOptions().device(s.device);
  const torch::Tensor x_all = torch::rand({r.x_buffers, batch, r.in_features}, options).to(s.dtype);
  torch::Tensor y_all = torch::empty({r.y_buffers, batch, r.out_features}, options.dtype(s.dtype));
  for (int i = 0; i < r.y_buffers; ++i) {
    y_all[i].copy_(model.matmul_without_bias(x_all[i % r.x_buffers]));  // realistic values
  }
  const std::vector<torch::Tensor> xs = x_all.unbind(0), ys = y_all.unbind(0);
  const auto x = [&](int i) -> const torch::Tensor& { return xs[size_t(i) % xs.size()]; };
  const auto y = [&](int i) -> const torch::Tensor& { return ys[size_t(i) % ys.size()]; };

  // The fused model's weight layout for this batch (choose_weight_layout).
  choose_weight_layout(fused_model, x(0));
  r.fused_weight_input_major = fused_model.weight_layout() == WeightLayout::kInputMajor;

  // The check: the fused chain against the eager chain on the same GEMM output.
  {
    const torch::Tensor eager =
        model.epilogue_eager(y(0) + model.linear()->bias).to(torch::kFloat32);
    const torch::Tensor fused = fused_model.epilogue_fused(y(0)).to(torch::kFloat32);
    const torch::Tensor diff = (fused - eager).abs();
    r.atol = atol;
    r.rtol = rtol;
    r.max_abs_diff = diff.max().item<double>();
    r.check_ok = diff.le(eager.abs() * rtol + atol).all().item<bool>();
  }

  // What is compared is timed in turns (time_interleaved), so slow drifts of the device's
  // clocks weigh on each side alike.
  const auto measure = [&](std::vector<const char*> keys,
                           std::vector<std::function<void(int)>> fns) {
    const auto stats = time_interleaved(s.device, s.warmup, s.iters, fns);
    for (size_t k = 0; k < keys.size(); ++k) r.timings[keys[k]] = stats[k];
  };
  measure({"gemm_addmm", "gemm_matmul"}, {[&](int i) { model.linear()->forward(x(i)); },
                                          [&](int i) { fused_model.matmul_without_bias(x(i)); }});
  measure({"copy", "chain_eager", "chain_fused"},
          {[&](int i) { y(i).clone(); }, [&](int i) { model.epilogue_eager(y(i)); },
           [&](int i) { fused_model.epilogue_fused(y(i)); }});
  measure({"forward_eager", "forward_fused"},
          {[&](int i) { model.forward_eager(x(i)); }, [&](int i) { fused_model.forward(x(i)); }});
#ifdef FUSEDLINEAR_WITH_CUDA
  if (cuda_graph) time_cuda_graph(fused_model, x(0), s, r);
#endif
  return r;
}

// NaN (not measured) as JSON null.
nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr;
}

std::string csv_number(double v) {
  if (!std::isfinite(v)) return "";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.6g", v);
  return buffer;
}

std::string render_csv(const std::vector<Result>& results) {
  std::ostringstream out;
  out << "model,dtype,batch,in_features,out_features,x_buffers,y_buffers,chain_bytes";
  for (const char* t : kTimings)
    out << "," << t << "_median_us," << t << "_p10_us," << t << "_p90_us";
  for (const auto& d : Result().derived()) out << "," << d.first;
  out << ",fused_weight_layout,max_abs_diff,check_ok\n";
  for (const auto& r : results) {
    out << r.model << "," << dtype_name(r.dtype) << "," << r.batch << "," << r.in_features << ","
        << r.out_features << "," << r.x_buffers << "," << r.y_buffers << ","
        << csv_number(r.chain_bytes());
    for (const char* t : kTimings) {
      const auto it = r.timings.find(t);
      const bool has = it != r.timings.end();
      out << "," << (has ? csv_number(it->second.median_us) : "") << ","
          << (has ? csv_number(it->second.p10_us) : "") << ","
          << (has ? csv_number(it->second.p90_us) : "");
    }
    for (const auto& d : r.derived()) out << "," << csv_number(d.second);
    out << "," << r.fused_weight_layout() << "," << csv_number(r.max_abs_diff) << ","
        << (r.check_ok ? "true" : "false") << "\n";
  }
  return out.str();
}

}  // namespace

void add_bench_options(cxxopts::Options& options) {
  // clang-format off
  options.add_options("bench")
      ("batches", "bench: batch sizes, comma-separated (GPU default 1,8,64,256,1024; CPU "
       "1,8,64; --batch N: just N)", cxxopts::value<std::string>())
      ("dtypes", "bench: float32, float16, bfloat16, comma-separated (GPU default "
       "float32,bfloat16; CPU float32; --dtype D: just D)", cxxopts::value<std::string>())
      ("csv", "bench: also write the results as CSV to this file", cxxopts::value<std::string>())
      ("plot", "bench: also draw the speedups as an SVG bar chart to this file",
       cxxopts::value<std::string>())
      ("cuda-graph", "bench: also time the fused forward replayed from a CUDA Graph");
  // clang-format on
}

int run_bench(const Settings& settings, const cxxopts::ParseResult& parsed) {
  const bool cuda = settings.device.is_cuda();
  const bool cuda_graph = parsed.count("cuda-graph") > 0;
  if (cuda_graph && !cuda) throw UsageError("--cuda-graph needs a CUDA device");

  // Sweep defaults: the batch sizes and the two dtypes that matter on a GPU (float16
  // runs like bfloat16 there; ask for it with --dtypes); on a CPU a short sweep in float32.
  std::vector<int64_t> batches =
      cuda ? std::vector<int64_t>{1, 8, 64, 256, 1024} : std::vector<int64_t>{1, 8, 64};
  if (parsed.count("batches")) {
    batches = bench::parse_batches(parsed["batches"].as<std::string>());
  } else if (parsed.count("batch")) {
    batches = {settings.batch};
  }
  std::vector<torch::ScalarType> dtypes = {torch::kFloat32};
  if (parsed.count("dtypes")) {
    dtypes = bench::parse_dtypes(parsed["dtypes"].as<std::string>());
  } else if (parsed.count("dtype")) {
    dtypes = {settings.dtype};
  } else if (cuda) {
    dtypes = {torch::kFloat32, torch::kBFloat16};
  }
  const std::string csv_path = parsed.count("csv") ? parsed["csv"].as<std::string>() : "";
  const std::string plot_path = parsed.count("plot") ? parsed["plot"].as<std::string>() : "";
  const bool user_tolerance = parsed.count("atol") || parsed.count("rtol");
  std::vector<std::string> models = settings.models;
  if (models.empty()) models = {detect_model(settings)};
  for (const auto dtype : dtypes) {
    Settings s = settings;
    s.dtype = dtype;
    for (const auto& name : models) check_dtype_runs(name, s);
  }

  torch::NoGradGuard no_grad;
  const std::string date = utc_now();
  std::vector<Result> results;
  Progress progress(int(models.size() * dtypes.size() * batches.size()));
  for (const auto& name : models) {
    for (const auto dtype : dtypes) {
      Settings s = settings;
      s.dtype = dtype;
      const auto model = build_model(name, s);
      const auto fused_model = build_model(name, s);
      for (const int64_t batch : batches) {
        progress.show(int(results.size()),
                      name + " " + dtype_name(dtype) + " batch " + std::to_string(batch));
        const double atol = user_tolerance ? settings.atol : default_tolerance(dtype);
        const double rtol = user_tolerance ? settings.rtol : default_tolerance(dtype);
        results.push_back(bench_one(*model, *fused_model, name, batch, s, cuda_graph, atol, rtol));
      }
    }
  }
  progress.clear();

  // The table: medians in microseconds; "x copy" is the fused chain's time over the copy's.
  std::vector<std::string> header = {
      "model",      "dtype",         "batch",          "gemm us",        "fused gemm us",
      "fused W",    "copy us",       "eager chain us", "fused chain us", "fused x copy",
      "fused GB/s", "chain speedup", "eager fwd us",   "fused fwd us",   "fwd speedup"};
  if (cuda_graph) header.insert(header.end(), {"graph fwd us", "graph speedup"});
  Table table(header);
  int failures = 0;
  for (const auto& r : results) {
    std::vector<std::string> row = {r.model,
                                    dtype_name(r.dtype),
                                    std::to_string(r.batch),
                                    fixed(r.median("gemm_addmm"), 1),
                                    fixed(r.median("gemm_matmul"), 1),
                                    r.fused_weight_input_major ? "in-major" : "out-major",
                                    fixed(r.median("copy"), 1),
                                    fixed(r.median("chain_eager"), 1),
                                    fixed(r.median("chain_fused"), 1),
                                    fixed(r.figure("chain_fused_x_copy"), 2),
                                    fixed(r.figure("chain_fused_gbps"), 1),
                                    fixed(r.figure("chain_speedup"), 2),
                                    fixed(r.median("forward_eager"), 1),
                                    fixed(r.median("forward_fused"), 1),
                                    fixed(r.figure("forward_speedup"), 2)};
    if (cuda_graph) {
      row.push_back(fixed(r.median("graph_replay"), 1));
      row.push_back(fixed(r.figure("graph_speedup"), 2));
    }
    table.add_row(row);
    if (!r.graph_ok) ++failures;  // warned about as it was found
    if (!r.check_ok) {
      ++failures;
      std::cerr << "fusedlinear: warning: " << r.model << " " << dtype_name(r.dtype) << " batch "
                << r.batch << ": the fused chain differs from the eager chain by up to "
                << scientific(r.max_abs_diff, 2) << " (atol " << scientific(r.atol, 1) << ", rtol "
                << scientific(r.rtol, 1) << ")\n";
    }
  }
  const std::string platform = platform_description(settings.device);
  std::cout << "fusedlinear bench: " << platform << "; " << settings.iters << " timed runs after "
            << settings.warmup << " warm-up, medians in microseconds; rotating inputs, fresh "
            << "outputs\n\n";
  table.print(std::cout);
  std::cout << "\ngemm: addmm with bias (eager's GEMM); fused gemm: x @ W^T without bias; fused "
               "W: its weight layout, the faster of the two at this batch (input- or output-"
               "major); x copy: fused chain time / copy time; "
               "GB/s: bytes read + written; speedups: eager time / fused time"
            << (cuda_graph ? "; graph speedup: eager launches / graph replay of the fused forward"
                           : "")
            << "\n";

  if (!settings.json.empty()) {
    nlohmann::ordered_json header_json = {
        {"command", "bench"},
        {"command_line", command_line()},
        {"date_utc", date},
        {"platform", platform},
        {"device", device_name(settings.device)},
        {"device_type", cuda ? "cuda" : "cpu"},
        {"libtorch_version", TORCH_VERSION},
        {"cuda_version",
         cuda ? nlohmann::ordered_json(cuda_version()) : nlohmann::ordered_json(nullptr)},
        {"models", models},
        {"batches", batches},
        {"iters", settings.iters},
        {"warmup", settings.warmup},
        {"seed", settings.seed},
        {"cuda_graph", cuda_graph},
        {"assumed_cache_bytes", cache_bytes(settings.device)},
        {"weights", settings.weights.empty() ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(settings.weights)}};
    header_json["in_features"] = results.empty() ? 0 : results.front().in_features;
    header_json["out_features"] = results.empty() ? 0 : results.front().out_features;
    header_json["dtypes"] = nlohmann::ordered_json::array();
    for (const auto dtype : dtypes) header_json["dtypes"].push_back(dtype_name(dtype));
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      nlohmann::ordered_json timings = nlohmann::ordered_json::object(),
                             derived = nlohmann::ordered_json::object();
      for (const char* key : kTimings) {
        if (r.timings.count(key)) timings[key] = timing_json(r.timings.at(key));
      }
      for (const auto& [key, value] : r.derived()) derived[key] = number_or_null(value);
      rows.push_back({{"model", r.model},
                      {"dtype", dtype_name(r.dtype)},
                      {"batch", r.batch},
                      {"in_features", r.in_features},
                      {"out_features", r.out_features},
                      {"x_buffers", r.x_buffers},
                      {"y_buffers", r.y_buffers},
                      {"chain_bytes", r.chain_bytes()},
                      {"fused_weight_layout", r.fused_weight_layout()},
                      {"timings", timings},
                      {"derived", derived},
                      {"check",
                       {{"max_abs_diff", r.max_abs_diff},
                        {"atol", r.atol},
                        {"rtol", r.rtol},
                        {"ok", r.check_ok},
                        {"graph_ok", r.graph_ok}}}});
    }
    nlohmann::ordered_json doc = {{"header", header_json}, {"results", rows}};
    write_output_file(settings.json, doc.dump(2) + "\n", settings.overwrite);
  }
  if (!csv_path.empty()) write_output_file(csv_path, render_csv(results), settings.overwrite);
  if (!plot_path.empty()) {
    std::vector<std::string> groups, series = {"activation chain", "whole forward"};
    if (cuda_graph) series.push_back("CUDA Graph vs launches");
    std::vector<std::vector<double>> values;
    for (const auto& r : results) {
      groups.push_back(r.model + "  " + dtype_name(r.dtype) + "  batch " + std::to_string(r.batch));
      values.push_back({r.figure("chain_speedup"), r.figure("forward_speedup")});
      if (cuda_graph) values.back().push_back(r.figure("graph_speedup"));
    }
    BarChartOptions chart;
    chart.subtitle =
        platform + "  |  " + date + "  |  medians of " + std::to_string(settings.iters) + " runs";
    chart.axis_label =
        "speedup of fused over eager (eager time / fused time; right of the dashed line: faster)";
    write_output_file(
        plot_path,
        render_bar_chart("fusedlinear bench: fused vs eager", groups, series, values, chart),
        settings.overwrite);
  }
  return failures > 0 ? 1 : 0;
}

}  // namespace fusedlinear
