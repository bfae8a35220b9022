/* state_dict() and load_state_dict() for Linear and MyAtt: one implementation
 * over a table of (key, parameter array) pairs. */
#include "state_dict.h"

#include <string.h>

PyObject *state_dict_build(const char *const *keys, PyArrayObject *const *params, int n)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        if (params[i] == NULL)
            continue;
        /* C-contiguous, as torch's (MultiheadAttention stores some transposed) */
        PyObject *copy = PyArray_IS_C_CONTIGUOUS(params[i])
                         ? (PyObject *)copy_array(params[i])
                         : PyArray_NewCopy(params[i], NPY_CORDER);
        if (copy == NULL || PyDict_SetItemString(d, keys[i], copy) < 0) {
            Py_XDECREF(copy);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(copy);
    }
    return d;
}

/* Index of `key` among the expected keys (those with a parameter), or -1. */
static int find_key(PyObject *key, const char *const *keys, PyArrayObject *const *params, int n)
{
    if (!PyUnicode_Check(key))
        return -1;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(key, &len);
    if (s == NULL) {
        PyErr_Clear();
        return -1;
    }
    for (int i = 0; i < n; i++)   /* the whole key: "weight\0x" is not "weight" */
        if (params[i] != NULL && strcmp(s, keys[i]) == 0 && (size_t)len == strlen(keys[i]))
            return i;
    return -1;
}

/* The value for params[i], converted to its dtype and checked against its shape. */
static PyArrayObject *convert_value(PyObject *value, const char *key, PyArrayObject *param,
                                    const char *owner)
{
    char what[96];
    snprintf(what, sizeof what, "%s.load_state_dict(): state_dict['%s']", owner, key);
    PyArrayObject *raw = as_real_array(value, what);
    if (raw == NULL)
        return NULL;
    /* The shape first: a wrong one is a ValueError, never a MemoryError from a
     * copy of a huge (say, broadcast) value. */
    if (!PyArray_SAMESHAPE(raw, param)) {
        char want[SHAPE_STR_LEN], got[SHAPE_STR_LEN];
        PyErr_Format(PyExc_ValueError, "%s must have shape %s, got %s", what,
                     SHAPE_OF(want, param), SHAPE_OF(got, raw));
        Py_DECREF(raw);
        return NULL;
    }
    /* A private copy: the write below then needs no memory and cannot meet a
     * source that overlaps a parameter. */
    PyArrayObject *arr = (PyArrayObject *)PyArray_FromArray(
        raw, PyArray_DescrFromType(PyArray_TYPE(param)),
        NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST | NPY_ARRAY_ENSURECOPY);
    Py_DECREF(raw);
    if (arr == NULL)
        name_allocation_error(what);
    return arr;
}

PyObject *state_dict_load(PyObject *d, int strict, const char *const *keys,
                          PyArrayObject *const *params, int n, const char *owner)
{
    PyArrayObject *values[STATE_DICT_MAX_PARAMS] = {NULL};
    PyObject *missing = NULL, *unexpected = NULL, *key_list = NULL, *result = NULL;

    if (!PyDict_Check(d) && !PyObject_HasAttrString(d, "keys")) {
        PyErr_Format(PyExc_TypeError,
                     "%s.load_state_dict(): state_dict must be a mapping of names to arrays, "
                     "got %.100s", owner, Py_TYPE(d)->tp_name);
        return NULL;
    }
    key_list = PyMapping_Keys(d);
    missing = PyList_New(0);
    unexpected = PyList_New(0);
    if (key_list == NULL || missing == NULL || unexpected == NULL)
        goto fail;

    /* 1. Sort the keys into expected and unexpected, converting each value. */
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(key_list); j++) {
        PyObject *key = PyList_GET_ITEM(key_list, j);
        int i = find_key(key, keys, params, n);
        if (i < 0) {
            if (PyList_Append(unexpected, key) < 0)
                goto fail;
            continue;
        }
        if (values[i] != NULL)   /* a mapping that lists a key twice */
            continue;
        PyObject *value = PyObject_GetItem(d, key);
        if (value == NULL)
            goto fail;
        values[i] = convert_value(value, keys[i], params[i], owner);
        Py_DECREF(value);
        if (values[i] == NULL)
            goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (params[i] == NULL || values[i] != NULL)
            continue;
        PyObject *key = PyUnicode_FromString(keys[i]);
        if (key == NULL || PyList_Append(missing, key) < 0) {
            Py_XDECREF(key);
            goto fail;
        }
        Py_DECREF(key);
    }

    /* 2. Refuse before writing anything. */
    if (strict && (PyList_GET_SIZE(missing) > 0 || PyList_GET_SIZE(unexpected) > 0)) {
        PyErr_Format(PyExc_KeyError,
                     "%s.load_state_dict(): missing keys %R, unexpected keys %R",
                     owner, missing, unexpected);
        goto fail;
    }

    /* 3. Write: each value is a private contiguous copy of its parameter's dtype and
     *    shape, so no copy can fail half way through. */
    for (int i = 0; i < n; i++)
        if (values[i] != NULL && PyArray_CopyInto(params[i], values[i]) < 0)
            goto fail;
    result = PyTuple_Pack(2, missing, unexpected);

fail:
    for (int i = 0; i < n; i++)
        Py_XDECREF(values[i]);
    Py_XDECREF(key_list);
    Py_XDECREF(missing);
    Py_XDECREF(unexpected);
    return result;
}
