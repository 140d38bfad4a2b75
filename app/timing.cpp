#include "timing.h"

#include <algorithm>
#include <chrono>

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#endif

namespace fusedlinear {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = q * double(values.size() - 1);
  const size_t lo = size_t(pos);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - double(lo)) * (values[hi] - values[lo]);
}

void synchronize(const torch::Device& device) {
#ifdef FUSEDLINEAR_WITH_CUDA
  if (device.is_cuda()) at::cuda::getCurrentCUDAStream(device.index()).synchronize();
#endif
}

TimingStats time_calls(const torch::Device& device, int warmup, int iters,
                       const std::function<void(int)>& fn) {
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<double> micros;
  micros.reserve(size_t(std::max(iters, 0)));
#ifdef FUSEDLINEAR_WITH_CUDA
  if (device.is_cuda()) {
    std::vector<at::cuda::CUDAEvent> starts(size_t(std::max(iters, 0)));
    std::vector<at::cuda::CUDAEvent> ends(starts.size());
    const auto stream = at::cuda::getCurrentCUDAStream(device.index());
    for (int i = 0; i < iters; ++i) {
      starts[size_t(i)] = at::cuda::CUDAEvent(cudaEventDefault);
      ends[size_t(i)] = at::cuda::CUDAEvent(cudaEventDefault);
      starts[size_t(i)].record(stream);
      fn(warmup + i);
      ends[size_t(i)].record(stream);
    }
    stream.synchronize();
    for (size_t i = 0; i < starts.size(); ++i) {
      micros.push_back(1000.0 * double(starts[i].elapsed_time(ends[i])));
    }
  }
#endif
  if (!device.is_cuda()) {
    for (int i = 0; i < iters; ++i) {
      const auto start = std::chrono::steady_clock::now();
      fn(warmup + i);
      const auto end = std::chrono::steady_clock::now();
      micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
  }
  TimingStats stats;
  stats.samples = int(micros.size());
  stats.median_us = quantile(micros, 0.5);
  stats.p10_us = quantile(micros, 0.1);
  stats.p90_us = quantile(micros, 0.9);
  stats.min_us = micros.empty() ? 0 : *std::min_element(micros.begin(), micros.end());
  return stats;
}

}  // namespace fusedlinear
