/* Scaled dot-product attention, written once for both dtypes: included by
 * sdpa.c with T (float or double), SUF(name) (name##_f32 or name##_f64) and
 * EXP (expf or exp) defined.  No include guard on purpose; the parameters are
 * undefined at the end.  Contract: sdpa.h. */
#ifndef T
#error "sdpa_tmpl.h needs T"
#endif
#ifndef SUF
#error "sdpa_tmpl.h needs SUF"
#endif
#ifndef EXP
#error "sdpa_tmpl.h needs EXP"
#endif

/* The vector exp of the CPU's path over an array (in place allowed), or NULL:
 * libm's.  (sdpa_internal.h: the exp of the SIMD forward.) */
typedef void (*SUF(sdpa_vexp_fn))(T *out, const T *inp, int64_t n);

static SUF(sdpa_vexp_fn) SUF(sdpa_vexp)(void)
{
    const SUF(sdpa_kernels) *simd = SUF(sdpa_select)();
    return simd != NULL ? simd->exp : NULL;
}

/* The path's SIMD forward when it takes the problem, else NULL (then the loops
 * below): not for E == 0 or Ev == 0, nor causal with a negative scale (torch
 * then scales the hidden keys' -inf to +inf, which the SIMD forward, skipping
 * them, would not see).  The choice depends on the shape only. */
static const SUF(sdpa_kernels) *SUF(sdpa_simd)(const sdpa_problem *p)
{
    if (p->E == 0 || p->Ev == 0 || (p->is_causal && !p->prescale && p->scale < 0))
        return NULL;
    return SUF(sdpa_select)();
}

/* Lanes of the exp-and-sum accumulator: an AVX-512 register of T, as torch's
 * vectorised _exp_reduce_sum_fusion_kernel sums (then a halving tree). */
#define SDPA_LANES (64 / (int)sizeof(T))

/* The largest of a[0:n], NaN if any is NaN (at::vec::maximum); -inf for n == 0.
 * The max itself skips NaN (so that it vectorises); only a row whose max is
 * -inf, which the caller would take for fully masked, is searched for a NaN:
 * any other NaN becomes NaN through exp(NaN - max) anyway. */
static T SUF(sdpa_row_max)(const T *a, int64_t n)
{
    T lanes[SDPA_LANES];
    for (int l = 0; l < SDPA_LANES; l++)
        lanes[l] = -INFINITY;
    const int64_t body = n - n % SDPA_LANES;
    for (int64_t j = 0; j < body; j += SDPA_LANES)
        for (int l = 0; l < SDPA_LANES; l++)
            lanes[l] = a[j + l] > lanes[l] ? a[j + l] : lanes[l];
    T mx = -INFINITY;
    for (int l = 0; l < SDPA_LANES; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    for (int64_t j = body; j < n; j++)
        mx = a[j] > mx ? a[j] : mx;
    if (mx == -INFINITY)
        for (int64_t j = 0; j < n; j++)
            if (a[j] != a[j])
                return a[j];
    return mx;
}

/* The exp and rescaling step of one row of a block (its own function, for a
 * vectorised exp later):
 *   a[j] <- exp(a[j] - max) for j < n, returns sum_j a[j]
 * summed in SDPA_LANES lanes, the lanes then added in a halving tree, then the
 * tail (torch's order). */
static T SUF(sdpa_exp_sum)(T *a, int64_t n, T max, SUF(sdpa_vexp_fn) vexp)
{
    T lanes[SDPA_LANES];
    for (int l = 0; l < SDPA_LANES; l++)
        lanes[l] = 0;
    const int64_t body = n - n % SDPA_LANES;
    if (vexp != NULL) {
        /* the vector path's exp over the body, then the same lane sums */
        for (int64_t j = 0; j < body; j++)
            a[j] -= max;
        vexp(a, a, body);
        for (int64_t j = 0; j < body; j += SDPA_LANES)
            for (int l = 0; l < SDPA_LANES; l++)
                lanes[l] += a[j + l];
    }
    else {
        for (int64_t j = 0; j < body; j += SDPA_LANES)
            for (int l = 0; l < SDPA_LANES; l++) {
                const T e = EXP(a[j + l] - max);
                a[j + l] = e;
                lanes[l] += e;
            }
    }
    for (int w = SDPA_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            lanes[l] += lanes[l + w];
    T sum = lanes[0];
    for (int64_t j = body; j < n; j++) {
        const T e = EXP(a[j] - max);
        a[j] = e;
        sum += e;
    }
    return sum;
}

/* The per-thread workspace: one [q block, kv block] tile of scores, the
 * running max and sum of each row, the [q block, Ev] accumulator. */
typedef struct {
    T *qk, *row_max, *row_sum, *acc;
    T *q_scaled, *k_scaled;   /* prescale only: [q block, E], [kv block, E] */
    SUF(sdpa_vexp_fn) vexp;
    T *dp;                    /* backward only: [q block, kv block] */
    T *tr;                    /* backward only: [kv block, q block] (sdpa_transpose) */
    /* forward, SIMD path: its table and workspace, the item's rows (sdpa_rows) */
    const SUF(sdpa_kernels) *simd;
    T *simd_ws;
    int64_t *row_b, *row_i;
    const void **row_q, **row_mask;
} SUF(sdpa_ws);

/* dst[rows, E] (contiguous) = src[rows, E] (strided) * factor */
static void SUF(sdpa_scale_rows)(T *dst, const T *src, int64_t rs, int64_t cs, int64_t rows,
                                 int64_t E, T factor)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < E; c++)
            dst[i * E + c] = src[i * rs + c * cs] * factor;
}

/* The block's scores, as the forward and the backward both compute them:
 *   qk[qb, kb] = q[m0:m0+qb] . k[n:n+kb] (* scale) + mask, -inf where causal hides a key
 * qr: the block's query rows through q_rs, q_cs (already scaled when prescale);
 * k and mask at key 0 of the batch index. */
