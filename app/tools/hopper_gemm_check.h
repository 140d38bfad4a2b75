// hopper_gemm_check's operands and launch (hopper_gemm_check.cu): what its checks and timings
// share with the translation units that compile each mode's kernels (hopper_gemm_check_launch.cu,
// once a mode), since every mode's kernels in one unit took minutes to compile.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "app/tools/cuda_check.h"
#include "kernels/cuda/gemm/hopper_gemm.cuh"
#include "kernels/math/reference_models.h"

namespace fusedlinear {
namespace gemm_check {

using cuda::gemm::GemmProducts;
using cuda::gemm::GemmTile;

inline constexpr const char* kToolName = "hopper_gemm_check";  // for CHECK_CUDA

// The chain without functors: the GEMM and bias alone (the accuracy comparisons).
struct IdentityModel {
  static constexpr const char* kName = "identity";
  static constexpr auto kChain = act::Chain<>{};
};

enum class Mode {
  kBf16ToF32,
  kBf16ToBf16,
  kFp16ToF32,
  kFp16ToFp16,
  kBf16x3,
  kBf16x3OneSum,
  kBf16x3Promoted,
  kBf16x6Promoted
};

template <Mode kMode>
struct ModeTraits {
  static constexpr GemmProducts kProducts =
      kMode == Mode::kBf16x3           ? GemmProducts::kBf16x3
      : kMode == Mode::kBf16x3OneSum   ? GemmProducts::kBf16x3OneSum
      : kMode == Mode::kBf16x3Promoted ? GemmProducts::kBf16x3Promoted
      : kMode == Mode::kBf16x6Promoted ? GemmProducts::kBf16x6Promoted
                                       : GemmProducts::kOne;
  // The bfloat16 parts x and W are split into (1: x and W themselves, in their 16-bit type).
  static constexpr int kParts = cuda::gemm::operand_parts(kProducts);
  static constexpr int kProductCount = kParts * (kParts + 1) / 2;
  static constexpr bool kHalfIn = kMode == Mode::kFp16ToF32 || kMode == Mode::kFp16ToFp16;
  using In = std::conditional_t<kHalfIn, __half, __nv_bfloat16>;
  using Out = std::conditional_t<kMode == Mode::kBf16ToBf16, __nv_bfloat16,
                                 std::conditional_t<kMode == Mode::kFp16ToFp16, __half, float>>;
  static constexpr const char* kName = kMode == Mode::kBf16ToF32        ? "bf16 -> f32"
                                       : kMode == Mode::kBf16ToBf16     ? "bf16 -> bf16"
                                       : kMode == Mode::kFp16ToF32      ? "fp16 -> f32"
                                       : kMode == Mode::kFp16ToFp16     ? "fp16 -> fp16"
                                       : kMode == Mode::kBf16x3         ? "bf16x3 -> f32"
                                       : kMode == Mode::kBf16x3OneSum   ? "bf16x3 1-sum"
                                       : kMode == Mode::kBf16x3Promoted ? "bf16x3 promoted"
                                                                        : "bf16x6 promoted";
  // The output's relative error beyond the products': the chain's float32 approximations (a few
  // ulp), or for 16-bit results one step of their rounding (half a step rounding, the rest the
  // chain's Half forms and the float32 value's error at a rounding boundary).
  static constexpr double kOutputError = std::is_same_v<Out, float>           ? 0x1p-19
                                         : std::is_same_v<Out, __nv_bfloat16> ? 0x1p-7
                                                                              : 0x1p-10;
  // The products' error bound in units of sum |x||w| over the products the kernel forms (for
  // bf16x3 and bf16x6 those of the parts, against which it is checked): float32 accumulation, a
  // rounding at each 16-k step of the tensor cores' sums (taken as truncation, 2^-23), plus slack.
  static double gamma(int64_t k) { return (double((k + 15) / 16) * kProductCount + 4) * 0x1p-23; }
};

template <typename T>
struct DeviceBuffer {
  T* data = nullptr;
  size_t count = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : count(n) {
    CHECK_CUDA(cudaMalloc(&data, n * sizeof(T) + 64));  // room for a misaligned view
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : data(o.data), count(o.count) { o.data = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data, o.data);
    std::swap(count, o.count);
    return *this;
  }
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
  void upload(const std::vector<T>& host) {
    CHECK_CUDA(cudaMemcpy(data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download(size_t n) const {
    std::vector<T> host(n);
    CHECK_CUDA(cudaMemcpy(host.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

// A mode's inputs on the device and the values its reference multiplies: the 16-bit x and W
// (their own values), or for bf16x3 and bf16x6 their bfloat16 parts (the float32 originals).
template <Mode kMode>
struct Operands {
  using Traits = ModeTraits<kMode>;
  using In = typename Traits::In;
  using Out = typename Traits::Out;
  int64_t m = 0, n = 0, k = 0;
  DeviceBuffer<In> x[Traits::kParts], w[Traits::kParts];
  DeviceBuffer<Out> bias, add_value;
  // The values the kernel reads: x's and W's parts (x and W themselves for one part), the bias
  // and add_value; for split modes also the float32 values they were split from.
  std::vector<float> ref_x[Traits::kParts], ref_w[Traits::kParts], ref_bias, ref_add_value;
  std::vector<float> x32, w32;
};

// What a launch reads and writes (the operands' own pointers, or shifted ones to test refusals).
struct Pointers {
  const void* x[cuda::gemm::kMaxParts] = {};
  const void* w[cuda::gemm::kMaxParts] = {};
  void* out = nullptr;
};
template <Mode kMode>
Pointers pointers_of(const Operands<kMode>& op, void* out) {
  Pointers ptr;
  for (int i = 0; i < ModeTraits<kMode>::kParts; ++i) {
    ptr.x[i] = op.x[i].data;
    ptr.w[i] = op.w[i].data;
  }
  ptr.out = out;
  return ptr;
}

// The kernel in mode kMode with Model's chain (as the library's CUDA paths run it for the output
// type), the problem's bias and add_value; k may be given smaller than the operands' to test
// refusals. `gate`: a gated pair's gate (its W and bias), the kernel then gated.
template <Mode kMode, class Model>
cudaError_t launch(const Operands<kMode>& op, const Pointers& ptr, GemmTile tile,
                   cudaStream_t stream, bool with_bias = true, int64_t k = -1,
                   const Operands<kMode>* gate = nullptr) {
  using Traits = ModeTraits<kMode>;
  using In = typename Traits::In;
  using Out = typename Traits::Out;
  const auto chain = device_chain<Model, act::kResultPrecisionFor<Out>>(act::Program{});
  ColumnTerms terms;
  terms.count = std::decay_t<decltype(Model::kChain)>::kTerms;
  terms.data[0] = op.add_value.data;
  cuda::ColumnEpilogue<Out, std::decay_t<decltype(chain)>> epilogue(
      with_bias ? op.bias.data : nullptr, terms, chain);
  const int64_t kk = k < 0 ? op.k : k;
  const auto bf16 = [](const void* p) { return static_cast<const __nv_bfloat16*>(p); };
  constexpr auto kAll = cuda::gemm::TileSet::kAll;
  const auto run = [&](auto gated) -> cudaError_t {
    constexpr bool kGated = decltype(gated)::value;
    if constexpr (kGated) epilogue.gate_bias = gate->bias.data;
    if constexpr (Traits::kParts == 3) {
      const __nv_bfloat16* const x[3] = {bf16(ptr.x[0]), bf16(ptr.x[1]), bf16(ptr.x[2])};
      const __nv_bfloat16* const w[3] = {bf16(ptr.w[0]), bf16(ptr.w[1]), bf16(ptr.w[2])};
      const __nv_bfloat16* const g[3] = {kGated ? gate->w[0].data : nullptr,
                                         kGated ? gate->w[1].data : nullptr,
                                         kGated ? gate->w[2].data : nullptr};
      return cuda::gemm::launch_hopper_gemm_bf16x6<kAll, kGated>(x, w, static_cast<float*>(ptr.out),
                                                                 op.m, op.n, kk, epilogue, stream,
                                                                 tile, {}, kGated ? g : nullptr);
    } else if constexpr (Traits::kParts == 2) {
      return cuda::gemm::launch_hopper_gemm_bf16x3<Traits::kProducts, kAll, kGated>(
          bf16(ptr.x[0]), bf16(ptr.x[1]), bf16(ptr.w[0]), bf16(ptr.w[1]),
          static_cast<float*>(ptr.out), op.m, op.n, kk, epilogue, stream, tile, {},
          kGated ? gate->w[0].data : nullptr, kGated ? gate->w[1].data : nullptr);
    } else {
      return cuda::gemm::launch_hopper_gemm<kAll, kGated>(
          static_cast<const In*>(ptr.x[0]), static_cast<const In*>(ptr.w[0]),
          static_cast<Out*>(ptr.out), op.m, op.n, kk, epilogue, stream, tile,
          kGated ? gate->w[0].data : nullptr);
    }
  };
  return gate ? run(std::true_type{}) : run(std::false_type{});
}

// Each mode's launches with each model, instantiated by the mode's own translation unit.
#define GEMM_CHECK_LAUNCH(MODE, MODEL)                                                          \
  cudaError_t launch<Mode::MODE, MODEL>(const Operands<Mode::MODE>&, const Pointers&, GemmTile, \
                                        cudaStream_t, bool, int64_t, const Operands<Mode::MODE>*)
#define GEMM_CHECK_MODELS_OF(X, MODE) \
  X(MODE, MishMishModel) X(MODE, SwishChainModel) X(MODE, IdentityModel)
#define GEMM_CHECK_EXTERN(MODE, MODEL) extern template GEMM_CHECK_LAUNCH(MODE, MODEL);
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kBf16ToF32)
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kBf16ToBf16)
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kFp16ToF32)
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kFp16ToFp16)
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kBf16x3)
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kBf16x3OneSum)
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kBf16x3Promoted)
GEMM_CHECK_MODELS_OF(GEMM_CHECK_EXTERN, kBf16x6Promoted)

}  // namespace gemm_check
}  // namespace fusedlinear
