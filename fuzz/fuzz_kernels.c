/* libFuzzer harness over the pure-C kernels (csrc/kernels): gemm, linear,
 * softmax, bmm, the fused MyAtt forward and scaled dot-product attention
 * (forward and backward), in float32 and float64, with
 * random sizes, strides (transposed, padded, negative, zero), thread counts and
 * values, checked against a plain reference written here.
 *
 * Every operand lives in a malloc block of exactly the size its strides reach,
 * so AddressSanitizer sees any read or write out of bounds; the gaps of padded
 * outputs hold canaries that must survive.  Finite inputs are multiples of
 * 1/16 in [-8, 8): every product and partial sum of a gemm is exact in float32
 * (k < 256), so gemm, linear and bmm must equal the reference bit for bit in
 * any summation order; with NaN/inf inputs they must give the same NaN/inf
 * pattern.  softmax, MyAtt and SDPA are checked within a rounding bound; the
 * half-precision softmax rows (forward and backward, in place) bit for bit
 * against the float32 kernels'.
 *
 * Build and run: fuzz/run_kernels.sh (README, "Reliability"). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bmm/bmm.h"
#include "gemm/gemm.h"
#include "gemm/gemm_bf16.h"
#include "gemm/gemm_cpublas.h"
#include "linear/linear.h"
#include "runtime/cpu.h"
#include "runtime/half.h"
#include "runtime/threads.h"
#include "sdpa/sdpa.h"
#include "softmax/softmax.h"
#include "tutorial/tutorial.h"

/* ---- reading the input ---------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned next_byte(reader *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

static int64_t next_size(reader *r, int64_t max)   /* [0, max) */
{
    unsigned v = next_byte(r) | (next_byte(r) << 8);
    return (int64_t)(v % (unsigned)max);
}

/* A value: a multiple of 1/16 in [-8, 8), or (when allowed) NaN / +-inf. */
static double next_value(reader *r, int nonfinite)
{
    unsigned b = next_byte(r);
    if (nonfinite && b >= 250)
        return b == 250 ? NAN : b == 251 ? INFINITY : b == 252 ? -INFINITY : 0.0;
    return ((double)(int)(b & 0xff) - 128.0) / 16.0;
}

#define FAIL(...)                                                    \
    do {                                                             \
        fprintf(stderr, "fuzz_kernels: " __VA_ARGS__);               \
        fprintf(stderr, "\n");                                       \
        abort();                                                     \
    } while (0)

/* ---- strided operands in exact-size blocks -------------------------------- */

typedef struct {
    void *block;          /* malloc'd, exactly `len` elements */
    int64_t len;
    int64_t offset;       /* element [0, 0] is block[offset] */
    int64_t rs, cs;       /* strides in elements */
    int64_t rows, cols;
    int f64;
} operand;

static double get(const operand *o, int64_t i, int64_t j)
{
    int64_t e = o->offset + i * o->rs + j * o->cs;
    return o->f64 ? ((double *)o->block)[e] : (double)((float *)o->block)[e];
}

static void *base(const operand *o)
{
    return o->f64 ? (void *)((double *)o->block + o->offset)
                  : (void *)((float *)o->block + o->offset);
}

/* The kernel views (view.h) of an operand. */
static mk_cmat cview(const operand *o)
{
    return (mk_cmat){base(o), o->rows, o->cols, o->rs, o->cs};
}

static mk_mat mview(const operand *o)
{
    return (mk_mat){base(o), o->rows, o->cols, o->rs, o->cs};
}

/* A rows x cols operand in a layout the input chooses: row- or column-major,
 * leading dimension padded by 0..3, rows and/or columns reversed, and (for an
 * input) a zero stride.  Writable outputs never get a zero stride. */
static void make_operand(operand *o, reader *r, int64_t rows, int64_t cols, int f64, int output)
{
    unsigned layout = next_byte(r);
    int col_major = layout & 1, rev_rows = layout & 2, rev_cols = layout & 4;
    int64_t pad = (layout >> 3) & 3;
    int zero_rows = !output && (layout & 0x60) == 0x60;   /* broadcast along rows */
    int64_t rs, cs;
    if (col_major) {
        cs = rows + pad;
        rs = 1;
    } else {
        rs = cols + pad;
        cs = 1;
    }
    if (zero_rows)
        rs = 0;
    if (rev_rows)
        rs = -rs;
    if (rev_cols)
        cs = -cs;
    /* extent: the lowest and highest element reached */
    int64_t lo = 0, hi = 0;
    if (rows > 0 && cols > 0) {
        int64_t a = (rows - 1) * rs, b = (cols - 1) * cs;
        lo = (a < 0 ? a : 0) + (b < 0 ? b : 0);
        hi = (a > 0 ? a : 0) + (b > 0 ? b : 0);
    }
    o->len = rows > 0 && cols > 0 ? hi - lo + 1 : 0;
    o->offset = -lo;
    o->rs = rs;
    o->cs = cs;
    o->rows = rows;
    o->cols = cols;
    o->f64 = f64;
    size_t size = f64 ? sizeof(double) : sizeof(float);
    o->block = malloc((size_t)(o->len > 0 ? o->len : 1) * size);
    if (o->block == NULL)
        FAIL("out of memory");
}

static void fill(operand *o, reader *r, int nonfinite)
{
    for (int64_t e = 0; e < o->len; e++) {
        double v = next_value(r, nonfinite);
        if (o->f64)
            ((double *)o->block)[e] = v;
        else
            ((float *)o->block)[e] = (float)v;
    }
}

static const double CANARY = 1234.5;   /* never a result: |result| < 8 * 64 * 256 + 8 */

static void fill_canary(operand *o)
{
    for (int64_t e = 0; e < o->len; e++) {
        if (o->f64)
            ((double *)o->block)[e] = CANARY;
        else
            ((float *)o->block)[e] = (float)CANARY;
    }
}

/* Gaps of a padded output still hold the canary. */
static void check_gaps(const operand *o, const char *what)
{
    char *touched = calloc((size_t)(o->len > 0 ? o->len : 1), 1);
    for (int64_t i = 0; i < o->rows; i++)
        for (int64_t j = 0; j < o->cols; j++)
            touched[o->offset + i * o->rs + j * o->cs] = 1;
    for (int64_t e = 0; e < o->len; e++) {
        double v = o->f64 ? ((double *)o->block)[e] : ((float *)o->block)[e];
        if (!touched[e] && v != CANARY)
            FAIL("%s: the kernel wrote outside its output (element %lld)", what, (long long)e);
    }
    free(touched);
}

/* got == want, NaN == NaN: the exact check of gemm, linear, bmm. */
static void check_exact(double got, double want, const char *what, int64_t i, int64_t j)
{
    if (isnan(want) ? !isnan(got) : got != want)
        FAIL("%s[%lld, %lld] = %.17g, the reference gives %.17g", what, (long long)i,
             (long long)j, got, want);
}

