// `fusedlinear bench`: the SVG writer, the option parsers and an end-to-end run on the CPU.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/bench.h"
#include "app/cli.h"
#include "app/memory.h"
#include "app/model_setup.h"
#include "app/platform.h"
#include "app/svg_plot.h"
#include "tests/test_files.h"
#include "tests/test_support.h"

using namespace fusedlinear;

namespace {

using testing_support::TempDir;

std::string read_all(const std::string& path) { return testing_support::read_file(path); }

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Runs the program with `args`; returns its exit code, its stdout and stderr in out/err.
int run_program(const std::string& args, const TempDir& dir, std::string* out, std::string* err) {
  const std::string out_file = dir.file("stdout.txt"), err_file = dir.file("stderr.txt");
  const std::string command = std::string("'") + FUSEDLINEAR_BINARY + "' " + args + " >'" +
                              out_file + "' 2>'" + err_file + "'";
  const int status = std::system(command.c_str());
  if (out) *out = read_all(out_file);
  if (err) *err = read_all(err_file);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST(SvgPlot, IsSelfContainedSvgWithEveryLabelAndBar) {
  const std::string svg =
      render_bar_chart("Speedups", {"swish_chain batch 1", "mish_mish batch 8"},
                       {"chain", "forward"}, {{2.5, 1.1}, {3.0, NAN}}, {"on a CPU", "speedup"});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  const std::string end = "</svg>";
  const std::string trimmed = svg.substr(0, svg.find_last_not_of(" \n") + 1);
  ASSERT_GE(trimmed.size(), end.size());
  EXPECT_EQ(trimmed.substr(trimmed.size() - end.size()), end);
  for (const char* label : {"Speedups", "on a CPU", "swish_chain batch 1", "mish_mish batch 8",
                            "chain", "forward", "2.50", "1.10", "3.00"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  EXPECT_EQ(count_of(svg, "stroke-dasharray"), 1u);  // the reference line at 1.0
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("href"), std::string::npos);  // no external fonts, images or styles
  // Balanced elements: every opened <text>/<svg> is closed.
  EXPECT_EQ(count_of(svg, "<text"), count_of(svg, "</text>"));
  EXPECT_EQ(count_of(svg, "<svg"), count_of(svg, "</svg>"));
}

TEST(SvgPlot, EscapesMarkupInLabels) {
  const std::string svg =
      render_bar_chart("a & b < c > d", {"<group & \"one\">"}, {"s'1"}, {{1.5}});
  EXPECT_NE(svg.find("a &amp; b &lt; c &gt; d"), std::string::npos);
  EXPECT_NE(svg.find("&lt;group &amp; &quot;one&quot;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("s&apos;1"), std::string::npos);
  EXPECT_EQ(svg.find("<group"), std::string::npos);
  EXPECT_EQ(svg.find("a & b"), std::string::npos);
}

TEST(SvgPlot, HandlesEmptyAndMissingValues) {
  const std::string svg = render_bar_chart("empty", {}, {}, {});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const std::string partial = render_bar_chart("partial", {"g"}, {"a", "b"}, {{NAN}});
  EXPECT_EQ(partial.find("nan"), std::string::npos);
  EXPECT_EQ(partial.find("inf"), std::string::npos);
}

TEST(BenchOptions, ParsesBatchLists) {
  EXPECT_EQ(bench::parse_batches("1,8,64"), (std::vector<int64_t>{1, 8, 64}));
  EXPECT_EQ(bench::parse_batches("1024"), (std::vector<int64_t>{1024}));
  EXPECT_EQ(bench::parse_batches("2147483647"), (std::vector<int64_t>{2147483647}));
  for (const char* bad : {"", "x", "1,,8", "1,", ",1", "0", "-1", "1.5", "8 ,9", "+8", "2147483648",
                          "1000000000000", "99999999999999999999999"}) {
    EXPECT_THROW(bench::parse_batches(bad), UsageError) << bad;
  }
  try {
    bench::parse_batches("1,x");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--batches: expected positive integers up to 2147483647, separated by commas, "
                 "got '1,x'");
  }
}

TEST(BenchOptions, ParsesDtypeLists) {
  EXPECT_EQ(bench::parse_dtypes("float32,bfloat16"),
            (std::vector<torch::ScalarType>{torch::kFloat32, torch::kBFloat16}));
  EXPECT_EQ(bench::parse_dtypes("float16"), (std::vector<torch::ScalarType>{torch::kFloat16}));
  for (const char* bad : {"", "fp32", "float32,", "float64", "float32,half"}) {
    EXPECT_THROW(bench::parse_dtypes(bad), UsageError) << bad;
  }
}

TEST(BenchOptions, RotationCoversFourCachesWithinLimits) {
  const int64_t cache = 60'000'000, kib = 1 << 10, mib = 1 << 20;
  EXPECT_EQ(bench::rotation_count(32 * mib, cache), 8);   // 1024x8192 fp32: 256 MiB in all
  EXPECT_EQ(bench::rotation_count(32 * kib, cache), 64);  // batch 1: capped at 64
  EXPECT_EQ(bench::rotation_count(600 * mib, cache), 2);  // never fewer than 2
  EXPECT_LE(bench::rotation_count(200 * mib, cache) * (200 * mib), 1024 * mib);
}

TEST(BenchEndToEnd, WritesTableJsonCsvAndPlotOnCpu) {
  TempDir dir;
  const std::string json = dir.file("bench.json"), csv = dir.file("bench.csv"),
                    svg = dir.file("bench.svg");
  std::string out, err;
  const std::string args =
      "bench --device cpu --batches 1,4 --in-features 64 --out-features 48 "
      "--iters 3 --warmup 1 --precision ieee,bf16x3 --bf16x3-min-batch 4 --json '" +
      json + "' --csv '" + csv + "' --plot '" + svg + "'";
  ASSERT_EQ(run_program(args, dir, &out, &err), 0) << out << err;
  for (const char* text : {"swish_chain", "mish_mish", "float32", "chain speedup", "fwd speedup",
                           "bf16x3, CPU GEMM", "ieee, CPU GEMM (bf16x3 from 4 rows)"}) {
    EXPECT_NE(out.find(text), std::string::npos) << text << "\n" << out;
  }
  EXPECT_EQ(err.find('\r'), std::string::npos);  // no progress line when stderr is a file
  const auto doc = nlohmann::json::parse(read_all(json));
  for (const char* key : {"command_line", "date_utc", "device", "libtorch_version", "cuda_version",
                          "dtypes", "batches", "precisions", "iters", "warmup", "models"}) {
    EXPECT_TRUE(doc["header"].contains(key)) << key;
  }
  EXPECT_EQ(doc["header"]["iters"], 3);
  ASSERT_EQ(doc["results"].size(), 4u);  // 2 models x 2 batches x 1 dtype
  const auto expect_timings = [](const nlohmann::json& timings,
                                 const std::vector<const char*>& names) {
    for (const char* t : names) {
      ASSERT_TRUE(timings.contains(t)) << t;
      EXPECT_GT(timings[t]["median_us"].get<double>(), 0) << t;
      EXPECT_EQ(timings[t]["samples"], 3) << t;
      EXPECT_LE(timings[t]["p10_us"].get<double>(), timings[t]["p90_us"].get<double>());
    }
  };
  for (const auto& r : doc["results"]) {
    EXPECT_EQ(r["in_features"], 64);
    EXPECT_EQ(r["out_features"], 48);
    EXPECT_TRUE(r["chain_check"]["ok"].get<bool>());
    expect_timings(r["timings"],
                   {"gemm_addmm", "copy", "chain_eager", "chain_fused", "forward_eager"});
    for (const char* d : {"chain_speedup", "chain_fused_x_copy", "chain_fused_gbps"}) {
      EXPECT_GT(r["derived"][d].get<double>(), 0) << d;
    }
    ASSERT_EQ(r["fused"].size(), 2u);
    EXPECT_EQ(r["fused"][0]["precision"], "ieee");
    EXPECT_EQ(r["fused"][1]["precision"], "bf16x3");
    EXPECT_EQ(r["fused"][1]["gemm_ran"],
              r["batch"] == 1 ? "ieee, CPU GEMM (bf16x3 from 4 rows)" : "bf16x3, CPU GEMM");
    EXPECT_EQ(r["fused"][1]["gemm_kernel"], "auto");
    for (const auto& f : r["fused"]) {
      expect_timings(f["timings"], {"gemm", "forward"});
      EXPECT_FALSE(f["timings"].contains("graph_replay"));
      EXPECT_GT(f["derived"]["forward_speedup"].get<double>(), 0);
      EXPECT_TRUE(f["derived"]["graph_speedup"].is_null());
      EXPECT_TRUE(f["vs_eager"]["allclose"].get<bool>());
      EXPECT_LT(f["vs_float64"]["max_abs"].get<double>(), 1e-4);
    }
  }
  std::istringstream lines(read_all(csv));
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 9u);  // header + 4 configurations x 2 precisions
  const size_t columns = count_of(rows[0], ",");
  for (const auto& row : rows) EXPECT_EQ(count_of(row, ","), columns) << row;
  EXPECT_EQ(rows[0].rfind("model,dtype,batch,", 0), 0u);
  const std::string plot = read_all(svg);
  EXPECT_EQ(plot.rfind("<svg", 0), 0u);
  EXPECT_NE(plot.find("mish_mish  float32  batch 4"), std::string::npos);
  EXPECT_NE(plot.find("whole forward, bf16x3"), std::string::npos);
}

// The rows of a CSV file, and a check that each has the header's columns.
std::vector<std::string> csv_rows(const std::string& path) {
  std::istringstream lines(read_all(path));
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  for (const auto& row : rows) EXPECT_EQ(count_of(row, ","), count_of(rows.at(0), ",")) << row;
  return rows;
}

// A layered model is timed whole: per precision its fused forward against eager's forward of the
// same model, beside eager's GEMMs alone and the weights' read, in one table of its own, with its
// rows a second and its rate against a square GEMM's timed in the same run; the JSON and CSV say
// so (layered, linears, what each timing times) and hold no chain timed alone.
TEST(BenchEndToEnd, TimesALayeredSpecWhole) {
  TempDir dir;
  const std::string json = dir.file("bench.json"), csv = dir.file("bench.csv");
  std::string out, err;
  const std::string args =
      "bench --device cpu --chain 'fc1: gelu | fc2: gelu | fc3' --batches 1,4 --in-features 32 "
      "--out-features 16 --iters 3 --warmup 1 --precision ieee,bf16x3 --json '" +
      json + "' --csv '" + csv + "'";
  ASSERT_EQ(run_program(args, dir, &out, &err), 0) << out << err;
  for (const char* text :
       {"layered models, whole forward", "fc1:gelu|fc2:gelu|fc3", "fused x GEMMs", "fused x W read",
        "samples/s", "% dense", "bf16x3, CPU GEMM"}) {
    EXPECT_NE(out.find(text), std::string::npos) << text << "\n" << out;
  }
  EXPECT_EQ(out.find("activation chains"), std::string::npos) << out;
  const auto doc = nlohmann::json::parse(read_all(json));
  EXPECT_EQ(doc["header"]["timed"]["fused.forward"]["layered"].get<std::string>().rfind(
                "the fused model's whole forward", 0),
            0u);
  EXPECT_EQ(doc["header"]["timed"]["chain_fused"]["layered"], "not timed");
  ASSERT_EQ(doc["results"].size(), 2u);
  for (const auto& r : doc["results"]) {
    EXPECT_EQ(r["model"], "fc1:gelu|fc2:gelu|fc3");
    EXPECT_TRUE(r["layered"].get<bool>());
    EXPECT_EQ(r["linears"], 3);
    EXPECT_EQ(r["in_features"], 32);
    EXPECT_EQ(r["out_features"], 16);
    EXPECT_TRUE(r["chain_bytes"].is_null());
    EXPECT_TRUE(r["chain_check"].is_null());
    for (const char* t : {"forward_eager", "gemm_addmm", "weight_copy", "dense_gemm"}) {
      EXPECT_GT(r["timings"][t]["median_us"].get<double>(), 0) << t;
      EXPECT_EQ(r["timings"][t]["samples"], 3) << t;
    }
    for (const char* t : {"copy", "chain_eager", "chain_fused"}) {
      EXPECT_FALSE(r["timings"].contains(t)) << t;
    }
    EXPECT_GT(r["derived"]["forward_eager_x_eager_gemm"].get<double>(), 0);
    const double dense_tflops = r["derived"]["dense_gemm_tflops"].get<double>();
    EXPECT_NEAR(
        dense_tflops,
        2.0 * 1024 * 1024 * 1024 / r["timings"]["dense_gemm"]["median_us"].get<double>() / 1e6,
        1e-9 * dense_tflops);
    ASSERT_EQ(r["fused"].size(), 2u);
    EXPECT_EQ(r["fused"][0]["precision"], "ieee");
    EXPECT_EQ(r["fused"][1]["precision"], "bf16x3");
    for (const auto& f : r["fused"]) {
      EXPECT_GT(f["timings"]["forward"]["median_us"].get<double>(), 0);
      EXPECT_FALSE(f["timings"].contains("gemm"));
      for (const char* d : {"forward_speedup", "forward_x_eager_gemm", "forward_x_weight_read"}) {
        EXPECT_GT(f["derived"][d].get<double>(), 0) << d;
      }
      const double forward_us = f["timings"]["forward"]["median_us"].get<double>();
      const double rows_per_s = r["batch"].get<double>() / forward_us * 1e6;
      EXPECT_NEAR(f["derived"]["forward_samples_per_s"].get<double>(), rows_per_s,
                  1e-9 * rows_per_s);
      const double percent = 100 * f["derived"]["forward_tflops"].get<double>() / dense_tflops;
      EXPECT_NEAR(f["derived"]["forward_percent_of_dense"].get<double>(), percent, 1e-9 * percent);
      EXPECT_GT(percent, 0);
      EXPECT_TRUE(f["vs_eager"]["allclose"].get<bool>());
      EXPECT_LT(f["vs_float64"]["max_abs"].get<double>(), 1e-4);
    }
  }
  const std::vector<std::string> rows = csv_rows(csv);
  ASSERT_EQ(rows.size(), 5u);         // header + 2 batches x 2 precisions
  const std::string end = ",true,3";  // layered, linears
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].rfind("fc1:gelu|fc2:gelu|fc3,float32,", 0), 0u) << rows[i];
    EXPECT_EQ(rows[i].substr(rows[i].size() - end.size()), end) << rows[i];
  }
}

