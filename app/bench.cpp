// `fusedlinear bench`: timings over models x dtypes x batch sizes x GEMM precisions, side by side
// in one run.
//
// Per configuration (model, dtype, batch): eager's GEMM (addmm with bias), the eager and the fused
// activation chain, a copy of the same bytes, and the eager forward; then per precision
// (--precision; float32 only, other dtypes run ieee) the fused forward's GEMM (x @ W^T without
// bias) and the fused forward, its output against eager's and against float64, and with
// --cuda-graph the fused forward replayed from a CUDA Graph against launches of it. A layered
// model (several Linears) is timed whole: per precision its fused forward (LayeredModel's, as
// `run` runs it) against eager libtorch's forward of the same model, beside the floors compare
// reports (floors.h: eager's GEMMs alone, the weights read at a copy's pace). Every timed call
// allocates a fresh output and reads the next of several rotating input buffers, which together
// span ~4x the last-level cache, so no version is timed out of a warm cache. Both chains read the
// same buffers (x @ W^T of the rotating inputs, bias not added): the chains' cost does not depend
// on the values. With --ops, instead of the models: each op of the vocabulary alone, fused (as a
// chain spec) against its eager op.
#include "app/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/floors.h"
#include "app/memory.h"
#include "app/model_setup.h"
#include "app/platform.h"
#include "app/report.h"
#include "app/svg_plot.h"
#include "app/timing.h"
#include "kernels/ops/chain_spec.h"
#include "kernels/ops/ops.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace fusedlinear {
namespace {

constexpr int64_t kAssumedCacheBytes = 60'000'000;  // an H200's L2, the largest here

// Timings of one configuration shared by every precision, in the JSON and CSV column order.
const char* const kSharedTimings[] = {
    "gemm_addmm",    "copy",          "chain_eager", "chain_fused", "chain_compiled",
    "chain_runtime", "forward_eager", "weight_copy", "gemm_bf16",   "dense_gemm"};
// Timings of the fused forward in one precision.
const char* const kFusedTimings[] = {"gemm", "forward", "forward_static", "graph_replay"};

// What each timing times, for the JSON's header: of a one-Linear model, and where a layered
// model's differs, of a layered one (which times no chain and no fused GEMM alone).
struct TimedDescription {
  const char *name, *one_linear, *layered;
};
const TimedDescription kTimed[] = {
    {"gemm_addmm", "eager's GEMM alone: addmm with bias",
     "eager's GEMMs alone: each Linear's addmm with bias, on inputs of its width"},
    {"copy", "a copy of the chain's input (the GEMM's output)", nullptr},
    {"chain_eager", "the activation chain by libtorch's ops, on the GEMM's output", nullptr},
    {"chain_fused", "the fused chain op, on the GEMM's output", nullptr},
    {"chain_compiled", "the compiled chain's kernels, in turns with chain_runtime", nullptr},
    {"chain_runtime", "the same chain given as a spec: the run-time interpreter", nullptr},
    {"forward_eager", "eager libtorch's forward: addmm, then the chain's ops",
     "eager libtorch's forward of the whole model, op by op as the Python model runs"},
    {"weight_copy", "a copy of W", "a copy of every weight of the model"},
    {"gemm_bf16", "on a GPU: cuBLAS's bfloat16 GEMM alone at this shape", nullptr},
    {"dense_gemm",
     "a square GEMM in the model's dtype (torch::mm, side 8192 on a GPU, 1024 on the CPU): the "
     "device's dense rate, timed once a dtype in the same run",
     "the same"},
    {"fused.gemm", "the fused forward's GEMM: x @ W^T without bias, in the precision", nullptr},
    {"fused.forward", "the fused forward (LinearChain), in the precision and GEMM kernel",
     "the fused model's whole forward (LayeredModel, as fusedlinear run runs it), in the "
     "precision and GEMM kernel"},
    {"fused.forward_static", "with --cuda-graph: the fused forward launched on one fixed input",
     nullptr},
    {"fused.graph_replay", "with --cuda-graph: the same forward replayed from a CUDA Graph",
     nullptr}};

// NaN where a timing is absent (graph replays without --cuda-graph).
double median_of(const std::map<std::string, TimingStats>& timings, const std::string& name) {
  const auto it = timings.find(name);
  return it == timings.end() ? NAN : it->second.median_us;
}

// The fused forward in one precision, with one GEMM kernel.
struct FusedResult {
  Precision precision = Precision::kIeee;
  GemmKernel kernel = GemmKernel::kAuto;  // asked for (--gemm)
  std::string gemm;                       // what the GEMM ran at this batch (gemm_description)
  double weight_bytes = NAN;       // W as the forward reads it (float32, or its bfloat16 parts)
  double cublas_forward_us = NAN;  // the same precision with --gemm cublas, where it ran too
  // The layout choose_weight_layout kept at this batch: "input-major", "output-major", or for a
  // layered model whose Linears differ, "mixed".
  std::string weight_layout;
  std::map<std::string, TimingStats> timings;
  OutputDifference vs_eager, vs_float64;  // on the first input buffer
  bool counted = true;                    // vs_eager.allclose counts toward the exit code
  bool graph_ok = true;  // with --cuda-graph: the replay's output matches a launch's
};

struct Result {
  std::string model;
  bool layered = false;  // a layered model, timed whole (no chain alone)
  int linears = 1;
  torch::ScalarType dtype = torch::kFloat32;
  int64_t batch = 0, in_features = 0, out_features = 0;
  int x_buffers = 0, y_buffers = 0;
  double flops_per_row = 0;  // the GEMMs' 2 x multiply-adds of one row
  double dense_flops = 0;    // the square GEMM's (dense_gemm) 2 x multiply-adds
  // Every W in the model's dtype: what weight_copy reads and writes.
  double weight_bytes = 0;
  std::map<std::string, TimingStats> timings;  // kSharedTimings
  double chain_max_abs_diff = 0, atol = 0, rtol = 0;
  bool chain_ok = true;  // the fused chain within atol/rtol of the eager chain
  std::vector<FusedResult> fused;

