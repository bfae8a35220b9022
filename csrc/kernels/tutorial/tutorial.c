/* The seed's MyAtt.forward, fused (see tutorial.h), once per dtype via tutorial_tmpl.h.
 *
 * torch.cat((Q[0], K[0]), -1) @ W^T is split into two gemm calls on column
 * slices of W (the second accumulating), so no concatenated copy is made, and
 * the products that need a workspace run over blocks of rows of S so that it
 * stays bounded whatever S is.  The backward runs over row blocks too and
 * recomputes each block's forward values, bit for bit (tutorial_tmpl.h). */
#include "tutorial.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm/gemm.h"
#include "linear/colsum.h"
#include "runtime/alloc.h"
#include "runtime/threads.h"
#include "softmax/softmax.h"

/* Row blocks: a block of R rows of S keeps each [R, width] workspace panel
 * (applied in the forward; aw, ga, ad in the backward) within
 * TUTORIAL_WORKSPACE_BYTES, R a multiple of TUTORIAL_ROW_BLOCK.  Large blocks let the
 * big products run as few large gemm calls (64-row blocks re-packed the weights
 * for every block: 2.4x slower than torch at S = 1024, sizes 1024). */
#define TUTORIAL_ROW_BLOCK 64
#define TUTORIAL_WORKSPACE_BYTES ((int64_t)4 << 20)
/* A forward workspace up to this size lives on the stack. */
#define TUTORIAL_STACK_BYTES 4096

#define T float
#define SUF(name) name##_f32
#include "tutorial_tmpl.h"

#define T double
#define SUF(name) name##_f64
#include "tutorial_tmpl.h"

int tutorial_forward_f32(void *out, void *attn_weights, const tutorial_inputs *in)
{
    return tutorial_forward_body_f32(out, attn_weights, NULL, in);
}

int tutorial_forward_f64(void *out, void *attn_weights, const tutorial_inputs *in)
{
    return tutorial_forward_body_f64(out, attn_weights, NULL, in);
}

int tutorial_backward_f32(const tutorial_grads *grads, mk_cmat grad_out, const mk_cmat *grad_aw,
                          const tutorial_inputs *in)
{
    return tutorial_backward_body_f32(grads, grad_out, grad_aw, in, NULL, NULL);
}

int tutorial_backward_f64(const tutorial_grads *grads, mk_cmat grad_out, const mk_cmat *grad_aw,
                          const tutorial_inputs *in)
{
    return tutorial_backward_body_f64(grads, grad_out, grad_aw, in, NULL, NULL);
}

int tutorial_forward_kept_f32(void *out, void *attn_weights, void *applied,
                              const tutorial_inputs *in)
{
    return tutorial_forward_body_f32(out, attn_weights, applied, in);
}

int tutorial_forward_kept_f64(void *out, void *attn_weights, void *applied,
                              const tutorial_inputs *in)
{
    return tutorial_forward_body_f64(out, attn_weights, applied, in);
}

int tutorial_backward_kept_f32(const tutorial_grads *grads, mk_cmat grad_out,
                               const mk_cmat *grad_aw, const tutorial_inputs *in,
                               const void *attn_weights, const void *applied)
{
    return tutorial_backward_body_f32(grads, grad_out, grad_aw, in, attn_weights, applied);
}

int tutorial_backward_kept_f64(const tutorial_grads *grads, mk_cmat grad_out,
                               const mk_cmat *grad_aw, const tutorial_inputs *in,
                               const void *attn_weights, const void *applied)
{
    return tutorial_backward_body_f64(grads, grad_out, grad_aw, in, attn_weights, applied);
}