// A file carrying a layered model (as save_with_chain writes it: the spec in the metadata) is
// benched with its own parameters and widths: a SwiGLU block with a residual.
TEST(BenchEndToEnd, TimesTheLayeredModelAFileCarries) {
  TempDir dir;
  torch::manual_seed(5);
  const std::string weights = dir.file("swiglu.safetensors"), json = dir.file("bench.json");
  testing_support::write_safetensors(weights,
                                     {{"w1.weight", torch::randn({48, 32}) / 6},
                                      {"w1.bias", torch::randn({48})},
                                      {"w3.weight", torch::randn({48, 32}) / 6},
                                      {"w2.weight", torch::randn({32, 48}) / 7},
                                      {"w2.bias", torch::randn({32})}},
                                     testing_support::chain_metadata("x+(w1:silu*w3|w2)", ""));
  std::string out, err;
  ASSERT_EQ(run_program("bench --device cpu --weights '" + weights +
                            "' --batch 4 --iters 3 --warmup 1 --json '" + json + "'",
                        dir, &out, &err),
            0)
      << out << err;
  EXPECT_NE(out.find("x+(w1:silu*w3|w2)"), std::string::npos) << out;
  const auto doc = nlohmann::json::parse(read_all(json));
  ASSERT_EQ(doc["results"].size(), 1u);
  const auto& r = doc["results"][0];
  EXPECT_EQ(r["model"], "x+(w1:silu*w3|w2)");
  EXPECT_EQ(r["linears"], 3);
  EXPECT_EQ(r["in_features"], 32);
  EXPECT_EQ(r["out_features"], 32);
  EXPECT_EQ(r["batch"], 4);
  ASSERT_EQ(r["fused"].size(), 1u);
  EXPECT_TRUE(r["fused"][0]["vs_eager"]["allclose"].get<bool>());
  EXPECT_GT(r["fused"][0]["timings"]["forward"]["median_us"].get<double>(), 0);
  EXPECT_EQ(doc["header"]["weights"], weights);
}

