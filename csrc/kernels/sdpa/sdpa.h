/* Scaled dot-product attention, flash-style (torch.nn.functional.scaled_dot_product_attention):
 *
 *   out[b, i, :] = sum_j softmax_j(q[b, i, :] . k[b, j, :] * scale + mask[b, i, j]) v[b, j, :]
 *
 *   q [batch..., L, E], k [batch..., S, E], v [batch..., S, Ev] -> out [batch..., L, Ev]
 *
 * The [L, S] matrix of scores is never built: query rows go in blocks of
 * SDPA_Q_SPLIT(L) rows, and each block runs an online softmax over blocks of
 * SDPA_KV_SPLIT keys (torch's CPU flash kernel, FlashAttentionKernel.cpp: its
 * block sizes and its order of operations).  The workspace is one
 * [q block, kv block] tile, two per-row vectors and a [q block, Ev] accumulator
 * per thread, whatever L and S are.
 *
 * Every operand is addressed through element strides, one per batch dimension
 * (0 where the operand is broadcast) and one each for rows and columns, so a
 * transposed, sliced or broadcast operand (a [1, 1, L, S] mask against many
 * heads) is never copied.  out is C-contiguous.
 *
 * The workspace also holds the scaled q block and k block when p->prescale.
 *
 * Threads: one work item is one (batch index, query block) (on the SIMD
 * paths, with GQA and L in one query block: the query heads of one kv head);
 * items are dealt out to threads one at a time and each is computed alone, in
 * a fixed order, so the bits do not depend on the thread count. */
#ifndef MYATT_KERNELS_SDPA_H
#define MYATT_KERNELS_SDPA_H

#include <stdint.h>

#define SDPA_MAX_BATCH_DIMS 64   /* NPY_MAXDIMS of NumPy 2 */

/* Query rows per block, by L (torch: 256 from 768 rows, 64 from 192, else 32),
 * and keys per block. */
#define SDPA_Q_SPLIT(L) ((L) >= 768 ? 256 : (L) >= 192 ? 64 : 32)
#define SDPA_KV_SPLIT 512

/* Query rows per block of the backward (sdpa_backward_tmpl.h), not torch's: causal 64
 * (a block computes the keys its last row sees, so smaller blocks skip more),
 * else 256 (dK and dV sum over a block's rows: longer sums per product).  On
 * one Zen 4 core, against torch's split, float32: 1.1-1.3x faster at L = 128 to
 * 1024; float64 within 5 %. */
#define SDPA_BWD_Q_SPLIT(is_causal) ((is_causal) ? 64 : 256)

/* Decode-like shapes (fewer than SDPA_KEY_CHUNKS (batch index, query block)
 * items, not causal, S over one key block) split the keys into up to
 * SDPA_KEY_CHUNKS runs of whole key blocks, computed apart (on several
 * threads) and merged in order: the split depends on the shape only.  Not
 * for a half-precision call (round_weights), whose weights are rounded
 * relative to the running max over the keys before them. */
#define SDPA_KEY_CHUNKS 8

typedef enum {
    SDPA_MASK_NONE = 0,
    SDPA_MASK_BOOL = 1,    /* one byte per entry, nonzero = the key takes part */
    SDPA_MASK_FLOAT = 2,   /* of the kernel's dtype, added to the scaled scores */
} sdpa_mask_kind;

/* One strided operand: its data, an element stride per batch dimension of the
 * output (0: broadcast along it), a row stride and a column stride. */
typedef struct {
    const void *data;
    int64_t bs[SDPA_MAX_BATCH_DIMS];
    int64_t rs, cs;
    int64_t bd[SDPA_MAX_BATCH_DIMS];   /* its own batch sizes along out's (1 where absent);
                                          the backward's gradients are shaped by them */
} sdpa_operand;

