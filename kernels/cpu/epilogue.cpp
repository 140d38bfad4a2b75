// The CPU twin of the CUDA epilogue (kernels/cuda/epilogue.cuh): the loop of the instruction set
// chosen at run time (epilogue.h), over the elements split across threads with at::parallel_for.
#include "kernels/cpu/epilogue.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#if FUSEDLINEAR_CPU_SIMD && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

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

// The loops this build has and this CPU runs, best first, found once: CPUID, which
// __get_cpuid runs, traps to the hypervisor in a virtual machine, microseconds each time.
const std::vector<Capability>& supported() {
  static const std::vector<Capability> loops = [] {
    std::vector<Capability> found;
    for (Capability c : {Capability::kAvx512, Capability::kAvx2, Capability::kScalar}) {
      if (cpu_runs(c)) found.push_back(c);
    }
    return found;
  }();
  return loops;
}

Capability initial_capability() {
  const std::vector<Capability>& supported_here = supported();
  Capability wanted = supported_here.front();
  const char* name = std::getenv("FUSEDLINEAR_CPU_CAPABILITY");
  if (!name) name = std::getenv("ATEN_CPU_CAPABILITY");
  if (name) {
    for (Capability c : {Capability::kScalar, Capability::kAvx2, Capability::kAvx512}) {
      if (std::strcmp(name, c == Capability::kScalar ? "default" : capability_name(c)) == 0) {
        wanted = c;
      }
    }
  }
  for (Capability c : supported_here) {
    if (c <= wanted) return c;
  }
  return Capability::kScalar;
}

bool is_supported(Capability capability) {
  for (Capability c : supported()) {
    if (c == capability) return true;
  }
  return false;
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

std::vector<Capability> supported_capabilities() { return supported(); }

Capability capability() { return current().load(std::memory_order_relaxed); }

void set_capability(Capability capability) {
  if (!is_supported(capability)) {
    throw std::invalid_argument(std::string("fusedlinear: the CPU epilogue has no ") +
                                capability_name(capability) + " loop that runs here");
  }
  current().store(capability, std::memory_order_relaxed);
}

bool staged_copies_pay() {
  static const bool pay = [] {
#if FUSEDLINEAR_CPU_SIMD && (defined(__x86_64__) || defined(__i386__))
    // The vendor, leaf 0's "AuthenticAMD" in EBX, EDX, ECX; FSRM, leaf 7's EDX bit 4: without
    // it a short rep movsb starts slowly.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool amd = __get_cpuid(0, &eax, &ebx, &ecx, &edx) && ebx == 0x68747541 &&
                     edx == 0x69746e65 && ecx == 0x444d4163;
    return amd && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 4)) != 0;
#else
    return false;
#endif
  }();
  return pay;
}

Capability loop_of(const CpuChainKernels& kernels) {
  const Capability wanted = capability();
  for (Capability c : supported()) {
    if (c <= wanted && kernels.span[int(c)]) return c;
  }
  return Capability::kScalar;
}

void run_epilogue(const CpuChainKernels& kernels, const act::Program& program,
                  const EpilogueCall& call) {
  const int64_t numel = call.rows * call.cols;
  if (numel == 0) return;
  const ChainSpan span = kernels.span[int(loop_of(kernels))];
  TORCH_CHECK(span, "fusedlinear: a chain without a CPU loop");
  const int64_t blocks = (numel + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, kGrainElements / kBlock, [&](int64_t first, int64_t last) {
    span(program, call, first * kBlock, std::min(last * kBlock, numel));
  });
}

}  // namespace cpu
}  // namespace fusedlinear
