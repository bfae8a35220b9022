/* Inside the SDPA family: the table of one path's kernels, of which sdpa.c
 * takes the one of the path cpu.h chose (decided once per process), as the
 * GEMM takes its micro-kernel context (gemm_internal.h).  The portable path has
 * no table: its forward is sdpa_forward_tmpl.h's loops over the project's GEMM.
 * Adding a path = one file (like sdpa_avx2.c) with its two tables and one case
 * in sdpa_select_f32 / _f64 (sdpa.c). */
#ifndef MYATT_KERNELS_SDPA_INTERNAL_H
#define MYATT_KERNELS_SDPA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/cpu.h"
#include "sdpa.h"

/* The query rows of one work item: row r is query row i[r] of the output's
 * batch index b[r], its query at q[r] (column stride p->q.cs) and its mask row
 * at mask[r] (key 0, column stride p->mask.cs; NULL without a mask).  Every row
 * reads the same keys and values (one kv head: several query heads of a GQA
 * group may share an item). */
typedef struct {
    int64_t n;
    const int64_t *b, *i;
    const void *const *q;
    const void *const *mask;
} sdpa_rows;

/* state(p, ws, rows, k, v, k0, k1, o, row_max, row_sum): the online softmax of
 * the rows over keys [k0, k1) (causal: those each row sees), k and v at key 0
 * of the rows' kv head:
 *   row_max[r] = max_j s[r, j],  row_sum[r] = sum_j exp(s[r, j] - row_max[r]),
 *   o[r, :]    = sum_j exp(s[r, j] - row_max[r]) (dropped: 0) v[j, :]    (o: [n, Ev])
 * with s the scaled, masked scores, in blocks of SDPA_KV_SPLIT keys (k0 a
 * multiple of it), as sdpa_forward_tmpl.h's loop computes them.  ws holds at least
 * ws_elems(p, n) elements of T (64-byte aligned).  Every layout of the operands
 * gives the same bits.  Returns 0. */
typedef struct {
    const char *name;   /* "avx2", "avx512" */
    size_t (*ws_elems)(const sdpa_problem *p, int64_t max_rows);
    int (*state)(const sdpa_problem *p, float *ws, const sdpa_rows *rows, const float *k,
                 const float *v, int64_t k0, int64_t k1, float *o, float *row_max,
                 float *row_sum);
    /* out[i] = exp(inp[i]) with the exp of state (in place allowed) */
    void (*exp)(float *out, const float *inp, int64_t n);
    /* the same with torch's fexp_u20 (vec512_float.h / vec256_float.h), the exp
     * of its flash kernel's weights in bfloat16 and float16 on this path:
     * Malossi et al.'s cubic in the fraction, the result's bits by a truncating
     * conversion, 0 below ln(FLT_MIN) (exp(0) is 1 - 2^-14.2); NaN stays NaN */
    void (*fexp_u20)(float *out, const float *inp, int64_t n);
} sdpa_kernels_f32;

typedef struct {
    const char *name;
    size_t (*ws_elems)(const sdpa_problem *p, int64_t max_rows);
    int (*state)(const sdpa_problem *p, double *ws, const sdpa_rows *rows, const double *k,
                 const double *v, int64_t k0, int64_t k1, double *o, double *row_max,
                 double *row_sum);
    void (*exp)(double *out, const double *inp, int64_t n);
} sdpa_kernels_f64;

#ifdef MYATT_X86
extern const sdpa_kernels_f32 sdpa_kernels_f32_avx2, sdpa_kernels_f32_avx512;
extern const sdpa_kernels_f64 sdpa_kernels_f64_avx2, sdpa_kernels_f64_avx512;
#endif

#endif
