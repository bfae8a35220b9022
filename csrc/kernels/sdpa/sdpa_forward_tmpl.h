/* Scaled dot-product attention, the forward (flash-style: an online softmax
 * over blocks of keys), written once for both dtypes: included by sdpa.c after
 * sdpa_block_tmpl.h with T (float or double), SUF(name) (name##_f32 or
 * name##_f64), EXP (expf or exp) and HALF_VEXP (the exp of a half-precision
 * call's weights, over whole vectors of torch's lanes; NULL for double) defined.
 * No include guard on purpose;
 * the parameters are undefined at the end.  Contract: sdpa.h.
 *
 * Per work item (sdpa_task: a query block of a batch index, or a chunk of its
 * keys, or the query heads of a GQA kv head), for each block of keys:
 *   1.-3. the scores (sdpa_scores: q . k, causal, scale, mask),
 *   4.    the online softmax: exp(s - max), the row's sum, the rescale of what
 *         came before,
 *   5.    dropout,
 *   6.    acc += weights @ v,
 * then 7. out = acc / sum and lse (sdpa_finish_row), or the chunk's state
 * kept for sdpa_merge_chunks.  The portable path runs 1.-6. as loops over the
 * GEMM (sdpa_block_loops), AVX2 and AVX-512 fused (sdpa_block_simd:
 * sdpa_simd_tmpl.h). */
#ifndef T
#error "sdpa_forward_tmpl.h needs T"
#endif
#ifndef SUF
#error "sdpa_forward_tmpl.h needs SUF"
#endif
#ifndef EXP
#error "sdpa_forward_tmpl.h needs EXP"
#endif
#ifndef HALF_VEXP
#error "sdpa_forward_tmpl.h needs HALF_VEXP"
#endif

/* The path's SIMD forward when it takes the problem, else NULL (then the loops
 * below): not for E == 0 or Ev == 0, nor causal with a negative scale (torch
 * then scales the hidden keys' -inf to +inf, which the SIMD forward, skipping
 * them, would not see), nor with round_weights (not written there yet).  The
 * choice depends on the shape only. */