TEST(BenchEndToEnd, RejectsBadValuesWithOneLine) {
  TempDir dir;
  std::string err;
  EXPECT_EQ(run_program("bench --device cpu --batches 1,x", dir, nullptr, &err), 2);
  EXPECT_NE(err.find("--batches: expected positive integers"), std::string::npos) << err;
  EXPECT_EQ(count_of(err, "\n"), 1u) << err;
  EXPECT_EQ(run_program("bench --device cpu --dtypes float64", dir, nullptr, &err), 2);
  EXPECT_NE(err.find("--dtypes"), std::string::npos) << err;
  EXPECT_EQ(run_program("bench --device cpu --cuda-graph", dir, nullptr, &err), 2);
  EXPECT_NE(err.find("--cuda-graph needs a CUDA device"), std::string::npos) << err;
}

TEST(BenchEndToEnd, RefusesExistingOutputsBeforeRunning) {
  TempDir dir;
  const std::string csv = dir.file("exists.csv");
  std::ofstream(csv) << "keep me\n";
  std::string out, err;
  EXPECT_EQ(run_program("bench --device cpu --csv '" + csv + "'", dir, &out, &err), 2);
  EXPECT_NE(err.find("--overwrite"), std::string::npos) << err;
  EXPECT_EQ(out, "");  // refused before any timing
  EXPECT_EQ(read_all(csv), "keep me\n");
}

