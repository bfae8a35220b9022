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
    const void *key_padding_mask;    /* [N, S] or NULL */
    int is_causal;                   /* flash path only: the causal triangle, no mask */
    int need_weights, average_weights;
    double dropout_p;                /* weights dropped with sdpa_dropout_uniform (sdpa.h) */
    uint64_t dropout_seed;
} mha_problem;

/* out [L*N, E] (the layout above); weights as above, or NULL when
 * !need_weights.  Returns 0, or -1 when a workspace could not be allocated. */
int mha_forward_f32(void *out, void *weights, const mha_problem *p);
int mha_forward_f64(void *out, void *weights, const mha_problem *p);

#endif
