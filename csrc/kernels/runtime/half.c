/* mk_f32_to_half (half.h): bands of elements, one task each. */
#include "half.h"

#include "threads.h"

/* Below this many elements a conversion runs on the calling thread. */
#define MK_HALF_THREAD_ELEMS ((int64_t)1 << 20)

typedef struct {
    uint16_t *dst;
    const float *src;
    int64_t n, band;
    mk_half_kind kind;
} half_job;

static void half_range(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    if (kind == MK_HALF_BF16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = mk_bf16_of_f32(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = mk_f16_of_f32(src[i]);
}

static void half_task(void *arg, int task)
{
    const half_job *job = arg;
    const int64_t i0 = task * job->band;
    const int64_t i1 = i0 + job->band < job->n ? i0 + job->band : job->n;
    half_range(job->dst + i0, job->src + i0, i1 - i0, job->kind);
}

void mk_f32_to_half(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    int nthreads = n < 2 * MK_HALF_THREAD_ELEMS ? 1 : mk_get_num_threads();
    if (nthreads <= 1) {
        half_range(dst, src, n, kind);
        return;
    }
    half_job job = {dst, src, n, (n + nthreads - 1) / nthreads, kind};
    mk_parallel_run((int)((n + job.band - 1) / job.band), half_task, &job);
}

void mk_half_round_inplace(float *x, int64_t n, mk_half_kind kind)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = mk_half_round(x[i], kind);
}