/* |got - want| <= tol * scale (NaN patterns equal): softmax, MyAtt. */
static void check_close(double got, double want, double scale, int f64, const char *what,
                        int64_t i, int64_t j)
{
    double tol = (f64 ? 1e-12 : 2e-5) * (scale + 1.0);
    if (isnan(want) || isnan(got) || isinf(want) || isinf(got)) {
        if (!(isnan(want) && isnan(got)) && got != want)
            FAIL("%s[%lld, %lld] = %.9g, the reference gives %.9g", what, (long long)i,
                 (long long)j, got, want);
        return;
    }
    if (fabs(got - want) > tol)
        FAIL("%s[%lld, %lld] = %.17g, the reference gives %.17g (tolerance %.3g)", what,
             (long long)i, (long long)j, got, want, tol);
}

/* ---- the operations ------------------------------------------------------- */

/* c = (accumulate ? c : 0) + a @ b (+ bias), every operand strided. */
/* gemm_bf16_linear (where the CPU has vdpbf16ps) on a's and b's values as
 * bfloat16 (the inputs' sixteenths are exact in it, their float32 sums in any
 * order): x = a [m, k] (its rows contiguous), w = b^T [n, k] with its rows
 * contiguous or as a transposed view (flags), plus the bias row or a per-row
 * addend [m, n] (baddbmm's; flags); each output one rounding of the exact sum. */
static void fuzz_gemm_bf16(const operand *a, const operand *b, const operand *bias,
                           unsigned flags)
{
    const int64_t m = a->rows, k = a->cols, n = b->cols;
    if (!mk_cpu_bf16_dot() || m == 0 || n == 0)
        return;
    const int w_cols = (flags >> 4) & 1, per_row = (flags >> 5) & 1;
    uint16_t *x = malloc((size_t)(m * k + 1) * 2), *w = malloc((size_t)(n * k + 1) * 2);
    uint16_t *add = malloc((size_t)(m * n + 1) * 2), *y = malloc((size_t)(m * n + 1) * 2);
    if (x == NULL || w == NULL || add == NULL || y == NULL)
        FAIL("out of memory");
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++)
            x[i * k + p] = mk_bf16_of_f32((float)get(a, i, p));
    for (int64_t p = 0; p < k; p++)   /* w[j, p] = b[p, j]: [n, k] rows, or b's [k, n] rows */
        for (int64_t j = 0; j < n; j++)
            w[w_cols ? p * n + j : j * k + p] = mk_bf16_of_f32((float)get(b, p, j));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            add[i * n + j] = mk_bf16_of_f32(
                bias == NULL ? 0.0f : (float)(get(bias, 0, j) + (per_row ? (double)i : 0.0)));
    const mk_cmat wv = w_cols ? (mk_cmat){w, n, k, 1, n} : (mk_cmat){w, n, k, k, 1};
    if (gemm_bf16_linear(y, n, x, k, wv, bias != NULL ? add : NULL, per_row ? n : 0, m, n, k,
                         (flags >> 6) & 1) != 0)
        FAIL("gemm_bf16_linear failed");
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = bias != NULL ? (double)mk_f32_of_bf16(add[per_row ? i * n + j : j]) : 0;
            for (int64_t p = 0; p < k; p++)
                want += (double)mk_f32_of_bf16(x[i * k + p])
                        * (double)mk_f32_of_bf16(w[w_cols ? p * n + j : j * k + p]);
            if (y[i * n + j] != mk_bf16_of_f32((float)want))
                FAIL("gemm_bf16_linear: [%lld, %lld] %g, expected %g (w %s, addend %s)",
                     (long long)i, (long long)j, (double)mk_f32_of_bf16(y[i * n + j]),
                     (double)mk_f32_of_bf16(mk_bf16_of_f32((float)want)),
                     w_cols ? "a transposed view" : "rows", per_row ? "per row" : "a row");
        }
    free(x);
    free(w);
    free(add);
    free(y);
}

static void fuzz_gemm(reader *r, int f64, int nonfinite)
{
    int64_t m = next_size(r, 300), n = next_size(r, 80), k = next_size(r, 140);
    unsigned flags = next_byte(r);
    int accumulate = flags & 1, has_bias = flags & 2;
    operand a, b, c, bias;
    make_operand(&a, r, m, k, f64, 0);
    make_operand(&b, r, k, n, f64, 0);
    make_operand(&c, r, m, n, f64, 1);
    make_operand(&bias, r, 1, n, f64, 0);
    bias.rs = 0;                       /* the kernel takes bias contiguous */
    if (bias.cs != 1) {
        free(bias.block);
        bias.len = n;
        bias.offset = 0;
        bias.cs = 1;
        bias.block = malloc((size_t)(n > 0 ? n : 1) * (f64 ? 8 : 4));
    }
    fill(&a, r, nonfinite);
    fill(&b, r, nonfinite);
    fill(&bias, r, nonfinite);
    fill_canary(&c);
    if (accumulate)                    /* c's elements get start values, gaps keep canaries */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t e = c.offset + i * c.rs + j * c.cs;
                double v = next_value(r, 0);
                if (f64)
                    ((double *)c.block)[e] = v;
                else
                    ((float *)c.block)[e] = (float)v;
            }
    double *start = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(double));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            start[i * n + j] = accumulate ? get(&c, i, j) : 0.0;

    int rc = (f64 ? gemm_f64 : gemm_f32)(mview(&c), cview(&a), cview(&b),
                                         has_bias ? base(&bias) : NULL, accumulate);
    if (rc != 0)
        FAIL("gemm returned %d", rc);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = start[i * n + j] + (has_bias ? get(&bias, 0, j) : 0.0);
            for (int64_t p = 0; p < k; p++)
                want += get(&a, i, p) * get(&b, p, j);
            if (!f64)
                want = (float)want;
            check_exact(get(&c, i, j), want, "gemm", i, j);
        }
    check_gaps(&c, "gemm");
    /* float32 on the bfloat16 dot product with float32 sums (gemm_bf16_f32: the values'
     * sixteenths are exact in bfloat16, their sums in any order), c's rows contiguous */
    if (!f64 && !nonfinite && mk_cpu_bf16_dot() && mview(&c).cs == 1) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                start[i * n + j] = accumulate ? get(&c, i, j) : 0.0;
        if (gemm_bf16_f32(mview(&c), cview(&a), mk_t(cview(&b)), accumulate) != 0)
            FAIL("gemm_bf16_f32 failed");
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = start[i * n + j];
                for (int64_t p = 0; p < k; p++)
                    want += get(&a, i, p) * get(&b, p, j);
                check_exact(get(&c, i, j), (float)want, "gemm_bf16_f32", i, j);
            }
        check_gaps(&c, "gemm_bf16_f32");
    }
    /* float32 without accumulation: torch's naive orders (gemm_cpublas) on the same
     * operands, in the order flags pick (the values' sums are exact in any order) */
    if (!f64 && !accumulate) {
        const cpublas_order order = (cpublas_order)((flags >> 2) % 3);
        fill_canary(&c);
        if (gemm_cpublas(mview(&c), cview(&a), cview(&b), has_bias ? base(&bias) : NULL,
                         order) != 0)
            FAIL("gemm_cpublas failed");
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = has_bias ? get(&bias, 0, j) : 0.0;
                for (int64_t p = 0; p < k; p++)
                    want += get(&a, i, p) * get(&b, p, j);
                check_exact(get(&c, i, j), (float)want, "gemm_cpublas", i, j);
            }
        check_gaps(&c, "gemm_cpublas");
        if (!nonfinite)
            fuzz_gemm_bf16(&a, &b, has_bias ? &bias : NULL, flags);
    }
    free(start);
    free(a.block);
    free(b.block);
    free(c.block);
    free(bias.block);
}

