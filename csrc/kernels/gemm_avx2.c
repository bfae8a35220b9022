/* AVX2 + FMA micro-kernels and direct loops for gemm (see gemm_internal.h for
 * the contract).  Compiled for AVX2 by the pragma below whatever the build
 * flags; only called when cpu.c found AVX2 and FMA usable.
 *
 * Tiles use the 16 ymm registers: 12 accumulators, the B row, and the
 * broadcast A element.
 *   f32 6 x 16: per p, B[p, 0:16] is two ymm, each A[i, p] multiplies both.
 *   f64 4 x 12: B[p, 0:12] is three ymm (7 loads per 12 FMAs instead of the
 *               8 of 6 x 8: ~5 % faster at 2048^3).
 * Same arithmetic per output as the AVX-512 kernels (float32: KC blocks summed
 * from zero by FMA in increasing p, then added onto c; float64: one FMA chain
 * continuing from c), hence the same bits.
 *
 * Each kernel reads A from a packed panel or in place from its rows
 * (kernel_rows): one body, inlined with the strides of each.
 *
 * Block sizes, as for AVX-512 (gemm_avx512.c): one or two A micro-panels at a
 * time (f32 MC = 12, f64 MC = 8) swept over a B block of KC x 1024
 * (f32, KC the summation block) or 2048 x 504 (f64).  Against A blocks sized
 * for L2 (240 / 64 rows) on Zen 4: 2048^3 f32 78 -> 83 % of peak, f64
 * 72 -> 87 %. */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdint.h>

#include "gemm_internal.h"

/* Everything below is compiled for this instruction set whatever the build's
 * flags: gcc takes a target pragma, clang the same attribute pushed onto every
 * function (it ignores the gcc pragma). */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif

#include "gemm_copy_avx.h"
#include "gemm_row_avx.h"

/* acc += A[0:6, p0:p1] @ b_panel[p0:p1][16], A[i, p] at a[i * ars + (p - p0) * acs]:
 * one FMA per term in increasing p.  acc[v][i] holds C[i, 8v:8v+8]. */
static inline __attribute__((always_inline))
void gemm_f32_avx2_6x16_fma(__m256 acc[2][6], int64_t p0, int64_t p1,
                            const float *a, int64_t ars, int64_t acs, const float *b_panel)
{
    for (int64_t p = p0; p < p1; p++) {
        const float *a_p = a + (p - p0) * acs;   /* A[0:6, p] */
        const float *b_p = b_panel + p * 16;      /* B[p, 0:16] */
        const __m256 b0 = _mm256_load_ps(b_p), b1 = _mm256_load_ps(b_p + 8);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            const __m256 a_ip = _mm256_broadcast_ss(a_p + i * ars);
            acc[0][i] = _mm256_fmadd_ps(a_ip, b0, acc[0][i]);
            acc[1][i] = _mm256_fmadd_ps(a_ip, b1, acc[1][i]);
        }
    }
}

/* c[6, 16] = (accumulate ? c : 0) + acc, acc as gemm_f32_avx2_6x16_fma's */
static inline __attribute__((always_inline))
void gemm_f32_avx2_6x16_store(__m256 acc[2][6], float *c, int64_t rs_c, int64_t cs_c,
                              int accumulate)
{
    enum { MR = 6, NR = 16 };
    if (cs_c == 1) {
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            float *c_row = c + i * rs_c;
#pragma GCC unroll 2
            for (int v = 0; v < 2; v++) {
                __m256 r = acc[v][i];
                if (accumulate)
                    r = _mm256_add_ps(_mm256_loadu_ps(c_row + 8 * v), r);
                _mm256_storeu_ps(c_row + 8 * v, r);
            }
        }
        return;
    }
    _Alignas(64) float tile[MR * NR];   /* [6, 16] */
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++)
            _mm256_store_ps(tile + i * NR + 8 * v, acc[v][i]);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float *c_ij = c + i * rs_c + j * cs_c;
            *c_ij = accumulate ? *c_ij + tile[i * NR + j] : tile[i * NR + j];
        }
}

