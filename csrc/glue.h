/* What every CPython glue file shares: the NumPy C API (imported once, in
 * module.c), the kernel views of arrays, the GIL bracket and the argument
 * conversion helpers of convert.c.  The lowest glue layer: it includes no
 * other glue header but dtype.h (docs/architecture.md).
 *
 * The glue converts and checks arguments, allocates results, releases the GIL
 * and calls the pure-C kernels of kernels/.  No arithmetic happens here. */
#ifndef MYATT_GLUE_H
#define MYATT_GLUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define PY_ARRAY_UNIQUE_SYMBOL MYATT_ARRAY_API
#ifndef MYATT_IMPORTS_NUMPY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "dtype.h"
#include "kernels/runtime/half.h"
#include "kernels/runtime/rng.h"
#include "kernels/view.h"

/* ---- releasing the GIL ----------------------------------------------------- */

/* The kernels run without the GIL (other threads go on) unless the work is
 * tiny: below MYATT_GIL_MIN_WORK multiply-adds (elements for softmax, times 8)
 * releasing and re-taking it costs as much as the computation (the seed's
 * module: ~0.1 us of ~1 us).  Use as a bracket, like Py_BEGIN_ALLOW_THREADS. */
#define MYATT_GIL_MIN_WORK 32768.0
#define MYATT_BEGIN_COMPUTE(work) \
    { PyThreadState *myatt_saved_ = (double)(work) >= MYATT_GIL_MIN_WORK ? PyEval_SaveThread() : NULL;
#define MYATT_END_COMPUTE \
      if (myatt_saved_ != NULL) PyEval_RestoreThread(myatt_saved_); }
/* ---- argument conversion (convert.c) -------------------------------------- */

/* Any array-like as an ndarray (new reference), without copying what need not
 * be copied: ndarrays as they are, torch tensors through __array__ (detached
 * first if they require grad).  Only real numbers pass: bool, integers,
 * float16/32/64 and bfloat16 (ml_dtypes'; a torch.bfloat16 tensor through its
 * bits, ml_dtypes imported then).  `what` names the argument in messages
 * ("linear(): input"). */
PyArrayObject *as_real_array(PyObject *obj, const char *what);

/* `a` as `typenum` (a row of the dtype table), aligned, native byte order and,
 * with `contiguous`, C-contiguous: `a` itself when it already is (new reference),
 * or NULL (a MemoryError names `what`, as "linear(): input: Unable to ..."). */
PyArrayObject *cast_array(PyArrayObject *a, int typenum, int contiguous, const char *what);

/* cast_array(a, typenum, 0), copied when that is `a` itself: an array that
 * nothing else holds (new reference), or NULL (a MemoryError names `what`). */
PyArrayObject *private_cast(PyArrayObject *a, int typenum, const char *what);

/* `a` with each of its first `upto` dimensions that has stride 0 (a broadcast
 * view: np.broadcast_to, torch's expand) as a dimension of 1, a new reference
 * (`a` itself when there is none), or NULL: a copy or a cast of it then holds
 * the data once instead of once per broadcast item.  The kernel must read the
 * dimension of 1 as broadcast. */
PyArrayObject *squeeze_broadcast(PyArrayObject *a, int upto);

/* A copy of `a` (an ndarray, same dtype): one memcpy where `a` is C- or
 * Fortran-contiguous (the copy then has the same layout: MultiheadAttention's
 * transposed weights), aligned and in native byte order (NumPy's general copy
 * costs ~0.2 us a call: vjp's pullbacks make several), else PyArray_NewCopy
 * in the same memory order (a transposed view stays one: torch's half GEMMs
 * choose their summation order by the layout).  New reference, or NULL. */
PyArrayObject *copy_array(PyArrayObject *a);

/* A [rows, cols] array of zeros stored transposed: the Fortran-ordered
 * transpose of a new C-contiguous [cols, rows] array (its base).
 * MultiheadAttention's projection weights w are such arrays, so that a
 * product of one row with w^T reads w^T's rows where they lie (see
 * mha_type.c).  New reference, or NULL (a MemoryError naming `what`). */
PyArrayObject *new_transposed_array(npy_intp rows, npy_intp cols, int typenum,
                                    const char *what);

/* w[i, j] = src[i * cols + j]: a 2-D array of any strides from a C-ordered
 * buffer of its dtype (torch's initial draws into a transposed weight). */
void store_rows(PyArrayObject *w, const void *src);

/* A block of `bytes` for private copies the glue keeps outside arrays (vjp's
 * MyAtt pullback): from the arrays' cache (kernels/runtime/alloc.h), traced by
 * tracemalloc as NumPy traces array data.  NULL with MemoryError naming `what`;
 * private_block_free(NULL) is a no-op. */
void *private_block_alloc(size_t bytes, const char *what);
void private_block_free(void *p);

/* The result dtype of a kernel function's operands ops[0:n] (NULL entries
 * skipped): their rows of the dtype table promoted (dtype_promote), the
 * default row (float32) when none is in the table (bool, integers). */
const myatt_dtype *result_dtype(PyArrayObject *const *ops, int n);

/* result_dtype of up to three operands (NULL skipped), as its NumPy type number. */
int result_typenum(PyArrayObject *a, PyArrayObject *b, PyArrayObject *c);

/* The rounding of a half row's results (MK_HALF_NONE for the others). */
static inline mk_half_kind dtype_half_kind(const myatt_dtype *d)
{
    return d->index == MYATT_DTYPE_f16 ? MK_HALF_F16
           : d->index == MYATT_DTYPE_bf16 ? MK_HALF_BF16 : MK_HALF_NONE;
}

