/* state_dict() and load_state_dict() of Linear and MyAtt (state_dict.c). */
#ifndef MYATT_STATE_DICT_H
#define MYATT_STATE_DICT_H

#include "glue.h"

/* {keys[i]: copy of params[i]} for the non-NULL params, in order. */
PyObject *state_dict_build(const char *const *keys, PyArrayObject *const *params, int n);

/* The most parameters a type has (MultiheadAttention: 9 keys, some NULL). */
#define STATE_DICT_MAX_PARAMS 16

/* Copy d[keys[i]] into params[i] for every key present, after converting and
 * checking every one of them: on any error nothing is written.  strict: missing
 * or unexpected keys raise KeyError.  Returns (missing_keys, unexpected_keys).
 * n <= STATE_DICT_MAX_PARAMS. */
PyObject *state_dict_load(PyObject *d, int strict, const char *const *keys,
                          PyArrayObject *const *params, int n, const char *owner);

#endif