/* out[m, n] = inp[m, k] @ weight[n, k]^T + bias */
static void fuzz_linear(reader *r, int f64, int nonfinite)
{
    int64_t m = next_size(r, 200), n = next_size(r, 70), k = next_size(r, 140);
    int has_bias = next_byte(r) & 1;
    operand x, w, out;
    make_operand(&x, r, m, k, f64, 0);
    make_operand(&w, r, n, k, f64, 0);
    fill(&x, r, nonfinite);
    fill(&w, r, nonfinite);
    size_t size = f64 ? 8 : 4;
    void *bias = malloc((size_t)(n > 0 ? n : 1) * size);
    for (int64_t j = 0; j < n; j++) {
        double v = next_value(r, nonfinite);
        if (f64)
            ((double *)bias)[j] = v;
        else
            ((float *)bias)[j] = (float)v;
    }
    out = (operand){malloc((size_t)(m * n > 0 ? m * n : 1) * size), m * n, 0, n, 1, m, n, f64};
    int rc = (f64 ? linear_forward_f64 : linear_forward_f32)(mview(&out), cview(&x), cview(&w),
                                                             has_bias ? bias : NULL);
    if (rc != 0)
        FAIL("linear returned %d", rc);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = has_bias ? (f64 ? ((double *)bias)[j] : ((float *)bias)[j]) : 0.0;
            for (int64_t p = 0; p < k; p++)
                want += get(&x, i, p) * get(&w, j, p);
            if (!f64)
                want = (float)want;
            check_exact(get(&out, i, j), want, "linear", i, j);
        }
    free(x.block);
    free(w.block);
    free(out.block);
    free(bias);
}

/* out[b] = inp[b] @ mat2[b]; batch strides from the input (0: one matrix for all) */
/* gemm_bf16_bmm on the same strided views as bfloat16 (the operands' blocks
 * converted in place: every stride the same, zero and negative ones too), with
 * an addend of the result's shape or one row per item (flags): each output one
 * rounding of its exact sum. */
static void fuzz_bmm_bf16(const operand *a, const operand *b, int64_t bt, int64_t n, int64_t m,
                          int64_t p, int64_t bs_a, int64_t bs_b, unsigned flags)
{
    const int with_add = (flags >> 2) & 1, one_row = (flags >> 3) & 1;
    uint16_t *a16 = malloc((size_t)(a->len + 1) * 2), *b16 = malloc((size_t)(b->len + 1) * 2);
    uint16_t *add = malloc((size_t)(bt * n * p + 1) * 2), *c = malloc((size_t)(bt * n * p + 1) * 2);
    if (a16 == NULL || b16 == NULL || add == NULL || c == NULL)
        FAIL("out of memory");
    for (int64_t e = 0; e < a->len; e++)
        a16[e] = mk_bf16_of_f32(((const float *)a->block)[e]);
    for (int64_t e = 0; e < b->len; e++)
        b16[e] = mk_bf16_of_f32(((const float *)b->block)[e]);
    for (int64_t e = 0; e < bt * n * p; e++)
        add[e] = mk_bf16_of_f32((float)(e % 7) - 3.0f);
    const mk_batch cv = {c, bt, n, p, n * p, p, 1};
    const mk_cbatch av = {a16 + a->offset, bt, n, m, bs_a, a->rs, a->cs};
    const mk_cbatch bv = {b16 + b->offset, bt, m, p, bs_b, b->rs, b->cs};
    const mk_cbatch addv = {add, bt, n, p, n * p, one_row ? 0 : p, 1};
    if (gemm_bf16_bmm(cv, av, bv, with_add ? &addv : NULL) != 0)
        FAIL("gemm_bf16_bmm failed");
    for (int64_t t = 0; t < bt; t++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < p; j++) {
                double want = with_add ? (double)mk_f32_of_bf16(add[t * n * p
                                                                  + (one_row ? 0 : i) * p + j])
                                       : 0.0;
                for (int64_t q = 0; q < m; q++) {
                    const int64_t ea = a->offset + (bs_a ? t * n : 0) * a->rs + i * a->rs + q * a->cs;
                    const int64_t eb = b->offset + (bs_b ? t * m : 0) * b->rs + q * b->rs + j * b->cs;
                    want += (double)mk_f32_of_bf16(a16[ea]) * (double)mk_f32_of_bf16(b16[eb]);
                }
                const uint16_t got = c[(t * n + i) * p + j];
                if (got != mk_bf16_of_f32((float)want))
                    FAIL("gemm_bf16_bmm: item %lld [%lld, %lld] %g, expected %g", (long long)t,
                         (long long)i, (long long)j, (double)mk_f32_of_bf16(got),
                         (double)mk_f32_of_bf16(mk_bf16_of_f32((float)want)));
            }
    free(a16);
    free(b16);
    free(add);
    free(c);
}

static void fuzz_bmm(reader *r, int f64, int nonfinite)
{
    int64_t bt = next_size(r, 5), n = next_size(r, 90), m = next_size(r, 120),
            p = next_size(r, 70);
    unsigned flags = next_byte(r);
    operand a, b;
    /* the batch as extra rows: item i is rows [i * n, (i + 1) * n) */
    make_operand(&a, r, bt * n, m, f64, 0);
    make_operand(&b, r, bt * m, p, f64, 0);
    fill(&a, r, nonfinite);
    fill(&b, r, nonfinite);
    int64_t bs_a = (flags & 1) ? 0 : n * a.rs, bs_b = (flags & 2) ? 0 : m * b.rs;
    size_t size = f64 ? 8 : 4;
    int64_t total = bt * n * p;
    void *out = malloc((size_t)(total > 0 ? total : 1) * size);
    const mk_batch ov = {out, bt, n, p, n * p, p, 1};
    const mk_cbatch av = {base(&a), bt, n, m, bs_a, a.rs, a.cs};
    const mk_cbatch bv = {base(&b), bt, m, p, bs_b, b.rs, b.cs};
    int rc = (f64 ? bmm_forward_f64 : bmm_forward_f32)(ov, av, bv);
    if (rc != 0)
        FAIL("bmm returned %d", rc);
    for (int64_t t = 0; t < bt; t++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < p; j++) {
                double want = 0.0;
                for (int64_t q = 0; q < m; q++) {
                    int64_t ra = (bs_a ? t * n : 0) + i, rb = (bs_b ? t * m : 0) + q;
                    want += get(&a, ra, q) * get(&b, rb, j);
                }
                if (!f64)
                    want = (float)want;
                int64_t e = (t * n + i) * p + j;
                double got = f64 ? ((double *)out)[e] : ((float *)out)[e];
                check_exact(got, want, "bmm", t * n + i, j);
            }
    if (!f64 && !nonfinite && mk_cpu_bf16_dot())
        fuzz_bmm_bf16(&a, &b, bt, n, m, p, bs_a, bs_b, flags);
    free(a.block);
    free(b.block);
    free(out);
}

/* A half-precision result (its bits) against a float64 reference: within an
 * ulp of the dtype (bfloat16 2^-8, float16 2^-10, relative) of `scale` (the
 * size of the terms it sums) plus the reference; NaN as NaN, infinities as
 * they are. */
