/* The seed's MyAtt.forward, fused: no torch.cat copies.
 *
 *   scores[S, v1]       = cat(q, k) @ w_attn^T + b_attn
 *                       = q @ w_attn[:, :dq]^T + k @ w_attn[:, dq:]^T + b_attn
 *   attn_weights[S, v1] = softmax(scores, last axis)
 *   applied[S, v2]      = attn_weights @ v
 *   out[S, o]           = q @ w_comb[:, :dq]^T + applied @ w_comb[:, dq:]^T + b_comb
 *
 * q [S, dq], k [S, dk] and v [v1, v2] are strided (row, column strides in
 * elements): batch item 0 of the module's Q, K and V.  The weights are
 * C-contiguous, as Linear holds them: w_attn [v1, dq + dk], w_comb [o, dq + v2];
 * biases [v1] and [o], or NULL.  out [S, o] and attn_weights [S, v1] are
 * C-contiguous.  Any size may be 0.  `applied` lives in a workspace of a bounded
 * number of rows, not S.  Each cat(...) @ W^T is ONE reduction over dq + dk
 * (dq + v2) in the gemm's summation order (gemm_cat_*: torch's cat + Linear),
 * and no output depends on how S is split into row blocks or over threads.
 * Returns 0, or -1 when the workspace could not be allocated. */
#ifndef MYATT_KERNELS_MYATT_H
#define MYATT_KERNELS_MYATT_H

#include <stdint.h>

int myatt_forward_f32(float *out, float *attn_weights,
                      const float *q, int64_t rs_q, int64_t cs_q,
                      const float *k, int64_t rs_k, int64_t cs_k,
                      const float *v, int64_t rs_v, int64_t cs_v,
                      const float *w_attn, const float *b_attn,
                      const float *w_comb, const float *b_comb,
                      int64_t S, int64_t dq, int64_t dk, int64_t v1, int64_t v2, int64_t o);

int myatt_forward_f64(double *out, double *attn_weights,
                      const double *q, int64_t rs_q, int64_t cs_q,
                      const double *k, int64_t rs_k, int64_t cs_k,
                      const double *v, int64_t rs_v, int64_t cs_v,
                      const double *w_attn, const double *b_attn,
                      const double *w_comb, const double *b_comb,
                      int64_t S, int64_t dq, int64_t dk, int64_t v1, int64_t v2, int64_t o);

/* The gradients of myatt_forward for the loss
 *   sum(out * grad_out) + sum(attn_weights * grad_aw)   (the second term only when
 *                                                       grad_aw != NULL):
 *   grad_q [S, dq], grad_k [S, dk], grad_v [v1, v2], grad_w_attn [v1, dq + dk],
 *   grad_b_attn [v1], grad_w_comb [o, dq + v2], grad_b_comb [o], all C-contiguous
 *   (a NULL grad_b_* is not computed).  grad_out [S, o] and grad_aw [S, v1] are
 *   strided; the other inputs are those of myatt_forward.  attn_weights and
 *   applied are recomputed block by block (workspace: a bounded number of rows,
 *   not S).  Any size may be 0.
 * Returns 0, or -1 when the workspace could not be allocated. */
int myatt_backward_f32(float *grad_q, float *grad_k, float *grad_v,
                       float *grad_w_attn, float *grad_b_attn,
                       float *grad_w_comb, float *grad_b_comb,
                       const float *grad_out, int64_t rs_go, int64_t cs_go,
                       const float *grad_aw, int64_t rs_ga, int64_t cs_ga,
                       const float *q, int64_t rs_q, int64_t cs_q,
                       const float *k, int64_t rs_k, int64_t cs_k,
                       const float *v, int64_t rs_v, int64_t cs_v,
                       const float *w_attn, const float *b_attn,
                       const float *w_comb, const float *b_comb,
                       int64_t S, int64_t dq, int64_t dk, int64_t v1, int64_t v2, int64_t o);

int myatt_backward_f64(double *grad_q, double *grad_k, double *grad_v,
                       double *grad_w_attn, double *grad_b_attn,
                       double *grad_w_comb, double *grad_b_comb,
                       const double *grad_out, int64_t rs_go, int64_t cs_go,
                       const double *grad_aw, int64_t rs_ga, int64_t cs_ga,
                       const double *q, int64_t rs_q, int64_t cs_q,
                       const double *k, int64_t rs_k, int64_t cs_k,
                       const double *v, int64_t rs_v, int64_t cs_v,
                       const double *w_attn, const double *b_attn,
                       const double *w_comb, const double *b_comb,
                       int64_t S, int64_t dq, int64_t dk, int64_t v1, int64_t v2, int64_t o);

#endif
