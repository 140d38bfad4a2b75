// The fused epilogue: one pass over a GEMM output, reading each element once and writing it once,
// adding the Linear's bias and applying a model's chain (kernels/math/chain.h) in registers:
//
//   out[r, c] = chain(y[r, c] + bias[c], terms[.][c]) * gate[r, c]   (gate: a gated layer's)
//
// Layout: a 2-D grid. x covers the columns, kVec contiguous columns per thread, so each thread
// loads its bias and terms once; y covers the rows, kRows rows per thread per step, all loads of
// a step issued before the first use so enough bytes are in flight to cover memory latency; a
// grid-stride loop covers the rows past the grid. All indexing is 64-bit. kVec is
// 16 bytes / sizeof(T) when every access is 16-byte aligned, otherwise 1.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device.cuh"
#include "kernels/math/model.h"

// The launchers are host code, which NVRTC, compiling the kernels of a run-time chain
// (kernels/cuda/jit/), neither takes nor needs.
#ifndef __CUDACC_RTC__
#include <algorithm>

#include "kernels/cuda/chain_kernels.h"
#endif

namespace fusedlinear {
namespace cuda {

// A chain with the per-column inputs it reads: the Linear's bias and the chain's per-feature
// terms, each of T, for any column; for the Hopper GEMM's gated pairs (hopper_gemm.cuh) also the
// gate's Linear's bias. Passed by value to the kernels (as a __grid_constant__ parameter, so that
// the interpreter's op list is read where it lies).
template <typename T, class ChainT>
struct ColumnEpilogue {
  using Chain = ChainT;
  const T* bias = nullptr;
  const T* gate_bias = nullptr;
  const T* terms[act::kMaxColumnTerms] = {};
  uint32_t broadcast = 0;  // bit j: terms[j] is one value for every column
  int term_count = 0;
  ChainT chain;

#ifndef __CUDACC_RTC__
  __host__ ColumnEpilogue(const void* bias_data, const ColumnTerms& column_terms, ChainT c)
      : bias(static_cast<const T*>(bias_data)),
        broadcast(column_terms.broadcast),
        term_count(column_terms.count),
        chain(c) {
    for (int j = 0; j < act::kMaxColumnTerms; ++j)
      terms[j] = static_cast<const T*>(column_terms.data[j]);
  }
#endif