static void check_half_close(uint16_t got_bits, double want, double scale, mk_half_kind kind,
                             const char *what, int64_t i)
{
    float g;
    mk_half_to_f32(&g, &got_bits, 1, kind);
    const double got = g, tol = (kind == MK_HALF_BF16 ? 0x1p-8 : 0x1p-10) * (scale + fabs(want))
                                + 1e-7;
    if (isnan(want) || isnan(got) || isinf(want) || isinf(got)) {
        if (!(isnan(want) && isnan(got)) && got != want)
            FAIL("%s[%lld] = %.9g, the reference gives %.9g", what, (long long)i, got, want);
        return;
    }
    if (fabs(got - want) > tol)
        FAIL("%s[%lld] = %.9g, the reference gives %.9g (tolerance %.3g)", what, (long long)i,
             got, want, tol);
}

/* softmax over the middle axis of [outer, n, inner], in place or not */
static void fuzz_softmax(reader *r, int f64, int nonfinite)
{
    int64_t outer = next_size(r, 20), n = next_size(r, 300), inner = next_size(r, 140);
    int in_place = next_byte(r) & 1;
    if (outer * n * inner > 200000)
        inner = 1;
    int64_t total = outer * n * inner;
    size_t size = f64 ? 8 : 4;
    void *x = malloc((size_t)(total > 0 ? total : 1) * size);
    double *ref = malloc((size_t)(total > 0 ? total : 1) * sizeof(double));
    for (int64_t e = 0; e < total; e++) {
        double v = next_value(r, nonfinite) * 4;
        ref[e] = v;
        if (f64)
            ((double *)x)[e] = v;
        else
            ((float *)x)[e] = (float)v;
    }
    void *out = in_place ? x : malloc((size_t)(total > 0 ? total : 1) * size);
    if (f64)
        softmax_forward_f64(out, x, outer, n, inner);
    else
        softmax_forward_f32(out, x, outer, n, inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < n; j++) {
                double v = ref[(o * n + j) * inner + i];
                if (v > mx || isnan(v))
                    mx = v;
            }
            for (int64_t j = 0; j < n; j++)
                sum += exp(ref[(o * n + j) * inner + i] - mx);
            for (int64_t j = 0; j < n; j++) {
                int64_t e = (o * n + j) * inner + i;
                double want = exp(ref[e] - mx) / sum;
                double got = f64 ? ((double *)out)[e] : ((float *)out)[e];
                check_close(got, want, 1.0, f64, "softmax", o * n + j, i);
            }
        }
    if (!in_place)
        free(out);
    free(x);
    /* float16 / bfloat16 rows (inner == 1): softmax_forward_half_rows and
     * softmax_backward_half_rows (torch's half kernels' orders) against float64
     * on the half values, in place */
    if (!f64 && inner == 1 && total > 0) {
        const mk_half_kind kind = (next_byte(r) & 1) ? MK_HALF_BF16 : MK_HALF_F16;
        float *w = malloc((size_t)total * sizeof(float)), *gw = malloc((size_t)total * 4);
        uint16_t *h = malloc((size_t)total * 2), *y = malloc((size_t)total * 2);
        for (int64_t e = 0; e < total; e++)
            w[e] = (float)ref[e];
        mk_f32_to_half(h, w, total, kind);
        mk_half_to_f32(w, h, total, kind);              /* the half input, widened */
        if (softmax_forward_half_rows(y, h, outer, n, kind) != 0)
            abort();
        mk_half_to_f32(gw, y, total, kind);             /* its output, widened */
        for (int64_t o = 0; o < outer; o++) {
            const float *x = w + o * n, *yo = gw + o * n;
            double mx = -INFINITY, sum = 0.0, dot = 0.0, dot_abs = 0.0;
            for (int64_t j = 0; j < n; j++)
                if (x[j] > mx || isnan(x[j]))
                    mx = x[j];
            for (int64_t j = 0; j < n; j++)
                sum += exp((double)x[j] - mx);
            for (int64_t j = 0; j < n; j++)
                check_half_close(y[o * n + j], exp((double)x[j] - mx) / sum, 0.0, kind,
                                 "softmax half rows", o * n + j);
            /* the backward, with the half input as the gradient of that output */
            for (int64_t j = 0; j < n; j++) {
                dot += (double)x[j] * yo[j];
                dot_abs += fabs((double)x[j] * yo[j]);
            }
            for (int64_t j = 0; j < n; j++) {   /* w: the reference; gw: its terms' size */
                const double xv = x[j], yv = yo[j];
                w[o * n + j] = (float)((xv - dot) * yv);
                gw[o * n + j] = (float)((fabs(xv) + dot_abs) * fabs(yv));
            }
        }
        if (softmax_backward_half_rows(h, h, y, outer, n, kind) != 0)
            abort();
        for (int64_t e = 0; e < total; e++)
            check_half_close(h[e], w[e], gw[e], kind, "softmax backward half rows", e);
        free(gw);
        free(w);
        free(h);
        free(y);
    }
    free(ref);
}

