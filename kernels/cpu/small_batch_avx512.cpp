// The small-batch products' AVX-512 loop (small_batch_isa.h).
#define FUSEDLINEAR_CPU_ISA avx512
#include "kernels/cpu/small_batch_isa.h"