  double median(const std::string& name) const { return median_of(timings, name); }
  // Bytes a chain (and the copy) must move: its input read once and its output written once.
  // NaN for a layered model, whose chains are not timed alone.
  double chain_bytes() const {
    if (layered) return NAN;
    return 2.0 * double(batch * out_features) * double(c10::elementSize(dtype));
  }
  double flops() const { return double(batch) * flops_per_row; }
};

using Figures = std::vector<std::pair<std::string, double>>;

double figure(const Figures& figures, const std::string& name) {
  for (const auto& [key, value] : figures) {
    if (key == name) return value;
  }
  return NAN;
}

// The chains' derived figures, NaN where an input is missing. GB/s = 1e9 bytes per second.
Figures chain_figures(const Result& r) {
  const double bytes = r.chain_bytes();
  return {{"copy_gbps", bytes / r.median("copy") / 1e3},
          {"chain_eager_gbps", bytes / r.median("chain_eager") / 1e3},
          {"chain_fused_gbps", bytes / r.median("chain_fused") / 1e3},
          {"chain_eager_x_copy", r.median("chain_eager") / r.median("copy")},
          {"chain_fused_x_copy", r.median("chain_fused") / r.median("copy")},
          {"chain_fused_percent_of_copy_speed", 100 * r.median("copy") / r.median("chain_fused")},
          {"chain_speedup", r.median("chain_eager") / r.median("chain_fused")},
          {"chain_runtime_x_compiled", r.median("chain_runtime") / r.median("chain_compiled")},
          {"chain_runtime_x_copy", r.median("chain_runtime") / r.median("copy")},
          {"gemm_addmm_tflops", r.flops() / r.median("gemm_addmm") / 1e6},
          {"gemm_bf16_tflops", r.flops() / r.median("gemm_bf16") / 1e6},
          {"dense_gemm_tflops", r.dense_flops / r.median("dense_gemm") / 1e6},
          {"weight_copy_gbps", 2 * r.weight_bytes / r.median("weight_copy") / 1e3},
          {"forward_eager_x_eager_gemm", r.median("forward_eager") / r.median("gemm_addmm")}};
}

// One variant's derived figures: speedups over the eager forward (float32 eager for float32) and
// over the same precision's cuBLAS forward; W's bytes over the forward's time, and that against
// a copy of W (which moves its bytes twice, read and written); the forward against the floors:
// eager's GEMMs alone, and the weights read at a copy's pace.
Figures fused_figures(const Result& r, const FusedResult& f) {
  const double forward = median_of(f.timings, "forward");
  const double weight_gbps = f.weight_bytes / forward / 1e3;
  const auto weight_copy = r.timings.find("weight_copy");
  const double weight_read =
      weight_copy == r.timings.end() ? NAN : weight_read_us(weight_copy->second);
  return {
      {"forward_speedup", r.median("forward_eager") / forward},
      {"forward_x_eager_gemm", forward / r.median("gemm_addmm")},
      {"forward_x_weight_read", forward / weight_read},
      {"speedup_over_cublas_fused", f.cublas_forward_us / forward},
      {"gemm_tflops", r.flops() / median_of(f.timings, "gemm") / 1e6},
      {"forward_tflops", r.flops() / forward / 1e6},
      {"forward_samples_per_s", double(r.batch) / forward * 1e6},
      {"forward_percent_of_dense",
       100 * r.flops() / forward / 1e6 / figure(chain_figures(r), "dense_gemm_tflops")},
      {"forward_percent_of_bf16_gemm", 100 * r.median("gemm_bf16") / forward},
      {"epilogue_share_of_forward", r.median("chain_fused") / forward},
      {"weight_gbps", weight_gbps},
      {"weight_percent_of_copy", 100 * weight_gbps / figure(chain_figures(r), "weight_copy_gbps")},
      {"graph_speedup",
       median_of(f.timings, "forward_static") / median_of(f.timings, "graph_replay")}};
}

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
void check_dtype_runs(const ModelSpec& spec, const Settings& settings) {
  run_in_context(spec.name, settings, [&] {
    torch::NoGradGuard no_grad;
    auto model = std::make_shared<LayeredModelImpl>(
        spec, std::vector<int64_t>(spec.layer_specs().size() + 1, 8),
        at::detail::createCPUGenerator(0));
    model->to(settings.device, settings.dtype);
    const auto x = torch::rand({2, 8}).to(settings.device, settings.dtype);
    model->forward(x);
    model->forward_eager(x);
    synchronize(settings.device);
  });
}

#ifdef FUSEDLINEAR_WITH_CUDA
// Captures forward(x) (a fused model's) in a CUDA Graph (after warm-up, on a side stream, as
// capture needs) and times its replays against launches of the same call on the same fixed input.
void time_cuda_graph(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                     const torch::Tensor& x, const Settings& s, const Result& r, FusedResult& f) {
  synchronize(s.device);
  at::cuda::CUDAGraph graph;
  torch::Tensor captured_out;
  {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
    for (int i = 0; i < 3; ++i) forward(x);  // cuBLAS handle, workspace, allocator
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    captured_out = forward(x);
    graph.capture_end();
  }
  const auto times = time_interleaved(s.device, s.warmup, s.iters,
                                      {[&](int) { graph.replay(); }, [&](int) { forward(x); }});
  f.timings["graph_replay"] = times[0];
  f.timings["forward_static"] = times[1];
  graph.replay();
  const torch::Tensor launched = forward(x);
  if (!torch::equal(captured_out, launched)) {
    std::cerr << "fusedlinear: warning: " << r.model << " " << dtype_name(r.dtype) << " " << f.gemm
              << " batch " << r.batch << ": the CUDA Graph's output differs from a launch's\n";
    f.graph_ok = false;
  }
}
#endif

// "input-major" or "output-major" where the Linears' weights are all laid out alike, else
// "mixed".
std::string layout_name(const std::vector<LinearChainImpl*>& linears) {
  const auto input_major = [](LinearChainImpl* l) {
    return l->weight_layout() == WeightLayout::kInputMajor;
  };
  if (std::all_of(linears.begin(), linears.end(), input_major)) return "input-major";
  if (std::none_of(linears.begin(), linears.end(), input_major)) return "output-major";
  return "mixed";
}

// Each fused forward's cuBLAS counterpart: the same precision's forward with --gemm cublas,
// where it ran too.
void set_cublas_forwards(Result& r) {
  for (FusedResult& f : r.fused) {
    for (const FusedResult& other : r.fused) {
      if (other.precision == f.precision && other.kernel == GemmKernel::kCublas) {
        f.cublas_forward_us = median_of(other.timings, "forward");
      }
    }
  }
}

// Each fused forward's cuBLAS counterpart, then, where asked, each fused model (r.fused[p]'s)
// replayed from a CUDA Graph.
template <class Model>
void finish_fused_forwards(Result& r,
                           [[maybe_unused]] const std::vector<std::shared_ptr<Model>>& fused,
                           [[maybe_unused]] const torch::Tensor& x,
                           [[maybe_unused]] const Settings& s, [[maybe_unused]] bool cuda_graph) {
  set_cublas_forwards(r);
#ifdef FUSEDLINEAR_WITH_CUDA
  for (size_t p = 0; p < r.fused.size() && cuda_graph; ++p) {
    Model& model = *fused[p];
    time_cuda_graph([&](const torch::Tensor& in) { return model.forward(in); }, x, s, r,
                    r.fused[p]);
  }
#endif
}

// The models of one (model, dtype) sweep: eager's, with the weight as nn.Linear lays it out,
// and one fused model (the same parameters) per precision and GEMM kernel, each laying its
// weight out per batch.
struct Models {
  std::shared_ptr<LinearChainImpl> eager;
  std::vector<std::shared_ptr<LinearChainImpl>> fused;  // each configured as it was built
};

// Times one configuration. x_all: [N, batch, in] rotating inputs; y_all: [M, batch, out], the
// GEMM outputs the chains read.
Result bench_one(Models& models, const ModelSpec& spec, int64_t batch, const Settings& s,
                 bool cuda_graph, double atol, double rtol) {
  LinearChainImpl& model = *models.eager;
  Result r;
  r.model = spec.name;
  r.dtype = s.dtype;
  r.batch = batch;
  r.in_features = model.in_features();
  r.out_features = model.out_features();
  const int64_t elem = int64_t(c10::elementSize(s.dtype)), cache = cache_bytes(s.device);
  r.flops_per_row = 2.0 * double(r.in_features * r.out_features);
  r.weight_bytes = double(r.in_features * r.out_features) * double(elem);
  r.x_buffers = bench::rotation_count(batch * r.in_features * elem, cache);
  r.y_buffers = bench::rotation_count(batch * r.out_features * elem, cache);

  // torch.rand inputs (uniform in [0, 1), as the reference workload), drawn on the device.
  torch::manual_seed(s.seed + uint64_t(batch));
  const auto options = torch::TensorOptions().device(s.device);
  const torch::Tensor x_all = torch::rand({r.x_buffers, batch, r.in_features}, options).to(s.dtype);
  // On a GPU the yardstick of the forwards: cuBLAS's bfloat16 GEMM alone (bfloat16 out, no bias)
  // on the same rotating inputs, the fastest GEMM of this shape a float32-accumulating forward
  // could run; timed in turns with them.
  const bool time_bf16_gemm = s.device.is_cuda();
  const std::vector<torch::Tensor> xs_bf16 =
      time_bf16_gemm ? x_all.to(torch::kBFloat16).unbind(0) : std::vector<torch::Tensor>{};
  const torch::Tensor w_bf16_t =
      time_bf16_gemm ? model.linear()->weight.detach().to(torch::kBFloat16).t() : torch::Tensor();
  torch::Tensor y_all = torch::empty({r.y_buffers, batch, r.out_features}, options.dtype(s.dtype));
  for (int i = 0; i < r.y_buffers; ++i) {
    y_all[i].copy_(model.matmul_without_bias(x_all[i % r.x_buffers]));  // realistic values
  }
  const std::vector<torch::Tensor> xs = x_all.unbind(0), ys = y_all.unbind(0);
  const auto x = [&](int i) -> const torch::Tensor& { return xs[size_t(i) % xs.size()]; };
  const auto y = [&](int i) -> const torch::Tensor& { return ys[size_t(i) % ys.size()]; };
  LinearChainImpl& chain_model = *models.fused.front();

  // The check of the chain: the fused chain against the eager chain on the same GEMM output.
  {
    const torch::Tensor eager = model.chain_eager(y(0) + model.linear()->bias);
    const OutputDifference d = compare_outputs(chain_model.epilogue_fused(y(0)), eager, atol, rtol);
    r.atol = atol;
    r.rtol = rtol;
    r.chain_max_abs_diff = d.max_abs;
    r.chain_ok = d.allclose;
  }

  // What is compared is timed in turns (time_interleaved), so slow drifts of the device's
  // clocks weigh on each side alike.
  const auto measure = [&](std::map<std::string, TimingStats>& into, std::vector<const char*> keys,
                           const std::vector<std::function<void(int)>>& fns) {
    const auto stats = time_interleaved(s.device, s.warmup, s.iters, fns);
    for (size_t k = 0; k < keys.size(); ++k) into[keys[k]] = stats[k];
  };
  measure(r.timings, {"copy", "chain_eager", "chain_fused"},
          {[&](int i) { y(i).clone(); }, [&](int i) { model.chain_eager(y(i)); },
           [&](int i) { chain_model.epilogue_fused(y(i)); }});
  if (spec.compiled) {
    // The same chain given as a spec: the run-time interpreter's kernels, against the compiled
    // declaration's in turns.
    const std::vector<torch::Tensor> params = chain_model.slot_params();
    const c10::optional<torch::Tensor> bias = chain_model.linear()->bias;
    // Each reads a buffer the other did not just read: the second of a turn would otherwise find
    // its input in the cache.
    const int apart = int(ys.size() / 2);
    measure(r.timings, {"chain_compiled", "chain_runtime"},
            {[&](int i) { chain_model.epilogue_fused(y(i)); },
             [&](int i) { fused_epilogue(y(i + apart), bias, params, spec.chain); }});
  }
  // The memory system's pace on W's bytes, the floor of a forward that must read W.
  measure(r.timings, {"weight_copy"}, {[&](int) { model.linear()->weight.clone(); }});

  // Per precision: the GEMM, and the forward against the eager forward, in turns.
  const torch::Tensor eager_out = model.forward_eager(x(0));
  auto& linear = model.linear();
  const torch::Tensor reference = model.reference(x(0));
  std::vector<std::function<void(int)>> gemms = {[&](int i) { linear->forward(x(i)); }};
  std::vector<std::function<void(int)>> forwards = {[&](int i) { model.forward_eager(x(i)); }};
  for (const auto& fused : models.fused) {
    LinearChainImpl& fused_model = *fused;
    FusedResult f;
    f.precision = fused_model.precision();
    f.kernel = fused_model.gemm_kernel();
    choose_weight_layout(fused_model, x(0));
    f.weight_layout = layout_name({&fused_model});
    const int64_t split_bytes = fused_model.split_weight_bytes();  // splits again if moved
    f.weight_bytes = double(split_bytes > 0 ? split_bytes : r.weight_bytes);
    f.gemm = gemm_description(fused_model, x(0));
    f.counted = verdict_counts(f.precision, s);
    const torch::Tensor out = fused_model.forward(x(0));
    f.vs_eager = compare_outputs(out, eager_out, atol, rtol);
    f.vs_float64 = compare_outputs(out, reference, atol, rtol);
    r.fused.push_back(f);
    gemms.emplace_back([&fused_model, &x](int i) { fused_model.matmul_without_bias(x(i)); });
    forwards.emplace_back([&fused_model, &x](int i) { fused_model.forward(x(i)); });
  }
  if (time_bf16_gemm) {
    forwards.emplace_back([&](int i) { torch::mm(xs_bf16[size_t(i) % xs_bf16.size()], w_bf16_t); });
  }
  const auto gemm_times = time_interleaved(s.device, s.warmup, s.iters, gemms);
  const auto forward_times = time_interleaved(s.device, s.warmup, s.iters, forwards);
  r.timings["gemm_addmm"] = gemm_times[0];
  r.timings["forward_eager"] = forward_times[0];
  if (time_bf16_gemm) r.timings["gemm_bf16"] = forward_times.back();
  for (size_t p = 0; p < r.fused.size(); ++p) {
    r.fused[p].timings["gemm"] = gemm_times[p + 1];
    r.fused[p].timings["forward"] = forward_times[p + 1];
  }
  finish_fused_forwards(r, models.fused, x(0), s, cuda_graph);
  return r;
}

// The models of one (layered model, dtype) sweep, as Models for one Linear.
struct LayeredModels {
  std::shared_ptr<LayeredModelImpl> eager;
  std::vector<std::shared_ptr<LayeredModelImpl>> fused;  // each configured as it was built
};

// Times one configuration of a layered model, whole: eager libtorch's forward, the fused
// forward in each precision and GEMM kernel (LayeredModel::forward, as `run` runs it), and the
// floors compare reports (floors.h), all in turns. Its chains run inside the forwards: none is
// timed alone.
Result bench_layered_one(LayeredModels& models, const ModelSpec& spec, int64_t batch,
                         const Settings& s, bool cuda_graph, double atol, double rtol) {
  LayeredModelImpl& model = *models.eager;
  Result r;
  r.model = spec.name;
  r.layered = true;
  r.linears = int(model.linears().size());
  r.dtype = s.dtype;
  r.batch = batch;
  r.in_features = model.in_features();
  r.out_features = model.out_features();
  r.atol = atol;
  r.rtol = rtol;
  const int64_t elem = int64_t(c10::elementSize(s.dtype));
  r.flops_per_row = model.flops_per_row();
  for (LinearChainImpl* linear : model.linears()) {
    r.weight_bytes += double(linear->linear()->weight.numel()) * double(elem);
  }
  r.x_buffers = bench::rotation_count(batch * r.in_features * elem, cache_bytes(s.device));

  torch::manual_seed(s.seed + uint64_t(batch));
  const auto options = torch::TensorOptions().device(s.device);
  const std::vector<torch::Tensor> xs =
      torch::rand({r.x_buffers, batch, r.in_features}, options).to(s.dtype).unbind(0);
  const auto x = [&](int i) -> const torch::Tensor& { return xs[size_t(i) % xs.size()]; };

  const torch::Tensor eager_out = model.forward_eager(x(0));
  const torch::Tensor reference = model.reference(x(0));
  std::vector<std::function<void(int)>> calls = {[&](int i) { model.forward_eager(x(i)); }};
  for (const auto& fused : models.fused) {
    LayeredModelImpl& fused_model = *fused;
    LinearChainImpl& first = *fused_model.linears().front();
    FusedResult f;
    f.precision = first.precision();
    f.kernel = first.gemm_kernel();
    choose_weight_layout(fused_model, x(0));
    f.weight_layout = layout_name(fused_model.linears());
    const int64_t split_bytes = fused_model.split_weight_bytes();
    f.weight_bytes = double(split_bytes > 0 ? split_bytes : r.weight_bytes);
    f.gemm = fused_model.gemm_description(x(0));
    f.counted = verdict_counts(f.precision, s);
    const torch::Tensor out = fused_model.forward(x(0));
    f.vs_eager = compare_outputs(out, eager_out, atol, rtol);
    f.vs_float64 = compare_outputs(out, reference, atol, rtol);
    r.fused.push_back(f);
    calls.emplace_back([&fused_model, &x](int i) { fused_model.forward(x(i)); });
  }
  const auto times = time_interleaved(s.device, s.warmup, s.iters, calls);
  const ForwardFloors floors = ForwardFloors::time(s.device, s.warmup, s.iters, model, x, batch);
  r.timings["forward_eager"] = times[0];
  r.timings["gemm_addmm"] = floors.gemms;
  r.timings["weight_copy"] = floors.weight_copy;
  for (size_t p = 0; p < r.fused.size(); ++p) r.fused[p].timings["forward"] = times[p + 1];
  finish_fused_forwards(r, models.fused, x(0), s, cuda_graph);
  return r;
}

std::vector<std::string> model_names_of(const std::vector<ModelSpec>& specs) {
  std::vector<std::string> names;
  for (const ModelSpec& spec : specs) names.push_back(spec.name);
  return names;
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

// Text in a CSV cell: commas (gemm_description's "ieee, skinny", a chain spec's) as semicolons.
std::string csv_text(std::string text) {
  std::replace(text.begin(), text.end(), ',', ';');
  return text;
}

nlohmann::ordered_json timings_json(const std::map<std::string, TimingStats>& timings,
                                    const char* const* begin, const char* const* end) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* const* key = begin; key != end; ++key) {
    if (timings.count(*key)) out[*key] = timing_json(timings.at(*key));
  }
  return out;
}

