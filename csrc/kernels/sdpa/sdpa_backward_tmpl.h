/* Scaled dot-product attention, the backward (FlashAttention-2 style, from
 * the forward's out and lse), written once for both dtypes: included by
 * sdpa.c after sdpa_block_tmpl.h and sdpa_forward_tmpl.h with T (float or
 * double), SUF(name) (name##_f32 or name##_f64) and EXP (expf or exp) defined.
 * No include guard on purpose; the parameters are undefined at the end.
 * Contract: sdpa.h.
 *
 * For one batch index, with P = exp(scores - lse) recomputed block by block:
 *   D[i]  = dO[i] . O[i]
 *   dV    = P^T @ dO,   dS = P * (dO @ V^T - D),   dK = scale * dS^T @ Q,
 *   dQ    = scale * dS @ K
 * Pass 1 takes (batch index, key block) items and sums dK, dV over the query
 * blocks (of SDPA_BWD_Q_SPLIT rows) in order; pass 2 takes (batch index, query
 * block) items and sums dQ over the key blocks in order (the scores computed
 * twice: no item writes what another one writes, so the bits do not depend on
 * the thread count).  When key and value are broadcast or GQA-repeated
 * differently (their batch indices differ), pass 1 runs twice, by key's batch
 * for dK and by value's for dV (the scores computed once more).  With enough
 * batch indices of k, one pass does all three (sdpa_backward_all).  Causal: a
 * block of query rows computes only the keys its last row sees
 * (sdpa_seen_keys).
 *
 * A half-precision call (p->round_weights: the float32 kernel of float16 or
 * bfloat16 operands) computes what torch's flash backward computes there:
 * P and dS from the float32 scores, each rounded to the half dtype before its
 * product (P for dV, dS for dK and dQ), and the gradients accumulated in the
 * half dtype, g <- round(g + scale * product), once per block of
 * SDPA_Q_SPLIT(L) query rows (dK, dV) or of SDPA_KV_SPLIT keys (dQ), in two
 * passes (never sdpa_backward_all). */

#ifndef T
#error "sdpa_backward_tmpl.h needs T"
#endif
#ifndef SUF
#error "sdpa_backward_tmpl.h needs SUF"
#endif
#ifndef EXP
#error "sdpa_backward_tmpl.h needs EXP"
#endif

/* A thread's backward workspace: one allocation, placed by sdpa_bwd_carve. */
typedef struct {
    T *qk;                    /* [q block, kv block]: the block's scores, then P */
    T *dp;                    /* [q block, kv block]: dP, then dS */
    T *d;                     /* [q block]: D of the block's rows (sdpa_dvec) */
    T *acc;                   /* pass 1: dK [kv block, E] then dV [kv block, Ev];
                                 pass 2: dQ [q block, E] */
    T *q_scaled, *k_scaled;   /* prescale: [q block, E], [kv block, E] */
    T *tr;                    /* [kv block, q block]: P^T or dS^T (sdpa_transpose) */
    T *tmp;                   /* round_weights: a block's product, as acc (else empty) */
    SUF(sdpa_vexp_fn) vexp;
} SUF(sdpa_bwd_ws);

/* The elements of a thread's backward workspace for blocks of qs query rows
 * and ks keys, the regions in the order of the struct; with buf != NULL, ws's
 * pointers into buf. */
