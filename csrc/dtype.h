/* The dtypes myatt computes in: one row each, the only place a NumPy type
 * number meets a kernel.
 *
 * MYATT_DTYPES lists the rows, in promotion order (a result takes the last row
 * among its operands' dtypes; row 0 is the default dtype of the constructors):
 * the suffix of the kernels' symbols (linear_forward_f32), the NumPy type
 * number, the name used in messages and reprs ("float32") and the item size.
 * Every kernel has the same signature for every dtype (data as void *, view.h),
 * so a glue file holds a kernel's symbols in one table indexed by the row,
 * DTYPE_KERNELS(linear_forward) = {linear_forward_f32, linear_forward_f64}, and
 * calls linear_forward_kernels[dt->index](...) with no per-dtype fork.
 * Adding a dtype: one line below; the linker then names every kernel symbol
 * (_f16, _bf16) still to write. */
#ifndef MYATT_DTYPE_H
#define MYATT_DTYPE_H

/* X(arg, suffix, NumPy type number, name, item size) for each row */
#define MYATT_DTYPES(X, arg)                     \
    X(arg, f32, NPY_FLOAT, "float32", 4)         \
    X(arg, f64, NPY_DOUBLE, "float64", 8)

/* MYATT_DTYPE_f32, MYATT_DTYPE_f64, ...: the rows' indices; MYATT_NDTYPES */
#define MYATT_DTYPE_INDEX_(arg, suffix, typenum, name, size) MYATT_DTYPE_##suffix,
enum { MYATT_DTYPES(MYATT_DTYPE_INDEX_, ~) MYATT_NDTYPES };

/* {fn_f32, fn_f64, ...}: a kernel's symbols in row order, indexed by dt->index */
#define MYATT_KERNEL_SYMBOL_(fn, suffix, typenum, name, size) fn##_##suffix,
#define PER_DTYPE(fn) {MYATT_DTYPES(MYATT_KERNEL_SYMBOL_, fn)}

/* static const fn##_kernels[]: PER_DTYPE(fn), typed as fn_f32 (a glue file's
 * table of one kernel: DTYPE_KERNELS(linear_forward); then
 * linear_forward_kernels[dt->index](...)) */
#define DTYPE_KERNELS(fn) \
    static __typeof__(fn##_f32) *const fn##_kernels[MYATT_NDTYPES] = PER_DTYPE(fn)

typedef struct {
    int typenum;                 /* NumPy type number: NPY_FLOAT */
    const char *name;            /* "float32" */
    int itemsize;                /* bytes: 4 */
    int index;                   /* the row's position: the index of PER_DTYPE tables */
} myatt_dtype;

extern const myatt_dtype myatt_dtypes[MYATT_NDTYPES];
#define MYATT_DTYPE_DEFAULT (&myatt_dtypes[0])

/* The row of a NumPy type number, or NULL when myatt does not compute in it.
 * Inline: every kernel call asks it for each operand. */
static inline const myatt_dtype *dtype_of_typenum(int typenum)
{
    for (int i = 0; i < MYATT_NDTYPES; i++)
        if (myatt_dtypes[i].typenum == typenum)
            return &myatt_dtypes[i];
    return NULL;
}

/* The row named `name` ("float64"), or NULL. */
const myatt_dtype *dtype_of_name(const char *name);

/* "float32 or float64": the names of all rows, for messages. */
const char *dtype_names(void);

#endif
