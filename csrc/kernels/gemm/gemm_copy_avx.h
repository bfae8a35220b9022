/* Transposing copies for the direct GEMM loop (gemm_small_tmpl.h) on the SIMD
 * paths, built from AVX instructions: included by gemm_avx2.c and
 * gemm_avx512.c after MYATT_TARGET_PUSH, so compiled for each.
 *
 *   strip[p * NB + j] = b[p + j * cs_b]   for p < kb, j < nb
 *   strip[p * NB + j] = 0                 for p < kb, nb <= j < NB
 *
 * i.e. a strip of B = weight^T for linear: the weight's rows (contiguous
 * along p) become the strip's columns.  8 x 8 (float) or 4 x 4 (double)
 * blocks go through registers; the rest element by element.  Only a copy:
 * no arithmetic, so every path's bits stay as they were.  The _from variants
 * start at column j0 (the columns before it are the caller's: gemm_avx512.c
 * copies 16 x 16 or 8 x 8 blocks first). */
#include <immintrin.h>
#include <stdint.h>

static inline void gemm_copy_t_f32_from(float *strip, int NB, const float *b, int64_t cs_b,
                                        int64_t kb, int64_t nb, int64_t j)
{
    for (; j + 8 <= nb; j += 8) {
        const float *b_j = b + j * cs_b;   /* W[j:j+8, :] */
        int64_t p = 0;
        for (; p + 8 <= kb; p += 8) {
            __m256 r0 = _mm256_loadu_ps(b_j + p), r1 = _mm256_loadu_ps(b_j + cs_b + p);
            __m256 r2 = _mm256_loadu_ps(b_j + 2 * cs_b + p), r3 = _mm256_loadu_ps(b_j + 3 * cs_b + p);
            __m256 r4 = _mm256_loadu_ps(b_j + 4 * cs_b + p), r5 = _mm256_loadu_ps(b_j + 5 * cs_b + p);
            __m256 r6 = _mm256_loadu_ps(b_j + 6 * cs_b + p), r7 = _mm256_loadu_ps(b_j + 7 * cs_b + p);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *s = strip + p * NB + j;   /* strip[p:p+8, j:j+8] */
            _mm256_storeu_ps(s + 0 * NB, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(s + 1 * NB, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(s + 2 * NB, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(s + 3 * NB, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(s + 4 * NB, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(s + 5 * NB, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(s + 6 * NB, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(s + 7 * NB, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (; p < kb; p++)
            for (int64_t jj = 0; jj < 8; jj++)
                strip[p * NB + j + jj] = b_j[jj * cs_b + p];
    }
    if (j < NB)   /* the last columns and the zeros up to NB, a row of the strip at a time: */
        for (int64_t p = 0; p < kb; p++) {   /* zeros by vectors, then the columns */
            float *s = strip + p * NB;
            int64_t jj = j;
            for (; jj + 8 <= NB; jj += 8)
                _mm256_storeu_ps(s + jj, _mm256_setzero_ps());
            for (; jj < NB; jj++)
                s[jj] = 0.0f;
            for (jj = j; jj < nb; jj++)
                s[jj] = b[jj * cs_b + p];
        }
}

static inline void gemm_copy_t_f32(float *strip, int NB, const float *b, int64_t cs_b,
                                   int64_t kb, int64_t nb)
{
    gemm_copy_t_f32_from(strip, NB, b, cs_b, kb, nb, 0);
}

static inline void gemm_copy_t_f64_from(double *strip, int NB, const double *b, int64_t cs_b,
                                        int64_t kb, int64_t nb, int64_t j)
{
    for (; j + 4 <= nb; j += 4) {
        const double *b_j = b + j * cs_b;   /* W[j:j+4, :] */
        int64_t p = 0;
        for (; p + 4 <= kb; p += 4) {
            const __m256d r0 = _mm256_loadu_pd(b_j + p), r1 = _mm256_loadu_pd(b_j + cs_b + p);
            const __m256d r2 = _mm256_loadu_pd(b_j + 2 * cs_b + p);
            const __m256d r3 = _mm256_loadu_pd(b_j + 3 * cs_b + p);
            const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
            const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
            double *s = strip + p * NB + j;   /* strip[p:p+4, j:j+4] */
            _mm256_storeu_pd(s + 0 * NB, _mm256_permute2f128_pd(t0, t2, 0x20));
            _mm256_storeu_pd(s + 1 * NB, _mm256_permute2f128_pd(t1, t3, 0x20));
            _mm256_storeu_pd(s + 2 * NB, _mm256_permute2f128_pd(t0, t2, 0x31));
            _mm256_storeu_pd(s + 3 * NB, _mm256_permute2f128_pd(t1, t3, 0x31));
        }
        for (; p < kb; p++)
            for (int64_t jj = 0; jj < 4; jj++)
                strip[p * NB + j + jj] = b_j[jj * cs_b + p];
    }
    if (j < NB)   /* the last columns and the zeros up to NB, a row of the strip at a time: */
        for (int64_t p = 0; p < kb; p++) {   /* zeros by vectors, then the columns */
            double *s = strip + p * NB;
            int64_t jj = j;
            for (; jj + 4 <= NB; jj += 4)
                _mm256_storeu_pd(s + jj, _mm256_setzero_pd());
            for (; jj < NB; jj++)
                s[jj] = 0.0;
            for (jj = j; jj < nb; jj++)
                s[jj] = b[jj * cs_b + p];
        }
}

static inline void gemm_copy_t_f64(double *strip, int NB, const double *b, int64_t cs_b,
                                   int64_t kb, int64_t nb)
{
    gemm_copy_t_f64_from(strip, NB, b, cs_b, kb, nb, 0);
}
