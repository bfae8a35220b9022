/* nn.MultiheadAttention's forward composed of the project's kernels (mha.h),
 * once per dtype via mha_tmpl.h: the in- and out-projections are linear's
 * GEMM, the heads either the flash kernel (sdpa.h) or bmm, softmax, bmm. */
#include "mha.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "alloc.h"
#include "bmm.h"
#include "linear.h"
#include "sdpa.h"
#include "softmax.h"

/* A workspace of n elements of `size` bytes (at least one cache line, so that
 * an empty one is not mistaken for a failed allocation). */
static void *mha_alloc(int64_t n, size_t size)
{
    return mk_alloc(n > 0 ? mk_bytes((size_t)n, size) : 64);
}

#define T float
#define SUF(name) name##_f32
#include "mha_tmpl.h"

#define T double
#define SUF(name) name##_f64
#include "mha_tmpl.h"

int mha_forward_f32(void *out, void *weights, const mha_problem *p)
{
    return mha_forward_body_f32(out, weights, p);
}

int mha_forward_f64(void *out, void *weights, const mha_problem *p)
{
    return mha_forward_body_f64(out, weights, p);
}
