// The precision of the fused forward's GEMM, x W^T (LinearEpilogueModel::set_precision).
//
//   ieee    float32 products and sums (cuBLAS SGEMM, TF32 off): PyTorch's default, the reference.
//   bf16x3  x and W each split into bfloat16 hi + lo; x_lo W_hi^T + x_hi W_lo^T + x_hi W_hi^T on
//           bf16 tensor cores with float32 accumulation: float32-grade results (within PyTorch's
//           1e-4 tolerance; error against float64 of the same order as ieee's) at a few times
//           the speed on large batches.
//   tf32    one TF32 tensor-core product (10 significand bits): fastest float32-input mode,
//           errors ~1e-3 relative, outside 1e-4 at the reference shape.
//   bf16    one bfloat16 product (8 significand bits), float32 accumulation and epilogue: errors
//           ~1e-2 relative.
// Only the GEMM changes: the epilogue stays float32, the state dict stays float32.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fusedlinear {

enum class Precision { kIeee, kBf16x3, kTf32, kBf16 };

inline const std::vector<Precision>& all_precisions() {
  static const std::vector<Precision> all = {Precision::kIeee, Precision::kBf16x3, Precision::kTf32,
                                             Precision::kBf16};
  return all;
}

inline const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kIeee:
      return "ieee";
    case Precision::kBf16x3:
      return "bf16x3";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

// "ieee", "bf16x3", "tf32", "bf16"; nothing for any other name.
inline std::optional<Precision> parse_precision(const std::string& name) {
  for (const Precision precision : all_precisions()) {
    if (name == precision_name(precision)) return precision;
  }
  return std::nullopt;
}

// Which kernel runs the fused forward's GEMM (LinearEpilogueModel::set_gemm_kernel).
//   auto    the skinny kernel on a GPU for inputs of up to skinny_max_rows() rows (where it
//           measured faster: it reads W once and fuses the epilogue), cuBLAS otherwise;
//   cublas  always cuBLAS (or libtorch's CPU GEMM), then the fused epilogue;
//   skinny  always the skinny kernel (any number of rows, W then read once per tile of x's rows:
//           16 for float32 W, 64 on the tensor cores; on the CPU its twin: the same products in
//           float32 and the fused epilogue).
enum class GemmKernel { kAuto, kCublas, kSkinny };

inline const std::vector<GemmKernel>& all_gemm_kernels() {
  static const std::vector<GemmKernel> all = {GemmKernel::kAuto, GemmKernel::kCublas,
                                              GemmKernel::kSkinny};
  return all;
}

inline const char* gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kAuto:
      return "auto";
    case GemmKernel::kCublas:
      return "cublas";
    case GemmKernel::kSkinny:
      return "skinny";
  }
  return "?";
}

// "auto", "cublas", "skinny"; nothing for any other name.
inline std::optional<GemmKernel> parse_gemm_kernel(const std::string& name) {
  for (const GemmKernel kernel : all_gemm_kernels()) {
    if (name == gemm_kernel_name(kernel)) return kernel;
  }
  return std::nullopt;
}

// Whether the mode keeps float32-grade accuracy (ieee, bf16x3); tf32 and bf16 trade it for speed.
inline bool keeps_float32_accuracy(Precision precision) {
  return precision == Precision::kIeee || precision == Precision::kBf16x3;
}

}  // namespace fusedlinear
