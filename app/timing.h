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

// Calls fn(i) `warmup` times, then `iters` times timed one by one, and summarises the timed
// calls. On CUDA each call is bracketed by events on the current stream (no host sync between
// calls); on CPU by std::chrono::steady_clock. `i` counts the calls, so fn can rotate buffers.
TimingStats time_calls(const torch::Device& device, int warmup, int iters,
                       const std::function<void(int)>& fn);

// The same for several functions timed in turns (f0, f1, ..., f0, f1, ...), so that slow drifts
// of the device (clocks, temperature) weigh on all of them alike: use it to compare versions.
std::vector<TimingStats> time_interleaved(const torch::Device& device, int warmup, int iters,
                                          const std::vector<std::function<void(int)>>& fns);

// The q-quantile (0..1) of `values`, linearly interpolated; 0 for an empty list.
double quantile(std::vector<double> values, double q);

// Waits for all work queued on `device`.
void synchronize(const torch::Device& device);

}  // namespace fusedlinear
