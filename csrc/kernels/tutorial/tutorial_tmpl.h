/* The fused MyAtt forward and backward, written once for both dtypes: included
 * by tutorial.c with T (float or double) and SUF(name) (name##_f32 or name##_f64)
 * defined, undefined again at the end.  No include guard on purpose.  Defines
 * the static bodies tutorial_forward_body and tutorial_backward_body; tutorial.c writes
 * out the public symbols.  Contract and formulas: tutorial.h. */
#ifndef T
#error "tutorial_tmpl.h: define T (the element type) before including it"
#endif
#ifndef SUF
#error "tutorial_tmpl.h: define SUF(name) (name##_f32, name##_f64) before including it"
#endif

#define TUTORIAL_BLK(x, r0, c0, rows, cols) mk_cblock((x), (r0), (c0), (rows), (cols), sizeof(T))

/* Rows per block of a [rows, width] workspace: as many as TUTORIAL_WORKSPACE_BYTES
 * allow, a multiple of TUTORIAL_ROW_BLOCK (at least one), at most S (>= 1). */
static int64_t SUF(tutorial_block_rows)(int64_t S, int64_t width)
{
    int64_t rows = TUTORIAL_WORKSPACE_BYTES / (int64_t)sizeof(T) / (width > 0 ? width : 1);
    rows = rows / TUTORIAL_ROW_BLOCK * TUTORIAL_ROW_BLOCK;
    if (rows < TUTORIAL_ROW_BLOCK)
        rows = TUTORIAL_ROW_BLOCK;
    return rows < S ? rows : S;
}

/* applied_keep: NULL (applied in row blocks in a bounded workspace, dropped),
 * or [S, v2] C-contiguous that receives all of applied (one block: myatt.vjp
 * keeps it for the pullback).  Each row's bits do not depend on the blocks. */
static int SUF(tutorial_forward_body)(T *out, T *attn_weights, T *applied_keep,
                                      const tutorial_inputs *in)
{
    const int64_t S = in->q.rows, dq = in->q.cols, v1 = in->v.rows, v2 = in->v.cols;
    const int64_t o = in->w_comb.rows;
    /* Nothing to write: return at once, not after S / TUTORIAL_ROW_BLOCK empty
     * blocks (S comes from a zero-size Q and may be 2**40 and more). */
    if (S <= 0 || (v1 <= 0 && o <= 0))
        return 0;

    /* The weights read transposed through strides (mk_t): w_attn^T
     * [dq + dk, v1], w_comb^T [dq + v2, o].  The A operands are concatenated by
     * the gemm's packing: [q | k], [q | applied]. */
    const mk_mat aw = mk_mat_c(attn_weights, S, v1);

    /* 1. scores [S, v1] = [q | k] @ w_attn^T + b_attn, written straight into
     *    attn_weights: ONE gemm over all S rows, the reduction over dq + dk one
     *    sum as torch's cat + Linear does it (each output's sum does not depend
     *    on how the rows are split, so the backward's row blocks recompute the
     *    same bits). */
    int status = SUF(gemm_cat)(aw, in->q, in->k, mk_t(in->w_attn), in->b_attn, 0);
    /* 2. attn_weights = softmax(scores) along v1, in place, all rows at once */
    SUF(softmax_forward)(attn_weights, attn_weights, S, v1, 1);
    if (status != 0)
        return -1;

    /* 3. per block of R rows (R from the workspace bound, often all of S):
     *      applied [rb, v2] = attn_weights_blk @ v      (v1 == 0 gives zeros)
     *      out_blk          = [q_blk | applied] @ w_comb^T + b_comb */
    const int64_t rows = applied_keep != NULL ? S : SUF(tutorial_block_rows)(S, v2);
    /* small workspaces (the seed's: one row) on the stack, no allocator call */
    _Alignas(64) T applied_stack[TUTORIAL_STACK_BYTES / sizeof(T)];
    const int on_stack = applied_keep == NULL
                         && rows * v2 <= (int64_t)(TUTORIAL_STACK_BYTES / sizeof(T));
    T *applied = applied_keep != NULL ? applied_keep
                 : on_stack ? applied_stack
                 : mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)v2), sizeof(T)));
    if (applied == NULL)
        return -1;
    for (int64_t r0 = 0; r0 < S && status == 0; r0 += rows) {
        const int64_t rb = S - r0 < rows ? S - r0 : rows;
        const mk_mat ap = mk_mat_c(applied, rb, v2);
        status |= SUF(gemm)(ap, TUTORIAL_BLK(mk_const(aw), r0, 0, rb, v1), in->v, NULL, 0);
        status |= SUF(gemm_cat)(mk_mat_c(out + r0 * o, rb, o), TUTORIAL_BLK(in->q, r0, 0, rb, dq),
                                mk_const(ap), mk_t(in->w_comb), in->b_comb, 0);
    }

    if (!on_stack && applied_keep == NULL)
        mk_free(applied);
    return status == 0 ? 0 : -1;
}

