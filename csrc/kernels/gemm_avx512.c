/* AVX-512 micro-kernels (F + VL, FMA) and direct loops for gemm (see
 * gemm_internal.h for the contract).  Compiled for AVX-512 by the pragma below
 * whatever the build flags; only called when cpu.c found AVX-512 usable.
 *
 * Tiles use the 32 zmm registers: 24 accumulators, 3 for the B row and one
 * for the broadcast A element.
 *   f32 8 x 48: per p, B[p, 0:48] is three zmm, each A[i, p] multiplies all three.
 *   f64 8 x 24: the same with 8 doubles per zmm.
 * (8 x 3 vectors beat 12 x 2 by 5-15 % at 2048^3: 11 loads per 24 FMAs
 * instead of 14.)  float32: each accumulator sums its KC block from zero in
 * increasing p with one FMA per term, then is added onto c (or stored);
 * float64: the accumulators start from c (or 0) and continue one FMA chain:
 * the summation contract of gemm_internal.h (torch's order).  The AVX2 and
 * portable kernels do exactly the same arithmetic per output, so every path
 * gives the same bits.
 *
 * Block sizes (Zen 4 / Skylake-SP class: 32-48 KiB L1d, 1-2 MiB L2): one A
 * micro-panel (MC = MR = 8 rows) packed at a time and swept over the whole
 * B block, which streams from L2 (f32: KC x NC = 192 x 1056, 792 KiB) or L3
 * (f64: 2048 x 504, 8 MiB; its KC is free: c is then loaded and stored once
 * per 2048 terms).  Measured on Zen 4 against A blocks sized for L2 (f32
 * 240 x 192, f64 64 x 384): 2048^3 f32 85 -> 88 % of peak, f64 80 -> 88-90 %. */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdint.h>

#include "gemm_internal.h"

/* Everything below is compiled for this instruction set whatever the build's
 * flags: gcc takes a target pragma, clang the same attribute pushed onto every
 * function (it ignores the gcc pragma). */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,fma"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512vl,fma")
#endif

#include "gemm_copy_avx.h"
#include "gemm_row_avx.h"

/* c[8, 24] = (accumulate ? c : 0) + a_panel[kc][8]^T @ b_panel[kc][24], one FMA
 * chain per output continuing from c (the float64 contract, gemm_internal.h) */
static void gemm_f64_avx512_kernel_8x24(int64_t kc, const double *a_panel, const double *b_panel,
                                        double *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = 8, NR = 24 };
    __m512d acc0[MR], acc1[MR], acc2[MR];   /* C[i, 0:8], C[i, 8:16], C[i, 16:24] */
    _Alignas(64) double tile[MR * NR];
    if (!accumulate) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++)
            acc0[i] = acc1[i] = acc2[i] = _mm512_setzero_pd();
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
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            acc0[i] = _mm512_loadu_pd(src + i * rs);
            acc1[i] = _mm512_loadu_pd(src + i * rs + 8);
            acc2[i] = _mm512_loadu_pd(src + i * rs + 16);
        }
    }
    for (int64_t p = 0; p < kc; p++) {
        const double *a_p = a_panel + p * MR;
        const double *b_p = b_panel + p * NR;
        const __m512d b0 = _mm512_loadu_pd(b_p), b1 = _mm512_loadu_pd(b_p + 8);
        const __m512d b2 = _mm512_loadu_pd(b_p + 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512d a_ip = _mm512_set1_pd(a_p[i]);
            acc0[i] = _mm512_fmadd_pd(a_ip, b0, acc0[i]);
            acc1[i] = _mm512_fmadd_pd(a_ip, b1, acc1[i]);
            acc2[i] = _mm512_fmadd_pd(a_ip, b2, acc2[i]);
        }
    }
    if (cs_c == 1) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            double *c_row = c + i * rs_c;
            _mm512_storeu_pd(c_row, acc0[i]);
            _mm512_storeu_pd(c_row + 8, acc1[i]);
            _mm512_storeu_pd(c_row + 16, acc2[i]);
        }
        return;
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        _mm512_store_pd(tile + i * NR, acc0[i]);
        _mm512_store_pd(tile + i * NR + 8, acc1[i]);
        _mm512_store_pd(tile + i * NR + 16, acc2[i]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            c[i * rs_c + j * cs_c] = tile[i * NR + j];
        }
}

