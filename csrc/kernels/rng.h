/* torch's CPU generator, bit for bit: MT19937 seeded as at::mt19937 seeds it,
 * and the draws that nn.Linear's constructor makes.
 *
 * After mt19937_seed(g, s), linear_init_f32(g, ...) writes exactly the weight
 * and bias that `torch.manual_seed(s); nn.Linear(in, out)` holds (float64:
 * `dtype=torch.float64`), and leaves g where torch's generator would be. */
#ifndef MYATT_KERNELS_RNG_H
#define MYATT_KERNELS_RNG_H

#include <stdint.h>

typedef struct {
    uint32_t state[624];
    int index;
} mt19937;

void mt19937_seed(mt19937 *g, uint64_t seed);
uint32_t mt19937_random32(mt19937 *g);   /* torch CPUGeneratorImpl::random()   */
uint64_t mt19937_random64(mt19937 *g);   /* torch CPUGeneratorImpl::random64() */

/* nn.Linear(in, out).reset_parameters(): weight [out, in] (C-contiguous) from
 * kaiming_uniform_(a=sqrt(5)), then bias [out] from U(-1/sqrt(in), 1/sqrt(in));
 * bias may be NULL (bias=False): then nothing is drawn for it. */
void linear_init_f32(mt19937 *g, float *weight, float *bias, int64_t out, int64_t in);
void linear_init_f64(mt19937 *g, double *weight, double *bias, int64_t out, int64_t in);

#endif
