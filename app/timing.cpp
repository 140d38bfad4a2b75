#include "app/timing.h"

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

namespace {

TimingStats summarise(const std::vector<double>& micros) {
  TimingStats stats;
  stats.samples = int(micros.size());
  stats.median_us = quantile(micros, 0.5);
  stats.p10_us = quantile(micros, 0.1);
  stats.p90_us = quantile(micros, 0.9);
  stats.min_us = micros.empty() ? 0 : *std::min_element(micros.begin(), micros.end());
  return stats;
}

}  // namespace

std::vector<TimingStats> time_interleaved(const torch::Device& device, int warmup, int iters,
                                          const std::vector<std::function<void(int)>>& fns) {
  for (int i = 0; i < warmup; ++i) {
    for (const auto& fn : fns) fn(i);
  }
  const size_t n = fns.size(), count = size_t(std::max(iters, 0));
  std::vector<std::vector<double>> micros(n, std::vector<double>(count));
#ifdef FUSEDLINEAR_WITH_CUDA
  if (device.is_cuda()) {
    // One event pair per call, all recorded on the current stream, each call started on an idle
    // GPU: queued behind the call before, a call's launches would be hidden under that call's
    // kernels or not, by its place in the turn. Read after one sync. CUDAEvent's default flags
    // disable timing: ask for timing events.
    std::vector<at::cuda::CUDAEvent> starts, ends;
    starts.reserve(n * count);
    ends.reserve(n * count);
    for (size_t i = 0; i < n * count; ++i) {
      starts.emplace_back(cudaEventDefault);
      ends.emplace_back(cudaEventDefault);
    }
    const auto stream = at::cuda::getCurrentCUDAStream(device.index());
    for (size_t i = 0; i < count; ++i) {
      for (size_t f = 0; f < n; ++f) {
        stream.synchronize();
        starts[i * n + f].record(stream);
        fns[f](warmup + int(i));
        ends[i * n + f].record(stream);
      }
    }
    stream.synchronize();
    for (size_t i = 0; i < count; ++i) {
      for (size_t f = 0; f < n; ++f) {
        micros[f][i] = 1000.0 * double(starts[i * n + f].elapsed_time(ends[i * n + f]));
      }
    }
  }
#endif
  if (!device.is_cuda()) {
    for (size_t i = 0; i < count; ++i) {
      for (size_t f = 0; f < n; ++f) {
        const auto start = std::chrono::steady_clock::now();
        fns[f](warmup + int(i));
        const auto end = std::chrono::steady_clock::now();
        micros[f][i] = std::chrono::duration<double, std::micro>(end - start).count();
      }
    }
  }
  std::vector<TimingStats> stats;
  stats.reserve(micros.size());
  for (const auto& m : micros) stats.push_back(summarise(m));
  return stats;
}

}  // namespace fusedlinear
