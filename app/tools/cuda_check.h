// The standalone CUDA tools' check of a runtime call (epilogue_bench, hopper_gemm_check): on an
// error, one line naming the tool (kToolName, which each defines before its first check) and the
// call, then exit code 2.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                \
  do {                                                                                  \
    const cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s: %s: %s\n", kToolName, #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)
