/* The seed's MyAtt.forward, fused: no torch.cat copies.
 *
 *   scores[S, v1]       = cat(q, k) @ w_attn^T + b_attn
 *                       = q @ w_attn[:, :dq]^T + k @ w_attn[:, dq:]^T + b_attn
 *   attn_weights[S, v1] = softmax(scores, last axis)
 *   applied[S, v2]      = attn_weights @ v
 *   out[S, o]           = q @ w_comb[:, :dq]^T + applied @ w_comb[:, dq:]^T + b_comb
 *
 * The inputs (tutorial_inputs) are strided views (view.h): q [S, dq], k [S, dk]
 * and v [v1, v2], batch item 0 of the module's Q, K and V, and the weights
 * w_attn [v1, dq + dk], w_comb [o, dq + v2]; biases [v1] and [o] contiguous, or
 * NULL.  The sizes come from the views (S = q.rows, o = w_comb.rows, ...).
 * out [S, o] and attn_weights [S, v1] are C-contiguous.  Any size may be 0.
 * `applied` lives in a workspace of a bounded number of rows, not S.  Each
 * cat(...) @ W^T is ONE reduction over dq + dk (dq + v2) in the gemm's
 * summation order (gemm_cat_*: torch's cat + Linear), and no output depends on
 * how S is split into row blocks or over threads.
 * Returns 0, or -1 when the workspace could not be allocated. */
#ifndef MYATT_KERNELS_TUTORIAL_H
#define MYATT_KERNELS_TUTORIAL_H

#include "view.h"

/* What the forward reads: S = q.rows, dq = q.cols, dk = k.cols, v1 = v.rows,
 * v2 = v.cols, o = w_comb.rows. */
typedef struct {
    mk_cmat q, k, v;           /* [S, dq], [S, dk], [v1, v2] */
    mk_cmat w_attn, w_comb;    /* [v1, dq + dk], [o, dq + v2] */
    const void *b_attn;        /* [v1] or NULL */
    const void *b_comb;        /* [o] or NULL */
} tutorial_inputs;

int tutorial_forward_f32(void *out, void *attn_weights, const tutorial_inputs *in);
int tutorial_forward_f64(void *out, void *attn_weights, const tutorial_inputs *in);

/* The gradients the backward writes, all C-contiguous and shaped like what
 * they are the gradient of; a NULL b_attn / b_comb is not computed. */
typedef struct {
    void *q, *k, *v;
    void *w_attn, *b_attn;
    void *w_comb, *b_comb;
} tutorial_grads;

/* The gradients of tutorial_forward for the loss
 *   sum(out * grad_out) + sum(attn_weights * grad_aw)   (the second term only when
 *                                                       grad_aw != NULL)
 * into *grads.  grad_out [S, o] and grad_aw [S, v1] are strided views; the
 * inputs are those of tutorial_forward.  attn_weights and applied are recomputed
 * block by block (workspace: a bounded number of rows, not S).  Any size may be 0.
 * Returns 0, or -1 when the workspace could not be allocated. */
int tutorial_backward_f32(const tutorial_grads *grads, mk_cmat grad_out, const mk_cmat *grad_aw,
                          const tutorial_inputs *in);
int tutorial_backward_f64(const tutorial_grads *grads, mk_cmat grad_out, const mk_cmat *grad_aw,
                          const tutorial_inputs *in);

/* myatt.vjp: the forward that also writes all of applied [S, v2] (C-contiguous,
 * one block instead of a bounded workspace), and the backward that reads
 * attn_weights [S, v1] and applied (C-contiguous, as the forward wrote them,
 * never written) instead of recomputing them: one softmax backward pass, no
 * scores gemm.  The same bits as tutorial_forward / tutorial_backward. */
int tutorial_forward_kept_f32(void *out, void *attn_weights, void *applied,
                              const tutorial_inputs *in);
int tutorial_forward_kept_f64(void *out, void *attn_weights, void *applied,
                              const tutorial_inputs *in);
int tutorial_backward_kept_f32(const tutorial_grads *grads, mk_cmat grad_out,
                               const mk_cmat *grad_aw, const tutorial_inputs *in,
                               const void *attn_weights, const void *applied);
int tutorial_backward_kept_f64(const tutorial_grads *grads, mk_cmat grad_out,
                               const mk_cmat *grad_aw, const tutorial_inputs *in,
                               const void *attn_weights, const void *applied);

#endif
