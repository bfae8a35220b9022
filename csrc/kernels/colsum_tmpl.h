/* torch's column sums, written once for both dtypes: included by colsum.c with
 * T and SUF(name) defined, undefined again at the end.  No include guard on
 * purpose.  Defines the static colsum_body; colsum.c writes out the public
 * symbols.  Contract: colsum.h. */
#ifndef T
#error "colsum_tmpl.h: define T (the element type) before including it"
#endif
#ifndef SUF
#error "colsum_tmpl.h: define SUF(name) (name##_f32, name##_f64) before including it"
#endif

/* multi_row_sum for one column: x[0], x[stride], ... (k terms), torch's
 * four-level cascade: blocks of 2^lp terms summed into level 0, which is
 * carried up a level at every block boundary of that level, then the levels
 * added from the bottom. */
static T SUF(colsum_cascade)(const T *x, int64_t stride, int64_t k)
{
    const int64_t log2k = k <= 2 ? 1 : 64 - __builtin_clzll((unsigned long long)(k - 1));
    const int64_t lp = log2k / 4 > 4 ? log2k / 4 : 4;
    const int64_t step = (int64_t)1 << lp, mask = step - 1;
    T acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    while (i + step <= k) {
        for (int64_t j = 0; j < step; j++, i++)
            acc[0] = acc[0] + x[i * stride];
        for (int lv = 1; lv < 4; lv++) {
            acc[lv] = acc[lv] + acc[lv - 1];
            acc[lv - 1] = 0;
            if ((i & (mask << (lv * lp))) != 0)
                break;
        }
    }
    for (; i < k; i++)
        acc[0] = acc[0] + x[i * stride];
    return ((acc[0] + acc[1]) + acc[2]) + acc[3];
}

/* row_sum with ilp factor 4: four interleaved cascades, the leftover terms
 * added to the first, then the four added in order */
static T SUF(colsum_ilp4)(const T *x, int64_t stride, int64_t k)
{
    const int64_t q = k / 4;
    T p[4];
    for (int l = 0; l < 4; l++)
        p[l] = SUF(colsum_cascade)(x + l * stride, 4 * stride, q);
    for (int64_t i = 4 * q; i < k; i++)
        p[0] = p[0] + x[i * stride];
    return ((p[0] + p[1]) + p[2]) + p[3];
}

static void SUF(colsum_body)(T *out, const T *x, int64_t rs, int64_t cs, int64_t m, int64_t n)
{
    enum { W = 32 / sizeof(T) };   /* lanes of torch's AVX2 vector */
    if (m <= 1) {                  /* not a reduction: 0 + x (-0 becomes +0), or zeros */
        for (int64_t j = 0; j < n; j++)
            out[j] = m == 1 ? (T)0 + x[j * cs] : 0;
        return;
    }
    if (n == 1) {                  /* one column: torch's contiguous inner sum */
        if (m < W) {
            out[0] = (T)0 + SUF(colsum_ilp4)(x, rs, m);
            return;
        }
        const int64_t nv = m / W;
        T lane[W];
        for (int l = 0; l < W; l++)
            lane[l] = SUF(colsum_ilp4)(x + l * rs, W * rs, nv);
        T total = 0;
        for (int64_t i = nv * W; i < m; i++)
            total = total + x[i * rs];
        for (int l = 0; l < W; l++)
            total = total + lane[l];
        out[0] = (T)0 + total;
        return;
    }
    /* columns in whole blocks of 4 vectors (4 columns when n < W): one cascade
     * over all rows; the rest: four interleaved cascades */
    const int64_t blocked = n >= W ? n / (4 * W) * (4 * W) : n / 4 * 4;
    for (int64_t j = 0; j < n; j++)
        out[j] = (T)0 + (j < blocked ? SUF(colsum_cascade)(x + j * cs, rs, m)
                                     : SUF(colsum_ilp4)(x + j * cs, rs, m));
}

#undef T
#undef SUF
