// epilogue_bench: the fused epilogue kernel alone, without libtorch, side by side in one run: for
// each library declaration (kernels/math/reference_models.h), its compiled chain and the same
// chain run by the interpreter (a run-time chain), in float32, bfloat16 and float16, against a
// device-to-device copy of the same bytes; the interpreter also at a sweep of launch shapes and
// with every term kept; then, for 16-bit results, the compiled chain at a sweep of launch shapes
// (where a declaration finds its kHalfLaunch). Inputs rotate over enough buffers
// to exceed the L2 cache four times, every output is fresh, and each variant's largest error
// against the chain's float64 form is reported, absolute and in units in the last place of the
// element type.
//
//   epilogue_bench [rows cols iters]     (default 1024 8192 50)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "app/tools/cuda_check.h"
#include "app/tools/epilogue_bench.h"

constexpr const char* kToolName = "epilogue_bench";

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
      "w max waves (0: none), g registers a thread at most (0: no cap)]\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, (long long)rows, (long long)cols,
      iters);
  std::printf("%-60s %9s %9s %9s %12s %8s\n", "variant", "us", "GB/s", "x copy", "err vs f64",
              "ulp");
  epilogue_bench::run_all<float>(rows, cols, size_t(prop.l2CacheSize), iters);
  epilogue_bench::run_all<__nv_bfloat16>(rows, cols, size_t(prop.l2CacheSize), iters);
  epilogue_bench::run_all<__half>(rows, cols, size_t(prop.l2CacheSize), iters);
  return 0;
}
