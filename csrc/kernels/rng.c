/* torch's CPU generator and nn.Linear's initialisation, bit for bit.
 *
 * References (PyTorch sources):
 *   aten/src/ATen/core/MT19937RNGEngine.h    at::mt19937 (seeding, twist, tempering)
 *   aten/src/ATen/CPUGeneratorImpl.cpp       random() / random64()
 *   aten/src/ATen/core/DistributionsHelper.h uniform_real_distribution
 *   aten/src/ATen/core/TransformationHelper.h transformation::uniform_real
 *   aten/src/ATen/native/cpu/DistributionTemplates.h uniform_kernel (serial)
 *   torch/nn/init.py, torch/nn/modules/linear.py
 */
#include "rng.h"

#include <math.h>
#include <stddef.h>

#define MT_N 624
#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UMASK 0x80000000u
#define MT_LMASK 0x7fffffffu

/* at::mt19937_engine::init_with_uint32: only the low 32 bits of the 64-bit
 * seed enter the state (torch still reports the full seed, which we need not
 * keep).  `index == MT_N` means "twist before the next output", which is what
 * torch's left_ = 1, next_ = 0 amounts to. */
void mt19937_seed(mt19937 *g, uint64_t seed)
{
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < MT_N; j++) {
        uint32_t prev = g->state[j - 1];
        g->state[j] = 1812433253u * (prev ^ (prev >> 30)) + j;
    }
    g->index = MT_N;
}

static inline uint32_t mt_twist(uint32_t u, uint32_t v)
{
    return (((u & MT_UMASK) | (v & MT_LMASK)) >> 1) ^ ((v & 1u) ? MT_MATRIX_A : 0u);
}

static void mt_next_state(mt19937 *g)
{
    uint32_t *s = g->state;
    int k;
    for (k = 0; k < MT_N - MT_M; k++)
        s[k] = s[k + MT_M] ^ mt_twist(s[k], s[k + 1]);
    for (; k < MT_N - 1; k++)
        s[k] = s[k + MT_M - MT_N] ^ mt_twist(s[k], s[k + 1]);
    s[MT_N - 1] = s[MT_M - 1] ^ mt_twist(s[MT_N - 1], s[0]);
    g->index = 0;
}

uint32_t mt19937_random32(mt19937 *g)
{
    if (g->index >= MT_N)
        mt_next_state(g);
    uint32_t y = g->state[g->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

/* CPUGeneratorImpl::random64: the first 32-bit draw is the HIGH half. */
uint64_t mt19937_random64(mt19937 *g)
{
    uint32_t hi = mt19937_random32(g);
    uint32_t lo = mt19937_random32(g);
    return ((uint64_t)hi << 32) | lo;
}

/* tensor.uniform_(from, to) on CPU, contiguous, any size (uniform_kernel is a
 * serial per-element loop; there is no vectorised path for uniform_).
 * from/to are first cast to the tensor's scalar type; the arithmetic is done in
 * dist_acctype<T> (float for float, double for double):
 *   x = (bits & MASK) * (1 / 2^digits);  out = x * (to - from) + from
 * torch's shipped CPU kernels evaluate the last line as one fused multiply-add
 * (verified bit-exactly against torch 2.13 on the AVX2/AVX512 kernels), so it is
 * spelled with fmaf/fma here: exact regardless of our compiler flags. */
static void uniform_f32(mt19937 *g, float *out, int64_t n, double from_d, double to_d)
{
    const float from = (float)from_d;
    const float to = (float)to_d;
    const float range = to - from;
    const float divisor = 1.0f / 16777216.0f;          /* 2^-24 */
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = mt19937_random32(g) & 0xffffffu;   /* 24 = float digits */
        float x = (float)r * divisor;
        out[i] = fmaf(x, range, from);
    }
}

static void uniform_f64(mt19937 *g, double *out, int64_t n, double from, double to)
{
    const double range = to - from;
    const double divisor = 1.0 / 9007199254740992.0;   /* 2^-53 */
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = mt19937_random64(g) & ((UINT64_C(1) << 53) - 1);  /* 53 digits */
        double x = (double)r * divisor;
        out[i] = fma(x, range, from);
    }
}

/* init.kaiming_uniform_(weight, a=math.sqrt(5)) with mode='fan_in',
 * nonlinearity='leaky_relu', in Python doubles and Python's operation order:
 *   gain  = math.sqrt(2.0 / (1 + a ** 2))
 *   std   = gain / math.sqrt(fan_in)
 *   bound = math.sqrt(3.0) * std
 * (float ** int is C pow() in CPython.) */
static double kaiming_bound(int64_t fan_in)
{
    const double a = sqrt(5.0);
    const double gain = sqrt(2.0 / (1.0 + pow(a, 2.0)));
    const double std = gain / sqrt((double)fan_in);
    return sqrt(3.0) * std;
}

/* Linear.reset_parameters bias bound: 1 / math.sqrt(fan_in) if fan_in > 0 else 0 */
static double bias_bound(int64_t fan_in)
{
    return fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0.0;
}

void linear_init_f32(mt19937 *g, float *weight, float *bias, int64_t out, int64_t in)
{
    /* kaiming_uniform_ returns before drawing when 0 is in weight.shape. */
    if (out > 0 && in > 0) {
        double b = kaiming_bound(in);
        uniform_f32(g, weight, out * in, -b, b);
    }
    if (bias != NULL) {
        double b = bias_bound(in);          /* in == 0: Python's int 0, so from = +0.0 */
        uniform_f32(g, bias, out, in > 0 ? -b : 0.0, b);   /* in == 0: out draws of 0 */
    }
}

void linear_init_f64(mt19937 *g, double *weight, double *bias, int64_t out, int64_t in)
{
    if (out > 0 && in > 0) {
        double b = kaiming_bound(in);
        uniform_f64(g, weight, out * in, -b, b);
    }
    if (bias != NULL) {
        double b = bias_bound(in);
        uniform_f64(g, bias, out, in > 0 ? -b : 0.0, b);
    }
}
