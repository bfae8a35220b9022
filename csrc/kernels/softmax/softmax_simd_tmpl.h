/* softmax on one vector ISA, written once: included by softmax_avx2.c and
 * softmax_avx512.c once per dtype (after their vocabulary, simd_avx2.h /
 * simd_avx512.h) with
 *   T                    float or double
 *   VEC(op)              the vocabulary of T's vectors (avx2_f32_##op): its
 *                        vector ops, VEC(exp) (Sleef's, simd_exp_sleef.h) and
 *                        VEC(reduce_add / reduce_max) (torch's, simd_reduce_torch.h)
 *   SOFTMAX_SIMD(name)   the names of the functions defined: name##_f32_avx2 ...
 * defined; it defines the static SOFTMAX_SIMD(softmax_forward),
 * SOFTMAX_SIMD(softmax_backward_rows) and SOFTMAX_SIMD(softmax_exp) (the
 * members of softmax_kernels_f32 / _f64, softmax_internal.h) and undefines its
 * parameters at its end.  No include guard on purpose.
 *
 * The last axis (the module's case) is torch's kernel, bit for bit (see
 * SOFTMAX_SIMD(softmax_row)).  Other axes: three fused passes per slice, as torch does:
 * (1) max, (2) e = exp(x - max) stored into out while summing, (3) out *= 1 / sum,
 * with sums kept in double (not torch's bits, within its tolerance).
 *
 * NaN and inf: the max may skip a NaN (VEC(max)), which does not matter: a NaN x
 * gives exp(NaN - max) = NaN, hence a NaN sum and a NaN slice.  A slice of -inf
 * only (max = -inf) and a slice holding +inf (max = +inf) give -inf - -inf or
 * inf - inf = NaN the same way, as in torch.  x - max very negative (or -inf)
 * gives exactly 0 (VEC(exp) clamps its argument), never garbage.
 *
 * Sums along other axes: T vector accumulators over blocks of a few dozen
 * rows, each block's sum added into a double. */

#if !defined(T) || !defined(VEC) || !defined(SOFTMAX_SIMD)
#error "softmax_simd_tmpl.h: define T, VEC and SOFTMAX_SIMD"
#endif

#include <math.h>
#include <stdint.h>

/* ---- the vector exp alone, over an array (for benchmarks/exp_ulp.c) ---- */

static void SOFTMAX_SIMD(softmax_exp)(T *out, const T *inp, int64_t n)
{
    int64_t j = 0;
    for (; j + VEC(len) <= n; j += VEC(len))
        VEC(storeu)(out + j, VEC(exp)(VEC(loadu)(inp + j)));
    if (j < n) {
        const VEC(mask) m = VEC(mask_first)((int)(n - j));
        VEC(store_mask)(out + j, m, VEC(exp)(VEC(load_or)(m, inp + j, VEC(set1)((T)0))));
    }
}

/* ---- last axis: each row inp[r, 0:n], as torch's _vec_softmax_lastdim ---- */

/* One row, torch's four passes with its vector width (VEC(len)) and reduction
 * orders (vec::reduce_all), so the result is torch's bit for bit:
 *   1. max: a row shorter than VEC(len) is folded in order; else lane-wise over
 *      whole vectors from the first, the tail's lanes merged into the first
 *      lanes, then the lanes reduced (VEC(reduce_max));
 *   2. out = exp(x - max) (Sleef's exp, as torch);
 *   3. sum of out, reduced exactly as the max (fused into pass 2 here: the same
 *      additions in the same order);
 *   4. out *= 1 / sum.
 * NaN anywhere gives a NaN max, hence a NaN row; a row of only -inf, or one
 * holding +inf, gives -inf - -inf or inf - inf = NaN the same way, as in torch. */
