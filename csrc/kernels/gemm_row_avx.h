/* The float64 one-row kernel of the SIMD paths' direct GEMM loop
 * (GEMM_SMALL_ROW_WT in gemm_small_tmpl.h), built from AVX2 + FMA instructions:
 * included by gemm_avx2.c and gemm_avx512.c after their target pragma, so
 * compiled for each.  The arithmetic is the float64 contract of
 * gemm_internal.h, lane by lane: the same bits as every other route. */
#include <immintrin.h>
#include <stdint.h>

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