static int SUF(sdpa_scores)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, T *qk,
                            const T *qr, int64_t q_rs, int64_t q_cs, const T *k,
                            const void *mask, int64_t m0, int64_t qb, int64_t n, int64_t kb)
{
    const int64_t E = p->E;
    const T scale = p->E == 0 || p->prescale ? (T)1 : (T)p->scale;
    /* 1. qk = q @ k^T */
    if (E == 0) {
        for (int64_t i = 0; i < qb * kb; i++)
            qk[i] = 0;
    } else {
        const T *kr = k + n * p->k.rs;
        int64_t k_rs = p->k.rs, k_cs = p->k.cs;
        if (p->prescale) {
            SUF(sdpa_scale_rows)(ws->k_scaled, kr, k_rs, k_cs, kb, E, (T)sqrt(fabs(p->scale)));
            kr = ws->k_scaled;
            k_rs = E;
            k_cs = 1;
        }
        if (SUF(gemm)(mk_mat_c(qk, qb, kb), (mk_cmat){qr, qb, E, q_rs, q_cs},
                      (mk_cmat){kr, E, kb, k_cs, k_rs}, NULL, 0) != 0)
            return -1;
    }
    /* 2. causal: -inf right of the diagonal (before the scale, as torch's flash kernel) */
    if (p->is_causal)
        for (int64_t r = 0; r < qb; r++) {
            const int64_t last = m0 + r - n;   /* last key column row r sees */
            for (int64_t j = last + 1 < 0 ? 0 : last + 1; j < kb; j++)
                qk[r * kb + j] = -INFINITY;
        }
    /* 3. s <- s * scale + mask */
    for (int64_t r = 0; r < qb; r++) {
        T *s = qk + r * kb;
        if (p->mask_kind == SDPA_MASK_FLOAT) {
            const T *mr = (const T *)mask + (m0 + r) * p->mask.rs + n * p->mask.cs;
            for (int64_t j = 0; j < kb; j++)
                s[j] = s[j] * scale + mr[j * p->mask.cs];
        } else if (p->mask_kind == SDPA_MASK_BOOL) {
            const unsigned char *mr =
                (const unsigned char *)mask + (m0 + r) * p->mask.rs + n * p->mask.cs;
            for (int64_t j = 0; j < kb; j++)
                s[j] = s[j] * scale + (mr[j * p->mask.cs] ? (T)0 : (T)-INFINITY);
        } else if (scale != 1) {
            for (int64_t j = 0; j < kb; j++)
                s[j] = s[j] * scale;
        }
    }
    return 0;
}

/* The block's query rows for the products: q itself, or (prescale) a copy
 * scaled by +-sqrt(|scale|) in ws->q_scaled. */
static const T *SUF(sdpa_query_rows)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, const T *q,
                                     int64_t m0, int64_t qb, int64_t *q_rs, int64_t *q_cs)
{
    const T *qr = q + m0 * p->q.rs;
    *q_rs = p->q.rs;
    *q_cs = p->q.cs;
    if (p->prescale && p->E > 0) {
        const T root = (T)sqrt(fabs(p->scale));
        SUF(sdpa_scale_rows)(ws->q_scaled, qr, *q_rs, *q_cs, qb, p->E, p->scale < 0 ? -root : root);
        qr = ws->q_scaled;
        *q_rs = p->E;
        *q_cs = 1;
    }
    return qr;
}

/* 7. out = acc / sum (/ (1 - dropout_p)), lse = max + log(sum); a row with
 *    every key masked has sum 0: zeros */
static void SUF(sdpa_finish_row)(const sdpa_problem *p, T *out, double *lse, const T *acc, T mx,
                                 T sum)
{
    const T keep_scale = p->dropout_p >= 1 ? (T)0 : (T)(1.0 / (1.0 - p->dropout_p));
    if (mx == -INFINITY)
        mx = 0;
    if (sum == 0)
        sum = 1;
    const T inv = (T)1 / sum;
    if (p->dropout_p > 0)
        for (int64_t c = 0; c < p->Ev; c++)
            out[c] = acc[c] * inv * keep_scale;
    else
        for (int64_t c = 0; c < p->Ev; c++)
            out[c] = acc[c] * inv;
    if (lse != NULL)
        *lse = (double)mx + log((double)sum);   /* in double: see sdpa.h */
}

/* Row t of the SIMD forward's item (sdpa_rows): query row i of batch index b,
 * whose q and mask are at row 0 of it. */
static void SUF(sdpa_set_row)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, int64_t t,
                              int64_t b, int64_t i, const T *q, const void *mask)
{
    ws->row_b[t] = b;
    ws->row_i[t] = i;
    ws->row_q[t] = q + i * p->q.rs;
    ws->row_mask[t] = p->mask_kind == SDPA_MASK_FLOAT
                          ? (const void *)((const T *)mask + i * p->mask.rs)
                      : p->mask_kind == SDPA_MASK_BOOL
                          ? (const void *)((const unsigned char *)mask + i * p->mask.rs)
                          : NULL;
}

/* One work item: query rows [m0, m0 + qb) of one batch index, q, k, v, mask,
 * out and lse already offset to that batch index (k and v at key 0). */
