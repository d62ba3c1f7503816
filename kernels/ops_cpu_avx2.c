/* The row-wise CPU ops (ops_cpu_rows.h) built for AVX2+FMA: twice the
 * vector width of the x86-64 baseline (GELU forward and backward about 2x
 * faster). Used only where the CPU has both (kern_cpu_rows). FMA
 * contraction makes its results differ from the baseline build's by
 * rounding; test_kern.c checks both against float64. */
#include "kernels/kern_cpu.h"

#if KERN_HAVE_AVX2_BUILD
#pragma GCC optimize("O3", "finite-math-only", "no-signed-zeros", \
                     "no-math-errno", "no-trapping-math")
#pragma GCC target("avx2,fma")

#define ROWS(name) name##_avx2
#include "kernels/ops_cpu_rows.h"
#undef ROWS
#else
/* ISO C forbids an empty translation unit. */
typedef int kern_no_avx2_build;
#endif