/* the fused MyAtt forward against the unfused formula (finite inputs) */
static void fuzz_tutorial(reader *r, int f64)
{
    int64_t S = next_size(r, 150), dq = next_size(r, 24), dk = next_size(r, 24),
            v1 = next_size(r, 40), v2 = next_size(r, 24), o = next_size(r, 24);
    operand q, k, v, wa, wc;
    make_operand(&q, r, S, dq, f64, 0);
    make_operand(&k, r, S, dk, f64, 0);
    make_operand(&v, r, v1, v2, f64, 0);
    fill(&q, r, 0);
    fill(&k, r, 0);
    fill(&v, r, 0);
    /* weights C-contiguous, as Linear holds them */
    wa = (operand){NULL, v1 * (dq + dk), 0, dq + dk, 1, v1, dq + dk, f64};
    wc = (operand){NULL, o * (dq + v2), 0, dq + v2, 1, o, dq + v2, f64};
    size_t size = f64 ? 8 : 4;
    wa.block = malloc((size_t)(wa.len > 0 ? wa.len : 1) * size);
    wc.block = malloc((size_t)(wc.len > 0 ? wc.len : 1) * size);
    fill(&wa, r, 0);
    fill(&wc, r, 0);
    operand ba = {malloc((size_t)(v1 > 0 ? v1 : 1) * size), v1, 0, 0, 1, 1, v1, f64};
    operand bc = {malloc((size_t)(o > 0 ? o : 1) * size), o, 0, 0, 1, 1, o, f64};
    fill(&ba, r, 0);
    fill(&bc, r, 0);
    void *out = malloc((size_t)(S * o > 0 ? S * o : 1) * size);
    void *attn = malloc((size_t)(S * v1 > 0 ? S * v1 : 1) * size);
    const tutorial_inputs in = {
        .q = cview(&q), .k = cview(&k), .v = cview(&v), .w_attn = cview(&wa),
        .w_comb = cview(&wc), .b_attn = ba.block, .b_comb = bc.block,
    };
    int rc = (f64 ? tutorial_forward_f64 : tutorial_forward_f32)(out, attn, &in);
    if (rc != 0)
        FAIL("tutorial returned %d", rc);
    double *w = malloc((size_t)(v1 > 0 ? v1 : 1) * sizeof(double));
    double *app = malloc((size_t)(v2 > 0 ? v2 : 1) * sizeof(double));
    for (int64_t s = 0; s < S; s++) {
        /* scores (exact), softmax */
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < v1; j++) {
            double t = get(&ba, 0, j);
            for (int64_t p = 0; p < dq; p++)
                t += get(&q, s, p) * get(&wa, j, p);
            for (int64_t p = 0; p < dk; p++)
                t += get(&k, s, p) * get(&wa, j, dq + p);
            if (!f64)
                t = (float)t;
            w[j] = t;
            if (t > mx)
                mx = t;
        }
        for (int64_t j = 0; j < v1; j++)
            sum += exp(w[j] - mx);
        for (int64_t j = 0; j < v1; j++) {
            w[j] = exp(w[j] - mx) / sum;
            double got = f64 ? ((double *)attn)[s * v1 + j] : ((float *)attn)[s * v1 + j];
            check_close(got, w[j], 1.0, f64, "tutorial attn_weights", s, j);
        }
        /* applied = w @ v (weights in [0, 1]: scale = max |v| * 1) */
        double vmax = 0.0;
        for (int64_t c2 = 0; c2 < v2; c2++) {
            double t = 0.0;
            for (int64_t j = 0; j < v1; j++) {
                t += w[j] * get(&v, j, c2);
                if (fabs(get(&v, j, c2)) > vmax)
                    vmax = fabs(get(&v, j, c2));
            }
            app[c2] = t;
        }
        for (int64_t j = 0; j < o; j++) {
            double t = get(&bc, 0, j), scale = fabs(t);
            for (int64_t p = 0; p < dq; p++) {
                t += get(&q, s, p) * get(&wc, j, p);
                scale += fabs(get(&q, s, p) * get(&wc, j, p));
            }
            for (int64_t p = 0; p < v2; p++) {
                t += app[p] * get(&wc, j, dq + p);
                scale += (vmax + 1.0) * fabs(get(&wc, j, dq + p));
            }
            double got = f64 ? ((double *)out)[s * o + j] : ((float *)out)[s * o + j];
            check_close(got, t, scale * (double)(v1 + v2 + dq + 8), f64, "tutorial output", s, j);
        }
    }
    free(w);
    free(app);
    free(q.block);
    free(k.block);
    free(v.block);
    free(wa.block);
    free(wc.block);
    free(ba.block);
    free(bc.block);
    free(out);
    free(attn);
}

/* ---- scaled dot-product attention (sdpa.h) ---------------------------------
 *
 * The flash kernel, forward and backward, against the naive formula in double
 * (every score, the softmax of each row, then the sums).  q and k are
 * multiples of 1/16 in [-2, 2), so every score q . k is exact in float32
 * (|q . k| <= 4 E, a multiple of 1/256, far below 2^24 / 256): what a bound
 * allows is the rounding that follows (the scaling, the mask's addition, with
 * prescale the scaled q and k, exp, the sums), a few units of rounding times
 * the magnitude of the terms (the same sums of absolute values), and tiny
 * weights flushed to 0.  A row with every key masked must give exact zeros and
 * an lse of 0; the forward and the backward must give the same bits on one
 * thread as on several (sdpa.h).  Operands are general strided tensors: any
 * axis order, padding, reversed axes, zero strides, broadcast batch
 * dimensions, GQA heads, masks of any broadcastable shape. */

#define FZ_DIMS 4   /* up to two batch dimensions, rows, columns */

/* The reference's loops are not traced for coverage (libFuzzer's comparison
 * hooks made them 30 times slower): the kernels' coverage guides the search. */
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))

typedef struct {
    void *block;
    int64_t len, offset;
    int elsize;     /* 1 (a bool mask), 4, 8 */
    int nd;
    int64_t dim[FZ_DIMS], st[FZ_DIMS];
} tensor;

/* Values: the input's bytes, then (past its end) a generator seeded by the
 * input, so that long sequences still get varied values. */
typedef struct {
    reader *r;
    uint64_t state;
} source;

static unsigned source_byte(source *s)
{
    if (s->r->n > 0)
        return next_byte(s->r);
    s->state = s->state * 6364136223846793005u + 1442695040888963407u;
    return (unsigned)(s->state >> 56);
}

/* A tensor of shape dim[0:nd] in a layout the input chooses: axes in any
 * memory order, each padded by 0..4, reversed, or (an input's) of stride 0. */
static void make_tensor(tensor *t, reader *r, int nd, const int64_t *dim, int elsize, int input)
{
    int order[FZ_DIMS];   /* memory order, innermost first: C order unless shuffled */
    unsigned perm = next_byte(r);
    for (int a = 0; a < nd; a++)
        order[a] = nd - 1 - a;
    if (perm & 1)
        for (int a = nd - 1; a > 0; a--) {
            perm >>= 1;
            int s = (int)(perm % (unsigned)(a + 1)), x = order[a];
            order[a] = order[s];
            order[s] = x;
        }
    t->nd = nd;
    t->elsize = elsize;
    int64_t run = 1, lo = 0, hi = 0, empty = 0;
    for (int a = 0; a < nd; a++) {
        const int x = order[a];
        const unsigned ax = next_byte(r);
        t->dim[x] = dim[x];
        t->st[x] = run;
        run *= dim[x] + ((ax & 3) == 3 ? 1 + ((ax >> 2) & 3) : 0);
        if ((ax & 0x30) == 0x30)
            t->st[x] = -t->st[x];
        if (input && (ax & 0xe0) == 0xe0)
            t->st[x] = 0;
        empty |= dim[x] == 0;
    }
    for (int a = 0; a < nd; a++) {
        const int64_t e = (dim[a] - 1) * t->st[a];
        lo += e < 0 ? e : 0;
        hi += e > 0 ? e : 0;
    }
    t->len = empty ? 0 : hi - lo + 1;
    t->offset = empty ? 0 : -lo;
    t->block = malloc((size_t)(t->len > 0 ? t->len : 1) * (size_t)elsize);
    if (t->block == NULL)
        FAIL("out of memory");
}

/* element e of a buffer of the kernel's dtype (float64 or float32) */
NO_COVERAGE static double buf_get(const void *a, int64_t e, int f64)
{
    return f64 ? ((const double *)a)[e] : (double)((const float *)a)[e];
}

static void buf_set(void *a, int64_t e, int f64, double v)
{
    if (f64)
        ((double *)a)[e] = v;
    else
        ((float *)a)[e] = (float)v;
}

/* A buffer of n elements of the kernel's dtype, each `v`. */
static void *new_buf(int64_t n, int f64, double v)
{
    void *a = malloc((size_t)(n > 0 ? n : 1) * (f64 ? 8 : 4));
    if (a == NULL)
        FAIL("out of memory");
    for (int64_t e = 0; e < n; e++)
        buf_set(a, e, f64, v);
    return a;
}

/* element e of the block (e: an offset from the block's start) */
NO_COVERAGE static double tval(const tensor *t, int64_t e)
{
    return t->elsize == 1 ? (double)((unsigned char *)t->block)[e]
                          : buf_get(t->block, e, t->elsize == 8);
}

static void tset(tensor *t, int64_t e, double v)
{
    if (t->elsize == 1)
        ((unsigned char *)t->block)[e] = v != 0.0;
    else
        buf_set(t->block, e, t->elsize == 8, v);
}

