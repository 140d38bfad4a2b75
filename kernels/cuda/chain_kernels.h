// The CUDA launchers of a registration's chains, type-erased: a table of function pointers per
// kernel family, one entry per declaration (kernels/math/model.h), each defined by a file that
// instantiates that family for the registration's declarations (kernels/register/). The ops look
// a chain's entry up by name (kernels/ops/chain_registry.h). Torch-free.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/skinny/skinny.h"
#include "kernels/math/element.h"
#include "kernels/math/program.h"

namespace fusedlinear {
namespace cuda {

// The epilogue of a chain (`program`: the op list of a run-time chain; compiled chains ignore it).
using CudaEpilogueFn = cudaError_t (*)(const act::Program& program, const EpilogueCall& call,
                                       cudaStream_t stream);
// The small-batch forward of a chain, as plan_skinny_linear laid it out (one family's variants).
using CudaSkinnyFn = cudaError_t (*)(const act::Program& program, const SkinnyCall& call,
                                     const SkinnyPlan& plan, float* workspace, cudaStream_t stream);

// The launchers of the index-th declaration of List (a tuple of them, or one), defined in
// epilogue.cuh and skinny/launch.cuh and instantiated, a family a file, by the files that
// register List (kernels/register/).
template <class List>
CudaEpilogueFn cuda_epilogue_at(int index);
template <class List, SkinnyFamily kFamily>
CudaSkinnyFn cuda_skinny_at(int index);

// One chain's launchers.
struct CudaChainKernels {
  CudaEpilogueFn epilogue = nullptr;
  CudaSkinnyFn skinny[4] = {};  // by SkinnyFamily
};

}  // namespace cuda
}  // namespace fusedlinear
