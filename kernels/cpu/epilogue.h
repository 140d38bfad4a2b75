// The CPU epilogues: one loop per instruction set, chosen at run time. A scalar loop runs a
// chain's functors on floats with libm; SIMD loops run the same functors on
// at::vec::Vectorized<float> (primitives_vec.h), compiled once with AVX2 and once with AVX-512
// (epilogue_isa.h), since ATen's vector headers compile their scalar fallbacks unless built with
// those flags. run_epilogue splits the elements across threads and calls the chosen loop on each
// part.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/math/element.h"
#include "kernels/math/program.h"

namespace fusedlinear {
namespace cpu {

// The instruction sets there are loops for, in increasing order.
enum class Capability { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2", "avx512" (the last two as ATEN_CPU_CAPABILITY spells them).
const char* capability_name(Capability capability);

// The loops this build has and this CPU can run, best first; kScalar is always there. AVX2 needs
// AVX2, FMA and F16C; AVX-512 needs AVX-512 F, BW, VL and DQ (as ATen's AVX512 kernels do), FMA
// and F16C.
std::vector<Capability> supported_capabilities();

// The loop the ops use. Chosen on first use as ATen chooses its own: the best supported one, or
// what the environment variable ATEN_CPU_CAPABILITY names ("default" is the scalar loop,
// "avx2", "avx512"), lowered to the best supported one at or below it.
// FUSEDLINEAR_CPU_CAPABILITY, with the same values, chooses for the fused ops alone.
Capability capability();

// Whether a pass that stages its values and copies them to the output with a string move
// (epilogue_loop.h) gains by it on this CPU: an AMD one that makes short string moves fast
// (CPUID's FSRM). It lost to plain stores on AMD CPUs without FSRM and on Intel CPUs with it.
bool staged_copies_pay();

// Makes the ops use `capability` from now on (tests force each one in turn). Throws
// std::invalid_argument when it is not among supported_capabilities().
void set_capability(Capability capability);

// Puts back, where its scope ends (an early return or a throw included), the loop that was in use
// when it was made: code that forces loops with set_capability leaves the ops as it found them.
class RestoreCapability {
 public:
  RestoreCapability() : previous_(capability()) {}
  ~RestoreCapability() { set_capability(previous_); }
  RestoreCapability(const RestoreCapability&) = delete;
  RestoreCapability& operator=(const RestoreCapability&) = delete;

 private:
  Capability previous_;
};

// The loop of one chain on the elements [begin, end) of a call (`program`: a run-time chain's op
// list; compiled chains ignore it).
using ChainSpan = void (*)(const act::Program& program, const EpilogueCall& call, int64_t begin,
                           int64_t end);

// One chain's loops, by Capability; null where this build has no such loop.
struct CpuChainKernels {
  ChainSpan span[3] = {};
};

// The loops of the index-th declaration of List (a tuple of them, or one): the scalar loop
// (epilogue_scalar.h) and the SIMD ones (epilogue_isa.h), each instantiated by the files that
// register List (kernels/register/).
namespace scalar {
template <class List>
ChainSpan chain_span_at(int index);
}
namespace avx2 {
template <class List>
ChainSpan chain_span_at(int index);
}
namespace avx512 {
template <class List>
ChainSpan chain_span_at(int index);
}

// The loop run_epilogue runs for `kernels`: the best one they have at or below capability().
Capability loop_of(const CpuChainKernels& kernels);

// The chain over every element of `call`, split across libtorch's threads (at::parallel_for), on
// the loop of loop_of(kernels).
void run_epilogue(const CpuChainKernels& kernels, const act::Program& program,
                  const EpilogueCall& call);

}  // namespace cpu
}  // namespace fusedlinear