MYATT_SIMD_FN void SOFTMAX_SIMD(softmax_row)(T *out_r, const T *inp_r, int64_t n)
{
    const int64_t full = n - n % VEC(len);   /* elements in whole vectors */
    const VEC(t) zero = VEC(set1)((T)0);
    const VEC(mask) tail = VEC(mask_first)((int)(n - full));

    /* 1. max */
    T max = inp_r[0];
    if (n < VEC(len)) {
        for (int64_t j = 1; j < n; j++)
            max = VEC(lane_max_nan)(max, inp_r[j]);
    } else {
        VEC(t) acc = VEC(loadu)(inp_r);
        for (int64_t j = VEC(len); j < full; j += VEC(len))
            acc = VEC(max_nan)(acc, VEC(loadu)(inp_r + j));
        if (full < n)
            acc = VEC(blend)(tail, acc, VEC(max_nan)(acc, VEC(load_or)(tail, inp_r + full, zero)));
        max = VEC(reduce_max)(acc);
    }
    const VEC(t) vmax = VEC(set1)(max);

    /* 2. and 3. out = exp(x - max), and its sum */
    VEC(t) acc = zero;   /* + 0 changes no exp value: as torch's start from the first vector */
    for (int64_t j = 0; j < full; j += VEC(len)) {
        const VEC(t) e = VEC(exp)(VEC(sub)(VEC(loadu)(inp_r + j), vmax));
        VEC(storeu)(out_r + j, e);
        acc = VEC(add)(acc, e);
    }
    if (full < n) {
        const VEC(t) e = VEC(exp)(VEC(sub)(VEC(load_or)(tail, inp_r + full, zero), vmax));
        VEC(store_mask)(out_r + full, tail, e);
        acc = VEC(blend)(tail, acc, VEC(add)(acc, e));
    }
    T sum = out_r[0];
    if (n < VEC(len))
        for (int64_t j = 1; j < n; j++)
            sum = sum + out_r[j];
    else
        sum = VEC(reduce_add)(acc);

    /* 4. multiply by the reciprocal */
    const VEC(t) inv = VEC(set1)((T)1 / sum);
    for (int64_t j = 0; j < full; j += VEC(len))
        VEC(storeu)(out_r + j, VEC(mul)(inv, VEC(loadu)(out_r + j)));
    if (full < n)
        VEC(store_mask)(out_r + full, tail, VEC(mul)(inv, VEC(load_or)(tail, out_r + full, zero)));
}

/* ---- the backward along the last axis, as torch's _vec_host_softmax_backward_lastdim ---- */

/* gx = (g - sum(g * y)) * y for rows of n, with torch's reduction of the
 * products (as the forward's sum, each product a separate multiply, never
 * fused with its addition) and its subtract-then-multiply.  One exception,
 * copied from torch: a float32 call on a single row adds the tail's products
 * with an FMA (torch's serial copy of the loop is compiled that way, its
 * parallel copy, used for 2+ rows on 2+ threads, is not). */
static void SOFTMAX_SIMD(softmax_backward_rows)(T *gx, const T *g, const T *y, int64_t rows, int64_t n)
{
    const int64_t full = n - n % VEC(len);
    const VEC(t) zero = VEC(set1)((T)0);
    const VEC(mask) tail = VEC(mask_first)((int)(n - full));
    const int fused_tail = sizeof(T) == sizeof(float) && rows == 1;
    for (int64_t r = 0; r < rows; r++) {
        const T *g_r = g + r * n, *y_r = y + r * n;
        T *gx_r = gx + r * n;   /* may be g_r or y_r: every lane is read before it is written */
        T sum;
        if (n < VEC(len)) {
            sum = g_r[0] * y_r[0];
            for (int64_t j = 1; j < n; j++)
                sum = sum + g_r[j] * y_r[j];
        } else {
            VEC(t) acc = VEC(mul)(VEC(loadu)(g_r), VEC(loadu)(y_r));
            for (int64_t j = VEC(len); j < full; j += VEC(len))
                acc = VEC(add)(acc, VEC(mul)(VEC(loadu)(g_r + j), VEC(loadu)(y_r + j)));
            if (full < n) {
                const VEC(t) gt = VEC(load_or)(tail, g_r + full, zero), yt = VEC(load_or)(tail, y_r + full, zero);
                acc = VEC(blend)(tail, acc, fused_tail ? VEC(fma)(gt, yt, acc) : VEC(add)(acc, VEC(mul)(gt, yt)));
            }
            sum = VEC(reduce_add)(acc);
        }
        const VEC(t) vsum = VEC(set1)(sum);
        for (int64_t j = 0; j < full; j += VEC(len))
            VEC(storeu)(gx_r + j, VEC(mul)(VEC(sub)(VEC(loadu)(g_r + j), vsum), VEC(loadu)(y_r + j)));
        if (full < n)
            VEC(store_mask)(gx_r + full, tail, VEC(mul)(VEC(sub)(VEC(load_or)(tail, g_r + full, zero), vsum),
                                                  VEC(load_or)(tail, y_r + full, zero)));
    }
}

