/* The few-rows kernels of the SIMD paths' direct GEMM loop against a weight^T
 * (GEMM_SMALL_ROWS_WT in gemm_small_tmpl.h), built from AVX2 + FMA
 * instructions: included by gemm_avx2.c and gemm_avx512.c after
 * MYATT_TARGET_PUSH, so compiled for each (gemm_avx512.c runs its own 16- and
 * 8-row zmm kernels first and these for the last columns).  The arithmetic is
 * the contract of gemm_internal.h, lane by lane: the same bits as every other
 * route. */
#include <immintrin.h>
#include <stdint.h>

/* Whether `rows` consecutive rows of W, row_bytes apart, read at the same
 * column, fit an 8-way L1 of 4 KiB a way (Zen 4's; Zen 5's has 12): rows a
 * multiple of 64 bytes apart return to the same set every 4096 / (the largest
 * power of two dividing row_bytes) rows.  More than 8 in one set evicted each
 * other's lines before the group had read them: on Zen 4, two groups of 8
 * float64 rows 4 KiB apart ran at half the speed of one, from L1, L2 and memory
 * alike (1 x 512 @ 512 x 64: 10.5 -> 5.5 us; 512 x 1536: 260 -> 127 us). */
static inline int gemm_rows_fit_l1_sets(int64_t row_bytes, int rows)
{
    int64_t pow2 = row_bytes & -row_bytes;   /* the largest power of two dividing it */
    if (pow2 < 64)
        pow2 = 64;
    if (pow2 > 4096)
        pow2 = 4096;
    const int64_t period = 4096 / pow2;      /* rows between two in the same set */
    return (rows + period - 1) / period <= 8;
}

/* W[0:8, 0:4] (w, rows cs_b apart) transposed: o[q] = W[0:8, q], rows j and
 * j + 4 in the two 128-bit lanes, a 4 x 4 transpose in each. */
static inline __attribute__((always_inline))
void gemm_wt_f32_t4(const float *w, int64_t cs_b, __m256 o[4])
{
    const __m256 r04 = _mm256_loadu2_m128(w + 4 * cs_b, w);   /* rows 0 | 4 */
    const __m256 r15 = _mm256_loadu2_m128(w + 5 * cs_b, w + cs_b);
    const __m256 r26 = _mm256_loadu2_m128(w + 6 * cs_b, w + 2 * cs_b);
    const __m256 r37 = _mm256_loadu2_m128(w + 7 * cs_b, w + 3 * cs_b);
    const __m256 t0 = _mm256_unpacklo_ps(r04, r15), t1 = _mm256_unpackhi_ps(r04, r15);
    const __m256 t2 = _mm256_unpacklo_ps(r26, r37), t3 = _mm256_unpackhi_ps(r26, r37);
    o[0] = _mm256_shuffle_ps(t0, t2, 0x44);
    o[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
    o[2] = _mm256_shuffle_ps(t1, t3, 0x44);
    o[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}

/* R rows of c against B = weight^T (rs_b == 1), float32, the transpose done
 * in registers instead of through a strip: for r < R, j < 8 G, each block of
 * kc terms
 *   s = chain over p in the block of fma(a[r * rs_a + p * cs_a], b[j * cs_b + p], .) from 0
 * then c[r * rs_c + j * cs_c] = s for the first block (unless c_holds_value),
 * else c[...] + s: the float32 contract (gemm_internal.h).  G groups of 8
 * columns advance side by side, 4 terms a step (gemm_wt_f32_t4), each
 * transposed block serving all R rows (R x G independent chains; the shuffles
 * are most of the work).  The seed's float32 module spent 60 % of its GEMM
 * time building strips the old way. */
static inline __attribute__((always_inline))
void gemm_rows_wt_f32_groups(float *c, int64_t rs_c, int64_t cs_c, const float *a,
                             int64_t rs_a, int64_t cs_a, const float *b, int64_t cs_b, int64_t k,
                             int64_t kc, int c_holds_value, const int G, const int R,
                             const int line_visits)
{
    for (int64_t p0 = 0; p0 < k; p0 += kc) {
        const int64_t p1 = k - p0 < kc ? k : p0 + kc;   /* the block [p0, p1) */
        __m256 acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int g = 0; g < G; g++)
                acc[r][g] = _mm256_setzero_ps();
        int64_t p = p0;
        /* The loop after this one takes 4 terms of all 32 rows a step, the G chains side
         * by side.  Rows a multiple of 1 KiB apart (k = 256, 512, ...) fall in 4 or fewer
         * sets of L1 (8-way, 4 KiB a way), so there every line was fetched again for each
         * of its 4 steps (1 x 512 @ 512 x 1536 ran at 6 GFLOP/s).  For such rows each
         * group takes 16 terms, a cache line of each of its rows, per visit instead:
         * 10-11 GFLOP/s, though its 16 FMAs are one chain (k = 520: 17 the other way). */
        for (; line_visits && p + 16 <= p1; p += 16) {
#pragma GCC unroll 4
            for (int g = 0; g < G; g++)
#pragma GCC unroll 4
                for (int64_t q = p; q < p + 16; q += 4) {
                    __m256 o[4];
                    gemm_wt_f32_t4(b + 8 * g * cs_b + q, cs_b, o);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                        for (int t = 0; t < 4; t++)
                            acc[r][g] = _mm256_fmadd_ps(
                                _mm256_set1_ps(a[r * rs_a + (q + t) * cs_a]), o[t], acc[r][g]);
                }
        }
        for (; p + 4 <= p1; p += 4) {
            __m256 av[4][4];   /* the 4 terms of each row, broadcast */
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++)
                    av[r][t] = _mm256_set1_ps(a[r * rs_a + (p + t) * cs_a]);
            const float *w = b + p;   /* W[8g:8g+8, p:p+4] */
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                __m256 o[4];
                gemm_wt_f32_t4(w, cs_b, o);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++)
                        acc[r][g] = _mm256_fmadd_ps(av[r][t], o[t], acc[r][g]);
                w += 8 * cs_b;
                __asm__("" : "+r"(w));   /* as in gemm_rows_wt_f64_groups */
            }
        }
        for (; p < p1; p++) {   /* the block's last terms, one at a time */
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                const float *w = b + 8 * g * cs_b + p;
                const __m256 wv = _mm256_set_ps(w[7 * cs_b], w[6 * cs_b], w[5 * cs_b], w[4 * cs_b],
                                                w[3 * cs_b], w[2 * cs_b], w[cs_b], w[0]);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    acc[r][g] = _mm256_fmadd_ps(_mm256_set1_ps(a[r * rs_a + p * cs_a]), wv,
                                                acc[r][g]);
            }
        }
        const int onto_c = c_holds_value || p0 > 0;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                float *c_g = c + r * rs_c + 8 * g * cs_c;
                if (cs_c == 1) {
                    _mm256_storeu_ps(c_g, onto_c ? _mm256_add_ps(_mm256_loadu_ps(c_g), acc[r][g])
                                                 : acc[r][g]);
                } else {
                    _Alignas(32) float t[8];
                    _mm256_store_ps(t, acc[r][g]);
                    for (int j = 0; j < 8; j++)
                        c_g[j * cs_c] = onto_c ? c_g[j * cs_c] + t[j] : t[j];
                }
            }
    }
}

