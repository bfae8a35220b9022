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
 * Block sizes, as for AVX-512 (gemm_avx512.c): A packed one or two micro-panels
 * at a time (f32 MC = 12, f64 MC = 8) and swept over a B block of KC x 1024
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

/* c[6, 16] = (accumulate ? c : 0) + a_panel[kc][6]^T @ b_panel[kc][16] */
static void gemm_f32_avx2_kernel_6x16(int64_t kc, const float *a_panel, const float *b_panel,
                                      float *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = 6, NR = 16 };
    __m256 acc0[MR], acc1[MR];   /* C[i, 0:8], C[i, 8:16] */
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        acc0[i] = acc1[i] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        const float *a_p = a_panel + p * MR;   /* A[0:6, p] */
        const float *b_p = b_panel + p * NR;   /* B[p, 0:16] */
        const __m256 b0 = _mm256_load_ps(b_p), b1 = _mm256_load_ps(b_p + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256 a_ip = _mm256_broadcast_ss(a_p + i);
            acc0[i] = _mm256_fmadd_ps(a_ip, b0, acc0[i]);
            acc1[i] = _mm256_fmadd_ps(a_ip, b1, acc1[i]);
        }
    }
    if (cs_c == 1) {
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            float *c_row = c + i * rs_c;
            if (accumulate) {
                acc0[i] = _mm256_add_ps(_mm256_loadu_ps(c_row), acc0[i]);
                acc1[i] = _mm256_add_ps(_mm256_loadu_ps(c_row + 8), acc1[i]);
            }
            _mm256_storeu_ps(c_row, acc0[i]);
            _mm256_storeu_ps(c_row + 8, acc1[i]);
        }
        return;
    }
    _Alignas(64) float tile[MR * NR];   /* [6, 16] */
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        _mm256_store_ps(tile + i * NR, acc0[i]);
        _mm256_store_ps(tile + i * NR + 8, acc1[i]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float *c_ij = c + i * rs_c + j * cs_c;
            *c_ij = accumulate ? *c_ij + tile[i * NR + j] : tile[i * NR + j];
        }
}

/* c[4, 12] = (accumulate ? c : 0) + a_panel[kc][4]^T @ b_panel[kc][12], one FMA
 * chain per output continuing from c (the float64 contract, gemm_internal.h) */
static void gemm_f64_avx2_kernel_4x12(int64_t kc, const double *a_panel, const double *b_panel,
                                      double *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = 4, NR = 12 };
    __m256d acc0[MR], acc1[MR], acc2[MR];   /* C[i, 0:4], C[i, 4:8], C[i, 8:12] */
    _Alignas(64) double tile[MR * NR];   /* [4, 12] */
    if (!accumulate) {
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            acc0[i] = acc1[i] = acc2[i] = _mm256_setzero_pd();
    } else {   /* the chain continues from c */
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
        for (int i = 0; i < MR; i++) {
            acc0[i] = _mm256_loadu_pd(src + i * rs);
            acc1[i] = _mm256_loadu_pd(src + i * rs + 4);
            acc2[i] = _mm256_loadu_pd(src + i * rs + 8);
        }
    }
    for (int64_t p = 0; p < kc; p++) {
        const double *a_p = a_panel + p * MR;   /* A[0:4, p] */
        const double *b_p = b_panel + p * NR;   /* B[p, 0:12] */
        const __m256d b0 = _mm256_loadu_pd(b_p), b1 = _mm256_loadu_pd(b_p + 4);
        const __m256d b2 = _mm256_loadu_pd(b_p + 8);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            const __m256d a_ip = _mm256_broadcast_sd(a_p + i);
            acc0[i] = _mm256_fmadd_pd(a_ip, b0, acc0[i]);
            acc1[i] = _mm256_fmadd_pd(a_ip, b1, acc1[i]);
            acc2[i] = _mm256_fmadd_pd(a_ip, b2, acc2[i]);
        }
    }
    if (cs_c == 1) {
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            double *c_row = c + i * rs_c;
            _mm256_storeu_pd(c_row, acc0[i]);
            _mm256_storeu_pd(c_row + 4, acc1[i]);
            _mm256_storeu_pd(c_row + 8, acc2[i]);
        }
        return;
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
        _mm256_store_pd(tile + i * NR, acc0[i]);
        _mm256_store_pd(tile + i * NR + 4, acc1[i]);
        _mm256_store_pd(tile + i * NR + 8, acc2[i]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            c[i * rs_c + j * cs_c] = tile[i * NR + j];
        }
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
};

const gemm_microkernel_f64 gemm_microkernel_f64_avx2 = {
    "avx2", 4, 12, 8, 2048, 504, gemm_f64_avx2_kernel_4x12, gemm_f64_avx2_small, gemm_copy_t_f64, NULL,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