static const SUF(sdpa_kernels) *SUF(sdpa_simd)(const sdpa_problem *p)
{
    if (p->E == 0 || p->Ev == 0 || (p->is_causal && !p->prescale && p->scale < 0)
            || p->round_weights)
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
    /* (the lanes as GCC vectors of 16 bytes: the compiler vectorises no scalar ?: max) */
    typedef T vec __attribute__((vector_size(16)));
    enum { PER = 16 / sizeof(T), NV = SDPA_LANES / PER };
    vec v[NV];
    for (int i = 0; i < NV; i++)
        for (int l = 0; l < PER; l++)
            v[i][l] = -INFINITY;
    const int64_t body = n - n % SDPA_LANES;
    for (int64_t j = 0; j < body; j += SDPA_LANES)
        for (int i = 0; i < NV; i++) {
            vec x;
            memcpy(&x, a + j + i * PER, sizeof x);
            /* lanes[l] = a[j + l] > lanes[l] ? a[j + l] : lanes[l] */
            const __typeof__(x > v[i]) gt = x > v[i];
            v[i] = (vec)((gt & (__typeof__(gt))x) | (~gt & (__typeof__(gt))v[i]));
        }
    T lanes[SDPA_LANES];
    memcpy(lanes, v, sizeof lanes);
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

/* lanes[l] += a[j + l] for each row j of nl in a[0:body] (nl <= 16), the lanes in
 * locals; sdpa_lane_sums calls it with nl 8 or 16 as a constant, for the compiler to
 * keep them in registers. */
static inline __attribute__((always_inline)) void
SUF(sdpa_lane_sums_n)(T *lanes, const T *a, int64_t body, int nl)
{
    T acc[16];
    for (int l = 0; l < nl; l++)
        acc[l] = lanes[l];
    for (int64_t j = 0; j < body; j += nl)
        for (int l = 0; l < nl; l++)
            acc[l] += a[j + l];
    for (int l = 0; l < nl; l++)
        lanes[l] = acc[l];
}

static void SUF(sdpa_lane_sums)(T *lanes, const T *a, int64_t body, int nl)
{
    if (nl == 16)
        SUF(sdpa_lane_sums_n)(lanes, a, body, 16);
    else if (nl == 8)
        SUF(sdpa_lane_sums_n)(lanes, a, body, 8);
    else
        SUF(sdpa_lane_sums_n)(lanes, a, body, nl);
}

/* The exp and rescaling step of one row of a block (its own function, for a
 * vectorised exp later):
 *   a[j] <- exp(a[j] - max) for j < n, returns sum_j a[j]
 * summed in nl lanes (SDPA_LANES, or for a half-precision call the lanes of
 * torch's vectors on this path), the lanes then added in a halving tree, then
 * the tail (torch's order). */
static T SUF(sdpa_exp_sum)(T *a, int64_t n, T max, SUF(sdpa_vexp_fn) vexp, int nl)
{
    T lanes[SDPA_LANES];
    for (int l = 0; l < nl; l++)
        lanes[l] = 0;
    const int64_t body = n - n % nl;
    if (vexp != NULL) {
        /* the vector path's exp over the body, then the same lane sums */
        for (int64_t j = 0; j < body; j++)
            a[j] -= max;
        vexp(a, a, body);
        SUF(sdpa_lane_sums)(lanes, a, body, nl);
    }
    else {
        for (int64_t j = 0; j < body; j += nl)
            for (int l = 0; l < nl; l++) {
                const T e = EXP(a[j + l] - max);
                a[j + l] = e;
                lanes[l] += e;
            }
    }
    for (int w = nl / 2; w >= 1; w /= 2)
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

/* A thread's forward workspace: one allocation, placed by sdpa_fwd_carve. */
typedef struct {
    /* portable path: the [q block, kv block] tile of scores, then weights; with
     * prescale the block's query rows and keys scaled, [q block, E], [kv block, E] */
    T *qk, *q_scaled, *k_scaled;
    /* each row's running max and sum [rows], its accumulator [rows, Ev] */
    T *row_max, *row_sum, *acc;
    SUF(sdpa_vexp_fn) vexp;
    int lanes;                       /* of sdpa_exp_sum */
    int dot;                         /* sdpa_product's: a bfloat16 call on vdpbf16ps */
    /* SIMD path: its table and workspace, the item's rows (sdpa_rows) */
    const SUF(sdpa_kernels) *simd;
    T *simd_ws;
    int64_t *row_b, *row_i;
    const void **row_q, **row_mask;
} SUF(sdpa_fwd_ws);

/* The elements of a thread's forward workspace for items of up to `rows`
 * query rows (qs, the query block, or qs times the heads of a GQA item) on
 * the path of ws->simd; with buf != NULL, ws's pointers into buf.  The
 * regions, in order:
 *   portable path  qk [qs, ks]; prescale: q_scaled [qs, E], k_scaled [ks, E]
 *                  (ks: the keys of a block, at most S)
 *   both paths     row_max [rows], row_sum [rows], acc [rows, Ev]
 *   SIMD path      from a multiple of 16 elements: row_b, row_i [rows]
 *                  (int64_t), row_q, row_mask [rows] (pointers); from a
 *                  multiple of 64 elements (64-byte aligned, as the path
 *                  wants): its own workspace, simd->ws_elems(p, rows) */
static size_t SUF(sdpa_fwd_carve)(SUF(sdpa_fwd_ws) *ws, T *buf, const sdpa_problem *p,
                                  int64_t qs, int64_t rows)
{
    const SUF(sdpa_kernels) *simd = ws->simd;
    const int64_t ks = p->S < SDPA_KV_SPLIT ? p->S : SDPA_KV_SPLIT;
    const size_t n_scaled = (size_t)(p->prescale ? (qs + ks) * p->E : 0);
    const size_t n_lists = ((size_t)rows * (2 * sizeof(int64_t) + 2 * sizeof(void *))
                            + sizeof(T) - 1) / sizeof(T);
    /* the regions' offsets, in elements of T */
    const size_t at_scaled = (size_t)(qs * ks);
    const size_t at_stats = simd != NULL ? 0 : at_scaled + n_scaled;
    const size_t stats_end = at_stats + (size_t)(2 * rows + rows * p->Ev);
    const size_t at_lists = (stats_end + 15) / 16 * 16;
    const size_t at_own = (at_lists + n_lists + 63) / 64 * 64;
    if (buf != NULL) {
        if (simd == NULL) {
            ws->qk = buf;
            ws->q_scaled = buf + at_scaled;
            ws->k_scaled = ws->q_scaled + qs * p->E;
        }
        ws->row_max = buf + at_stats;
        ws->row_sum = ws->row_max + rows;
        ws->acc = ws->row_sum + rows;
        if (simd != NULL) {
            ws->row_b = (int64_t *)(buf + at_lists);
            ws->row_i = ws->row_b + rows;
            ws->row_q = (const void **)(ws->row_i + rows);
            ws->row_mask = ws->row_q + rows;
            ws->simd_ws = buf + at_own;
        }
    }
    return simd != NULL ? at_own + simd->ws_elems(p, rows) : stats_end;
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
static void SUF(sdpa_set_row)(const sdpa_problem *p, const SUF(sdpa_fwd_ws) *ws, int64_t t,
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

/* The portable path's online softmax (sdpa_internal.h's state, by the loops
 * over the GEMM): query rows [m0, m0 + qb) of batch index b over keys
 * [k0, k1) (causal: those the rows see) into ws->row_max, ws->row_sum and
 * ws->acc [qb, Ev]; q, k, v and mask at row 0, key 0 of the batch index. */
static int SUF(sdpa_block_loops)(const sdpa_problem *p, const SUF(sdpa_fwd_ws) *ws,
                                 const T *q, const T *k, const T *v, const void *mask,
                                 int64_t b, int64_t m0, int64_t qb, int64_t k0, int64_t k1)
{
    const int64_t S = p->S, Ev = p->Ev, kv_split = SDPA_KV_SPLIT;
    T *qk = ws->qk, *row_max = ws->row_max, *row_sum = ws->row_sum, *acc = ws->acc;
    int64_t q_rs, q_cs;
    const T *qr = SUF(sdpa_query_rows)(p, ws->q_scaled, q, m0, qb, &q_rs, &q_cs);
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
        if (SUF(sdpa_scores)(p, ws->k_scaled, qk, qr, q_rs, q_cs, k, mask, m0, qb, n, kb,
                             ws->dot) != 0)
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
            const T sum = SUF(sdpa_exp_sum)(s, kb, mx, ws->vexp, ws->lanes);
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
        if (p->round_weights)   /* a half-precision call: the weights as torch's GEMM reads them */
            SUF(sdpa_round)(qk, qb * kb, p->round_weights);
        /* 6. acc[qb, Ev] (+)= exp(s)[qb, kb] @ v[n:n+kb, :] */
        if (SUF(sdpa_product)(mk_mat_c(acc, qb, Ev), mk_cmat_c(qk, qb, kb),
                              (mk_cmat){v + n * p->v.rs, kb, Ev, p->v.rs, p->v.cs}, n > k0,
                              ws->dot) != 0)
            return -1;
    }
    return 0;
}

/* The SIMD path's: the same steps fused, on the path's kernels. */
static int SUF(sdpa_block_simd)(const sdpa_problem *p, const SUF(sdpa_fwd_ws) *ws,
                                const T *q, const T *k, const T *v, const void *mask,
                                int64_t b, int64_t m0, int64_t qb, int64_t k0, int64_t k1)
{
    for (int64_t r = 0; r < qb; r++)
        SUF(sdpa_set_row)(p, ws, r, b, m0 + r, q, mask);
    const sdpa_rows rows = {qb, ws->row_b, ws->row_i, ws->row_q, ws->row_mask};
    return ws->simd->state(p, ws->simd_ws, &rows, k, v, k0, k1, ws->acc, ws->row_max,
                           ws->row_sum);
}

/* One work item: query rows [m0, m0 + qb) of one batch index, q, k, v, mask,
 * out and lse already offset to that batch index (k and v at key 0).  With
 * `partial` (one chunk of the keys, [k0, k1)): the rows' running max, sum and
 * accumulator there ([qb, Ev + 2]), merged later; else the rows of out. */
static int SUF(sdpa_block)(const sdpa_problem *p, const SUF(sdpa_fwd_ws) *ws,
                           const T *q, const T *k, const T *v, const void *mask,
                           T *out, double *lse, int64_t b, int64_t m0, int64_t qb,
                           int64_t k0, int64_t k1, T *partial)
{
    const int64_t Ev = p->Ev;
    /* 1.-6. */
    if ((ws->simd != NULL
             ? SUF(sdpa_block_simd)(p, ws, q, k, v, mask, b, m0, qb, k0, k1)
             : SUF(sdpa_block_loops)(p, ws, q, k, v, mask, b, m0, qb, k0, k1)) != 0)
        return -1;
    if (partial != NULL) {
        for (int64_t r = 0; r < qb; r++) {
            partial[r * (Ev + 2)] = ws->row_max[r];
            partial[r * (Ev + 2) + 1] = ws->row_sum[r];
            for (int64_t c = 0; c < Ev; c++)
                partial[r * (Ev + 2) + 2 + c] = ws->acc[r * Ev + c];
        }
        return 0;
    }
    /* 7. */
    for (int64_t r = 0; r < qb; r++)
        SUF(sdpa_finish_row)(p, out + (m0 + r) * Ev, lse != NULL ? lse + m0 + r : NULL,
                             ws->acc + r * Ev, ws->row_max[r], ws->row_sum[r]);
    return 0;
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
static int SUF(sdpa_heads)(const SUF(sdpa_job) *j, const SUF(sdpa_fwd_ws) *ws, int64_t b0)
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
    const int64_t qs = j->q_split;
    SUF(sdpa_fwd_ws) ws = {.vexp = p->round_weights ? HALF_VEXP : SUF(sdpa_vexp)(),
                           .lanes = p->round_weights ? mk_torch_float_lanes() : SDPA_LANES,
                           .simd = SUF(sdpa_simd)(p),
                           .dot = p->round_weights == MK_HALF_BF16 && mk_cpu_bf16_dot()};
    T *buf = mk_alloc(mk_bytes(SUF(sdpa_fwd_carve)(&ws, NULL, p, qs, qs * j->heads), sizeof(T)));
    if (buf == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    SUF(sdpa_fwd_carve)(&ws, buf, p, qs, qs * j->heads);
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
    /* (not for a half-precision call: its weights are rounded relative to the
     * running max, which a chunk of its own does not know) */
    if (!p->is_causal && !p->round_weights && nb * j.q_blocks < SDPA_KEY_CHUNKS
            && key_blocks >= 2) {
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

#undef SDPA_LANES
#undef T
#undef SUF
#undef EXP
#undef HALF_VEXP
