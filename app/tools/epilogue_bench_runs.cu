// epilogue_bench's runs for one element type, EPILOGUE_BENCH_TYPE (a compile definition: the build
// compiles this file once per type, so that the three take three cores; epilogue_bench.cu runs
// them).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "app/tools/cuda_check.h"
#include "app/tools/epilogue_bench.h"
#include "kernels/cuda/epilogue.cuh"
#include "kernels/math/reference_models.h"

using namespace fusedlinear;

constexpr const char* kToolName = "epilogue_bench";

namespace {

// The identity chain's pseudo-declaration: the compiled chains' production shape, no HalfLaunch.
struct BiasOnly {};

// One element type's buffers: n_buffers inputs and outputs, rotated, the bias and the chain's
// parameter terms (per feature).
template <typename T>
struct Buffers {
  int64_t rows, cols;
  std::vector<T*> inputs, outputs;
  T* bias;
  T* terms[act::kMaxColumnTerms];
  std::vector<float> host_input, host_bias;  // the values as T holds them
  std::vector<float> host_terms[act::kMaxColumnTerms];
  double copy_us = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `launch(i)` (i rotates the buffers) with one event pair per call; median in us.
template <class Launch>
double time_us(int iters, int n_buffers, Launch launch) {
  for (int i = 0; i < 5; ++i) launch(i % n_buffers);
  std::vector<cudaEvent_t> start(iters), stop(iters);
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventCreate(&start[i]));
    CHECK_CUDA(cudaEventCreate(&stop[i]));
    CHECK_CUDA(cudaEventRecord(start[i]));
    launch(i % n_buffers);
    CHECK_CUDA(cudaEventRecord(stop[i]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> us(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start[i], stop[i]));
    us[i] = 1000.0 * ms;
    CHECK_CUDA(cudaEventDestroy(start[i]));
    CHECK_CUDA(cudaEventDestroy(stop[i]));
  }
  return median(us);
}

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, __half>) return "float16";
  return "bfloat16";
}

// The spacing of T's values at |v| (its unit in the last place), subnormals included.
template <typename T>
double ulp_of(double v) {
  constexpr int kBits = std::is_same_v<T, float> ? 23 : std::is_same_v<T, __half> ? 10 : 7;
  constexpr int kMinExp = std::is_same_v<T, __half> ? -14 : -126;
  const int e = v == 0 ? kMinExp : std::max(std::ilogb(v), kMinExp);
  return std::ldexp(1.0, e - kBits);
}

struct Error {
  double abs = 0, ulp = 0;
};

