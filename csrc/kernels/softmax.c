/* softmax along the middle axis of a contiguous [outer, n, inner] array.
 *
 * The portable path (softmax_tmpl.h, once per dtype) uses libm's expf / exp
 * and, along the last axis, torch's DEFAULT-build kernel.  The vector paths are
 * in softmax_avx2.c and softmax_avx512.c (softmax_simd_tmpl.h), picked here at
 * run time: the path is cpu.h's choice, the same as the GEMM's. */
#include "softmax.h"
#include "cpu.h"
#include "softmax_internal.h"
#include "threads.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define T float
#define SUF(name) name##_f32_portable
#define EXP expf
#include "softmax_tmpl.h"
#undef T
#undef SUF
#undef EXP

#define T double
#define SUF(name) name##_f64_portable
#define EXP exp
#include "softmax_tmpl.h"
#undef T
#undef SUF
#undef EXP

/* The path's kernel for a range of slices (outer), on this thread. */
static void softmax_forward_f32_one(float *out, const float *inp, int64_t outer, int64_t n,
                                    int64_t inner)
{
#ifdef MYATT_SOFTMAX_X86
    switch (mk_cpu_isa()) {
    case MK_ISA_AVX512:
        softmax_forward_f32_avx512(out, inp, outer, n, inner);
        return;
    case MK_ISA_AVX2:
        softmax_forward_f32_avx2(out, inp, outer, n, inner);
        return;
    default:
        break;
    }
#endif
    softmax_forward_f32_portable(out, inp, outer, n, inner);
}

static void softmax_forward_f64_one(double *out, const double *inp, int64_t outer, int64_t n,
                                    int64_t inner)
{
#ifdef MYATT_SOFTMAX_X86
    switch (mk_cpu_isa()) {
    case MK_ISA_AVX512:
        softmax_forward_f64_avx512(out, inp, outer, n, inner);
        return;
    case MK_ISA_AVX2:
        softmax_forward_f64_avx2(out, inp, outer, n, inner);
        return;
    default:
        break;
    }
#endif
    softmax_forward_f64_portable(out, inp, outer, n, inner);
}

/* Threads: runs of whole slices (rows, for the last axis), as torch splits
 * them, so results do not depend on the thread count; only when each thread
 * gets at least SOFTMAX_THREAD_MIN_ELEMS elements (about 20 us of work). */
#define SOFTMAX_THREAD_MIN_ELEMS (32 * 1024)

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

#define SOFTMAX_PARALLEL(T, SUF)                                                          \
    typedef struct {                                                                      \
        T *out;                                                                           \
        const T *inp;                                                                     \
        int64_t outer, n, inner, per_task;                                                \
    } softmax_job_##SUF;                                                                  \
                                                                                          \
    static void softmax_task_##SUF(void *arg, int task)                                   \
    {                                                                                     \
        const softmax_job_##SUF *j = arg;                                                 \
        const int64_t o0 = task * j->per_task;                                            \
        const int64_t count = j->outer - o0 < j->per_task ? j->outer - o0 : j->per_task;  \
        const int64_t slice = j->n * j->inner;                                            \
        if (count > 0)                                                                    \
            softmax_forward_##SUF##_one(j->out + o0 * slice, j->inp + o0 * slice, count,  \
                                        j->n, j->inner);                                  \
    }                                                                                     \
                                                                                          \
    void softmax_forward_##SUF(T *out, const T *inp, int64_t outer, int64_t n,           \
                               int64_t inner)                                             \
    {                                                                                     \
        const int t = softmax_threads(outer, n, inner);                                   \
        if (t <= 1) {                                                                     \
            softmax_forward_##SUF##_one(out, inp, outer, n, inner);                       \
            return;                                                                       \
        }                                                                                 \
        softmax_job_##SUF job = {out, inp, outer, n, inner, (outer + t - 1) / t};         \
        mk_parallel_run(t, softmax_task_##SUF, &job);                                     \
    }

SOFTMAX_PARALLEL(float, f32)
SOFTMAX_PARALLEL(double, f64)
#undef SOFTMAX_PARALLEL

/* The backward: along the last axis the path's kernel (torch's, bit for bit),
 * along other axes the portable one.  One pass of a dot product and a scale:
 * bound by memory, single-threaded. */
#define SOFTMAX_BACKWARD(T, SUF)                                                             \
    void softmax_backward_##SUF(T *grad_inp, const T *grad_out, const T *out,               \
                                int64_t outer, int64_t n, int64_t inner)                      \
    {                                                                                        \
        if (inner == 1 && outer > 0 && n > 0) {                                              \
            switch (mk_cpu_isa()) {                                                          \
            SOFTMAX_BACKWARD_X86_CASES(SUF)                                                  \
            default:                                                                         \
                break;                                                                       \
            }                                                                                \
        }                                                                                    \
        softmax_backward_##SUF##_portable(grad_inp, grad_out, out, outer, n, inner);         \
    }
#ifdef MYATT_SOFTMAX_X86
#define SOFTMAX_BACKWARD_X86_CASES(SUF)                                                      \
    case MK_ISA_AVX512:                                                                      \
        softmax_backward_rows_##SUF##_avx512(grad_inp, grad_out, out, outer, n);             \
        return;                                                                              \
    case MK_ISA_AVX2:                                                                        \
        softmax_backward_rows_##SUF##_avx2(grad_inp, grad_out, out, outer, n);               \
        return;
#else
#define SOFTMAX_BACKWARD_X86_CASES(SUF)
#endif

SOFTMAX_BACKWARD(float, f32)
SOFTMAX_BACKWARD(double, f64)
#undef SOFTMAX_BACKWARD
#undef SOFTMAX_BACKWARD_X86_CASES
