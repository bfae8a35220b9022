/* The activations (activation.h), written once for both dtypes: included by
 * activation.c with T (float or double), SUF(name) (name##_f32 or name##_f64)
 * and MATH(f) (its libm function: f##f or f) defined, undefined again at the
 * end.  No include guard on purpose. */
#ifndef T
#error "activation_tmpl.h: define T (the element type) before including it"
#endif
#ifndef SUF
#error "activation_tmpl.h: define SUF(name) (name##_f32, name##_f64) before including it"
#endif
#ifndef MATH
#error "activation_tmpl.h: define MATH(f) (the element type's libm function) before including it"
#endif

/* The constants as torch computes them, in double, then rounded to T: sqrt(1/2),
 * sqrt(2/pi) and 1/sqrt(2 pi) from glibc's M_SQRT1_2, M_SQRT2 and M_2_SQRTPI
 * (which strict C11 does not declare). */
#define GELU_SQRT1_2 0.70710678118654752440
#define GELU_SQRT2 1.41421356237309504880
#define GELU_2_SQRTPI 1.12837916709551257390
#define GELU_ALPHA GELU_SQRT1_2
#define GELU_BETA_TANH (GELU_SQRT2 * GELU_2_SQRTPI * 0.5)
#define GELU_BETA_ERF (GELU_2_SQRTPI * GELU_SQRT1_2 * 0.5)

static void SUF(gelu_forward_body)(T *out, const T *inp, int64_t n, int approximate)
{
    const T half = (T)0.5, one = (T)1, kappa = (T)0.044715;
    const T alpha = (T)GELU_ALPHA, beta = (T)GELU_BETA_TANH;
    for (int64_t i = 0; i < n; i++) {
        const T x = inp[i];
        if (approximate == GELU_TANH) {
            const T cube = x * x * x, inner = beta * (x + kappa * cube);
            out[i] = half * x * (one + MATH(tanh)(inner));
        } else {
            out[i] = x * half * (one + MATH(erf)(x * alpha));
        }
    }
}

static void SUF(gelu_backward_body)(T *grad_inp, const T *grad_out, const T *inp, int64_t n,
                                    int approximate)
{
    const T half = (T)0.5, one = (T)1, kappa = (T)0.044715;
    const T alpha = (T)GELU_ALPHA, beta_tanh = (T)GELU_BETA_TANH;
    const T beta_erf = (T)GELU_BETA_ERF;
    for (int64_t i = 0; i < n; i++) {
        const T x = inp[i], dy = grad_out[i];
        if (approximate == GELU_TANH) {
            const T sq = x * x, cube = sq * x;
            const T t = MATH(tanh)(beta_tanh * (x + kappa * cube));
            const T left = half * x, right = one + t;
            const T left_derivative = half * right;
            const T tanh_derivative = one - t * t;
            const T inner_derivative = beta_tanh * (one + (T)3 * kappa * sq);
            const T right_derivative = left * tanh_derivative * inner_derivative;
            grad_inp[i] = dy * (left_derivative + right_derivative);
        } else {
            const T cdf = half * (one + MATH(erf)(x * alpha));
            const T pdf = beta_erf * MATH(exp)(x * x * (T)-0.5);
            grad_inp[i] = dy * (cdf + x * pdf);
        }
    }
}

#undef GELU_SQRT1_2
#undef GELU_SQRT2
#undef GELU_2_SQRTPI
#undef GELU_ALPHA
#undef GELU_BETA_TANH
#undef GELU_BETA_ERF
#undef T
#undef SUF
#undef MATH