/* ---- backward -------------------------------------------------------------- */

/* x^T for x [rb, c] as the A of two products: when x's rows are contiguous,
 * copied into rows once in tp (the copy gemm itself makes of such an A, made
 * once instead of once per product: the same bits), else (or with no tp, or
 * on a path without a transposing copy) x^T in place. */
static mk_cmat SUF(tutorial_rows_of_t)(T *tp, mk_cmat x)
{
    const mk_cmat xt = mk_t(x);   /* [c, rb] */
    if (tp != NULL && xt.rs == 1
            && SUF(gemm_transpose)(tp, xt.data, xt.cs, xt.rows, xt.cols,
                                   mk_get_num_threads()) == 0)
        return mk_cmat_c(tp, xt.rows, xt.cols);
    return xt;
}

/* No rows (S == 0): the gradients of V and of the parameters are sums of no
 * terms, zeros (those of Q and K have no rows). */
static void SUF(tutorial_zero_grads)(const tutorial_grads *g, const tutorial_inputs *in)
{
    const int64_t dq = in->q.cols, dk = in->k.cols;
    const int64_t v1 = in->v.rows, v2 = in->v.cols, o = in->w_comb.rows;
    memset(g->v, 0, (size_t)(v1 * v2) * sizeof(T));
    memset(g->w_attn, 0, (size_t)(v1 * (dq + dk)) * sizeof(T));
    memset(g->w_comb, 0, (size_t)(o * (dq + v2)) * sizeof(T));
    if (g->b_attn != NULL)
        memset(g->b_attn, 0, (size_t)v1 * sizeof(T));
    if (g->b_comb != NULL)
        memset(g->b_comb, 0, (size_t)o * sizeof(T));
}

/* The backward's workspace (tutorial_backward_body's panels) for row blocks of
 * `rows` rows; tp and b_blk may be NULL (not needed). */
typedef struct {
    int64_t rows;
    T *aw, *ga, *ad, *tp, *b_blk;
} SUF(tutorial_bwd_ws);

/* Allocates ws for S rows; returns 0, or -1 when a panel could not be
 * allocated (ws then holds what was, for tutorial_bwd_ws_free). */
static int SUF(tutorial_bwd_ws_alloc)(SUF(tutorial_bwd_ws) *ws, const tutorial_inputs *in,
                                      int has_b_attn)
{
    const int64_t S = in->q.rows, dq = in->q.cols;
    const int64_t v1 = in->v.rows, v2 = in->v.cols, o = in->w_comb.rows;
    const int64_t w_aw = v1 > dq ? v1 : dq;   /* aw: attn_weights, later grad of Q */
    const int64_t width = w_aw > v2 ? w_aw : v2;
    const int64_t rows = ws->rows = SUF(tutorial_block_rows)(S, width);
    ws->aw = mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)w_aw), sizeof(T)));
    ws->ga = mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)v1), sizeof(T)));
    ws->ad = mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)v2), sizeof(T)));
    const int64_t w_tp = o > v1 ? o : v1;
    ws->tp = rows >= TUTORIAL_ROW_BLOCK && w_tp >= TUTORIAL_ROW_BLOCK   /* optional: NULL is fine */
             ? mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)w_tp), sizeof(T))) : NULL;
    /* several blocks: each block's bias sum of attn, added onto the others */
    ws->b_blk = rows < S && has_b_attn ? mk_alloc(mk_bytes((size_t)v1, sizeof(T))) : NULL;
    return ws->aw == NULL || ws->ga == NULL || ws->ad == NULL
           || (rows < S && has_b_attn && ws->b_blk == NULL) ? -1 : 0;
}

static void SUF(tutorial_bwd_ws_free)(SUF(tutorial_bwd_ws) *ws)
{
    mk_free(ws->aw);
    mk_free(ws->ga);
    mk_free(ws->ad);
    mk_free(ws->tp);
    mk_free(ws->b_blk);
}

/* ga[rb, v1] += grad_aw's rows [r0, r0 + rb) (strided): the weights' gradient
 * from the caller, added onto the one through the bmm */
static void SUF(tutorial_add_grad_aw)(T *ga, const mk_cmat *grad_aw, int64_t r0, int64_t rb,
                                      int64_t v1)
{
    const T *gad = grad_aw->data;
    const int64_t rs_ga = grad_aw->rs, cs_ga = grad_aw->cs;
    for (int64_t i = 0; i < rb; i++) {
        T *row = ga + i * v1;
        const T *gr = gad + (r0 + i) * rs_ga;
        if (cs_ga == 1)   /* contiguous rows: a loop the compiler vectorises */
            for (int64_t j = 0; j < v1; j++)
                row[j] = row[j] + gr[j];
        else
            for (int64_t j = 0; j < v1; j++)
                row[j] = row[j] + gr[j * cs_ga];
    }
}

