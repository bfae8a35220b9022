/* GEMM: the portable micro-kernels, the micro-kernel table and its selection,
 * and (via gemm_tmpl.h, once per dtype) the BLIS/Goto blocking and packing.
 *
 *   c[m, n] = (accumulate ? c : 0) + a[m, k] @ b[k, n] (+ bias[n])
 *
 * Structure (BLIS, C-stationary; see gemm_packed in gemm_tmpl.h): for each NC
 * block of columns, pack B into KC x NR panels (every KC block of a k range);
 * for each MC block of rows, for each KC block, run the MR x NR micro-kernel
 * over the block, A packed into MR x KC panels or (SIMD paths, rows with
 * contiguous columns) read in place.  Packing absorbs every stride and
 * zero-pads edges; only the micro-kernel (and the direct loop for small
 * products) is ISA-specific: gemm_avx2.c, gemm_avx512.c, chosen in cpu.c.
 * Large products are split into bands of c over the thread pool (threads.h). */
#include "gemm.h"
#include "gemm_bf16.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/alloc.h"
#include "runtime/copy.h"
#include "runtime/cpu.h"
#include "runtime/threads.h"
#include "gemm_internal.h"

static inline int64_t gemm_min(int64_t x, int64_t y) { return x < y ? x : y; }

/* x rounded up to a multiple of step (step >= 1) */
static inline int64_t gemm_round_up(int64_t x, int64_t step) { return (x + step - 1) / step * step; }
static inline int64_t gemm_ceil_div(int64_t x, int64_t d) { return (x + d - 1) / d; }

/* Whether gemm skips packing and runs the direct loop (see GEMM_SMALL_WORK).
 * A test build may define GEMM_FORCE_PATH as 1 (always packed) or 2 (always
 * direct) to compare the two paths bit for bit. */
static int gemm_use_direct(int64_t m, int64_t n, int64_t k, int mr, int rows_wt, int64_t rs_b,
                           int64_t cs_b)
{
#ifdef GEMM_FORCE_PATH
    (void)m, (void)n, (void)k, (void)mr, (void)rows_wt, (void)rs_b, (void)cs_b;
    return GEMM_FORCE_PATH == 2;
#else
    const double work = (double)m * (double)n * (double)k;
    return work <= GEMM_SMALL_WORK
           || ((m == 1 || m <= rows_wt || (m > mr && m % mr != 0 && m <= 2 * rows_wt))
               && rs_b == 1)
           || (m < mr && (cs_b == 1 || work <= GEMM_SMALL_ROWS_WORK))
           || (m <= GEMM_DIRECT_ROWS && cs_b == 1 && work <= GEMM_DIRECT_ROWS_WORK);
#endif
}

/* ---------------------------------------------------------------------------
 * Portable micro-kernels: plain C, an MR x NR accumulator array in T, one
 * fmaf / fma per term (libm's, the hardware instruction when present; the
 * build uses -ffp-contract=off, so nothing else is fused).  Float32 sums each
 * kc block from zero and adds it onto c; float64 continues one chain from c.
 * Contract: see gemm_internal.h.
 * ------------------------------------------------------------------------- */

/* c[4, 8] = (accumulate ? c : 0) + a_panel[kc][4]^T @ b_panel[kc][8] */
static void gemm_f32_portable_kernel_4x8(int64_t kc, const float *a_panel, const float *b_panel,
                                         float *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = 4, NR = 8 };
    float acc[MR][NR] = {{0}};
    for (int64_t p = 0; p < kc; p++) {
        const float *a_p = a_panel + p * MR;   /* A[0:4, p] */
        const float *b_p = b_panel + p * NR;   /* B[p, 0:8] */
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                acc[i][j] = fmaf(a_p[i], b_p[j], acc[i][j]);
    }
    for (int i = 0; i < MR; i++) {
        float *c_row = c + i * rs_c;
        for (int j = 0; j < NR; j++) {
            float *c_ij = c_row + j * cs_c;
            *c_ij = accumulate ? *c_ij + acc[i][j] : acc[i][j];
        }
    }
}

/* c[4, 4] = (accumulate ? c : 0) + a_panel[kc][4]^T @ b_panel[kc][4], the chain from c */
static void gemm_f64_portable_kernel_4x4(int64_t kc, const double *a_panel, const double *b_panel,
                                         double *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = 4, NR = 4 };
    double acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            acc[i][j] = accumulate ? c[i * rs_c + j * cs_c] : 0.0;
    for (int64_t p = 0; p < kc; p++) {
        const double *a_p = a_panel + p * MR;   /* A[0:4, p] */
        const double *b_p = b_panel + p * NR;   /* B[p, 0:4] */
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                acc[i][j] = fma(a_p[i], b_p[j], acc[i][j]);
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            c[i * rs_c + j * cs_c] = acc[i][j];
}

