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
 *   V_MASK_FIRST(k)       the first k lanes (0 <= k <= VLEN)
 *   V_LOAD_OR(m, p, fill) lanes in m from p, the others = fill (reads only lanes in m)
 *   V_STORE_MASK(p, m, v) writes only the lanes in m
 *   V_ZERO_OUTSIDE(m, v)  lanes outside m set to 0
 *   V_EXP(v)              exp, <= 1 ulp, NaN -> NaN, -inf -> 0, see the ISA file
 *
 * Three fused passes per slice, as torch does: (1) max, (2) e = exp(x - max)
 * stored into out while summing, (3) out *= 1 / sum.
 *
 * NaN and inf: the max may skip a NaN (V_MAX), which does not matter: a NaN x
 * gives exp(NaN - max) = NaN, hence a NaN sum and a NaN slice.  A slice of -inf
 * only (max = -inf) and a slice holding +inf (max = +inf) give -inf - -inf or
 * inf - inf = NaN the same way, as in torch.  x - max very negative (or -inf)
 * gives exactly 0 (V_EXP clamps its argument), never garbage.
 *
 * Sums: T vector accumulators over blocks of a few hundred elements, each
 * block's sum added into a double: the float32 sum of a 10^5-long row is then
 * as accurate as a float can hold it (float64: blocked, like a pairwise sum). */

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

/* ---- last axis: each row inp[r, 0:n] ---- */

/* lanes of v added in double */
FN double ISA(lanes_sum)(VF v)
{
    T a[VLEN];
    V_STOREU(a, v);
    double s = 0;
    for (int l = 0; l < VLEN; l++)
        s += a[l];
    return s;
}

/* Row block length of the sum: a multiple of 4 * VLEN; each lane sums at
 * most 1024 / (4 * VLEN) <= 32 terms before the block goes into the double. */
#define ROW_BLOCK 1024

FN void ISA(softmax_row)(T *out_r, const T *inp_r, int64_t n)
{
    /* 1. max */
    const VF neg_inf = V_SET1(-INFINITY);
    VF m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
    int64_t j = 0;
    for (; j + 4 * VLEN <= n; j += 4 * VLEN) {
        m0 = V_MAX(V_LOADU(inp_r + j), m0);
        m1 = V_MAX(V_LOADU(inp_r + j + VLEN), m1);
        m2 = V_MAX(V_LOADU(inp_r + j + 2 * VLEN), m2);
        m3 = V_MAX(V_LOADU(inp_r + j + 3 * VLEN), m3);
    }
    for (; j + VLEN <= n; j += VLEN)
        m0 = V_MAX(V_LOADU(inp_r + j), m0);
    if (j < n)
        m1 = V_MAX(V_LOAD_OR(V_MASK_FIRST((int)(n - j)), inp_r + j, neg_inf), m1);
    m0 = V_MAX(V_MAX(m0, m1), V_MAX(m2, m3));
    T lanes[VLEN];
    V_STOREU(lanes, m0);
    T max = lanes[0];
    for (int l = 1; l < VLEN; l++)
        if (lanes[l] > max || isnan(lanes[l]))
            max = lanes[l];
    const VF vmax = V_SET1(max);

    /* 2. out = exp(x - max), summed */
    double total = 0;
    const VF zero = V_SET1((T)0);
    j = 0;
    while (j + 4 * VLEN <= n) {
        const int64_t end = j + ROW_BLOCK <= n ? j + ROW_BLOCK : n;
        VF s0 = zero, s1 = zero, s2 = zero, s3 = zero;
        for (; j + 4 * VLEN <= end; j += 4 * VLEN) {
            const VF e0 = V_EXP(V_SUB(V_LOADU(inp_r + j), vmax));
            const VF e1 = V_EXP(V_SUB(V_LOADU(inp_r + j + VLEN), vmax));
            const VF e2 = V_EXP(V_SUB(V_LOADU(inp_r + j + 2 * VLEN), vmax));
            const VF e3 = V_EXP(V_SUB(V_LOADU(inp_r + j + 3 * VLEN), vmax));
            V_STOREU(out_r + j, e0);
            V_STOREU(out_r + j + VLEN, e1);
            V_STOREU(out_r + j + 2 * VLEN, e2);
            V_STOREU(out_r + j + 3 * VLEN, e3);
            s0 = V_ADD(s0, e0);
            s1 = V_ADD(s1, e1);
            s2 = V_ADD(s2, e2);
            s3 = V_ADD(s3, e3);
        }
        total += ISA(lanes_sum)(V_ADD(V_ADD(s0, s1), V_ADD(s2, s3)));
    }
    {
        VF s0 = zero;
        for (; j + VLEN <= n; j += VLEN) {
            const VF e = V_EXP(V_SUB(V_LOADU(inp_r + j), vmax));
            V_STOREU(out_r + j, e);
            s0 = V_ADD(s0, e);
        }
        if (j < n) {
            const VMASK m = V_MASK_FIRST((int)(n - j));
            const VF e = V_EXP(V_SUB(V_LOAD_OR(m, inp_r + j, vmax), vmax));
            V_STORE_MASK(out_r + j, m, e);
            s0 = V_ADD(s0, V_ZERO_OUTSIDE(m, e));
        }
        total += ISA(lanes_sum)(s0);
    }

    /* 3. multiply by the reciprocal of the (T) sum, as torch does */
    const VF inv = V_SET1((T)1 / (T)total);
    j = 0;
    for (; j + VLEN <= n; j += VLEN)
        V_STOREU(out_r + j, V_MUL(V_LOADU(out_r + j), inv));
    if (j < n) {
        const VMASK m = V_MASK_FIRST((int)(n - j));
        V_STORE_MASK(out_r + j, m, V_MUL(V_LOAD_OR(m, out_r + j, zero), inv));
    }
}
#undef ROW_BLOCK

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
