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
#include <string.h>

#define RNG_PI 3.14159265358979323846   /* c10::pi<double> */
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
    g->has_next_normal = 0;   /* set_current_seed resets next_double_normal_sample */
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

/* tensor.uniform_(from, to) of a float16 or bfloat16 tensor (kind): uniform_f32's
 * draw (in float32, torch's opmath type for them), rounded; a value that rounds
 * to `to` becomes `from` rounded, so that every value stays below `to`
 * (verified bit-exactly against torch 2.13's nn.Linear in both dtypes). */
static uint16_t half_of(float x, mk_half_kind kind)
{
    return kind == MK_HALF_BF16 ? mk_bf16_of_f32(x) : mk_f16_of_f32(x);
}

static void uniform_half(mt19937 *g, uint16_t *out, int64_t n, double from_d, double to_d,
                         mk_half_kind kind)
{
    const float from = (float)from_d;
    const float to = (float)to_d;
    const float range = to - from;
    const float divisor = 1.0f / 16777216.0f;
    const uint16_t lo = half_of(from, kind), hi = half_of(to, kind);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = mt19937_random32(g) & 0xffffffu;
        const uint16_t h = half_of(fmaf((float)r * divisor, range, from), kind);
        out[i] = h == hi ? lo : h;
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

void linear_init_f32(mt19937 *g, void *weight_, void *bias_, int64_t out, int64_t in)
{
    float *weight = weight_, *bias = bias_;
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

void linear_init_f64(mt19937 *g, void *weight_, void *bias_, int64_t out, int64_t in)
{
    double *weight = weight_, *bias = bias_;
    if (out > 0 && in > 0) {
        double b = kaiming_bound(in);
        uniform_f64(g, weight, out * in, -b, b);
    }
    if (bias != NULL) {
        double b = bias_bound(in);
        uniform_f64(g, bias, out, in > 0 ? -b : 0.0, b);
    }
}

void linear_init_half(mt19937 *g, void *weight, void *bias, int64_t out, int64_t in,
                      mk_half_kind kind)
{
    if (out > 0 && in > 0) {
        double b = kaiming_bound(in);
        uniform_half(g, weight, out * in, -b, b, kind);
    }
    if (bias != NULL) {
        double b = bias_bound(in);
        uniform_half(g, bias, out, in > 0 ? -b : 0.0, b, kind);
    }
}

/* ---- xavier_uniform_, xavier_normal_ (torch/nn/init.py) -------------------- */

/* std = gain * math.sqrt(2.0 / float(fan_in + fan_out)), gain 1 */
static double xavier_std(int64_t fan_in, int64_t fan_out)
{
    return sqrt(2.0 / (double)(fan_in + fan_out));
}

void xavier_uniform_f32(mt19937 *g, void *w, int64_t rows, int64_t cols)
{
    const double a = sqrt(3.0) * xavier_std(cols, rows);
    uniform_f32(g, w, rows * cols, -a, a);
}

void xavier_uniform_f64(mt19937 *g, void *w, int64_t rows, int64_t cols)
{
    const double a = sqrt(3.0) * xavier_std(cols, rows);
    uniform_f64(g, w, rows * cols, -a, a);
}

/* at::normal_distribution<double>(0, std) (DistributionsHelper.h): Box-Muller
 * on two uniform doubles, the sine half kept for the next call. */
static double normal_scalar(mt19937 *g, double std)
{
    double ret;
    if (g->has_next_normal) {
        g->has_next_normal = 0;
        ret = g->next_normal;
    } else {
        const double divisor = 1.0 / 9007199254740992.0;   /* uniform(0, 1): 53 bits */
        const double u1 = (double)(mt19937_random64(g) & ((UINT64_C(1) << 53) - 1)) * divisor;
        const double u2 = (double)(mt19937_random64(g) & ((UINT64_C(1) << 53) - 1)) * divisor;
        const double r = sqrt(-2.0 * log1p(-u2));
        const double theta = 2.0 * RNG_PI * u1;
        g->next_normal = r * sin(theta);
        g->has_next_normal = 1;
        ret = r * cos(theta);
    }
    return ret * std + 0.0;   /* transformation::normal: ret * std + mean */
}

/* normal_fill_16 (torch's DEFAULT kernels; float64 on every path): eight
 * Box-Muller pairs from d[0:8] and d[8:16]:
 *   u1 = 1 - d[j]; radius = sqrt(-2 log u1); theta = (2.0f * pi<double>) * u2 */
static void normal_fill_16_f64(double *d, double std)
{
    for (int j = 0; j < 8; j++) {
        const double u1 = 1 - d[j];
        const double u2 = d[j + 8];
        const double radius = sqrt(-2 * log(u1));
        const double theta = 2.0 * RNG_PI * u2;
        d[j] = radius * cos(theta) * std + 0.0;
        d[j + 8] = radius * sin(theta) * std + 0.0;
    }
}

/* ---- normal_fill_16_AVX2 (torch's AVX2 and AVX-512 kernels) ----------------
 *
 * torch 2.13 fills 16 or more float32 values with avx_mathfun.h's log256_ps and
 * sincos256_ps (Cephes polynomials, J. Pommier / G. Garberoglio) wherever its
 * CPU capability is AVX2 or AVX-512.  Written out per lane, in the order of
 * operations of that file; torch builds it with FMA and GCC's default
 * contraction, which fuses each multiply whose only use is an add (the first
 * such multiply, in statement order, where two feed one add). */
#define MF_MADD(a, b, c) fmaf((a), (b), (c))

static float mf_bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t mf_float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* log256_ps for x in (0, 1] (what normal_fill hands it) */
static float mf_log(float x)
{
    const float min_norm = mf_bits_to_float(0x00800000u);
    x = x > min_norm ? x : min_norm;
    uint32_t bits = mf_float_to_bits(x);
    int32_t imm0 = (int32_t)(bits >> 23) - 0x7f;
    x = mf_bits_to_float((bits & ~0x7f800000u) | mf_float_to_bits(0.5f));
    float e = (float)imm0 + 1.0f;
    const int mask = x < 0.707106781186547524f;
    const float tmp = mask ? x : 0.0f;
    x = x - 1.0f;
    e = e - (mask ? 1.0f : 0.0f);
    x = x + tmp;
    const float z = x * x;
    float y = 7.0376836292E-2f;
    y = MF_MADD(y, x, -1.1514610310E-1f);
    y = MF_MADD(y, x, 1.1676998740E-1f);
    y = MF_MADD(y, x, -1.2420140846E-1f);
    y = MF_MADD(y, x, +1.4249322787E-1f);
    y = MF_MADD(y, x, -1.6668057665E-1f);
    y = MF_MADD(y, x, +2.0000714765E-1f);
    y = MF_MADD(y, x, -2.4999993993E-1f);
    y = MF_MADD(y, x, +3.3333331174E-1f);
    y = y * x;
    y = MF_MADD(y, z, e * -2.12194440e-4f);
    y = MF_MADD(-z, 0.5f, y);
    x = x + y;
    x = MF_MADD(e, 0.693359375f, x);
    return x;
}

/* sincos256_ps for x >= 0 */
static void mf_sincos(float x, float *s, float *c)
{
    float y = x * 1.27323954473516f;   /* 4 / pi */
    int32_t j = (int32_t)y;
    j = (j + 1) & ~1;
    y = (float)j;
    const uint32_t sign_sin = ((uint32_t)j & 4u) << 29;
    const int poly_mask = (j & 2) == 0;
    x = MF_MADD(y, -0.78515625f, x);
    x = MF_MADD(y, -2.4187564849853515625e-4f, x);
    x = MF_MADD(y, -3.77489497744594108e-8f, x);
    const uint32_t sign_cos = (~(uint32_t)(j - 2) & 4u) << 29;
    const float z = x * x;
    float yc = 2.443315711809948E-005f;
    yc = MF_MADD(yc, z, -1.388731625493765E-003f);
    yc = MF_MADD(yc, z, 4.166664568298827E-002f);
    yc = yc * z;
    yc = MF_MADD(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;
    float ys = -1.9515295891E-4f;
    ys = MF_MADD(ys, z, 8.3321608736E-3f);
    ys = MF_MADD(ys, z, -1.6666654611E-1f);
    ys = ys * z;
    ys = MF_MADD(ys, x, x);
    const float ysin2 = poly_mask ? ys : 0.0f, ysin1 = poly_mask ? 0.0f : yc;
    ys = ys - ysin2;
    yc = yc - ysin1;
    *s = mf_bits_to_float(mf_float_to_bits(ysin1 + ysin2) ^ sign_sin);
    *c = mf_bits_to_float(mf_float_to_bits(yc + ys) ^ sign_cos);
}

static void normal_fill_16_avx2_f32(float *d, float std)
{
    const float two_pi = (float)(2.0 * RNG_PI);
    for (int j = 0; j < 8; j++) {
        const float u1 = 1.0f - d[j];
        const float u2 = d[j + 8];
        const float radius = sqrtf(-2.0f * mf_log(u1));
        float sn, cs;
        mf_sincos(two_pi * u2, &sn, &cs);
        d[j] = fmaf(radius * cs, std, 0.0f);
        d[j + 8] = fmaf(radius * sn, std, 0.0f);
    }
}

/* tensor.normal_(0, std) of n contiguous values: normal_fill for n >= 16
 * (uniforms for all, 16 at a time transformed, a tail redone on the last 16
 * with fresh uniforms), else one normal_distribution<double> per value. */
void xavier_normal_f32(mt19937 *g, void *t_, int64_t rows, int64_t cols, int64_t rest)
{
    float *t = t_;
    const int64_t n = rows * cols * rest;
    const double std_d = xavier_std(cols * rest, rows * rest);
    if (n < 16) {
        for (int64_t i = 0; i < n; i++)
            t[i] = (float)normal_scalar(g, std_d);
        return;
    }
    const float std = (float)std_d;
    uniform_f32(g, t, n, 0.0, 1.0);
    /* torch's AVX2 / AVX-512 kernels' fill (as uniform_f32 follows their fused
     * uniform_; its DEFAULT kernel, libm's log and sincos, differs in the last bit) */
    for (int64_t i = 0; i + 16 <= n; i += 16)
        normal_fill_16_avx2_f32(t + i, std);
    if (n % 16 != 0) {
        uniform_f32(g, t + n - 16, 16, 0.0, 1.0);
        normal_fill_16_avx2_f32(t + n - 16, std);
    }
}

void xavier_normal_f64(mt19937 *g, void *t_, int64_t rows, int64_t cols, int64_t rest)
{
    double *t = t_;
    const int64_t n = rows * cols * rest;
    const double std = xavier_std(cols * rest, rows * rest);
    if (n < 16) {
        for (int64_t i = 0; i < n; i++)
            t[i] = normal_scalar(g, std);
        return;
    }
    uniform_f64(g, t, n, 0.0, 1.0);
    for (int64_t i = 0; i + 16 <= n; i += 16)
        normal_fill_16_f64(t + i, std);
    if (n % 16 != 0) {
        uniform_f64(g, t + n - 16, 16, 0.0, 1.0);
        normal_fill_16_f64(t + n - 16, std);
    }
}

/* ---- half precision: xavier_uniform_, xavier_normal_ in float16 / bfloat16 -- */

void xavier_uniform_half(mt19937 *g, void *w, int64_t rows, int64_t cols, mk_half_kind kind)
{
    const double a = sqrt(3.0) * xavier_std(cols, rows);
    uniform_half(g, w, rows * cols, -a, a, kind);
}

/* 16 values of normal_fill's float32 fill (its AVX2 / AVX-512 kernels' draws
 * and arithmetic, as xavier_normal_f32's), rounded into t */
static void normal_fill_16_half(mt19937 *g, uint16_t *t, float std, mk_half_kind kind)
{
    float buf[16];
    uniform_f32(g, buf, 16, 0.0, 1.0);
    normal_fill_16_avx2_f32(buf, std);
    for (int i = 0; i < 16; i++)
        t[i] = half_of(buf[i], kind);
}

void xavier_normal_half(mt19937 *g, void *t_, int64_t rows, int64_t cols, int64_t rest,
                        mk_half_kind kind)
{
    uint16_t *t = t_;
    const int64_t n = rows * cols * rest;
    const double std = xavier_std(cols * rest, rows * rest);
    if (n < 16) {   /* normal_distribution<double>, rounded */
        for (int64_t i = 0; i < n; i++)
            t[i] = half_of((float)normal_scalar(g, std), kind);
        return;
    }
    for (int64_t i = 0; i + 16 <= n; i += 16)
        normal_fill_16_half(g, t + i, (float)std, kind);
    if (n % 16 != 0)   /* the last 16 again, from 16 new draws */
        normal_fill_16_half(g, t + n - 16, (float)std, kind);
}
