/* AVX-512 micro-kernels (F + VL, FMA) and direct loops for gemm (see
 * gemm_internal.h for the contract).  Compiled for AVX-512 by MYATT_TARGET_PUSH below
 * whatever the build flags; only called when cpu.c found AVX-512 usable.
 *
 * Tiles use the 32 zmm registers: 24 accumulators, the B row and the
 * broadcast A element.
 *   f32 6 x 64: per p, B[p, 0:64] is four zmm, each A[i, p] multiplies all four.
 *   f64 8 x 24: B[p, 0:24] is three zmm of 8 doubles.
 * (8 x 3 vectors beat 12 x 2 by 5-15 % at 2048^3: 11 loads per 24 FMAs
 * instead of 14.  For float32, 6 x 4 (10 loads) beat 8 x 3 by 0.5-2 % on one
 * thread and 1.5-9 % on two, measured on Zen 4: 64 columns divide the usual
 * n = 256 .. 4096 into whole tiles and whole bands per thread, where 48 left
 * an edge tile and a band one tile longer than the other.  For float64, 6 x 32
 * measured no better than 8 x 24.)  float32: each accumulator sums its KC
 * block from zero in increasing p with one FMA per term, then is added onto c
 * (or stored); float64: the accumulators start from c (or 0) and continue one
 * FMA chain: the summation contract of gemm_internal.h (torch's order).  The
 * AVX2 and portable kernels do exactly the same arithmetic per output, so
 * every path gives the same bits.  Each kernel reads A from a packed panel or
 * in place from its rows (kernel_rows, gemm_internal.h): one body, inlined
 * with the strides of each.
 *
 * Block sizes (Zen 4 / Zen 5 / Skylake-SP class: 32-48 KiB L1d, 1-2 MiB L2):
 * a few A micro-panels at a time (f32 MC = 48 rows, f64 32) swept over the
 * whole B block (f32: KC x NC = 192 x 1024 per summation block, all of k's
 * blocks packed; f64: 2048 x 504, 8 MiB, its KC free: c is then loaded and
 * stored once per 2048 terms), each B micro-panel used by the MC / MR panels
 * in turn.  Measured on Zen 4 against A blocks sized for L2 (f32 240 x 192,
 * f64 64 x 384): 2048^3 f32 85 -> 88 % of peak, f64 80 -> 88-90 %; with A
 * read in place and the 6 x 64 tile, f32 92-93 %, then with one micro-panel
 * (MC = MR).  On Zen 5 (twice the FMA width), one micro-panel at a time
 * streamed the packed B (k x NC: 4 MiB at k = 1024) from L3 every 6 rows,
 * which capped the kernel at 83-86 % (1 thread) and 81-84 % (2); MC = 24-96
 * reads it 4-16x less often: 88-92 % and 87-91 % (1024^3, 2048^3, linear),
 * f64 MC 8 -> 32: 87-89 -> 90-95 % (1 thread), 81-85 -> 85-89 % (2). */
#include "runtime/cpu.h"

#ifdef MYATT_X86

#include <immintrin.h>
#include <stdint.h>

#include "gemm_internal.h"

/* Everything below is compiled for this instruction set whatever the build's
 * flags (cpu.h). */
MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

#include "simd/simd_avx512.h"
#include "gemm_copy_avx.h"
#include "gemm_row_avx.h"

/* The AVX kernels for the last columns of the zmm ones (fewer than 16 or 8),
 * out of line: inlined into them, they slowed the zmm loops (Zen 4, float64
 * 2 x 1000 @ W[1000, 1000]^T 155 -> 166 us). */
GEMM_ROWS_WT_FN(float, gemm_rows_wt_f32_m, gemm_rows_wt_f32, __attribute__((noinline)))
GEMM_ROWS_WT_FN(double, gemm_rows_wt_f64_m, gemm_rows_wt_f64, __attribute__((noinline)))

/* float32: the 6 x 64 kernels (gemm_kernel_tmpl.h), the edge kernel, the direct loop */
#define T float
#define VEC(op) avx512_f32_##op
#define GEMM_KERNEL_MR 6
#define GEMM_KERNEL_NV 4
#define GEMM_KERNEL_NAME gemm_f32_avx512
#include "gemm_kernel_tmpl.h"

