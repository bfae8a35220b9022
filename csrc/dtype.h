/* The dtypes myatt computes in: one row each, the only place a NumPy type
 * number meets a kernel.
 *
 * Each row gives the NumPy type number, the name used in messages and reprs
 * ("float32"), the item size, the kernel index (the row's position) and the
 * table of the dtype's kernels, all with type-erased signatures (view.h), so
 * that the glue calls dt->k->linear_forward(...) with no per-dtype fork.
 * Adding a dtype: its kernels' _f16 / _bf16 symbols and one row in dtype.c. */
#ifndef MYATT_DTYPE_H
#define MYATT_DTYPE_H

#include <stdint.h>

#include "kernels/mha/mha.h"
#include "kernels/runtime/rng.h"
#include "kernels/sdpa/sdpa.h"
#include "kernels/tutorial/tutorial.h"
#include "kernels/view.h"

typedef struct {
    int (*linear_forward)(mk_mat out, mk_cmat inp, mk_cmat weight, const void *bias);
    int (*linear_backward)(mk_mat grad_inp, mk_mat grad_weight, void *grad_bias,
                           mk_cmat grad_out, mk_cmat inp, mk_cmat weight);
    int (*bmm_forward)(mk_batch out, mk_cbatch inp, mk_cbatch mat2);
    int (*bmm_backward)(mk_batch grad_inp, mk_batch grad_mat2,
                        mk_cbatch grad_out, mk_cbatch inp, mk_cbatch mat2);
    void (*softmax_forward)(void *out, const void *inp, int64_t outer, int64_t n,
                            int64_t inner);
    void (*softmax_backward)(void *grad_inp, const void *grad_out, const void *out,
                             int64_t outer, int64_t n, int64_t inner);
    int (*myatt_forward)(void *out, void *attn_weights, const tutorial_inputs *in);
    int (*myatt_backward)(const tutorial_grads *grads, mk_cmat grad_out, const mk_cmat *grad_aw,
                          const tutorial_inputs *in);
    /* myatt.vjp: the forward keeping applied, the backward reading the kept panels */
    int (*myatt_forward_kept)(void *out, void *attn_weights, void *applied,
                              const tutorial_inputs *in);
    int (*myatt_backward_kept)(const tutorial_grads *grads, mk_cmat grad_out,
                               const mk_cmat *grad_aw, const tutorial_inputs *in,
                               const void *attn_weights, const void *applied);
    /* scaled_dot_product_attention (sdpa.h): the forward (out, lse), the backward */
    int (*sdpa_forward)(void *out, void *lse, const sdpa_problem *p);
    int (*sdpa_backward)(const sdpa_grads *g, const sdpa_problem *p);
    /* MultiheadAttention's forward (keeping what the backward reads, or not) and
     * backward (mha.h) */
    int (*mha_forward)(void *out, void *weights, const mha_problem *p, mha_saved *keep);
    int (*mha_backward)(const mha_grads *g, const mha_problem *p, const mha_saved *s);
    /* torch's initial weights (rng.h): nn.Linear's, xavier_uniform_, xavier_normal_ */
    void (*linear_init)(mt19937 *g, void *weight, void *bias, int64_t out, int64_t in);
    void (*xavier_uniform)(mt19937 *g, void *w, int64_t rows, int64_t cols);
    void (*xavier_normal)(mt19937 *g, void *t, int64_t rows, int64_t cols, int64_t rest);
} myatt_kernels;

typedef struct {
    int typenum;                 /* NumPy type number: NPY_FLOAT */
    const char *name;            /* "float32" */
    int itemsize;                /* bytes: 4 */
    int index;                   /* kernel index: the row's position in myatt_dtypes */
    const myatt_kernels *k;
} myatt_dtype;

/* The rows, in promotion order (a result takes the last row among its
 * operands' dtypes); row 0 is the default dtype of the constructors. */
#define MYATT_NDTYPES 2
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