static size_t SUF(sdpa_bwd_carve)(SUF(sdpa_bwd_ws) *ws, T *buf, const sdpa_problem *p,
                                  int64_t qs, int64_t ks)
{
    const int64_t E = p->E, Ev = p->Ev;
    const int64_t n_acc = ks * (E + Ev) > qs * E ? ks * (E + Ev) : qs * E;
    const int64_t size[8] = {qs * ks, qs * ks, qs, n_acc, qs * E, ks * E, ks * qs,
                             p->round_weights ? n_acc : 0};
    T **const region[8] = {&ws->qk, &ws->dp, &ws->d, &ws->acc, &ws->q_scaled, &ws->k_scaled,
                           &ws->tr, &ws->tmp};
    size_t off = 0;
    for (int r = 0; r < 8; r++) {
        if (buf != NULL)
            *region[r] = buf + off;
        off += (size_t)size[r];
    }
    return off;
}

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
static int SUF(sdpa_block_ds)(const sdpa_problem *p, const SUF(sdpa_bwd_ws) *ws, const T *qr,
                              int64_t q_rs, int64_t q_cs, const T *k, const T *v,
                              const void *mask, const T *dout, const double *lse, const T *dvec,
                              int64_t b, int64_t m0, int64_t qb, int64_t n, int64_t kb)
{
    const int64_t Ev = p->Ev;
    T *P = ws->qk, *dP = ws->dp;
    if (SUF(sdpa_scores)(p, ws->k_scaled, P, qr, q_rs, q_cs, k, mask, m0, qb, n, kb, 0) != 0)
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
    if (p->round_weights) {   /* half precision: the operands of the products, rounded */
        SUF(sdpa_round)(P, qb * kb, p->round_weights);
        SUF(sdpa_round)(dP, qb * kb, p->round_weights);
    }
    return 0;
}

/* dst[rows, cols] (+)= scale * src @ b: the GEMM, or for a half-precision call
 * (round_weights) torch's accumulation in the half dtype, dst <- round(scale *
 * (src @ b) + dst) (zeros for dst without `accumulate`), with ws->tmp; a scale
 * of 1 (dV) or, for dK and dQ, p->scale, which the float32 and float64 sums
 * take only at the end. */
