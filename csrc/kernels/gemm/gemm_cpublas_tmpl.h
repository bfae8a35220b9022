/* The rows of torch's naive GEMM orders (gemm_cpublas.h), once per path:
 * included with CPUBLAS_FN(name) (its suffix), CPUBLAS_MADD(s, x, y) (s + x * y:
 * fused where the path has an FMA; the product of two half values is exact, so
 * either gives the same bits) and CPUBLAS_NJ (the columns DOT8 sums at once,
 * sharing the loads of a's row) defined, and optionally CPUBLAS_DOT8_BLOCKS (the
 * path's own main loop of the dot, dot8_blocks' contract); undefines them.  No
 * include guard on purpose. */

/* The 8 lanes of v added: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)),
 * lanes l ^ 4, l ^ 2, l ^ 1 (torch's AVX builds), or in order (tree 0: its
 * DEFAULT build) */
static float CPUBLAS_FN(reduce8)(const float *v, int tree)
{
    if (tree)
        return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
    float s = v[0];
    for (int l = 1; l < 8; l++)
        s += v[l];
    return s;
}

#ifndef CPUBLAS_DOT8_BLOCKS
/* The dot's main loop: s[c][l] = sum over the blocks of 64 in [0, blocks) of
 * x[p + l] * y[c][p + l], in order (s zero on entry) */
static void CPUBLAS_FN(dot8_blocks)(const float *x, const float *const *y, int64_t blocks,
                                    float (*s)[64])
{
    for (int64_t p = 0; p < blocks; p += 64)
        for (int c = 0; c < CPUBLAS_NJ; c++)
            for (int l = 0; l < 64; l++)
                s[c][l] = CPUBLAS_MADD(s[c][l], x[p + l], y[c][p + l]);
}
#define CPUBLAS_DOT8_BLOCKS CPUBLAS_FN(dot8_blocks)
#endif

/* torch's 8-lane dot of x with y[0..CPUBLAS_NJ - 1] (contiguous, len long) */
static void CPUBLAS_FN(dot8)(const float *x, const float *const *y, int64_t len, int tree,
                             float *out)
{
    float s[CPUBLAS_NJ][64] = {{0}}, t[CPUBLAS_NJ][8] = {{0}};
    const int64_t blocks = len & ~(int64_t)63, vectors = len & ~(int64_t)15;
    CPUBLAS_DOT8_BLOCKS(x, y, blocks, s);
    for (int64_t p = blocks; p < vectors; p += 16)
        for (int c = 0; c < CPUBLAS_NJ; c++) {
            for (int l = 0; l < 8; l++)
                t[c][l] = CPUBLAS_MADD(t[c][l], x[p + l], y[c][p + l]);
            for (int l = 0; l < 8; l++)
                t[c][l] = CPUBLAS_MADD(t[c][l], x[p + 8 + l], y[c][p + 8 + l]);
        }
    for (int c = 0; c < CPUBLAS_NJ; c++) {
        for (int off = 32; off >= 8; off /= 2)   /* accumulator r += r + off / 8 */
            for (int l = 0; l < off; l++)
                s[c][l] += s[c][l + off];
        float r = CPUBLAS_FN(reduce8)(s[c], tree);
        r += CPUBLAS_FN(reduce8)(t[c], tree);
        for (int64_t p = vectors; p < len; p++)
            r += x[p] * y[c][p];
        out[c] = r;
    }
}

/* c's row i, columns [j0, j0 + nj), nj <= CPUBLAS_COLS, SUM4 or CHAIN */
static void CPUBLAS_FN(sum_cols)(const cpublas_job *job, int64_t i, int64_t j0, int64_t nj)
{
    const float *a = (const float *)job->a.data + i * job->a.rs;
    const float *b = (const float *)job->b.data + j0;
    const int64_t k = job->a.cols, acs = job->a.cs, brs = job->b.rs;
    const int ways = job->order == CPUBLAS_SUM4 ? 4 : 1;
    float s[4][CPUBLAS_COLS];
    for (int w = 0; w < ways; w++)
        memset(s[w], 0, (size_t)nj * sizeof(float));
    int64_t p = 0;
    for (; p + ways <= k; p += ways)
        for (int w = 0; w < ways; w++) {
            const float av = a[(p + w) * acs];
            const float *bp = b + (p + w) * brs;
            for (int64_t j = 0; j < nj; j++)
                s[w][j] = CPUBLAS_MADD(s[w][j], av, bp[j]);
        }
    for (; p < k; p++) {   /* SUM4's last k % 4, into the first sum */
        const float av = a[p * acs];
        const float *bp = b + p * brs;
        for (int64_t j = 0; j < nj; j++)
            s[0][j] = CPUBLAS_MADD(s[0][j], av, bp[j]);
    }
    float *c = (float *)job->c.data + i * job->c.rs + j0 * job->c.cs;
    for (int64_t j = 0; j < nj; j++) {
        float v = s[0][j];
        for (int w = 1; w < ways; w++)
            v += s[w][j];
        if (job->bias != NULL)
            v += job->bias[j0 + j];
        c[j * job->c.cs] = v;
    }
}

void CPUBLAS_FN(cpublas_rows)(void *arg, int task)
{
    const cpublas_job *job = arg;
    const int64_t i0 = task * job->rows_per_task;
    const int64_t i1 = i0 + job->rows_per_task < job->c.rows ? i0 + job->rows_per_task
                                                             : job->c.rows;
    const int64_t n = job->c.cols, k = job->a.cols;
    if (job->order != CPUBLAS_DOT8) {
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j0 = 0; j0 < n; j0 += CPUBLAS_COLS)
                CPUBLAS_FN(sum_cols)(job, i, j0, n - j0 < CPUBLAS_COLS ? n - j0 : CPUBLAS_COLS);
        return;
    }
    /* blocks of columns of b (24 KiB: in L1) while a block of a's rows (512 KiB:
     * in L2) passes */
    const int64_t jb = k > 0 && 6144 / k > CPUBLAS_NJ ? 6144 / k / CPUBLAS_NJ * CPUBLAS_NJ
                                                     : CPUBLAS_NJ;
    const int64_t ib = k > 0 && 131072 / k > 1 ? 131072 / k : 1;
    for (int64_t ib0 = i0; ib0 < i1; ib0 += ib)
        for (int64_t j0 = 0; j0 < n; j0 += jb) {
            const int64_t j1 = j0 + jb < n ? j0 + jb : n;
            for (int64_t i = ib0; i < i1 && i < ib0 + ib; i++) {
                const float *x = (const float *)job->a.data + i * job->a.rs;
                float *c = (float *)job->c.data + i * job->c.rs;
                for (int64_t j = j0; j < j1; j += CPUBLAS_NJ) {
                    const float *y[CPUBLAS_NJ];
                    float v[CPUBLAS_NJ];
                    for (int q = 0; q < CPUBLAS_NJ; q++)   /* past the end: the last again */
                        y[q] = (const float *)job->b.data
                               + (j + q < j1 ? j + q : j1 - 1) * job->b.cs;
                    CPUBLAS_FN(dot8)(x, y, k, job->tree, v);
                    for (int q = 0; q < CPUBLAS_NJ && j + q < j1; q++)
                        c[(j + q) * job->c.cs] = job->bias != NULL ? v[q] + job->bias[j + q]
                                                                   : v[q];
                }
            }
        }
}

#undef CPUBLAS_FN
#undef CPUBLAS_MADD
#undef CPUBLAS_NJ
#undef CPUBLAS_DOT8_BLOCKS