typedef struct {
    int64_t L, S, E, Ev;
    int nbatch;                            /* batch dimensions of out, <= SDPA_MAX_BATCH_DIMS */
    int64_t batch[SDPA_MAX_BATCH_DIMS];    /* their sizes */
    sdpa_operand q, k, v, mask;            /* mask.data NULL when mask_kind is NONE */
    sdpa_mask_kind mask_kind;
    /* Grouped-query attention: along the LAST batch dimension (the heads), key
     * and value index h / k_group and h / v_group (torch's repeat_interleave of
     * their heads); 1 otherwise. */
    int64_t k_group, v_group;
    /* Causal: key j takes part in row i only if j <= i.  Without prescale, as
     * torch's flash kernel, the hidden scores are -inf before the scaling: a
     * negative scale makes them +inf (E > 0), and every row with a hidden key NaN. */
    int is_causal;
    double scale;                          /* multiplies q . k (E == 0: scores are 0) */
    /* How the scores are rounded, as the torch path the caller mirrors:
     *   0: fl(q . k) * scale, then + mask (torch's flash kernel);
     *   1: fl(q * a) . fl(k * |a|), a = sqrt(|scale|) negated for a negative
     *      scale, then + mask (torch's math path, _scaled_dot_product_attention_math).
     * (At large scores these roundings differ by more than assert_close allows.) */
    int prescale;
    /* Dropout of the attention weights: weight (i, j) of batch index b is
     * dropped when sdpa_dropout_uniform(dropout_seed, b, i, j) < dropout_p, the
     * kept ones scaled by 1 / (1 - dropout_p) (dropout_p == 1: zeros).  The draw
     * depends on the position only, never on the thread that computes it. */
    double dropout_p;
    uint64_t dropout_seed;
    /* The float32 kernel of a half-precision call (mk_half_kind, runtime/half.h:
     * 0 none, else float16 or bfloat16): the attention weights exp(s - max) are
     * rounded to that dtype before they multiply v, their row sums are not
     * (torch's flash kernel: its weights @ v is a half-precision GEMM).  The
     * portable loops compute such a call. */
    int round_weights;
} sdpa_problem;

/* A uniform number in [0, 1) for (seed, b, i, j): splitmix64's finaliser
 * chained over the four, the top 53 bits. */
static inline uint64_t sdpa_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static inline double sdpa_dropout_uniform(uint64_t seed, int64_t b, int64_t i, int64_t j)
{
    uint64_t h = sdpa_mix64(seed ^ sdpa_mix64((uint64_t)b ^ sdpa_mix64((uint64_t)i
                                              ^ sdpa_mix64((uint64_t)j))));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* out [batch..., L, Ev] (C-contiguous); lse [batch..., L] (C-contiguous, or
 * NULL): the log-sum-exp of each row's scaled, masked scores, for the backward
 * (0 for a row with every key masked), in double for both kernels: at scores
 * of 1e4 and more a float32 lse's rounding (an ulp of 0.008 at 1e5) would move
 * the backward's recomputed weights exp(s - lse) by up to ~0.4 %.  A row with every key masked gives
 * zeros, as torch's CPU kernel; S == 0 gives zeros.  NaN and inf propagate.
 * out and the operands are of the kernel's dtype (type-erased, as view.h,
 * so that the glue takes the kernel from the dtype table, csrc/dtype.h).
 * Returns 0, or -1 when a workspace could not be allocated. */
int sdpa_forward_f32(void *out, void *lse, const sdpa_problem *p);
int sdpa_forward_f64(void *out, void *lse, const sdpa_problem *p);

/* The backward's arrays, all C-contiguous and of the kernel's dtype but lse:
 * dout, out [batch..., L, Ev] and lse [batch..., L] (the forward's, double);
 * dq [batch..., L, E], dk [batch..., S, E], dv [batch..., S, Ev] written. */
typedef struct {
    void *dq, *dk, *dv;
    const void *dout, *out, *lse;
} sdpa_grads;

/* The gradients of sum(out * dout), FlashAttention-2 style: the weights
 * recomputed block by block from the forward's out and lse, never an [L, S]
 * buffer.  dq, dk, dv have q's, k's and v's own batch sizes (op.bd): where an
 * operand is broadcast (or repeated by GQA) its gradient sums over the batch
 * indices that share it, in increasing order (k and v may be broadcast or
 * grouped differently: their sums are then taken in passes of their own).
 * With no output batch index at all, dq, dk and dv are zeros.  Dropout: the
 * forward's mask again (the same dropout_seed).
 * Returns 0, or -1 when a workspace could not be allocated. */
int sdpa_backward_f32(const sdpa_grads *g, const sdpa_problem *p);
int sdpa_backward_f64(const sdpa_grads *g, const sdpa_problem *p);

#endif
