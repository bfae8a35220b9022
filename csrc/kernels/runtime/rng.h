/* torch's CPU generator, bit for bit: MT19937 seeded as at::mt19937 seeds it,
 * and the draws that nn.Linear's constructor makes.
 *
 * After mt19937_seed(g, s), linear_init_f32(g, ...) writes exactly the weight
 * and bias that `torch.manual_seed(s); nn.Linear(in, out)` holds (float64:
 * `dtype=torch.float64`), and leaves g where torch's generator would be. */
#ifndef MYATT_KERNELS_RNG_H
#define MYATT_KERNELS_RNG_H

#include <stdint.h>

#include "half.h"

typedef struct {
    uint32_t state[624];
    int index;
    /* CPUGeneratorImpl's next_double_normal_sample: the second value of a
     * Box-Muller pair, kept for the next scalar normal draw (reset by seeding) */
    int has_next_normal;
    double next_normal;
} mt19937;

void mt19937_seed(mt19937 *g, uint64_t seed);
uint32_t mt19937_random32(mt19937 *g);   /* torch CPUGeneratorImpl::random()   */
uint64_t mt19937_random64(mt19937 *g);   /* torch CPUGeneratorImpl::random64() */

/* (The data are float for _f32, double for _f64, as void * like every public
 * kernel's, so that the glue holds one table of them per dtype.)
 *
 * nn.Linear(in, out).reset_parameters(): weight [out, in] (C-contiguous) from
 * kaiming_uniform_(a=sqrt(5)), then bias [out] from U(-1/sqrt(in), 1/sqrt(in));
 * bias may be NULL (bias=False): then nothing is drawn for it. */
void linear_init_f32(mt19937 *g, void *weight, void *bias, int64_t out, int64_t in);
void linear_init_f64(mt19937 *g, void *weight, void *bias, int64_t out, int64_t in);
/* The same in float16 or bfloat16 (uint16_t data): `dtype=torch.float16` /
 * `torch.bfloat16` (uniform_ draws in float32 and rounds: uniform_half) */
void linear_init_half(mt19937 *g, void *weight, void *bias, int64_t out, int64_t in,
                      mk_half_kind kind);

/* init.xavier_uniform_(w) of a [rows, cols] weight (fan_in = cols, fan_out =
 * rows): U(-a, a), a = sqrt(3) * sqrt(2 / (fan_in + fan_out)). */
void xavier_uniform_f32(mt19937 *g, void *w, int64_t rows, int64_t cols);
void xavier_uniform_f64(mt19937 *g, void *w, int64_t rows, int64_t cols);

/* init.xavier_normal_(t) of a contiguous [rows, cols, rest] tensor (fan_in =
 * cols * rest, fan_out = rows * rest): tensor.normal_(0, std) with std =
 * sqrt(2 / (fan_in + fan_out)), as torch's CPU normal_ draws it
 * (DistributionTemplates.h normal_kernel: 16 or more elements through
 * normal_fill, fewer through normal_distribution<double>).  16 or more
 * float32 values are filled as torch's AVX2 and AVX-512 kernels fill them
 * (avx_mathfun's log and sincos, fused), the kernels uniform_ follows too. */
void xavier_normal_f32(mt19937 *g, void *t, int64_t rows, int64_t cols, int64_t rest);
void xavier_normal_f64(mt19937 *g, void *t, int64_t rows, int64_t cols, int64_t rest);

/* Both in float16 or bfloat16 (uint16_t data), as torch 2.13 draws them in
 * the type (measured: docs/half-precision.md): xavier_uniform_ as
 * uniform_half; xavier_normal_ by blocks of 16, each from its own 16 uniform
 * draws, filled in float32 as xavier_normal_f32 fills and rounded (a last
 * partial block: the last 16 again, from new draws); below 16 values through
 * normal_distribution<double>, rounded. */
void xavier_uniform_half(mt19937 *g, void *w, int64_t rows, int64_t cols, mk_half_kind kind);
void xavier_normal_half(mt19937 *g, void *t, int64_t rows, int64_t cols, int64_t rest,
                        mk_half_kind kind);

#endif