nlohmann::ordered_json figures_json(const Figures& figures) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [key, value] : figures) out[key] = number_or_null(value);
  return out;
}

// One CSV row per configuration and precision: the shared columns, then the precision's.
std::string render_csv(const std::vector<Result>& results) {
  std::ostringstream out;
  out << "model,dtype,batch,in_features,out_features,x_buffers,y_buffers,chain_bytes";
  const auto timing_columns = [&](const char* name) {
    out << "," << name << "_median_us," << name << "_p10_us," << name << "_p90_us";
  };
  for (const char* t : kSharedTimings) timing_columns(t);
  for (const auto& d : chain_figures(Result())) out << "," << d.first;
  out << ",chain_max_abs_diff,chain_ok,precision,gemm_kernel,gemm_ran,fused_weight_layout";
  for (const char* t : kFusedTimings) timing_columns((std::string("fused_") + t).c_str());
  for (const auto& d : fused_figures(Result(), FusedResult())) out << "," << d.first;
  out << ",max_abs_err_vs_eager,max_rel_err_vs_eager,allclose,counted_in_verdict,"
         "max_abs_err_vs_float64,nonfinite,graph_ok,layered,linears\n";
  const auto timing_cells = [&](const std::map<std::string, TimingStats>& timings,
                                const char* name) {
    const auto it = timings.find(name);
    const bool has = it != timings.end();
    out << "," << (has ? csv_number(it->second.median_us) : "") << ","
        << (has ? csv_number(it->second.p10_us) : "") << ","
        << (has ? csv_number(it->second.p90_us) : "");
  };
  for (const auto& r : results) {
    for (const auto& f : r.fused) {
      out << csv_text(r.model) << "," << dtype_name(r.dtype) << "," << r.batch << ","
          << r.in_features << "," << r.out_features << "," << r.x_buffers << "," << r.y_buffers
          << "," << csv_number(r.chain_bytes());
      for (const char* t : kSharedTimings) timing_cells(r.timings, t);
      for (const auto& d : chain_figures(r)) out << "," << csv_number(d.second);
      out << "," << (r.layered ? "" : csv_number(r.chain_max_abs_diff)) << ","
          << (r.layered    ? ""
              : r.chain_ok ? "true"
                           : "false")
          << "," << precision_name(f.precision) << "," << gemm_kernel_name(f.kernel) << ","
          << csv_text(f.gemm) << "," << f.weight_layout;
      for (const char* t : kFusedTimings) timing_cells(f.timings, t);
      for (const auto& d : fused_figures(r, f)) out << "," << csv_number(d.second);
      out << "," << csv_number(f.vs_eager.max_abs) << "," << csv_number(f.vs_eager.max_rel) << ","
          << (f.vs_eager.allclose ? "true" : "false") << "," << (f.counted ? "true" : "false")
          << "," << csv_number(f.vs_float64.max_abs) << ","
          << f.vs_eager.non_finite.fused_nan + f.vs_eager.non_finite.fused_inf << ","
          << (f.graph_ok ? "true" : "false") << "," << (r.layered ? "true" : "false") << ","
          << r.linears << "\n";
    }
  }
  return out.str();
}