/* The kernel's view (the glue's convention: stride 0 along a dimension of 1). */
static sdpa_operand sdpa_view(const tensor *t, int nb)
{
    sdpa_operand op;
    memset(&op, 0, sizeof op);
    op.data = (const char *)t->block + t->offset * t->elsize;
    for (int d = 0; d < nb; d++) {
        op.bs[d] = t->dim[d] == 1 ? 0 : t->st[d];
        op.bd[d] = t->dim[d];
    }
    op.rs = t->dim[nb] == 1 ? 0 : t->st[nb];
    op.cs = t->dim[nb + 1] == 1 ? 0 : t->st[nb + 1];
    return op;
}

/* For output batch index idx: the block offset of the tensor's [row 0, col 0]
 * and its own flat batch index (C order over its own batch sizes); along the
 * last batch dimension (heads) the index is divided by `group` (GQA). */
NO_COVERAGE static int64_t own_base(const tensor *t, int nb, int64_t group, const int64_t *idx,
                        int64_t *flat)
{
    int64_t e = t->offset, f = 0;
    for (int d = 0; d < nb; d++) {
        const int64_t x = t->dim[d] == 1 ? 0 : d == nb - 1 ? idx[d] / group : idx[d];
        e += x * t->st[d];
        f = f * t->dim[d] + x;
    }
    if (flat != NULL)
        *flat = f;
    return e;
}

/* |got - want| <= tol, both finite */
static void check_bound(double got, double want, double tol, const char *what, int64_t b,
                        int64_t i, int64_t j)
{
    if (!(fabs(got - want) <= tol))
        FAIL("%s[%lld][%lld, %lld] = %.17g, the reference gives %.17g (bound %.3g)", what,
             (long long)b, (long long)i, (long long)j, got, want, tol);
}

