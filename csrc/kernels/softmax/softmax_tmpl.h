/* The portable softmax, written once for both dtypes: included by softmax.c with
 *   T          the element type (float or double)
 *   SUF(name)  name##_f32_portable or name##_f64_portable
 *   EXP        expf or exp (libm)
 * defined; it defines the static SUF(softmax_forward) and SUF(softmax_backward)
 * (the portable path, softmax.h's contract) and undefines its parameters at
 * its end.  No include guard on purpose. */

#if !defined(T) || !defined(SUF) || !defined(EXP)
#error "softmax_tmpl.h: define T, SUF and EXP"
#endif

/* Lanes of torch's portable vector (its DEFAULT build: 32 bytes, 8 floats or
 * 4 doubles), which the last-axis case below mirrors. */
#define SOFTMAX_LANES ((int)(32 / sizeof(T)))

/* at::vec::maximum on one lane: NaN if either is NaN */
static inline T SUF(softmax_max_nan)(T a, T b)
{
    return isnan(a) || isnan(b) ? (T)NAN : b > a ? b : a;
}

/* torch's vec::reduce_all(op, x, n) with SOFTMAX_LANES lanes and no shuffle
 * tree: a row shorter than a vector folded in order; else lane-wise over whole
 * vectors from the first, the tail merged into the first lanes, and the lanes
 * folded in order. */
static T SUF(softmax_reduce)(const T *x, int64_t n, int is_max)
{
    enum { L = SOFTMAX_LANES };
    T r = x[0];
    if (n < L) {
        for (int64_t j = 1; j < n; j++)
            r = is_max ? SUF(softmax_max_nan)(r, x[j]) : r + x[j];
        return r;
    }
    T acc[L];
    for (int l = 0; l < L; l++)
        acc[l] = x[l];
    int64_t j = L;
    for (; j + L <= n; j += L)
        for (int l = 0; l < L; l++)
            acc[l] = is_max ? SUF(softmax_max_nan)(acc[l], x[j + l]) : acc[l] + x[j + l];
    for (int l = 0; j + l < n; l++)
        acc[l] = is_max ? SUF(softmax_max_nan)(acc[l], x[j + l]) : acc[l] + x[j + l];
    r = acc[0];
    for (int l = 1; l < L; l++)
        r = is_max ? SUF(softmax_max_nan)(r, acc[l]) : r + acc[l];
    return r;
}

/* Last-axis case: softmax of each row of inp[rows, n], torch's portable
 * kernel (_vec_softmax_lastdim on its DEFAULT build, libm's exp) bit for bit:
 * max, out = exp(x - max), sum of out, out *= 1 / sum. */
static void SUF(softmax_rows)(T *out, const T *inp, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        const T *inp_r = inp + r * n;   /* [n] */
        T *out_r = out + r * n;         /* [n], may be inp_r */
        /* a NaN gives a NaN max, hence a NaN row; a row of only -inf, or with
         * +inf, gives inf - inf = NaN here, as in torch */
        const T max = SUF(softmax_reduce)(inp_r, n, 1);
        for (int64_t j = 0; j < n; j++)
            out_r[j] = EXP(inp_r[j] - max);
        const T inv_sum = (T)1 / SUF(softmax_reduce)(out_r, n, 0);
        for (int64_t j = 0; j < n; j++)
            out_r[j] = inv_sum * out_r[j];
    }
}

/* Columns handled together in the strided case: per-column max and sum live on
 * the stack, so the kernel needs no workspace and cannot fail. */
#define SOFTMAX_COLS 128

/* Middle-axis case: for each plane inp[o] of shape [n, inner], softmax down
 * each column.  Rows of the plane are walked in order with the loop over
 * columns innermost (contiguous), SOFTMAX_COLS columns at a time. */
static void SUF(softmax_cols)(T *out, const T *inp, int64_t outer, int64_t n, int64_t inner)
{
    T max[SOFTMAX_COLS];
    double sum[SOFTMAX_COLS];   /* in double: a float32 column 10^5 long still sums accurately */
    T inv[SOFTMAX_COLS];
    for (int64_t o = 0; o < outer; o++) {
        const T *inp_o = inp + o * n * inner;   /* [n, inner] */
        T *out_o = out + o * n * inner;         /* [n, inner], may be inp_o */
        for (int64_t i0 = 0; i0 < inner; i0 += SOFTMAX_COLS) {
            const int64_t ib = inner - i0 < SOFTMAX_COLS ? inner - i0 : SOFTMAX_COLS;

            /* 1. column max, NaN-propagating */
            for (int64_t i = 0; i < ib; i++)
                max[i] = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                const T *inp_row = inp_o + j * inner + i0;   /* [ib] */
                for (int64_t i = 0; i < ib; i++)
                    if (inp_row[i] > max[i] || isnan(inp_row[i]))
                        max[i] = inp_row[i];
            }

            /* 2. out = exp(x - max), column sums */
            for (int64_t i = 0; i < ib; i++)
                sum[i] = 0;
            for (int64_t j = 0; j < n; j++) {
                const T *inp_row = inp_o + j * inner + i0;
                T *out_row = out_o + j * inner + i0;
                for (int64_t i = 0; i < ib; i++) {
                    const T e = EXP(inp_row[i] - max[i]);
                    out_row[i] = e;
                    sum[i] += e;
                }
            }

            /* 3. multiply by the reciprocal of the (T) sum */
            for (int64_t i = 0; i < ib; i++)
                inv[i] = (T)1 / (T)sum[i];
            for (int64_t j = 0; j < n; j++) {
                T *out_row = out_o + j * inner + i0;
                for (int64_t i = 0; i < ib; i++)
                    out_row[i] *= inv[i];
            }
        }
    }
}
#undef SOFTMAX_COLS

