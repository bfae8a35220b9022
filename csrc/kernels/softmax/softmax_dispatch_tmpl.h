/* softmax.c's calls of the chosen path and its threads, written once for both
 * dtypes: included by softmax.c with
 *   T                float or double
 *   SUF(name)        name##_f32 or name##_f64
 *   PORTABLE(name)   name##_f32_portable or name##_f64_portable
 * defined, after SUF(softmax_select) and PORTABLE(softmax_backward) (the
 * portable backward, every axis); it defines the static
 * SUF(softmax_forward_run) and SUF(softmax_backward_run) (the bodies of
 * softmax.h's functions) and undefines its parameters at its end.  No include
 * guard on purpose.  Contract: softmax.h. */

#if !defined(T) || !defined(SUF) || !defined(PORTABLE)
#error "softmax_dispatch_tmpl.h: define T, SUF and PORTABLE"
#endif

typedef struct {
    const SUF(softmax_kernels) *kernels;
    T *out;
    const T *inp;
    const T *y;   /* the backward's softmax output, else NULL */
    int64_t outer, n, inner, per_task;
} SUF(softmax_job);

static void SUF(softmax_task)(void *arg, int task)
{
    const SUF(softmax_job) *j = arg;
    const int64_t o0 = task * j->per_task;
    const int64_t count = j->outer - o0 < j->per_task ? j->outer - o0 : j->per_task;
    const int64_t at = o0 * j->n * j->inner;
    if (count <= 0)
        return;
    if (j->y != NULL)   /* the backward, along the last axis (inner == 1) */
        j->kernels->backward_rows(j->out + at, j->inp + at, j->y + at, count, j->n);
    else
        j->kernels->forward(j->out + at, j->inp + at, count, j->n, j->inner);
}

static void SUF(softmax_forward_run)(T *out, const T *inp, int64_t outer, int64_t n,
                                     int64_t inner)
{
    const SUF(softmax_kernels) *kernels = SUF(softmax_select)();
    const int t = softmax_threads(outer, n, inner);
    if (t <= 1) {
        kernels->forward(out, inp, outer, n, inner);
        return;
    }
    SUF(softmax_job) job = {kernels, out, inp, NULL, outer, n, inner, (outer + t - 1) / t};
    mk_parallel_run(t, SUF(softmax_task), &job);
}

/* The backward: along the last axis the path's kernel (torch's, bit for bit),
 * in bands of rows on the forward's threads (each row alone: the same bits),
 * along other axes (or on a path without one) the portable one, single-threaded. */
static void SUF(softmax_backward_run)(T *grad_inp, const T *grad_out, const T *out,
                                      int64_t outer, int64_t n, int64_t inner)
{
    const SUF(softmax_kernels) *kernels = SUF(softmax_select)();
    if (inner == 1 && outer > 0 && n > 0 && kernels->backward_rows != NULL) {
        const int t = softmax_threads(outer, n, 1);
        if (t <= 1) {
            kernels->backward_rows(grad_inp, grad_out, out, outer, n);
            return;
        }
        SUF(softmax_job) job = {kernels, grad_inp, grad_out, out, outer, n, 1,
                                (outer + t - 1) / t};
        mk_parallel_run(t, SUF(softmax_task), &job);
        return;
    }
    PORTABLE(softmax_backward)(grad_inp, grad_out, out, outer, n, inner);
}

#undef T
#undef SUF
#undef PORTABLE
