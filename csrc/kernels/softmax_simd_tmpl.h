/* softmax on one vector ISA, written once: included by softmax_avx2.c and
 * softmax_avx512.c once per dtype with these defined (no include guard on purpose):
 *
 *   T              float or double
 *   FN             static inline function attributes (always_inline + target)
 *   API            attributes of the exported functions (target)
 *   ISA(name)      name##_f32_avx2, name##_f64_avx512, ...
 *   VF, VMASK      the vector type of T and its lane-mask type; VLEN lanes
 *   V_SET1(x) V_LOADU(p) V_STOREU(p, v) V_ADD V_SUB V_MUL V_MAX(a, b)
 *                  V_MAX keeps b when a is NaN (x86 max semantics; see below)
 *   V_MAX_NAN(a, b)       lane-wise max, NaN when either lane is NaN (at::vec::maximum)
 *   V_FMA(a, b, c)        a * b + c, one rounding
 *   V_BLEND(m, a, b)      lanes in m from b, the others from a
 *   V_HSUM(v) V_HMAX(v)   the lanes of v reduced to a T in torch's order for this
 *                         ISA and dtype (a shuffle tree, or ISA(fold_sum/max) below)
 *   V_MASK_FIRST(k)       the first k lanes (0 <= k <= VLEN)
 *   V_LOAD_OR(m, p, fill) lanes in m from p, the others = fill (reads only lanes in m)
 *   V_STORE_MASK(p, m, v) writes only the lanes in m
 *   V_ZERO_OUTSIDE(m, v)  lanes outside m set to 0
 *   V_EXP(v)              exp: Sleef's expf_u10 / exp_u10 (softmax_exp_sleef.h)
 *
 * The last axis (the module's case) is torch's kernel, bit for bit (see
 * ISA(softmax_row)).  Other axes: three fused passes per slice, as torch does:
 * (1) max, (2) e = exp(x - max) stored into out while summing, (3) out *= 1 / sum,
 * with sums kept in double (not torch's bits, within its tolerance).
 *
 * NaN and inf: the max may skip a NaN (V_MAX), which does not matter: a NaN x
 * gives exp(NaN - max) = NaN, hence a NaN sum and a NaN slice.  A slice of -inf
 * only (max = -inf) and a slice holding +inf (max = +inf) give -inf - -inf or
 * inf - inf = NaN the same way, as in torch.  x - max very negative (or -inf)
 * gives exactly 0 (V_EXP clamps its argument), never garbage.
 *
 * Sums along other axes: T vector accumulators over blocks of a few dozen
 * rows, each block's sum added into a double. */

#include <math.h>
#include <stdint.h>

/* ---- the vector exp alone, over an array (for benchmarks/exp_ulp.c) ---- */

API void ISA(softmax_exp)(T *out, const T *inp, int64_t n)
{
    int64_t j = 0;
    for (; j + VLEN <= n; j += VLEN)
        V_STOREU(out + j, V_EXP(V_LOADU(inp + j)));
    if (j < n) {
        const VMASK m = V_MASK_FIRST((int)(n - j));
        V_STORE_MASK(out + j, m, V_EXP(V_LOAD_OR(m, inp + j, V_SET1((T)0))));
    }
}

/* ---- last axis: each row inp[r, 0:n], as torch's _vec_softmax_lastdim ---- */

/* The lanes of v folded in order from lane 0: torch's generic reduction of a
 * vector (its V_HSUM / V_HMAX where it has no shuffle tree, i.e. for double). */
FN T ISA(fold_sum)(VF v)
{
    T a[VLEN];
    V_STOREU(a, v);
    T s = a[0];
    for (int l = 1; l < VLEN; l++)
        s = s + a[l];
    return s;
}

/* at::vec::maximum on one lane: NaN if either is NaN */
FN T ISA(max_nan)(T a, T b)
{
    return isnan(a) || isnan(b) ? (T)NAN : b > a ? b : a;
}

FN T ISA(fold_max)(VF v)
{
    T a[VLEN];
    V_STOREU(a, v);
    T m = a[0];
    for (int l = 1; l < VLEN; l++)
        m = ISA(max_nan)(m, a[l]);
    return m;
}

/* One row, torch's four passes with its vector width (VLEN) and reduction
 * orders (vec::reduce_all), so the result is torch's bit for bit:
 *   1. max: a row shorter than VLEN is folded in order; else lane-wise over
 *      whole vectors from the first, the tail's lanes merged into the first
 *      lanes, then the lanes reduced (V_HMAX);
 *   2. out = exp(x - max) (Sleef's exp, as torch);
 *   3. sum of out, reduced exactly as the max (fused into pass 2 here: the same
 *      additions in the same order);
 *   4. out *= 1 / sum.
 * NaN anywhere gives a NaN max, hence a NaN row; a row of only -inf, or one
 * holding +inf, gives -inf - -inf or inf - inf = NaN the same way, as in torch. */
