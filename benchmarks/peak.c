/* The float32 FMA peak of one core, measured: independent FMA chains (more
 * chains than FMA latency x FMA ports, so the units never wait), runs of about
 * 0.05 s, the best of 20 (on a shared machine the best run is the one least
 * disturbed by other processes).  One line per ISA the CPU runs:
 *
 *   avx512 <GFLOP/s>
 *   avx2 <GFLOP/s>
 *   avx512_bf16 <GFLOP/s>
 *
 * (an FMA counts 2 flops per lane).  The last line is the bfloat16 peak, the
 * same chains of AVX512_BF16's vdpbf16ps (per float32 lane, two bfloat16
 * products added to the lane: 4 flops), the unit of the bfloat16 GEMM's share
 * of peak.  Built by bench.py with plain `cc -O2`; each kernel carries its own
 * target attribute and runs only when the CPU has the ISA.  float64 peak =
 * float32 peak / 2 on the same units. */
#define _POSIX_C_SOURCE 199309L
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

/* independent chains: >= FMA latency (4-5 cycles) x FMA ports (2), with room,
 * and few enough to stay in registers (16 ymm without AVX-512: 12 + 2 constants) */
#define CHAINS_512 16
#define CHAINS_256 12

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile float sink;

__attribute__((target("avx512f"), noinline))
static double run_avx512(long iters)
{
    __m512 acc[CHAINS_512];
    for (int c = 0; c < CHAINS_512; c++)
        acc[c] = _mm512_set1_ps(1.0f + 0.001f * (float)c);
    const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
    const double t0 = now();
    for (long i = 0; i < iters; i++) {   /* CHAINS_512 independent FMAs, written out */
        acc[0] = _mm512_fmadd_ps(acc[0], a, b);
        acc[1] = _mm512_fmadd_ps(acc[1], a, b);
        acc[2] = _mm512_fmadd_ps(acc[2], a, b);
        acc[3] = _mm512_fmadd_ps(acc[3], a, b);
        acc[4] = _mm512_fmadd_ps(acc[4], a, b);
        acc[5] = _mm512_fmadd_ps(acc[5], a, b);
        acc[6] = _mm512_fmadd_ps(acc[6], a, b);
        acc[7] = _mm512_fmadd_ps(acc[7], a, b);
        acc[8] = _mm512_fmadd_ps(acc[8], a, b);
        acc[9] = _mm512_fmadd_ps(acc[9], a, b);
        acc[10] = _mm512_fmadd_ps(acc[10], a, b);
        acc[11] = _mm512_fmadd_ps(acc[11], a, b);
        acc[12] = _mm512_fmadd_ps(acc[12], a, b);
        acc[13] = _mm512_fmadd_ps(acc[13], a, b);
        acc[14] = _mm512_fmadd_ps(acc[14], a, b);
        acc[15] = _mm512_fmadd_ps(acc[15], a, b);
    }
    const double dt = now() - t0;
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS_512; c++)
        s = _mm512_add_ps(s, acc[c]);
    sink = _mm512_reduce_add_ps(s);
    return 2.0 * 16 * CHAINS_512 * (double)iters / dt / 1e9;
}

