/* softmax along the middle axis of a contiguous [outer, n, inner] array.
 *
 * The portable path (softmax_tmpl.h, once per dtype) uses libm's expf / exp
 * and, along the last axis, torch's DEFAULT-build kernel.  The vector paths are
 * in softmax_avx2.c and softmax_avx512.c (softmax_simd_tmpl.h), each a table of
 * kernels (softmax_internal.h); softmax_select_f32 / _f64 below give the table
 * of the path cpu.h chose, the same as the GEMM's. */
#include "softmax.h"
#include "runtime/alloc.h"
#include "runtime/cpu.h"
#include "runtime/half.h"
#include "runtime/threads.h"
#include "softmax_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define T float
#define SUF(name) name##_f32_portable
#define EXP expf
#include "softmax_tmpl.h"

#define T double
#define SUF(name) name##_f64_portable
#define EXP exp
#include "softmax_tmpl.h"

/* The portable path: no backward_rows (softmax_backward_f32_portable takes
 * every axis) and libm's exp. */
static const softmax_kernels_f32 softmax_kernels_f32_portable = {
    "portable", softmax_forward_f32_portable, NULL, NULL,
};

static const softmax_kernels_f64 softmax_kernels_f64_portable = {
    "portable", softmax_forward_f64_portable, NULL, NULL,
};

/* The path mk_cpu_isa() chose (CPU detection + MYATT_KERNEL, decided once). */
static const softmax_kernels_f32 *softmax_select_f32(void)
{
    switch (mk_cpu_isa()) {
#ifdef MYATT_X86
    case MK_ISA_AVX512: return &softmax_kernels_f32_avx512;
    case MK_ISA_AVX2: return &softmax_kernels_f32_avx2;
#endif
    default: return &softmax_kernels_f32_portable;
    }
}

static const softmax_kernels_f64 *softmax_select_f64(void)
{
    switch (mk_cpu_isa()) {
#ifdef MYATT_X86
    case MK_ISA_AVX512: return &softmax_kernels_f64_avx512;
    case MK_ISA_AVX2: return &softmax_kernels_f64_avx2;
#endif
    default: return &softmax_kernels_f64_portable;
    }
}

/* Threads: runs of whole slices (rows, for the last axis), as torch splits
 * them, so results do not depend on the thread count; only when each thread
 * gets at least SOFTMAX_THREAD_MIN_ELEMS elements (4-5 us of work in float32
 * on a Zen 4 core).  With 32 K (20 us), the mid benchmark's [128, 256] ran on
 * one thread: 2 threads, the pool warm, float32 15.9 -> 9.5 us (torch 11.6),
 * float64 40 -> 23 us (torch 32); when the workers sleep (a call each ms) the
 * caller runs all the slices and pays the wake-up: 18 -> 20 us. */
#define SOFTMAX_THREAD_MIN_ELEMS (8 * 1024)

static int softmax_threads(int64_t outer, int64_t n, int64_t inner)
{
    const double elems = (double)outer * (double)n * (double)inner;
    if (outer < 2 || elems < 2.0 * SOFTMAX_THREAD_MIN_ELEMS)
        return 1;
    int t = mk_get_num_threads();
    if (t > outer)
        t = (int)outer;
    if (t > elems / SOFTMAX_THREAD_MIN_ELEMS)
        t = (int)(elems / SOFTMAX_THREAD_MIN_ELEMS);
    return t;
}

#define T float
#define SUF(name) name##_f32
#define PORTABLE(name) name##_f32_portable
#include "softmax_dispatch_tmpl.h"

#define T double
#define SUF(name) name##_f64
#define PORTABLE(name) name##_f64_portable
#include "softmax_dispatch_tmpl.h"

/* softmax_forward_half_rows / softmax_backward_half_rows: blocks of rows of about
 * this many elements through float32 buffers (in L2) */
#define SOFTMAX_HALF_BLOCK_ELEMS (16 * 1024)

typedef struct {
    const softmax_kernels_f32 *kernels;
    uint16_t *out;
    const uint16_t *inp;
    const uint16_t *y;   /* the backward's softmax output (inp: its gradient), else NULL */
    int64_t rows, n, per_task;
    mk_half_kind half;
    int failed;
} softmax_half_job;

static void softmax_half_task(void *arg, int task)
{
    softmax_half_job *j = arg;
    const int64_t r0 = task * j->per_task, n = j->n;
    const int64_t count = j->rows - r0 < j->per_task ? j->rows - r0 : j->per_task;
    if (count <= 0)
        return;
    const int64_t block = n >= SOFTMAX_HALF_BLOCK_ELEMS ? 1 : SOFTMAX_HALF_BLOCK_ELEMS / n;
    const int64_t elems = (block < count ? block : count) * n;
    float *buf = mk_alloc((size_t)(j->y != NULL ? 2 * elems : elems) * sizeof(float));
    if (buf == NULL) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t r = r0; r < r0 + count; r += block) {
        const int64_t b = r0 + count - r < block ? r0 + count - r : block;
        mk_half_to_f32_here(buf, j->inp + r * n, b * n, j->half);
        if (j->y == NULL) {
            j->kernels->forward(buf, buf, b, n, 1);
        } else {
            mk_half_to_f32_here(buf + elems, j->y + r * n, b * n, j->half);
            if (j->kernels->backward_rows != NULL)
                j->kernels->backward_rows(buf, buf, buf + elems, b, n);
            else
                softmax_backward_f32_portable(buf, buf, buf + elems, b, n, 1);
        }
        mk_f32_to_half_here(j->out + r * n, buf, b * n, j->half);
    }
    mk_free(buf);
}

static int softmax_half_run(uint16_t *out, const uint16_t *inp, const uint16_t *y,
                            int64_t rows, int64_t n, int half)
{
    if (rows <= 0 || n <= 0)
        return 0;
    const int t = softmax_threads(rows, n, 1);
    softmax_half_job job = {softmax_select_f32(), out, inp, y, rows, n, (rows + t - 1) / t,
                            (mk_half_kind)half, 0};
    if (t <= 1)
        softmax_half_task(&job, 0);
    else
        mk_parallel_run(t, softmax_half_task, &job);
    return job.failed ? -1 : 0;
}

int softmax_forward_half_rows(uint16_t *out, const uint16_t *inp, int64_t rows, int64_t n,
                              int half)
{
    return softmax_half_run(out, inp, NULL, rows, n, half);
}

int softmax_backward_half_rows(uint16_t *grad_inp, const uint16_t *grad_out,
                               const uint16_t *out, int64_t rows, int64_t n, int half)
{
    return softmax_half_run(grad_inp, grad_out, out, rows, n, half);
}

/* softmax.h */

void softmax_forward_f32(void *out, const void *inp, int64_t outer, int64_t n, int64_t inner)
{
    softmax_forward_run_f32(out, inp, outer, n, inner);
}

void softmax_forward_f64(void *out, const void *inp, int64_t outer, int64_t n, int64_t inner)
{
    softmax_forward_run_f64(out, inp, outer, n, inner);
}

void softmax_backward_f32(void *grad_inp, const void *grad_out, const void *out,
                          int64_t outer, int64_t n, int64_t inner)
{
    softmax_backward_run_f32(grad_inp, grad_out, out, outer, n, inner);
}

void softmax_backward_f64(void *grad_inp, const void *grad_out, const void *out,
                          int64_t outer, int64_t n, int64_t inner)
{
    softmax_backward_run_f64(grad_inp, grad_out, out, outer, n, inner);
}