/* The fused backward (contract: tutorial.h).  Row block by row block, R rows at a
 * time (R from the workspace bound: all of S when it fits): the block's
 * attn_weights and applied are recomputed (the same gemm and softmax calls as
 * the forward on a row range, so the same bits: no output's sum depends on how
 * the rows are split), used, and dropped.  The workspace is three panels:
 *   aw [R, v1]  attn_weights of the block, then grad of Q through the attn layer
 *               ([R, dq]: the panel is max(v1, dq) wide)
 *   ga [R, v1]  grad of attn_weights, then (in place) grad of the scores
 *   ad [R, v2]  applied, then (once its uses are done) grad of applied
 *   tp [R, max(o, v1)]  grad_out^T, then ga^T, as rows (large blocks only)
 * Weight, bias and V gradients are sums over S: the first block writes them,
 * later blocks accumulate.
 *
 * torch's bits: where a tensor gets two gradients (Q through both layers,
 * attn_weights from the output and from the bmm), each is computed in full and
 * then the two added, as autograd does (not one accumulated onto the other);
 * the bias gradients are torch's column sums (colsum.h), the softmax backward
 * torch's kernel.  With all of S in one block (the usual case: R rows fill
 * TUTORIAL_WORKSPACE_BYTES) the gradients are then torch's, bit for bit, wherever
 * MKL keeps to its main kernel's order; with several blocks, the sums over S
 * are cut at block boundaries (within torch's tolerance, not its bits). */
/* kept_aw [S, v1] and kept_ap [S, v2] (C-contiguous, read only): NULL, or
 * attn_weights and applied as tutorial_forward_body wrote them (myatt.vjp's
 * pullback): then steps 1 and 2 are skipped (no scores gemm, no softmax
 * forward) and the panels aw and ad only hold the block's grad of Q and grad
 * of applied; everything else is the same code, hence the same bits. */
