/* The dtype table (dtype.h): float32 and float64. */
#include "glue.h"

#include <string.h>

#include "dtype.h"
#include "kernels/bmm/bmm.h"
#include "kernels/linear/linear.h"
#include "kernels/softmax/softmax.h"

/* The kernels whose public signatures are typed (softmax.h, rng.h), seen
 * through the table's type-erased ones. */
static void softmax_fwd_f32(void *out, const void *inp, int64_t outer, int64_t n, int64_t inner)
{
    softmax_forward_f32(out, inp, outer, n, inner);
}

static void softmax_fwd_f64(void *out, const void *inp, int64_t outer, int64_t n, int64_t inner)
{
    softmax_forward_f64(out, inp, outer, n, inner);
}

static void softmax_bwd_f32(void *grad_inp, const void *grad_out, const void *out,
                            int64_t outer, int64_t n, int64_t inner)
{
    softmax_backward_f32(grad_inp, grad_out, out, outer, n, inner);
}

static void softmax_bwd_f64(void *grad_inp, const void *grad_out, const void *out,
                            int64_t outer, int64_t n, int64_t inner)
{
    softmax_backward_f64(grad_inp, grad_out, out, outer, n, inner);
}

static void xavier_uniform_any_f32(mt19937 *g, void *w, int64_t rows, int64_t cols)
{
    xavier_uniform_f32(g, w, rows, cols);
}

static void xavier_normal_any_f32(mt19937 *g, void *t, int64_t rows, int64_t cols,
                                   int64_t rest)
{
    xavier_normal_f32(g, t, rows, cols, rest);
}

static void linear_init_any_f32(mt19937 *g, void *weight, void *bias, int64_t out, int64_t in)
{
    linear_init_f32(g, weight, bias, out, in);
}

static void xavier_uniform_any_f64(mt19937 *g, void *w, int64_t rows, int64_t cols)
{
    xavier_uniform_f64(g, w, rows, cols);
}

static void xavier_normal_any_f64(mt19937 *g, void *t, int64_t rows, int64_t cols,
                                   int64_t rest)
{
    xavier_normal_f64(g, t, rows, cols, rest);
}

static void linear_init_any_f64(mt19937 *g, void *weight, void *bias, int64_t out, int64_t in)
{
    linear_init_f64(g, weight, bias, out, in);
}

static const myatt_kernels kernels_f32 = {
    .linear_forward = linear_forward_f32,
    .linear_backward = linear_backward_f32,
    .bmm_forward = bmm_forward_f32,
    .bmm_backward = bmm_backward_f32,
    .softmax_forward = softmax_fwd_f32,
    .softmax_backward = softmax_bwd_f32,
    .myatt_forward = tutorial_forward_f32,
    .myatt_backward = tutorial_backward_f32,
    .myatt_forward_kept = tutorial_forward_kept_f32,
    .myatt_backward_kept = tutorial_backward_kept_f32,
    .sdpa_forward = sdpa_forward_f32,
    .sdpa_backward = sdpa_backward_f32,
    .mha_forward = mha_forward_f32,
    .mha_backward = mha_backward_f32,
    .linear_init = linear_init_any_f32,
    .xavier_uniform = xavier_uniform_any_f32,
    .xavier_normal = xavier_normal_any_f32,
};

static const myatt_kernels kernels_f64 = {
    .linear_forward = linear_forward_f64,
    .linear_backward = linear_backward_f64,
    .bmm_forward = bmm_forward_f64,
    .bmm_backward = bmm_backward_f64,
    .softmax_forward = softmax_fwd_f64,
    .softmax_backward = softmax_bwd_f64,
    .myatt_forward = tutorial_forward_f64,
    .myatt_backward = tutorial_backward_f64,
    .myatt_forward_kept = tutorial_forward_kept_f64,
    .myatt_backward_kept = tutorial_backward_kept_f64,
    .sdpa_forward = sdpa_forward_f64,
    .sdpa_backward = sdpa_backward_f64,
    .mha_forward = mha_forward_f64,
    .mha_backward = mha_backward_f64,
    .linear_init = linear_init_any_f64,
    .xavier_uniform = xavier_uniform_any_f64,
    .xavier_normal = xavier_normal_any_f64,
};

const myatt_dtype myatt_dtypes[MYATT_NDTYPES] = {
    /* typenum     name       itemsize index kernels */
    {NPY_FLOAT,  "float32", 4, 0, &kernels_f32},
    {NPY_DOUBLE, "float64", 8, 1, &kernels_f64},
};

const myatt_dtype *dtype_of_name(const char *name)
{
    for (int i = 0; i < MYATT_NDTYPES; i++)
        if (strcmp(myatt_dtypes[i].name, name) == 0)
            return &myatt_dtypes[i];
    return NULL;
}

const char *dtype_names(void)
{
    /* "a, b or c", built once from the rows */
    static char names[16 * MYATT_NDTYPES];
    if (names[0] == '\0') {
        for (int i = 0; i < MYATT_NDTYPES; i++) {
            if (i > 0)
                strcat(names, i == MYATT_NDTYPES - 1 ? " or " : ", ");
            strcat(names, myatt_dtypes[i].name);
        }
    }
    return names;
}
