// epilogue_bench: the fused epilogue kernels alone, without libtorch, side by side in one run:
// the kernel with no activations (its floor), each model's chain as PyTorch writes it
// (act::literal) and as the kernels run it (act::*), and a sweep of launch shapes, against a
// device-to-device copy of the same bytes, in float32, bfloat16 and float16.
// Inputs rotate over enough buffers to exceed the L2 cache four times, every output is fresh,
// and each variant's maximum error against a float64 evaluation is reported, absolute and in
// units in the last place of the element type.
//
//   epilogue_bench [rows cols iters]     (default 1024 8192 50)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/epilogue.cuh"

using namespace fusedlinear;

#define CHECK_CUDA(call)                                                                 \
  do {                                                                                   \
    const cudaError_t err_ = (call);                                                     \
    if (err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "epilogue_bench: %s: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace {

// float64 references: PyTorch's definitions.
double swish_chain_ref(double x) {
  const double s = x / (1.0 + std::exp(-x));
  const double t = std::tanh(s);
  const double g = 0.5 * t * (1.0 + std::erf(t / std::sqrt(2.0)));
  return std::min(1.0, std::max(-1.0, g));
}
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
double mish_mish_ref(double x) { return mish_ref(mish_ref(x)); }

// One element type's buffers: n_buffers inputs and outputs, rotated.
template <typename T>
struct Buffers {
  int64_t rows, cols;
  std::vector<T*> inputs, outputs;
  T *bias, *shift;
  std::vector<float> host_input, host_bias, host_shift;  // the values as T holds them
  double copy_us = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `launch(i)` (i rotates the buffers) with one event pair per call; median in µs.
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
  // Stored significand bits and the smallest normal exponent of each type.
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
template <typename T, class Ref>
Error max_error(const Buffers<T>& b, bool with_shift, Ref ref) {
  const int64_t n = b.rows * b.cols;
  std::vector<T> out(static_cast<size_t>(n));
  CHECK_CUDA(cudaMemcpy(out.data(), b.outputs[0], size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
  Error worst;
  for (int64_t i = 0; i < n; i += 7) {
    const int64_t c = i % b.cols;
    // The chain's input as the kernel (and PyTorch's eager adds) round it: in float.
    float x = b.host_input[size_t(i)] + b.host_bias[size_t(c)];
    if (with_shift) x += b.host_shift[size_t(c)];
    const double want = ref(double(x));
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
  std::vector<T> input(static_cast<size_t>(rows * cols)), bias(static_cast<size_t>(cols)),
      shift(static_cast<size_t>(cols));
  const auto fill = [](std::vector<T>& typed, std::vector<float>& as_float, auto draw) {
    as_float.resize(typed.size());
    for (size_t i = 0; i < typed.size(); ++i) {
      typed[i] = cuda::from_float<T>(draw());
      as_float[i] = cuda::to_float(typed[i]);
    }
  };
  fill(input, b.host_input, [&] { return 6.0f * (uniform() + uniform() + uniform()) / 3.0f; });
  fill(bias, b.host_bias, [&] { return 0.01f * uniform(); });
  fill(shift, b.host_shift, [&] { return 2.0f * uniform(); });
  for (int i = 0; i < n_buffers; ++i) {
    T *in, *out;
    CHECK_CUDA(cudaMalloc(&in, bytes));
    CHECK_CUDA(cudaMalloc(&out, bytes));
    CHECK_CUDA(cudaMemcpy(in, input.data(), bytes, cudaMemcpyHostToDevice));
    b.inputs.push_back(in);
    b.outputs.push_back(out);
  }
  CHECK_CUDA(cudaMalloc(&b.bias, size_t(cols) * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&b.shift, size_t(cols) * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(b.bias, bias.data(), size_t(cols) * sizeof(T), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(b.shift, shift.data(), size_t(cols) * sizeof(T), cudaMemcpyHostToDevice));
  b.copy_us = time_us(iters, n_buffers, [&](int i) {
    CHECK_CUDA(cudaMemcpyAsync(b.outputs[i], b.inputs[i], bytes, cudaMemcpyDeviceToDevice));
  });
  std::printf("%-56s %9.1f %9.0f %8.2fx\n",
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
  CHECK_CUDA(cudaFree(b.shift));
}

template <class Shape, class Activations, typename T, class Ref>
void run_variant(const std::string& name, const Buffers<T>& b, bool with_shift, int iters,
                 Ref ref) {
  const int n = int(b.inputs.size());
  CHECK_CUDA(cudaMemset(b.outputs[0], 0xff, size_t(b.rows * b.cols) * sizeof(T)));  // NaN
  const double us = time_us(iters, n, [&](int i) {
    CHECK_CUDA((cuda::launch_fused_epilogue_typed<T, Shape, Activations>(
        b.inputs[i], b.bias, with_shift ? b.shift : nullptr, b.outputs[i], b.rows, b.cols,
        nullptr)));
  });
  const double bytes = 2.0 * double(b.rows * b.cols) * sizeof(T);
  char label[96];
  std::snprintf(label, sizeof label, "%s [r%d t%d w%d]", name.c_str(), Shape::kRows,
                Shape::kThreads, Shape::kWaves);
  const Error err = max_error(b, with_shift, ref);
  std::printf("%-56s %9.1f %9.0f %8.2fx %12.2e %8.2f\n", label, us, bytes / us / 1e3,
              us / b.copy_us, err.abs, err.ulp);
}

template <typename T>
void run_all(Buffers<T>& b, int iters) {
  using cuda::LaunchShape;
  // Formulations at the production shape: PyTorch's (act::literal) and the kernels' chains for
  // float32 and for 16-bit results. A new formulation goes here, beside the one it would replace.
  using SwishShape = cuda::ProductionShape<T, SwishChainActivations>;
  using MishShape = cuda::ProductionShape<T, MishMishActivations>;
  // No activations: the kernel's loads, adds and stores alone, its floor against the copy.
  run_variant<SwishShape, act::Chain<>>("identity (adds only)", b, true, iters,
                                        [](double x) { return x; });
  run_variant<SwishShape, literal::SwishChainActivations>("swish_chain literal", b, true, iters,
                                                          swish_chain_ref);
  run_variant<SwishShape, SwishChainActivations>("swish_chain float32 chain", b, true, iters,
                                                 swish_chain_ref);
  run_variant<SwishShape, SwishChainActivationsHalf>("swish_chain half chain", b, true, iters,
                                                     swish_chain_ref);
  run_variant<MishShape, literal::MishMishActivations>("mish_mish literal", b, false, iters,
                                                       mish_mish_ref);
  dispatch_epilogue<kResultPrecisionOf<T>>(EpilogueKind::kMishMish, [&](auto activations) {
    run_variant<MishShape, decltype(activations)>("mish_mish kernel", b, false, iters,
                                                  mish_mish_ref);
  });
  if constexpr (sizeof(T) == 2) {
    // The identity at mish_mish's shape (bias only): the floor of that shape.
    run_variant<MishShape, act::Chain<>>("identity (bias only)", b, false, iters,
                                         [](double x) { return x; });
  }
  // Launch shapes, on the chain each dtype runs: where a new chain finds its own.
  const auto shapes = [&](auto activations, const char* name, bool with_shift, auto ref) {
    using A = decltype(activations);
    run_variant<LaunchShape<1, 256, 2>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<2, 256, 2>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<2, 128, 4>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<2, 128, 2>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<2, 128, 1>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<4, 128, 1>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<2, 64, 1>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<1, 128, 1>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<1, 128, 2>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<1, 128, 3>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<1, 64, 2>, A>(name, b, with_shift, iters, ref);
    run_variant<LaunchShape<1, 64, 4>, A>(name, b, with_shift, iters, ref);
  };
  dispatch_epilogue<kResultPrecisionOf<T>>(EpilogueKind::kSwishChain, [&](auto activations) {
    shapes(activations, "swish_chain", true, swish_chain_ref);
  });
  dispatch_epilogue<kResultPrecisionOf<T>>(EpilogueKind::kMishMish, [&](auto activations) {
    shapes(activations, "mish_mish", false, mish_mish_ref);
  });
  // The first variant again: its spread against the first run is the noise floor.
  run_variant<SwishShape, SwishChainActivations>("swish_chain float32 chain (again)", b, true,
                                                 iters, swish_chain_ref);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int64_t cols = argc > 2 ? std::atoll(argv[2]) : 8192;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 50;
  if (rows <= 0 || cols <= 0 || iters <= 0) {
    std::fprintf(stderr, "usage: epilogue_bench [rows cols iters] (positive integers)\n");
    return 2;
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "epilogue_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "%s, %d SMs, L2 %d MiB; [%lld, %lld]; median of %d; [r rows/thread, t threads, "
      "w max waves (0: none)]\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, (long long)rows, (long long)cols,
      iters);
  std::printf("%-56s %9s %9s %9s %12s %8s\n", "variant", "us", "GB/s", "x copy", "err vs f64",
              "ulp");
  {
    auto b = make_buffers<float>(rows, cols, size_t(prop.l2CacheSize), iters);
    run_all(b, iters);
    free_buffers(b);
  }
  {
    auto b = make_buffers<__nv_bfloat16>(rows, cols, size_t(prop.l2CacheSize), iters);
    run_all(b, iters);
    free_buffers(b);
  }
  {
    auto b = make_buffers<__half>(rows, cols, size_t(prop.l2CacheSize), iters);
    run_all(b, iters);
    free_buffers(b);
  }
  return 0;
}