FN void ISA(softmax_row)(T *out_r, const T *inp_r, int64_t n)
{
    const int64_t full = n - n % VLEN;   /* elements in whole vectors */
    const VF zero = V_SET1((T)0);
    const VMASK tail = V_MASK_FIRST((int)(n - full));

    /* 1. max */
    T max = inp_r[0];
    if (n < VLEN) {
        for (int64_t j = 1; j < n; j++)
            max = ISA(max_nan)(max, inp_r[j]);
    } else {
        VF acc = V_LOADU(inp_r);
        for (int64_t j = VLEN; j < full; j += VLEN)
            acc = V_MAX_NAN(acc, V_LOADU(inp_r + j));
        if (full < n)
            acc = V_BLEND(tail, acc, V_MAX_NAN(acc, V_LOAD_OR(tail, inp_r + full, zero)));
        max = V_HMAX(acc);
    }
    const VF vmax = V_SET1(max);

    /* 2. and 3. out = exp(x - max), and its sum */
    VF acc = zero;   /* + 0 changes no exp value: as torch's start from the first vector */
    for (int64_t j = 0; j < full; j += VLEN) {
        const VF e = V_EXP(V_SUB(V_LOADU(inp_r + j), vmax));
        V_STOREU(out_r + j, e);
        acc = V_ADD(acc, e);
    }
    if (full < n) {
        const VF e = V_EXP(V_SUB(V_LOAD_OR(tail, inp_r + full, zero), vmax));
        V_STORE_MASK(out_r + full, tail, e);
        acc = V_BLEND(tail, acc, V_ADD(acc, e));
    }
    T sum = out_r[0];
    if (n < VLEN)
        for (int64_t j = 1; j < n; j++)
            sum = sum + out_r[j];
    else
        sum = V_HSUM(acc);

    /* 4. multiply by the reciprocal */
    const VF inv = V_SET1((T)1 / sum);
    for (int64_t j = 0; j < full; j += VLEN)
        V_STOREU(out_r + j, V_MUL(inv, V_LOADU(out_r + j)));
    if (full < n)
        V_STORE_MASK(out_r + full, tail, V_MUL(inv, V_LOAD_OR(tail, out_r + full, zero)));
}

/* ---- the backward along the last axis, as torch's _vec_host_softmax_backward_lastdim ---- */

/* gx = (g - sum(g * y)) * y for rows of n, with torch's reduction of the
 * products (as the forward's sum, each product a separate multiply, never
 * fused with its addition) and its subtract-then-multiply.  One exception,
 * copied from torch: a float32 call on a single row adds the tail's products
 * with an FMA (torch's serial copy of the loop is compiled that way, its
 * parallel copy, used for 2+ rows on 2+ threads, is not). */
API void ISA(softmax_backward_rows)(T *gx, const T *g, const T *y, int64_t rows, int64_t n)
{
    const int64_t full = n - n % VLEN;
    const VF zero = V_SET1((T)0);
    const VMASK tail = V_MASK_FIRST((int)(n - full));
    const int fused_tail = sizeof(T) == sizeof(float) && rows == 1;
    for (int64_t r = 0; r < rows; r++) {
        const T *g_r = g + r * n, *y_r = y + r * n;
        T *gx_r = gx + r * n;   /* may be g_r or y_r: every lane is read before it is written */
        T sum;
        if (n < VLEN) {
            sum = g_r[0] * y_r[0];
            for (int64_t j = 1; j < n; j++)
                sum = sum + g_r[j] * y_r[j];
        } else {
            VF acc = V_MUL(V_LOADU(g_r), V_LOADU(y_r));
            for (int64_t j = VLEN; j < full; j += VLEN)
                acc = V_ADD(acc, V_MUL(V_LOADU(g_r + j), V_LOADU(y_r + j)));
            if (full < n) {
                const VF gt = V_LOAD_OR(tail, g_r + full, zero), yt = V_LOAD_OR(tail, y_r + full, zero);
                acc = V_BLEND(tail, acc, fused_tail ? V_FMA(gt, yt, acc) : V_ADD(acc, V_MUL(gt, yt)));
            }
            sum = V_HSUM(acc);
        }
        const VF vsum = V_SET1(sum);
        for (int64_t j = 0; j < full; j += VLEN)
            V_STOREU(gx_r + j, V_MUL(V_SUB(V_LOADU(g_r + j), vsum), V_LOADU(y_r + j)));
        if (full < n)
            V_STORE_MASK(gx_r + full, tail, V_MUL(V_SUB(V_LOAD_OR(tail, g_r + full, zero), vsum),
                                                  V_LOAD_OR(tail, y_r + full, zero)));
    }
}

