/* torch's naive GEMM orders (gemm_cpublas.h) with AVX-512: gemm_cpublas_tmpl.h
 * compiled for it (MYATT_TARGET_PUSH, cpu.h), fused multiply-adds (exact
 * products: the portable path's bits), 4 dots at once sharing the loads of a row.  Only called after
 * mk_cpu_isa() chose this path. */
#include "gemm/gemm_cpublas_internal.h"

#ifdef MYATT_X86

#include <immintrin.h>
#include <math.h>
#include <string.h>

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

/* The dot's main loop (gemm_cpublas_tmpl.h's contract) with 4 columns' 64
 * lanes in 16 zmm registers: lane l of a block in register l / 16 */
static void dot8_blocks_avx512(const float *x, const float *const *y, int64_t blocks,
                               float (*s)[64])
{
    __m512 acc[4][4];
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 4; r++)
            acc[c][r] = _mm512_setzero_ps();
    for (int64_t p = 0; p < blocks; p += 64)
        for (int r = 0; r < 4; r++) {
            const __m512 xv = _mm512_loadu_ps(x + p + 16 * r);
            for (int c = 0; c < 4; c++)
                acc[c][r] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(y[c] + p + 16 * r), acc[c][r]);
        }
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 4; r++)
            _mm512_storeu_ps(s[c] + 16 * r, acc[c][r]);
}
#define CPUBLAS_DOT8_BLOCKS dot8_blocks_avx512

#define CPUBLAS_FN(name) name##_avx512
#define CPUBLAS_MADD(s, x, y) fmaf((x), (y), (s))
#define CPUBLAS_NJ 4
#include "gemm_cpublas_tmpl.h"

MYATT_TARGET_POP()

#endif