// Max |out - ref|, absolute and in ulp of T at ref, over a strided sample of the first buffer's
// output (inputs as T holds them).
template <typename T, class Chain>
Error max_error(const Buffers<T>& b, const Chain& chain) {
  const int64_t n = b.rows * b.cols;
  std::vector<T> out(static_cast<size_t>(n));
  CHECK_CUDA(cudaMemcpy(out.data(), b.outputs[0], size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
  Error worst;
  for (int64_t i = 0; i < n; i += 7) {
    const int64_t c = i % b.cols;
    // The chain's input as the kernel (and PyTorch's eager adds) round it: in float.
    const float x = b.host_input[size_t(i)] + b.host_bias[size_t(c)];
    double terms[act::kMaxColumnTerms];
    for (int j = 0; j < act::kMaxColumnTerms; ++j) terms[j] = b.host_terms[j][size_t(c)];
    const double want = act::reference_of(chain, double(x), terms);
    const double err = std::fabs(double(cuda::to_float(out[size_t(i)])) - want);
    // NaN (an unwritten element) wins.
    if (!(err <= worst.abs)) worst.abs = err;
    if (!(err / ulp_of<T>(want) <= worst.ulp)) worst.ulp = err / ulp_of<T>(want);
  }
  return worst;
}

template <typename T>
Buffers<T> make_buffers(int64_t rows, int64_t cols, size_t l2_bytes, int iters) {
  Buffers<T> b;
  b.rows = rows;
  b.cols = cols;
  const size_t bytes = size_t(rows * cols) * sizeof(T);
  // Enough buffers that one rotation moves four L2s' worth of inputs.
  const int n_buffers = int(std::min<size_t>(64, std::max<size_t>(2, 4 * l2_bytes / bytes + 1)));
  // Inputs like the reference GEMM output (spread over a few units, tails included).
  srand(1);
  const auto uniform = [] { return float(rand()) / float(RAND_MAX) * 2.0f - 1.0f; };
  const auto fill = [](std::vector<T>& typed, std::vector<float>& as_float, size_t n, auto draw) {
    typed.resize(n);
    as_float.resize(n);
    for (size_t i = 0; i < n; ++i) {
      typed[i] = cuda::from_float<T>(draw());
      as_float[i] = cuda::to_float(typed[i]);
    }
  };
  std::vector<T> input, bias;
  fill(input, b.host_input, size_t(rows * cols),
       [&] { return 6.0f * (uniform() + uniform() + uniform()) / 3.0f; });
  fill(bias, b.host_bias, size_t(cols), [&] { return 0.01f * uniform(); });
  for (int i = 0; i < n_buffers; ++i) {
    T *in, *out;
    CHECK_CUDA(cudaMalloc(&in, bytes));
    CHECK_CUDA(cudaMalloc(&out, bytes));
    CHECK_CUDA(cudaMemcpy(in, input.data(), bytes, cudaMemcpyHostToDevice));
    b.inputs.push_back(in);
    b.outputs.push_back(out);
  }
  const size_t column_bytes = size_t(cols) * sizeof(T);
  CHECK_CUDA(cudaMalloc(&b.bias, column_bytes));
  CHECK_CUDA(cudaMemcpy(b.bias, bias.data(), column_bytes, cudaMemcpyHostToDevice));
  for (int j = 0; j < act::kMaxColumnTerms; ++j) {
    std::vector<T> terms;
    fill(terms, b.host_terms[j], size_t(cols), [&] { return 2.0f * uniform(); });
    CHECK_CUDA(cudaMalloc(&b.terms[j], column_bytes));
    CHECK_CUDA(cudaMemcpy(b.terms[j], terms.data(), column_bytes, cudaMemcpyHostToDevice));
  }
  b.copy_us = time_us(iters, n_buffers, [&](int i) {
    CHECK_CUDA(cudaMemcpyAsync(b.outputs[i], b.inputs[i], bytes, cudaMemcpyDeviceToDevice));
  });
  std::printf("%-60s %9.1f %9.0f %8.2fx\n",
              (std::string("copy (D2D memcpy), ") + type_name<T>() + ", " +
               std::to_string(n_buffers) + " buffers")
                  .c_str(),
              b.copy_us, 2.0 * double(bytes) / b.copy_us / 1e3, 1.0);
  return b;
}

template <typename T>
void free_buffers(Buffers<T>& b) {
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    CHECK_CUDA(cudaFree(b.inputs[i]));
    CHECK_CUDA(cudaFree(b.outputs[i]));
  }
  CHECK_CUDA(cudaFree(b.bias));
  for (T* t : b.terms) CHECK_CUDA(cudaFree(t));
}

template <typename T, class Shape, class DeviceChain, class Chain>
void run_variant(const std::string& name, const Buffers<T>& b, int iters,
                 const DeviceChain& device_chain, const Chain& declared) {
  const int n = int(b.inputs.size());
  CHECK_CUDA(cudaMemset(b.outputs[0], 0xff, size_t(b.rows * b.cols) * sizeof(T)));  // NaN
  ColumnTerms terms;
  for (int j = 0; j < act::kMaxColumnTerms; ++j) terms.data[j] = b.terms[j];
  terms.count = Chain::kTerms;
  const cuda::ColumnEpilogue<T, DeviceChain> epilogue(b.bias, terms, device_chain);
  const double us = time_us(iters, n, [&](int i) {
    CHECK_CUDA((cuda::launch_fused_epilogue_typed<T, Shape>(b.inputs[i], nullptr, b.outputs[i],
                                                            b.rows, b.cols, epilogue, nullptr)));
  });
  const double bytes = 2.0 * double(b.rows * b.cols) * sizeof(T);
  char label[128];
  std::snprintf(label, sizeof label, "%s [r%d t%d w%d g%d]", name.c_str(), Shape::kRows,
                Shape::kThreads, Shape::kWaves, Shape::kMaxRegisters);
  const Error err = max_error(b, declared);
  std::printf("%-60s %9.1f %9.0f %8.2fx %12.2e %8.2f\n", label, us, bytes / us / 1e3,
              us / b.copy_us, err.abs, err.ulp);
}

// One declaration: its compiled chain and the same chain interpreted, at its production shape,
// and for 16-bit results the compiled chain at other shapes.
template <class Model, typename T>
void run_declaration(const Buffers<T>& b, int iters) {
  using cuda::LaunchShape;
  constexpr act::ResultPrecision P = act::kResultPrecisionFor<T>;
  const act::Program program = act::program_of(Model::kChain);
  const std::string name = Model::kName;
  const auto compiled = device_chain<Model, P>(program);
  using Shape = cuda::ProductionShape<T, Model, std::decay_t<decltype(compiled)>>;
  run_variant<T, Shape>(name + " compiled", b, iters, compiled, Model::kChain);
  // The interpreter as it runs in production (its kernel for as many terms as the program reads,
  // at the run-time chains' shape), at other shapes, and keeping all kMaxColumnTerms terms.
  // The run-time chain's op list as the spec parser writes it (chain_spec.h's program_of), and as
  // the kernels take it for results of P (the Half forms where it allows them: model.h).
  const act::Program runtime_program =
      act::with_result_precision(act::without_identity_clamps(program), P);
  act::with_term_capacity(runtime_program.terms, [&](auto capacity) {
    using Runtime = act::ProgramChain<act::ResultPrecision::kFloat32, capacity()>;
    const Runtime runtime{runtime_program};
    const auto shape = [&](auto s) {
      run_variant<T, decltype(s)>(name + " run-time", b, iters, runtime, Model::kChain);
    };
    shape(cuda::ProductionShape<T, RuntimeChain, Runtime>{});
    if (runtime_program.count != program.count) {  // what leaving out the clamps saves
      run_variant<T, cuda::ProductionShape<T, RuntimeChain, Runtime>>(
          name + " run-time, every op", b, iters, Runtime{act::with_result_precision(program, P)},
          Model::kChain);
    }
    shape(LaunchShape<1, 256, 2>{});
    shape(LaunchShape<1, 256, 0>{});
    shape(LaunchShape<2, 256, 2>{});
    shape(LaunchShape<2, 128, 2>{});
    shape(LaunchShape<4, 128, 2>{});
    if constexpr (std::is_same_v<T, float>) {
      // Registers capped lower: more blocks an SM, but the largest ops' values spill.
      shape(LaunchShape<1, 256, 2, 40>{});
      shape(LaunchShape<2, 128, 2, 40>{});
    }
  });
  const auto all_terms = device_chain<RuntimeChain, P>(act::without_identity_clamps(program));
  using AllTerms = std::decay_t<decltype(all_terms)>;
  run_variant<T, cuda::ProductionShape<T, RuntimeChain, AllTerms>>(
      name + " run-time, all terms kept", b, iters, all_terms, Model::kChain);
  run_variant<T, LaunchShape<1, 256, 2>>(name + " run-time, all terms kept", b, iters, all_terms,
                                         Model::kChain);
  if constexpr (!std::is_same_v<T, float>) {
    const auto shape = [&](auto s) {
      run_variant<T, decltype(s)>(name + " compiled", b, iters, compiled, Model::kChain);
    };
    shape(LaunchShape<1, 256, 2>{});
    shape(LaunchShape<2, 256, 2>{});
    shape(LaunchShape<2, 128, 2>{});
    shape(LaunchShape<2, 128, 1>{});
    shape(LaunchShape<4, 128, 1>{});
    shape(LaunchShape<1, 128, 1>{});
    shape(LaunchShape<1, 128, 2>{});
    shape(LaunchShape<1, 128, 4>{});
    shape(LaunchShape<1, 64, 2>{});
  }
  // The first variant again: its spread against the first run is the noise floor.
  run_variant<T, Shape>(name + " compiled (again)", b, iters, compiled, Model::kChain);
}

}  // namespace

namespace epilogue_bench {

template <typename T>
void run_all(int64_t rows, int64_t cols, size_t l2_bytes, int iters) {
  auto b = make_buffers<T>(rows, cols, l2_bytes, iters);
  // No activations: the kernel's loads, bias adds and stores alone, its floor against the copy.
  run_variant<T, cuda::ProductionShape<T, BiasOnly, act::Chain<>>>("identity (bias only)", b, iters,
                                                                   act::Chain<>{}, act::Chain<>{});
  std::apply([&](auto... models) { (run_declaration<decltype(models)>(b, iters), ...); },
             LibraryModels{});
  free_buffers(b);
}

template void run_all<EPILOGUE_BENCH_TYPE>(int64_t rows, int64_t cols, size_t l2_bytes, int iters);

}  // namespace epilogue_bench