static int SUF(sdpa_block)(const sdpa_problem *p, const SUF(sdpa_ws) *ws,
                           const T *q, const T *k, const T *v, const void *mask,
                           T *out, double *lse, int64_t b, int64_t m0, int64_t qb,
                           int64_t k0, int64_t k1, T *partial)
{
    const int64_t S = p->S, Ev = p->Ev, kv_split = SDPA_KV_SPLIT;
    T *qk = ws->qk, *row_max = ws->row_max, *row_sum = ws->row_sum, *acc = ws->acc;
    if (ws->simd != NULL) {
        /* 1.-6. fused, on the path's SIMD kernels */
        for (int64_t r = 0; r < qb; r++)
            SUF(sdpa_set_row)(p, ws, r, b, m0 + r, q, mask);
        const sdpa_rows rows = {qb, ws->row_b, ws->row_i, ws->row_q, ws->row_mask};
        if (ws->simd->state(p, ws->simd_ws, &rows, k, v, k0, k1, acc, row_max, row_sum) != 0)
            return -1;
        goto finish;
    }
    int64_t q_rs, q_cs;
    const T *qr = SUF(sdpa_query_rows)(p, ws, q, m0, qb, &q_rs, &q_cs);
    for (int64_t r = 0; r < qb; r++) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0;
    }
    /* Causal: keys past the block's last row never take part; whole key
     * blocks beyond it are not computed at all. */
    int64_t num_keys = p->is_causal ? (m0 + qb < S ? m0 + qb : S) : S;
    if (num_keys > k1)
        num_keys = k1;
    if (num_keys <= k0)
        for (int64_t i = 0; i < qb * Ev; i++)
            acc[i] = 0;

    for (int64_t n = k0; n < num_keys; n += kv_split) {
        const int64_t kb = S - n < kv_split ? S - n : kv_split;
        /* 1.-3. scores, causal, scale and mask */
        if (SUF(sdpa_scores)(p, ws, qk, qr, q_rs, q_cs, k, mask, m0, qb, n, kb) != 0)
            return -1;
        for (int64_t r = 0; r < qb; r++) {
            T *s = qk + r * kb;
            T mx = SUF(sdpa_row_max)(s, kb);
            mx = row_max[r] > mx ? row_max[r] : mx;
            if (mx == -INFINITY) {
                /* every key so far masked: nothing to add (and no -inf - -inf) */
                for (int64_t j = 0; j < kb; j++)
                    s[j] = 0;
                continue;
            }
            /* 4. online softmax: s <- exp(s - max); rescale what came before */
            const T sum = SUF(sdpa_exp_sum)(s, kb, mx, ws->vexp);
            const T rescale = EXP(row_max[r] - mx);
            row_sum[r] = sum + rescale * row_sum[r];
            row_max[r] = mx;
            if (n > k0)
                for (int64_t c = 0; c < Ev; c++)
                    acc[r * Ev + c] *= rescale;
        }
        /* 5. dropout: dropped weights out of the product (the row sums keep them) */
        if (p->dropout_p > 0)
            for (int64_t r = 0; r < qb; r++)
                for (int64_t j = 0; j < kb; j++)
                    if (sdpa_dropout_uniform(p->dropout_seed, b, m0 + r, n + j) < p->dropout_p)
                        qk[r * kb + j] = 0;
        /* 6. acc[qb, Ev] (+)= exp(s)[qb, kb] @ v[n:n+kb, :] */
        if (SUF(gemm)(mk_mat_c(acc, qb, Ev), mk_cmat_c(qk, qb, kb),
                      (mk_cmat){v + n * p->v.rs, kb, Ev, p->v.rs, p->v.cs}, NULL, n > k0) != 0)
            return -1;
    }
finish:
    if (partial != NULL) {
        /* one chunk of keys: its running max, sum and accumulator, merged later */
        for (int64_t r = 0; r < qb; r++) {
            partial[r * (Ev + 2)] = row_max[r];
            partial[r * (Ev + 2) + 1] = row_sum[r];
            for (int64_t c = 0; c < Ev; c++)
                partial[r * (Ev + 2) + 2 + c] = acc[r * Ev + c];
        }
        return 0;
    }

    for (int64_t r = 0; r < qb; r++)
        SUF(sdpa_finish_row)(p, out + (m0 + r) * Ev, lse != NULL ? lse + m0 + r : NULL,
                             acc + r * Ev, row_max[r], row_sum[r]);
    return 0;
}

/* q, k, v and the mask of batch index b (row 0, key 0): the index unravelled
 * over the batch dimensions (the last first), key's and value's heads divided
 * by their GQA groups. */
static void SUF(sdpa_batch_operands)(const sdpa_problem *p, int64_t b, const T **q,
                                     const T **k, const T **v, const void **mask)
{
    int64_t oq = 0, ok = 0, ov = 0, om = 0, rest = b;
    for (int d = p->nbatch - 1; d >= 0; d--) {
        const int64_t idx = rest % p->batch[d];
        rest /= p->batch[d];
        const int last = d == p->nbatch - 1;
        oq += idx * p->q.bs[d];
        ok += (last ? idx / p->k_group : idx) * p->k.bs[d];
        ov += (last ? idx / p->v_group : idx) * p->v.bs[d];
        om += idx * p->mask.bs[d];
    }
    *q = (const T *)p->q.data + oq;
    *k = (const T *)p->k.data + ok;
    *v = (const T *)p->v.data + ov;
    *mask = NULL;
    if (p->mask_kind == SDPA_MASK_FLOAT)
        *mask = (const T *)p->mask.data + om;
    else if (p->mask_kind == SDPA_MASK_BOOL)
        *mask = (const unsigned char *)p->mask.data + om;
}

typedef struct {
    const sdpa_problem *p;
    T *out;
    double *lse;
    int64_t q_split, q_blocks, items;
    atomic_llong next;        /* the next item to take */
    atomic_int failed;
    /* Decode-like problems (few query blocks, long S) split the keys into
     * `chunks` runs of `chunk` keys (whole key blocks), one item each, whose
     * partial softmaxes `partial` [items, q_split, Ev + 2] are merged in chunk
     * order afterwards; chunks == 1 otherwise.  The split depends on the
     * shape only. */
    int64_t chunks, chunk;
    T *partial;
    /* > 1: an item is the query heads of one kv head (GQA, L in one query
     * block, SIMD path: sdpa_heads); 1 otherwise */
    int64_t heads;
} SUF(sdpa_job);

/* A GQA item (j->heads > 1, SIMD path): the L rows of each of the `heads`
 * query heads from b0 on, which read one kv head, computed together (its keys
 * and values read once for all of them). */
static int SUF(sdpa_heads)(const SUF(sdpa_job) *j, const SUF(sdpa_ws) *ws, int64_t b0)
{
    const sdpa_problem *p = j->p;
    const int64_t L = p->L, Ev = p->Ev;
    const T *q, *k, *v;
    const void *mask;
    for (int64_t h = 0; h < j->heads; h++) {
        SUF(sdpa_batch_operands)(p, b0 + h, &q, &k, &v, &mask);
        for (int64_t r = 0; r < L; r++)
            SUF(sdpa_set_row)(p, ws, h * L + r, b0 + h, r, q, mask);
    }
    const sdpa_rows rows = {j->heads * L, ws->row_b, ws->row_i, ws->row_q, ws->row_mask};
    if (ws->simd->state(p, ws->simd_ws, &rows, k, v, 0, p->S, ws->acc, ws->row_max,
                        ws->row_sum) != 0)
        return -1;
    for (int64_t t = 0; t < rows.n; t++)
        SUF(sdpa_finish_row)(p, j->out + (b0 * L + t) * Ev,
                             j->lse != NULL ? j->lse + b0 * L + t : NULL, ws->acc + t * Ev,
                             ws->row_max[t], ws->row_sum[t]);
    return 0;
}

