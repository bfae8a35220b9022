/* The fused MyAtt forward, written once for both dtypes: included by myatt.c
 * with T (float or double) and SUF(name) (name##_f32 or name##_f64) defined.
 * No include guard on purpose.  Contract and formulas: myatt.h. */

/* Rows per block of a [rows, width] workspace: as many as MYATT_WORKSPACE_BYTES
 * allow, a multiple of MYATT_ROW_BLOCK (at least one), at most S (>= 1). */
static int64_t SUF(myatt_block_rows)(int64_t S, int64_t width)
{
    int64_t rows = MYATT_WORKSPACE_BYTES / (int64_t)sizeof(T) / (width > 0 ? width : 1);
    rows = rows / MYATT_ROW_BLOCK * MYATT_ROW_BLOCK;
    if (rows < MYATT_ROW_BLOCK)
        rows = MYATT_ROW_BLOCK;
    return rows < S ? rows : S;
}

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

    /* The weights, C-contiguous, read transposed through strides (rs = 1,
     * cs = row length): w_attn^T [dq + dk, v1], w_comb^T [dq + v2, o].  The
     * A operands are concatenated by the gemm's packing: [q | k], [q | applied]. */
    const int64_t ld_attn = dq + dk;
    const int64_t ld_comb = dq + v2;

    /* 1. scores [S, v1] = [q | k] @ w_attn^T + b_attn, written straight into
     *    attn_weights: ONE gemm over all S rows, the reduction over dq + dk one
     *    sum as torch's cat + Linear does it (each output's sum does not depend
     *    on how the rows are split, so the backward's row blocks recompute the
     *    same bits). */
    int status = SUF(gemm_cat)(attn_weights, v1, 1, q, rs_q, cs_q, dq, k, rs_k, cs_k,
                               w_attn, 1, ld_attn, b_attn, S, v1, ld_attn, 0);
    /* 2. attn_weights = softmax(scores) along v1, in place, all rows at once */
    SUF(softmax_forward)(attn_weights, attn_weights, S, v1, 1);
    if (status != 0)
        return -1;

    /* 3. per block of R rows (R from the workspace bound, often all of S):
     *      applied [rb, v2] = attn_weights_blk @ v      (v1 == 0 gives zeros)
     *      out_blk          = [q_blk | applied] @ w_comb^T + b_comb */
    const int64_t rows = SUF(myatt_block_rows)(S, v2);
    /* small workspaces (the seed's: one row) on the stack, no allocator call */
    _Alignas(64) T applied_stack[MYATT_STACK_BYTES / sizeof(T)];
    const int on_stack = rows * v2 <= (int64_t)(MYATT_STACK_BYTES / sizeof(T));
    T *applied = on_stack ? applied_stack
                          : mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)v2), sizeof(T)));
    if (applied == NULL)
        return -1;
    for (int64_t r0 = 0; r0 < S && status == 0; r0 += rows) {
        const int64_t rb = S - r0 < rows ? S - r0 : rows;
        status |= SUF(gemm)(applied, v2, 1, attn_weights + r0 * v1, v1, 1, v, rs_v, cs_v,
                            NULL, rb, v2, v1, 0);
        status |= SUF(gemm_cat)(out + r0 * o, o, 1, q + r0 * rs_q, rs_q, cs_q, dq,
                                applied, v2, 1, w_comb, 1, ld_comb, b_comb, rb, o, ld_comb, 0);
    }

    if (!on_stack)
        mk_free(applied);
    return status == 0 ? 0 : -1;
}

/* ---- backward -------------------------------------------------------------- */

