/* bmm: out[b, n, p] = inp[b, n, m] @ mat2[b, m, p]   (torch.bmm), and its backward.
 *
 * One gemm per batch item (two in the backward).  (Note the names: here m is the inner, summed dimension,
 * as in torch's docs.)  Written once for both dtypes in bmm_tmpl.h.
 *
 * Threads: an item's product big enough for threads splits its own output
 * (gemm); smaller items are instead dealt out to threads whole, in contiguous
 * runs (a batch of 64 items of 64 x 64 @ 64 x 64 ran on one thread before).
 * Either way every item is the same gemm call, so the bits do not depend on
 * the thread count. */
#include "bmm.h"

#include <stdatomic.h>
#include <stddef.h>

#include "gemm/gemm.h"
#include "gemm/gemm_internal.h"
#include "runtime/threads.h"

/* Threads for a batch of b items of item_work multiply-adds each: 1 when the
 * gemm threads each item itself, or when the whole batch is too small to pay
 * for waking threads (the gemm's own bar, GEMM_THREAD_MIN_WORK per thread). */
static int bmm_batch_threads(int64_t b, double item_work)
{
    if (b < 2 || item_work >= 2.0 * GEMM_THREAD_MIN_WORK
        || item_work * (double)b < 2.0 * GEMM_THREAD_MIN_WORK)
        return 1;
    const double by_work = item_work * (double)b / GEMM_THREAD_MIN_WORK;
    int n = mk_get_num_threads();
    if (n > b)
        n = (int)b;
    if (n > by_work)
        n = (int)by_work;
    return n;
}

#define T float
#define SUF(name) name##_f32
#include "bmm_tmpl.h"

#define T double
#define SUF(name) name##_f64
#include "bmm_tmpl.h"

int bmm_forward_f32(mk_batch out, mk_cbatch inp, mk_cbatch mat2)
{
    return bmm_forward_body_f32(out, inp, mat2);
}

int bmm_forward_f64(mk_batch out, mk_cbatch inp, mk_cbatch mat2)
{
    return bmm_forward_body_f64(out, inp, mat2);
}

int bmm_backward_f32(mk_batch grad_inp, mk_batch grad_mat2,
                     mk_cbatch grad_out, mk_cbatch inp, mk_cbatch mat2)
{
    return bmm_backward_body_f32(grad_inp, grad_mat2, grad_out, inp, mat2);
}

int bmm_backward_f64(mk_batch grad_inp, mk_batch grad_mat2,
                     mk_cbatch grad_out, mk_cbatch inp, mk_cbatch mat2)
{
    return bmm_backward_body_f64(grad_inp, grad_mat2, grad_out, inp, mat2);
}
