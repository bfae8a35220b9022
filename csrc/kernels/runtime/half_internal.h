/* The table of half.h's conversion loops, one per path (half_tmpl.h). */
#ifndef MYATT_KERNELS_HALF_INTERNAL_H
#define MYATT_KERNELS_HALF_INTERNAL_H

#include "half.h"

typedef struct {
    void (*narrow)(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind);
    void (*widen)(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind);
    void (*round)(float *x, int64_t n, mk_half_kind kind);
} mk_half_loops;

extern const mk_half_loops mk_half_loops_portable, mk_half_loops_avx2, mk_half_loops_avx512;

#endif
