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

/* Columns are summed COLSUM_CHUNK at a time, each in a lane of its own: every
 * column's sum is the scalar sequence torch gives it (the order depends on the
 * row count only, never on the column), so the lanes only make the loops over
 * columns vectorise (rows are contiguous in memory, columns strided by rs:
 * one column at a time read a cache line per term). */
#ifndef COLSUM_CHUNK
#define COLSUM_CHUNK 128
#endif

/* multi_row_sum of nb <= COLSUM_CHUNK columns: out[c] = sum of x[i * stride + c * cs]
 * over i < k, torch's four-level cascade per column: blocks of 2^lp terms
 * summed into level 0, which is carried up a level at every block boundary of
 * that level, then the levels added from the bottom.  Inlined with cs == 1 for
 * the usual contiguous rows.  pair > 0: each term is x[e] + x[e + pair] (a
 * half-precision vector load's two float32 halves, added first). */
#define COLSUM_TERM(e) (pair ? x[e] + x[(e) + pair] : x[e])
static inline __attribute__((always_inline))
void SUF(colsum_cascade)(T *out, const T *x, int64_t stride, int64_t cs, int64_t k, int64_t nb,
                         int64_t pair)
{
    const int64_t log2k = k <= 2 ? 1 : 64 - __builtin_clzll((unsigned long long)(k - 1));
    const int64_t lp = log2k / 4 > 4 ? log2k / 4 : 4;
    const int64_t step = (int64_t)1 << lp, mask = step - 1;
    T acc[4][COLSUM_CHUNK];
    for (int lv = 0; lv < 4; lv++)
        for (int64_t c = 0; c < nb; c++)
            acc[lv][c] = 0;
    int64_t i = 0;
    while (i + step <= k) {
        for (int64_t j = 0; j < step; j++, i++)
            for (int64_t c = 0; c < nb; c++)
                acc[0][c] = acc[0][c] + COLSUM_TERM(i * stride + c * cs);
        for (int lv = 1; lv < 4; lv++) {
            for (int64_t c = 0; c < nb; c++) {
                acc[lv][c] = acc[lv][c] + acc[lv - 1][c];
                acc[lv - 1][c] = 0;
            }
            if ((i & (mask << (lv * lp))) != 0)
                break;
        }
    }
    for (; i < k; i++)
        for (int64_t c = 0; c < nb; c++)
            acc[0][c] = acc[0][c] + COLSUM_TERM(i * stride + c * cs);
    for (int64_t c = 0; c < nb; c++)
        out[c] = ((acc[0][c] + acc[1][c]) + acc[2][c]) + acc[3][c];
}

/* row_sum with ilp factor 4 of nb <= COLSUM_CHUNK columns: four interleaved
 * cascades, the leftover terms added to the first, then the four added in order */
static inline __attribute__((always_inline))
void SUF(colsum_ilp4)(T *out, const T *x, int64_t stride, int64_t cs, int64_t k, int64_t nb,
                      int64_t pair)
{
    const int64_t q = k / 4;
    T p[4][COLSUM_CHUNK];
    for (int l = 0; l < 4; l++)
        SUF(colsum_cascade)(p[l], x + l * stride, 4 * stride, cs, q, nb, pair);
    for (int64_t i = 4 * q; i < k; i++)
        for (int64_t c = 0; c < nb; c++)
            p[0][c] = p[0][c] + COLSUM_TERM(i * stride + c * cs);
    for (int64_t c = 0; c < nb; c++)
        out[c] = ((p[0][c] + p[1][c]) + p[2][c]) + p[3][c];
}

/* torch's sum of one column whose m terms are rs apart, reduced as a contiguous
 * inner dimension (SumKernel.cpp): vectorized_inner_sum once m fills a vector
 * load of the source dtype (W lanes of T, each lane a row_sum over the loads;
 * a float16 / bfloat16 source, half: a load is 2W values, its two float32
 * halves added first), the last m % load terms in order into 0, then the
 * lanes in order; below one load, scalar_inner_sum (row_sum: four interleaved
 * cascades). */
