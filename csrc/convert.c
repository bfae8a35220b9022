/* Argument conversion shared by every Python entry point: array-likes to
 * ndarrays of the kernel's dtype, the dtype policy, sizes and shapes in messages. */
#include "glue.h"

#include "kernels/runtime/alloc.h"
#include "kernels/runtime/half.h"

#include <stdio.h>
#include <string.h>

/* Only torch tensors that require grad refuse __array__; retry with obj.detach(). */
static PyObject *asarray_detached(PyObject *obj)
{
    PyObject *detached = PyObject_CallMethod(obj, "detach", NULL);
    if (detached == NULL)
        return NULL;
    PyObject *arr = PyArray_FromAny(detached, NULL, 0, 0, 0, NULL);
    Py_DECREF(detached);
    return arr;
}

/* What as_real_array passes: bool, the integers and the rows of the dtype
 * table (bfloat16 once ml_dtypes, which registers it, is imported). */
static int is_real_dtype(PyArray_Descr *d)
{
    const int t = d->type_num;
    if (t >= NPY_USERDEF && dtype_bfloat16_resolve(0) < 0)
        PyErr_Clear();
    return PyTypeNum_ISBOOL(t) || PyTypeNum_ISINTEGER(t) || dtype_of_typenum(t) != NULL;
}

/* A torch.bfloat16 tensor (which NumPy cannot read: torch has no NumPy
 * bfloat16) as an ndarray of ml_dtypes.bfloat16 sharing its memory, through
 * its bits (t.detach().view(torch.int16)): a new reference; NULL with an
 * exception; or NULL without one when obj is no such tensor. */
static PyObject *torch_bfloat16_array(PyObject *obj, const char *what)
{
    PyObject *dt = PyObject_GetAttrString(obj, "dtype"), *str = NULL;
    const char *s = NULL;
    if (dt != NULL && (str = PyObject_Str(dt)) != NULL)
        s = PyUnicode_AsUTF8(str);
    const int is_bf16 = s != NULL && strcmp(s, "torch.bfloat16") == 0
                        && strcmp(Py_TYPE(dt)->tp_name, "torch.dtype") == 0;
    Py_XDECREF(dt);
    Py_XDECREF(str);
    PyErr_Clear();
    if (!is_bf16)
        return NULL;
    if (dtype_bfloat16_resolve(1) < 0) {
        if (PyErr_ExceptionMatches(PyExc_ImportError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s is a torch.bfloat16 tensor: myatt reads "
                         "bfloat16 as ml_dtypes' NumPy dtype, and ml_dtypes is not installed "
                         "(pip install ml_dtypes, or myatt[bf16])", what);
        }
        return NULL;
    }
    PyObject *torch = PyImport_ImportModule("torch");   /* loaded: obj is its tensor */
    PyObject *int16 = torch == NULL ? NULL : PyObject_GetAttrString(torch, "int16");
    Py_XDECREF(torch);
    PyObject *det = int16 == NULL ? NULL : PyObject_CallMethod(obj, "detach", NULL);
    PyObject *bits = det == NULL ? NULL : PyObject_CallMethod(det, "view", "O", int16);
    Py_XDECREF(int16);
    Py_XDECREF(det);
    PyObject *a = bits == NULL ? NULL : PyArray_FromAny(bits, NULL, 0, 0, 0, NULL);
    Py_XDECREF(bits);
    if (a == NULL)
        return NULL;
    PyObject *view = PyArray_View((PyArrayObject *)a,
                                  PyArray_DescrFromType(MYATT_DTYPE(bf16)->typenum), NULL);
    Py_DECREF(a);
    return view;
}

/* Add the note "<what>: converting <type> to an array" to the current
 * exception (PEP 678; Python 3.11 and later: on 3.10 it stays as it is). */
static void note_conversion(PyObject *obj, const char *what)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL) {
        if (tb != NULL)
            PyException_SetTraceback(value, tb);
        PyObject *r = PyObject_CallMethod(value, "add_note", "N",
                                          PyUnicode_FromFormat("%s: converting %.100s to an "
                                                               "array", what,
                                                               Py_TYPE(obj)->tp_name));
        if (r == NULL)   /* keep the input's exception, not one from adding the note */
            PyErr_Clear();
        Py_XDECREF(r);
    }
    PyErr_Restore(type, value, tb);