/* gemm_rows_wt_f32_groups over all n columns: as many groups side by side as
 * keep R x G <= 4 (16 ymm registers) and fit L1's sets, then the remaining whole
 * groups of 8 with as many chains, then the last columns one chain each. */
static inline __attribute__((always_inline))
void gemm_rows_wt_f32(float *c, int64_t rs_c, int64_t cs_c, const float *a, int64_t rs_a,
                      int64_t cs_a, const float *b, int64_t cs_b, int64_t n, int64_t k,
                      int64_t kc, int c_holds_value, const int R)
{
#define GEMM_ROWS_WT_F32(G, LV)                                                                \
    gemm_rows_wt_f32_groups(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b, cs_b, k, kc, \
                            c_holds_value, G, R, LV)
    int64_t j = 0;
    const int64_t row_bytes = cs_b * (int64_t)sizeof(float);
    const int lv = row_bytes % 1024 == 0;   /* line visits: see the groups */
    if (R == 1 && gemm_rows_fit_l1_sets(row_bytes, 32))
        for (; j + 32 <= n; j += 32)
            GEMM_ROWS_WT_F32(4, lv);
    else if (R <= 2 && gemm_rows_fit_l1_sets(row_bytes, 16))
        for (; j + 16 <= n; j += 16)
            GEMM_ROWS_WT_F32(2, lv);
    else
        for (; j + 8 <= n; j += 8)
            GEMM_ROWS_WT_F32(1, lv);
    /* the remaining whole groups of 8 (fewer than the loop's G: the guards only keep
     * variants that cannot run from being compiled), with as many chains */
    switch ((n - j) / 8) {
    case 1:
        GEMM_ROWS_WT_F32(1, 0);
        break;
    case 2:
        if (R <= 2)
            GEMM_ROWS_WT_F32(2, 0);
        break;
    case 3:
        if (R == 1)
            GEMM_ROWS_WT_F32(3, 0);
        break;
    default:
        break;
    }
#undef GEMM_ROWS_WT_F32
    for (j += (n - j) / 8 * 8; j < n; j++)   /* the last columns, one chain each per block */
        for (int r = 0; r < R; r++)
            for (int64_t p0 = 0; p0 < k; p0 += kc) {
                const int64_t p1 = k - p0 < kc ? k : p0 + kc;
                float s = 0.0f;
                for (int64_t p = p0; p < p1; p++)
                    s = __builtin_fmaf(a[r * rs_a + p * cs_a], b[j * cs_b + p], s);
                float *c_rj = c + r * rs_c + j * cs_c;
                *c_rj = c_holds_value || p0 > 0 ? *c_rj + s : s;
            }
}

