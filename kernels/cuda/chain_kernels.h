// The CUDA launchers of a registration's chains, type-erased: a table of function pointers per
// kernel family, one entry per compiled chain (kernels/math/model.h), each defined by a file that
// instantiates that family for the registration's declarations (kernels/register/). The ops look
// a chain's entry up by name in the registry, the layer above. Torch-free.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/skinny/skinny.h"
#include "kernels/math/element.h"
#include "kernels/math/program.h"

namespace fusedlinear {
namespace cuda {

// The epilogue of a chain (`program`: the op list of a run-time chain; compiled chains ignore it).
using CudaEpilogueFn = cudaError_t (*)(const act::Program& program, const EpilogueCall& call,
                                       cudaStream_t stream);
// The small-batch forward of a chain, as plan_skinny_linear laid it out (one family's variants).
using CudaSkinnyFn = cudaError_t (*)(const act::Program& program, const LinearCall& call,
                                     const SkinnyPlan& plan, float* workspace, cudaStream_t stream);
// The whole forward of a chain on the Hopper GEMM, the chain in its epilogue (gemm/launch.cuh);
// `workspace` of hopper_workspace_floats(call). cudaErrorNotSupported, with no product formed,
// where the kernel cannot take the call (a GPU other than sm_90, k not a multiple of 8, a base
// not 16-byte aligned, float32 products).
using CudaHopperFn = cudaError_t (*)(const act::Program& program, const LinearCall& call,
                                     float* workspace, cudaStream_t stream);

// The launchers of the index-th declaration of List (a tuple of them, or one), defined in
// epilogue.cuh, skinny/launch.cuh and gemm/launch.cuh and instantiated, a family a file, by the
// files that register List (kernels/register/).
template <class List>
CudaEpilogueFn cuda_epilogue_at(int index);
template <class List, SkinnyFamily kFamily>
CudaSkinnyFn cuda_skinny_at(int index);
template <class List, HopperFamily kFamily>
CudaHopperFn cuda_hopper_at(int index);

// One chain's launchers.
struct CudaChainKernels {
  CudaEpilogueFn epilogue = nullptr;
  CudaSkinnyFn skinny[4] = {};                // by SkinnyFamily
  CudaHopperFn hopper[kHopperFamilies] = {};  // by HopperFamily
};

}  // namespace cuda
}  // namespace fusedlinear