/* A result computed in float32 for the half row dt (an array, or a tuple of
 * arrays and None; stolen): its float32 arrays rounded once to dt, as new
 * arrays; r itself when dt is no half row.  NULL (r NULL, or MemoryError
 * naming `what`). */
PyObject *round_results(PyObject *r, const myatt_dtype *dt, const char *what);

/* `dtype=` of the constructors: a row of the dtype table, spelt as anything
 * numpy.dtype() reads as one ("float32", numpy.float32, "f4", ...) or as a
 * torch dtype (torch.float32; torch is not imported); a half row (float16,
 * bfloat16) only `with_half` (Linear, MyAtt; MultiheadAttention holds float32
 * or float64 for now).  0, or -1 with TypeError "<owner>(): dtype must be
 * float32, float64, ..., got 'float23'". */
int dtype_arg(PyObject *obj, const char *owner, int with_half, const myatt_dtype **dtype);

/* A size argument (in_features, query_size, ...): an integer >= `min`.
 * Returns 0, or -1 with TypeError / ValueError / MemoryError naming `what`. */
int size_arg(PyObject *obj, const char *what, Py_ssize_t min, Py_ssize_t *size);

/* A new uninitialised C-contiguous array of `typenum` (a row of the dtype table),
 * or NULL with MemoryError naming `what` ("linear(): result") when its byte
 * count overflows or it cannot be allocated (never NumPy's ValueError). */
PyObject *new_array(int ndim, const npy_intp *dims, int typenum, const char *what);

/* If the current exception is a MemoryError (a copy of an input NumPy could not
 * allocate), replace it by one whose message starts with `what`. */
void name_memory_error(const char *what);

/* As name_memory_error, NumPy's ValueError for a copy it will not make
 * ("array is too big") too: after an allocation that can only fail so. */
void name_allocation_error(const char *what);

/* A real-number argument (a float, an int, anything with __float__; not a
 * bool, Python's or NumPy's) as a double: 0, or -1 with TypeError "<what>
 * must be a float<more>, got <type>" (more: e.g. " or None") or OverflowError
 * naming `what`. */
int float_arg(PyObject *obj, const char *what, const char *more, double *out);

/* A flag that must be a bool (Python's or NumPy's; as torch's C functions,
 * not any object's truth value): 0 with *out 0 or 1, or -1 with TypeError
 * "<what> must be a bool, got <type>". */
int bool_arg(PyObject *obj, const char *what, int *out);

/* As float_arg, then in [0, 1] (a dropout probability): else ValueError
 * "<what> must be in [0, 1], got <obj>". */
int probability_arg(PyObject *obj, const char *what, double *out);

/* A vectorcall's arguments (args[0:nargs] positional, then the values of
 * kwnames) as a new tuple and *kwargs a new dict (NULL without keywords), or
 * NULL with an exception. */
PyObject *tuple_and_kwargs(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                           PyObject **kwargs);

/* A vectorcall's arguments (args[0:nargs] positional, then the values of
 * kwnames) handed to a tp_call-style `call` as a tuple and a dict (or NULL):
 * the slow path of the vectorcall entry points, so that every call other than
 * the plain positional one is parsed (and refused) exactly as before. */
PyObject *call_with_tuple(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, ternaryfunc call);

/* torch's nn.Module.__call__ runs self.forward: m(...) on an instance of a
 * Python subclass whose `forward` is not the type's C one (`own`, its
 * METH_FASTCALL function) calls that forward with the vectorcall's arguments.
 * 1 and *result (NULL on an error) when it did; 0 when the C forward is to run
 * (always for myatt's own types, whose base is object: no lookup). */
int subclass_forward(PyObject *self, PyCFunction own, PyObject *const *args, size_t nargsf,
                     PyObject *kwnames, PyObject **result);

/* "Linear" for myatt.Linear: the part of tp_name after the last dot. */
const char *type_short_name(PyTypeObject *type);

/* "(2, 3)" into buf. */
const char *shape_str(char *buf, size_t len, int ndim, const npy_intp *dims);
#define SHAPE_STR_LEN 160
#define SHAPE_OF(buf, a) shape_str((buf), sizeof(buf), PyArray_NDIM(a), PyArray_DIMS(a))

/* Element stride of axis `i` of an aligned array (the kernels' item sizes by
 * constants: a division by a variable costs ~40 cycles, several per call). */
static inline npy_intp estride(PyArrayObject *a, int i)
{
    const npy_intp s = PyArray_STRIDES(a)[i], size = (npy_intp)PyArray_ITEMSIZE(a);
    return size == 4 ? s / 4 : size == 8 ? s / 8 : s / size;
}
#define ESTRIDE(a, i) estride((a), (i))

/* The kernel views (kernels/view.h) of an aligned 2-D / 3-D array. */
static inline mk_cmat cmat_of(PyArrayObject *a)
{
    return (mk_cmat){PyArray_DATA(a), PyArray_DIM(a, 0), PyArray_DIM(a, 1),
                     ESTRIDE(a, 0), ESTRIDE(a, 1)};
}

static inline mk_mat mat_of(PyArrayObject *a)
{
    return (mk_mat){PyArray_DATA(a), PyArray_DIM(a, 0), PyArray_DIM(a, 1),
                    ESTRIDE(a, 0), ESTRIDE(a, 1)};
}

static inline mk_cbatch cbatch_of(PyArrayObject *a)
{
    return (mk_cbatch){PyArray_DATA(a), PyArray_DIM(a, 0), PyArray_DIM(a, 1), PyArray_DIM(a, 2),
                       ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2)};
}

static inline mk_batch batch_of(PyArrayObject *a)
{
    return (mk_batch){PyArray_DATA(a), PyArray_DIM(a, 0), PyArray_DIM(a, 1), PyArray_DIM(a, 2),
                      ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2)};
}
#endif