/* W[0:4, 0:2] (w, rows cs_b apart) transposed: o[q] = W[0:4, q] */
static inline __attribute__((always_inline))
void gemm_wt_f64_t2(const double *w, int64_t cs_b, __m256d o[2])
{
    const __m256d r02 = _mm256_blend_pd(_mm256_broadcast_pd((const __m128d *)w),
                                        _mm256_broadcast_pd((const __m128d *)(w + 2 * cs_b)), 0xC);
    const __m256d r13 = _mm256_blend_pd(_mm256_broadcast_pd((const __m128d *)(w + cs_b)),
                                        _mm256_broadcast_pd((const __m128d *)(w + 3 * cs_b)), 0xC);
    o[0] = _mm256_unpacklo_pd(r02, r13);
    o[1] = _mm256_unpackhi_pd(r02, r13);
}

/* R rows of c against B = weight^T (rs_b == 1), float64, the transpose done
 * in registers instead of through a strip: for r < R, j < 4 G,
 *   c[r * rs_c + j * cs_c] = chain over p < k of fma(a[r * rs_a + p * cs_a], b[j * cs_b + p], .)
 * from c[...] (c_holds_value) or 0: the arithmetic of the float64 contract
 * (gemm_internal.h), so the same bits as every other route.  G groups of 4
 * columns advance side by side, each transposed block serving all R rows (R x
 * G chains a step: one chain alone waits on the FMA latency).  For the seed's
 * one-row products the strip copy cost more than the products: the seed's
 * float64 module ran in 1.6-1.7 us through strips, 1.30 us this way. */
static inline __attribute__((always_inline))
void gemm_rows_wt_f64_groups(double *c, int64_t rs_c, int64_t cs_c, const double *a,
                             int64_t rs_a, int64_t cs_a, const double *b, int64_t cs_b,
                             int64_t k, int c_holds_value, const int G, const int R,
                             const int line_visits)
{
    __m256d acc[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            const double *c_g = c + r * rs_c + 4 * g * cs_c;
            acc[r][g] = !c_holds_value ? _mm256_setzero_pd()
                        : cs_c == 1    ? _mm256_loadu_pd(c_g)
                                       : _mm256_set_pd(c_g[3 * cs_c], c_g[2 * cs_c], c_g[cs_c],
                                                       c_g[0]);
        }
    int64_t p = 0;
    /* 8 terms (a cache line of each row) per visit of a group where the rows are a
     * multiple of 1 KiB apart: see gemm_rows_wt_f32_groups (4 KiB rows put all 32 in one
     * set: 1 x 512 @ 512 x 1536 ran at 1.7 GFLOP/s, 4.5 this way). */
    for (; line_visits && p + 8 <= k; p += 8) {
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int64_t q = p; q < p + 8; q += 2) {
                __m256d o[2];
                gemm_wt_f64_t2(b + 4 * g * cs_b + q, cs_b, o);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
#pragma GCC unroll 2
                    for (int t = 0; t < 2; t++)
                        acc[r][g] = _mm256_fmadd_pd(_mm256_set1_pd(a[r * rs_a + (q + t) * cs_a]),
                                                    o[t], acc[r][g]);
            }
    }
    for (; p + 2 <= k; p += 2) {
        __m256d av[4][2];   /* the 2 terms of each row, broadcast */
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 2
            for (int t = 0; t < 2; t++)
                av[r][t] = _mm256_set1_pd(a[r * rs_a + (p + t) * cs_a]);
        const double *w = b + p;   /* W[4g:4g+4, p:p+2] */
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            __m256d o[2];
            gemm_wt_f64_t2(w, cs_b, o);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
#pragma GCC unroll 2
                for (int t = 0; t < 2; t++)
                    acc[r][g] = _mm256_fmadd_pd(av[r][t], o[t], acc[r][g]);
            w += 4 * cs_b;
            /* an opaque step: else GCC keeps all 4G row offsets, spilled to the
             * stack and reloaded before every load: 1.4x slower) */
            __asm__("" : "+r"(w));
        }
    }
    if (p < k) {
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            const double *w = b + 4 * g * cs_b + p;
            const __m256d wv = _mm256_set_pd(w[3 * cs_b], w[2 * cs_b], w[cs_b], w[0]);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][g] = _mm256_fmadd_pd(_mm256_set1_pd(a[r * rs_a + p * cs_a]), wv, acc[r][g]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            double *c_g = c + r * rs_c + 4 * g * cs_c;
            if (cs_c == 1) {
                _mm256_storeu_pd(c_g, acc[r][g]);
            } else {
                _Alignas(32) double t[4];
                _mm256_store_pd(t, acc[r][g]);
                for (int j = 0; j < 4; j++)
                    c_g[j * cs_c] = t[j];
            }
        }
}

