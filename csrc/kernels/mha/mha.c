/* nn.MultiheadAttention's forward composed of the project's kernels (mha.h),
 * once per dtype via mha_tmpl.h: the in- and out-projections are linear's
 * GEMM, the heads either the flash kernel (sdpa.h) or bmm, softmax, bmm. */
#include "mha.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "bmm/bmm.h"
#include "linear/linear.h"
#include "runtime/alloc.h"
#include "sdpa/sdpa.h"
#include "softmax/softmax.h"

/* A workspace of n elements of `size` bytes (at least one cache line, so that
 * an empty one is not mistaken for a failed allocation). */
static void *mha_alloc(int64_t n, size_t size)
{
    return mk_alloc(n > 0 ? mk_bytes((size_t)n, size) : 64);
}

/* Where mha_project puts the projections of query, key and value in its one
 * buffer (the backward lays their gradients out alike): the offset of each
 * one's first row and its row stride, in elements; size, the buffer's. */
typedef struct {
    int64_t off[3], rs[3], size;
} mha_layout;

static mha_layout mha_layout_of(const mha_problem *p)
{
    const int64_t E = p->E, LN = p->L * p->N, SN = p->S * p->N;
    if (p->qkv_same)   /* [L*N, 3E]: one GEMM on query */
        return (mha_layout){{0, E, 2 * E}, {3 * E, 3 * E, 3 * E}, LN * 3 * E};
    if (p->kv_same)    /* [L*N, E], then [S*N, 2E]: one GEMM on key */
        return (mha_layout){{0, LN * E, LN * E + E}, {E, 2 * E, 2 * E}, LN * E + 2 * SN * E};
    return (mha_layout){{0, LN * E, LN * E + SN * E}, {E, E, E}, LN * E + 2 * SN * E};
}

void mha_saved_free(mha_saved *s)
{
    void *bufs[9] = {s->proj, s->kx, s->vx, s->mask, s->heads, s->w, s->pw, s->o, s->lse};
    for (int i = 0; i < 9; i++)
        mk_free(bufs[i]);
    memset(s, 0, sizeof *s);
}

#define T float
#define SUF(name) name##_f32
#include "mha_tmpl.h"

#define T double
#define SUF(name) name##_f64
#include "mha_tmpl.h"

int mha_forward_f32(void *out, void *weights, const mha_problem *p, mha_saved *keep)
{
    return mha_forward_body_f32(out, weights, p, keep);
}

int mha_forward_f64(void *out, void *weights, const mha_problem *p, mha_saved *keep)
{
    return mha_forward_body_f64(out, weights, p, keep);
}

int mha_backward_f32(const mha_grads *g, const mha_problem *p, const mha_saved *s)
{
    return mha_backward_body_f32(g, p, s);
}

int mha_backward_f64(const mha_grads *g, const mha_problem *p, const mha_saved *s)
{
    return mha_backward_body_f64(g, p, s);
}
