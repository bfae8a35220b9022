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

#define T float
#define SUF(name) name##_f32
#define PATH(name, p) name##_f32_##p
#include "softmax_dispatch_tmpl.h"
#undef T
#undef SUF
#undef PATH

#define T double
#define SUF(name) name##_f64
#define PATH(name, p) name##_f64_##p
#include "softmax_dispatch_tmpl.h"
#undef T
#undef SUF
#undef PATH
