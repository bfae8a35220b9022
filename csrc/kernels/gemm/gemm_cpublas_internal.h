/* What gemm_cpublas.c shares with its instruction-set paths
 * (gemm_cpublas_tmpl.h, compiled once per path). */
#ifndef MYATT_KERNELS_GEMM_CPUBLAS_INTERNAL_H
#define MYATT_KERNELS_GEMM_CPUBLAS_INTERNAL_H

#include "gemm/gemm_cpublas.h"
#include "runtime/cpu.h"

/* Columns of c that SUM4 and CHAIN compute at once (partial sums on the stack) */
enum { CPUBLAS_COLS = 256 };

typedef struct {
    mk_mat c;
    mk_cmat a, b;          /* DOT8: a [m, k] and b^T [n, k] rows contiguous; else b's
                              columns contiguous */
    const float *bias;
    cpublas_order order;
    int tree;              /* DOT8's lanes: by torch's tree, or in order */
    int64_t rows_per_task;
} cpublas_job;

/* c's rows [task * rows_per_task, ...) of a cpublas_job, one per path */
void cpublas_rows_portable(void *arg, int task);
#ifdef MYATT_X86
void cpublas_rows_avx2(void *arg, int task);
void cpublas_rows_avx512(void *arg, int task);
#endif

#endif