  // The epilogue of one total of column n (the small-batch kernels' outputs, one at a time).
  __device__ __forceinline__ T operator()(float sum, int64_t n) const {
    if (bias) sum += to_float(bias[n]);
    float v[1] = {sum};
    float t[act::kMaxColumnTerms][1] = {};
#pragma unroll
    for (int j = 0; j < ChainT::kTerms; ++j) {
      if (j < term_count) t[j][0] = to_float(terms[j][(broadcast >> j) & 1 ? 0 : n]);
    }
    act::apply_chain(chain, v, t);
    return from_float<T>(v[0]);
  }
};

// kVec values of column terms from p at col0, as floats: one access (aligned: the launcher takes
// the kVec > 1 path only when p is 16-byte aligned), or one value for all where `broadcast`.
template <typename T, int kVec>
__device__ __forceinline__ void load_column_values(const T* p, int64_t col0, bool broadcast,
                                                   float (&v)[kVec]) {
  if (broadcast) {
    const float value = to_float(p[0]);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = value;
  } else {
    const Packed<T, kVec> values = *reinterpret_cast<const Packed<T, kVec>*>(p + col0);
    to_floats(values, v);
  }
}

// How the kernel is launched: rows per thread per step, threads per block, the grid capped at
// that many waves of resident blocks (0: one step per thread, no cap), and the registers a thread
// may use (0: ptxas's own choice), a cap that lets more blocks share an SM.
template <int kRowsPerThread, int kThreadsPerBlock, int kMaxWaves, int kMaxRegistersPerThread = 0>
struct LaunchShape {
  static constexpr int kRows = kRowsPerThread;
  static constexpr int kThreads = kThreadsPerBlock;
  static constexpr int kWaves = kMaxWaves;
  static constexpr int kMaxRegisters = kMaxRegistersPerThread;
};

// The chain's values of a row times the gate's: each value rounded to T first, as the separate
// multiply of an unfused gated layer sees it (a no-op for float).
template <typename T, int kVec>
__device__ __forceinline__ void multiply_rounded(float (&v)[kVec], const Packed<T, kVec>& gate) {
  float g[kVec], rounded[kVec];
  to_floats(gate, g);
  to_floats(round_to<T>(v), rounded);
#pragma unroll
  for (int k = 0; k < kVec; ++k) v[k] = rounded[k] * g[k];
}

// kHasBias, kGated: whether bias and gate are given (else null and unread). Compile-time, so a
// call without one neither keeps registers for it nor issues its loads; the chain's terms
// likewise number ChainT::kTerms.
template <typename T, int kVec, class Shape, bool kHasBias, bool kGated, class ChainT>
__device__ __forceinline__ void fused_epilogue_rows(const T* __restrict__ y,
                                                    const T* __restrict__ gate, T* __restrict__ out,
                                                    int64_t rows, int64_t cols,
                                                    const ColumnEpilogue<T, ChainT>& epilogue) {
  using Pack = Packed<T, kVec>;
  constexpr int kRows = Shape::kRows;
  constexpr int kTerms = ChainT::kTerms;
  const int64_t col0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (col0 >= cols) return;

  float col_bias[kVec];
  float col_terms[act::kMaxColumnTerms][kVec] = {};
  if constexpr (kHasBias) load_column_values(epilogue.bias, col0, false, col_bias);
#pragma unroll
  for (int j = 0; j < kTerms; ++j) {
    if (j < epilogue.term_count) {
      load_column_values(epilogue.terms[j], col0, (epilogue.broadcast >> j) & 1, col_terms[j]);
    }
  }

  const int64_t row_step = int64_t(gridDim.y) * blockDim.y * kRows;
  // The gate's rows load with y's, so both are in flight together.
  constexpr int kGateRows = kGated ? kRows : 1;
  const auto load_rows = [&](int64_t row0, Pack(&in)[kRows], Pack(&in_gate)[kGateRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r < rows) {
        in[r] = *reinterpret_cast<const Pack*>(y + (row0 + r) * cols + col0);
        if constexpr (kGated) {
          in_gate[r] = *reinterpret_cast<const Pack*>(gate + (row0 + r) * cols + col0);
        }
      }
    }
  };
  // Software pipelined: the next step's loads are in flight while this step computes.
  int64_t row0 = (int64_t(blockIdx.y) * blockDim.y + threadIdx.y) * kRows;
  // A step's rows past the end keep zeros or an earlier step's values: computed, never stored.
  Pack next[kRows] = {};
  Pack next_gate[kGateRows] = {};
  if (row0 < rows) load_rows(row0, next, next_gate);
  while (row0 < rows) {
    Pack in[kRows];
    Pack in_gate[kGateRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) in[r] = next[r];
#pragma unroll
    for (int r = 0; r < kGateRows; ++r) in_gate[r] = next_gate[r];
    const int64_t next_row0 = row0 + row_step;
    if (next_row0 < rows) load_rows(next_row0, next, next_gate);
    float v[kRows][kVec];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      to_floats(in[r], v[r]);
      if constexpr (kHasBias) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[r][k] += col_bias[k];
      }
    }
    if constexpr (kVec <= 4) {
      // float32: every row's values at once, so that a run-time chain dispatches each op once
      // for kRows x kVec values.
      act::apply_chain(epilogue.chain, v, col_terms);
    } else {
      // 16-bit types: groups of 4 values of a row, a body small enough for their 8 values a row
      // to stay in registers.
      constexpr int kGroup = 4;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int g = 0; g < kVec; g += kGroup) {
          float group[kGroup];
          float group_terms[act::kMaxColumnTerms][kGroup];
#pragma unroll
          for (int k = 0; k < kGroup; ++k) {
            group[k] = v[r][g + k];
#pragma unroll
            for (int j = 0; j < act::kMaxColumnTerms; ++j) group_terms[j][k] = col_terms[j][g + k];
          }
          act::apply_chain(epilogue.chain, group, group_terms);
#pragma unroll
          for (int k = 0; k < kGroup; ++k) v[r][g + k] = group[k];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if constexpr (kGated) multiply_rounded<T>(v[r], in_gate[r]);
      if (row0 + r < rows)
        *reinterpret_cast<Pack*>(out + (row0 + r) * cols + col0) = round_to<T>(v[r]);
    }
    row0 = next_row0;
  }
}

