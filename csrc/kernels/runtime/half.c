/* mk_f32_to_half (half.h): bands of elements (mk_parallel_bands). */
#include "half.h"

#include "threads.h"

/* Below twice this many bytes moved a conversion runs on the calling thread. */
#define MK_HALF_THREAD_BYTES ((int64_t)4 << 20)

typedef struct {
    uint16_t *dst;
    const float *src;
    mk_half_kind kind;
} half_job;

static void half_band(void *arg, int64_t i0, int64_t i1)
{
    const half_job *job = arg;
    if (job->kind == MK_HALF_BF16)
        for (int64_t i = i0; i < i1; i++)
            job->dst[i] = mk_bf16_of_f32(job->src[i]);
    else
        for (int64_t i = i0; i < i1; i++)
            job->dst[i] = mk_f16_of_f32(job->src[i]);
}

void mk_f32_to_half(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    half_job job = {dst, src, kind};
    mk_parallel_bands(n, sizeof *src + sizeof *dst, MK_HALF_THREAD_BYTES, half_band, &job);
}

void mk_half_round_inplace(float *x, int64_t n, mk_half_kind kind)
{
    if (kind == MK_HALF_BF16)   /* (one loop per kind: each vectorises) */
        for (int64_t i = 0; i < n; i++)
            x[i] = mk_half_round(x[i], MK_HALF_BF16);
    else if (kind == MK_HALF_F16)
        for (int64_t i = 0; i < n; i++)
            x[i] = mk_half_round(x[i], MK_HALF_F16);
}
