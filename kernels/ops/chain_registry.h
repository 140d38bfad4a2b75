// The chains the ops know, by name: each declaration's compiled kernels (registered by the files
// kernels/register/fusedlinear_models.cmake writes), and any chain spec, run by the interpreter's
// kernels (registered the same way, by the library) or, on CUDA where NVRTC is, by the kernels of
// a declaration of it compiled at run time (kernels/cuda/jit/). The ops' `chain` argument is
// looked up here.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/epilogue.h"
#include "kernels/math/program.h"
#include "kernels/ops/chain_spec.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include "kernels/cuda/chain_kernels.h"
#endif

namespace fusedlinear {

// A chain's kernels: the CPU loops and, in builds with CUDA, the CUDA launchers.
struct ChainKernels {
  cpu::CpuChainKernels cpu;
#ifdef FUSEDLINEAR_WITH_CUDA
  cuda::CudaChainKernels cuda;
#endif
};

struct ChainEntry {
  std::string name;       // a declaration's name; for a run-time chain, its canonical spec
  ParsedChain chain;      // what it computes (the eager and float64 forms come from it)
  act::Program program;   // the op list the kernels take (compiled chains ignore it)
  bool compiled = false;  // a declaration's own kernels, or the interpreter's
  ChainKernels kernels;
};

// Registers a declaration's compiled chain under `name`. Throws std::invalid_argument when the
// name is taken or is an op of the vocabulary.
void register_compiled_chain(const std::string& name, const ParsedChain& chain,
                             const ChainKernels& kernels);
// Registers the interpreter's kernels (once, by the library).
void register_runtime_kernels(const ChainKernels& kernels);

// The chain `name_or_spec` names: a registered declaration, else a chain spec (parsed once and
// kept), run by the interpreter. Throws ChainSpecError naming what is wrong with the spec.
const ChainEntry& find_chain(const std::string& name_or_spec);

// The names of the compiled chains, in registration order.
std::vector<std::string> compiled_chain_names();

}  // namespace fusedlinear
