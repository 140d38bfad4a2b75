// The Hopper GEMM's interface to the library (launch.cuh): the families its launchers come in and
// the workspace a call needs. Host-only and torch-free.
#pragma once

#include <cstdint>

#include "kernels/cuda/linear_call.h"

namespace fusedlinear {
namespace cuda {

// A launcher a type of x: float32 (the bf16, bf16x3 and bf16x6 modes: x split into bfloat16 parts
// first, float32 out), bfloat16 or float16 models (x and W of that type, out too).
enum class HopperFamily { kFloat32, kBf16, kHalf };
constexpr int kHopperFamilies = 3;

inline HopperFamily hopper_family_of(const LinearCall& call) {
  return call.type == ElementType::kBFloat16  ? HopperFamily::kBf16
         : call.type == ElementType::kFloat16 ? HopperFamily::kHalf
                                              : HopperFamily::kFloat32;
}

// Floats of workspace a call needs: for float32 x, its bfloat16 parts (hi, then lo, or mid and
// lo), [rows][in_features] each.
inline int64_t hopper_workspace_floats(const LinearCall& call) {
  if (call.type != ElementType::kFloat32) return 0;
  const int64_t parts = split_parts_of(call.precision);
  return (parts * call.rows * call.in_features + 1) / 2;
}

}  // namespace cuda
}  // namespace fusedlinear
