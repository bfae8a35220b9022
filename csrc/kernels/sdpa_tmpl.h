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
 * libm's.  (softmax_internal.h: Sleef's expf_u10 / exp_u10.) */
typedef void (*SUF(sdpa_vexp_fn))(T *out, const T *inp, int64_t n);

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

/* One work item: query rows [m0, m0 + qb) of one batch index, q, k, v, mask,
 * out and lse already offset to that batch index (k and v at key 0). */
static int SUF(sdpa_block)(const sdpa_problem *p, const SUF(sdpa_ws) *ws,
                           const T *q, const T *k, const T *v, const void *mask,
                           T *out, T *lse, int64_t b, int64_t m0, int64_t qb,
                           int64_t k0, int64_t k1, T *partial)
{
    const int64_t S = p->S, Ev = p->Ev, kv_split = SDPA_KV_SPLIT;
    T *qk = ws->qk, *row_max = ws->row_max, *row_sum = ws->row_sum, *acc = ws->acc;
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

    /* 7. out = acc / sum (/ (1 - dropout_p)); a row with every key masked has
     *    sum 0: zeros */
    const T keep_scale = p->dropout_p >= 1 ? (T)0 : (T)(1.0 / (1.0 - p->dropout_p));
    for (int64_t r = 0; r < qb; r++) {
        if (row_max[r] == -INFINITY)
            row_max[r] = 0;
        if (row_sum[r] == 0)
            row_sum[r] = 1;
        const T inv = (T)1 / row_sum[r];
        T *o = out + (m0 + r) * Ev;
        if (p->dropout_p > 0)
            for (int64_t c = 0; c < Ev; c++)
                o[c] = acc[r * Ev + c] * inv * keep_scale;
        else
            for (int64_t c = 0; c < Ev; c++)
                o[c] = acc[r * Ev + c] * inv;
        if (lse != NULL)
            lse[m0 + r] = row_max[r] + (T)log((double)row_sum[r]);
    }
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
    T *out, *lse;
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
} SUF(sdpa_job);

