// The CPU epilogue's AVX2 loop (fused_epilogue_cpu_isa.h), built with -mavx2 -mfma -mf16c and
// CPU_CAPABILITY_AVX2; called only where the CPU has them (fused_epilogue_cpu.cpp).
#define FUSEDLINEAR_CPU_ISA avx2
#include "kernels/cpu/epilogue_isa.h"
