/* torch.nn.MultiheadAttention's forward (F.multi_head_attention_forward of
 * torch 2.13, training mode, no fast path), composed of the project's kernels:
 *
 *   q, k, v = in-projections of query, key, value            (linear, one GEMM
 *             when query, key and value are one array, two when key is value)
 *   k, v   += a row of bias_k, bias_v; a row of zeros (add_zero_attn)
 *   per head h: softmax(q_h k_h^T / sqrt(head_dim) + mask) v_h
 *   out     = out_proj(heads side by side)
 *
 * need_weights == 0: the heads through the flash kernel (sdpa.h), never an
 * [L, S] matrix but the merged mask's.  need_weights == 1: torch's explicit
 * order, q * sqrt(1 / head_dim) first, then bmm, + mask, softmax, (dropout),
 * bmm, so that its bits are within reach.
 *
 * Layout.  query [L*N, E], key [S*N, kdim], value [S*N, vdim] and out
 * [L*N, E] are C-contiguous; the row of batch item b and position i is
 * b * L + i with batch_first, else i * N + b (torch's [L, N, E]).  Heads are
 * addressed through strides in the projections: no transposed copy is made.
 *
 * Masks are of the kernel's dtype, already as torch's _canonical_mask leaves
 * them (a bool mask as 0 / -inf), before the bias_k / zero_attn padding
 * (padded here with 0): attn_mask [L, S] or [N*H, L, S] (attn_mask_3d),
 * key_padding_mask [N, S]; where both are given they are added, as torch adds
 * them.  weights: [N, H, L, S'] per head, or [N, L, S'] averaged over the heads
 * (torch's mean: a sum over h in its order, then / H), S' = S + (bias_k given)
 * + add_zero_attn; a row with every key masked is NaN there, and zeros in out
 * on the flash path (torch's CPU kernels). */
#ifndef MYATT_KERNELS_MHA_H
#define MYATT_KERNELS_MHA_H

#include <stdint.h>

#include "view.h"

typedef struct {
    int64_t L, S, N, E, H;           /* target and source lengths, batch, embed_dim, heads */
    int batch_first;
    const void *query, *key, *value;
    int qkv_same;                    /* query, key, value one array (kdim == vdim == E) */
    int kv_same;                     /* key and value one array (kdim == vdim == E) */
    /* the input projections: w_q [E, E], w_k [E, kdim], w_v [E, vdim]; with
     * qkv_same or kv_same they are consecutive row blocks of one [3E, E] array */
    mk_cmat w_q, w_k, w_v;
    const void *b_in;                /* [3E] (b_q, b_k, b_v) or NULL */
    const void *bias_k, *bias_v;     /* [E] each, or both NULL */
    int add_zero_attn;
    mk_cmat w_out;                   /* [E, E] */
    const void *b_out;               /* [E] or NULL */
    const void *attn_mask;           /* [L, S], [N*H, L, S] or NULL */
    int attn_mask_3d;
    int64_t attn_mask_stride;        /* 3-D: elements from one [L, S] to the next, L * S,
                                        or 0 where all N*H are one (a broadcast view) */
    const void *key_padding_mask;    /* [N, S] or NULL */
    int is_causal;                   /* flash path only: the causal triangle, no mask */
    int need_weights, average_weights;
    double dropout_p;                /* weights dropped with sdpa_dropout_uniform (sdpa.h) */
    uint64_t dropout_seed;
} mha_problem;

/* What a forward keeps for the backward: buffers of the kernel's dtype that
 * the forward allocated (mk_alloc) and that mha_saved_free releases. */
typedef struct {
    void *proj;          /* the in-projections (q, k, v rows side by side, or apart) */
    void *kx, *vx;       /* [N, S2, E]: k, v with the bias_k / zero rows, or NULL */
    void *mask;          /* the merged mask (see mha_forward), or NULL */
    int64_t mst[3];      /* its strides along N, H, L (0 where it does not vary) */
    void *heads;         /* [L*N, E]: the heads side by side, out_proj's input */
    void *w, *pw;        /* need_weights: [N, H, L, S2] per head, after dropout (w) and
                            before it (pw; NULL without dropout) */
    void *o, *lse;       /* !need_weights: the flash output [N, H, L, hd], lse [N, H, L]
                            (double, as sdpa.h writes it) */
    int64_t nbytes;      /* the bytes of these buffers */
} mha_saved;

void mha_saved_free(mha_saved *s);

/* out [L*N, E] (the layout above); weights as above, or NULL when
 * !need_weights.  keep: NULL, or a zero-filled mha_saved that receives what the
 * backward reads (also filled, to be freed, when -1 is returned).
 * Returns 0, or -1 when a workspace could not be allocated. */
int mha_forward_f32(void *out, void *weights, const mha_problem *p, mha_saved *keep);
int mha_forward_f64(void *out, void *weights, const mha_problem *p, mha_saved *keep);

/* The gradients of sum(out * d_out) + sum(weights * d_weights), all arrays
 * C-contiguous of the kernel's dtype, written whole (zeros where nothing
 * flows: L == 0 or N == 0).  query, key and value each get their own gradient,
 * also when they are one array (qkv_same, kv_same). */
typedef struct {
    void *d_query, *d_key, *d_value;   /* [L*N, E], [S*N, kdim], [S*N, vdim] */
    void *d_w[3];                      /* [E, E], [E, kdim], [E, vdim] (consecutive in
                                          in_proj_weight's gradient when packed) */
    void *d_b_in;                      /* [3E], or NULL (no b_in) */
    void *d_bias_k, *d_bias_v;         /* [E] each, or NULL */
    void *d_w_out, *d_b_out;           /* [E, E]; [E] or NULL */
    const void *d_out;                 /* [L*N, E] */
    const void *d_weights;             /* the weights' shape, or NULL (no cotangent) */
} mha_grads;

/* From the forward's problem and what it kept (dropout: the same mask).
 * Returns 0, or -1 when a workspace could not be allocated. */
int mha_backward_f32(const mha_grads *g, const mha_problem *p, const mha_saved *s);
int mha_backward_f64(const mha_grads *g, const mha_problem *p, const mha_saved *s);

#endif