template <typename T, int kVec, class Shape, bool kHasBias, bool kGated, class ChainT>
__global__ void fused_epilogue_kernel(const T* __restrict__ y, const T* __restrict__ gate,
                                      T* __restrict__ out, int64_t rows, int64_t cols,
                                      const __grid_constant__ ColumnEpilogue<T, ChainT> epilogue) {
  fused_epilogue_rows<T, kVec, Shape, kHasBias, kGated>(y, gate, out, rows, cols, epilogue);
}

// The same with a thread's registers capped at Shape::kMaxRegisters. A kernel of its own: any
// register attribute, even one that caps nothing, changes ptxas's allocation (it gave a run-time
// chain's kernel far more registers: docs/PERFORMANCE.md, the run-time chains), so the uncapped
// kernel carries none.
template <typename T, int kVec, class Shape, bool kHasBias, bool kGated, class ChainT>
__global__ void __maxnreg__(Shape::kMaxRegisters)
    fused_epilogue_kernel_capped(const T* __restrict__ y, const T* __restrict__ gate,
                                 T* __restrict__ out, int64_t rows, int64_t cols,
                                 const __grid_constant__ ColumnEpilogue<T, ChainT> epilogue) {
  fused_epilogue_rows<T, kVec, Shape, kHasBias, kGated>(y, gate, out, rows, cols, epilogue);
}

template <typename T, int kVec, class Shape, bool kHasBias, bool kGated, class ChainT>
constexpr auto fused_epilogue_kernel_for() {
  if constexpr (Shape::kMaxRegisters > 0) {
    return &fused_epilogue_kernel_capped<T, kVec, Shape, kHasBias, kGated, ChainT>;
  } else {
    return &fused_epilogue_kernel<T, kVec, Shape, kHasBias, kGated, ChainT>;
  }
}

#ifndef __CUDACC_RTC__
// Launch shape: Shape::kThreads threads; narrow rows get several rows of threads per block so
// no block is mostly idle; the grid's y dimension is capped at 65535 (the loop covers the rest).
// `kernel`: an instance of fused_epilogue_kernel for T, kVec and Shape (a declaration's, or the
// same compiled at run time, kernels/cuda/jit/), `epilogue` the ColumnEpilogue it takes.
template <typename T, int kVec, class Shape>
cudaError_t launch_fused_epilogue_kernel(const void* kernel, const T* y, const T* gate, T* out,
                                         int64_t rows, int64_t cols, const void* epilogue,
                                         cudaStream_t stream) {
  constexpr int kThreads = Shape::kThreads;
  const int64_t vecs_per_row = ceil_div(cols, kVec);
  const int threads_x = int(std::min<int64_t>(kThreads, ceil_div(vecs_per_row, 32) * 32));
  const int threads_y = kThreads / threads_x;
  const int64_t grid_x = ceil_div(vecs_per_row, threads_x);
  int64_t grid_y = std::min<int64_t>(ceil_div(rows, int64_t(threads_y) * Shape::kRows), 65535);
  if (Shape::kWaves > 0) {
    // At most kWaves waves of resident blocks; each thread then loops over several steps.
    DeviceLimits limits;
    const cudaError_t err = current_device_limits(limits);
    if (err != cudaSuccess) return err;
    const int64_t resident_blocks = int64_t(limits.multiprocessors) *
                                    (limits.threads_per_multiprocessor / kThreads) * Shape::kWaves;
    grid_y = std::max<int64_t>(1, std::min(grid_y, resident_blocks / grid_x));
  }
  const dim3 block(threads_x, threads_y);
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  void* args[] = {&y, &gate, &out, &rows, &cols, const_cast<void*>(epilogue)};
  return cudaLaunchKernel(kernel, grid, block, args, 0, stream);
}

