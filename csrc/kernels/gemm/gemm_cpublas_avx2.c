/* torch's naive GEMM orders (gemm_cpublas.h) with AVX2: gemm_cpublas_tmpl.h
 * compiled for it (MYATT_TARGET_PUSH, cpu.h), fused multiply-adds (exact
 * products: the portable path's bits), one dot at a time.  Only called after
 * mk_cpu_isa() chose this path. */
#include "gemm/gemm_cpublas_internal.h"

#ifdef MYATT_X86

#include <math.h>
#include <string.h>

MYATT_TARGET_PUSH(MYATT_TARGET_AVX2)

#define CPUBLAS_FN(name) name##_avx2
#define CPUBLAS_MADD(s, x, y) fmaf((x), (y), (s))
#define CPUBLAS_NJ 1
#include "gemm_cpublas_tmpl.h"

MYATT_TARGET_POP()

#endif
