/* Transposing copies for the direct GEMM loop (gemm_small_tmpl.h) on the SIMD
 * paths, built from AVX instructions: included by gemm_avx2.c and
 * gemm_avx512.c after their target pragma, so compiled for each.
 *
 *   strip[p * NB + j] = b[p + j * cs_b]   for p < kb, j < nb
 *   strip[p * NB + j] = 0                 for p < kb, nb <= j < NB
 *
 * i.e. a strip of B = weight^T for linear: the weight's rows (contiguous
 * along p) become the strip's columns.  8 x 8 (float) or 4 x 4 (double)
 * blocks go through registers; the rest element by element.  Only a copy:
 * no arithmetic, so every path's bits stay as they were. */
#include <immintrin.h>
#include <stdint.h>

static inline void gemm_copy_t_f32(float *strip, int NB, const float *b, int64_t cs_b,
                                   int64_t kb, int64_t nb)
{
    int64_t j = 0;
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
    for (; j < NB; j++)
        for (int64_t p = 0; p < kb; p++)
            strip[p * NB + j] = j < nb ? b[j * cs_b + p] : 0.0f;
}

static inline void gemm_copy_t_f64(double *strip, int NB, const double *b, int64_t cs_b,
                                   int64_t kb, int64_t nb)
{
    int64_t j = 0;
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
    for (; j < NB; j++)
        for (int64_t p = 0; p < kb; p++)
            strip[p * NB + j] = j < nb ? b[j * cs_b + p] : 0.0;
}

/* One row of c against B = weight^T (rs_b == 1), float64, the transpose done
 * in registers instead of through a strip: for j < n,
 *   c[j * cs_c] = chain over p < k of fma(a[p * cs_a], b[j * cs_b + p], .)
 * from c[j * cs_c] (c_holds_value) or 0: the arithmetic of the float64
 * contract (gemm_internal.h), so the same bits as every other route.  G groups
 * of 4 columns advance side by side (G independent chains per step: one chain
 * alone waits on the FMA latency).  For the seed's one-row products the strip
 * copy cost more than the products: the seed's float64 module ran in 1.6-1.7 us
 * through strips, 1.30 us this way. */
static inline __attribute__((always_inline))
void gemm_row_wt_f64_groups(double *c, int64_t cs_c, const double *a, int64_t cs_a,
                            const double *b, int64_t cs_b, int64_t k, int c_holds_value,
                            const int G)
{
    __m256d acc[8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        const double *c_g = c + 4 * g * cs_c;
        acc[g] = !c_holds_value ? _mm256_setzero_pd()
                 : cs_c == 1 ? _mm256_loadu_pd(c_g)
                 : _mm256_set_pd(c_g[3 * cs_c], c_g[2 * cs_c], c_g[cs_c], c_g[0]);
    }
    int64_t p = 0;
    for (; p + 2 <= k; p += 2) {
        const __m256d a0 = _mm256_set1_pd(a[p * cs_a]), a1 = _mm256_set1_pd(a[(p + 1) * cs_a]);
        const double *w = b + p;   /* W[4g:4g+4, p:p+2] */
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            const __m256d r02 = _mm256_blend_pd(_mm256_broadcast_pd((const __m128d *)w),
                                                _mm256_broadcast_pd((const __m128d *)(w + 2 * cs_b)),
                                                0xC);
            const __m256d r13 = _mm256_blend_pd(_mm256_broadcast_pd((const __m128d *)(w + cs_b)),
                                                _mm256_broadcast_pd((const __m128d *)(w + 3 * cs_b)),
                                                0xC);
            acc[g] = _mm256_fmadd_pd(a0, _mm256_unpacklo_pd(r02, r13), acc[g]);   /* W[., p] */
            acc[g] = _mm256_fmadd_pd(a1, _mm256_unpackhi_pd(r02, r13), acc[g]);   /* W[., p+1] */
            w += 4 * cs_b;
            /* an opaque step: else GCC keeps all 4G row offsets, spilled to the
             * stack and reloaded before every load: 1.4x slower) */
            __asm__("" : "+r"(w));
        }
    }
    if (p < k) {
        const __m256d a0 = _mm256_set1_pd(a[p * cs_a]);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            const double *w = b + 4 * g * cs_b + p;
            acc[g] = _mm256_fmadd_pd(a0, _mm256_set_pd(w[3 * cs_b], w[2 * cs_b], w[cs_b], w[0]),
                                     acc[g]);
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        double *c_g = c + 4 * g * cs_c;
        if (cs_c == 1) {
            _mm256_storeu_pd(c_g, acc[g]);
        } else {
            _Alignas(32) double t[4];
            _mm256_store_pd(t, acc[g]);
            for (int j = 0; j < 4; j++)
                c_g[j * cs_c] = t[j];
        }
    }
}

static void gemm_row_wt_f64(double *c, int64_t cs_c, const double *a, int64_t cs_a,
                            const double *b, int64_t cs_b, int64_t n, int64_t k,
                            int c_holds_value)
{
    int64_t j = 0;
    for (; j + 32 <= n; j += 32)
        gemm_row_wt_f64_groups(c + j * cs_c, cs_c, a, cs_a, b + j * cs_b, cs_b, k, c_holds_value, 8);
    switch ((n - j) / 4) {   /* the remaining whole groups of 4, with as many chains */
#define GEMM_ROW_WT_CASE(G)                                                                   \
    case G:                                                                                   \
        gemm_row_wt_f64_groups(c + j * cs_c, cs_c, a, cs_a, b + j * cs_b, cs_b, k,            \
                               c_holds_value, G);                                             \
        break;
    GEMM_ROW_WT_CASE(1) GEMM_ROW_WT_CASE(2) GEMM_ROW_WT_CASE(3) GEMM_ROW_WT_CASE(4)
    GEMM_ROW_WT_CASE(5) GEMM_ROW_WT_CASE(6) GEMM_ROW_WT_CASE(7)
#undef GEMM_ROW_WT_CASE
    default:
        break;
    }
    for (j += (n - j) / 4 * 4; j < n; j++) {   /* the last columns, one chain each */
        double acc = c_holds_value ? c[j * cs_c] : 0.0;
        for (int64_t p = 0; p < k; p++)
            acc = __builtin_fma(a[p * cs_a], b[j * cs_b + p], acc);
        c[j * cs_c] = acc;
    }
}
