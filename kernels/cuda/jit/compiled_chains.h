// Run-time chains with kernels compiled by NVRTC: a chain spec's kernels are those a declaration of
// the chain gets (its source written by kernels/ops/chain_source.h, compiled by nvrtc_compile.h),
// the epilogue, the small-batch kernels and the Hopper GEMM with the chain in its epilogue, each
// compiled at its first call on a GPU of each architecture (the small-batch kernels a variant and
// the Hopper GEMM a kernel instance at a time, as the calls pick them), kept in memory for the
// process and on disk (kernel_cache.h), and launched by the same host launchers as a
// declaration's. On unless FUSEDLINEAR_JIT=0; where it is off, NVRTC or the toolkit's headers are
// missing or a compile fails, the interpreter's kernels run the chain (the last two after one
// notice line on stderr). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/chain_kernels.h"
#include "kernels/cuda/mlp/mlp_call.h"

namespace fusedlinear {
namespace cuda {
namespace jit {

// Whether run-time chains are compiled: unless the environment sets FUSEDLINEAR_JIT=0.
bool compiling_enabled();

// The launchers of the run-time chain `program`, whose declaration's chain is `chain_expression`:
// `interpreter`'s, the epilogue's, the small-batch kernels' and the Hopper GEMM's compiled at their
// first call where compiling is enabled.
// Chains of the same program share their compiled kernels (the ops they leave out,
// act::without_identity_clamps, change no value).
CudaChainKernels compiled_chain_kernels(const act::Program& program,
                                        const std::string& chain_expression,
                                        const CudaChainKernels& interpreter);

// The fused-MLP kernel of a model whose layers' chains are `layer_chains` (each as a declaration
// writes it, chain_source.h; "act::Chain()" for a layer without one): each instance a launch asks
// for compiled at its first call with the chains in, kept as the chains' kernels are, and null
// where it is not compiled (a notice says why; the library's instance interprets the chains) or
// compiling is off at that launch. Models of the same chains share their kernels.
MlpKernelOf compiled_mlp_kernels(const std::vector<std::string>& layer_chains);

// What the compiled chains have done in this process, for the tests: modules compiled by NVRTC,
// read from the disk cache, and compiles or loads that failed (the interpreter ran instead).
struct CompileCounts {
  int compiled = 0;
  int read_from_disk = 0;
  int failed = 0;
};
CompileCounts compile_counts();

// Unloads every compiled module of the process, so that each chain's next call reads its modules
// from the disk cache (or compiles them): for the tests of the cache. No kernel of them may be
// running.
void unload_compiled_modules();

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