/* ---- middle axis: columns of each plane inp[o] of shape [n, inner] ---- */

/* Rows summed in T before the column sums go into double. */
#define COL_BLOCK 64
#define COL_NV 4   /* vectors of columns handled together */

/* Columns i0 .. i0 + nv * VEC(len) of the plane (the last vector limited to the
 * lanes of `last` when `masked`), down all n rows: the three passes with the
 * per-column max and sums in registers.  nv and masked are constants at every
 * call, so the loops over v unroll. */
MYATT_SIMD_FN void SOFTMAX_SIMD(softmax_cols_chunk)(T *out_o, const T *inp_o, int64_t n, int64_t inner,
                                int nv, int masked, VEC(mask) last)
{
    const VEC(t) neg_inf = VEC(set1)(-INFINITY);
    const VEC(t) zero = VEC(set1)((T)0);
#define LANES_ARE_MASKED(v) (masked && (v) == nv - 1)

    /* 1. column max */
    VEC(t) mx[COL_NV];
    for (int v = 0; v < nv; v++)
        mx[v] = neg_inf;
    for (int64_t j = 0; j < n; j++) {
        const T *row = inp_o + j * inner;   /* [nv * VEC(len)] */
        for (int v = 0; v < nv; v++) {
            const VEC(t) x = LANES_ARE_MASKED(v) ? VEC(load_or)(last, row + v * VEC(len), neg_inf)
                                             : VEC(loadu)(row + v * VEC(len));
            mx[v] = VEC(max)(x, mx[v]);
        }
    }

    /* 2. out = exp(x - max), column sums (T per block, then double) */
    double dsum[COL_NV * VEC(len)];
    for (int l = 0; l < nv * VEC(len); l++)
        dsum[l] = 0;
    for (int64_t j0 = 0; j0 < n; j0 += COL_BLOCK) {
        const int64_t j1 = n - j0 < COL_BLOCK ? n : j0 + COL_BLOCK;
        VEC(t) s[COL_NV];
        for (int v = 0; v < nv; v++)
            s[v] = zero;
        for (int64_t j = j0; j < j1; j++) {
            const T *row = inp_o + j * inner;
            T *orow = out_o + j * inner;
            for (int v = 0; v < nv; v++) {
                if (LANES_ARE_MASKED(v)) {
                    const VEC(t) e = VEC(exp)(VEC(sub)(VEC(load_or)(last, row + v * VEC(len), mx[v]), mx[v]));
                    VEC(store_mask)(orow + v * VEC(len), last, e);
                    s[v] = VEC(add)(s[v], VEC(zero_outside)(last, e));
                } else {
                    const VEC(t) e = VEC(exp)(VEC(sub)(VEC(loadu)(row + v * VEC(len)), mx[v]));
                    VEC(storeu)(orow + v * VEC(len), e);
                    s[v] = VEC(add)(s[v], e);
                }
            }
        }
        for (int v = 0; v < nv; v++) {
            T a[VEC(len)];
            VEC(storeu)(a, s[v]);
            for (int l = 0; l < VEC(len); l++)
                dsum[v * VEC(len) + l] += a[l];
        }
    }

    /* 3. multiply by the reciprocals of the (T) sums */
    VEC(t) inv[COL_NV];
    for (int v = 0; v < nv; v++) {
        T a[VEC(len)];
        for (int l = 0; l < VEC(len); l++)
            a[l] = (T)1 / (T)dsum[v * VEC(len) + l];
        inv[v] = VEC(loadu)(a);
    }
    for (int64_t j = 0; j < n; j++) {
        T *orow = out_o + j * inner;
        for (int v = 0; v < nv; v++) {
            if (LANES_ARE_MASKED(v))
                VEC(store_mask)(orow + v * VEC(len), last,
                             VEC(mul)(VEC(load_or)(last, orow + v * VEC(len), zero), inv[v]));
            else
                VEC(storeu)(orow + v * VEC(len), VEC(mul)(VEC(loadu)(orow + v * VEC(len)), inv[v]));
        }
    }
#undef LANES_ARE_MASKED
}