/* One thread: its own workspace, then items taken one at a time. */
static void SUF(sdpa_task)(void *arg, int task)
{
    SUF(sdpa_job) *j = arg;
    const sdpa_problem *p = j->p;
    const int64_t qs = j->q_split, ks = p->S < SDPA_KV_SPLIT ? p->S : SDPA_KV_SPLIT;
    const int64_t n_scaled = p->prescale ? (qs + ks) * p->E : 0;
    const SUF(sdpa_kernels) *simd = SUF(sdpa_simd)(p);
    const int64_t mrows = qs * j->heads;   /* rows of an item */
    /* the SIMD path needs no score tile here, but its own workspace and row lists */
    const size_t n_tile = simd != NULL ? 0 : (size_t)(qs * ks + n_scaled);
    const size_t n_simd = simd != NULL ? simd->ws_elems(p, mrows) : 0;
    const size_t n_rows = simd != NULL ? (size_t)mrows * 4 * 8 / sizeof(T) + 1 : 0;
    const size_t n_ws = n_tile + (size_t)(2 * mrows + mrows * p->Ev) + 16 + n_rows + n_simd + 64;
    T *buf = mk_alloc(mk_bytes(n_ws, sizeof(T)));
    if (buf == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    T *scaled = buf + qs * ks;
    T *stats = buf + n_tile;   /* row_max [mrows], row_sum [mrows], acc [mrows, Ev] */
    SUF(sdpa_ws) ws = {buf, stats, stats + mrows, stats + 2 * mrows,
                       scaled, scaled + qs * p->E, SUF(sdpa_vexp)(), NULL};
    if (simd != NULL) {
        T *rows = buf + ((size_t)(stats - buf) + (size_t)(2 * mrows + mrows * p->Ev) + 15) / 16 * 16;
        ws.simd = simd;
        ws.row_b = (int64_t *)rows;
        ws.row_i = ws.row_b + mrows;
        ws.row_q = (const void **)(ws.row_i + mrows);
        ws.row_mask = ws.row_q + mrows;
        const size_t off = (size_t)(rows - buf) + n_rows;   /* 64-byte aligned */
        ws.simd_ws = buf + (off + 63) / 64 * 64;
    }
    for (;;) {
        const int64_t item = atomic_fetch_add(&j->next, 1);
        if (item >= j->items || atomic_load(&j->failed))
            break;
        if (j->heads > 1) {
            if (SUF(sdpa_heads)(j, &ws, item * j->heads) != 0) {
                atomic_store(&j->failed, 1);
                break;
            }
            continue;
        }
        const int64_t c = item % j->chunks, qi = item / j->chunks;
        const int64_t b = qi / j->q_blocks, m0 = (qi % j->q_blocks) * qs;
        const int64_t qb = p->L - m0 < qs ? p->L - m0 : qs;
        const int64_t k0 = c * j->chunk, k1 = k0 + j->chunk < p->S ? k0 + j->chunk : p->S;
        const T *q, *k, *v;
        const void *mask;
        SUF(sdpa_batch_operands)(p, b, &q, &k, &v, &mask);
        T *partial = j->chunks > 1 ? j->partial + item * qs * (p->Ev + 2) : NULL;
        if (SUF(sdpa_block)(p, &ws, q, k, v, mask, j->out + b * p->L * p->Ev,
                            j->lse != NULL ? j->lse + b * p->L : NULL, b, m0, qb,
                            k0, k1, partial) != 0) {
            atomic_store(&j->failed, 1);
            break;
        }
    }
    mk_free(buf);
}

/* out (and lse) from the chunks' partial softmaxes, for each row in chunk order:
 *   M = max_c m_c,  w_c = exp(m_c - M),  out = (sum_c w_c acc_c) / (sum_c w_c s_c) */
static void SUF(sdpa_merge_chunks)(const SUF(sdpa_job) *j, int64_t nb)
{
    const sdpa_problem *p = j->p;
    const int64_t Ev = p->Ev, qs = j->q_split, C = j->chunks;
    const T keep_scale = p->dropout_p >= 1 ? (T)0 : (T)(1.0 / (1.0 - p->dropout_p));
    for (int64_t qi = 0; qi < nb * j->q_blocks; qi++) {
        const int64_t b = qi / j->q_blocks, m0 = (qi % j->q_blocks) * qs;
        const int64_t qb = p->L - m0 < qs ? p->L - m0 : qs;
        for (int64_t r = 0; r < qb; r++) {
            const T *part0 = j->partial + (qi * C) * qs * (Ev + 2) + r * (Ev + 2);
            const int64_t step = qs * (Ev + 2);   /* from one chunk to the next */
            T mx = -INFINITY;
            for (int64_t c = 0; c < C; c++) {
                const T m = part0[c * step];
                mx = m > mx || m != m ? m : mx;
            }
            T *o = j->out + b * p->L * Ev + (m0 + r) * Ev;
            for (int64_t e = 0; e < Ev; e++)
                o[e] = 0;
            T sum = 0;
            if (mx != -INFINITY) {
                for (int64_t c = 0; c < C; c++) {
                    const T *part = part0 + c * step;
                    if (part[0] == -INFINITY)
                        continue;   /* a chunk with every key masked adds nothing */
                    const T w = EXP(part[0] - mx);
                    sum += w * part[1];
                    for (int64_t e = 0; e < Ev; e++)
                        o[e] += w * part[2 + e];
                }
            }
            if (mx == -INFINITY)
                mx = 0;
            if (sum == 0)
                sum = 1;
            const T inv = (T)1 / sum;
            for (int64_t e = 0; e < Ev; e++)
                o[e] = p->dropout_p > 0 ? o[e] * inv * keep_scale : o[e] * inv;
            if (j->lse != NULL)
                j->lse[b * p->L + m0 + r] = (double)mx + log((double)sum);
        }
    }
}

static int SUF(sdpa_forward_impl)(void *out, void *lse, const sdpa_problem *p)
{
    int64_t nb = 1;
    for (int d = 0; d < p->nbatch; d++)
        nb *= p->batch[d];
    if (nb == 0 || p->L == 0)
        return 0;
    if (p->Ev == 0 && lse == NULL)
        return 0;
    SUF(sdpa_job) j = {.p = p, .out = out, .lse = lse, .q_split = SDPA_Q_SPLIT(p->L), .heads = 1};
    if (j.q_split > p->L)
        j.q_split = p->L;
    j.q_blocks = (p->L + j.q_split - 1) / j.q_split;
    const int64_t key_blocks = (p->S + SDPA_KV_SPLIT - 1) / SDPA_KV_SPLIT;
    j.chunks = 1;
    j.chunk = p->S;
    if (!p->is_causal && nb * j.q_blocks < SDPA_KEY_CHUNKS && key_blocks >= 2) {
        j.chunks = key_blocks < SDPA_KEY_CHUNKS ? key_blocks : SDPA_KEY_CHUNKS;
        j.chunk = (key_blocks + j.chunks - 1) / j.chunks * SDPA_KV_SPLIT;
        j.chunks = (p->S + j.chunk - 1) / j.chunk;
    }
    if (j.chunks == 1 && SUF(sdpa_simd)(p) != NULL && nb * j.q_blocks >= 32) {
        /* The SIMD forward packs each key block once per item: four times the
         * rows per item when that still leaves 8 items or more.  (Rows are
         * computed alone: the bits do not depend on the split.) */
        j.q_split = 4 * j.q_split < p->L ? 4 * j.q_split : p->L;
        j.q_blocks = (p->L + j.q_split - 1) / j.q_split;
    }
    j.heads = 1;
    if (j.chunks == 1 && j.q_blocks == 1 && p->nbatch > 0 && p->k_group > 1
            && p->k_group == p->v_group && SUF(sdpa_simd)(p) != NULL)
        j.heads = p->k_group;   /* the heads (last batch dimension) are a multiple of it */
    j.items = nb * j.q_blocks * j.chunks / j.heads;
    if (j.chunks > 1) {
        j.partial = mk_alloc(mk_bytes((size_t)(j.items * j.q_split * (p->Ev + 2)), sizeof(T)));
        if (j.partial == NULL)
            return -1;
    }
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    mk_parallel_run(sdpa_threads(p, j.items), SUF(sdpa_task), &j);
    if (j.chunks > 1 && !atomic_load(&j.failed))
        SUF(sdpa_merge_chunks)(&j, nb);
    mk_free(j.partial);
    return atomic_load(&j.failed) ? -1 : 0;
}

/* ---- the backward (FlashAttention-2 style, from the forward's lse) ----------
 *
 * For one batch index, with P = exp(scores - lse) recomputed block by block:
 *   D[i]  = dO[i] . O[i]
 *   dV    = P^T @ dO,   dS = P * (dO @ V^T - D),   dK = scale * dS^T @ Q,
 *   dQ    = scale * dS @ K
 * Pass 1 takes (batch index, key block) items and sums dK, dV over the query
 * blocks (of SDPA_BWD_Q_SPLIT rows) in order; pass 2 takes (batch index, query
 * block) items and sums dQ over the key blocks in order (the scores computed
 * twice: no item writes what another one writes, so the bits do not depend on
 * the thread count).  When
 * key and value are broadcast or GQA-repeated differently (their batch
 * indices differ), pass 1 runs twice, by key's batch for dK and by value's
 * for dV (the scores computed once more).  Causal: a block of query rows
 * computes only the keys its last row sees (sdpa_seen_keys). */

/* a[j] <- exp(a[j] - shift) for j < n */
static void SUF(sdpa_exp_shift)(T *a, int64_t n, double shift, SUF(sdpa_vexp_fn) vexp)
{
    for (int64_t j = 0; j < n; j++)   /* in double: |shift| may be large (sdpa.h) */
        a[j] = (T)((double)a[j] - shift);
    if (vexp != NULL) {
        vexp(a, a, n);
    }
    else {
        for (int64_t j = 0; j < n; j++)
            a[j] = EXP(a[j]);
    }
}

/* P and dS of the block (rows m0.., keys n..) into ws->qk and ws->dp; D from
 * dvec, or where that is NULL the block's own sum_j P dP (sdpa_d_from_block). */
static int SUF(sdpa_block_ds)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, const T *qr,
                              int64_t q_rs, int64_t q_cs, const T *k, const T *v,
                              const void *mask, const T *dout, const double *lse, const T *dvec,
                              int64_t b, int64_t m0, int64_t qb, int64_t n, int64_t kb)
{
    const int64_t Ev = p->Ev;
    T *P = ws->qk, *dP = ws->dp;
    if (SUF(sdpa_scores)(p, ws, P, qr, q_rs, q_cs, k, mask, m0, qb, n, kb) != 0)
        return -1;
    for (int64_t r = 0; r < qb; r++)
        SUF(sdpa_exp_shift)(P + r * kb, kb, lse[m0 + r], ws->vexp);
    /* dP[qb, kb] = dO[m0:m0+qb] @ v[n:n+kb]^T */
    if (SUF(gemm)(mk_mat_c(dP, qb, kb), mk_cmat_c(dout + m0 * Ev, qb, Ev),
                  (mk_cmat){v + n * p->v.rs, Ev, kb, p->v.cs, p->v.rs}, NULL, 0) != 0)
        return -1;
    const T keep_scale = p->dropout_p >= 1 ? (T)0 : (T)(1.0 / (1.0 - p->dropout_p));
    T *kept = ws->tr;   /* a row of keep * P / (1 - p) (free until sdpa_dkdv) */
    for (int64_t r = 0; r < qb; r++) {
        T *pr = P + r * kb, *dpr = dP + r * kb;
        if (p->dropout_p > 0)   /* the forward's mask: dP <- keep * dP / (1 - p) */
            for (int64_t j = 0; j < kb; j++) {
                const int keep = sdpa_dropout_uniform(p->dropout_seed, b, m0 + r, n + j)
                                 >= p->dropout_p;
                dpr[j] = keep ? dpr[j] * keep_scale : (T)0;
                kept[j] = keep ? pr[j] * keep_scale : (T)0;
            }
        T d = 0;
        if (dvec != NULL)
            d = dvec[r];
        else
            for (int64_t j = 0; j < kb; j++)
                d += pr[j] * dpr[j];
        for (int64_t j = 0; j < kb; j++)
            dpr[j] = pr[j] * (dpr[j] - d);
        if (p->dropout_p > 0)   /* P <- what multiplied v, for dV */
            for (int64_t j = 0; j < kb; j++)
                pr[j] = kept[j];
    }
    return 0;
}