/* ---- middle axis: columns of each plane inp[o] of shape [n, inner] ---- */

/* Rows summed in T before the column sums go into double. */
#define COL_BLOCK 64
#define COL_NV 4   /* vectors of columns handled together */

/* Columns i0 .. i0 + nv * VLEN of the plane (the last vector limited to the
 * lanes of `last` when `masked`), down all n rows: the three passes with the
 * per-column max and sums in registers.  nv and masked are constants at every
 * call, so the loops over v unroll. */
FN void ISA(softmax_cols_chunk)(T *out_o, const T *inp_o, int64_t n, int64_t inner,
                                int nv, int masked, VMASK last)
{
    const VF neg_inf = V_SET1(-INFINITY);
    const VF zero = V_SET1((T)0);
#define LANES_ARE_MASKED(v) (masked && (v) == nv - 1)

    /* 1. column max */
    VF mx[COL_NV];
    for (int v = 0; v < nv; v++)
        mx[v] = neg_inf;
    for (int64_t j = 0; j < n; j++) {
        const T *row = inp_o + j * inner;   /* [nv * VLEN] */
        for (int v = 0; v < nv; v++) {
            const VF x = LANES_ARE_MASKED(v) ? V_LOAD_OR(last, row + v * VLEN, neg_inf)
                                             : V_LOADU(row + v * VLEN);
            mx[v] = V_MAX(x, mx[v]);
        }
    }

    /* 2. out = exp(x - max), column sums (T per block, then double) */
    double dsum[COL_NV * VLEN];
    for (int l = 0; l < nv * VLEN; l++)
        dsum[l] = 0;
    for (int64_t j0 = 0; j0 < n; j0 += COL_BLOCK) {
        const int64_t j1 = n - j0 < COL_BLOCK ? n : j0 + COL_BLOCK;
        VF s[COL_NV];
        for (int v = 0; v < nv; v++)
            s[v] = zero;
        for (int64_t j = j0; j < j1; j++) {
            const T *row = inp_o + j * inner;
            T *orow = out_o + j * inner;
            for (int v = 0; v < nv; v++) {
                if (LANES_ARE_MASKED(v)) {
                    const VF e = V_EXP(V_SUB(V_LOAD_OR(last, row + v * VLEN, mx[v]), mx[v]));
                    V_STORE_MASK(orow + v * VLEN, last, e);
                    s[v] = V_ADD(s[v], V_ZERO_OUTSIDE(last, e));
                } else {
                    const VF e = V_EXP(V_SUB(V_LOADU(row + v * VLEN), mx[v]));
                    V_STOREU(orow + v * VLEN, e);
                    s[v] = V_ADD(s[v], e);
                }
            }
        }
        for (int v = 0; v < nv; v++) {
            T a[VLEN];
            V_STOREU(a, s[v]);
            for (int l = 0; l < VLEN; l++)
                dsum[v * VLEN + l] += a[l];
        }
    }

    /* 3. multiply by the reciprocals of the (T) sums */
    VF inv[COL_NV];
    for (int v = 0; v < nv; v++) {
        T a[VLEN];
        for (int l = 0; l < VLEN; l++)
            a[l] = (T)1 / (T)dsum[v * VLEN + l];
        inv[v] = V_LOADU(a);
    }
    for (int64_t j = 0; j < n; j++) {
        T *orow = out_o + j * inner;
        for (int v = 0; v < nv; v++) {
            if (LANES_ARE_MASKED(v))
                V_STORE_MASK(orow + v * VLEN, last,
                             V_MUL(V_LOAD_OR(last, orow + v * VLEN, zero), inv[v]));
            else
                V_STOREU(orow + v * VLEN, V_MUL(V_LOADU(orow + v * VLEN), inv[v]));
        }
    }
#undef LANES_ARE_MASKED
}

/* Narrow planes, 1 < inner < VLEN: the plane [n, inner] read flat with full
 * vectors.  Vector t of the plane (elements t*VLEN ...) has lane l in column
 * (t*VLEN + l) % inner, a pattern that repeats every `inner` vectors: pattern
 * p = t % inner keeps its own max / sum accumulator, and the per-column max and
 * 1/sum are spread back into `inner` pattern vectors.  (Column by column with
 * masked vectors would use only inner of the VLEN lanes.) */
#define FLAT_BLOCK 64   /* vectors per pattern summed in T before going into double */