// The seeded default input continues the stream that drew the parameters, as Python's
// `torch.manual_seed(seed); model = Model(...); x = torch.rand(...)` does, so x is independent
// of W (a fresh seed would repeat the weight's first draws, and x @ W^T's diagonal would stand
// out by ~in_features / 6 standard deviations).
TEST(CommandHelpers, SeededInputFollowsTheParameters) {
  Settings s;
  s.command = "compare";
  s.models = {find_model("mish_mish")};
  s.batch = 5;
  s.in_features = 16;
  s.out_features = 8;
  s.seed = 3;
  at::Generator stream;
  const auto model = build_model(find_model("mish_mish"), s, &stream);
  const torch::Tensor x = build_input(s, 16, stream);
  ASSERT_EQ(x.sizes(), (torch::IntArrayRef{5, 16}));
  torch::manual_seed(3);  // Python: torch.manual_seed(3); MishMish(16, 8); torch.rand(5, 16)
  LinearChain python_model(find_model("mish_mish"), 16, 8);
  EXPECT_TRUE(torch::equal(x, torch::rand({5, 16})));
  torch::manual_seed(3);
  EXPECT_FALSE(torch::equal(x, torch::rand({5, 16})));
  // Built again, the same model and input: no state is carried from one call to the next.
  at::Generator again;
  build_model(find_model("mish_mish"), s, &again);
  EXPECT_TRUE(torch::equal(x, build_input(s, 16, again)));
}

