/* Scaled dot-product attention, flash-style: the forward and the backward
 * (sdpa_forward_tmpl.h, sdpa_backward_tmpl.h, over sdpa_block_tmpl.h's steps,
 * once per dtype).  Per block the two products are the project's GEMM (gemm.h,
 * strided operands: k^T is k with its strides swapped); the scores' scaling,
 * masking, online softmax and rescaling are plain loops here: the portable
 * path.  AVX2 and AVX-512 run the same steps fused (sdpa_simd_tmpl.h, through
 * the path's table, sdpa_internal.h), with their vector exp (libm's here).
 * Contract: sdpa.h. */
#include "sdpa.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "gemm/gemm.h"
#include "gemm/gemm_bf16.h"
#include "gemm/gemm_internal.h"
#include "runtime/alloc.h"
#include "runtime/cpu.h"
#include "runtime/half.h"
#include "runtime/threads.h"

#include "sdpa_internal.h"

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

/* The SIMD forward of the path cpu.h chose (sdpa_internal.h), NULL on the
 * portable path (sdpa_forward_tmpl.h's loops over the GEMM, libm's exp). */
static const sdpa_kernels_f32 *sdpa_select_f32(void)
{
#ifdef MYATT_X86
    switch (mk_cpu_isa()) {
    case MK_ISA_AVX512: return &sdpa_kernels_f32_avx512;
    case MK_ISA_AVX2: return &sdpa_kernels_f32_avx2;
    default: break;
    }
#endif
    return NULL;
}

static const sdpa_kernels_f64 *sdpa_select_f64(void)
{
#ifdef MYATT_X86
    switch (mk_cpu_isa()) {
    case MK_ISA_AVX512: return &sdpa_kernels_f64_avx512;
    case MK_ISA_AVX2: return &sdpa_kernels_f64_avx2;
    default: break;
    }
#endif
    return NULL;
}

/* The index of output batch index b into the operand's own batch (op->bd),
 * its heads (the last batch dimension) divided by `group` (GQA). */
static int64_t sdpa_operand_index(const sdpa_problem *p, const sdpa_operand *op,
                                  int64_t group, int64_t b)
{
    int64_t index = 0, mult = 1, rest = b;
    for (int d = p->nbatch - 1; d >= 0; d--) {
        int64_t idx = rest % p->batch[d];
        rest /= p->batch[d];
        if (d == p->nbatch - 1)
            idx /= group;
        if (op->bd[d] == 1)
            idx = 0;
        index += idx * mult;
        mult *= op->bd[d];
    }
    return index;
}

/* The items of an operand's own batch (op->bd). */
static int64_t sdpa_own_items(const sdpa_problem *p, const sdpa_operand *op)
{
    int64_t n = 1;
    for (int d = 0; d < p->nbatch; d++)
        n *= op->bd[d];
    return n;
}

/* The keys of block [n, n + kb) the backward computes for query rows
 * [m0, m0 + qb), from the block's first: causal, those the block's last row
 * sees (the hidden ones' weights are exact zeros, so their terms are skipped
 * as the SIMD forward's strips skip them), unless the hidden scores are not
 * -inf after the scaling (a scale <= 0, inf or NaN: every key, as torch's flash
 * kernel computes its NaN there).  The callers skip the blocks no row sees
 * (m0 + qb <= n), so it is at least 1. */
static int64_t sdpa_seen_keys(const sdpa_problem *p, int64_t m0, int64_t qb, int64_t n,
                              int64_t kb)
{
    if (!p->is_causal || !(p->scale > 0 && p->scale < INFINITY))
        return kb;
    return m0 + qb - n < kb ? m0 + qb - n : kb;
}

/* Whether the backward's D is the block's own sum_j P dP, not dO . O (torch's
 * flash backward): on torch's math path (prescale) when every key fits one
 * block, as its softmax backward; and with one key, where it is exactly dP
 * (P = 1), so dS, dQ and dK are exactly 0 (the gradients of a constant),
 * where dO . O leaves a rounding error times the L rows of q. */
static int sdpa_d_from_block(const sdpa_problem *p)
{
    return p->S == 1 || (p->prescale && p->S <= SDPA_KV_SPLIT);
}

/* The gradients one backward pass writes (sdpa_backward_tmpl.h). */
enum { SDPA_GRAD_K = 1, SDPA_GRAD_V = 2, SDPA_GRAD_Q = 4 };

/* The exp of a half-precision call's weights where torch's flash kernel runs
 * on the matching ATEN_CPU_CAPABILITY: fexp_u20 on AVX2 and AVX-512 (the
 * path's, over whole vectors of mk_torch_float_lanes), libm's expf in its
 * DEFAULT build (NULL: the template's EXP). */
static void (*sdpa_half_vexp(void))(float *, const float *, int64_t)
{
    const sdpa_kernels_f32 *k = sdpa_select_f32();
    return k != NULL ? k->fexp_u20 : NULL;
}

/* Per dtype three templates, each taking T and SUF (the forward and the
 * backward also EXP) and undefining them: the steps both share, the forward,
 * the backward. */
#define T float
#define SUF(name) name##_f32
#include "sdpa_block_tmpl.h"
#define T float
#define SUF(name) name##_f32
#define EXP expf
#define HALF_VEXP sdpa_half_vexp()
#include "sdpa_forward_tmpl.h"
#define T float
#define SUF(name) name##_f32
#define EXP expf
#include "sdpa_backward_tmpl.h"

#define T double
#define SUF(name) name##_f64
#include "sdpa_block_tmpl.h"
#define T double
#define SUF(name) name##_f64
#define EXP exp
#define HALF_VEXP NULL
#include "sdpa_forward_tmpl.h"
#define T double
#define SUF(name) name##_f64
#define EXP exp
#include "sdpa_backward_tmpl.h"

int sdpa_forward_f32(void *out, void *lse, const sdpa_problem *p) { return sdpa_forward_impl_f32(out, lse, p); }
int sdpa_forward_f64(void *out, void *lse, const sdpa_problem *p) { return sdpa_forward_impl_f64(out, lse, p); }
int sdpa_backward_f32(const sdpa_grads *g, const sdpa_problem *p) { return sdpa_backward_impl_f32(g, p); }
int sdpa_backward_f64(const sdpa_grads *g, const sdpa_problem *p) { return sdpa_backward_impl_f64(g, p); }