#else
    (void)obj, (void)what;
#endif
}

/* NumPy turns a sequence whose __len__ or __getitem__ raises into an object
 * array (it swallows the exception).  Walk such an input as NumPy would read
 * it, so the input's own exception can be raised: -1 with it set, 0 when the
 * walk meets none. */
static int probe_sequence(PyObject *obj, int depth)
{
    if (depth > NPY_MAXDIMS || PyArray_Check(obj) || PyUnicode_Check(obj) || PyBytes_Check(obj)
            || !PySequence_Check(obj))
        return 0;
    Py_ssize_t n = PySequence_Size(obj);
    if (n < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(obj, i);
        if (item == NULL)
            return -1;
        int rc = probe_sequence(item, depth + 1);
        Py_DECREF(item);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* After numpy.asarray(obj) failed with the exception set: when obj's own
 * __array__ runs without raising but gives no ndarray (numpy's ValueError
 * "object __array__ method not producing an array"), that is a wrong argument
 * type: TypeError naming `what`, and 1.  Else 0, the exception untouched (the
 * input's own, or numpy's). */
static int bad_array_method(PyObject *obj, const char *what)
{
    if (PyList_Check(obj) || PyTuple_Check(obj))
        return 0;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *method = PyObject_GetAttrString(obj, "__array__");
    PyObject *got = method != NULL ? PyObject_CallNoArgs(method) : NULL;
    Py_XDECREF(method);
    if (got == NULL || PyArray_Check(got)) {
        Py_XDECREF(got);
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return 0;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    PyErr_Format(PyExc_TypeError, "%s must be an array-like of real numbers; numpy.asarray "
                 "failed on %.100s: %S", what, Py_TYPE(obj)->tp_name, value ? value : Py_None);
    Py_DECREF(got);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return 1;
}

PyArrayObject *as_real_array(PyObject *obj, const char *what)
{
    PyObject *arr;
    if (PyArray_Check(obj)) {
        arr = Py_NewRef(obj);
    }
    else {
        arr = PyArray_FromAny(obj, NULL, 0, 0, 0, NULL);
        if (arr == NULL) {
            if (PyErr_ExceptionMatches(PyExc_MemoryError))
                return NULL;
            /* A torch tensor that requires grad refuses __array__: retry with
             * obj.detach().  Any other failure is the input's own (its
             * __array__, __len__ or __getitem__ raised; a ragged list is
             * numpy's ValueError): it reaches the caller as it is, with a note
             * naming the argument. */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);   /* HasAttr would clear it */
            if (PyObject_HasAttrString(obj, "detach")) {
                arr = torch_bfloat16_array(obj, what);
                if (arr == NULL && PyErr_Occurred()) {   /* its own error: not the first */
                    Py_XDECREF(type);
                    Py_XDECREF(value);
                    Py_XDECREF(tb);
                    return NULL;
                }
                if (arr == NULL)
                    arr = asarray_detached(obj);
            }
            if (arr == NULL) {
                PyErr_Clear();
                PyErr_Restore(type, value, tb);
            } else {
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
            }
            if (arr == NULL && bad_array_method(obj, what) == 0)
                note_conversion(obj, what);
            if (arr == NULL)
                return NULL;
        }
    }
    PyArray_Descr *d = PyArray_DESCR((PyArrayObject *)arr);
    if (d->type_num == NPY_OBJECT && !PyArray_Check(obj) && probe_sequence(obj, 0) < 0) {
        note_conversion(obj, what);
        Py_DECREF(arr);
        return NULL;
    }
    if (!is_real_dtype(d)) {
        PyErr_Format(PyExc_TypeError,
                     "%s has dtype %S; myatt takes real numbers (bool, integer, %s)", what,
                     (PyObject *)d, dtype_names(1));
        Py_DECREF(arr);
        return NULL;
    }
    return (PyArrayObject *)arr;
}

PyArrayObject *cast_array(PyArrayObject *a, int typenum, int contiguous, const char *what)
{
    /* Already as asked (the common case): `a` itself, as PyArray_FromArray
     * would return it, without building and checking a descriptor. */
    if (PyArray_TYPE(a) == typenum && PyArray_ISALIGNED(a) && PyArray_ISNOTSWAPPED(a)
            && (!contiguous || PyArray_IS_C_CONTIGUOUS(a)))
        return (PyArrayObject *)Py_NewRef(a);
    /* A C-contiguous half-precision array to float32 (how each half call reads
     * its operands): the kernels' exact, vectorised conversion, not NumPy's
     * cast (float16's was 4x slower than bfloat16's through ml_dtypes). */
    const myatt_dtype *from = dtype_of_typenum(PyArray_TYPE(a));
    if (typenum == NPY_FLOAT && from != NULL && dtype_is_half(from)
            && PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISALIGNED(a) && PyArray_ISNOTSWAPPED(a)) {
        PyArrayObject *f = (PyArrayObject *)new_array(PyArray_NDIM(a), PyArray_DIMS(a),
                                                      NPY_FLOAT, what);
        if (f != NULL) {
            const npy_intp n = PyArray_SIZE(a);
            float *dst = PyArray_DATA(f);
            const uint16_t *src = PyArray_DATA(a);
            MYATT_BEGIN_COMPUTE(n)
            mk_half_to_f32(dst, src, n, dtype_half_kind(from));
            MYATT_END_COMPUTE
        }
        return f;
    }
    int flags = NPY_ARRAY_ALIGNED | NPY_ARRAY_NOTSWAPPED | NPY_ARRAY_FORCECAST;
    if (contiguous)
        flags |= NPY_ARRAY_C_CONTIGUOUS;
    /* PyArray_FromArray steals the descriptor and returns `a` itself (a new
     * reference) when nothing needs to change. */
    PyArrayObject *c = (PyArrayObject *)PyArray_FromArray(a, PyArray_DescrFromType(typenum),
                                                          flags);
    if (c == NULL)
        name_allocation_error(what);
    return c;
}

/* ---- result memory ----------------------------------------------------------
 * The data of the arrays the glue makes, of MK_CACHE_MIN bytes and more, comes
 * from the kernels' array cache (kernels/runtime/alloc.h) through a NumPy memory
 * handler set around their allocation only: the arrays own their data as any
 * other (freed through the handler they were made with, whoever frees them),
 * and a freed result's pages serve the next call's instead of going back to
 * the OS and being faulted in again. */
static void *data_malloc(void *ctx, size_t size)
{
    (void)ctx;
    return mk_data_alloc(size);
}

static void *data_calloc(void *ctx, size_t nelem, size_t elsize)
{
    (void)ctx;
    const size_t bytes = mk_bytes(nelem, elsize);
    void *p = mk_data_alloc(bytes);
    if (p != NULL)
        memset(p, 0, bytes);
    return p;
}

static void *data_realloc(void *ctx, void *p, size_t size)
{
    (void)ctx;
    void *q = mk_data_alloc(size);
    if (q != NULL && p != NULL) {
        const size_t old = mk_block_size(p);
        memcpy(q, p, old < size ? old : size);
        mk_data_free(p);
    }
    return q;
}

static void data_free(void *ctx, void *p, size_t size)
{
    (void)ctx, (void)size;
    mk_data_free(p);
}

static PyDataMem_Handler data_handler = {
    "myatt", 1, {NULL, data_malloc, data_calloc, data_realloc, data_free},
};

/* The handler for an array of `bytes` bytes: the previous one (to give back to
 * data_handler_end), or NULL (small arrays, or no handler could be set: NumPy's
 * own then). */
static PyObject *data_handler_begin(size_t bytes)
{
    static PyObject *capsule;   /* one per process, never freed */
    if (bytes < MK_CACHE_MIN)
        return NULL;
    if (capsule == NULL && (capsule = PyCapsule_New(&data_handler, "mem_handler", NULL)) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *old = PyDataMem_SetHandler(capsule);
    if (old == NULL)
        PyErr_Clear();
    return old;
}

static void data_handler_end(PyObject *old)
{
    if (old == NULL)
        return;
    PyObject *type, *value, *tb;   /* the allocation's MemoryError, if any */
    PyErr_Fetch(&type, &value, &tb);
    PyObject *ours = PyDataMem_SetHandler(old);
    Py_XDECREF(ours);
    Py_DECREF(old);
    if (ours == NULL)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

PyArrayObject *copy_array(PyArrayObject *a)
{
    const int fortran = !PyArray_IS_C_CONTIGUOUS(a) && PyArray_IS_F_CONTIGUOUS(a);
    if (!(PyArray_IS_C_CONTIGUOUS(a) || fortran) || !PyArray_ISALIGNED(a)
            || !PyArray_ISNOTSWAPPED(a))
        return (PyArrayObject *)PyArray_NewCopy(a, NPY_KEEPORDER);
    PyArray_Descr *descr = PyArray_DESCR(a);
    Py_INCREF(descr);   /* stolen */
    PyObject *old = data_handler_begin((size_t)PyArray_NBYTES(a));
    PyArrayObject *c = (PyArrayObject *)PyArray_NewFromDescr(
        &PyArray_Type, descr, PyArray_NDIM(a), PyArray_DIMS(a), NULL, NULL, fortran, NULL);
    data_handler_end(old);
    if (c != NULL)
        memcpy(PyArray_DATA(c), PyArray_DATA(a), (size_t)PyArray_NBYTES(a));
    return c;
}

PyArrayObject *new_transposed_array(npy_intp rows, npy_intp cols, int typenum,
                                    const char *what)
{
    const npy_intp dims[2] = {cols, rows};
    PyArrayObject *a = (PyArrayObject *)new_array(2, dims, typenum, what);
    if (a == NULL)
        return NULL;
    memset(PyArray_DATA(a), 0, (size_t)PyArray_NBYTES(a));
    PyArrayObject *t = (PyArrayObject *)PyArray_Transpose(a, NULL);   /* a is its base */
    Py_DECREF(a);
    return t;
}

void store_rows(PyArrayObject *w, const void *src)
{
    const npy_intp rows = PyArray_DIM(w, 0), cols = PyArray_DIM(w, 1);
    const npy_intp rs = PyArray_STRIDE(w, 0), cs = PyArray_STRIDE(w, 1);
    const size_t isz = (size_t)PyArray_ITEMSIZE(w);
    char *dst = PyArray_DATA(w);
    for (npy_intp i = 0; i < rows; i++)
        for (npy_intp j = 0; j < cols; j++)
            memcpy(dst + i * rs + j * cs, (const char *)src + (size_t)(i * cols + j) * isz, isz);
}

/* tracemalloc's domain for private blocks (NumPy's array data is 389047) */
#define PRIVATE_BLOCK_DOMAIN 0x6d796174   /* "myat" */

void *private_block_alloc(size_t bytes, const char *what)
{
    void *p = mk_data_alloc(bytes);
    if (p == NULL) {
        PyErr_Format(PyExc_MemoryError, "%s: cannot allocate %zu bytes", what, bytes);
        return NULL;
    }
    PyTraceMalloc_Track(PRIVATE_BLOCK_DOMAIN, (uintptr_t)p, bytes);
    return p;
}

void private_block_free(void *p)
{
    if (p == NULL)
        return;
    PyTraceMalloc_Untrack(PRIVATE_BLOCK_DOMAIN, (uintptr_t)p);
    mk_data_free(p);
}

PyArrayObject *private_cast(PyArrayObject *a, int typenum, const char *what)
{
    PyArrayObject *c = cast_array(a, typenum, 0, what);
    if (c == a) {
        Py_DECREF(c);
        if ((c = copy_array(a)) == NULL)
            name_allocation_error(what);
    }
    return c;
}

PyArrayObject *squeeze_broadcast(PyArrayObject *a, int upto)
{
    const int nd = PyArray_NDIM(a);
    npy_intp dims[NPY_MAXDIMS];
    int squeezed = 0;
    for (int i = 0; i < nd; i++) {
        dims[i] = i < upto && PyArray_STRIDES(a)[i] == 0 && PyArray_DIM(a, i) > 1
                      ? 1 : PyArray_DIM(a, i);
        squeezed |= dims[i] != PyArray_DIM(a, i);
    }
    if (!squeezed) {
        Py_INCREF(a);
        return a;
    }
    PyArray_Descr *descr = PyArray_DESCR(a);
    Py_INCREF(descr);   /* stolen */
    PyArrayObject *view = (PyArrayObject *)PyArray_NewFromDescr(
        &PyArray_Type, descr, nd, dims, PyArray_STRIDES(a), PyArray_DATA(a), 0, NULL);
    if (view == NULL)
        return NULL;
    Py_INCREF(a);
    if (PyArray_SetBaseObject(view, (PyObject *)a) < 0)   /* steals a, also on failure */
        Py_CLEAR(view);
    return view;
}

const myatt_dtype *result_dtype(PyArrayObject *const *ops, int n)
{
    const myatt_dtype *best = NULL;
    for (int i = 0; i < n; i++)
        if (ops[i] != NULL)
            best = dtype_promote(best, dtype_of_typenum(PyArray_TYPE(ops[i])));
    return best != NULL ? best : MYATT_DTYPE_DEFAULT;
}

int result_typenum(PyArrayObject *a, PyArrayObject *b, PyArrayObject *c)
{
    PyArrayObject *ops[3] = {a, b, c};
    return result_dtype(ops, 3)->typenum;
}

/* torch.float32 / torch.float64 (a torch.dtype, recognised without importing
 * torch: its type's module is "torch" and its str "torch.<name>"): the row of
 * that name, or NULL (no exception) for anything else. */
static const myatt_dtype *torch_dtype(PyObject *obj)
{
    PyObject *module = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__module__");
    if (module == NULL) {
        PyErr_Clear();
        return NULL;
    }
    int is_torch = PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "torch") == 0;
    Py_DECREF(module);
    if (!is_torch)
        return NULL;
    PyObject *str = PyObject_Str(obj);
    if (str == NULL) {
        PyErr_Clear();
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8(str);
    const myatt_dtype *d = NULL;
    if (s == NULL)
        PyErr_Clear();
    else if (strncmp(s, "torch.", 6) == 0)
        d = dtype_of_name(s + 6);
    Py_DECREF(str);
    return d;
}

int dtype_arg(PyObject *obj, const char *owner, int with_half, const myatt_dtype **dtype)
{
    const myatt_dtype *d = torch_dtype(obj);
    PyArray_Descr *descr = NULL;
    if (d == NULL && PyUnicode_Check(obj)) {   /* "bfloat16" before ml_dtypes registers it */
        const char *s = PyUnicode_AsUTF8(obj);
        d = s != NULL ? dtype_of_name(s) : NULL;
    }
    if (d == NULL && obj != Py_None) {
        if (dtype_bfloat16_resolve(0) < 0)
            PyErr_Clear();
        if (PyArray_DescrConverter2(obj, &descr) && descr != NULL)
            d = dtype_of_typenum(descr->type_num);
    }
    if (PyErr_Occurred())
        PyErr_Clear();
    if (d == NULL) {
        if (descr != NULL)   /* a dtype numpy knows, not one myatt computes in */
            PyErr_Format(PyExc_TypeError, "%s(): dtype must be %s, got %S", owner,
                         dtype_names(with_half), (PyObject *)descr);
        else
            PyErr_Format(PyExc_TypeError, "%s(): dtype must be %s, got %R", owner,
                         dtype_names(with_half), obj);
        Py_XDECREF(descr);
        return -1;
    }
    Py_XDECREF(descr);
    if (dtype_is_half(d) && !with_half) {
        PyErr_Format(PyExc_TypeError, "%s(): dtype %s: %s keeps its parameters in float32 or "
                     "float64 for now (half-precision parameters are to come); Linear, MyAtt and "
                     "myatt's functions take float16 and bfloat16", owner, d->name, owner);
        return -1;
    }
    if (d->typenum == NPY_NOTYPE && dtype_bfloat16_resolve(1) < 0) {   /* its arrays' type */
        if (PyErr_ExceptionMatches(PyExc_ImportError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s(): dtype bfloat16: myatt keeps bfloat16 as "
                         "ml_dtypes' NumPy dtype, and ml_dtypes is not installed (pip install "
                         "ml_dtypes, or myatt[bf16])", owner);
        }
        return -1;
    }
    *dtype = d;
    return 0;
}

/* A float32 array's values rounded to the half row dt: a new array, or NULL. */
static PyObject *half_array(PyArrayObject *a, const myatt_dtype *dt, const char *what)
{
    PyArrayObject *c = cast_array(a, NPY_FLOAT, 1, what);
    PyObject *h = c == NULL ? NULL : new_array(PyArray_NDIM(c), PyArray_DIMS(c), dt->typenum,
                                               what);
    if (h != NULL) {
        const npy_intp n = PyArray_SIZE(c);
        uint16_t *dst = PyArray_DATA((PyArrayObject *)h);
        const float *src = PyArray_DATA(c);
        MYATT_BEGIN_COMPUTE(n)
        mk_f32_to_half(dst, src, n, dtype_half_kind(dt));
        MYATT_END_COMPUTE
    }
    Py_XDECREF(c);
    return h;
}

PyObject *round_results(PyObject *r, const myatt_dtype *dt, const char *what)
{
    if (r == NULL || !dtype_is_half(dt))
        return r;
    if (PyArray_Check(r)) {
        PyObject *h = PyArray_TYPE((PyArrayObject *)r) == NPY_FLOAT
                          ? half_array((PyArrayObject *)r, dt, what) : Py_NewRef(r);
        Py_DECREF(r);
        return h;
    }
    if (!PyTuple_Check(r))
        return r;
    const Py_ssize_t n = PyTuple_GET_SIZE(r);
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
        PyObject *item = round_results(Py_NewRef(PyTuple_GET_ITEM(r, i)), dt, what);
        if (item == NULL)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, item);
    }
    Py_DECREF(r);
    return t;
}

int size_arg(PyObject *obj, const char *what, Py_ssize_t min, Py_ssize_t *size)
{
    /* Python and NumPy integers (operator.index), but not bool or float. */
    if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer, got %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL)
        return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || (overflow == 0 && v < min)) {
        PyErr_Format(PyExc_ValueError, "%s must be >= %zd, got %R", what, min, obj);
        return -1;
    }
    if (overflow > 0 || v > PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_MemoryError, "%s = %R is too large to allocate", what, obj);
        return -1;
    }
    *size = (Py_ssize_t)v;
    return 0;
}