/* c[8, 48] = (accumulate ? c : 0) + a_panel[kc][8]^T @ b_panel[kc][48] */
static void gemm_f32_avx512_kernel_8x48(int64_t kc, const float *a_panel, const float *b_panel,
                                        float *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = 8, NR = 48 };
    __m512 acc0[MR], acc1[MR], acc2[MR];   /* C[i, 0:16], C[i, 16:32], C[i, 32:48] */
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
        acc0[i] = acc1[i] = acc2[i] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        const float *a_p = a_panel + p * MR;   /* A[0:8, p] */
        const float *b_p = b_panel + p * NR;   /* B[p, 0:48] */
        const __m512 b0 = _mm512_load_ps(b_p), b1 = _mm512_load_ps(b_p + 16);
        const __m512 b2 = _mm512_load_ps(b_p + 32);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512 a_ip = _mm512_set1_ps(a_p[i]);
            acc0[i] = _mm512_fmadd_ps(a_ip, b0, acc0[i]);
            acc1[i] = _mm512_fmadd_ps(a_ip, b1, acc1[i]);
            acc2[i] = _mm512_fmadd_ps(a_ip, b2, acc2[i]);
        }
    }
    if (cs_c == 1) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            float *c_row = c + i * rs_c;
            if (accumulate) {
                acc0[i] = _mm512_add_ps(_mm512_loadu_ps(c_row), acc0[i]);
                acc1[i] = _mm512_add_ps(_mm512_loadu_ps(c_row + 16), acc1[i]);
                acc2[i] = _mm512_add_ps(_mm512_loadu_ps(c_row + 32), acc2[i]);
            }
            _mm512_storeu_ps(c_row, acc0[i]);
            _mm512_storeu_ps(c_row + 16, acc1[i]);
            _mm512_storeu_ps(c_row + 32, acc2[i]);
        }
        return;
    }
    _Alignas(64) float tile[MR * NR];   /* [8, 48] */
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        _mm512_store_ps(tile + i * NR, acc0[i]);
        _mm512_store_ps(tile + i * NR + 16, acc1[i]);
        _mm512_store_ps(tile + i * NR + 32, acc2[i]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float *c_ij = c + i * rs_c + j * cs_c;
            *c_ij = accumulate ? *c_ij + tile[i * NR + j] : tile[i * NR + j];
        }
}

/* Edge tiles (gemm_edge_f32_fn / _f64_fn): NV = the vectors of columns that
 * hold valid ones (a constant in each inlined copy), masked loads and stores
 * of the valid columns, rows past m_r not stored.  Per output the same FMA
 * sequence as the full kernels, so the same bits. */
static inline __attribute__((always_inline))
void gemm_f32_avx512_edge_nv(int NV, int64_t kc, const float *a_panel, const float *b_panel,
                             float *c, int64_t rs_c, int accumulate, int m_r, int n_r)
{
    enum { MR = 8, NR = 48 };
    __m512 acc[MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++)
            acc[i][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        const float *a_p = a_panel + p * MR;
        const float *b_p = b_panel + p * NR;
        __m512 bv[3];
        for (int v = 0; v < NV; v++)
            bv[v] = _mm512_load_ps(b_p + 16 * v);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512 a_ip = _mm512_set1_ps(a_p[i]);
            for (int v = 0; v < NV; v++)
                acc[i][v] = _mm512_fmadd_ps(a_ip, bv[v], acc[i][v]);
        }
    }
    __mmask16 mask[3];
    for (int v = 0; v < NV; v++) {
        const int cols = n_r - 16 * v;
        mask[v] = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1u);
    }
    for (int i = 0; i < m_r; i++) {
        float *c_row = c + i * rs_c;
        for (int v = 0; v < NV; v++) {
            __m512 r = acc[i][v];
            if (accumulate)
                r = _mm512_add_ps(_mm512_maskz_loadu_ps(mask[v], c_row + 16 * v), r);
            _mm512_mask_storeu_ps(c_row + 16 * v, mask[v], r);
        }
    }
}

