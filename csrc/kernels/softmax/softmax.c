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

/* a[0..w) added as torch's vec_reduce_all adds a vector's lanes: by the tree
 * l ^ w/2, ..., ^ 1 (its AVX builds), or a[0..lanes) in order (tree 0) */
static float reduce_lanes(float *a, int w, int lanes, int tree)
{
    if (tree) {
        for (int half = w / 2; half >= 1; half /= 2)
            for (int l = 0; l < half; l++)
                a[l] += a[l + half];
        return a[0];
    }
    float s = a[0];
    for (int l = 1; l < lanes; l++)
        s += a[l];
    return s;
}

/* sum(g * y) over a row of n > 0 as torch's reduced-type map2_reduce_all sums
 * it with float32 vectors of w lanes (16 in its AVX-512 build, 8 in the
 * others): rows under 2 w folded (the products from w on into the first
 * lanes), the lanes then added in order; else two w-lane accumulators over
 * blocks of 2 w, the partial last block into the first lanes, the
 * accumulators added, the lanes reduced by the tree l ^ w/2, ..., ^ 1 (its
 * AVX builds; `tree` 0: in order, its DEFAULT build).  Each product of two
 * half values is exact in float32. */
static float half_row_dot(const float *g, const float *y, int64_t n, int w, int tree)
{
    float a[16] = {0}, b[16];
    int lanes = w;
    if (n < 2 * w) {
        lanes = n > w ? w : (int)n;
        for (int l = 0; l < lanes; l++)
            a[l] = g[l] * y[l];
        for (int l = 0; l + w < n; l++)
            a[l] += g[w + l] * y[w + l];
        tree = 0;
    } else {
        for (int l = 0; l < w; l++) {
            a[l] = g[l] * y[l];
            b[l] = g[w + l] * y[w + l];
        }
        int64_t d = 2 * w;
        for (; d < n - n % (2 * w); d += 2 * w)
            for (int l = 0; l < w; l++) {
                a[l] += g[d + l] * y[d + l];
                b[l] += g[d + w + l] * y[d + w + l];
            }
        for (int64_t l = 0; d + l < n && l < w; l++)
            a[l] += g[d + l] * y[d + l];
        for (int64_t l = 0; d + w + l < n; l++)
            b[l] += g[d + w + l] * y[d + w + l];
        for (int l = 0; l < w; l++)
            a[l] += b[l];
    }
    return reduce_lanes(a, w, lanes, tree);
}

/* torch's vector width and lane sums for this kernel path's twin build: 16
 * float lanes (AVX-512) or 8; the lanes reduced by the tree (its AVX builds)
 * or in order (DEFAULT). */
static int half_lanes(int *tree)
{
    const mk_isa isa = mk_cpu_isa();
    *tree = isa != MK_ISA_PORTABLE;
    return isa == MK_ISA_AVX512 ? 16 : 8;
}

/* The half forward along rows, in place on rows of n float32 values (torch's
 * reduced-type softmax): e = exp(x - max) by the path's vector exp (libm's on
 * the portable path) over whole vectors of w lanes, summed lane by lane, the
 * lanes reduced as half_lanes says; the last n % w by libm's expf, added in
 * order after; e * (1 / sum).  Without a tail that is torch's float32 kernel,
 * which the path's own rows compute. */
static void softmax_forward_half_rows_f32(const softmax_kernels_f32 *k, float *x, int64_t rows,
                                          int64_t n)
{
    int tree;
    const int w = half_lanes(&tree);
    const int64_t whole = n - n % w;
    if (whole == n) {   /* no tail: the float32 kernel's rows, the same sums (and faster) */
        k->forward(x, x, rows, n, 1);
        return;
    }
    for (int64_t r = 0; r < rows; r++, x += n) {
        /* the max per lane, branch free (a vector loop), exact in any order; a NaN
         * is skipped here and makes its row NaN all the same (its exp, the sum,
         * every quotient), as torch's */
        float max = -INFINITY, lanes[16];
        for (int l = 0; l < 16; l++)
            lanes[l] = -INFINITY;
        int64_t p = 0;
        for (; p + 16 <= n; p += 16)
            for (int l = 0; l < 16; l++)
                lanes[l] = x[p + l] > lanes[l] ? x[p + l] : lanes[l];
        for (; p < n; p++)
            max = x[p] > max ? x[p] : max;
        for (int l = 0; l < 16; l++) {
            max = lanes[l] > max ? lanes[l] : max;
            lanes[l] = 0;
        }
        for (int64_t i = 0; i < n; i++)
            x[i] -= max;
        if (k->exp != NULL)
            k->exp(x, x, whole);
        else   /* (the portable path: torch's DEFAULT build's vectors are libm's too) */
            for (int64_t i = 0; i < whole; i++)
                x[i] = expf(x[i]);
        for (int64_t i = 0; i < whole; i += w)
            for (int l = 0; l < w; l++)
                lanes[l] += x[i + l];
        float sum = reduce_lanes(lanes, w, w, tree);
        for (int64_t i = whole; i < n; i++) {
            x[i] = expf(x[i]);
            sum += x[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < n; i++)
            x[i] *= inv;
    }
}

/* The half backward along rows: gx = (g - sum(g * y)) * y in float32, rows of
 * n in place of g (torch's reduced-type softmax backward, for the torch build
 * of this kernel path's instruction set) */
static void softmax_backward_half_rows_f32(float *g, const float *y, int64_t rows, int64_t n)
{
    int tree;
    const int w = half_lanes(&tree);
    for (int64_t r = 0; r < rows; r++, g += n, y += n) {
        const float s = half_row_dot(g, y, n, w, tree);
        for (int64_t i = 0; i < n; i++)
            g[i] = (g[i] - s) * y[i];
    }
}

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
            softmax_forward_half_rows_f32(j->kernels, buf, b, n);
        } else {
            mk_half_to_f32_here(buf + elems, j->y + r * n, b * n, j->half);
            softmax_backward_half_rows_f32(buf, buf + elems, b, n);
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
