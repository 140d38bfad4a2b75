// The precision modes of a Linear's products x W^T: the one type that names them, from the
// command line and the module to the op boundary (where the schema takes their names) and the
// kernels' calls. Torch-free, for every layer.
//
//   ieee    the products of x's own type: for float32 models float32 products and sums (cuBLAS
//           SGEMM with TF32 off, or float32 FMAs): PyTorch's default, the reference; for 16-bit
//           models their tensor-core products with float32 sums.
//   bf16x3  x and W each split into bfloat16 hi + lo; x_lo W_hi^T + x_hi W_lo^T + x_hi W_hi^T on
//           bf16 tensor cores with float32 accumulation: float32-grade results (within PyTorch's
//           1e-4 tolerance; error against float64 of the same order as ieee's) at a few times
//           the speed on large batches. Its split keeps 17 of x's and W's bits: the error is
//           ~2^-17 sum_k |x||w|, float32-grade where the terms of each sum are of moderate range.
//   bf16x6  x and W each split into three bfloat16 parts (24 bits, float32's), the six products
//           of parts i, j with i + j <= 2: error ~2^-24 sum_k |x||w| for inputs of any range, at
//           about twice bf16x3's time. cuBLAS's products or the Hopper GEMM's (no small-batch
//           kernel forms them).
//   tf32    one TF32 tensor-core product (10 significand bits): fastest float32-input mode,
//           errors ~1e-3 relative, outside 1e-4 at the reference shape.
//   bf16    one bfloat16 product (8 significand bits), float32 accumulation and epilogue: errors
//           ~1e-2 relative.
// Only the GEMM changes: the epilogue stays float32, the state dict stays float32. Inputs and
// weights that hold inf or NaN give eager's inf and NaN in every mode (bf16x3 and bf16x6 form such
// sums again: kernels/math/bf16_split.h).
#pragma once

// Names, parsing and lists are host code, which NVRTC (kernels/cuda/jit/) neither takes nor needs.
#ifndef __CUDACC_RTC__
#include <optional>
#include <string>
#include <vector>
#endif

namespace fusedlinear {

enum class Precision { kIeee, kBf16x3, kBf16x6, kTf32, kBf16 };

#ifndef __CUDACC_RTC__

inline const std::vector<Precision>& all_precisions() {
  static const std::vector<Precision> all = {
      Precision::kIeee, Precision::kBf16x3, Precision::kBf16x6, Precision::kTf32, Precision::kBf16};
  return all;
}

inline const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kIeee:
      return "ieee";
    case Precision::kBf16x3:
      return "bf16x3";
    case Precision::kBf16x6:
      return "bf16x6";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

// "ieee", "bf16x3", "bf16x6", "tf32", "bf16"; nothing for any other name.
inline std::optional<Precision> parse_precision(const std::string& name) {
  for (const Precision precision : all_precisions()) {
    if (name == precision_name(precision)) return precision;
  }
  return std::nullopt;
}

// Whether the mode keeps float32-grade accuracy (ieee, bf16x3, bf16x6); tf32 and bf16 trade it
// for speed.
inline bool keeps_float32_accuracy(Precision precision) {
  return precision == Precision::kIeee || precision == Precision::kBf16x3 ||
         precision == Precision::kBf16x6;
}

// Whether the mode sums several products of split parts (bf16x3, bf16x6): below bf16x3_min_rows
// one float32 GEMM is faster, and at few rows ieee's small-batch kernel.
inline bool sums_split_products(Precision precision) {
  return precision == Precision::kBf16x3 || precision == Precision::kBf16x6;
}

#endif  // __CUDACC_RTC__

// The bfloat16 parts of W (and of x) the mode's products read: bf16 1 (hi), bf16x3 2 (hi, lo),
// bf16x6 3 (hi, mid, lo); 0 for ieee and tf32, which read W itself.
constexpr int split_parts_of(Precision precision) {
  return precision == Precision::kBf16     ? 1
         : precision == Precision::kBf16x3 ? 2
         : precision == Precision::kBf16x6 ? 3
                                           : 0;
}

}  // namespace fusedlinear