/* The current exception as a MemoryError "<what>: <its message>". */
static void memory_error_naming(const char *what)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyErr_Format(PyExc_MemoryError, "%s: %S", what, value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

PyObject *new_array(int ndim, const npy_intp *dims, int typenum, const char *what)
{
    char shape[SHAPE_STR_LEN];
    const myatt_dtype *dt = dtype_of_typenum(typenum);
    npy_intp itemsize = dt != NULL ? dt->itemsize : 8;
    npy_intp count = 1, bytes;
    int overflow = 0;
    for (int i = 0; i < ndim; i++)   /* no division: this runs for every result */
        overflow |= __builtin_mul_overflow(count, dims[i], &count);
    if (overflow || __builtin_mul_overflow(count, itemsize, &bytes)) {
        PyErr_Format(PyExc_MemoryError, "%s of shape %s is too large to allocate",
                     what, shape_str(shape, sizeof shape, ndim, dims));
        return NULL;
    }
    PyObject *old = data_handler_begin((size_t)bytes);
    PyObject *a = PyArray_SimpleNew(ndim, (npy_intp *)dims, typenum);
    data_handler_end(old);
    /* NumPy says ValueError ("array is too big") for some shapes it will not
     * allocate (also of 0 bytes: a dimension past its limit), MemoryError for
     * others: both are MemoryError here, naming `what` (and NumPy's reason). */
    if (a == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {   /* with NumPy's reason */
        char msg[512];
        snprintf(msg, sizeof msg, "%s of shape %s cannot be allocated", what,
                 shape_str(shape, sizeof shape, ndim, dims));
        memory_error_naming(msg);
    } else if (a == NULL && PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_MemoryError, "%s of shape %s (%zd bytes) cannot be allocated",
                     what, shape_str(shape, sizeof shape, ndim, dims), (Py_ssize_t)bytes);
    }
    return a;
}

void name_memory_error(const char *what)
{
    if (PyErr_ExceptionMatches(PyExc_MemoryError))
        memory_error_naming(what);
}

void name_allocation_error(const char *what)
{
    /* NumPy's ValueError for a copy it will not make: "array is too big" */
    if (PyErr_ExceptionMatches(PyExc_MemoryError) || PyErr_ExceptionMatches(PyExc_ValueError))
        memory_error_naming(what);
}

int bool_arg(PyObject *obj, const char *what, int *out)
{
    if (!PyBool_Check(obj) && !PyArray_IsScalar(obj, Bool)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bool, got %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = PyObject_IsTrue(obj);
    return 0;
}

int float_arg(PyObject *obj, const char *what, const char *more, double *out)
{
    if (!PyBool_Check(obj) && !PyArray_IsScalar(obj, Bool)) {
        *out = PyFloat_AsDouble(obj);
        if (!(*out == -1.0 && PyErr_Occurred()))
            return 0;
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {   /* an int past DBL_MAX */
            PyErr_Clear();
            PyErr_Format(PyExc_OverflowError, "%s is too large for a float", what);
            return -1;
        }
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;   /* raised by the object's own __float__: its class */
        PyErr_Clear();
    }
    PyErr_Format(PyExc_TypeError, "%s must be a float%s, got %.100s", what, more,
                 Py_TYPE(obj)->tp_name);
    return -1;
}

int probability_arg(PyObject *obj, const char *what, double *out)
{
    if (float_arg(obj, what, "", out) < 0)
        return -1;
    if (!(*out >= 0.0 && *out <= 1.0)) {
        PyErr_Format(PyExc_ValueError, "%s must be in [0, 1], got %R", what, obj);
        return -1;
    }
    return 0;
}

const char *type_short_name(PyTypeObject *type)
{
    const char *dot = strrchr(type->tp_name, '.');
    return dot ? dot + 1 : type->tp_name;
}

const char *shape_str(char *buf, size_t len, int ndim, const npy_intp *dims)
{
    size_t pos = 0;
    buf[0] = '\0';
    pos += (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < ndim && pos < len; i++)
        pos += (size_t)snprintf(buf + pos, len - pos, i ? ", %ld" : "%ld", (long)dims[i]);
    if (pos < len)
        snprintf(buf + pos, len - pos, ndim == 1 ? ",)" : ")");
    return buf;
}

int subclass_forward(PyObject *self, PyCFunction own, PyObject *const *args, size_t nargsf,
                     PyObject *kwnames, PyObject **result)
{
    if (Py_TYPE(self)->tp_base == &PyBaseObject_Type)
        return 0;
    PyObject *fwd = PyObject_GetAttrString(self, "forward");
    if (fwd != NULL && PyCFunction_Check(fwd) && PyCFunction_GET_SELF(fwd) == self
            && PyCFunction_GET_FUNCTION(fwd) == own) {
        Py_DECREF(fwd);
        return 0;
    }
    *result = fwd == NULL ? NULL : PyObject_Vectorcall(fwd, args, nargsf, kwnames);
    Py_XDECREF(fwd);
    return 1;
}

PyObject *tuple_and_kwargs(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                           PyObject **kwargs)
{
    PyObject *tuple = PyTuple_New(nargs);
    *kwargs = NULL;
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    const Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nkw > 0 && (*kwargs = PyDict_New()) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (PyDict_SetItem(*kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
            goto fail;
    return tuple;
fail:
    Py_DECREF(tuple);
    Py_CLEAR(*kwargs);
    return NULL;
}

PyObject *call_with_tuple(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, ternaryfunc call)
{
    PyObject *kwargs, *tuple = tuple_and_kwargs(args, nargs, kwnames, &kwargs), *result;
    if (tuple == NULL)
        return NULL;
    result = call(self, tuple, kwargs);
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return result;
}
