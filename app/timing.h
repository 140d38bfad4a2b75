// Timing a piece of device work: CUDA events on a GPU, a steady clock on the CPU.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace fusedlinear {

struct TimingStats {
  double median_us = 0, p10_us = 0, p90_us = 0, min_us = 0;
  int samples = 0;
};

// Calls each fn(i) `warmup` times, then `iters` times in turns (f0, f1, ..., f0, f1, ...),
// timing every call, and summarises each function's timed calls. In turns, so slow drifts of
// the device (clocks, temperature) weigh on all of them alike. On CUDA each call is bracketed by
// events on the current stream, after a sync: a launched call from an idle GPU, its launches'
// cost included alike for every function, whatever ran before it; on CPU by
// std::chrono::steady_clock. `i` counts the calls, so fn can rotate buffers.
std::vector<TimingStats> time_interleaved(const torch::Device& device, int warmup, int iters,
                                          const std::vector<std::function<void(int)>>& fns);

// The q-quantile (0..1) of `values`, linearly interpolated; 0 for an empty list.
double quantile(std::vector<double> values, double q);

// Waits for all work queued on `device`.
void synchronize(const torch::Device& device);

}  // namespace fusedlinear
