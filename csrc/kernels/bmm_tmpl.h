/* bmm, written once for both dtypes: included by bmm.c with T (float or double)
 * and SUF(name) (name##_f32 or name##_f64) defined.  No include guard on
 * purpose.  Contract: bmm.h. */

/* One batch task: items [task * per_task, ...) of a forward or backward. */
typedef struct {
    int backward;
    T *out_or_grad_inp;            /* forward: out;  backward: grad_inp */
    T *grad_mat2;                  /* backward only */
    const T *go;                   /* backward only: grad_out */
    int64_t bs_go, rs_go, cs_go;
    const T *inp;
    int64_t bs_inp, rs_inp, cs_inp;
    const T *mat2;
    int64_t bs_mat2, rs_mat2, cs_mat2;
    int64_t b, n, m, p;
    int64_t per_task;
    atomic_int failed;
} SUF(bmm_job);

/* Item i of the job: one gemm (forward) or two (backward), transposes
 * through swapped strides:
 *   out_i       [n, p] = inp_i [n, m] @ mat2_i [m, p]
 *   grad_inp_i  [n, m] = grad_out_i [n, p] @ mat2_i^T [p, m]  (rs = cs_mat2, cs = rs_mat2)
 *   grad_mat2_i [m, p] = inp_i^T [m, n] (rs = cs_inp, cs = rs_inp) @ grad_out_i [n, p] */
static int SUF(bmm_item)(const SUF(bmm_job) *j, int64_t i)
{
    const int64_t n = j->n, m = j->m, p = j->p;
    const T *inp_i = j->inp + i * j->bs_inp;
    const T *mat2_i = j->mat2 + i * j->bs_mat2;
    if (!j->backward)
        return SUF(gemm)(j->out_or_grad_inp + i * n * p, p, 1, inp_i, j->rs_inp, j->cs_inp,
                         mat2_i, j->rs_mat2, j->cs_mat2, NULL, n, p, m, 0);
    const T *go_i = j->go + i * j->bs_go;
    if (SUF(gemm)(j->out_or_grad_inp + i * n * m, m, 1, go_i, j->rs_go, j->cs_go,
                  mat2_i, j->cs_mat2, j->rs_mat2, NULL, n, m, p, 0) != 0)
        return -1;
    return SUF(gemm)(j->grad_mat2 + i * m * p, p, 1, inp_i, j->cs_inp, j->rs_inp,
                     go_i, j->rs_go, j->cs_go, NULL, m, p, n, 0);
}

static void SUF(bmm_task)(void *arg, int task)
{
    SUF(bmm_job) *j = arg;
    const int64_t start = task * j->per_task;
    const int64_t end = start + j->per_task < j->b ? start + j->per_task : j->b;
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
    const int nthreads = bmm_batch_threads(j->b, item_work);
    if (nthreads <= 1) {
        for (int64_t i = 0; i < j->b; i++)
            if (SUF(bmm_item)(j, i) != 0)
                return -1;
        return 0;
    }
    j->per_task = (j->b + nthreads - 1) / nthreads;
    atomic_init(&j->failed, 0);
    mk_parallel_run(nthreads, SUF(bmm_task), j);
    return atomic_load(&j->failed) ? -1 : 0;
}

int SUF(bmm_forward)(T *out,
                     const T *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                     const T *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                     int64_t b, int64_t n, int64_t m, int64_t p)
{
    if (n <= 0 || p <= 0)   /* nothing to write; b may be huge (zero batch stride) */
        return 0;
    SUF(bmm_job) j = {
        .backward = 0, .out_or_grad_inp = out,
        .inp = inp, .bs_inp = bs_inp, .rs_inp = rs_inp, .cs_inp = cs_inp,
        .mat2 = mat2, .bs_mat2 = bs_mat2, .rs_mat2 = rs_mat2, .cs_mat2 = cs_mat2,
        .b = b, .n = n, .m = m, .p = p,
    };
    return SUF(bmm_run)(&j, (double)n * (double)m * (double)p);
}

int SUF(bmm_backward)(T *grad_inp, T *grad_mat2,
                      const T *grad_out, int64_t bs_go, int64_t rs_go, int64_t cs_go,
                      const T *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                      const T *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                      int64_t b, int64_t n, int64_t m, int64_t p)
{
    SUF(bmm_job) j = {
        .backward = 1, .out_or_grad_inp = grad_inp, .grad_mat2 = grad_mat2,
        .go = grad_out, .bs_go = bs_go, .rs_go = rs_go, .cs_go = cs_go,
        .inp = inp, .bs_inp = bs_inp, .rs_inp = rs_inp, .cs_inp = cs_inp,
        .mat2 = mat2, .bs_mat2 = bs_mat2, .rs_mat2 = rs_mat2, .cs_mat2 = cs_mat2,
        .b = b, .n = n, .m = m, .p = p,
    };
    return SUF(bmm_run)(&j, 2.0 * (double)n * (double)m * (double)p);
}