// What the sweep covers: from the options, with the device's defaults.
struct Plan {
  std::vector<ModelSpec> models;
  std::vector<torch::ScalarType> dtypes;
  std::vector<int64_t> batches;
  std::vector<Precision> precisions;  // for float32; other dtypes run ieee
  std::vector<GemmKernel> kernels;
  bool cuda_graph = false;
  std::string csv_path, plot_path;
};

Plan plan_from_options(const Settings& settings, const cxxopts::ParseResult& parsed) {
  const bool cuda = settings.device.is_cuda();
  if (!settings.input.empty()) throw UsageError("--input: bench draws its own random inputs");
  if (!settings.output.empty()) throw UsageError("--output: bench writes --json, --csv or --plot");
  Plan plan;
  plan.cuda_graph = parsed.count("cuda-graph") > 0;
  if (plan.cuda_graph && !cuda) throw UsageError("--cuda-graph needs a CUDA device");
  // Sweep defaults: batch sizes from one row to the reference workload's, and the two dtypes that
  // matter on a GPU (float16 runs like bfloat16 there; ask for it with --dtypes); on a CPU a short
  // sweep in float32.
  plan.batches = cuda ? std::vector<int64_t>{1, 8, 64, 256, 1024} : std::vector<int64_t>{1, 8, 64};
  if (parsed.count("batches")) {
    plan.batches = bench::parse_batches(parsed["batches"].as<std::string>());
  } else if (parsed.count("batch")) {
    plan.batches = {settings.batch};
  }
  plan.dtypes = {torch::kFloat32};
  if (parsed.count("dtypes")) {
    plan.dtypes = bench::parse_dtypes(parsed["dtypes"].as<std::string>());
  } else if (parsed.count("dtype")) {
    plan.dtypes = {settings.dtype};
  } else if (cuda) {
    plan.dtypes = {torch::kFloat32, torch::kBFloat16};
  }
  plan.precisions = settings.precisions;
  plan.kernels = settings.gemm_kernels;
  plan.csv_path = parsed.count("csv") ? parsed["csv"].as<std::string>() : "";
  plan.plot_path = parsed.count("plot") ? parsed["plot"].as<std::string>() : "";
  plan.models = settings.models;
  if (plan.models.empty()) plan.models = {detect_model(settings)};
  return plan;
}

// The device's dense GEMM rate in the run's dtype, the yardstick of the forwards' TFLOP/s: a square
// product large enough for the device's full rate, small enough to time in about a second on the
// CPU.
struct DenseGemm {
  TimingStats time;
  double flops = 0;
};
DenseGemm time_dense_gemm(const Settings& s) {
  const int64_t n = s.device.is_cuda() ? 8192 : 1024;
  const auto options = torch::TensorOptions().device(s.device).dtype(s.dtype);
  const torch::Tensor a = torch::rand({n, n}, options), b = torch::rand({n, n}, options);
  DenseGemm dense;
  dense.time = time_interleaved(s.device, s.warmup, s.iters, {[&](int) { torch::mm(a, b); }})[0];
  dense.flops = 2.0 * double(n) * double(n) * double(n);
  return dense;
}

