// The registry: the models fusedlinear knows and the chains the ops know, in one table. A
// declaration (kernels/math/model.h) registers its model and its compiled chains in one call (the
// files kernels/register/fusedlinear_models.cmake writes); any chain spec is run by the
// interpreter's kernels (registered the same way, by the library) or, on CUDA where NVRTC is, by
// the kernels of a declaration of it compiled at run time (kernels/cuda/jit/). The ops' `chain`
// argument is looked up here; the CLI (--model, inferring a model from a file's keys), bench, the
// tests and, checked against them by a test, weights/export.py take the models' names and keys
// from here.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/epilogue.h"
#include "kernels/math/program.h"
#include "kernels/ops/chain_spec.h"
#include "kernels/ops/gemm_plan.h"
#include "kernels/ops/model_spec.h"

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
  std::string name;       // a declaration's chain's name; for a run-time chain, its canonical spec
  ParsedChain chain;      // what it computes (the eager and float64 forms come from it)
  act::Program program;   // the op list the kernels take (compiled chains ignore it)
  bool compiled = false;  // a declaration's own kernels, or a run-time chain's
  // A run-time chain whose CUDA kernels NVRTC compiles at their first call (kernels/cuda/jit/).
  bool compiled_at_run_time = false;
  ChainKernels kernels;
};

// Whose kernels run `entry`'s chain on a GPU, as plan_gemm weighs them.
ChainKernelKind gpu_chain_kernels(const ChainEntry& entry);

// Registers a declaration: its model and the compiled chains its layers name (a ModelSpec's
// op_chain()). Throws std::invalid_argument when a name is taken or a chain is named after an
// op of the vocabulary; then nothing is registered.
void register_model(const ModelSpec& model, const std::vector<ChainEntry>& compiled_chains);
// Registers the interpreter's kernels (once, by the library).
void register_runtime_kernels(const ChainKernels& kernels);

// The chain `name_or_spec` names: a declaration's compiled chain, else a chain spec (parsed once
// and kept), run by the interpreter or compiled at run time. Throws ChainSpecError naming what is
// wrong with the spec.
const ChainEntry& find_chain(const std::string& name_or_spec);

// The names of the compiled chains, in registration order.
std::vector<std::string> compiled_chain_names();

// The registered models, in registration order.
std::vector<ModelSpec> registered_models();
// The registered names, in the order `--model all` runs them.
std::vector<std::string> model_names();
// The model registered as `name`. Throws std::invalid_argument naming the registered ones.
ModelSpec find_model(const std::string& name);

}  // namespace fusedlinear