/* Edge tiles (gemm_edge_f32_fn / _f64_fn): NV = the vectors of columns that
 * hold valid ones (a constant in each inlined copy), masked loads and stores
 * of the valid columns, rows past m_r not stored.  Per output the same FMA
 * sequence as the full kernels, so the same bits. */
static inline __attribute__((always_inline))
void gemm_f32_avx512_edge_nv(int NV, int64_t kc, const float *a_panel, const float *b_panel,
                             float *c, int64_t rs_c, int accumulate, int m_r, int n_r)
{
    avx512_f32_t acc[4][6];
    gemm_f32_avx512_start(acc, c, rs_c, 1, 0);   /* zeros */
    gemm_f32_avx512_fma(NV, acc, 0, kc, a_panel, 1, 6, b_panel);
    for (int i = 0; i < m_r; i++) {
        float *c_row = c + i * rs_c;
        for (int v = 0; v < NV; v++) {
            const int cols = n_r - 16 * v;
            const avx512_f32_mask mask =
                cols >= 16 ? (avx512_f32_mask)0xFFFF : avx512_f32_mask_first(cols);
            avx512_f32_t r = acc[v][i];
            if (accumulate)
                r = avx512_f32_add(avx512_f32_load_or(mask, c_row + 16 * v, avx512_f32_zero()), r);
            avx512_f32_store_mask(c_row + 16 * v, mask, r);
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
    else if (n_r <= 48)
        gemm_f32_avx512_edge_nv(3, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
    else
        gemm_f32_avx512_edge_nv(4, kc, a_panel, b_panel, c, rs_c, accumulate, m_r, n_r);
}

/* One row against B = weight^T (rs_b == 1), float32: the contract of
 * gemm_rows_wt_f32 (gemm_row_avx.h; the same bits), with 16 rows of W in the
 * lanes of a zmm.  Each step reads 16 terms of 16 rows (a cache line of each,
 * used whole) and transposes them in registers: 64 shuffles for 256
 * multiply-adds where gemm_rows_wt_f32's 8 x 4 blocks take 12 for 32; two
 * groups of 16 rows a pass, whose chains overlap (each output is one chain over
 * its terms, torch's order; 1, 3 or 4 groups ran slower).  On Zen 5, 1 x 512 @
 * 512 x 1536 (one token's in-projection) 66 -> 60 us, bound by the shuffles (about
 * one a cycle); MultiheadAttention's one token 92 -> 71 us.  Up to 4 rows of A
 * (R) share each transposed block: 2-4 rows had packed the whole weight for a
 * 6-row tile (Zen 4, 2 x 1000 @ W[1000, 1000]^T 250 -> 118 us; float64 516 ->
 * 153 us). */
static inline __attribute__((always_inline))
void gemm_row_wt_f32_avx512_transpose(const __m512 r[16], __m512 o[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    /* u[4 i + c], 128-bit lane l: term 4 l + c of rows 4 i .. 4 i + 3 */
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        t[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    }
    for (int c = 0; c < 4; c++) {   /* o[q] = term q of the 16 rows */
        o[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
        o[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
        o[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
        o[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
    }
}

/* The terms [lo, hi) of a window of 16 (w = W[16 g, s], 0 <= lo < hi <= 16):
 * the rows' lanes [lo, hi) loaded under a mask (the other lanes are never
 * read: they may lie outside W), transposed, and their terms added in order
 * (a = A[0, s]).  The windows at the ends of a block. */
static inline __attribute__((always_inline))
void gemm_row_wt_f32_avx512_part(__m512 *acc, const float *a, int64_t rs_a, int64_t cs_a,
                                 const float *w, int64_t cs_b, int lo, int hi, const int R)
{
    const __mmask16 lanes = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
    __m512 rw[16], o[16];
    for (int i = 0; i < 16; i++)
        rw[i] = _mm512_maskz_loadu_ps(lanes, w + i * cs_b);
    gemm_row_wt_f32_avx512_transpose(rw, o);
    for (int q = lo; q < hi; q++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * rs_a + q * cs_a]), o[q], acc[r]);
}

/* R rows of c against G groups of 16 columns (W's rows b, cs_b apart), kc
 * blocks of 16-term windows.  h: 0, or the number of floats past a 64-byte
 * boundary at which all of W's rows start (rows a multiple of 64 bytes apart),
 * and the windows are moved by it onto cache lines.  NumPy's 16-byte aligned
 * rows 4 KiB apart (k = 1024), in one L1 set, had split every load over two
 * lines: 2 x 1024 @ W[1024, 1024]^T ran at 40 % of the speed of k = 1040.  The
 * order of the terms is the same either way (windows only group them). */
static inline __attribute__((always_inline))
void gemm_row_wt_f32_avx512_groups(float *c, int64_t rs_c, int64_t cs_c, const float *a,
                                   int64_t rs_a, int64_t cs_a, const float *b, int64_t cs_b,
                                   int64_t k, int64_t kc, int c_holds_value, int h, const int G,
                                   const int R)
{
    for (int64_t p0 = 0; p0 < k; p0 += kc) {
        const int64_t p1 = k - p0 < kc ? k : p0 + kc;   /* the block [p0, p1) */
        __m512 acc[2][4];
        for (int g = 0; g < G; g++)
            for (int r = 0; r < R; r++)
                acc[g][r] = _mm512_setzero_ps();
        int64_t p = p0;
        const int head = (int)((16 - (p0 + h) % 16) % 16);   /* terms before a line starts */
        if (head > 0) {   /* the window from the line before: its last terms */
            const int lo = 16 - head, hi = p1 - p0 < head ? lo + (int)(p1 - p0) : 16;
            for (int g = 0; g < G; g++)
                gemm_row_wt_f32_avx512_part(acc[g], a + (p0 - lo) * cs_a, rs_a, cs_a,
                                            b + 16 * g * cs_b + p0 - lo, cs_b, lo, hi, R);
            p += hi - lo;
        }
        for (; p + 16 <= p1; p += 16)
            for (int g = 0; g < G; g++) {   /* not unrolled: spills, 10-25 % slower */
                __m512 rw[16], o[16];
                const float *w = b + 16 * g * cs_b + p;
                for (int i = 0; i < 16; i++) {
                    rw[i] = _mm512_loadu_ps(w);
                    w += cs_b;
                    __asm__("" : "+r"(w));   /* one pointer, not 16 (they were spilled) */
                }
                gemm_row_wt_f32_avx512_transpose(rw, o);
                for (int q = 0; q < 16; q++)
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++)
                        acc[g][r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * rs_a + (p + q) * cs_a]),
                                                    o[q], acc[g][r]);
            }
        if (p < p1)   /* the block's last terms */
            for (int g = 0; g < G; g++)
                gemm_row_wt_f32_avx512_part(acc[g], a + p * cs_a, rs_a, cs_a,
                                            b + 16 * g * cs_b + p, cs_b, 0, (int)(p1 - p), R);
        const int onto_c = c_holds_value || p0 > 0;
        for (int r = 0; r < R; r++)
            for (int g = 0; g < G; g++) {
                float *c_g = c + r * rs_c + 16 * g * cs_c;
                if (cs_c == 1) {
                    _mm512_storeu_ps(c_g, onto_c ? _mm512_add_ps(_mm512_loadu_ps(c_g), acc[g][r])
                                                 : acc[g][r]);
                } else {
                    _Alignas(64) float t[16];
                    _mm512_store_ps(t, acc[g][r]);
                    for (int j = 0; j < 16; j++)
                        c_g[j * cs_c] = onto_c ? c_g[j * cs_c] + t[j] : t[j];
                }
            }
    }
}

/* gemm_copy_t_f32's contract (gemm_copy_avx.h), 16 x 16 blocks transposed in
 * zmm registers (the AVX copy's 8 x 8 blocks take 24 shuffles for 64 elements,
 * these 64 for 256), the rest by the AVX copy.  It packs B = weight^T panels
 * and turns transposed A operands into rows (gemm_tmpl.h): 3-4 % of the large
 * training step with the AVX copy. */
static void gemm_copy_t_f32_avx512(float *strip, int NB, const float *b, int64_t cs_b,
                                   int64_t kb, int64_t nb)
{
    int64_t j = 0;
    for (; j + 16 <= nb; j += 16) {
        const float *b_j = b + j * cs_b;   /* W[j:j+16, :] */
        int64_t p = 0;
        for (; p + 16 <= kb; p += 16) {
            __m512 r[16], o[16];
            for (int i = 0; i < 16; i++)
                r[i] = _mm512_loadu_ps(b_j + i * cs_b + p);
            gemm_row_wt_f32_avx512_transpose(r, o);
            for (int q = 0; q < 16; q++)   /* strip[p + q, j:j+16] */
                _mm512_storeu_ps(strip + (p + q) * NB + j, o[q]);
        }
        for (; p < kb; p++)
            for (int jj = 0; jj < 16; jj++)
                strip[p * NB + j + jj] = b_j[jj * cs_b + p];
    }
    gemm_copy_t_f32_from(strip, NB, b, cs_b, kb, nb, j);
}

/* R rows of A (R <= 4) against B = weight^T: each transposed block of W serves
 * all R rows (the shuffles are the work: see above). */
static inline __attribute__((always_inline))
void gemm_rows_wt_f32_avx512_r(float *c, int64_t rs_c, int64_t cs_c, const float *a,
                               int64_t rs_a, int64_t cs_a, const float *b, int64_t cs_b,
                               int64_t n, int64_t k, int64_t kc, int c_holds_value, const int R)
{
    int64_t j = 0;
    const int64_t row_bytes = cs_b * (int64_t)sizeof(float);
    /* 16 rows in fewer sets of L1 than they need (4 KiB apart, and more): their
     * windows onto the lines (elsewhere the parts of windows cost more than the
     * split loads: 1 x 256 @ [256, 256] 5.2 against 5.6 us) */
    const int h = row_bytes % 64 == 0 && !gemm_rows_fit_l1_sets(row_bytes, 16)
                  ? (int)((uintptr_t)b % 64 / sizeof(float)) : 0;
    if (gemm_rows_fit_l1_sets(row_bytes, 32))
        for (; j + 32 <= n; j += 32)
            gemm_row_wt_f32_avx512_groups(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b,
                                          cs_b, k, kc, c_holds_value, h, 2, R);
    /* R > 1: the block shared, even so; rows a multiple of 64 bytes apart: whole lines */
    if (R > 1 || row_bytes % 64 == 0 || gemm_rows_fit_l1_sets(row_bytes, 16))
        for (; j + 16 <= n; j += 16)
            gemm_row_wt_f32_avx512_groups(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b,
                                          cs_b, k, kc, c_holds_value, h, 1, R);
    if (j < n)   /* the rest: 8 at a time, then one by one */
        gemm_rows_wt_f32_m(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b, cs_b, R, n - j,
                           k, kc, c_holds_value);
}

GEMM_ROWS_WT_FN(float, gemm_rows_wt_f32_avx512, gemm_rows_wt_f32_avx512_r, )

/* The direct loop, with FMA (vectorised over up to four vector registers of columns). */
#define T float
#define VEC(op) avx512_f32_##op
#define GEMM_MADD(s, x, y) __builtin_fmaf((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f32_avx512
#define GEMM_SMALL_ROWS_WT gemm_rows_wt_f32_avx512
#define GEMM_SMALL_ROWS_WT_MAX 4
#define GEMM_SMALL_COLS 64
#define GEMM_SMALL_ROWS 4
#define GEMM_SMALL_NAME gemm_f32_avx512_small
#include "gemm_small_tmpl.h"

/* float64: the same with 8 x 24 tiles */
#define T double
#define VEC(op) avx512_f64_##op
#define GEMM_KERNEL_MR 8
#define GEMM_KERNEL_NV 3
#define GEMM_KERNEL_NAME gemm_f64_avx512
#include "gemm_kernel_tmpl.h"

/* the chain continues from c (masked loads of the valid columns) */
static inline __attribute__((always_inline))
void gemm_f64_avx512_edge_nv(int NV, int64_t kc, const double *a_panel, const double *b_panel,
                             double *c, int64_t rs_c, int accumulate, int m_r, int n_r)
{
    avx512_f64_mask mask[3];
    for (int v = 0; v < NV; v++) {
        const int cols = n_r - 8 * v;
        mask[v] = cols >= 8 ? (avx512_f64_mask)0xFF : avx512_f64_mask_first(cols);
    }
    avx512_f64_t acc[3][8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            acc[v][i] = accumulate && i < m_r
                            ? avx512_f64_load_or(mask[v], c + i * rs_c + 8 * v, avx512_f64_zero())
                            : avx512_f64_zero();
    gemm_f64_avx512_fma(NV, acc, 0, kc, a_panel, 1, 8, b_panel);
    for (int i = 0; i < m_r; i++)
        for (int v = 0; v < NV; v++)
            avx512_f64_store_mask(c + i * rs_c + 8 * v, mask[v], acc[v][i]);
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

/* An 8 x 8 block of float64 transposed in registers: r[i] = 8 terms of row i,
 * o[q] = term q of the 8 rows (24 shuffles). */
static inline __attribute__((always_inline))
void gemm_row_wt_f64_avx512_transpose(const __m512d r[8], __m512d o[8])
{
    __m512d t[8], u[8];
    for (int i = 0; i < 4; i++) {   /* 128-bit lane l: term 2 l (+ 1) of rows 2 i, 2 i + 1 */
        t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int c = 0; c < 2; c++) {
        u[c] = _mm512_shuffle_f64x2(t[c], t[2 + c], 0x88);
        u[2 + c] = _mm512_shuffle_f64x2(t[c], t[2 + c], 0xDD);
        u[4 + c] = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0x88);
        u[6 + c] = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0xDD);
    }
    for (int c = 0; c < 2; c++) {   /* o[q] = term q of the 8 rows */
        o[c] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0x88);
        o[2 + c] = _mm512_shuffle_f64x2(u[2 + c], u[6 + c], 0x88);
        o[4 + c] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0xDD);
        o[6 + c] = _mm512_shuffle_f64x2(u[2 + c], u[6 + c], 0xDD);
    }
}

/* gemm_copy_t_f64's contract, 8 x 8 blocks in zmm registers (24 shuffles for
 * 64 elements; the AVX copy's 4 x 4 blocks, 8 for 16). */
static void gemm_copy_t_f64_avx512(double *strip, int NB, const double *b, int64_t cs_b,
                                   int64_t kb, int64_t nb)
{
    int64_t j = 0;
    for (; j + 8 <= nb; j += 8) {
        const double *b_j = b + j * cs_b;   /* W[j:j+8, :] */
        int64_t p = 0;
        for (; p + 8 <= kb; p += 8) {
            __m512d r[8], o[8];
            for (int i = 0; i < 8; i++)
                r[i] = _mm512_loadu_pd(b_j + i * cs_b + p);
            gemm_row_wt_f64_avx512_transpose(r, o);
            for (int q = 0; q < 8; q++)   /* strip[p + q, j:j+8] */
                _mm512_storeu_pd(strip + (p + q) * NB + j, o[q]);
        }
        for (; p < kb; p++)
            for (int jj = 0; jj < 8; jj++)
                strip[p * NB + j + jj] = b_j[jj * cs_b + p];
    }
    gemm_copy_t_f64_from(strip, NB, b, cs_b, kb, nb, j);
}

/* gemm_rows_wt_f64's contract: G groups of 8 rows of W side by side (G chains a
 * step: one chain alone waits on the FMA latency), each step 8 terms of each
 * row (a cache line) transposed in registers.  The sums come from c and go
 * back to it in registers: through a stack array, the loads of the next pass
 * waited on the stores of this one (a failed store forward), so its chains
 * could not overlap this pass's.  On Zen 5, four groups: the seed's 1 x 64 @
 * 64 x 32 0.23 -> 0.1 us, 1 x 520 @ 520 x 1536 94 -> 73 us; fewer where the
 * rows share L1 sets (gemm_rows_fit_l1_sets: on Zen 5 four groups ran 1.3x
 * slower than two at k = 256, 512 and 1024; on Zen 4 two 2x slower than one at
 * k = 512 and 1024). */
static inline __attribute__((always_inline))
void gemm_row_wt_f64_avx512_groups(double *c, int64_t rs_c, int64_t cs_c, const double *a,
                                   int64_t rs_a, int64_t cs_a, const double *b, int64_t cs_b,
                                   int64_t k, int c_holds_value, const int G, const int R)
{
    __m512d acc[4][4];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) {
            const double *c_g = c + r * rs_c + 8 * g * cs_c;
            acc[r][g] = !c_holds_value ? _mm512_setzero_pd()
                        : cs_c == 1    ? _mm512_loadu_pd(c_g)
                                       : _mm512_set_pd(c_g[7 * cs_c], c_g[6 * cs_c], c_g[5 * cs_c],
                                                       c_g[4 * cs_c], c_g[3 * cs_c], c_g[2 * cs_c],
                                                       c_g[cs_c], c_g[0]);
        }
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) {
        const double *w = b + p;   /* W[8g:8g+8, p:p+8] */
        for (int g = 0; g < G; g++) {
            __m512d rw[8], o[8];
            for (int i = 0; i < 8; i++)
                rw[i] = _mm512_loadu_pd(w + i * cs_b);
            gemm_row_wt_f64_avx512_transpose(rw, o);
            for (int q = 0; q < 8; q++)
                for (int r = 0; r < R; r++)
                    acc[r][g] = _mm512_fmadd_pd(_mm512_set1_pd(a[r * rs_a + (p + q) * cs_a]), o[q],
                                                acc[r][g]);
            w += 8 * cs_b;
            __asm__("" : "+r"(w));   /* as in gemm_rows_wt_f64_groups */
        }
    }
    for (; p < k; p++)   /* the last terms, one at a time */
        for (int g = 0; g < G; g++) {
            const double *w = b + 8 * g * cs_b + p;
            const __m512d wv = _mm512_set_pd(w[7 * cs_b], w[6 * cs_b], w[5 * cs_b], w[4 * cs_b],
                                             w[3 * cs_b], w[2 * cs_b], w[cs_b], w[0]);
            for (int r = 0; r < R; r++)
                acc[r][g] = _mm512_fmadd_pd(_mm512_set1_pd(a[r * rs_a + p * cs_a]), wv, acc[r][g]);
        }
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) {
            double *c_g = c + r * rs_c + 8 * g * cs_c;
            if (cs_c == 1) {
                _mm512_storeu_pd(c_g, acc[r][g]);
            } else {
                _Alignas(64) double t[8];
                _mm512_store_pd(t, acc[r][g]);
                for (int i = 0; i < 8; i++)
                    c_g[i * cs_c] = t[i];
            }
        }
}

