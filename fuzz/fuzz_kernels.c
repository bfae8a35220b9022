/* libFuzzer harness over the pure-C kernels (csrc/kernels): gemm, linear,
 * softmax, bmm and the fused MyAtt forward, in float32 and float64, with
 * random sizes, strides (transposed, padded, negative, zero), thread counts and
 * values, checked against a plain reference written here.
 *
 * Every operand lives in a malloc block of exactly the size its strides reach,
 * so AddressSanitizer sees any read or write out of bounds; the gaps of padded
 * outputs hold canaries that must survive.  Finite inputs are multiples of
 * 1/16 in [-8, 8): every product and partial sum of a gemm is exact in float32
 * (k < 256), so gemm, linear and bmm must equal the reference bit for bit in
 * any summation order; with NaN/inf inputs they must give the same NaN/inf
 * pattern.  softmax and MyAtt are checked within a rounding bound.
 *
 * Build and run: fuzz/run_kernels.sh (README, "Reliability"). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bmm.h"
#include "gemm.h"
#include "linear.h"
#include "myatt.h"
#include "softmax.h"
#include "threads.h"

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
    free(a.block);
    free(b.block);
    free(out);
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
    free(ref);
}

/* the fused MyAtt forward against the unfused formula (finite inputs) */
static void fuzz_myatt(reader *r, int f64)
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
    const myatt_inputs in = {
        .q = cview(&q), .k = cview(&k), .v = cview(&v), .w_attn = cview(&wa),
        .w_comb = cview(&wc), .b_attn = ba.block, .b_comb = bc.block,
    };
    int rc = (f64 ? myatt_forward_f64 : myatt_forward_f32)(out, attn, &in);
    if (rc != 0)
        FAIL("myatt returned %d", rc);
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
            check_close(got, w[j], 1.0, f64, "myatt attn_weights", s, j);
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
            check_close(got, t, scale * (double)(v1 + v2 + dq + 8), f64, "myatt output", s, j);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    unsigned head = next_byte(&r);
    int f64 = (head >> 3) & 1, nonfinite = (head >> 4) & 1;
    mk_set_num_threads(1 + (int)((head >> 5) & 3));
    switch (head % 5) {
    case 0: fuzz_gemm(&r, f64, nonfinite); break;
    case 1: fuzz_linear(&r, f64, nonfinite); break;
    case 2: fuzz_softmax(&r, f64, nonfinite); break;
    case 3: fuzz_bmm(&r, f64, nonfinite); break;
    default: fuzz_myatt(&r, f64); break;
    }
    return 0;
}