/* Narrow planes, 1 < inner < VEC(len): the plane [n, inner] read flat with full
 * vectors.  Vector t of the plane (elements t*VEC(len) ...) has lane l in column
 * (t*VEC(len) + l) % inner, a pattern that repeats every `inner` vectors: pattern
 * p = t % inner keeps its own max / sum accumulator, and the per-column max and
 * 1/sum are spread back into `inner` pattern vectors.  (Column by column with
 * masked vectors would use only inner of the VEC(len) lanes.) */
#define FLAT_BLOCK 64   /* vectors per pattern summed in T before going into double */

MYATT_SIMD_FN void SOFTMAX_SIMD(softmax_plane_narrow)(T *out_o, const T *inp_o, int64_t n, int64_t inner)
{
    const int np = (int)inner;            /* patterns, < VEC(len) */
    const int64_t len = n * inner;        /* [len] flat */
    const int64_t full = len / VEC(len) * VEC(len);
    const VEC(mask) tail = VEC(mask_first)((int)(len - full));
    const VEC(t) neg_inf = VEC(set1)(-INFINITY);
    const VEC(t) zero = VEC(set1)((T)0);
    VEC(t) acc[VEC(len)];
    T a[VEC(len)];

    /* 1. max per pattern, then per column */
    for (int p = 0; p < np; p++)
        acc[p] = neg_inf;
    int p = 0;
    for (int64_t f = 0; f < full; f += VEC(len)) {
        acc[p] = VEC(max)(VEC(loadu)(inp_o + f), acc[p]);
        p = p + 1 == np ? 0 : p + 1;
    }
    if (full < len)
        acc[p] = VEC(max)(VEC(load_or)(tail, inp_o + full, neg_inf), acc[p]);
    T colmax[VEC(len)];
    for (int c = 0; c < np; c++)
        colmax[c] = -INFINITY;
    for (int q = 0; q < np; q++) {
        VEC(storeu)(a, acc[q]);
        for (int l = 0; l < VEC(len); l++) {
            const int c = (q * VEC(len) + l) % np;
            if (a[l] > colmax[c] || isnan(a[l]))
                colmax[c] = a[l];
        }
    }
    VEC(t) pat[VEC(len)];   /* pattern vectors of the column max, later of 1 / sum */
    for (int q = 0; q < np; q++) {
        for (int l = 0; l < VEC(len); l++)
            a[l] = colmax[(q * VEC(len) + l) % np];
        pat[q] = VEC(loadu)(a);
    }

    /* 2. out = exp(x - max); sums per pattern (T per block, then double) */
    double colsum[VEC(len)];
    for (int c = 0; c < np; c++)
        colsum[c] = 0;
    int64_t f = 0;
    p = 0;
    while (f < len) {
        const int64_t end = full - f > FLAT_BLOCK * VEC(len) * inner ? f + FLAT_BLOCK * VEC(len) * inner
                                                                 : full;
        for (int q = 0; q < np; q++)
            acc[q] = zero;
        for (; f < end; f += VEC(len)) {
            const VEC(t) e = VEC(exp)(VEC(sub)(VEC(loadu)(inp_o + f), pat[p]));
            VEC(storeu)(out_o + f, e);
            acc[p] = VEC(add)(acc[p], e);
            p = p + 1 == np ? 0 : p + 1;
        }
        if (f == full && full < len) {
            const VEC(t) e = VEC(exp)(VEC(sub)(VEC(load_or)(tail, inp_o + full, pat[p]), pat[p]));
            VEC(store_mask)(out_o + full, tail, e);
            acc[p] = VEC(add)(acc[p], VEC(zero_outside)(tail, e));
            f = len;
        }
        for (int q = 0; q < np; q++) {
            VEC(storeu)(a, acc[q]);
            for (int l = 0; l < VEC(len); l++)
                colsum[(q * VEC(len) + l) % np] += a[l];
        }
    }

    /* 3. multiply by the reciprocals of the (T) column sums */
    for (int q = 0; q < np; q++) {
        for (int l = 0; l < VEC(len); l++)
            a[l] = (T)1 / (T)colsum[(q * VEC(len) + l) % np];
        pat[q] = VEC(loadu)(a);
    }
    p = 0;
    for (f = 0; f < full; f += VEC(len)) {
        VEC(storeu)(out_o + f, VEC(mul)(VEC(loadu)(out_o + f), pat[p]));
        p = p + 1 == np ? 0 : p + 1;
    }
    if (full < len)
        VEC(store_mask)(out_o + full, tail, VEC(mul)(VEC(load_or)(tail, out_o + full, zero), pat[p]));
}
#undef FLAT_BLOCK

