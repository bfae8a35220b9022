/* The dtypes myatt computes in: one row each, the only place a NumPy type
 * number meets a kernel.
 *
 * MYATT_DTYPES lists the rows that have kernels of their own (row 0 is the
 * default dtype of the constructors), MYATT_HALF_DTYPES those that compute in
 * another row's kernels: the suffix of the kernels' symbols
 * (linear_forward_f32), the NumPy type number, the name used in messages and
 * reprs ("float32"), the item size, the promotion rank (a result takes the
 * highest rank among its operands' dtypes; two rows of one rank that differ
 * give the next rank's: bfloat16 with float16 is float32, as torch's
 * promotion) and the row whose kernels compute it (itself, or f32).
 * Every kernel has the same signature for every dtype (data as void *, view.h),
 * so a glue file holds a kernel's symbols in one table indexed by the
 * computing row, DTYPE_KERNELS(linear_forward) = {linear_forward_f32,
 * linear_forward_f64}, and calls linear_forward_kernels[dt->kernel](...) with
 * no per-dtype fork.
 *
 * A half row (float16, bfloat16) computes in float32 kernels: its operands
 * are read exactly as float32 and each result is rounded once to the half
 * dtype (entry.c's entry_run), torch's rule for one op (float32 arithmetic,
 * one rounding); where torch rounds an intermediate too (the flash kernel's
 * attention weights), the kernel is told (sdpa_problem.round_weights).
 * bfloat16 is ml_dtypes' NumPy dtype: its type number is the one ml_dtypes
 * registered, known once ml_dtypes is imported (dtype_bfloat16_resolve). */
#ifndef MYATT_DTYPE_H
#define MYATT_DTYPE_H

/* X(arg, suffix, NumPy type number, name, item size, rank, computing row) */
#define MYATT_DTYPES(X, arg)                                 \
    X(arg, f32, NPY_FLOAT, "float32", 4, 1, f32)             \
    X(arg, f64, NPY_DOUBLE, "float64", 8, 2, f64)
#define MYATT_HALF_DTYPES(X, arg)                            \
    X(arg, f16, NPY_HALF, "float16", 2, 0, f32)              \
    X(arg, bf16, NPY_NOTYPE, "bfloat16", 2, 0, f32)

/* MYATT_DTYPE_f32, MYATT_DTYPE_f64, ...: the rows' indices; MYATT_NKERNELS the
 * count of rows with kernels (the size of a DTYPE_KERNELS table); MYATT_NDTYPES */
#define MYATT_DTYPE_INDEX_(arg, suffix, typenum, name, size, rank, compute) \
    MYATT_DTYPE_##suffix,
enum { MYATT_DTYPES(MYATT_DTYPE_INDEX_, ~) MYATT_NKERNELS,
       MYATT_DTYPE_HALF_BEFORE_ = MYATT_NKERNELS - 1,
       MYATT_HALF_DTYPES(MYATT_DTYPE_INDEX_, ~) MYATT_NDTYPES };

/* {fn_f32, fn_f64}: a kernel's symbols in row order, indexed by dt->kernel */
#define MYATT_KERNEL_SYMBOL_(fn, suffix, typenum, name, size, rank, compute) fn##_##suffix,
#define PER_DTYPE(fn) {MYATT_DTYPES(MYATT_KERNEL_SYMBOL_, fn)}

/* static const fn##_kernels[]: PER_DTYPE(fn), typed as fn_f32 (a glue file's
 * table of one kernel: DTYPE_KERNELS(linear_forward); then
 * linear_forward_kernels[dt->kernel](...)) */
#define DTYPE_KERNELS(fn) \
    static __typeof__(fn##_f32) *const fn##_kernels[MYATT_NKERNELS] = PER_DTYPE(fn)

typedef struct {
    int typenum;                 /* NumPy type number: NPY_FLOAT (bfloat16: NPY_NOTYPE
                                    until ml_dtypes is found) */
    const char *name;            /* "float32" */
    int itemsize;                /* bytes: 4 */
    int index;                   /* the row's position in myatt_dtypes */
    int rank;                    /* promotion: higher wins */
    int kernel;                  /* the index of the row whose kernels compute it:
                                    the index of DTYPE_KERNELS tables */
} myatt_dtype;

extern myatt_dtype myatt_dtypes[MYATT_NDTYPES];
#define MYATT_DTYPE_DEFAULT (&myatt_dtypes[0])
#define MYATT_DTYPE(suffix) (&myatt_dtypes[MYATT_DTYPE_##suffix])

/* A half row: computed in another row's kernels, its results rounded. */
static inline int dtype_is_half(const myatt_dtype *d)
{
    return d->kernel != d->index;
}

/* The row of a NumPy type number, or NULL when myatt does not compute in it.
 * Inline: every kernel call asks it for each operand. */
static inline const myatt_dtype *dtype_of_typenum(int typenum)
{
    for (int i = 0; i < MYATT_NDTYPES; i++)
        if (myatt_dtypes[i].typenum == typenum)
            return &myatt_dtypes[i];
    return NULL;
}

/* The dtype of operands of rows a and b (either may be NULL: not a row). */
const myatt_dtype *dtype_promote(const myatt_dtype *a, const myatt_dtype *b);

/* Finds bfloat16's type number (the bf16 row's typenum) in ml_dtypes: 0 when
 * known; when ml_dtypes is not imported yet, 1 (import 0), or imports it
 * (import 1: -1 with ImportError when it is not installed).  -1 with an
 * exception on other errors. */
int dtype_bfloat16_resolve(int import);

/* The row named `name` ("float64"), or NULL. */
const myatt_dtype *dtype_of_name(const char *name);

/* "float32, float64, float16 or bfloat16": the names of all rows (with_half 0:
 * of those with kernels of their own, "float32 or float64"), for messages. */
const char *dtype_names(int with_half);

#endif