static T SUF(inner_sum)(const T *x, int64_t rs, int64_t m, int half)
{
    enum { W = 32 / sizeof(T) };   /* lanes of torch's AVX2 vector */
    const int64_t load = half ? 2 * W : W;
    T s;
    if (m < load) {
        SUF(colsum_ilp4)(&s, x, rs, 1, m, 1, 0);
        return s;
    }
    const int64_t nv = m / load;
    T lane[W];
    if (half)
        SUF(colsum_ilp4)(lane, x, load * rs, rs, nv, W, W * rs);
    else
        SUF(colsum_ilp4)(lane, x, load * rs, rs, nv, W, 0);
    T total = 0;
    for (int64_t i = nv * load; i < m; i++)
        total = total + x[i * rs];
    for (int l = 0; l < W; l++)
        total = total + lane[l];
    return total;
}

/* The columns [j0, j1) in chunks, either order (ilp4 or not) */
static void SUF(colsum_columns)(T *out, const T *x, int64_t rs, int64_t cs, int64_t m,
                                int64_t j0, int64_t j1, int ilp4)
{
    for (int64_t j = j0; j < j1; j += COLSUM_CHUNK) {
        const int64_t nb = j1 - j < COLSUM_CHUNK ? j1 - j : COLSUM_CHUNK;
        T sums[COLSUM_CHUNK];
        if (cs == 1 && ilp4)
            SUF(colsum_ilp4)(sums, x + j, rs, 1, m, nb, 0);
        else if (cs == 1)
            SUF(colsum_cascade)(sums, x + j, rs, 1, m, nb, 0);
        else if (ilp4)
            SUF(colsum_ilp4)(sums, x + j * cs, rs, cs, m, nb, 0);
        else
            SUF(colsum_cascade)(sums, x + j * cs, rs, cs, m, nb, 0);
        for (int64_t c = 0; c < nb; c++)
            out[j + c] = (T)0 + sums[c];
    }
}

/* A band of the blocked columns per task (each column alone: the same bits) */
typedef struct {
    T *out;
    const T *x;
    int64_t rs, cs, m, blocked, band;
} SUF(colsum_job);

static void SUF(colsum_task)(void *arg, int task)
{
    const SUF(colsum_job) *j = arg;
    const int64_t j0 = task * j->band, j1 = j0 + j->band < j->blocked ? j0 + j->band : j->blocked;
    SUF(colsum_columns)(j->out, j->x, j->rs, j->cs, j->m, j0, j1, 0);
}

static void SUF(colsum_body)(T *out, const T *x, int64_t rs, int64_t cs, int64_t m, int64_t n,
                             int half)
{
    enum { W = 32 / sizeof(T) };   /* lanes of torch's AVX2 vector */
    if (m <= 1) {                  /* not a reduction: 0 + x (-0 becomes +0), or zeros */
        for (int64_t j = 0; j < n; j++)
            out[j] = m == 1 ? (T)0 + x[j * cs] : 0;
        return;
    }
    /* one column, or the terms contiguous (a transposed gradient): torch reduces
     * an inner dimension, each column on its own */
    if (n == 1 || (rs == 1 && cs != 1)) {
        for (int64_t j = 0; j < n; j++)
            out[j] = (T)0 + SUF(inner_sum)(x + j * cs, rs, m, half);
        return;
    }
    /* columns in whole blocks of 4 vectors (4 columns when n < W): one cascade
     * over all rows (in bands of whole chunks on the threads when large); the
     * rest: four interleaved cascades */
    const int64_t blocked = n >= W ? n / (4 * W) * (4 * W) : n / 4 * 4;
    const int64_t chunks = (blocked + COLSUM_CHUNK - 1) / COLSUM_CHUNK;
    int t = (double)m * (double)blocked >= 2.0 * COLSUM_THREAD_MIN_ELEMS ? mk_get_num_threads() : 1;
    t = t > chunks ? (int)chunks : t;
    if (t > 1) {
        SUF(colsum_job) job = {out, x, rs, cs, m, blocked, (chunks + t - 1) / t * COLSUM_CHUNK};
        mk_parallel_run((int)((blocked + job.band - 1) / job.band), SUF(colsum_task), &job);
    } else {
        SUF(colsum_columns)(out, x, rs, cs, m, 0, blocked, 0);
    }
    SUF(colsum_columns)(out, x, rs, cs, m, blocked, n, 1);
}

#undef COLSUM_TERM
#undef T
#undef SUF
