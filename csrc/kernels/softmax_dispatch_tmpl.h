/* softmax.c's dispatch to the path cpu.h chose, and its threads, written once
 * for both dtypes: included by softmax.c with
 *   T               float or double
 *   SUF(name)       name##_f32 or name##_f64
 *   PATH(name, p)   name##_f32_##p or name##_f64_##p (p: avx512, avx2, portable)
 * defined.  No include guard on purpose.  Contract: softmax.h. */

/* The path's kernel for a range of slices (outer), on this thread. */
static void SUF(softmax_forward_one)(T *out, const T *inp, int64_t outer, int64_t n,
                                     int64_t inner)
{
#ifdef MYATT_X86
    switch (mk_cpu_isa()) {
    case MK_ISA_AVX512:
        PATH(softmax_forward, avx512)(out, inp, outer, n, inner);
        return;
    case MK_ISA_AVX2:
        PATH(softmax_forward, avx2)(out, inp, outer, n, inner);
        return;
    default:
        break;
    }
#endif
    PATH(softmax_forward, portable)(out, inp, outer, n, inner);
}

typedef struct {
    T *out;
    const T *inp;
    int64_t outer, n, inner, per_task;
} SUF(softmax_job);

static void SUF(softmax_task)(void *arg, int task)
{
    const SUF(softmax_job) *j = arg;
    const int64_t o0 = task * j->per_task;
    const int64_t count = j->outer - o0 < j->per_task ? j->outer - o0 : j->per_task;
    const int64_t slice = j->n * j->inner;
    if (count > 0)
        SUF(softmax_forward_one)(j->out + o0 * slice, j->inp + o0 * slice, count, j->n, j->inner);
}

void SUF(softmax_forward)(T *out, const T *inp, int64_t outer, int64_t n, int64_t inner)
{
    const int t = softmax_threads(outer, n, inner);
    if (t <= 1) {
        SUF(softmax_forward_one)(out, inp, outer, n, inner);
        return;
    }
    SUF(softmax_job) job = {out, inp, outer, n, inner, (outer + t - 1) / t};
    mk_parallel_run(t, SUF(softmax_task), &job);
}

/* The backward: along the last axis the path's kernel (torch's, bit for bit),
 * along other axes the portable one.  One pass of a dot product and a scale:
 * bound by memory, single-threaded. */
void SUF(softmax_backward)(T *grad_inp, const T *grad_out, const T *out,
                           int64_t outer, int64_t n, int64_t inner)
{
#ifdef MYATT_X86
    if (inner == 1 && outer > 0 && n > 0) {
        switch (mk_cpu_isa()) {
        case MK_ISA_AVX512:
            PATH(softmax_backward_rows, avx512)(grad_inp, grad_out, out, outer, n);
            return;
        case MK_ISA_AVX2:
            PATH(softmax_backward_rows, avx2)(grad_inp, grad_out, out, outer, n);
            return;
        default:
            break;
        }
    }
#endif
    PATH(softmax_backward, portable)(grad_inp, grad_out, out, outer, n, inner);
}