std::vector<Result> run_sweep(const Plan& plan, const Settings& settings) {
  torch::NoGradGuard no_grad;
  std::vector<Result> results;
  std::map<torch::ScalarType, DenseGemm> dense_of;
  Progress progress(int(plan.models.size() * plan.dtypes.size() * plan.batches.size()));
  for (const auto& spec : plan.models) {
    const std::string& name = spec.name;
    for (const auto dtype : plan.dtypes) {
      Settings s = settings;
      s.dtype = dtype;
      Models models;  // a model of one Linear's
      LayeredModels layered;
      if (spec.layered()) {
        layered.eager = build_model(spec, s);
      } else {
        models.eager = build_linear_model(spec, s);
      }
      const std::vector<Precision> precisions =
          dtype == torch::kFloat32 ? plan.precisions : std::vector<Precision>{Precision::kIeee};
      for (const Precision precision : precisions) {
        for (const GemmKernel kernel : plan.kernels) {
          if (spec.layered()) {
            layered.fused.push_back(build_model(spec, s));
            configure_fused(*layered.fused.back(), precision, kernel, s);
          } else {
            models.fused.push_back(build_linear_model(spec, s));
            configure_fused(*models.fused.back(), precision, kernel, s);
          }
        }
      }
      // Once a dtype: every model of the sweep is weighed against the same rate.
      if (dense_of.count(dtype) == 0) dense_of[dtype] = time_dense_gemm(s);
      const DenseGemm& dense = dense_of[dtype];
      for (const int64_t batch : plan.batches) {
        progress.show(int(results.size()),
                      name + " " + dtype_name(dtype) + " batch " + std::to_string(batch));
        const double atol = settings.tolerance_given ? settings.atol : default_tolerance(dtype);
        const double rtol = settings.tolerance_given ? settings.rtol : default_tolerance(dtype);
        results.push_back(
            spec.layered() ? bench_layered_one(layered, spec, batch, s, plan.cuda_graph, atol, rtol)
                           : bench_one(models, spec, batch, s, plan.cuda_graph, atol, rtol));
        results.back().timings["dense_gemm"] = dense.time;
        results.back().dense_flops = dense.flops;
      }
    }
  }
  progress.clear();
  return results;
}

// The cells every whole-forward row holds in this order: eager's forward and the fused one in
// microseconds, the speedup, and that over the same precision's cuBLAS forward (with --gemm
// cublas,...).
void add_forward_cells(std::vector<std::string>& row, const Result& r, const FusedResult& f,
                       const Figures& figures) {
  row.push_back(fixed(r.median("forward_eager"), 1));
  row.push_back(fixed(median_of(f.timings, "forward"), 1));
  row.push_back(fixed(figure(figures, "forward_speedup"), 2));
  row.push_back(std::isfinite(f.cublas_forward_us)
                    ? fixed(figure(figures, "speedup_over_cublas_fused"), 2)
                    : "-");
}

// The cells every whole-forward row ends with: errors against eager's output and float64, whether
// it is allclose, and with --cuda-graph the graph replay's time and speedup.
void add_outcome_cells(std::vector<std::string>& row, const FusedResult& f, const Figures& figures,
                       const Plan& plan) {
  row.push_back(scientific(f.vs_eager.max_abs, 1));
  row.push_back(scientific(f.vs_float64.max_abs, 1));
  row.push_back(f.vs_eager.allclose ? "yes" : (f.counted ? "NO" : "no (speed mode)"));
  if (plan.cuda_graph) {
    row.push_back(fixed(median_of(f.timings, "graph_replay"), 1));
    row.push_back(fixed(figure(figures, "graph_speedup"), 2));
  }
}

// Models of one Linear: two tables, the chains per configuration, then the forwards per
// configuration and precision.
void print_one_linear_tables(const std::vector<Result>& results, const Plan& plan) {
  std::cout << "\nactivation chains (after the GEMM):\n";
  Table chains({"model", "dtype", "batch", "copy us", "eager chain us", "fused chain us",
                "fused x copy", "fused GB/s", "chain speedup", "run-time chain us",
                "run-time x compiled"});
  for (const auto& r : results) {
    const Figures figures = chain_figures(r);
    chains.add_row(
        {r.model, dtype_name(r.dtype), std::to_string(r.batch), fixed(r.median("copy"), 1),
         fixed(r.median("chain_eager"), 1), fixed(r.median("chain_fused"), 1),
         fixed(figure(figures, "chain_fused_x_copy"), 2),
         fixed(figure(figures, "chain_fused_gbps"), 1), fixed(figure(figures, "chain_speedup"), 2),
         std::isfinite(r.median("chain_runtime")) ? fixed(r.median("chain_runtime"), 1) : "-",
         std::isfinite(r.median("chain_runtime"))
             ? fixed(figure(figures, "chain_runtime_x_compiled"), 3)
             : "-"});
  }
  chains.print(std::cout);

  std::cout << "\nwhole forward:\n";
  std::vector<std::string> header = {
      "model",         "dtype",        "batch",         "GEMM ran",     "W",
      "eager gemm us", "GFLOP/s",      "fused gemm us", "eager fwd us", "fused fwd us",
      "fwd speedup",   "vs cuBLAS",    "fwd TFLOP/s",   "% bf16 GEMM",  "W GB/s",
      "W % copy",      "err vs eager", "err vs fp64",   "allclose"};
  if (plan.cuda_graph) header.insert(header.end(), {"graph fwd us", "graph speedup"});
  Table forwards(header);
  for (const auto& r : results) {
    for (const auto& f : r.fused) {
      const Figures figures = fused_figures(r, f);
      std::vector<std::string> row = {r.model,
                                      dtype_name(r.dtype),
                                      std::to_string(r.batch),
                                      f.gemm,
                                      f.weight_layout == "input-major" ? "in-major" : "out-major",
                                      fixed(r.median("gemm_addmm"), 1),
                                      fixed(figure(chain_figures(r), "gemm_addmm_tflops") * 1e3, 1),
                                      fixed(median_of(f.timings, "gemm"), 1)};
      add_forward_cells(row, r, f, figures);
      row.insert(row.end(), {fixed(figure(figures, "forward_tflops"), 1),
                             std::isfinite(r.median("gemm_bf16"))
                                 ? fixed(figure(figures, "forward_percent_of_bf16_gemm"), 1)
                                 : "-",
                             fixed(figure(figures, "weight_gbps"), 0),
                             fixed(figure(figures, "weight_percent_of_copy"), 0)});
      add_outcome_cells(row, f, figures, plan);
      forwards.add_row(row);
    }
  }
  forwards.print(std::cout);
  std::cout << "\neager gemm: addmm with bias (eager's GEMM), and its GFLOP/s; fused gemm: x @ W^T "
               "without bias in "
               "the precision, with the weight layout W (the faster of input- and output-major "
               "at this batch); GEMM ran: the precision and kernel at this batch; x copy: fused "
               "chain time / copy time; GB/s: bytes read + written; speedups: eager time / fused "
               "time; vs cuBLAS: the same precision's cuBLAS forward time / this one (with --gemm "
               "cublas,...); fwd TFLOP/s: the model's 2 x batch x in x out / the fused forward's "
               "time; % bf16 "
               "GEMM: on a GPU, the time of cuBLAS's bfloat16 GEMM alone at this shape (timed in "
               "turns with the forwards) / the fused forward's, in percent; W GB/s: W's bytes as "
               "the forward reads them / its time, and that as a "
               "percentage of a copy of W (read + written); errors: max abs, forward outputs "
               "against eager's and against float64"
            << (plan.cuda_graph ? "; graph speedup: launches / graph replay of the fused forward"
                                : "")
            << "\n";
}