/* The portable direct loops: fmaf / fma, as the portable micro-kernels. */
#define GEMM_MADD(s, x, y) fmaf((x), (y), (s))
#define T float
#define GEMM_SMALL_COLS 16
#define GEMM_SMALL_NAME gemm_f32_portable_small
#include "gemm_small_tmpl.h"
#define GEMM_MADD(s, x, y) fma((x), (y), (s))
#define T double
#define GEMM_SMALL_COLS 16
#define GEMM_SMALL_NAME gemm_f64_portable_small
#include "gemm_small_tmpl.h"

/* ---------------------------------------------------------------------------
 * The micro-kernel table and the one place a kernel is chosen.
 *
 * kc is a cache block only: the summation order is torch's (gemm_internal.h),
 * float32 in blocks of gemm_sum_block(k) (<= 192), float64 one chain, so that
 * results agree with torch bit for bit in MKL's main kernel region and the
 * float32 error on long reductions equals torch's (the SPEC's bar).
 *
 * Block sizes for the portable kernels (SSE2 baseline, 16 vector registers):
 *   f32 4x8: A panel 4 x 64 (1 KiB) + B panel 64 x 8 (2 KiB) in L1;
 *            A block 256 x 64 (64 KiB) in L2; B block 64 x 4096 (1 MiB) in L3.
 *   f64 4x4: A panel 2 KiB + B panel 2 KiB in L1; A block 128 x 64 (64 KiB);
 *            B block 64 x 2048 (1 MiB).
 * ------------------------------------------------------------------------- */

static const gemm_microkernel_f32 gemm_microkernel_f32_portable = {
    /* name        mr nr   mc  kc    nc   kernel                        small */
    "portable",    4, 8,  256, 64, 4096, gemm_f32_portable_kernel_4x8, gemm_f32_portable_small, NULL, NULL,
    NULL, 0,
};

static const gemm_microkernel_f64 gemm_microkernel_f64_portable = {
    "portable",    4, 4,  128, 64, 2048, gemm_f64_portable_kernel_4x4, gemm_f64_portable_small, NULL, NULL,
    NULL, 0,
};

/* The path mk_cpu_isa() chose (CPU detection + MYATT_KERNEL, decided once). */
const gemm_microkernel_f32 *gemm_select_f32(void)
{
    switch (mk_cpu_isa()) {
#if defined(__x86_64__) || defined(__i386__)
    case MK_ISA_AVX512: return &gemm_microkernel_f32_avx512;
    case MK_ISA_AVX2: return &gemm_microkernel_f32_avx2;
#endif
    default: return &gemm_microkernel_f32_portable;
    }
}

const gemm_microkernel_f64 *gemm_select_f64(void)
{
    switch (mk_cpu_isa()) {
#if defined(__x86_64__) || defined(__i386__)
    case MK_ISA_AVX512: return &gemm_microkernel_f64_avx512;
    case MK_ISA_AVX2: return &gemm_microkernel_f64_avx2;
#endif
    default: return &gemm_microkernel_f64_portable;
    }
}

int gemm_bf16_linear(uint16_t *y, int64_t rs_y, const uint16_t *x, int64_t rs_x, mk_cmat w,
                     const uint16_t *bias, int64_t rs_bias, int64_t m, int64_t n, int64_t k,
                     int x_transposed)
{
#if defined(__x86_64__) || defined(__i386__)
    if (mk_cpu_bf16_dot())
        return gemm_bf16_linear_avx512(y, rs_y, x, rs_x, w, bias, rs_bias, m, n, k,
                                       x_transposed);
#endif
    (void)y, (void)rs_y, (void)x, (void)rs_x, (void)w, (void)bias, (void)rs_bias, (void)m,
        (void)n, (void)k, (void)x_transposed;
    return 1;
}

int gemm_bf16_f32(mk_mat c, mk_cmat x, mk_cmat w, int accumulate)
{
#if defined(__x86_64__) || defined(__i386__)
    if (mk_cpu_bf16_dot())
        return gemm_bf16_f32_avx512(c, x, w, accumulate);
#endif
    (void)c, (void)x, (void)w, (void)accumulate;
    return 1;
}