static void gemm_f32_avx512_edge(int64_t kc, const float *a_panel, const float *b_panel,
                                 float *c, int64_t rs_c, int accumulate, int m_r, int n_r)
{
    if (n_r <= 16)
        gemm_f32_avx512_edge_nv(1, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
    else if (n_r <= 32)
        gemm_f32_avx512_edge_nv(2, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
    else
        gemm_f32_avx512_edge_nv(3, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
}

/* float64: the chain continues from c (masked loads of the valid columns) */
static inline __attribute__((always_inline))
void gemm_f64_avx512_edge_nv(int NV, int64_t kc, const double *a_panel, const double *b_panel,
                             double *c, int64_t rs_c, int accumulate, int m_r, int n_r)
{
    enum { MR = 8, NR = 24 };
    __mmask8 mask[3];
    for (int v = 0; v < NV; v++) {
        const int cols = n_r - 8 * v;
        mask[v] = cols >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << cols) - 1u);
    }
    __m512d acc[MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++)
            acc[i][v] = accumulate && i < m_r ? _mm512_maskz_loadu_pd(mask[v], c + i * rs_c + 8 * v)
                                              : _mm512_setzero_pd();
    for (int64_t p = 0; p < kc; p++) {
        const double *a_p = a_panel + p * MR;
        const double *b_p = b_panel + p * NR;
        __m512d bv[3];
        for (int v = 0; v < NV; v++)
            bv[v] = _mm512_loadu_pd(b_p + 8 * v);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512d a_ip = _mm512_set1_pd(a_p[i]);
            for (int v = 0; v < NV; v++)
                acc[i][v] = _mm512_fmadd_pd(a_ip, bv[v], acc[i][v]);
        }
    }
    for (int i = 0; i < m_r; i++)
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_pd(c + i * rs_c + 8 * v, mask[v], acc[i][v]);
}

static void gemm_f64_avx512_edge(int64_t kc, const double *a_panel, const double *b_panel,
                                 double *c, int64_t rs_c, int accumulate, int m_r, int n_r)
{
    if (n_r <= 8)
        gemm_f64_avx512_edge_nv(1, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
    else if (n_r <= 16)
        gemm_f64_avx512_edge_nv(2, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
    else
        gemm_f64_avx512_edge_nv(3, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
}

/* The direct loops, with FMA (vectorised over up to four vector registers of columns). */
#define T float
#define GEMM_MADD(s, x, y) __builtin_fmaf((x), (y), (s))
#define GEMM_SMALL_V __m512
#define GEMM_SMALL_VLEN 16
#define GEMM_SMALL_VLOADU(p) _mm512_loadu_ps(p)
#define GEMM_SMALL_VSTOREU(p, v) _mm512_storeu_ps((p), (v))
#define GEMM_SMALL_VSET1(x) _mm512_set1_ps(x)
#define GEMM_SMALL_VFMA(x, y, s) _mm512_fmadd_ps((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f32
#define GEMM_SMALL_COLS 64
#define GEMM_SMALL_NAME gemm_f32_avx512_small
#include "gemm_small_tmpl.h"
#define T double
#define GEMM_MADD(s, x, y) __builtin_fma((x), (y), (s))
#define GEMM_SMALL_V __m512d
#define GEMM_SMALL_VLEN 8
#define GEMM_SMALL_VLOADU(p) _mm512_loadu_pd(p)
#define GEMM_SMALL_VSTOREU(p, v) _mm512_storeu_pd((p), (v))
#define GEMM_SMALL_VSET1(x) _mm512_set1_pd(x)
#define GEMM_SMALL_VFMA(x, y, s) _mm512_fmadd_pd((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f64
#define GEMM_SMALL_ROW_WT gemm_row_wt_f64
#define GEMM_SMALL_COLS 32
#define GEMM_SMALL_NAME gemm_f64_avx512_small
#include "gemm_small_tmpl.h"

const gemm_microkernel_f32 gemm_microkernel_f32_avx512 = {
    "avx512", 8, 48, 8, 64, 1056, gemm_f32_avx512_kernel_8x48, gemm_f32_avx512_small, gemm_copy_t_f32,
    gemm_f32_avx512_edge,
};

const gemm_microkernel_f64 gemm_microkernel_f64_avx512 = {
    "avx512", 8, 24, 8, 2048, 504, gemm_f64_avx512_kernel_8x24, gemm_f64_avx512_small, gemm_copy_t_f64,
    gemm_f64_avx512_edge,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