// Rows a second span 1e3 to 1e10 over a sweep's batches: three significant digits.
std::string samples_per_second(double value) {
  if (!std::isfinite(value)) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", value);
  return buffer;
}

// Layered models: one table, the whole forward per configuration and precision beside eager's and
// the floors.
void print_layered_table(const std::vector<Result>& results, const Plan& plan) {
  std::cout << "\nlayered models, whole forward:\n";
  std::vector<std::string> header = {
      "model",          "dtype",     "batch",         "linears",       "GEMM ran",
      "eager GEMMs us", "GFLOP/s",   "W read us",     "eager fwd us",  "fused fwd us",
      "fwd speedup",    "vs cuBLAS", "eager x GEMMs", "fused x GEMMs", "fused x W read",
      "samples/s",      "TFLOP/s",   "% dense",       "err vs eager",  "err vs fp64",
      "allclose"};
  if (plan.cuda_graph) header.insert(header.end(), {"graph fwd us", "graph speedup"});
  Table table(header);
  for (const auto& r : results) {
    const Figures shared = chain_figures(r);
    for (const auto& f : r.fused) {
      const Figures figures = fused_figures(r, f);
      std::vector<std::string> row = {r.model,
                                      dtype_name(r.dtype),
                                      std::to_string(r.batch),
                                      std::to_string(r.linears),
                                      f.gemm,
                                      fixed(r.median("gemm_addmm"), 1),
                                      fixed(figure(shared, "gemm_addmm_tflops") * 1e3, 1),
                                      fixed(weight_read_us(r.timings.at("weight_copy")), 1)};
      add_forward_cells(row, r, f, figures);
      row.insert(row.end(), {fixed(figure(shared, "forward_eager_x_eager_gemm"), 2),
                             fixed(figure(figures, "forward_x_eager_gemm"), 2),
                             fixed(figure(figures, "forward_x_weight_read"), 2),
                             samples_per_second(figure(figures, "forward_samples_per_s")),
                             fixed(figure(figures, "forward_tflops"), 3),
                             fixed(figure(figures, "forward_percent_of_dense"), 1)});
      add_outcome_cells(row, f, figures, plan);
      table.add_row(row);
    }
  }
  table.print(std::cout);
  std::cout
      << "\nlayered: eager fwd: libtorch's forward of the model, op by op (LayeredModel's "
         "eager form); fused fwd: the fused model's whole forward (as fusedlinear run runs "
         "it) in the precision; eager GEMMs: every Linear's addmm with bias alone, and their "
         "GFLOP/s; W read: the model's weights read at a copy's pace (half a copy's time); "
         "x GEMMs, x W read: a forward's time over those floors; fwd speedup: eager time / "
         "fused time; vs cuBLAS: the same precision's cuBLAS forward time / this one; "
         "samples/s, TFLOP/s: the fused forward's rows a second and its GEMMs' rate; % dense: "
         "that rate against a square GEMM's in the dtype, timed in the same run; "
         "errors: max abs, forward outputs against eager's and against float64"
      << (plan.cuda_graph ? "; graph speedup: launches / graph replay of the fused forward" : "")
      << "\n";
}

void print_tables(const std::vector<Result>& results, const Plan& plan, const std::string& platform,
                  const Settings& settings) {
  std::cout << "fusedlinear bench: " << platform << "; " << settings.iters << " timed runs after "
            << settings.warmup << " warm-up, medians in microseconds; rotating inputs, fresh "
            << "outputs; models " << settings.model_source << "\n";
  std::vector<Result> one_linear, layered;
  for (const auto& r : results) (r.layered ? layered : one_linear).push_back(r);
  if (!one_linear.empty()) print_one_linear_tables(one_linear, plan);
  if (!layered.empty()) print_layered_table(layered, plan);
}

// Warnings for what failed its check; returns how many.
int report_failures(const std::vector<Result>& results) {
  int failures = 0;
  for (const auto& r : results) {
    if (!r.chain_ok) {
      ++failures;
      std::cerr << "fusedlinear: warning: " << r.model << " " << dtype_name(r.dtype) << " batch "
                << r.batch << ": the fused chain differs from the eager chain by up to "
                << scientific(r.chain_max_abs_diff, 2) << " (atol " << scientific(r.atol, 1)
                << ", rtol " << scientific(r.rtol, 1) << ")\n";
    }
    for (const auto& f : r.fused) {
      if (!f.graph_ok) ++failures;  // warned about as it was found
      if (!f.vs_eager.allclose && f.counted) {
        ++failures;
        std::cerr << "fusedlinear: warning: " << r.model << " " << dtype_name(r.dtype) << " "
                  << f.gemm << " batch " << r.batch
                  << ": the fused forward differs from the eager forward by up to "
                  << scientific(f.vs_eager.max_abs, 2) << "\n";
      }
    }
  }
  return failures;
}

// What a bench JSON starts with, the models' and the ops' alike: the command and its date, the
// machine and the libraries it ran on.
nlohmann::ordered_json bench_header(const Settings& settings, const std::string& platform,
                                    const std::string& date) {
  const bool cuda = settings.device.is_cuda();
  return {{"command", "bench"},
          {"command_line", command_line()},
          {"date_utc", date},
          {"platform", platform},
          {"threads", at::get_num_threads()},
          {"blas", blas_description()},
          {"device", device_name(settings.device)},
          {"device_type", cuda ? "cuda" : "cpu"},
          {"libtorch_version", TORCH_VERSION},
          {"cuda_version",
           cuda ? nlohmann::ordered_json(cuda_version()) : nlohmann::ordered_json(nullptr)}};
}

nlohmann::ordered_json bench_json(const std::vector<Result>& results, const Plan& plan,
                                  const Settings& settings, const std::string& platform,
                                  const std::string& date) {
  nlohmann::ordered_json header = bench_header(settings, platform, date);
  header["models"] = model_names_of(plan.models);
  header["model_source"] = settings.model_source;
  header["batches"] = plan.batches;
  header["iters"] = settings.iters;
  header["warmup"] = settings.warmup;
  header["seed"] = settings.seed;
  header["cuda_graph"] = plan.cuda_graph;
  header["bf16x3_min_rows"] = settings.bf16x3_min_rows;
  header["assumed_cache_bytes"] = cache_bytes(settings.device);
  header["weights"] = settings.weights.empty() ? nlohmann::ordered_json(nullptr)
                                               : nlohmann::ordered_json(settings.weights);
  header["in_features"] = results.empty() ? 0 : results.front().in_features;
  header["out_features"] = results.empty() ? 0 : results.front().out_features;
  header["dtypes"] = nlohmann::ordered_json::array();
  for (const auto dtype : plan.dtypes) header["dtypes"].push_back(dtype_name(dtype));
  header["precisions"] = nlohmann::ordered_json::array();
  for (const auto precision : plan.precisions)
    header["precisions"].push_back(precision_name(precision));
  header["gemm_kernels"] = nlohmann::ordered_json::array();
  for (const auto kernel : plan.kernels) header["gemm_kernels"].push_back(gemm_kernel_name(kernel));
  // What each timing times (a result's "fused" entries hold those named fused.*), for models of
  // one Linear and, where they differ, layered models (results with "layered" true).
  nlohmann::ordered_json timed = nlohmann::ordered_json::object();
  for (const TimedDescription& t : kTimed) {
    timed[t.name] = {{"one_linear", t.one_linear},
                     {"layered", t.layered ? nlohmann::ordered_json(t.layered)
                                           : nlohmann::ordered_json("not timed")}};
  }
  header["timed"] = timed;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& r : results) {
    nlohmann::ordered_json fused = nlohmann::ordered_json::array();
    for (const auto& f : r.fused) {
      fused.push_back(
          {{"precision", precision_name(f.precision)},
           {"gemm_kernel", gemm_kernel_name(f.kernel)},
           {"gemm_ran", f.gemm},
           {"weight_layout", f.weight_layout},
           {"timings", timings_json(f.timings, std::begin(kFusedTimings), std::end(kFusedTimings))},
           {"derived", figures_json(fused_figures(r, f))},
           {"vs_eager", difference_json(f.vs_eager)},
           {"vs_float64", difference_json(f.vs_float64)},
           {"counted_in_verdict", f.counted},
           {"graph_ok", f.graph_ok}});
    }
    rows.push_back(
        {{"model", r.model},
         {"layered", r.layered},
         {"linears", r.linears},
         {"dtype", dtype_name(r.dtype)},
         {"batch", r.batch},
         {"in_features", r.in_features},
         {"out_features", r.out_features},
         {"x_buffers", r.x_buffers},
         {"y_buffers", r.y_buffers},
         {"chain_bytes", number_or_null(r.chain_bytes())},
         {"timings", timings_json(r.timings, std::begin(kSharedTimings), std::end(kSharedTimings))},
         {"derived", figures_json(chain_figures(r))},
         {"chain_check", r.layered ? nlohmann::ordered_json(nullptr)
                                   : nlohmann::ordered_json({{"max_abs_diff", r.chain_max_abs_diff},
                                                             {"atol", r.atol},
                                                             {"rtol", r.rtol},
                                                             {"ok", r.chain_ok}})},
         {"fused", fused}});
  }
  return {{"header", header}, {"results", rows}};
}

