// CPU twin of fused_epilogue.cu: the same per-column adds and the same activation functors
// (activations.h), over the elements split across threads with at::parallel_for. Each part goes
// through the loop of the instruction set chosen at run time (fused_epilogue_cpu.h): the scalar
// loop here, or the AVX2 / AVX-512 ones (fused_epilogue_cpu_isa.h).
#include "kernels/cpu/epilogue.h"

#include <ATen/Parallel.h>

#if FUSEDLINEAR_CPU_SIMD && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/ops/ops.h"

namespace fusedlinear {
namespace cpu {
namespace {

bool cpu_runs(Capability capability) {
#if FUSEDLINEAR_CPU_SIMD && (defined(__x86_64__) || defined(__i386__))
  // F16C from CPUID leaf 1: clang before 18 has no "f16c" for __builtin_cpu_supports.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  switch (capability) {
    case Capability::kScalar:
      return true;
    case Capability::kAvx2:
      return avx2;
    case Capability::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return capability == Capability::kScalar;
#endif
}

Capability initial_capability() {
  const std::vector<Capability> supported = supported_capabilities();
  Capability wanted = supported.front();
  const char* name = std::getenv("FUSEDLINEAR_CPU_CAPABILITY");
  if (!name) name = std::getenv("ATEN_CPU_CAPABILITY");
  if (name) {
    for (Capability c : {Capability::kScalar, Capability::kAvx2, Capability::kAvx512}) {
      if (std::strcmp(name, c == Capability::kScalar ? "default" : capability_name(c)) == 0) {
        wanted = c;
      }
    }
  }
  for (Capability c : supported) {
    if (c <= wanted) return c;
  }
  return Capability::kScalar;
}

std::atomic<Capability>& current() {
  static std::atomic<Capability> capability{initial_capability()};
  return capability;
}

// A multiple of every vector length: the parts the threads take start on a vector of the
// tensor's elements, so only the ends of rows leave partial vectors.
constexpr int64_t kBlock = 64;
// Elements per task: at the vector loops' ~1-3 ns an element (2 cores, AVX2), ~20-60 us of work,
// well above what starting a task costs; 128 x 1024 elements make four.
constexpr int64_t kGrainElements = int64_t{1} << 15;

}  // namespace

namespace scalar {
FUSEDLINEAR_DECLARE_EPILOGUE_SPAN {
  dispatch_element(element, [&](auto e) {
    constexpr ElementType E = decltype(e)::value;
    using T = std::conditional_t<
        E == ElementType::kFloat32, float,
        std::conditional_t<E == ElementType::kFloat16, c10::Half, c10::BFloat16>>;
    dispatch_epilogue<kResultPrecisionOfElement<E>>(kind, [&](auto activations) {
      scalar_span<T, decltype(activations)>(static_cast<const T*>(y), static_cast<const T*>(bias),
                                            static_cast<const T*>(shift), static_cast<T*>(out),
                                            cols, begin, end);
    });
  });
}
}  // namespace scalar

const char* capability_name(Capability capability) {
  switch (capability) {
    case Capability::kScalar:
      return "scalar";
    case Capability::kAvx2:
      return "avx2";
    case Capability::kAvx512:
      return "avx512";
  }
  return "?";
}

std::vector<Capability> supported_capabilities() {
  std::vector<Capability> supported;
  for (Capability c : {Capability::kAvx512, Capability::kAvx2, Capability::kScalar}) {
    if (cpu_runs(c)) supported.push_back(c);
  }
  return supported;
}

Capability capability() { return current().load(std::memory_order_relaxed); }

void set_capability(Capability capability) {
  if (!cpu_runs(capability)) {
    throw std::invalid_argument(std::string("fusedlinear: the CPU epilogue has no ") +
                                capability_name(capability) + " loop that runs here");
  }
  current().store(capability, std::memory_order_relaxed);
}

}  // namespace cpu

namespace detail {

torch::Tensor fused_epilogue_cpu(EpilogueKind kind, const torch::Tensor& y,
                                 const c10::optional<torch::Tensor>& bias,
                                 const c10::optional<torch::Tensor>& shift) {
  const torch::Tensor input = y.contiguous();
  torch::Tensor out = torch::empty_like(input, at::MemoryFormat::Contiguous);
  const int64_t numel = input.numel();
  if (numel == 0) return out;
  const int64_t cols = input.size(-1);
  const torch::Tensor bias_c = bias && bias->defined() ? bias->contiguous() : torch::Tensor();
  const torch::Tensor shift_c = shift && shift->defined() ? shift->contiguous() : torch::Tensor();
  const ElementType element = element_type_of(input);
  decltype(&cpu::scalar::epilogue_span) span = &cpu::scalar::epilogue_span;
#if FUSEDLINEAR_CPU_SIMD
  switch (cpu::capability()) {
    case cpu::Capability::kScalar:
      break;
    case cpu::Capability::kAvx2:
      span = &cpu::avx2::epilogue_span;
      break;
    case cpu::Capability::kAvx512:
      span = &cpu::avx512::epilogue_span;
      break;
  }
#endif
  const void* y_data = input.data_ptr();
  const void* bias_data = bias_c.defined() ? bias_c.data_ptr() : nullptr;
  const void* shift_data = shift_c.defined() ? shift_c.data_ptr() : nullptr;
  void* out_data = out.data_ptr();
  const int64_t blocks = (numel + cpu::kBlock - 1) / cpu::kBlock;
  at::parallel_for(0, blocks, cpu::kGrainElements / cpu::kBlock, [&](int64_t first, int64_t last) {
    span(kind, element, y_data, bias_data, shift_data, out_data, cols, first * cpu::kBlock,
         std::min(last * cpu::kBlock, numel));
  });
  return out;
}

}  // namespace detail
}  // namespace fusedlinear