NO_COVERAGE static void fuzz_sdpa(reader *r, int f64)
{
    const int elsize = f64 ? 8 : 4;
    const double eps = f64 ? 0x1p-52 : 0x1p-23;
    /* flushed weights (exp below about -87 in float32) and their products */
    const double floor_ = f64 ? 1e-290 : 1e-28;

    /* shape: batch dimensions, GQA, sizes (a few long ones), then the work capped */
    const unsigned shape = next_byte(r);
    const int nb = (int)(shape % 3);
    int64_t batch[2] = {1, 1}, kvh = 0, group = 1;
    for (int d = 0; d < nb; d++) {
        const unsigned x = next_byte(r);
        batch[d] = x % 16 == 15 ? 0 : 1 + x % 3;
    }
    if (nb > 0 && (shape & 4)) {   /* GQA: the heads are kv heads x group */
        kvh = 1 + next_size(r, 2);
        group = 2 + next_size(r, 2);
        batch[nb - 1] = kvh * group;
    }
    const int cls = (int)((shape >> 3) & 3);   /* 0, 1: small; 2: long L; 3: long S */
    int64_t L = next_size(r, cls == 2 ? 800 : 40), S = next_size(r, cls == 3 ? 1100 : 40);
    const int64_t E = next_size(r, cls >= 2 ? 24 : 81), Ev = next_size(r, cls >= 2 ? 24 : 81);
    const int64_t nbt = batch[0] * batch[1];
    while ((double)nbt * (double)L * (double)S * (double)(E + Ev + 2) > 4e6) {
        if (L >= S)
            L /= 2;
        else
            S /= 2;
    }

    /* each operand's batch sizes: the output's, 1 (broadcast) or, for key and
     * value along the heads, the kv heads */
    const unsigned bc = next_byte(r), vmode = next_byte(r) % 3;
    int64_t qd[FZ_DIMS], kd[FZ_DIMS], vd[FZ_DIMS], md[FZ_DIMS];
    for (int d = 0; d < nb; d++) {
        qd[d] = (bc >> d) & 1 ? 1 : batch[d];
        kd[d] = (bc >> (2 + d)) & 1 ? 1 : batch[d];
        vd[d] = (bc >> (4 + d)) & 1 ? 1 : batch[d];
        md[d] = (bc >> (6 + d)) & 1 ? 1 : batch[d];
    }
    if (kvh > 0) {
        kd[nb - 1] = (bc >> (2 + nb - 1)) & 1 ? 1 : kvh;
        vd[nb - 1] = vmode == 0 ? kd[nb - 1] : vmode == 1 ? batch[nb - 1] : 1;
    }
    qd[nb] = L; qd[nb + 1] = E;
    kd[nb] = S; kd[nb + 1] = E;
    vd[nb] = S; vd[nb + 1] = Ev;

    /* the problem's options */
    const unsigned opt = next_byte(r), mopt = next_byte(r), thr = next_byte(r);
    static const double scales[7] = {1.0, 0.5, 0.25, -0.5, -1.0, 0.125, 2.0};
    const unsigned si = next_byte(r) % 8;
    const double scale = si < 7 ? scales[si] : E > 0 ? 1.0 / sqrt((double)E) : 1.0;
    static const double drops[4] = {0.25, 0.5, 1.0, 0.75};
    const double dropout_p = (opt & 0x30) == 0x30 ? drops[(opt >> 6) & 3] : 0.0;
    const int causal = opt & 1, prescale = (opt >> 1) & 1, backward = (opt >> 2) & 1;
    const int no_lse = !backward && ((opt >> 3) & 1);
    /* a bfloat16 call's forward (the glue's flash path): its weights rounded to
     * bfloat16 before @ v (2^-8 of each, relative), torch's fexp_u20 (2^-14), and on
     * a CPU with it the products on vdpbf16ps (the values are exact in bfloat16) */
    const int half = !f64 && !prescale && !backward && ((mopt >> 5) & 1);
    const sdpa_mask_kind mask_kind = mopt % 3 == 0 ? SDPA_MASK_NONE
                                   : mopt % 3 == 1 ? SDPA_MASK_BOOL : SDPA_MASK_FLOAT;
    const int neg_inf = (mopt >> 2) & 1;   /* a float mask with -inf entries */
    md[nb] = (mopt >> 3) & 1 ? 1 : L;
    md[nb + 1] = (mopt >> 4) & 1 ? 1 : S;
    uint64_t seed = 0;
    for (int b = 0; b < 8; b++)
        seed = seed << 8 | next_byte(r);

    tensor q, k, v, mask = {0};
    make_tensor(&q, r, nb + 2, qd, elsize, 1);
    make_tensor(&k, r, nb + 2, kd, elsize, 1);
    make_tensor(&v, r, nb + 2, vd, elsize, 1);
    if (mask_kind != SDPA_MASK_NONE)
        make_tensor(&mask, r, nb + 2, md, mask_kind == SDPA_MASK_BOOL ? 1 : elsize, 1);
    source src = {r, seed};
    for (int64_t e = 0; e < q.len; e++)
        tset(&q, e, ((int)(source_byte(&src) % 64) - 32) / 16.0);
    for (int64_t e = 0; e < k.len; e++)
        tset(&k, e, ((int)(source_byte(&src) % 64) - 32) / 16.0);
    for (int64_t e = 0; e < v.len; e++)
        tset(&v, e, ((int)source_byte(&src) - 128) / 16.0);
    for (int64_t e = 0; e < mask.len; e++) {
        const unsigned b = source_byte(&src);
        if (mask_kind == SDPA_MASK_BOOL)   /* keep: a share the input sets, now and then none */
            tset(&mask, e, thr == 255 ? b == 255 : b >= thr / 2);
        else
            tset(&mask, e, neg_inf && b < 24 ? -INFINITY : ((int)b - 128) / 16.0);
    }

    sdpa_problem p;
    memset(&p, 0, sizeof p);
    p.L = L; p.S = S; p.E = E; p.Ev = Ev;
    p.nbatch = nb;
    for (int d = 0; d < nb; d++)
        p.batch[d] = batch[d];
    p.q = sdpa_view(&q, nb);
    p.k = sdpa_view(&k, nb);
    p.v = sdpa_view(&v, nb);
    if (mask_kind != SDPA_MASK_NONE)
        p.mask = sdpa_view(&mask, nb);
    p.mask_kind = mask_kind;
    /* GQA as the glue sets it: a kv head stride taken along the query's heads;
     * one kv head is plain broadcasting */
    const int64_t k_group = nb > 0 && kd[nb - 1] > 1 ? batch[nb - 1] / kd[nb - 1] : 1;
    const int64_t v_group = nb > 0 && vd[nb - 1] > 1 ? batch[nb - 1] / vd[nb - 1] : 1;
    p.k_group = k_group;
    p.v_group = v_group;
    p.is_causal = causal;
    p.scale = scale;
    p.prescale = prescale;
    p.dropout_p = dropout_p;
    p.dropout_seed = seed;
    p.round_weights = half ? MK_HALF_BF16 : MK_HALF_NONE;

    /* the forward (and backward), then again on one thread: the same bits */
    const int threads = mk_get_num_threads();
    const int64_t n_out = nbt * L * Ev, n_lse = nbt * L;
    int64_t n_grad[3] = {L * E, S * E, S * Ev};
    const int64_t *own_dims[3] = {qd, kd, vd};
    for (int g = 0; g < 3; g++)
        for (int d = 0; d < nb; d++)
            n_grad[g] *= own_dims[g][d];
    void *out[2], *lse[2], *grad[2][3], *dout = new_buf(n_out, f64, 0.0);
    for (int64_t e = 0; e < n_out; e++)
        buf_set(dout, e, f64, ((int)source_byte(&src) - 128) / 16.0);
    const int runs = threads > 1 ? 2 : 1;
    for (int run = 0; run < runs; run++) {
        mk_set_num_threads(run == 0 ? threads : 1);
        out[run] = new_buf(n_out, f64, CANARY);   /* every element must be written */
        lse[run] = malloc((size_t)(n_lse > 0 ? n_lse : 1) * sizeof(double));
        if ((f64 ? sdpa_forward_f64 : sdpa_forward_f32)(out[run], no_lse ? NULL : lse[run], &p))
            FAIL("sdpa_forward returned an error");
        for (int g = 0; g < 3; g++)
            grad[run][g] = new_buf(n_grad[g], f64, CANARY);
        if (backward) {
            const sdpa_grads gr = {grad[run][0], grad[run][1], grad[run][2], dout, out[run],
                                   lse[run]};
            if ((f64 ? sdpa_backward_f64 : sdpa_backward_f32)(&gr, &p))
                FAIL("sdpa_backward returned an error");
        }
    }
    mk_set_num_threads(threads);
    if (runs == 2) {
        if (memcmp(out[0], out[1], (size_t)n_out * (size_t)elsize) != 0
                || (!no_lse && memcmp(lse[0], lse[1], (size_t)n_lse * sizeof(double)) != 0))
            FAIL("sdpa_forward: %d threads and 1 thread give different bits", threads);
        for (int g = 0; backward && g < 3; g++)
            if (memcmp(grad[0][g], grad[1][g], (size_t)n_grad[g] * (size_t)elsize) != 0)
                FAIL("sdpa_backward: %d threads and 1 thread give different bits (d%c)",
                     threads, "qkv"[g]);
    }

    /* the reference, row by row; the backward's sums and bounds accumulated */
    double *ref[3], *tol[3];
    for (int g = 0; g < 3; g++) {
        ref[g] = calloc((size_t)(n_grad[g] > 0 ? n_grad[g] : 1), sizeof(double));
        tol[g] = calloc((size_t)(n_grad[g] > 0 ? n_grad[g] : 1), sizeof(double));
    }
    const int64_t S1 = S > 0 ? S : 1, Ev1 = Ev > 0 ? Ev : 1;
    double *s = malloc((size_t)S1 * sizeof(double)), *w = malloc((size_t)S1 * sizeof(double));
    double *drop = malloc((size_t)S1 * sizeof(double));
    double *dP = malloc((size_t)S1 * sizeof(double)), *dPm = malloc((size_t)S1 * sizeof(double));
    double *oref = malloc((size_t)Ev1 * sizeof(double)), *otol = malloc((size_t)Ev1 * sizeof(double));
    /* the scores' rounding: with prescale and sqrt|scale| not a power of two,
     * that of the scaled q and k and of their products' sum */
    const double a = sqrt(fabs(scale));
    int ae;
    const int exact_a = a * a == fabs(scale) && frexp(a, &ae) == 0.5;
    const double kprod = prescale && !exact_a ? (double)E + 4.0 : 0.0;
    const double accrel = 4.0 * eps * (double)(S + L * nbt + E + Ev + 16);
    const double keep_scale = dropout_p < 1.0 ? 1.0 / (1.0 - dropout_p) : 0.0;
    int nan_rows = 0;
    for (int64_t b = 0; b < nbt; b++) {
        int64_t idx[2] = {0, 0}, rest = b, fq, fk, fv;
        for (int d = nb - 1; d >= 0; d--) {
            idx[d] = rest % batch[d];
            rest /= batch[d];
        }
        const int64_t bq = own_base(&q, nb, 1, idx, &fq), bk = own_base(&k, nb, k_group, idx, &fk);
        const int64_t bv = own_base(&v, nb, v_group, idx, &fv);
        const int64_t bm = mask_kind != SDPA_MASK_NONE ? own_base(&mask, nb, 1, idx, NULL) : 0;
        double *dq = ref[0] + fq * L * E, *dk = ref[1] + fk * S * E, *dv = ref[2] + fv * S * Ev;
        double *tq = tol[0] + fq * L * E, *tk = tol[1] + fk * S * E, *tv = tol[2] + fv * S * Ev;
        for (int64_t i = 0; i < L; i++) {
            const int64_t qi = bq + i * q.st[nb];
            double m = -INFINITY, ms = 0.0, mm = 0.0;
            for (int64_t j = 0; j < S; j++) {
                const int64_t kj = bk + j * k.st[nb];
                double dot = 0.0, mag = 0.0;
                for (int64_t e = 0; e < E; e++) {
                    const double x = tval(&q, qi + e * q.st[nb + 1]) * tval(&k, kj + e * k.st[nb + 1]);
                    dot += x;
                    mag += fabs(x);
                }
                double sc = dot * scale;
                ms = fabs(scale) * mag > ms ? fabs(scale) * mag : ms;
                if (causal && j > i)   /* hidden (sdpa.h: without prescale, -inf * scale) */
                    sc = !prescale && scale < 0 && E > 0 ? INFINITY : -INFINITY;
                if (mask_kind != SDPA_MASK_NONE) {
                    const double mv = tval(&mask, bm + i * p.mask.rs + j * p.mask.cs);
                    if (mask_kind == SDPA_MASK_BOOL)
                        sc += mv != 0.0 ? 0.0 : -INFINITY;
                    else {
                        sc += mv;
                        mm = isinf(mv) || fabs(mv) <= mm ? mm : fabs(mv);
                    }
                }
                s[j] = sc;
                m = sc > m || isnan(sc) ? sc : m;
                drop[j] = sdpa_dropout_uniform(seed, b, i, j) < dropout_p ? 0.0 : keep_scale;
            }
            const double got_lse = no_lse ? 0.0 : ((double *)lse[0])[b * L + i];
#define OUT_AT(c) buf_get(out[0], (b * L + i) * Ev + (c), f64)
            if (m == -INFINITY) {   /* every key masked: zeros, lse 0, no gradient */
                for (int64_t c = 0; c < Ev; c++)
                    if (OUT_AT(c) != 0.0)
                        FAIL("sdpa out[%lld][%lld, %lld] = %g, a fully masked row gives 0",
                             (long long)b, (long long)i, (long long)c, OUT_AT(c));
                if (got_lse != 0.0)
                    FAIL("sdpa lse[%lld][%lld] = %g, a fully masked row gives 0",
                         (long long)b, (long long)i, got_lse);
                continue;
            }
            if (!isfinite(m)) {   /* a +inf or NaN score: the row is NaN (and so its gradients) */
                for (int64_t c = 0; c < Ev; c++)
                    if (!isnan(OUT_AT(c)))
                        FAIL("sdpa out[%lld][%lld, %lld] = %g, a row with a +inf score gives NaN",
                             (long long)b, (long long)i, (long long)c, OUT_AT(c));
                if (!no_lse && !isnan(got_lse))
                    FAIL("sdpa lse[%lld][%lld] = %g, a row with a +inf score gives NaN",
                         (long long)b, (long long)i, got_lse);
                nan_rows = 1;
                continue;
            }
            double sum = 0.0;
            for (int64_t j = 0; j < S; j++)
                sum += exp(s[j] - m);
            const double want_lse = m + log(sum);
            const double serr = eps * (kprod * ms + 2.0 * (ms + mm));
            const double lse_tol = 2.0 * serr + 8.0 * eps * (double)(S + 8) + eps * fabs(want_lse)
                                   + (half ? 0x1p-12 : 0.0);
            if (!no_lse)
                check_bound(got_lse, want_lse, lse_tol, "sdpa lse", b, i, 0);
            const double rel = 2.0 * serr + 8.0 * eps * (double)(S + 8);
            for (int64_t j = 0; j < S; j++)
                w[j] = exp(s[j] - m) / sum;
            for (int64_t c = 0; c < Ev; c++) {
                double o = 0.0, mag = 0.0;
                for (int64_t j = 0; j < S; j++) {
                    const double x = w[j] * drop[j] * tval(&v, bv + j * v.st[nb] + c * v.st[nb + 1]);
                    o += x;
                    mag += fabs(x);
                }
                oref[c] = o;
                otol[c] = (rel + accrel + (half ? 0x1p-7 : 0.0)) * mag + floor_;
                check_bound(OUT_AT(c), o, otol[c], "sdpa out", b, i, c);
            }
            if (!backward)
                continue;
            /* D = dout . out (the kernel's out: its error bounded above) */
#define DOUT_AT(c) buf_get(dout, (b * L + i) * Ev + (c), f64)
            double Dref = 0.0, Dmag = 0.0, Derr = 0.0;
            for (int64_t c = 0; c < Ev; c++) {
                Dref += DOUT_AT(c) * oref[c];
                Derr += fabs(DOUT_AT(c)) * otol[c];
            }
            for (int64_t j = 0; j < S; j++) {
                double x = 0.0, mag = 0.0;
                for (int64_t c = 0; c < Ev; c++) {
                    const double t = DOUT_AT(c) * tval(&v, bv + j * v.st[nb] + c * v.st[nb + 1]);
                    x += t;
                    mag += fabs(t);
                }
                dP[j] = drop[j] * x;
                dPm[j] = drop[j] * mag;
                Dmag += w[j] * dPm[j];
            }
            Derr += accrel * Dmag;
            const double relb = 2.0 * serr + 2.0 * lse_tol + 16.0 * eps;
            for (int64_t j = 0; j < S; j++) {
                if (w[j] == 0.0)
                    continue;
                const double dS = w[j] * (dP[j] - Dref);
                const double dSm = w[j] * (dPm[j] + Dmag);
                const double dSe = w[j] * ((relb + accrel) * (dPm[j] + Dmag) + Derr);
                const int64_t kj = bk + j * k.st[nb];
                for (int64_t e = 0; e < E; e++) {
                    const double kv = tval(&k, kj + e * k.st[nb + 1]);
                    const double qv = tval(&q, qi + e * q.st[nb + 1]);
                    dq[i * E + e] += scale * dS * kv;
                    tq[i * E + e] += fabs(scale) * fabs(kv) * (dSe + accrel * dSm);
                    dk[j * E + e] += scale * dS * qv;
                    tk[j * E + e] += fabs(scale) * fabs(qv) * (dSe + accrel * dSm);
                }
                for (int64_t c = 0; c < Ev; c++) {
                    const double x = w[j] * drop[j] * DOUT_AT(c);
                    dv[j * Ev + c] += x;
                    tv[j * Ev + c] += fabs(x) * (relb + accrel);
                }
            }
#undef DOUT_AT
#undef OUT_AT
        }
    }
    for (int g = 0; backward && !nan_rows && g < 3; g++) {
        static const char *names[3] = {"sdpa dq", "sdpa dk", "sdpa dv"};
        const int64_t cols = g == 2 ? Ev : E;
        for (int64_t e = 0; e < n_grad[g]; e++) {
            check_bound(buf_get(grad[0][g], e, f64), ref[g][e], tol[g][e] + floor_, names[g], 0, e / (cols > 0 ? cols : 1),
                        cols > 0 ? e % cols : 0);
        }
    }

    for (int g = 0; g < 3; g++) {
        free(ref[g]);
        free(tol[g]);
    }
    for (int run = 0; run < runs; run++) {
        free(out[run]);
        free(lse[run]);
        for (int g = 0; g < 3; g++)
            free(grad[run][g]);
    }
    free(s);
    free(w);
    free(drop);
    free(dP);
    free(dPm);
    free(oref);
    free(otol);
    free(dout);
    free(q.block);
    free(k.block);
    free(v.block);
    free(mask.block);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    unsigned head = next_byte(&r);
    int f64 = (head >> 3) & 1, nonfinite = (head >> 4) & 1;
    mk_set_num_threads(1 + (int)((head >> 5) & 3));
    switch (head % 6) {
    case 0: fuzz_gemm(&r, f64, nonfinite); break;
    case 1: fuzz_linear(&r, f64, nonfinite); break;
    case 2: fuzz_softmax(&r, f64, nonfinite); break;
    case 3: fuzz_bmm(&r, f64, nonfinite); break;
    case 4: fuzz_tutorial(&r, f64); break;
    default: fuzz_sdpa(&r, f64); break;
    }
    return 0;
}