// One chain's epilogue kernels for one element type and launch shape: by 16-byte vectors or one
// element a thread, with a bias or without, with a gate or without.
struct EpilogueKernels {
  const void* kernel[2][2][2] = {};  // [vectorized][has bias][gated]
};

// A declaration's kernels for T, Shape and ChainT.
template <typename T, class Shape, class ChainT>
EpilogueKernels epilogue_kernels_of() {
  constexpr int kVec = 16 / sizeof(T);
  EpilogueKernels kernels;
  const auto set = [&](auto vec, auto has_bias, auto gated) {
    constexpr int kV = decltype(vec)::value;
    constexpr bool kB = decltype(has_bias)::value, kG = decltype(gated)::value;
    kernels.kernel[kV > 1][kB][kG] =
        reinterpret_cast<const void*>(fused_epilogue_kernel_for<T, kV, Shape, kB, kG, ChainT>());
  };
  using False = std::false_type;
  using True = std::true_type;
  using One = std::integral_constant<int, 1>;
  using Vec = std::integral_constant<int, kVec>;
  set(One{}, False{}, False{});
  set(One{}, False{}, True{});
  set(One{}, True{}, False{});
  set(One{}, True{}, True{});
  set(Vec{}, False{}, False{});
  set(Vec{}, False{}, True{});
  set(Vec{}, True{}, False{});
  set(Vec{}, True{}, True{});
  return kernels;
}
#endif

// The shape a model's chain is launched with: the fastest of epilogue_bench's sweep on an H200.
// float32: one row per thread per step, 256 threads, two waves. float32 run-time chains: two rows
// a thread (one dispatch an op for twice the values), 128 threads, and, for programs of at most
// one term, registers capped at 48, which lets one more block share an SM without spilling
// (docs/PERFORMANCE.md: the run-time chains); kernels for more terms hold far more registers, which
// such a cap would spill. The 2-byte types, whose 16-byte accesses hold twice the elements and
// whose chains are therefore bound by arithmetic rather than memory: the declaration's HalfLaunch
// (kernels/math/model.h). kTerms: the terms the chain's kernel keeps (ChainT::kTerms).
template <typename T, class Model, int kTerms, bool kFourBytes = sizeof(T) == 4>
struct ProductionShapeOf {
  using type = LaunchShape<1, 256, 2>;
};
template <typename T, int kTerms>
struct ProductionShapeOf<T, RuntimeChain, kTerms, true> {
  using type = std::conditional_t<kTerms <= 1, LaunchShape<2, 128, 2, 48>, LaunchShape<2, 128, 2>>;
};
template <typename T, class Model, int kTerms>
struct ProductionShapeOf<T, Model, kTerms, false> {
  static constexpr HalfLaunch kHalf = HalfLaunchOf<Model>::value;
  using type = LaunchShape<kHalf.rows, kHalf.threads, kHalf.waves>;
};
template <typename T, class Model, class ChainT>
using ProductionShape = typename ProductionShapeOf<T, Model, ChainT::kTerms>::type;