/* dst[cols, rows] = src[rows, cols]^T, both contiguous: the GEMM's transposing
 * copy where the path has one.  (A copy: a product then reads P^T or dS^T
 * in place instead of packing a transposed operand column by column.) */
static void SUF(sdpa_transpose)(T *dst, const T *src, int64_t rows, int64_t cols)
{
    const SUF(gemm_microkernel) *uk = SUF(gemm_select)();
    if (uk->copy_t != NULL) {
        uk->copy_t(dst, (int)rows, src, cols, cols, rows);
        return;
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            dst[j * rows + i] = src[i * cols + j];
}

/* dv[kb, Ev] (+)= P^T @ dO[qb, Ev];  dk[kb, E] (+)= dS^T @ q[qb, E] (strided),
 * P and dS in ws->qk and ws->dp */
static int SUF(sdpa_dkdv)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, int grads, T *dk,
                          T *dv, const T *dout, const T *q, int64_t qb, int64_t kb,
                          int accumulate)
{
    const int64_t E = p->E, Ev = p->Ev;
    if (grads & SDPA_GRAD_V) {
        SUF(sdpa_transpose)(ws->tr, ws->qk, qb, kb);
        if (SUF(gemm)(mk_mat_c(dv, kb, Ev), mk_cmat_c(ws->tr, kb, qb),
                      mk_cmat_c(dout, qb, Ev), NULL, accumulate) != 0)
            return -1;
    }
    if (!(grads & SDPA_GRAD_K))
        return 0;
    SUF(sdpa_transpose)(ws->tr, ws->dp, qb, kb);
    return SUF(gemm)(mk_mat_c(dk, kb, E), mk_cmat_c(ws->tr, kb, qb),
                     (mk_cmat){q, qb, E, p->q.rs, p->q.cs}, NULL, accumulate);
}

