/* The fused MyAtt forward, written once for both dtypes: included by myatt.c
 * with T (float or double) and SUF(name) (name##_f32 or name##_f64) defined.
 * No include guard on purpose.  Contract and formulas: myatt.h. */

int SUF(myatt_forward)(T *out, T *attn_weights,
                       const T *q, int64_t rs_q, int64_t cs_q,
                       const T *k, int64_t rs_k, int64_t cs_k,
                       const T *v, int64_t rs_v, int64_t cs_v,
                       const T *w_attn, const T *b_attn,
                       const T *w_comb, const T *b_comb,
                       int64_t S, int64_t dq, int64_t dk, int64_t v1, int64_t v2, int64_t o)
{
    if (S <= 0)
        return 0;

    /* The weights, C-contiguous, read transposed through strides:
     *   w_attn [v1, dq + dk]: wq^T = w_attn[:, :dq]^T  [dq, v1]   rs = 1, cs = dq + dk
     *                         wk^T = w_attn[:, dq:]^T  [dk, v1]   (starts at column dq)
     *   w_comb [o, dq + v2]:  cq^T = w_comb[:, :dq]^T  [dq, o]    rs = 1, cs = dq + v2
     *                         ca^T = w_comb[:, dq:]^T  [v2, o]    (starts at column dq) */
    const int64_t ld_attn = dq + dk;
    const int64_t ld_comb = dq + v2;
    const T *wq = w_attn;
    const T *wk = w_attn + dq;
    const T *cq = w_comb;
    const T *ca = w_comb + dq;

    /* applied [rows, v2]: one row block at a time, never S rows */
    const int64_t rows = S < MYATT_ROW_BLOCK ? S : MYATT_ROW_BLOCK;
    T *applied = mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)v2), sizeof(T)));
    if (applied == NULL)
        return -1;

    int status = 0;
    for (int64_t r0 = 0; r0 < S && status == 0; r0 += MYATT_ROW_BLOCK) {
        const int64_t rb = S - r0 < MYATT_ROW_BLOCK ? S - r0 : MYATT_ROW_BLOCK;
        const T *q_blk = q + r0 * rs_q;           /* [rb, dq] */
        const T *k_blk = k + r0 * rs_k;           /* [rb, dk] */
        T *aw_blk = attn_weights + r0 * v1;       /* [rb, v1] */
        T *out_blk = out + r0 * o;                /* [rb, o]  */

        /* 1. scores = q_blk @ wq^T + b_attn, written into attn_weights */
        status |= SUF(gemm)(aw_blk, v1, 1, q_blk, rs_q, cs_q, wq, 1, ld_attn,
                            b_attn, rb, v1, dq, 0);
        /* 2. scores += k_blk @ wk^T */
        status |= SUF(gemm)(aw_blk, v1, 1, k_blk, rs_k, cs_k, wk, 1, ld_attn,
                            NULL, rb, v1, dk, 1);
        /* 3. attn_weights = softmax(scores) along v1, in place */
        SUF(softmax_forward)(aw_blk, aw_blk, rb, v1, 1);
        /* 4. applied [rb, v2] = attn_weights_blk @ v   (v1 == 0 gives zeros) */
        status |= SUF(gemm)(applied, v2, 1, aw_blk, v1, 1, v, rs_v, cs_v,
                            NULL, rb, v2, v1, 0);
        /* 5. out = q_blk @ cq^T + b_comb */
        status |= SUF(gemm)(out_blk, o, 1, q_blk, rs_q, cs_q, cq, 1, ld_comb,
                            b_comb, rb, o, dq, 0);
        /* 6. out += applied @ ca^T */
        status |= SUF(gemm)(out_blk, o, 1, applied, v2, 1, ca, 1, ld_comb,
                            NULL, rb, o, v2, 1);
    }

    mk_free(applied);
    return status == 0 ? 0 : -1;
}

/* ---- backward -------------------------------------------------------------- */