/* R rows of A (R <= 4) against B = weight^T, sharing each transposed block;
 * the groups as many as fit L1's sets and R x G accumulators (16 at most). */
static inline __attribute__((always_inline))
void gemm_rows_wt_f64_avx512_r(double *c, int64_t rs_c, int64_t cs_c, const double *a,
                               int64_t rs_a, int64_t cs_a, const double *b, int64_t cs_b,
                               int64_t n, int64_t k, int64_t kc, int c_holds_value, const int R)
{
    int64_t j = 0;
    const int64_t row_bytes = cs_b * (int64_t)sizeof(double);
    if (gemm_rows_fit_l1_sets(row_bytes, 32))
        for (; j + 32 <= n; j += 32)
            gemm_row_wt_f64_avx512_groups(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b,
                                          cs_b, k, c_holds_value, 4, R);
    if (gemm_rows_fit_l1_sets(row_bytes, 16))
        for (; j + 16 <= n; j += 16)
            gemm_row_wt_f64_avx512_groups(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b,
                                          cs_b, k, c_holds_value, 2, R);
    for (; j + 8 <= n; j += 8)
        gemm_row_wt_f64_avx512_groups(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b,
                                      cs_b, k, c_holds_value, 1, R);
    if (j < n)   /* the last columns: 4 at a time, then one by one */
        gemm_rows_wt_f64_m(c + j * cs_c, rs_c, cs_c, a, rs_a, cs_a, b + j * cs_b, cs_b, R, n - j,
                           k, kc, c_holds_value);
}