/* The fused backward (contract: myatt.h).  Row block by row block, R rows at a
 * time (R from the workspace bound: all of S when it fits): the block's
 * attn_weights and applied are recomputed (the same gemm and softmax calls as
 * the forward on a row range, so the same bits: no output's sum depends on how
 * the rows are split), used, and dropped.  The workspace is three panels:
 *   aw [R, v1]  attn_weights of the block, then grad of Q through the attn layer
 *               ([R, dq]: the panel is max(v1, dq) wide)
 *   ga [R, v1]  grad of attn_weights, then (in place) grad of the scores
 *   ad [R, v2]  applied, then (once its uses are done) grad of applied
 * Weight, bias and V gradients are sums over S: the first block writes them,
 * later blocks accumulate.
 *
 * torch's bits: where a tensor gets two gradients (Q through both layers,
 * attn_weights from the output and from the bmm), each is computed in full and
 * then the two added, as autograd does (not one accumulated onto the other);
 * the bias gradients are torch's column sums (colsum.h), the softmax backward
 * torch's kernel.  With all of S in one block (the usual case: R rows fill
 * MYATT_WORKSPACE_BYTES) the gradients are then torch's, bit for bit, wherever
 * MKL keeps to its main kernel's order; with several blocks, the sums over S
 * are cut at block boundaries (within torch's tolerance, not its bits). */
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

    const int64_t w_aw = v1 > dq ? v1 : dq;   /* aw: attn_weights, later grad of Q */
    const int64_t width = w_aw > v2 ? w_aw : v2;
    const int64_t rows = SUF(myatt_block_rows)(S, width);
    const size_t panel_v1 = mk_bytes(mk_bytes((size_t)rows, (size_t)v1), sizeof(T));
    const size_t panel_v2 = mk_bytes(mk_bytes((size_t)rows, (size_t)v2), sizeof(T));
    T *aw = mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)w_aw), sizeof(T)));
    T *ga = mk_alloc(panel_v1);
    T *ad = mk_alloc(panel_v2);
    /* several blocks: each block's bias sum of attn, added onto the others */
    T *b_blk = rows < S && grad_b_attn != NULL ? mk_alloc(mk_bytes((size_t)v1, sizeof(T))) : NULL;
    int status = aw == NULL || ga == NULL || ad == NULL || (rows < S && grad_b_attn != NULL
                                                             && b_blk == NULL) ? -1 : 0;
    if (grad_b_comb != NULL)   /* column sums of all of grad_out at once */
        SUF(colsum)(grad_b_comb, grad_out, rs_go, cs_go, S, o);

    for (int64_t r0 = 0; r0 < S && status == 0; r0 += rows) {
        const int64_t rb = S - r0 < rows ? S - r0 : rows;
        const int acc = r0 > 0;                     /* sums over S: add after block 0 */
        const T *q_blk = q + r0 * rs_q;             /* [rb, dq] */
        const T *k_blk = k + r0 * rs_k;             /* [rb, dk] */
        const T *go_blk = grad_out + r0 * rs_go;    /* [rb, o]  */
        T *gq_blk = grad_q + r0 * dq;               /* [rb, dq] */
        T *gk_blk = grad_k + r0 * dk;               /* [rb, dk] */

        /* 1. aw = softmax([q_blk | k_blk] @ w_attn^T + b_attn), as the forward */
        status |= SUF(gemm_cat)(aw, v1, 1, q_blk, rs_q, cs_q, dq, k_blk, rs_k, cs_k,
                                w_attn, 1, ld_attn, b_attn, rb, v1, ld_attn, 0);
        SUF(softmax_forward)(aw, aw, rb, v1, 1);
        /* 2. ad = applied = aw @ v */
        status |= SUF(gemm)(ad, v2, 1, aw, v1, 1, v, rs_v, cs_v, NULL, rb, v2, v1, 0);

        /* 3. attn_combine: out = q @ cq^T + applied @ ca^T + b_comb
         *    grad_w_comb[:, :dq] += go^T @ q,  grad_w_comb[:, dq:] += go^T @ applied
         *    (grad_b_comb: above) */
        status |= SUF(gemm)(grad_w_comb, ld_comb, 1, go_blk, cs_go, rs_go, q_blk, rs_q, cs_q,
                            NULL, o, dq, rb, acc);
        status |= SUF(gemm)(grad_w_comb + dq, ld_comb, 1, go_blk, cs_go, rs_go, ad, v2, 1,
                            NULL, o, v2, rb, acc);
        /*    gq = go @ cq,  ad = grad applied = go @ ca  (applied is no longer needed) */
        status |= SUF(gemm)(gq_blk, dq, 1, go_blk, rs_go, cs_go, w_comb, ld_comb, 1,
                            NULL, rb, dq, o, 0);
        status |= SUF(gemm)(ad, v2, 1, go_blk, rs_go, cs_go, w_comb + dq, ld_comb, 1,
                            NULL, rb, v2, o, 0);

        /* 4. bmm: applied = aw @ v
         *    grad_v += aw^T @ grad applied,  ga = grad applied @ v^T (+ grad_aw) */
        status |= SUF(gemm)(grad_v, v2, 1, aw, 1, v1, ad, v2, 1, NULL, v1, v2, rb, acc);
        status |= SUF(gemm)(ga, v1, 1, ad, v2, 1, v, cs_v, rs_v, NULL, rb, v1, v2, 0);
        if (grad_aw != NULL)
            for (int64_t i = 0; i < rb; i++)
                for (int64_t j = 0; j < v1; j++)
                    ga[i * v1 + j] = ga[i * v1 + j] + grad_aw[(r0 + i) * rs_ga + j * cs_ga];

        /* 5. softmax: ga = grad scores, in place */
        SUF(softmax_backward)(ga, ga, aw, rb, v1, 1);

        /* 6. attn: scores = q @ wq^T + k @ wk^T + b_attn
         *    grad_w_attn[:, :dq] += ga^T @ q,  grad_w_attn[:, dq:] += ga^T @ k,
         *    grad_b_attn += column sums of ga,  gq += ga @ wq (into aw first),
         *    gk = ga @ wk */
        status |= SUF(gemm)(grad_w_attn, ld_attn, 1, ga, 1, v1, q_blk, rs_q, cs_q,
                            NULL, v1, dq, rb, acc);
        status |= SUF(gemm)(grad_w_attn + dq, ld_attn, 1, ga, 1, v1, k_blk, rs_k, cs_k,
                            NULL, v1, dk, rb, acc);
        if (grad_b_attn != NULL && !acc) {
            SUF(colsum)(grad_b_attn, ga, v1, 1, rb, v1);
        } else if (grad_b_attn != NULL) {
            SUF(colsum)(b_blk, ga, v1, 1, rb, v1);
            for (int64_t j = 0; j < v1; j++)
                grad_b_attn[j] = grad_b_attn[j] + b_blk[j];
        }
        status |= SUF(gemm)(aw, dq, 1, ga, v1, 1, w_attn, ld_attn, 1, NULL, rb, dq, v1, 0);
        for (int64_t i = 0; i < rb * dq; i++)
            gq_blk[i] = gq_blk[i] + aw[i];
        status |= SUF(gemm)(gk_blk, dk, 1, ga, v1, 1, w_attn + dq, ld_attn, 1,
                            NULL, rb, dk, v1, 0);
    }

    mk_free(aw);
    mk_free(ga);
    mk_free(ad);
    mk_free(b_blk);
    return status == 0 ? 0 : -1;
}
