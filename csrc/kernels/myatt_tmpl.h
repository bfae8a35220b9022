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
    /* Nothing to write: return at once, not after S / MYATT_ROW_BLOCK empty
     * blocks (S comes from a zero-size Q and may be 2**40 and more). */
    if (S <= 0 || (v1 <= 0 && o <= 0))
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
