/* half.h's array conversions: the loops of half_tmpl.h on the path
 * mk_cpu_isa() chose, large arrays in bands over the threads. */
#include "half_internal.h"

#include "cpu.h"
#include "threads.h"

#define SUF(name) name##_portable
#include "half_tmpl.h"

/* Below twice this many bytes moved a conversion runs on the calling thread. */
#define MK_HALF_THREAD_BYTES ((int64_t)4 << 20)

static const mk_half_loops *half_loops(void)
{
    switch (mk_cpu_isa()) {
#ifdef MYATT_X86
    case MK_ISA_AVX512: return &mk_half_loops_avx512;
    case MK_ISA_AVX2: return &mk_half_loops_avx2;
#endif
    default: return &mk_half_loops_portable;
    }
}

typedef struct {
    const mk_half_loops *loops;
    void *dst;
    const void *src;
    mk_half_kind kind;
} half_job;

static void narrow_band(void *arg, int64_t i0, int64_t i1)
{
    const half_job *j = arg;
    j->loops->narrow((uint16_t *)j->dst + i0, (const float *)j->src + i0, i1 - i0, j->kind);
}

static void widen_band(void *arg, int64_t i0, int64_t i1)
{
    const half_job *j = arg;
    j->loops->widen((float *)j->dst + i0, (const uint16_t *)j->src + i0, i1 - i0, j->kind);
}

void mk_f32_to_half(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    half_job job = {half_loops(), dst, src, kind};
    mk_parallel_bands(n, sizeof *src + sizeof *dst, MK_HALF_THREAD_BYTES, narrow_band, &job);
}

void mk_half_to_f32(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind)
{
    half_job job = {half_loops(), dst, src, kind};
    mk_parallel_bands(n, sizeof *src + sizeof *dst, MK_HALF_THREAD_BYTES, widen_band, &job);
}

void mk_f32_to_half_here(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    half_loops()->narrow(dst, src, n, kind);
}

void mk_half_to_f32_here(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind)
{
    half_loops()->widen(dst, src, n, kind);
}

void mk_half_round_inplace(float *x, int64_t n, mk_half_kind kind)
{
    half_loops()->round(x, n, kind);
}