/* D[r] = dO[m0 + r] . O[m0 + r] into dvec, or NULL where D is the block's own
 * sum (sdpa_d_from_block) */
static const T *SUF(sdpa_dvec)(const sdpa_problem *p, T *dvec, const T *dout, const T *out,
                               int64_t m0, int64_t qb)
{
    const int64_t Ev = p->Ev;
    if (sdpa_d_from_block(p))
        return NULL;
    for (int64_t r = 0; r < qb; r++) {
        T d = 0;
        for (int64_t c = 0; c < Ev; c++)
            d += dout[(m0 + r) * Ev + c] * out[(m0 + r) * Ev + c];
        dvec[r] = d;
    }
    return dvec;
}

/* P and dS of the block (rows m0.., keys n..) of batch index b into ws->qk and ws->dp
 * (sdpa_block_ds), D in ws->row_sum: for pass 1 and sdpa_backward_all (pass 2 takes
 * the query rows and D once per query block). */
static int SUF(sdpa_block_grads)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, const T *q,
                                 const T *k, const T *v, const void *mask, const T *dout,
                                 const T *out, const double *lse, int64_t b, int64_t m0,
                                 int64_t qb, int64_t n, int64_t kb)
{
    int64_t q_rs, q_cs;
    const T *qr = SUF(sdpa_query_rows)(p, ws, q, m0, qb, &q_rs, &q_cs);
    const T *dvec = SUF(sdpa_dvec)(p, ws->row_sum, dout, out, m0, qb);
    return SUF(sdpa_block_ds)(p, ws, qr, q_rs, q_cs, k, v, mask, dout, lse, dvec, b, m0, qb,
                              n, kb);
}

/* Pass 1: adds batch index b's share of dK and / or dV (`grads`) of keys
 * [n, n + kb) into ws->acc ([kb, E] then [kb, Ev]); *first: nothing added yet
 * (then set to 0). */
static int SUF(sdpa_backward_kv)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, int64_t qs,
                                 const T *q, const T *k, const T *v, const void *mask,
                                 const T *dout, const T *out, const double *lse, int *first,
                                 int grads, int64_t b, int64_t n, int64_t kb)
{
    const int64_t L = p->L, E = p->E, Ev = p->Ev;
    T *dk_acc = ws->acc, *dv_acc = ws->acc + kb * E;
    for (int64_t m0 = 0; m0 < L; m0 += qs) {
        const int64_t qb = L - m0 < qs ? L - m0 : qs;
        if (p->is_causal && m0 + qb - 1 < n)
            continue;   /* no row of this block sees these keys */
        const int64_t kc = sdpa_seen_keys(p, m0, qb, n, kb);
        if (SUF(sdpa_block_grads)(p, ws, q, k, v, mask, dout, out, lse, b, m0, qb, n, kc) != 0)
            return -1;
        if (*first)   /* the keys hidden from this block: later blocks add onto zeros */
            for (int64_t r = kc; r < kb; r++) {
                for (int64_t c = 0; c < E; c++)
                    dk_acc[r * E + c] = 0;
                for (int64_t c = 0; c < Ev; c++)
                    dv_acc[r * Ev + c] = 0;
            }
        if (SUF(sdpa_dkdv)(p, ws, grads, dk_acc, dv_acc, dout + m0 * Ev, q + m0 * p->q.rs,
                           qb, kc, !*first) != 0)
            return -1;
        *first = 0;
    }
    return 0;
}

/* Pass 2: adds batch index b's share of dQ of query rows [m0, m0 + qb) into
 * ws->acc [qb, E]; *first as in pass 1. */
static int SUF(sdpa_backward_q)(const sdpa_problem *p, const SUF(sdpa_ws) *ws,
                                const T *q, const T *k, const T *v, const void *mask,
                                const T *dout, const T *out, const double *lse, int *first,
                                int64_t b, int64_t m0, int64_t qb)
{
    const int64_t S = p->S, E = p->E, kv_split = SDPA_KV_SPLIT;
    T *dq_acc = ws->acc;
    int64_t q_rs, q_cs;
    const T *qr = SUF(sdpa_query_rows)(p, ws, q, m0, qb, &q_rs, &q_cs);
    const T *dvec = SUF(sdpa_dvec)(p, ws->row_sum, dout, out, m0, qb);
    const int64_t num_keys = p->is_causal ? (m0 + qb < S ? m0 + qb : S) : S;
    for (int64_t n = 0; n < num_keys; n += kv_split) {
        const int64_t kc = sdpa_seen_keys(p, m0, qb, n, S - n < kv_split ? S - n : kv_split);
        if (SUF(sdpa_block_ds)(p, ws, qr, q_rs, q_cs, k, v, mask, dout, lse, dvec, b, m0, qb,
                               n, kc) != 0)
            return -1;
        /* dq[qb, E] (+)= dS @ k[n:n+kc] */
        if (SUF(gemm)(mk_mat_c(dq_acc, qb, E), mk_cmat_c(ws->dp, qb, kc),
                      (mk_cmat){k + n * p->k.rs, kc, E, p->k.rs, p->k.cs}, NULL, !*first) != 0)
            return -1;
        *first = 0;
    }
    return 0;
}

