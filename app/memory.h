// Memory (memory.cpp): byte sizes, what the run may still allocate, the out-of-memory errors
// that say what to lower, and the BLAS made safe under a memory limit.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "app/cli.h"

namespace fusedlinear {

// A c10::Error from libtorch as a UsageError. Out of memory (CPU or GPU) says how much was
// asked for and what to lower; anything else (typically an op with no kernel for this dtype on
// this device, e.g. float16 matmul on the CPU in libtorch 1.13) says that `what` (e.g.
// "swish_chain in float16 on cpu"; may be empty) could not run, and libtorch's first line.
UsageError usage_error(const c10::Error& error, const Settings& settings, const std::string& what);
// "7.50 GiB", "12 bytes".
std::string byte_size(double bytes);
// The bytes this process may still allocate on `device` (infinity where it cannot tell), and the
// out-of-memory UsageError for `bytes` of `what` that cannot fit there.
double available_bytes(const torch::Device& device);
void check_fits(const Settings& settings, double bytes, const torch::Device& device,
                const std::string& what);
// std::bad_alloc as a UsageError: out of memory, and what to lower.
UsageError out_of_memory_error(const Settings& settings, const std::string& requested = "");
// Runs fn; a c10::Error becomes usage_error(..., "<model> in <dtype> on <device>").
void run_in_context(const std::string& model, const Settings& settings,
                    const std::function<void()>& fn);

// Under an address-space or data limit (ulimit -v, ulimit -d): OpenBLAS retries forever, in a
// loop, when it cannot allocate a thread's work buffer, so a GEMM would hang instead of failing.
// Called first, before anything large is allocated: its GEMMs run on the calling thread only,
// and that thread's buffer is taken now, by one small GEMM, while memory is free. If even that
// cannot finish within seconds, the process ends with the out-of-memory line (exit 2). Changes
// nothing without a limit or with another BLAS.
void prepare_blas_for_memory_limits();

}  // namespace fusedlinear
