/* The kernel functions of myatt._myatt: one line each, their declarations
 * (entry.h) in their family's file.  entry.c makes the module's functions of
 * them; vjp differentiates those that declare a backward. */
#include "entry.h"

entry *const myatt_functions[] = {
    &linear_entry,           /* linear_function.c */
    &linear_backward_entry,
    &softmax_entry,          /* softmax_function.c */
    &softmax_backward_entry,
    &bmm_entry,              /* bmm_function.c */
    &bmm_backward_entry,
    &baddbmm_entry,          /* (private: MultiheadAttention's half weights) */
    &sdpa_entry,             /* sdpa_function.c: scaled_dot_product_attention */
    &gelu_entry,             /* activation_function.c */
    &gelu_backward_entry,
    NULL,
};
