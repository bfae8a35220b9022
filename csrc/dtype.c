/* The dtype table (dtype.h). */
#include "glue.h"

#include <string.h>

#define MYATT_ROW_(arg, suffix, typenum, name, size, rank, compute) \
    {typenum, name, size, MYATT_DTYPE_##suffix, rank, MYATT_DTYPE_##compute},

myatt_dtype myatt_dtypes[MYATT_NDTYPES] = {MYATT_DTYPES(MYATT_ROW_, ~)
                                           MYATT_HALF_DTYPES(MYATT_ROW_, ~)};

const myatt_dtype *dtype_promote(const myatt_dtype *a, const myatt_dtype *b)
{
    if (a == NULL || b == NULL || a == b)
        return a != NULL ? a : b;
    if (a->rank != b->rank)
        return a->rank > b->rank ? a : b;
    for (int i = 0; i < MYATT_NDTYPES; i++)   /* two of one rank: the lowest rank above */
        if (myatt_dtypes[i].rank == a->rank + 1)
            return &myatt_dtypes[i];
    return a;
}

int dtype_bfloat16_resolve(int import)
{
    myatt_dtype *row = &myatt_dtypes[MYATT_DTYPE_bf16];
    if (row->typenum != NPY_NOTYPE)
        return 0;
    PyObject *mod;
    if (import)
        mod = PyImport_ImportModule("ml_dtypes");
    else {
        PyObject *name = PyUnicode_FromString("ml_dtypes");
        mod = name == NULL ? NULL : PyImport_GetModule(name);   /* NULL, no error: not loaded */
        Py_XDECREF(name);
        if (mod == NULL)
            return PyErr_Occurred() ? -1 : 1;
    }
    PyObject *type = mod == NULL ? NULL : PyObject_GetAttrString(mod, "bfloat16");
    Py_XDECREF(mod);
    PyArray_Descr *d = type == NULL ? NULL : PyArray_DescrFromTypeObject(type);
    Py_XDECREF(type);
    if (d == NULL)
        return -1;
    row->typenum = d->type_num;
    Py_DECREF(d);
    return 0;
}

const myatt_dtype *dtype_of_name(const char *name)
{
    for (int i = 0; i < MYATT_NDTYPES; i++)
        if (strcmp(myatt_dtypes[i].name, name) == 0)
            return &myatt_dtypes[i];
    return NULL;
}

const char *dtype_names(int with_half)
{
    /* "a, b or c", built once from the rows */
    static char names[2][16 * MYATT_NDTYPES];
    char *out = names[with_half != 0];
    const int n = with_half ? MYATT_NDTYPES : MYATT_NKERNELS;
    if (out[0] == '\0') {
        for (int i = 0; i < n; i++) {
            if (i > 0)
                strcat(out, i == n - 1 ? " or " : ", ");
            strcat(out, myatt_dtypes[i].name);
        }
    }
    return out;
}