/* c[6, 16] = (accumulate ? c : 0) + a_panel[kc][6]^T @ b_panel[kc][16] */
static void gemm_f32_avx2_kernel_6x16(int64_t kc, const float *a_panel, const float *b_panel,
                                      float *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    __m256 acc[2][6];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++)
        acc[0][i] = acc[1][i] = _mm256_setzero_ps();
    gemm_f32_avx2_6x16_fma(acc, 0, kc, a_panel, 1, 6, b_panel);
    gemm_f32_avx2_6x16_store(acc, c, rs_c, cs_c, accumulate);
}

/* the same with A read in place: columns [0, k1) from rows of a1, [k1, kc) of a2 */
static void gemm_f32_avx2_kernel_rows_6x16(int64_t kc, const float *a1, int64_t rs_a1,
                                           int64_t k1, const float *a2, int64_t rs_a2,
                                           const float *b_panel, float *c, int64_t rs_c,
                                           int64_t cs_c, int accumulate)
{
    __m256 acc[2][6];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++)
        acc[0][i] = acc[1][i] = _mm256_setzero_ps();
    gemm_f32_avx2_6x16_fma(acc, 0, k1, a1, rs_a1, 1, b_panel);
    gemm_f32_avx2_6x16_fma(acc, k1, kc, a2, rs_a2, 1, b_panel);
    gemm_f32_avx2_6x16_store(acc, c, rs_c, cs_c, accumulate);
}

/* acc += A[0:4, p0:p1] @ b_panel[p0:p1][12], A[i, p] at a[i * ars + (p - p0) * acs]:
 * one FMA per term in increasing p.  acc[v][i] holds C[i, 4v:4v+4]. */
static inline __attribute__((always_inline))
void gemm_f64_avx2_4x12_fma(__m256d acc[3][4], int64_t p0, int64_t p1,
                            const double *a, int64_t ars, int64_t acs, const double *b_panel)
{
    for (int64_t p = p0; p < p1; p++) {
        const double *a_p = a + (p - p0) * acs;   /* A[0:4, p] */
        const double *b_p = b_panel + p * 12;      /* B[p, 0:12] */
        const __m256d b0 = _mm256_loadu_pd(b_p), b1 = _mm256_loadu_pd(b_p + 4);
        const __m256d b2 = _mm256_loadu_pd(b_p + 8);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m256d a_ip = _mm256_broadcast_sd(a_p + i * ars);
            acc[0][i] = _mm256_fmadd_pd(a_ip, b0, acc[0][i]);
            acc[1][i] = _mm256_fmadd_pd(a_ip, b1, acc[1][i]);
            acc[2][i] = _mm256_fmadd_pd(a_ip, b2, acc[2][i]);
        }
    }
}

/* acc = accumulate ? c[4, 12] : 0: where the float64 chain starts (gemm_internal.h) */
static inline __attribute__((always_inline))
void gemm_f64_avx2_4x12_load(__m256d acc[3][4], const double *c, int64_t rs_c, int64_t cs_c,
                             int accumulate)
{
    enum { MR = 4, NR = 12 };
    _Alignas(64) double tile[MR * NR];
    if (!accumulate) {
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            acc[0][i] = acc[1][i] = acc[2][i] = _mm256_setzero_pd();
        return;
    }
    const double *src = c;
    int64_t rs = rs_c;
    if (cs_c != 1) {
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                tile[i * NR + j] = c[i * rs_c + j * cs_c];
        src = tile;
        rs = NR;
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++)
            acc[v][i] = _mm256_loadu_pd(src + i * rs + 4 * v);
}

/* c[4, 12] = acc */
static inline __attribute__((always_inline))
void gemm_f64_avx2_4x12_store(__m256d acc[3][4], double *c, int64_t rs_c, int64_t cs_c)
{
    enum { MR = 4, NR = 12 };
    if (cs_c == 1) {
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
            for (int v = 0; v < 3; v++)
                _mm256_storeu_pd(c + i * rs_c + 4 * v, acc[v][i]);
        return;
    }
    _Alignas(64) double tile[MR * NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++)
            _mm256_store_pd(tile + i * NR + 4 * v, acc[v][i]);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            c[i * rs_c + j * cs_c] = tile[i * NR + j];
}