// Speedups as bars, a group per configuration: the chain, then the forward in each precision.
std::string bench_plot(const std::vector<Result>& results, const Plan& plan,
                       const std::string& platform, const std::string& date, int iters) {
  std::vector<std::string> groups, series = {"activation chain"};
  for (const Precision precision : plan.precisions) {
    for (const GemmKernel kernel : plan.kernels) {
      series.push_back(
          std::string("whole forward, ") + precision_name(precision) +
          (plan.kernels.size() > 1 ? std::string(", ") + gemm_kernel_name(kernel) : ""));
    }
  }
  if (plan.cuda_graph) series.emplace_back("CUDA Graph vs launches (first precision)");
  std::vector<std::vector<double>> values;
  for (const auto& r : results) {
    groups.push_back(r.model + "  " + dtype_name(r.dtype) + "  batch " + std::to_string(r.batch));
    std::vector<double> bars = {figure(chain_figures(r), "chain_speedup")};
    for (const Precision precision : plan.precisions) {
      for (const GemmKernel kernel : plan.kernels) {
        double speedup = NAN;
        for (const auto& f : r.fused) {
          if (f.precision == precision && f.kernel == kernel) {
            speedup = figure(fused_figures(r, f), "forward_speedup");
          }
        }
        bars.push_back(speedup);
      }
    }
    if (plan.cuda_graph) bars.push_back(figure(fused_figures(r, r.fused.front()), "graph_speedup"));
    values.push_back(bars);
  }
  BarChartOptions chart;
  chart.subtitle = platform + "  |  " + date + "  |  medians of " + std::to_string(iters) + " runs";
  chart.axis_label =
      "speedup of fused over eager (eager time / fused time; right of the dashed line: faster)";
  return render_bar_chart("fusedlinear bench: fused vs eager", groups, series, values, chart);
}

// Every configuration's memory, before the first is timed: a batch that cannot fit would
// otherwise fail only after the ones before it ran, for minutes at large shapes.
void check_sweep_memory(const Plan& plan, const Settings& settings, const std::string& option) {
  const double available = available_bytes(settings.device);
  if (!std::isfinite(available)) return;
  for (const auto& spec : plan.models) {
    const std::string& name = spec.name;
    // The model's input width, its widest layer's and its weights' elements. A layered model's,
    // estimated as if each batch held only the widest layer's activations.
    int64_t in = settings.in_features, out = settings.out_features;
    double weight_elements = double(in) * double(out);
    if (spec.layered()) {
      const auto model = build_model(spec, settings);
      in = model->in_features();
      out = in;
      weight_elements = 0;
      for (LinearChainImpl* linear : model->linears()) {
        out = std::max({out, linear->in_features(), linear->out_features()});
        weight_elements += double(linear->linear()->weight.numel());
      }
    } else if (in == 0 || out == 0) {  // the shape of --weights
      const auto model = build_linear_model(spec, settings);
      in = model->in_features();
      out = model->out_features();
      weight_elements = double(in) * double(out);
    }
    for (const auto dtype : plan.dtypes) {
      const int64_t element = int64_t(c10::elementSize(dtype));
      const size_t fused =
          (dtype == torch::kFloat32 ? plan.precisions.size() : 1) * plan.kernels.size();
      const double weights = double(1 + fused) * weight_elements * double(element);
      for (const int64_t batch : plan.batches) {
        const double need =
            weights + bench::batch_bytes(batch, in, out, element, cache_bytes(settings.device));
        if (need > available) {
          throw out_of_memory_error(settings, "about " + byte_size(need) + " for batch " +
                                                  std::to_string(batch) + " of " + option + " (" +
                                                  name + ", " + dtype_name(dtype) + "; " +
                                                  byte_size(available) + " available)");
        }
      }
    }
  }
}

// --- bench --ops: each op of the vocabulary alone, fused against eager --------------------------

// An op of the vocabulary each, with arguments where it needs them; add(p) is the one column
// op (a parameter of [out_features]), the others' column forms run the same loop.
const char* const kOpSpecs[] = {"relu",         "relu6",      "leaky_relu(0.1)",
                                "elu",          "selu",       "celu",
                                "gelu",         "gelu(tanh)", "silu",
                                "swish(1.702)", "mish",       "sigmoid",
                                "tanh",         "hardtanh",   "clamp(-2,2)",
                                "hardsigmoid",  "hardswish",  "softplus(2)",
                                "softsign",     "tanhshrink", "logsigmoid",
                                "square",       "add(0.5)",   "sub(0.5)",
                                "mul(2)",       "div(3)",     "add(p)"};

struct OpResult {
  std::string op;
  torch::ScalarType dtype = torch::kFloat32;
  int64_t batch = 0, cols = 0;
  TimingStats copy, eager, fused;
  OutputDifference vs_eager;
};