static int SUF(sdpa_grad_add)(const sdpa_problem *p, const SUF(sdpa_bwd_ws) *ws, mk_mat dst,
                              mk_cmat src, mk_cmat b, int scaled, int accumulate)
{
    if (!p->round_weights)
        return SUF(gemm)(dst, src, b, NULL, accumulate);
    T *d = dst.data, *t = ws->tmp;
    if (SUF(gemm)(mk_mat_c(t, dst.rows, dst.cols), src, b, NULL, 0) != 0)
        return -1;
    const T scale = scaled ? (T)p->scale : (T)1;
    const int64_t n = dst.rows * dst.cols;                /* dst is contiguous */
    for (int64_t i = 0; i < n; i++)
        d[i] = scale * t[i] + (accumulate ? d[i] : (T)0);
    SUF(sdpa_round)(d, n, p->round_weights);
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
static int SUF(sdpa_dkdv)(const sdpa_problem *p, const SUF(sdpa_bwd_ws) *ws, int grads, T *dk,
                          T *dv, const T *dout, const T *q, int64_t qb, int64_t kb,
                          int accumulate)
{
    const int64_t E = p->E, Ev = p->Ev;
    if (grads & SDPA_GRAD_V) {
        SUF(sdpa_transpose)(ws->tr, ws->qk, qb, kb);
        if (SUF(sdpa_grad_add)(p, ws, mk_mat_c(dv, kb, Ev), mk_cmat_c(ws->tr, kb, qb),
                               mk_cmat_c(dout, qb, Ev), 0, accumulate) != 0)
            return -1;
    }
    if (!(grads & SDPA_GRAD_K))
        return 0;
    SUF(sdpa_transpose)(ws->tr, ws->dp, qb, kb);
    return SUF(sdpa_grad_add)(p, ws, mk_mat_c(dk, kb, E), mk_cmat_c(ws->tr, kb, qb),
                              (mk_cmat){q, qb, E, p->q.rs, p->q.cs}, 1, accumulate);
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
 * (sdpa_block_ds), D in ws->d: for pass 1 and sdpa_backward_all (pass 2 takes
 * the query rows and D once per query block). */
static int SUF(sdpa_block_grads)(const sdpa_problem *p, const SUF(sdpa_bwd_ws) *ws, const T *q,
                                 const T *k, const T *v, const void *mask, const T *dout,
                                 const T *out, const double *lse, int64_t b, int64_t m0,
                                 int64_t qb, int64_t n, int64_t kb)
{
    int64_t q_rs, q_cs;
    const T *qr = SUF(sdpa_query_rows)(p, ws->q_scaled, q, m0, qb, &q_rs, &q_cs);
    const T *dvec = SUF(sdpa_dvec)(p, ws->d, dout, out, m0, qb);
    return SUF(sdpa_block_ds)(p, ws, qr, q_rs, q_cs, k, v, mask, dout, lse, dvec, b, m0, qb,
                              n, kb);
}

/* Pass 1: adds batch index b's share of dK and / or dV (`grads`) of keys
 * [n, n + kb) into ws->acc ([kb, E] then [kb, Ev]); *first: nothing added yet
 * (then set to 0). */
static int SUF(sdpa_backward_kv)(const sdpa_problem *p, const SUF(sdpa_bwd_ws) *ws, int64_t qs,
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
static int SUF(sdpa_backward_q)(const sdpa_problem *p, const SUF(sdpa_bwd_ws) *ws,
                                const T *q, const T *k, const T *v, const void *mask,
                                const T *dout, const T *out, const double *lse, int *first,
                                int64_t b, int64_t m0, int64_t qb)
{
    const int64_t S = p->S, E = p->E, kv_split = SDPA_KV_SPLIT;
    T *dq_acc = ws->acc;
    int64_t q_rs, q_cs;
    const T *qr = SUF(sdpa_query_rows)(p, ws->q_scaled, q, m0, qb, &q_rs, &q_cs);
    const T *dvec = SUF(sdpa_dvec)(p, ws->d, dout, out, m0, qb);
    const int64_t num_keys = p->is_causal ? (m0 + qb < S ? m0 + qb : S) : S;
    for (int64_t n = 0; n < num_keys; n += kv_split) {
        const int64_t kc = sdpa_seen_keys(p, m0, qb, n, S - n < kv_split ? S - n : kv_split);
        if (SUF(sdpa_block_ds)(p, ws, qr, q_rs, q_cs, k, v, mask, dout, lse, dvec, b, m0, qb,
                               n, kc) != 0)
            return -1;
        /* dq[qb, E] (+)= dS @ k[n:n+kc] */
        if (SUF(sdpa_grad_add)(p, ws, mk_mat_c(dq_acc, qb, E), mk_cmat_c(ws->dp, qb, kc),
                               (mk_cmat){k + n * p->k.rs, kc, E, p->k.rs, p->k.cs}, 1,
                               !*first) != 0)
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
                                  const SUF(sdpa_bwd_ws) *ws, int64_t qs, int64_t ks, int64_t nb,
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
    SUF(sdpa_bwd_ws) ws = {.vexp = SUF(sdpa_vexp)()};
    const size_t n_ws = SUF(sdpa_bwd_carve)(&ws, NULL, p, qs, ks);
    T *buf = mk_alloc(mk_bytes(n_ws > 0 ? n_ws : 1, sizeof(T)));
    if (buf == NULL) {
        atomic_store(&j->failed, 1);
        return;
    }
    SUF(sdpa_bwd_carve)(&ws, buf, p, qs, ks);
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
        /* (a half-precision call's sums took the scale in sdpa_grad_add) */
        const T scale = p->round_weights ? (T)1 : (T)p->scale;
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
    /* (half precision: torch's blocks, where its sums are rounded) */
    const int64_t q_split = p->round_weights ? SDPA_Q_SPLIT(L) : SDPA_BWD_Q_SPLIT(p->is_causal);
    const int64_t qs = L < q_split ? L : q_split;
    const int64_t ks = S < SDPA_KV_SPLIT ? S : SDPA_KV_SPLIT;
    /* One pass when k and v are read alike, every output batch index has its
     * own q (its dQ then has one writer) and there are batch indices of k
     * enough for the threads (4 or more); else two (three when k and v are
     * read differently), whose items are blocks.  A choice by shape. */
    int q_own = 1;
    for (int d = 0; d < p->nbatch; d++)
        q_own = q_own && p->q.bd[d] == p->batch[d];
    if (kv_same && q_own && nk >= 4 && L > 0 && S > 0 && !p->round_weights) {
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

#undef T
#undef SUF
#undef EXP