GEMM_ROWS_WT_FN(double, gemm_rows_wt_f64_avx512, gemm_rows_wt_f64_avx512_r, )

#define T double
#define VEC(op) avx512_f64_##op
#define GEMM_MADD(s, x, y) __builtin_fma((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f64_avx512
#define GEMM_SMALL_ROWS_WT gemm_rows_wt_f64_avx512
#define GEMM_SMALL_ROWS_WT_MAX 4
#define GEMM_SMALL_COLS 32
#define GEMM_SMALL_ROWS 4
#define GEMM_SMALL_NAME gemm_f64_avx512_small
#include "gemm_small_tmpl.h"

const gemm_microkernel_f32 gemm_microkernel_f32_avx512 = {
    "avx512", 6, 64, 48, 64, 1024, gemm_f32_avx512_kernel, gemm_f32_avx512_small,
    gemm_copy_t_f32_avx512, gemm_f32_avx512_edge, gemm_f32_avx512_kernel_rows, 4,
};

const gemm_microkernel_f64 gemm_microkernel_f64_avx512 = {
    "avx512", 8, 24, 32, 2048, 504, gemm_f64_avx512_kernel, gemm_f64_avx512_small,
    gemm_copy_t_f64_avx512, gemm_f64_avx512_edge, gemm_f64_avx512_kernel_rows, 4,
};

MYATT_TARGET_POP()

#endif