#ifndef __CUDACC_RTC__
// Picks the vector width: 16-byte accesses when every access would be 16-byte aligned (y and
// out are, and a row is whole vectors; bias and the terms read per column, where given, are),
// else 1. Decided here once rather than per thread, whose set-up would otherwise issue both paths.
// `kernels` (a chain's, compiled ahead or at run time) take `epilogue`: its chain's type may be
// one of the same layout that only they know (kernels/cuda/jit/).
template <typename T, class Shape, class ChainT>
cudaError_t launch_fused_epilogue_typed(const EpilogueKernels& kernels, const T* y, const T* gate,
                                        T* out, int64_t rows, int64_t cols,
                                        const ColumnEpilogue<T, ChainT>& epilogue,
                                        cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (rows == 0 || cols == 0) return cudaSuccess;
  bool aligned = cols % kVec == 0 && aligned16(y) && aligned16(out) &&
                 (!epilogue.bias || aligned16(epilogue.bias)) && (!gate || aligned16(gate));
  for (int j = 0; j < epilogue.term_count; ++j) {
    aligned = aligned && ((epilogue.broadcast >> j) & 1 || aligned16(epilogue.terms[j]));
  }
  const void* kernel = kernels.kernel[aligned ? 1 : 0][epilogue.bias ? 1 : 0][gate ? 1 : 0];
  if (aligned) {
    return launch_fused_epilogue_kernel<T, kVec, Shape>(kernel, y, gate, out, rows, cols, &epilogue,
                                                        stream);
  }
  return launch_fused_epilogue_kernel<T, 1, Shape>(kernel, y, gate, out, rows, cols, &epilogue,
                                                   stream);
}
template <typename T, class Shape, class ChainT>
cudaError_t launch_fused_epilogue_typed(const T* y, const T* gate, T* out, int64_t rows,
                                        int64_t cols, const ColumnEpilogue<T, ChainT>& epilogue,
                                        cudaStream_t stream) {
  return launch_fused_epilogue_typed<T, Shape>(epilogue_kernels_of<T, Shape, ChainT>(), y, gate,
                                               out, rows, cols, epilogue, stream);
}

// The epilogue of declaration Model (or, for RuntimeChain, of `program`, by the interpreter's
// kernel for as many terms as the program reads) on one call.
template <class Model>
cudaError_t launch_epilogue_for(const act::Program& program, const EpilogueCall& call,
                                cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  dispatch_element(call.type, [&](auto element) {
    constexpr ElementType E = decltype(element)::value;
    using T = DeviceElement<E>;
    const auto launch = [&](const auto& chain) {
      using ChainT = std::decay_t<decltype(chain)>;
      const ColumnEpilogue<T, ChainT> epilogue(call.bias, call.terms, chain);
      err = launch_fused_epilogue_typed<T, ProductionShape<T, Model, ChainT>>(
          static_cast<const T*>(call.y), static_cast<const T*>(call.gate),
          static_cast<T*>(call.out), call.rows, call.cols, epilogue, stream);
    };
    if constexpr (kIsRuntimeChain<Model>) {
      // device_chain's interpreter (model.h), with the registers of as many terms as it reads.
      act::with_term_capacity(program.terms, [&](auto capacity) {
        launch(act::ProgramChain<act::ResultPrecision::kFloat32, capacity()>{
            act::with_result_precision(program, kResultPrecisionOf<E>)});
      });
    } else {
      launch(device_chain<Model, kResultPrecisionOf<E>>(program));
    }
  });
  return err;
}

template <class List>
struct EpilogueTable;
template <class... Ms>
struct EpilogueTable<std::tuple<Ms...>> {
  static constexpr CudaEpilogueFn fn[] = {&launch_epilogue_for<Ms>...};
};
template <class List>
CudaEpilogueFn cuda_epilogue_at(int index) {
  return EpilogueTable<typename ModelList<List>::type>::fn[index];
}

#endif

}  // namespace cuda
}  // namespace fusedlinear