/* c[4, 12] = (accumulate ? c : 0) + a_panel[kc][4]^T @ b_panel[kc][12], one FMA
 * chain per output continuing from c (the float64 contract, gemm_internal.h) */
static void gemm_f64_avx2_kernel_4x12(int64_t kc, const double *a_panel, const double *b_panel,
                                      double *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    __m256d acc[3][4];
    gemm_f64_avx2_4x12_load(acc, c, rs_c, cs_c, accumulate);
    gemm_f64_avx2_4x12_fma(acc, 0, kc, a_panel, 1, 4, b_panel);
    gemm_f64_avx2_4x12_store(acc, c, rs_c, cs_c);
}

/* the same with A read in place: columns [0, k1) from rows of a1, [k1, kc) of a2 */
static void gemm_f64_avx2_kernel_rows_4x12(int64_t kc, const double *a1, int64_t rs_a1,
                                           int64_t k1, const double *a2, int64_t rs_a2,
                                           const double *b_panel, double *c, int64_t rs_c,
                                           int64_t cs_c, int accumulate)
{
    __m256d acc[3][4];
    gemm_f64_avx2_4x12_load(acc, c, rs_c, cs_c, accumulate);
    gemm_f64_avx2_4x12_fma(acc, 0, k1, a1, rs_a1, 1, b_panel);
    gemm_f64_avx2_4x12_fma(acc, k1, kc, a2, rs_a2, 1, b_panel);
    gemm_f64_avx2_4x12_store(acc, c, rs_c, cs_c);
}

/* The direct loops, with FMA (vectorised over up to four vector registers of columns). */
#define T float
#define GEMM_MADD(s, x, y) __builtin_fmaf((x), (y), (s))
#define GEMM_SMALL_V __m256
#define GEMM_SMALL_VLEN 8
#define GEMM_SMALL_VLOADU(p) _mm256_loadu_ps(p)
#define GEMM_SMALL_VSTOREU(p, v) _mm256_storeu_ps((p), (v))
#define GEMM_SMALL_VSET1(x) _mm256_set1_ps(x)
#define GEMM_SMALL_VFMA(x, y, s) _mm256_fmadd_ps((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f32
#define GEMM_SMALL_ROW_WT gemm_row_wt_f32
#define GEMM_SMALL_COLS 32
#define GEMM_SMALL_NAME gemm_f32_avx2_small
#include "gemm_small_tmpl.h"
#define T double
#define GEMM_MADD(s, x, y) __builtin_fma((x), (y), (s))
#define GEMM_SMALL_V __m256d
#define GEMM_SMALL_VLEN 4
#define GEMM_SMALL_VLOADU(p) _mm256_loadu_pd(p)
#define GEMM_SMALL_VSTOREU(p, v) _mm256_storeu_pd((p), (v))
#define GEMM_SMALL_VSET1(x) _mm256_set1_pd(x)
#define GEMM_SMALL_VFMA(x, y, s) _mm256_fmadd_pd((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f64
#define GEMM_SMALL_ROW_WT gemm_row_wt_f64
#define GEMM_SMALL_COLS 16
#define GEMM_SMALL_NAME gemm_f64_avx2_small
#include "gemm_small_tmpl.h"

const gemm_microkernel_f32 gemm_microkernel_f32_avx2 = {
    "avx2", 6, 16, 12, 64, 1024, gemm_f32_avx2_kernel_6x16, gemm_f32_avx2_small, gemm_copy_t_f32, NULL,
    gemm_f32_avx2_kernel_rows_6x16,
};

const gemm_microkernel_f64 gemm_microkernel_f64_avx2 = {
    "avx2", 4, 12, 8, 2048, 504, gemm_f64_avx2_kernel_4x12, gemm_f64_avx2_small, gemm_copy_t_f64, NULL,
    gemm_f64_avx2_kernel_rows_4x12,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
