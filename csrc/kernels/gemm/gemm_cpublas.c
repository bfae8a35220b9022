/* torch's naive CPU GEMM orders on float32 data (gemm_cpublas.h): the driver
 * and the portable path; the rows' loops are gemm_cpublas_tmpl.h's, compiled
 * once per path (gemm_cpublas_avx2.c, gemm_cpublas_avx512.c), their loops over
 * independent lanes (the dot's 64 accumulators, the columns of a row) left to
 * the compiler's vectorizer: no product depends on it (each is exact, and
 * every sum keeps its order). */
#include "gemm/gemm_cpublas_internal.h"

#include "runtime/alloc.h"
#include "runtime/copy.h"
#include "runtime/threads.h"

#include <string.h>

/* A matrix whose columns are contiguous is N; one whose rows are (and whose
 * columns are not) is a transposed view, T.  A single row or column is N. */
static int is_transposed(mk_cmat x)
{
    return x.cs != 1 && x.cols > 1 && (x.rs == 1 || x.rows == 1);
}

cpublas_order cpublas_order_of(mk_cmat a, mk_cmat b)
{
    const int ta = is_transposed(a), tb = is_transposed(b);
    return ta == tb ? CPUBLAS_SUM4 : tb ? CPUBLAS_DOT8 : CPUBLAS_CHAIN;
}

/* the portable path: no FMA (a multiply, then an add: the same bits) */
#define CPUBLAS_FN(name) name##_portable
#define CPUBLAS_MADD(s, x, y) ((s) + (x) * (y))
#define CPUBLAS_NJ 1
#include "gemm_cpublas_tmpl.h"

/* x as a view with contiguous rows (want_rows) or columns: x itself, or a copy
 * in *buf (NULL when none was needed; -1 when it could not be allocated). */
static int contiguous(mk_cmat *x, int want_rows, float **buf)
{
    *buf = NULL;
    if ((want_rows ? x->cs : x->rs) == 1 || (want_rows ? x->cols : x->rows) <= 1)
        return 0;
    if ((*buf = mk_alloc(mk_bytes(mk_bytes((size_t)x->rows, (size_t)x->cols),
                                  sizeof(float)))) == NULL)
        return -1;
    if (want_rows) {
        mk_copy_view(*buf, *x, sizeof(float));
        *x = mk_cmat_c(*buf, x->rows, x->cols);
    } else {
        mk_copy_view(*buf, mk_t(*x), sizeof(float));
        *x = mk_t(mk_cmat_c(*buf, x->cols, x->rows));
    }
    return 0;
}

int gemm_cpublas(mk_mat c, mk_cmat a, mk_cmat b, const float *bias, cpublas_order order)
{
    const int64_t m = c.rows, n = c.cols, k = a.cols;
    if (m <= 0 || n <= 0)
        return 0;
    float *abuf = NULL, *bbuf = NULL;
    /* DOT8 reads a's rows and b's columns along k; the others b's rows along n */
    int rc = order == CPUBLAS_DOT8 ? contiguous(&a, 1, &abuf) | contiguous(&b, 0, &bbuf)
                                   : contiguous(&b, 1, &bbuf);
    if (rc == 0) {
        const double work = (double)m * (double)n * (double)(k > 0 ? k : 1);
        int tasks = work < 65536.0 ? 1 : mk_get_num_threads();
        if (tasks > m)
            tasks = (int)m;
        /* the kernel path pairs with torch's build for its instruction set */
        const mk_isa isa = mk_cpu_isa();
        cpublas_job job = {c, a, b, bias, order, isa != MK_ISA_PORTABLE, (m + tasks - 1) / tasks};
        mk_task_fn rows = cpublas_rows_portable;
#ifdef MYATT_X86
        rows = isa == MK_ISA_AVX512 ? cpublas_rows_avx512
               : isa == MK_ISA_AVX2 ? cpublas_rows_avx2 : rows;
#endif
        mk_parallel_run((int)((m + job.rows_per_task - 1) / job.rows_per_task), rows, &job);
    }
    mk_free(abuf);
    mk_free(bbuf);
    return rc == 0 ? 0 : -1;
}

int bmm_cpublas(mk_batch c, mk_cbatch a, mk_cbatch b, cpublas_order order)
{
    if (c.rows <= 0 || c.cols <= 0)   /* (not 2**40 empty items one by one) */
        return 0;
    for (int64_t i = 0; i < c.batch; i++)
        if (gemm_cpublas(mk_item(c, i, sizeof(float)), mk_citem(a, i, sizeof(float)),
                         mk_citem(b, i, sizeof(float)), NULL, order) < 0)
            return -1;
    return 0;
}
