// epilogue_bench's runs, one element type each (epilogue_bench_runs.cu, compiled once per type).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

namespace epilogue_bench {

// The copy, the identity chain and every library declaration's variants in T, on rows x cols.
template <typename T>
void run_all(int64_t rows, int64_t cols, size_t l2_bytes, int iters);

}  // namespace epilogue_bench