// libtorch's errors become one usage error: out of memory (CPU or GPU, libtorch 1.13's and 2.x's
// wording) says how much was asked for and what to lower; anything else, what could not run.
TEST(CommandHelpers, TorchErrorsSayWhatToChange) {
  Settings s;
  s.command = "compare";
  s.device = torch::Device(torch::kCUDA, 0);
  const auto message = [&](const std::string& what) {
    return std::string(
        usage_error(c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, what), s,
                    "mish_mish in float32 on cuda:0")
            .what());
  };
  EXPECT_EQ(message("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity "
                    "of 139.81 GiB of which 1.20 GiB is free."),
            "out of memory on cuda:0: tried to allocate 20.00 GiB; lower --batch, --in-features or "
            "--out-features");
  EXPECT_EQ(message("CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 79.35 GiB total "
                    "capacity; 78.1 GiB already allocated)"),
            "out of memory on cuda:0: tried to allocate 2.00 MiB; lower --batch, --in-features or "
            "--out-features");
  s.device = torch::kCPU;
  s.command = "bench";
  s.weights = "w.pt";
  EXPECT_EQ(message("[enforce fail at alloc_cpu.cpp:75] . DefaultCPUAllocator: can't allocate "
                    "memory: you tried to allocate 4000000000000 bytes. Error code 12 (Cannot "
                    "allocate memory)"),
            "out of memory on cpu: tried to allocate 3.64 TiB; lower --batches, or use a smaller "
            "model than --weights");
  s.command = "run";
  s.input = "x.pt";
  EXPECT_EQ(message("DefaultCPUAllocator: not enough memory: you tried to allocate 1024 bytes."),
            "out of memory on cpu: tried to allocate 1.00 KiB; use a smaller --input or a smaller "
            "model than --weights");
  EXPECT_EQ(message("Could not run 'aten::mm' with arguments from the 'CPU' backend.\nmore"),
            "mish_mish in float32 on cuda:0: libtorch " TORCH_VERSION
            " cannot run it: Could not run 'aten::mm' with arguments from the 'CPU' backend.");
}