int gemm_bf16_bmm(mk_batch c, mk_cbatch a, mk_cbatch b, const mk_cbatch *add)
{
    if (!mk_cpu_bf16_dot())
        return 1;
    const int64_t n = a.rows, k = a.cols, p = b.cols;
    if (n <= 0 || p <= 0)   /* (not 2**40 empty items one by one) */
        return 0;
    /* the items' a with contiguous rows and b^T ([p, k]) with contiguous rows
     * or columns: as they are, or copied (once per item) into at / bt */
    const int copy_a = a.cs != 1 && k > 1, copy_b = b.rs != 1 && b.cs != 1 && k > 1;
    /* torch's first operand a transposed view (its rows contiguous) */
    const int a_transposed = a.cs != 1 && a.rs == 1 && k > 1;
    uint16_t *at = copy_a ? mk_alloc(mk_bytes(mk_bytes((size_t)n, (size_t)k), 2)) : NULL;
    uint16_t *bt = copy_b ? mk_alloc(mk_bytes(mk_bytes((size_t)p, (size_t)k), 2)) : NULL;
    int rc = (copy_a && at == NULL) || (copy_b && bt == NULL) ? -1 : 0;
    for (int64_t i = 0; i < c.batch && rc == 0; i++) {
        mk_cmat ai = mk_citem(a, i, 2), bi = mk_t(mk_citem(b, i, 2));
        const mk_mat ci = mk_item(c, i, 2);
        if (copy_a) {
            mk_copy_view(at, ai, 2);
            ai = mk_cmat_c(at, n, k);
        }
        if (copy_b) {
            mk_copy_view(bt, bi, 2);
            bi = mk_cmat_c(bt, p, k);
        }
        const mk_cmat di = add != NULL ? mk_citem(*add, i, 2) : (mk_cmat){0};
        rc = gemm_bf16_linear(ci.data, ci.rs, ai.data, ai.rs, bi, di.data, di.rs, n, p, k,
                              a_transposed);
    }
    mk_free(at);
    mk_free(bt);
    return rc;
}

/* ---------------------------------------------------------------------------
 * The driver, once per dtype: gemm_run_f32 / gemm_f32, gemm_run_f64 / gemm_f64.
 * ------------------------------------------------------------------------- */

#define T float
#define SUF(name) name##_f32
#include "gemm_tmpl.h"

#define T double
#define SUF(name) name##_f64
#include "gemm_tmpl.h"

int gemm_strided_f32(void *c, int64_t rs_c, int64_t cs_c,
                     const void *a1, int64_t rs_a1, int64_t cs_a1, int64_t k1,
                     const void *a2, int64_t rs_a2, int64_t cs_a2,
                     const void *b, int64_t rs_b, int64_t cs_b, const void *bias,
                     int64_t m, int64_t n, int64_t k, int accumulate)
{
    return gemm_strided_body_f32(c, rs_c, cs_c, a1, rs_a1, cs_a1, k1, a2, rs_a2, cs_a2,
                                 b, rs_b, cs_b, bias, m, n, k, accumulate);
}

int gemm_strided_f64(void *c, int64_t rs_c, int64_t cs_c,
                     const void *a1, int64_t rs_a1, int64_t cs_a1, int64_t k1,
                     const void *a2, int64_t rs_a2, int64_t cs_a2,
                     const void *b, int64_t rs_b, int64_t cs_b, const void *bias,
                     int64_t m, int64_t n, int64_t k, int accumulate)
{
    return gemm_strided_body_f64(c, rs_c, cs_c, a1, rs_a1, cs_a1, k1, a2, rs_a2, cs_a2,
                                 b, rs_b, cs_b, bias, m, n, k, accumulate);
}

int gemm_transpose_f32(float *dst, const float *a, int64_t cs, int64_t m, int64_t k,
                       int nthreads)
{
    return gemm_transpose_body_f32(gemm_select_f32(), dst, a, cs, m, k, nthreads);
}

int gemm_transpose_f64(double *dst, const double *a, int64_t cs, int64_t m, int64_t k,
                       int nthreads)
{
    return gemm_transpose_body_f64(gemm_select_f64(), dst, a, cs, m, k, nthreads);
}

int gemm_run_f32(const gemm_microkernel_f32 *uk,
                 float *c, int64_t rs_c, int64_t cs_c,
                 const float *a, int64_t rs_a, int64_t cs_a,
                 const float *b, int64_t rs_b, int64_t cs_b,
                 const float *bias,
                 int64_t m, int64_t n, int64_t k, int accumulate)
{
    return gemm_run_body_f32(uk, c, rs_c, cs_c, a, rs_a, cs_a, b, rs_b, cs_b, bias,
                             m, n, k, accumulate);
}

int gemm_run_f64(const gemm_microkernel_f64 *uk,
                 double *c, int64_t rs_c, int64_t cs_c,
                 const double *a, int64_t rs_a, int64_t cs_a,
                 const double *b, int64_t rs_b, int64_t cs_b,
                 const double *bias,
                 int64_t m, int64_t n, int64_t k, int accumulate)
{
    return gemm_run_body_f64(uk, c, rs_c, cs_c, a, rs_a, cs_a, b, rs_b, cs_b, bias,
                             m, n, k, accumulate);
}
