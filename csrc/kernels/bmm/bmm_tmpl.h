/* bmm, written once for both dtypes: included by bmm.c with T (float or double)
 * and SUF(name) (name##_f32 or name##_f64) defined, undefined again at the
 * end.  No include guard on purpose.  Defines the static bodies
 * bmm_forward_body and bmm_backward_body; bmm.c writes out the public symbols.
 * Contract: bmm.h. */
#ifndef T
#error "bmm_tmpl.h: define T (the element type) before including it"
#endif
#ifndef SUF
#error "bmm_tmpl.h: define SUF(name) (name##_f32, name##_f64) before including it"
#endif

/* One batch task: items [task * per_task, ...) of a forward or backward. */
typedef struct {
    int backward;
    mk_batch out_or_grad_inp;      /* forward: out;  backward: grad_inp */
    mk_batch grad_mat2;            /* backward only */
    mk_cbatch go;                  /* backward only: grad_out */
    mk_cbatch inp, mat2;
    int64_t per_task;
    atomic_int failed;
} SUF(bmm_job);

/* Item i of the job: one gemm (forward) or two (backward), transposes
 * through swapped strides (mk_t):
 *   out_i       [n, p] = inp_i [n, m] @ mat2_i [m, p]
 *   grad_inp_i  [n, m] = grad_out_i [n, p] @ mat2_i^T [p, m]
 *   grad_mat2_i [m, p] = inp_i^T [m, n] @ grad_out_i [n, p] */
static int SUF(bmm_item)(const SUF(bmm_job) *j, int64_t i)
{
    const mk_cmat inp_i = mk_citem(j->inp, i, sizeof(T));
    const mk_cmat mat2_i = mk_citem(j->mat2, i, sizeof(T));
    if (!j->backward)
        return SUF(gemm)(mk_item(j->out_or_grad_inp, i, sizeof(T)), inp_i, mat2_i, NULL, 0);
    const mk_cmat go_i = mk_citem(j->go, i, sizeof(T));
    if (SUF(gemm)(mk_item(j->out_or_grad_inp, i, sizeof(T)), go_i, mk_t(mat2_i), NULL, 0) != 0)
        return -1;
    return SUF(gemm)(mk_item(j->grad_mat2, i, sizeof(T)), mk_t(inp_i), go_i, NULL, 0);
}

static void SUF(bmm_task)(void *arg, int task)
{
    SUF(bmm_job) *j = arg;
    const int64_t b = j->inp.batch;
    const int64_t start = task * j->per_task;
    const int64_t end = start + j->per_task < b ? start + j->per_task : b;
    for (int64_t i = start; i < end; i++)
        if (SUF(bmm_item)(j, i) != 0) {
            atomic_store(&j->failed, 1);
            return;
        }
}

/* All items: on this thread, or split over threads when each item's product is
 * too small for the gemm to use threads itself (bmm_batch_threads). */
static int SUF(bmm_run)(SUF(bmm_job) *j, double item_work)
{
    const int64_t b = j->inp.batch;
    const int nthreads = bmm_batch_threads(b, item_work);
    if (nthreads <= 1) {
        for (int64_t i = 0; i < b; i++)
            if (SUF(bmm_item)(j, i) != 0)
                return -1;
        return 0;
    }
    j->per_task = (b + nthreads - 1) / nthreads;
    atomic_init(&j->failed, 0);
    mk_parallel_run(nthreads, SUF(bmm_task), j);
    return atomic_load(&j->failed) ? -1 : 0;
}

static int SUF(bmm_forward_body)(mk_batch out, mk_cbatch inp, mk_cbatch mat2)
{
    const int64_t n = inp.rows, m = inp.cols, p = mat2.cols;
    if (n <= 0 || p <= 0)   /* nothing to write; b may be huge (zero batch stride) */
        return 0;
    SUF(bmm_job) j = {.backward = 0, .out_or_grad_inp = out, .inp = inp, .mat2 = mat2};
    return SUF(bmm_run)(&j, (double)n * (double)m * (double)p);
}

static int SUF(bmm_backward_body)(mk_batch grad_inp, mk_batch grad_mat2,
                                  mk_cbatch grad_out, mk_cbatch inp, mk_cbatch mat2)
{
    const int64_t n = inp.rows, m = inp.cols, p = mat2.cols;
    if (m == 0 || (n == 0 && p == 0))   /* grad_inp [b, n, m] and grad_mat2 [b, m, p]
                                           both empty: nothing to write (and b may be 2**40
                                           items of a broadcast input, each a no-op) */
        return 0;
    SUF(bmm_job) j = {
        .backward = 1, .out_or_grad_inp = grad_inp, .grad_mat2 = grad_mat2,
        .go = grad_out, .inp = inp, .mat2 = mat2,
    };
    return SUF(bmm_run)(&j, 2.0 * (double)n * (double)m * (double)p);
}

#undef T
#undef SUF