static void SUF(softmax_forward)(T *out, const T *inp, int64_t outer, int64_t n, int64_t inner)
{
    if (outer <= 0 || n <= 0 || inner <= 0)
        return;
    if (inner == 1)
        SUF(softmax_rows)(out, inp, outer, n);
    else
        SUF(softmax_cols)(out, inp, outer, n, inner);
}

/* ---- backward -------------------------------------------------------------- */

/* sum(x * y) as torch's DEFAULT build reduces it (vec::map2_reduce_all): as
 * softmax_reduce's sum, each term a separate multiply */
static T SUF(softmax_dot)(const T *x, const T *y, int64_t n)
{
    enum { L = SOFTMAX_LANES };
    T r = x[0] * y[0];
    if (n < L) {
        for (int64_t j = 1; j < n; j++)
            r = r + x[j] * y[j];
        return r;
    }
    T acc[L];
    for (int l = 0; l < L; l++)
        acc[l] = x[l] * y[l];
    int64_t j = L;
    for (; j + L <= n; j += L)
        for (int l = 0; l < L; l++)
            acc[l] = acc[l] + x[j + l] * y[j + l];
    for (int l = 0; j + l < n; l++)
        acc[l] = acc[l] + x[j + l] * y[j + l];
    r = acc[0];
    for (int l = 1; l < L; l++)
        r = r + acc[l];
    return r;
}

#define SOFTMAX_COLS 128

static void SUF(softmax_backward)(T *grad_inp, const T *grad_out, const T *out,
                           int64_t outer, int64_t n, int64_t inner)
{
    if (outer <= 0 || n <= 0 || inner <= 0)
        return;
    if (inner == 1) {
        for (int64_t r = 0; r < outer; r++) {
            const T *go_r = grad_out + r * n;   /* [n] */
            const T *out_r = out + r * n;       /* [n] */
            T *gi_r = grad_inp + r * n;         /* [n], may be go_r or out_r */
            /* 1. s = sum_j grad_out * out, read before anything is written */
            const T s = SUF(softmax_dot)(go_r, out_r, n);
            /* 2. grad_inp = (grad_out - s) * out, torch's (DEFAULT build) bits */
            for (int64_t j = 0; j < n; j++)
                gi_r[j] = (go_r[j] - s) * out_r[j];
        }
        return;
    }
    /* Middle axis: per-column sums on the stack, SOFTMAX_COLS columns at a time,
     * rows walked in order with the columns innermost (contiguous). */
    T sum[SOFTMAX_COLS];
    for (int64_t o = 0; o < outer; o++) {
        const T *go_o = grad_out + o * n * inner;   /* [n, inner] */
        const T *out_o = out + o * n * inner;       /* [n, inner] */
        T *gi_o = grad_inp + o * n * inner;         /* [n, inner] */
        for (int64_t i0 = 0; i0 < inner; i0 += SOFTMAX_COLS) {
            const int64_t ib = inner - i0 < SOFTMAX_COLS ? inner - i0 : SOFTMAX_COLS;
            /* 1. column sums of grad_out * out */
            for (int64_t i = 0; i < ib; i++)
                sum[i] = 0;
            for (int64_t j = 0; j < n; j++) {
                const T *go_row = go_o + j * inner + i0;   /* [ib] */
                const T *out_row = out_o + j * inner + i0;
                for (int64_t i = 0; i < ib; i++)
                    sum[i] += go_row[i] * out_row[i];
            }
            /* 2. grad_inp = out * (grad_out - sum) */
            for (int64_t j = 0; j < n; j++) {
                const T *go_row = go_o + j * inner + i0;
                const T *out_row = out_o + j * inner + i0;
                T *gi_row = gi_o + j * inner + i0;
                for (int64_t i = 0; i < ib; i++)
                    gi_row[i] = out_row[i] * (go_row[i] - sum[i]);
            }
        }
    }
}
#undef SOFTMAX_COLS
#undef SOFTMAX_LANES

#undef T
#undef SUF
#undef EXP
