// hopper_gemm_check's launches in one mode (HOPPER_GEMM_CHECK_MODE, a Mode's name), with each
// model: the mode's kernels for every tile, compiled apart from the other modes' so that they
// compile in parallel.
#include "app/tools/hopper_gemm_check.h"

namespace fusedlinear {
namespace gemm_check {

#define GEMM_CHECK_INSTANTIATE(MODE, MODEL) template GEMM_CHECK_LAUNCH(MODE, MODEL);
GEMM_CHECK_MODELS_OF(GEMM_CHECK_INSTANTIATE, HOPPER_GEMM_CHECK_MODE)

}  // namespace gemm_check
}  // namespace fusedlinear