/* gemm_rows_wt_f64_groups over all n columns (kc: unused, float64 has no
 * summation blocks; the same signature as float32's): as many groups side by
 * side as keep R x G <= 8 and fit L1's sets, then the remaining whole groups of
 * 4 with as many chains, then the last columns one chain each. */
static inline __attribute__((always_inline))
void gemm_rows_wt_f64(double *c, int64_t rs_c, int64_t cs_c, const double *a, int64_t rs_a,
                      int64_t cs_a, const double *b, int64_t cs_b, int64_t n, int64_t k,
                      int64_t kc, int c_holds_value, const int R)
{
#define GEMM_ROWS_WT_F64(G, LV)                                                                \
    gemm_rows_wt_f64_groups(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b, cs_b, k,     \
                            c_holds_value, G, R, LV)
    (void)kc;
    const int GMAX = 8 / R;   /* groups side by side: 8, 4, 2, 2 (a constant inlined) */
    int64_t j = 0;
    const int64_t row_bytes = cs_b * (int64_t)sizeof(double);
    const int lv = row_bytes % 1024 == 0;   /* line visits: see the groups */
    if (GMAX >= 8 && gemm_rows_fit_l1_sets(row_bytes, 32))
        for (; j + 32 <= n; j += 32)
            GEMM_ROWS_WT_F64(8, lv);
    else if (GMAX >= 4 && gemm_rows_fit_l1_sets(row_bytes, 16))
        for (; j + 16 <= n; j += 16)
            GEMM_ROWS_WT_F64(4, lv);
    else
        for (; j + 8 <= n; j += 8)
            GEMM_ROWS_WT_F64(2, lv);
    switch ((n - j) / 4) {   /* the remaining whole groups of 4 (as float32's) */
#define GEMM_ROWS_WT_CASE(G)                                                                   \
    case G:                                                                                    \
        if (G <= GMAX)                                                                         \
            GEMM_ROWS_WT_F64(G, 0);                                                            \
        break;
    GEMM_ROWS_WT_CASE(1) GEMM_ROWS_WT_CASE(2) GEMM_ROWS_WT_CASE(3) GEMM_ROWS_WT_CASE(4)
    GEMM_ROWS_WT_CASE(5) GEMM_ROWS_WT_CASE(6) GEMM_ROWS_WT_CASE(7)
#undef GEMM_ROWS_WT_CASE
    default:
        break;
    }
#undef GEMM_ROWS_WT_F64
    for (j += (n - j) / 4 * 4; j < n; j++)   /* the last columns, one chain each */
        for (int r = 0; r < R; r++) {
            double *c_rj = c + r * rs_c + j * cs_c;
            double acc = c_holds_value ? *c_rj : 0.0;
            for (int64_t p = 0; p < k; p++)
                acc = __builtin_fma(a[r * rs_a + p * cs_a], b[j * cs_b + p], acc);
            *c_rj = acc;
        }
}

/* GEMM_SMALL_ROWS_WT: m (1 to GEMM_SMALL_ROWS_WT_MAX = 4) rows against B =
 * weight^T, m the constant R of body (float32 and float64 alike), ATTR the
 * function's attributes. */
#define GEMM_ROWS_WT_FN(T, NAME, BODY, ATTR)                                               \
    static ATTR                                                                             \
    void NAME(T *c, int64_t rs_c, int64_t cs_c, const T *a, int64_t rs_a, int64_t cs_a,    \
              const T *b, int64_t cs_b, int64_t m, int64_t n, int64_t k, int64_t kc,       \
              int c_holds_value)                                                            \
    {                                                                                       \
        switch (m) {                                                                        \
        case 1: BODY(c, rs_c, cs_c, a, rs_a, cs_a, b, cs_b, n, k, kc, c_holds_value, 1); break; \
        case 2: BODY(c, rs_c, cs_c, a, rs_a, cs_a, b, cs_b, n, k, kc, c_holds_value, 2); break; \
        case 3: BODY(c, rs_c, cs_c, a, rs_a, cs_a, b, cs_b, n, k, kc, c_holds_value, 3); break; \
        default: BODY(c, rs_c, cs_c, a, rs_a, cs_a, b, cs_b, n, k, kc, c_holds_value, 4);     \
        }                                                                                   \
    }