/* Both passes in one (sdpa_backward_impl says when): batch index `own` of k
 * and v, all of its dK and dV, and the dQ of every output batch index that
 * reads it, accumulated in place in the gradients' arrays.  For each reader
 * b (in order), key block n, query block m0: the scores once for dV, dK and
 * dQ (five products per block instead of seven).  Per output the same sums
 * in the same order as the two passes: dK, dV over (b, m0) in order, dQ over
 * n in order, so the same bits (up to the sign of an exact zero). */
static int SUF(sdpa_backward_all)(const sdpa_problem *p, const sdpa_grads *g,
                                  const SUF(sdpa_ws) *ws, int64_t qs, int64_t ks, int64_t nb,
                                  int64_t own)
{
    const int64_t L = p->L, S = p->S, E = p->E, Ev = p->Ev;
    const T scale = (T)p->scale;
    T *dk = (T *)g->dk + own * S * E, *dv = (T *)g->dv + own * S * Ev;
    for (int64_t i = 0; i < S * E; i++)
        dk[i] = 0;
    for (int64_t i = 0; i < S * Ev; i++)
        dv[i] = 0;
    for (int64_t b = 0; b < nb; b++) {
        if (sdpa_operand_index(p, &p->k, p->k_group, b) != own)
            continue;
        const T *q, *k, *v;
        const void *mask;
        SUF(sdpa_batch_operands)(p, b, &q, &k, &v, &mask);
        const T *dout = (const T *)g->dout + b * L * Ev;
        const T *out = (const T *)g->out + b * L * Ev;
        const double *lse = (const double *)g->lse + b * L;
        T *dq = (T *)g->dq + b * L * E;   /* q is not broadcast: b's own */
        for (int64_t i = 0; i < L * E; i++)
            dq[i] = 0;
        for (int64_t n = 0; n < S; n += ks) {
            const int64_t kb = S - n < ks ? S - n : ks;
            for (int64_t m0 = 0; m0 < L; m0 += qs) {
                const int64_t qb = L - m0 < qs ? L - m0 : qs;
                if (p->is_causal && m0 + qb - 1 < n)
                    continue;   /* no row of this block sees these keys */
                const int64_t kc = sdpa_seen_keys(p, m0, qb, n, kb);
                if (SUF(sdpa_block_grads)(p, ws, q, k, v, mask, dout, out, lse, b, m0, qb, n,
                                          kc) != 0)
                    return -1;
                /* dv[n:], dk[n:] += ...;  dq[m0:, E] += dS @ k[n:] */
                if (SUF(sdpa_dkdv)(p, ws, SDPA_GRAD_K | SDPA_GRAD_V, dk + n * E, dv + n * Ev,
                                   dout + m0 * Ev, q + m0 * p->q.rs, qb, kc, 1) != 0
                        || SUF(gemm)(mk_mat_c(dq + m0 * E, qb, E), mk_cmat_c(ws->dp, qb, kc),
                                     (mk_cmat){k + n * p->k.rs, kc, E, p->k.rs, p->k.cs},
                                     NULL, 1) != 0)
                    return -1;
            }
        }
        for (int64_t i = 0; i < L * E; i++)
            dq[i] *= scale;
    }
    for (int64_t i = 0; i < S * E; i++)
        dk[i] *= scale;
    return 0;
}

typedef struct {
    const sdpa_problem *p;
    const sdpa_grads *g;
    int grads;                      /* SDPA_GRAD_K and / or _V: by key blocks; _Q: by
                                       query blocks; all three: one pass by batch index
                                       of k (sdpa_backward_all) */
    const sdpa_operand *op;         /* whose batch `own` indexes: k, v or q */
    int64_t group;                  /* its GQA group */
    int64_t nb;                     /* the output's batch indices */
    int64_t q_split, kv_split, blocks, items;
    atomic_llong next;
    atomic_int failed;
} SUF(sdpa_bwd_job);

