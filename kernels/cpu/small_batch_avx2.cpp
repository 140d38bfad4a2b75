// The small-batch products' AVX2 loop (small_batch_isa.h).
#define FUSEDLINEAR_CPU_ISA avx2
#include "kernels/cpu/small_batch_isa.h"