/* The fused backward (contract: myatt.h).  Row block by row block, as the
 * forward: the block's attn_weights and applied are recomputed (the same gemm
 * and softmax calls as the forward, so the same values), used, and dropped.
 * Nothing of size S is kept; the workspace is three [MYATT_ROW_BLOCK, *] panels:
 *   aw [rows, v1]  attn_weights of the block
 *   ga [rows, v1]  grad of attn_weights, then (in place) grad of the scores
 *   ad [rows, v2]  applied, then (once its uses are done) grad of applied
 * Weight, bias and V gradients are sums over S: the first block writes them,
 * later blocks accumulate (the gemm's own summation is blocked the same way). */
int SUF(myatt_backward)(T *grad_q, T *grad_k, T *grad_v,
                        T *grad_w_attn, T *grad_b_attn, T *grad_w_comb, T *grad_b_comb,
                        const T *grad_out, int64_t rs_go, int64_t cs_go,
                        const T *grad_aw, int64_t rs_ga, int64_t cs_ga,
                        const T *q, int64_t rs_q, int64_t cs_q,
                        const T *k, int64_t rs_k, int64_t cs_k,
                        const T *v, int64_t rs_v, int64_t cs_v,
                        const T *w_attn, const T *b_attn,
                        const T *w_comb, const T *b_comb,
                        int64_t S, int64_t dq, int64_t dk, int64_t v1, int64_t v2, int64_t o)
{
    static const T one = 1;   /* ones[1, rb] through zero strides: column sums by gemm */
    const int64_t ld_attn = dq + dk;
    const int64_t ld_comb = dq + v2;

    if (S <= 0) {   /* nothing summed: zero gradients for the parameters and V */
        memset(grad_v, 0, (size_t)(v1 * v2) * sizeof(T));
        memset(grad_w_attn, 0, (size_t)(v1 * ld_attn) * sizeof(T));
        memset(grad_w_comb, 0, (size_t)(o * ld_comb) * sizeof(T));
        if (grad_b_attn != NULL)
            memset(grad_b_attn, 0, (size_t)v1 * sizeof(T));
        if (grad_b_comb != NULL)
            memset(grad_b_comb, 0, (size_t)o * sizeof(T));
        return 0;
    }

    const int64_t rows = S < MYATT_ROW_BLOCK ? S : MYATT_ROW_BLOCK;
    const size_t panel_v1 = mk_bytes(mk_bytes((size_t)rows, (size_t)v1), sizeof(T));
    const size_t panel_v2 = mk_bytes(mk_bytes((size_t)rows, (size_t)v2), sizeof(T));
    T *aw = mk_alloc(panel_v1);
    T *ga = mk_alloc(panel_v1);
    T *ad = mk_alloc(panel_v2);
    int status = aw == NULL || ga == NULL || ad == NULL ? -1 : 0;

    for (int64_t r0 = 0; r0 < S && status == 0; r0 += MYATT_ROW_BLOCK) {
        const int64_t rb = S - r0 < MYATT_ROW_BLOCK ? S - r0 : MYATT_ROW_BLOCK;
        const int acc = r0 > 0;                     /* sums over S: add after block 0 */
        const T *q_blk = q + r0 * rs_q;             /* [rb, dq] */
        const T *k_blk = k + r0 * rs_k;             /* [rb, dk] */
        const T *go_blk = grad_out + r0 * rs_go;    /* [rb, o]  */
        T *gq_blk = grad_q + r0 * dq;               /* [rb, dq] */
        T *gk_blk = grad_k + r0 * dk;               /* [rb, dk] */

        /* 1. aw = softmax(q_blk @ wq^T + k_blk @ wk^T + b_attn), as the forward */
        status |= SUF(gemm)(aw, v1, 1, q_blk, rs_q, cs_q, w_attn, 1, ld_attn,
                            b_attn, rb, v1, dq, 0);
        status |= SUF(gemm)(aw, v1, 1, k_blk, rs_k, cs_k, w_attn + dq, 1, ld_attn,
                            NULL, rb, v1, dk, 1);
        SUF(softmax_forward)(aw, aw, rb, v1, 1);
        /* 2. ad = applied = aw @ v */
        status |= SUF(gemm)(ad, v2, 1, aw, v1, 1, v, rs_v, cs_v, NULL, rb, v2, v1, 0);

        /* 3. attn_combine: out = q @ cq^T + applied @ ca^T + b_comb
         *    grad_w_comb[:, :dq] += go^T @ q,  grad_w_comb[:, dq:] += go^T @ applied,
         *    grad_b_comb += column sums of go */
        status |= SUF(gemm)(grad_w_comb, ld_comb, 1, go_blk, cs_go, rs_go, q_blk, rs_q, cs_q,
                            NULL, o, dq, rb, acc);
        status |= SUF(gemm)(grad_w_comb + dq, ld_comb, 1, go_blk, cs_go, rs_go, ad, v2, 1,
                            NULL, o, v2, rb, acc);
        if (grad_b_comb != NULL)
            status |= SUF(gemm)(grad_b_comb, o, 1, &one, 0, 0, go_blk, rs_go, cs_go,
                                NULL, 1, o, rb, acc);
        /*    gq = go @ cq,  ad = grad applied = go @ ca  (applied is no longer needed) */
        status |= SUF(gemm)(gq_blk, dq, 1, go_blk, rs_go, cs_go, w_comb, ld_comb, 1,
                            NULL, rb, dq, o, 0);
        status |= SUF(gemm)(ad, v2, 1, go_blk, rs_go, cs_go, w_comb + dq, ld_comb, 1,
                            NULL, rb, v2, o, 0);

        /* 4. bmm: applied = aw @ v
         *    grad_v += aw^T @ grad applied,  ga = grad applied @ v^T (+ grad_aw) */
        status |= SUF(gemm)(grad_v, v2, 1, aw, 1, v1, ad, v2, 1, NULL, v1, v2, rb, acc);
        if (grad_aw != NULL)
            for (int64_t i = 0; i < rb; i++)
                for (int64_t j = 0; j < v1; j++)
                    ga[i * v1 + j] = grad_aw[(r0 + i) * rs_ga + j * cs_ga];
        status |= SUF(gemm)(ga, v1, 1, ad, v2, 1, v, cs_v, rs_v, NULL, rb, v1, v2,
                            grad_aw != NULL);

        /* 5. softmax: ga = grad scores, in place */
        SUF(softmax_backward)(ga, ga, aw, rb, v1, 1);

        /* 6. attn: scores = q @ wq^T + k @ wk^T + b_attn
         *    grad_w_attn[:, :dq] += ga^T @ q,  grad_w_attn[:, dq:] += ga^T @ k,
         *    grad_b_attn += column sums of ga,  gq += ga @ wq,  gk = ga @ wk */
        status |= SUF(gemm)(grad_w_attn, ld_attn, 1, ga, 1, v1, q_blk, rs_q, cs_q,
                            NULL, v1, dq, rb, acc);
        status |= SUF(gemm)(grad_w_attn + dq, ld_attn, 1, ga, 1, v1, k_blk, rs_k, cs_k,
                            NULL, v1, dk, rb, acc);
        if (grad_b_attn != NULL)
            status |= SUF(gemm)(grad_b_attn, v1, 1, &one, 0, 0, ga, v1, 1,
                                NULL, 1, v1, rb, acc);
        status |= SUF(gemm)(gq_blk, dq, 1, ga, v1, 1, w_attn, ld_attn, 1,
                            NULL, rb, dq, v1, 1);
        status |= SUF(gemm)(gk_blk, dk, 1, ga, v1, 1, w_attn + dq, ld_attn, 1,
                            NULL, rb, dk, v1, 0);
    }

    mk_free(aw);
    mk_free(ga);
    mk_free(ad);
    return status == 0 ? 0 : -1;
}
