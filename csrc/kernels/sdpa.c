/* Scaled dot-product attention, flash-style: the forward (sdpa_tmpl.h, once
 * per dtype).  Per block the two products are the project's GEMM (gemm.h,
 * strided operands: k^T is k with its strides swapped); the scores' scaling,
 * masking, online softmax and rescaling are plain loops here (libm's exp).
 * Contract: sdpa.h. */
#include "sdpa.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>

#include "alloc.h"
#include "gemm.h"
#include "gemm_internal.h"
#include "threads.h"

/* Threads for `items` work items: one when the whole problem is below the
 * GEMM's bar for two threads (waking them would cost more than it saves). */
static int sdpa_threads(const sdpa_problem *p, int64_t items)
{
    double nb = 1;
    for (int d = 0; d < p->nbatch; d++)
        nb *= (double)p->batch[d];
    const double work = nb * (double)p->L * (double)p->S * (double)(p->E + p->Ev);
    if (items < 2 || work < 2.0 * GEMM_THREAD_MIN_WORK)
        return 1;
    int n = mk_get_num_threads();
    if (n > items)
        n = (int)items;
    if (n > work / GEMM_THREAD_MIN_WORK)
        n = (int)(work / GEMM_THREAD_MIN_WORK);
    return n < 1 ? 1 : n;
}

#define T float
#define SUF(name) name##_f32
#define EXP expf
#include "sdpa_tmpl.h"

#define T double
#define SUF(name) name##_f64
#define EXP exp
#include "sdpa_tmpl.h"

int sdpa_forward_f32(float *out, float *lse, const sdpa_problem *p) { return sdpa_forward_impl_f32(out, lse, p); }
int sdpa_forward_f64(double *out, double *lse, const sdpa_problem *p) { return sdpa_forward_impl_f64(out, lse, p); }