__attribute__((target("avx2,fma"), noinline))
static double run_avx2(long iters)
{
    __m256 acc[CHAINS_256];
    for (int c = 0; c < CHAINS_256; c++)
        acc[c] = _mm256_set1_ps(1.0f + 0.001f * (float)c);
    const __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
    const double t0 = now();
    for (long i = 0; i < iters; i++) {   /* CHAINS_256 independent FMAs, written out */
        acc[0] = _mm256_fmadd_ps(acc[0], a, b);
        acc[1] = _mm256_fmadd_ps(acc[1], a, b);
        acc[2] = _mm256_fmadd_ps(acc[2], a, b);
        acc[3] = _mm256_fmadd_ps(acc[3], a, b);
        acc[4] = _mm256_fmadd_ps(acc[4], a, b);
        acc[5] = _mm256_fmadd_ps(acc[5], a, b);
        acc[6] = _mm256_fmadd_ps(acc[6], a, b);
        acc[7] = _mm256_fmadd_ps(acc[7], a, b);
        acc[8] = _mm256_fmadd_ps(acc[8], a, b);
        acc[9] = _mm256_fmadd_ps(acc[9], a, b);
        acc[10] = _mm256_fmadd_ps(acc[10], a, b);
        acc[11] = _mm256_fmadd_ps(acc[11], a, b);
    }
    const double dt = now() - t0;
    __m256 s = acc[0];
    for (int c = 1; c < CHAINS_256; c++)
        s = _mm256_add_ps(s, acc[c]);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    sink = lanes[0] + lanes[7];
    return 2.0 * 8 * CHAINS_256 * (double)iters / dt / 1e9;
}

/* compilers that know AVX512_BF16 (GCC 10, clang 9); older ones print no bfloat16 line */
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10)
#define PEAK_BF16 1
__attribute__((target("avx512f,avx512bf16"), noinline))
static double run_avx512_bf16(long iters)
{
    __m512 acc[CHAINS_512];
    for (int c = 0; c < CHAINS_512; c++)
        acc[c] = _mm512_set1_ps(1.0f + 0.001f * (float)c);
    /* bfloat16 1 and 1e-7: each adds 2e-7 to a lane, finite for any iters */
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x33d6);
    const double t0 = now();
    for (long i = 0; i < iters; i++) {   /* CHAINS_512 independent dot products, written out */
        acc[0] = _mm512_dpbf16_ps(acc[0], a, b);
        acc[1] = _mm512_dpbf16_ps(acc[1], a, b);
        acc[2] = _mm512_dpbf16_ps(acc[2], a, b);
        acc[3] = _mm512_dpbf16_ps(acc[3], a, b);
        acc[4] = _mm512_dpbf16_ps(acc[4], a, b);
        acc[5] = _mm512_dpbf16_ps(acc[5], a, b);
        acc[6] = _mm512_dpbf16_ps(acc[6], a, b);
        acc[7] = _mm512_dpbf16_ps(acc[7], a, b);
        acc[8] = _mm512_dpbf16_ps(acc[8], a, b);
        acc[9] = _mm512_dpbf16_ps(acc[9], a, b);
        acc[10] = _mm512_dpbf16_ps(acc[10], a, b);
        acc[11] = _mm512_dpbf16_ps(acc[11], a, b);
        acc[12] = _mm512_dpbf16_ps(acc[12], a, b);
        acc[13] = _mm512_dpbf16_ps(acc[13], a, b);
        acc[14] = _mm512_dpbf16_ps(acc[14], a, b);
        acc[15] = _mm512_dpbf16_ps(acc[15], a, b);
    }
    const double dt = now() - t0;
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS_512; c++)
        s = _mm512_add_ps(s, acc[c]);
    sink = _mm512_reduce_add_ps(s);
    return 4.0 * 16 * CHAINS_512 * (double)iters / dt / 1e9;
}
#endif

static double best_of(double (*run)(long))
{
    long iters = 1 << 16;
    while (iters < (1L << 34)) {             /* grow until one run takes >= 0.05 s */
        const double t0 = now();
        run(iters);
        if (now() - t0 >= 0.05)
            break;
        iters *= 2;
    }
    double best = 0;
    for (int r = 0; r < 20; r++) {
        const double g = run(iters);
        if (g > best)
            best = g;
    }
    return best;
}

int main(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        printf("avx512 %.2f\n", best_of(run_avx512));
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        printf("avx2 %.2f\n", best_of(run_avx2));
#ifdef PEAK_BF16
    if (__builtin_cpu_supports("avx512bf16"))
        printf("avx512_bf16 %.2f\n", best_of(run_avx512_bf16));
#endif
    return 0;
}
