// The fusedlinear program's commands as a library function: compare, run and bench over every
// registered model (kernels/ops/chain_registry.h), the library's and those a linking project
// registers (kernels/register/fusedlinear_models.cmake). Ends the process, promptly whatever the
// BLAS's threads are doing, with the exit code: 0 when every model is within tolerance, 1 when one
// is not, 2 for bad input (one line on stderr).
#pragma once

namespace fusedlinear {

[[noreturn]] int app_main(int argc, char** argv);

}  // namespace fusedlinear