static int SUF(tutorial_backward_body)(const tutorial_grads *g, mk_cmat grad_out,
                                       const mk_cmat *grad_aw, const tutorial_inputs *in,
                                       const T *kept_aw, const T *kept_ap)
{
    const int64_t S = in->q.rows, dq = in->q.cols, dk = in->k.cols;
    const int64_t v1 = in->v.rows, v2 = in->v.cols, o = in->w_comb.rows;
    const int64_t ld_attn = dq + dk;
    const int64_t ld_comb = dq + v2;
    T *grad_b_attn = g->b_attn, *grad_b_comb = g->b_comb;
    if (S <= 0) {   /* nothing summed */
        SUF(tutorial_zero_grads)(g, in);
        return 0;
    }
    SUF(tutorial_bwd_ws) ws;
    int status = SUF(tutorial_bwd_ws_alloc)(&ws, in, grad_b_attn != NULL);
    T *const aw = ws.aw, *const ga = ws.ga, *const ad = ws.ad, *const tp = ws.tp;
    const int64_t rows = ws.rows;
    if (grad_b_comb != NULL)   /* column sums of all of grad_out at once */
        SUF(colsum)(grad_b_comb, grad_out);

    const mk_mat gv = mk_mat_c(g->v, v1, v2);
    const mk_mat gwa = mk_mat_c(g->w_attn, v1, ld_attn);
    const mk_mat gwc = mk_mat_c(g->w_comb, o, ld_comb);
    const mk_cmat wq_attn = TUTORIAL_BLK(in->w_attn, 0, 0, v1, dq);    /* w_attn[:, :dq] */
    const mk_cmat wk_attn = TUTORIAL_BLK(in->w_attn, 0, dq, v1, dk);   /* w_attn[:, dq:] */
    const mk_cmat wq_comb = TUTORIAL_BLK(in->w_comb, 0, 0, o, dq);     /* w_comb[:, :dq] */
    const mk_cmat wa_comb = TUTORIAL_BLK(in->w_comb, 0, dq, o, v2);    /* w_comb[:, dq:] */
    for (int64_t r0 = 0; r0 < S && status == 0; r0 += rows) {
        const int64_t rb = S - r0 < rows ? S - r0 : rows;
        const int acc = r0 > 0;                                  /* sums over S: add after block 0 */
        const mk_cmat q_blk = TUTORIAL_BLK(in->q, r0, 0, rb, dq);
        const mk_cmat k_blk = TUTORIAL_BLK(in->k, r0, 0, rb, dk);
        const mk_cmat go_blk = TUTORIAL_BLK(grad_out, r0, 0, rb, o);
        T *gq_blk = (T *)g->q + r0 * dq;                         /* [rb, dq] */
        const mk_mat gk_blk = mk_mat_c((T *)g->k + r0 * dk, rb, dk);
        const mk_mat aw_m = mk_mat_c(aw, rb, v1), ga_m = mk_mat_c(ga, rb, v1);
        const mk_mat ad_m = mk_mat_c(ad, rb, v2);
        const mk_cmat ga_c = mk_const(ga_m), ad_c = mk_const(ad_m);
        /* the block's attn_weights and applied: kept, or recomputed into aw, ad */
        const mk_cmat aw_c = kept_aw != NULL ? mk_cmat_c(kept_aw + r0 * v1, rb, v1)
                                             : mk_const(aw_m);
        const mk_cmat ap_c = kept_ap != NULL ? mk_cmat_c(kept_ap + r0 * v2, rb, v2) : ad_c;

        if (kept_aw == NULL) {
            /* 1. aw = softmax([q_blk | k_blk] @ w_attn^T + b_attn), as the forward */
            status |= SUF(gemm_cat)(aw_m, q_blk, k_blk, mk_t(in->w_attn), in->b_attn, 0);
            SUF(softmax_forward)(aw, aw, rb, v1, 1);
            /* 2. ad = applied = aw @ v */
            status |= SUF(gemm)(ad_m, aw_c, in->v, NULL, 0);
        }

        /* 3. attn_combine: out = q @ cq^T + applied @ ca^T + b_comb
         *    grad_w_comb[:, :dq] += go^T @ q,  grad_w_comb[:, dq:] += go^T @ applied
         *    (grad_b_comb: above) */
        const mk_cmat go_t = SUF(tutorial_rows_of_t)(tp, go_blk);
        status |= SUF(gemm)(mk_block(gwc, 0, 0, o, dq, sizeof(T)), go_t, q_blk, NULL, acc);
        status |= SUF(gemm)(mk_block(gwc, 0, dq, o, v2, sizeof(T)), go_t, ap_c, NULL, acc);
        /*    gq = go @ cq,  ad = grad applied = go @ ca  (applied is no longer needed) */
        status |= SUF(gemm)(mk_mat_c(gq_blk, rb, dq), go_blk, wq_comb, NULL, 0);
        status |= SUF(gemm)(ad_m, go_blk, wa_comb, NULL, 0);

        /* 4. bmm: applied = aw @ v
         *    grad_v += aw^T @ grad applied,  ga = grad applied @ v^T (+ grad_aw) */
        status |= SUF(gemm)(gv, mk_t(aw_c), ad_c, NULL, acc);
        status |= SUF(gemm)(ga_m, ad_c, mk_t(in->v), NULL, 0);
        if (grad_aw != NULL)
            SUF(tutorial_add_grad_aw)(ga, grad_aw, r0, rb, v1);

        /* 5. softmax: ga = grad scores, in place */
        SUF(softmax_backward)(ga, ga, aw_c.data, rb, v1, 1);

        /* 6. attn: scores = q @ wq^T + k @ wk^T + b_attn
         *    grad_w_attn[:, :dq] += ga^T @ q,  grad_w_attn[:, dq:] += ga^T @ k,
         *    grad_b_attn += column sums of ga,  gq += ga @ wq (into aw first),
         *    gk = ga @ wk */
        const mk_cmat ga_t = SUF(tutorial_rows_of_t)(tp, ga_c);
        status |= SUF(gemm)(mk_block(gwa, 0, 0, v1, dq, sizeof(T)), ga_t, q_blk, NULL, acc);
        status |= SUF(gemm)(mk_block(gwa, 0, dq, v1, dk, sizeof(T)), ga_t, k_blk, NULL, acc);
        if (grad_b_attn != NULL && !acc) {
            SUF(colsum)(grad_b_attn, ga_c);
        } else if (grad_b_attn != NULL) {
            SUF(colsum)(ws.b_blk, ga_c);
            for (int64_t j = 0; j < v1; j++)
                grad_b_attn[j] = grad_b_attn[j] + ws.b_blk[j];
        }
        status |= SUF(gemm)(mk_mat_c(aw, rb, dq), ga_c, wq_attn, NULL, 0);
        for (int64_t i = 0; i < rb * dq; i++)
            gq_blk[i] = gq_blk[i] + aw[i];
        status |= SUF(gemm)(gk_blk, ga_c, wk_attn, NULL, 0);
    }

    SUF(tutorial_bwd_ws_free)(&ws);
    return status == 0 ? 0 : -1;
}

#undef TUTORIAL_BLK
#undef T
#undef SUF