FN void ISA(softmax_plane_narrow)(T *out_o, const T *inp_o, int64_t n, int64_t inner)
{
    const int np = (int)inner;            /* patterns, < VLEN */
    const int64_t len = n * inner;        /* [len] flat */
    const int64_t full = len / VLEN * VLEN;
    const VMASK tail = V_MASK_FIRST((int)(len - full));
    const VF neg_inf = V_SET1(-INFINITY);
    const VF zero = V_SET1((T)0);
    VF acc[VLEN];
    T a[VLEN];

    /* 1. max per pattern, then per column */
    for (int p = 0; p < np; p++)
        acc[p] = neg_inf;
    int p = 0;
    for (int64_t f = 0; f < full; f += VLEN) {
        acc[p] = V_MAX(V_LOADU(inp_o + f), acc[p]);
        p = p + 1 == np ? 0 : p + 1;
    }
    if (full < len)
        acc[p] = V_MAX(V_LOAD_OR(tail, inp_o + full, neg_inf), acc[p]);
    T colmax[VLEN];
    for (int c = 0; c < np; c++)
        colmax[c] = -INFINITY;
    for (int q = 0; q < np; q++) {
        V_STOREU(a, acc[q]);
        for (int l = 0; l < VLEN; l++) {
            const int c = (q * VLEN + l) % np;
            if (a[l] > colmax[c] || isnan(a[l]))
                colmax[c] = a[l];
        }
    }
    VF pat[VLEN];   /* pattern vectors of the column max, later of 1 / sum */
    for (int q = 0; q < np; q++) {
        for (int l = 0; l < VLEN; l++)
            a[l] = colmax[(q * VLEN + l) % np];
        pat[q] = V_LOADU(a);
    }

    /* 2. out = exp(x - max); sums per pattern (T per block, then double) */
    double colsum[VLEN];
    for (int c = 0; c < np; c++)
        colsum[c] = 0;
    int64_t f = 0;
    p = 0;
    while (f < len) {
        const int64_t end = full - f > FLAT_BLOCK * VLEN * inner ? f + FLAT_BLOCK * VLEN * inner
                                                                 : full;
        for (int q = 0; q < np; q++)
            acc[q] = zero;
        for (; f < end; f += VLEN) {
            const VF e = V_EXP(V_SUB(V_LOADU(inp_o + f), pat[p]));
            V_STOREU(out_o + f, e);
            acc[p] = V_ADD(acc[p], e);
            p = p + 1 == np ? 0 : p + 1;
        }
        if (f == full && full < len) {
            const VF e = V_EXP(V_SUB(V_LOAD_OR(tail, inp_o + full, pat[p]), pat[p]));
            V_STORE_MASK(out_o + full, tail, e);
            acc[p] = V_ADD(acc[p], V_ZERO_OUTSIDE(tail, e));
            f = len;
        }
        for (int q = 0; q < np; q++) {
            V_STOREU(a, acc[q]);
            for (int l = 0; l < VLEN; l++)
                colsum[(q * VLEN + l) % np] += a[l];
        }
    }

    /* 3. multiply by the reciprocals of the (T) column sums */
    for (int q = 0; q < np; q++) {
        for (int l = 0; l < VLEN; l++)
            a[l] = (T)1 / (T)colsum[(q * VLEN + l) % np];
        pat[q] = V_LOADU(a);
    }
    p = 0;
    for (f = 0; f < full; f += VLEN) {
        V_STOREU(out_o + f, V_MUL(V_LOADU(out_o + f), pat[p]));
        p = p + 1 == np ? 0 : p + 1;
    }
    if (full < len)
        V_STORE_MASK(out_o + full, tail, V_MUL(V_LOAD_OR(tail, out_o + full, zero), pat[p]));
}
#undef FLAT_BLOCK

API void ISA(softmax_forward)(T *out, const T *inp, int64_t outer, int64_t n,
                                  int64_t inner)
{
    if (outer <= 0 || n <= 0 || inner <= 0)
        return;
    if (inner == 1) {
        for (int64_t r = 0; r < outer; r++)
            ISA(softmax_row)(out + r * n, inp + r * n, n);
        return;
    }
    if (inner < VLEN) {
        for (int64_t o = 0; o < outer; o++)
            ISA(softmax_plane_narrow)(out + o * n * inner, inp + o * n * inner, n, inner);
        return;
    }
    const VMASK all = V_MASK_FIRST(VLEN);
    for (int64_t o = 0; o < outer; o++) {
        const T *inp_o = inp + o * n * inner;   /* [n, inner] */
        T *out_o = out + o * n * inner;         /* [n, inner], may be inp_o */
        int64_t i = 0;
        for (; i + COL_NV * VLEN <= inner; i += COL_NV * VLEN)
            ISA(softmax_cols_chunk)(out_o + i, inp_o + i, n, inner, COL_NV, 0, all);
        for (; i + VLEN <= inner; i += VLEN)
            ISA(softmax_cols_chunk)(out_o + i, inp_o + i, n, inner, 1, 0, all);
        if (i < inner)
            ISA(softmax_cols_chunk)(out_o + i, inp_o + i, n, inner, 1, 1,
                                    V_MASK_FIRST((int)(inner - i)));
    }
}
#undef COL_BLOCK
#undef COL_NV