static void SUF(sdpa_bwd_task)(void *arg, int task)
{
    SUF(sdpa_bwd_job) *j = arg;
    const sdpa_problem *p = j->p;
    const sdpa_grads *g = j->g;
    const int64_t qs = j->q_split, ks = j->kv_split, E = p->E, Ev = p->Ev;
    const int64_t n_acc = ks * (E + Ev) > qs * E ? ks * (E + Ev) : qs * E;
    const size_t n_ws = (size_t)(3 * qs * ks + qs + n_acc + (qs + ks) * E);
    T *buf = mk_alloc(mk_bytes(n_ws > 0 ? n_ws : 1, sizeof(T)));
    if (buf == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    SUF(sdpa_ws) ws = {.qk = buf, .dp = buf + qs * ks, .row_sum = buf + 2 * qs * ks,
                       .acc = buf + 2 * qs * ks + qs, .vexp = SUF(sdpa_vexp)()};
    ws.q_scaled = ws.acc + n_acc;
    ws.k_scaled = ws.q_scaled + qs * E;
    ws.tr = ws.k_scaled + ks * E;
    for (;;) {
        const int64_t item = atomic_fetch_add(&j->next, 1);
        if (item >= j->items || atomic_load(&j->failed))
            break;
        if (j->grads == (SDPA_GRAD_K | SDPA_GRAD_V | SDPA_GRAD_Q)) {
            if (SUF(sdpa_backward_all)(p, g, &ws, qs, ks, j->nb, item) != 0) {
                atomic_store(&j->failed, 1);
                break;
            }
            continue;
        }
        /* the item's gradient block: index `own` of k's or v's (pass 1) or q's
         * (pass 2) batch, summed over the output's batch indices b that read it */
        const int64_t own = item / j->blocks, blk = item % j->blocks;
        const int kv_pass = !(j->grads & SDPA_GRAD_Q);
        const int64_t n = blk * ks, kb = p->S - n < ks ? p->S - n : ks;
        const int64_t m0 = blk * qs, qb = p->L - m0 < qs ? p->L - m0 : qs;
        int first = 1, rc = 0;
        for (int64_t b = 0; rc == 0 && b < j->nb; b++) {
            if (sdpa_operand_index(p, j->op, j->group, b) != own)
                continue;
            const T *q, *k, *v;
            const void *mask;
            SUF(sdpa_batch_operands)(p, b, &q, &k, &v, &mask);
            const T *dout = (const T *)g->dout + b * p->L * Ev;
            const T *out = (const T *)g->out + b * p->L * Ev;
            const double *lse = (const double *)g->lse + b * p->L;
            if (kv_pass)
                rc = SUF(sdpa_backward_kv)(p, &ws, qs, q, k, v, mask, dout, out, lse, &first,
                                           j->grads, b, n, kb);
            else
                rc = SUF(sdpa_backward_q)(p, &ws, q, k, v, mask, dout, out, lse, &first,
                                          b, m0, qb);
        }
        const T scale = (T)p->scale;
        if (rc == 0 && kv_pass) {
            T *dk = (T *)g->dk + own * p->S * E, *dv = (T *)g->dv + own * p->S * Ev;
            const T *dk_acc = ws.acc, *dv_acc = ws.acc + kb * E;
            for (int64_t r = 0; r < kb; r++) {
                if (j->grads & SDPA_GRAD_K)
                    for (int64_t c = 0; c < E; c++)
                        dk[(n + r) * E + c] = first ? (T)0 : dk_acc[r * E + c] * scale;
                if (j->grads & SDPA_GRAD_V)
                    for (int64_t c = 0; c < Ev; c++)
                        dv[(n + r) * Ev + c] = first ? (T)0 : dv_acc[r * Ev + c];
            }
        }
        else if (rc == 0) {
            T *dq = (T *)g->dq + own * p->L * E;
            for (int64_t r = 0; r < qb; r++)
                for (int64_t c = 0; c < E; c++)
                    dq[(m0 + r) * E + c] = first ? (T)0 : ws.acc[r * E + c] * scale;
        }
        if (rc != 0) {
            atomic_store(&j->failed, 1);
            break;
        }
    }
    mk_free(buf);
}

static int SUF(sdpa_backward_impl)(const sdpa_grads *g, const sdpa_problem *p)
{
    const int64_t L = p->L, S = p->S, E = p->E, Ev = p->Ev;
    int64_t nb = 1;
    for (int d = 0; d < p->nbatch; d++)
        nb *= p->batch[d];
    const int64_t nq = sdpa_own_items(p, &p->q), nk = sdpa_own_items(p, &p->k);
    const int64_t nv = sdpa_own_items(p, &p->v);
    if (nb == 0 || L == 0 || Ev == 0) {
        /* no output elements: the gradients are sums of no terms, zeros (without
         * this, a batch of 2**50 empty items, broadcast, ran for hours:
         * fuzz_python.py; with Ev == 0, scores of NaN gave NaN where torch gives 0) */
        for (int64_t i = 0; i < nq * L * E; i++)
            ((T *)g->dq)[i] = 0;
        for (int64_t i = 0; i < nk * S * E; i++)
            ((T *)g->dk)[i] = 0;
        for (int64_t i = 0; i < nv * S * Ev; i++)
            ((T *)g->dv)[i] = 0;
        return 0;
    }
    int kv_same = p->k_group == p->v_group;
    for (int d = 0; d < p->nbatch; d++)
        kv_same &= p->k.bd[d] == p->v.bd[d];
    const int64_t qs = L < SDPA_BWD_Q_SPLIT(p->is_causal) ? L : SDPA_BWD_Q_SPLIT(p->is_causal);
    const int64_t ks = S < SDPA_KV_SPLIT ? S : SDPA_KV_SPLIT;
    /* One pass when k and v are read alike, every output batch index has its
     * own q (its dQ then has one writer) and there are batch indices of k
     * enough for the threads (4 or more); else two (three when k and v are
     * read differently), whose items are blocks.  A choice by shape. */
    int q_own = 1;
    for (int d = 0; d < p->nbatch; d++)
        q_own = q_own && p->q.bd[d] == p->batch[d];
    if (kv_same && q_own && nk >= 4 && L > 0 && S > 0) {
        SUF(sdpa_bwd_job) j = {.p = p, .g = g, .grads = SDPA_GRAD_K | SDPA_GRAD_V | SDPA_GRAD_Q,
                               .op = &p->k, .group = p->k_group, .nb = nb, .q_split = qs,
                               .kv_split = ks, .blocks = 1, .items = nk};
        atomic_init(&j.next, 0);
        atomic_init(&j.failed, 0);
        mk_parallel_run(sdpa_threads(p, j.items), SUF(sdpa_bwd_task), &j);
        return atomic_load(&j.failed) ? -1 : 0;
    }
    /* the passes: dK and dV together by key blocks (or apart, by key's and by
     * value's batch), then dQ by query blocks; one with nothing to write is skipped */
    const struct {
        int grads;
        const sdpa_operand *op;
        int64_t group, len, split, size;
    } passes[3] = {
        {kv_same ? SDPA_GRAD_K | SDPA_GRAD_V : SDPA_GRAD_K, &p->k, p->k_group, S, ks,
         nk * S * (kv_same ? E + Ev : E)},
        {SDPA_GRAD_V, &p->v, p->v_group, S, ks, kv_same ? 0 : nv * S * Ev},
        {SDPA_GRAD_Q, &p->q, 1, L, qs, nq * L * E},
    };
    for (int i = 0; i < 3; i++) {
        if (passes[i].size == 0)
            continue;
        SUF(sdpa_bwd_job) j = {.p = p, .g = g, .grads = passes[i].grads, .op = passes[i].op,
                               .group = passes[i].group, .nb = nb,
                               .q_split = qs < 1 ? 1 : qs, .kv_split = ks < 1 ? 1 : ks};
        j.blocks = (passes[i].len + passes[i].split - 1) / passes[i].split;
        j.items = sdpa_own_items(p, passes[i].op) * j.blocks;
        atomic_init(&j.next, 0);
        atomic_init(&j.failed, 0);
        mk_parallel_run(sdpa_threads(p, j.items), SUF(sdpa_bwd_task), &j);
        if (atomic_load(&j.failed))
            return -1;
    }
    return 0;
}

#undef SDPA_LANES
#undef T
#undef SUF
#undef EXP
