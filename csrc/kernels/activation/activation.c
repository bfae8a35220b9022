/* The activations (activation.h): activation_tmpl.h's bodies for float and
 * double, and the public symbols as one-line wrappers. */
#include "activation.h"

#include <math.h>

#define T float
#define SUF(name) name##_f32
#define MATH(fn) fn##f
#include "activation_tmpl.h"

#define T double
#define SUF(name) name##_f64
#define MATH(fn) fn
#include "activation_tmpl.h"

void gelu_forward_f32(void *out, const void *inp, int64_t n, int approximate)
{
    gelu_forward_body_f32(out, inp, n, approximate);
}

void gelu_forward_f64(void *out, const void *inp, int64_t n, int approximate)
{
    gelu_forward_body_f64(out, inp, n, approximate);
}

void gelu_backward_f32(void *grad_inp, const void *grad_out, const void *inp, int64_t n,
                       int approximate)
{
    gelu_backward_body_f32(grad_inp, grad_out, inp, n, approximate);
}

void gelu_backward_f64(void *grad_inp, const void *grad_out, const void *inp, int64_t n,
                       int approximate)
{
    gelu_backward_body_f64(grad_inp, grad_out, inp, n, approximate);
}