/* noinline: called through the table only, and it keeps gcc from splitting off
 * the size check (the split body ran 3-5 % more instructions per row). */
static __attribute__((noinline))
void SOFTMAX_SIMD(softmax_forward)(T *out, const T *inp, int64_t outer, int64_t n, int64_t inner)
{
    if (outer <= 0 || n <= 0 || inner <= 0)
        return;
    if (inner == 1) {
        for (int64_t r = 0; r < outer; r++)
            SOFTMAX_SIMD(softmax_row)(out + r * n, inp + r * n, n);
        return;
    }
    if (inner < VEC(len)) {
        for (int64_t o = 0; o < outer; o++)
            SOFTMAX_SIMD(softmax_plane_narrow)(out + o * n * inner, inp + o * n * inner, n, inner);
        return;
    }
    const VEC(mask) all = VEC(mask_first)(VEC(len));
    for (int64_t o = 0; o < outer; o++) {
        const T *inp_o = inp + o * n * inner;   /* [n, inner] */
        T *out_o = out + o * n * inner;         /* [n, inner], may be inp_o */
        int64_t i = 0;
        for (; i + COL_NV * VEC(len) <= inner; i += COL_NV * VEC(len))
            SOFTMAX_SIMD(softmax_cols_chunk)(out_o + i, inp_o + i, n, inner, COL_NV, 0, all);
        for (; i + VEC(len) <= inner; i += VEC(len))
            SOFTMAX_SIMD(softmax_cols_chunk)(out_o + i, inp_o + i, n, inner, 1, 0, all);
        if (i < inner)
            SOFTMAX_SIMD(softmax_cols_chunk)(out_o + i, inp_o + i, n, inner, 1, 1,
                                    VEC(mask_first)((int)(inner - i)));
    }
}
#undef COL_BLOCK
#undef COL_NV

#undef T
#undef VEC
#undef SOFTMAX_SIMD
