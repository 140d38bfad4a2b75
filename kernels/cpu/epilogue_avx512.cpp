// The CPU epilogue's AVX-512 loop (fused_epilogue_cpu_isa.h), built with -mavx512f -mavx512bw
// -mavx512vl -mavx512dq -mfma -mf16c and CPU_CAPABILITY_AVX512; called only where the CPU has
// them (fused_epilogue_cpu.cpp).
#define FUSEDLINEAR_CPU_ISA avx512
#include "kernels/cpu/epilogue_isa.h"
