/* Undefines the parameters of softmax_simd_tmpl.h between two inclusions. */
#undef T
#undef ISA
#undef VF
#undef VMASK
#undef VLEN
#undef V_SET1
#undef V_LOADU
#undef V_STOREU
#undef V_ADD
#undef V_SUB
#undef V_MUL
#undef V_MAX
#undef V_MASK_FIRST
#undef V_LOAD_OR
#undef V_STORE_MASK
#undef V_ZERO_OUTSIDE
#undef V_EXP