/* One thread: its own workspace, then items taken one at a time. */
static void SUF(sdpa_task)(void *arg, int task)
{
    SUF(sdpa_job) *j = arg;
    const sdpa_problem *p = j->p;
    const int64_t qs = j->q_split, ks = p->S < SDPA_KV_SPLIT ? p->S : SDPA_KV_SPLIT;
    const int64_t n_scaled = p->prescale ? (qs + ks) * p->E : 0;
    const size_t n_ws = (size_t)(qs * ks + 2 * qs + qs * p->Ev + n_scaled);
    T *buf = mk_alloc(mk_bytes(n_ws > 0 ? n_ws : 1, sizeof(T)));
    if (buf == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    T *scaled = buf + qs * ks + 2 * qs + qs * p->Ev;
    const SUF(sdpa_ws) ws = {buf, buf + qs * ks, buf + qs * ks + qs, buf + qs * ks + 2 * qs,
                             scaled, scaled + qs * p->E, SUF(sdpa_vexp)(), NULL};
    for (;;) {
        const int64_t item = atomic_fetch_add(&j->next, 1);
        if (item >= j->items || atomic_load(&j->failed))
            break;
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
                j->lse[b * p->L + m0 + r] = mx + (T)log((double)sum);
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
    SUF(sdpa_job) j = {.p = p, .out = out, .lse = lse, .q_split = SDPA_Q_SPLIT(p->L)};
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
    j.items = nb * j.q_blocks * j.chunks;
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
 * blocks in order; pass 2 takes (batch index, query block) items and sums dQ
 * over the key blocks in order (the scores computed twice: no item writes what
 * another one writes, so the bits do not depend on the thread count). */

/* a[j] <- exp(a[j] - shift) for j < n */
static void SUF(sdpa_exp_shift)(T *a, int64_t n, T shift, SUF(sdpa_vexp_fn) vexp)
{
    for (int64_t j = 0; j < n; j++)
        a[j] -= shift;
    if (vexp != NULL) {
        vexp(a, a, n);
    }
    else {
        for (int64_t j = 0; j < n; j++)
            a[j] = EXP(a[j]);
    }
}

/* P and dS of the block (rows m0.., keys n..) into ws->qk and ws->dp. */
static int SUF(sdpa_block_ds)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, const T *qr,
                              int64_t q_rs, int64_t q_cs, const T *k, const T *v,
                              const void *mask, const T *dout, const T *lse, const T *dvec,
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
    if (p->dropout_p > 0) {
        /* the forward's mask: dS = P * (keep * dP / (1 - p) - D); P <- keep * P / (1 - p)
         * (what multiplied v) for dV */
        const T keep_scale = p->dropout_p >= 1 ? (T)0 : (T)(1.0 / (1.0 - p->dropout_p));
        for (int64_t r = 0; r < qb; r++)
            for (int64_t j = 0; j < kb; j++) {
                const int keep = sdpa_dropout_uniform(p->dropout_seed, b, m0 + r, n + j)
                                 >= p->dropout_p;
                const T pr = P[r * kb + j];
                dP[r * kb + j] = pr * ((keep ? dP[r * kb + j] * keep_scale : (T)0) - dvec[r]);
                P[r * kb + j] = keep ? pr * keep_scale : (T)0;
            }
        return 0;
    }
    for (int64_t r = 0; r < qb; r++)
        for (int64_t j = 0; j < kb; j++)
            dP[r * kb + j] = P[r * kb + j] * (dP[r * kb + j] - dvec[r]);
    return 0;
}

/* D[r] = dO[m0 + r] . O[m0 + r] */
static void SUF(sdpa_dvec)(T *dvec, const T *dout, const T *out, int64_t m0, int64_t qb,
                           int64_t Ev)
{
    for (int64_t r = 0; r < qb; r++) {
        T d = 0;
        for (int64_t c = 0; c < Ev; c++)
            d += dout[(m0 + r) * Ev + c] * out[(m0 + r) * Ev + c];
        dvec[r] = d;
    }
}

/* Pass 1: adds batch index b's share of dK, dV of keys [n, n + kb) into
 * ws->acc ([kb, E] then [kb, Ev]); *first: nothing added yet (then set to 0). */
static int SUF(sdpa_backward_kv)(const sdpa_problem *p, const SUF(sdpa_ws) *ws, int64_t qs,
                                 const T *q, const T *k, const T *v, const void *mask,
                                 const T *dout, const T *out, const T *lse, int *first,
                                 int64_t b, int64_t n, int64_t kb)
{
    const int64_t L = p->L, E = p->E, Ev = p->Ev;
    T *dk_acc = ws->acc, *dv_acc = ws->acc + kb * E;
    for (int64_t m0 = 0; m0 < L; m0 += qs) {
        const int64_t qb = L - m0 < qs ? L - m0 : qs;
        if (p->is_causal && m0 + qb - 1 < n)
            continue;   /* no row of this block sees these keys */
        int64_t q_rs, q_cs;
        const T *qr = SUF(sdpa_query_rows)(p, ws, q, m0, qb, &q_rs, &q_cs);
        SUF(sdpa_dvec)(ws->row_sum, dout, out, m0, qb, Ev);
        if (SUF(sdpa_block_ds)(p, ws, qr, q_rs, q_cs, k, v, mask, dout, lse, ws->row_sum,
                               b, m0, qb, n, kb) != 0)
            return -1;
        /* dv[kb, Ev] (+)= P^T @ dO;  dk[kb, E] (+)= dS^T @ q */
        if (SUF(gemm)(mk_mat_c(dv_acc, kb, Ev), mk_t(mk_cmat_c(ws->qk, qb, kb)),
                      mk_cmat_c(dout + m0 * Ev, qb, Ev), NULL, !*first) != 0
                || SUF(gemm)(mk_mat_c(dk_acc, kb, E), mk_t(mk_cmat_c(ws->dp, qb, kb)),
                             (mk_cmat){q + m0 * p->q.rs, qb, E, p->q.rs, p->q.cs},
                             NULL, !*first) != 0)
            return -1;
        *first = 0;
    }
    return 0;
}

/* Pass 2: adds batch index b's share of dQ of query rows [m0, m0 + qb) into
 * ws->acc [qb, E]; *first as in pass 1. */
static int SUF(sdpa_backward_q)(const sdpa_problem *p, const SUF(sdpa_ws) *ws,
                                const T *q, const T *k, const T *v, const void *mask,
                                const T *dout, const T *out, const T *lse, int *first,
                                int64_t b, int64_t m0, int64_t qb)
{
    const int64_t S = p->S, E = p->E, Ev = p->Ev, kv_split = SDPA_KV_SPLIT;
    T *dq_acc = ws->acc;
    int64_t q_rs, q_cs;
    const T *qr = SUF(sdpa_query_rows)(p, ws, q, m0, qb, &q_rs, &q_cs);
    SUF(sdpa_dvec)(ws->row_sum, dout, out, m0, qb, Ev);
    const int64_t num_keys = p->is_causal ? (m0 + qb < S ? m0 + qb : S) : S;
    for (int64_t n = 0; n < num_keys; n += kv_split) {
        const int64_t kb = S - n < kv_split ? S - n : kv_split;
        if (SUF(sdpa_block_ds)(p, ws, qr, q_rs, q_cs, k, v, mask, dout, lse, ws->row_sum,
                               b, m0, qb, n, kb) != 0)
            return -1;
        /* dq[qb, E] (+)= dS @ k[n:n+kb] */
        if (SUF(gemm)(mk_mat_c(dq_acc, qb, E), mk_cmat_c(ws->dp, qb, kb),
                      (mk_cmat){k + n * p->k.rs, kb, E, p->k.rs, p->k.cs}, NULL, !*first) != 0)
            return -1;
        *first = 0;
    }
    return 0;
}

typedef struct {
    const sdpa_problem *p;
    const sdpa_grads *g;
    int pass;                       /* 1: dK, dV by key blocks; 2: dQ by query blocks */
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
    const size_t n_ws = (size_t)(2 * qs * ks + qs + n_acc + (qs + ks) * E);
    T *buf = mk_alloc(mk_bytes(n_ws > 0 ? n_ws : 1, sizeof(T)));
    if (buf == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    SUF(sdpa_ws) ws = {.qk = buf, .dp = buf + qs * ks, .row_sum = buf + 2 * qs * ks,
                       .acc = buf + 2 * qs * ks + qs, .vexp = SUF(sdpa_vexp)()};
    ws.q_scaled = ws.acc + n_acc;
    ws.k_scaled = ws.q_scaled + qs * E;
    for (;;) {
        const int64_t item = atomic_fetch_add(&j->next, 1);
        if (item >= j->items || atomic_load(&j->failed))
            break;
        /* the item's gradient block: index `own` of k's (pass 1) or q's (pass 2)
         * batch, summed over the output's batch indices b that read it */
        const int64_t own = item / j->blocks, blk = item % j->blocks;
        const sdpa_operand *op = j->pass == 1 ? &p->k : &p->q;
        const int64_t group = j->pass == 1 ? p->k_group : 1;
        const int64_t n = blk * ks, kb = p->S - n < ks ? p->S - n : ks;
        const int64_t m0 = blk * qs, qb = p->L - m0 < qs ? p->L - m0 : qs;
        int first = 1, rc = 0;
        for (int64_t b = 0; rc == 0 && b < j->nb; b++) {
            if (sdpa_operand_index(p, op, group, b) != own)
                continue;
            const T *q, *k, *v;
            const void *mask;
            SUF(sdpa_batch_operands)(p, b, &q, &k, &v, &mask);
            const T *dout = (const T *)g->dout + b * p->L * Ev;
            const T *out = (const T *)g->out + b * p->L * Ev;
            const T *lse = (const T *)g->lse + b * p->L;
            if (j->pass == 1)
                rc = SUF(sdpa_backward_kv)(p, &ws, qs, q, k, v, mask, dout, out, lse, &first,
                                           b, n, kb);
            else
                rc = SUF(sdpa_backward_q)(p, &ws, q, k, v, mask, dout, out, lse, &first,
                                          b, m0, qb);
        }
        const T scale = (T)p->scale;
        if (rc == 0 && j->pass == 1) {
            T *dk = (T *)g->dk + own * p->S * E, *dv = (T *)g->dv + own * p->S * Ev;
            const T *dk_acc = ws.acc, *dv_acc = ws.acc + kb * E;
            for (int64_t r = 0; r < kb; r++) {
                for (int64_t c = 0; c < E; c++)
                    dk[(n + r) * E + c] = first ? (T)0 : dk_acc[r * E + c] * scale;
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
    int64_t nb = 1;
    for (int d = 0; d < p->nbatch; d++)
        nb *= p->batch[d];
    if (nb == 0)
        return 0;
    const int64_t qs = p->L < SDPA_Q_SPLIT(p->L) ? p->L : SDPA_Q_SPLIT(p->L);
    const int64_t ks = p->S < SDPA_KV_SPLIT ? p->S : SDPA_KV_SPLIT;
    for (int pass = 1; pass <= 2; pass++) {
        const int64_t len = pass == 1 ? p->S : p->L, split = pass == 1 ? ks : qs;
        if (len == 0)
            continue;
        const sdpa_operand *op = pass == 1 ? &p->k : &p->q;
        int64_t n_own = 1;
        for (int d = 0; d < p->nbatch; d++)
            n_own *= op->bd[d];
        SUF(sdpa_bwd_job) j = {.p = p, .g = g, .pass = pass, .nb = nb,
                               .q_split = qs < 1 ? 1 : qs, .kv_split = ks < 1 ? 1 : ks};
        j.blocks = (len + split - 1) / split;
        j.items = n_own * j.blocks;
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