// Each op as a chain spec (the interpreter's loop; compiled chains run the same loop) on rotating
// [batch, out_features] inputs, no bias, timed in turns with its eager op and a copy.
std::vector<OpResult> run_ops(const Plan& plan, const Settings& settings) {
  torch::NoGradGuard no_grad;
  const int64_t cols = settings.out_features > 0 ? settings.out_features : 1024;
  std::vector<OpResult> results;
  Progress progress(int(std::size(kOpSpecs) * plan.dtypes.size() * plan.batches.size()));
  for (const auto dtype : plan.dtypes) {
    for (const int64_t batch : plan.batches) {
      const auto options = torch::TensorOptions().device(settings.device);
      const int64_t element = int64_t(c10::elementSize(dtype));
      const int buffers =
          bench::rotation_count(batch * cols * element, cache_bytes(settings.device));
      torch::manual_seed(settings.seed + uint64_t(batch));
      const std::vector<torch::Tensor> ys =
          (torch::randn({buffers, batch, cols}, options) * 4).to(dtype).unbind(0);
      const auto y = [&](int i) -> const torch::Tensor& { return ys[size_t(i) % ys.size()]; };
      const torch::Tensor p = (torch::rand({cols}, options) + 0.5).to(dtype);
      for (const char* spec : kOpSpecs) {
        progress.show(int(results.size()), std::string(spec) + " " + dtype_name(dtype) + " batch " +
                                               std::to_string(batch));
        const ParsedChain chain = parse_chain(spec);
        const std::vector<torch::Tensor> params(chain.slot_params().size(), p);
        OpResult r;
        r.op = spec;
        r.dtype = dtype;
        r.batch = batch;
        r.cols = cols;
        const double tolerance =
            settings.tolerance_given ? settings.atol : default_tolerance(dtype);
        r.vs_eager = compare_outputs(fused_epilogue(y(0), c10::nullopt, params, spec),
                                     eager_chain(chain, y(0), params), tolerance, tolerance);
        // Each of a turn reads a buffer the others did not just read, so none finds its input in
        // the cache.
        const int apart = buffers / 3;
        const auto stats = time_interleaved(
            settings.device, settings.warmup, settings.iters,
            {[&](int i) { y(i).clone(); }, [&](int i) { eager_chain(chain, y(i + apart), params); },
             [&](int i) { fused_epilogue(y(i + 2 * apart), c10::nullopt, params, spec); }});
        r.copy = stats[0];
        r.eager = stats[1];
        r.fused = stats[2];
        results.push_back(r);
      }
    }
  }
  progress.clear();
  return results;
}

int print_ops(const std::vector<OpResult>& results, const std::string& platform,
              const Settings& settings) {
  std::cout << "fusedlinear bench --ops: " << platform << "; " << settings.iters
            << " timed runs after " << settings.warmup
            << " warm-up, medians in microseconds; rotating inputs, fresh outputs; each op alone "
               "on [batch, out_features], no bias\n\n";
  Table table({"op", "dtype", "batch", "cols", "copy us", "eager us", "fused us", "fused x copy",
               "speedup", "allclose"});
  int failures = 0;
  for (const auto& r : results) {
    failures += r.vs_eager.allclose ? 0 : 1;
    table.add_row({r.op, dtype_name(r.dtype), std::to_string(r.batch), std::to_string(r.cols),
                   fixed(r.copy.median_us, 1), fixed(r.eager.median_us, 1),
                   fixed(r.fused.median_us, 1), fixed(r.fused.median_us / r.copy.median_us, 2),
                   fixed(r.eager.median_us / r.fused.median_us, 2),
                   r.vs_eager.allclose ? "yes" : "NO"});
  }
  table.print(std::cout);
  std::cout << "\nfused: the op as a chain spec (fused_epilogue, the run-time interpreter's loop); "
               "eager: its libtorch op; speedup: eager time / fused time; allclose: the fused "
               "output against eager's within the dtype's tolerance\n";
  return failures;
}

// The ops' timings as JSON: bench_header, what was timed, then a result an op, dtype and batch.
nlohmann::ordered_json ops_json(const std::vector<OpResult>& results, const Plan& plan,
                                const Settings& settings, const std::string& platform,
                                const std::string& date) {
  nlohmann::ordered_json out = bench_header(settings, platform, date);
  out["ops"] = std::vector<std::string>(std::begin(kOpSpecs), std::end(kOpSpecs));
  out["dtypes"] = nlohmann::ordered_json::array();
  for (const auto dtype : plan.dtypes) out["dtypes"].push_back(dtype_name(dtype));
  out["batches"] = plan.batches;
  out["iters"] = settings.iters;
  out["warmup"] = settings.warmup;
  out["seed"] = settings.seed;
  out["timed"] = {{"copy", "a copy of the op's input (clone)"},
                  {"eager", "the op's libtorch op"},
                  {"fused", "the op as a chain spec (fused_epilogue)"}};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const OpResult& r : results) {
    rows.push_back({{"op", r.op},
                    {"dtype", dtype_name(r.dtype)},
                    {"batch", r.batch},
                    {"cols", r.cols},
                    {"timings",
                     {{"copy", timing_json(r.copy)},
                      {"eager", timing_json(r.eager)},
                      {"fused", timing_json(r.fused)}}},
                    {"speedup", r.eager.median_us / r.fused.median_us},
                    {"vs_eager", difference_json(r.vs_eager)}});
  }
  out["results"] = rows;
  return out;
}

// One CSV row an op, dtype and batch.
std::string render_ops_csv(const std::vector<OpResult>& results) {
  std::ostringstream out;
  out << "op,dtype,batch,cols";
  for (const char* name : {"copy", "eager", "fused"}) {
    out << "," << name << "_median_us," << name << "_p10_us," << name << "_p90_us";
  }
  out << ",speedup,max_abs_diff,allclose\n";
  for (const OpResult& r : results) {
    out << csv_text(r.op) << "," << dtype_name(r.dtype) << "," << r.batch << "," << r.cols;
    for (const TimingStats* t : {&r.copy, &r.eager, &r.fused}) {
      out << "," << csv_number(t->median_us) << "," << csv_number(t->p10_us) << ","
          << csv_number(t->p90_us);
    }
    out << "," << csv_number(r.eager.median_us / r.fused.median_us) << ","
        << csv_number(r.vs_eager.max_abs) << "," << (r.vs_eager.allclose ? "true" : "false")
        << "\n";
  }
  return out.str();
}

// --json and --csv where asked, each rendered only then.
void write_json_and_csv(const Settings& settings, const Plan& plan,
                        const std::function<std::string()>& json,
                        const std::function<std::string()>& csv) {
  if (!settings.json.empty()) {
    write_for_option("--json",
                     [&] { write_output_file(settings.json, json(), settings.overwrite); });
  }
  if (!plan.csv_path.empty()) {
    write_for_option("--csv", [&] { write_output_file(plan.csv_path, csv(), settings.overwrite); });
  }
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
      ("cuda-graph", "bench: also time the fused forward replayed from a CUDA Graph")
      ("ops", "bench: instead of the models, each op of the vocabulary alone, fused against its "
       "eager op, at each batch and --out-features columns");
  // clang-format on
}

int run_bench(const Settings& settings, const cxxopts::ParseResult& parsed) {
  const Plan plan = plan_from_options(settings, parsed);
  if (parsed.count("ops")) {
    if (!plan.plot_path.empty()) {
      throw UsageError("--plot draws the models' speedups; with --ops, give --json or --csv");
    }
    const std::string date = utc_now();
    const std::string platform = platform_description(settings.device);
    const std::vector<OpResult> results = run_ops(plan, settings);
    const int failures = print_ops(results, platform, settings);
    write_json_and_csv(
        settings, plan,
        [&] { return ops_json(results, plan, settings, platform, date).dump(2) + "\n"; },
        [&] { return render_ops_csv(results); });
    return failures > 0 ? 1 : 0;
  }
  for (const auto dtype : plan.dtypes) {
    Settings s = settings;
    s.dtype = dtype;
    for (const auto& spec : plan.models) check_dtype_runs(spec, s);
  }
  check_sweep_memory(plan, settings, parsed.count("batch") ? "--batch" : "--batches");
  const std::string date = utc_now();
  const std::string platform = platform_description(settings.device);  // may warn: first
  const std::vector<Result> results = run_sweep(plan, settings);
  print_tables(results, plan, platform, settings);
  const int failures = report_failures(results);
  write_json_and_csv(
      settings, plan,
      [&] { return bench_json(results, plan, settings, platform, date).dump(2) + "\n"; },
      [&] { return render_csv(results); });
  if (!plan.plot_path.empty()) {
    write_for_option("--plot", [&] {
      write_output_file(plan.plot_path, bench_plot(results, plan, platform, date, settings.iters),
                        settings.overwrite);
    });
  }
  return failures > 0 ? 1 : 0;
}

}  // namespace fusedlinear
