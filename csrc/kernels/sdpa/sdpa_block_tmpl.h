/* Scaled dot-product attention: the steps of one [query block, key block]
 * tile that the forward (sdpa_forward_tmpl.h) and the backward
 * (sdpa_backward_tmpl.h) share: the operands of a batch index, the block's
 * query rows, its scores (causal, scale, mask), the path's vector exp.  Written
 * once for both dtypes: included by sdpa.c, before the other two, with T (float
 * or double) and SUF(name) (name##_f32 or name##_f64) defined.  No include
 * guard on purpose; the parameters are undefined at the end.  Contract: sdpa.h. */
#ifndef T
#error "sdpa_block_tmpl.h needs T"
#endif
#ifndef SUF
#error "sdpa_block_tmpl.h needs SUF"
#endif

/* The vector exp of the CPU's path over an array (in place allowed), or NULL:
 * libm's.  (sdpa_internal.h: the exp of the SIMD forward.) */
typedef void (*SUF(sdpa_vexp_fn))(T *out, const T *inp, int64_t n);

static SUF(sdpa_vexp_fn) SUF(sdpa_vexp)(void)
{
    const SUF(sdpa_kernels) *simd = SUF(sdpa_select)();
    return simd != NULL ? simd->exp : NULL;
}

/* x[0:n] rounded to the half dtype of a half-precision call (round_weights,
 * mk_half_kind): the float32 kernels' only, by runtime/half.c's vectorised
 * loop. */
static void SUF(sdpa_round)(T *x, int64_t n, int kind)
{
    if (sizeof(T) == sizeof(float))
        mk_half_round_inplace((float *)(void *)x, n, (mk_half_kind)kind);
    else
        for (int64_t i = 0; i < n; i++)
            x[i] = (T)mk_half_round((float)x[i], (mk_half_kind)kind);
}

/* q, k, v and the mask of batch index b (row 0, key 0): the index unravelled
 * over the batch dimensions (the last first), key's and value's heads divided
 * by their GQA groups. */
static void SUF(sdpa_batch_operands)(const sdpa_problem *p, int64_t b, const T **q,
                                     const T **k, const T **v, const void **mask)
{
    int64_t oq = 0, ok = 0, ov = 0, om = 0, rest = b;
    for (int d = p->nbatch - 1; d >= 0; d--) {
        const int64_t idx = rest % p->batch[d];
        rest /= p->batch[d];
        const int last = d == p->nbatch - 1;
        oq += idx * p->q.bs[d];
        ok += (last ? idx / p->k_group : idx) * p->k.bs[d];
        ov += (last ? idx / p->v_group : idx) * p->v.bs[d];
        om += idx * p->mask.bs[d];
    }
    *q = (const T *)p->q.data + oq;
    *k = (const T *)p->k.data + ok;
    *v = (const T *)p->v.data + ov;
    *mask = NULL;
    if (p->mask_kind == SDPA_MASK_FLOAT)
        *mask = (const T *)p->mask.data + om;
    else if (p->mask_kind == SDPA_MASK_BOOL)
        *mask = (const unsigned char *)p->mask.data + om;
}

/* dst[rows, E] (contiguous) = src[rows, E] (strided) * factor */
static void SUF(sdpa_scale_rows)(T *dst, const T *src, int64_t rs, int64_t cs, int64_t rows,
                                 int64_t E, T factor)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < E; c++)
            dst[i * E + c] = src[i * rs + c * cs] * factor;
}

/* c (+)= a @ b, a block's product: with `dot` (a bfloat16 call's forward on a
 * CPU with the bfloat16 dot product: its operands' values are bfloat16) on
 * vdpbf16ps (gemm_bf16_f32), else the GEMM. */
static int SUF(sdpa_product)(mk_mat c, mk_cmat a, mk_cmat b, int accumulate, int dot)
{
    if (dot)
        return gemm_bf16_f32(c, a, mk_t(b), accumulate);
    return SUF(gemm)(c, a, b, NULL, accumulate);
}

/* The block's scores, as the forward and the backward both compute them:
 *   qk[qb, kb] = q[m0:m0+qb] . k[n:n+kb] (* scale) + mask, -inf where causal hides a key
 * qr: the block's query rows through q_rs, q_cs (already scaled when prescale);
 * k and mask at key 0 of the batch index; k_scaled [kb, E]: room for the
 * block's keys scaled (prescale); dot: sdpa_product's. */
static int SUF(sdpa_scores)(const sdpa_problem *p, T *k_scaled, T *qk,
                            const T *qr, int64_t q_rs, int64_t q_cs, const T *k,
                            const void *mask, int64_t m0, int64_t qb, int64_t n, int64_t kb,
                            int dot)
{
    const int64_t E = p->E;
    const T scale = p->E == 0 || p->prescale ? (T)1 : (T)p->scale;
    /* 1. qk = q @ k^T */
    if (E == 0) {
        for (int64_t i = 0; i < qb * kb; i++)
            qk[i] = 0;
    } else {
        const T *kr = k + n * p->k.rs;
        int64_t k_rs = p->k.rs, k_cs = p->k.cs;
        if (p->prescale) {
            SUF(sdpa_scale_rows)(k_scaled, kr, k_rs, k_cs, kb, E, (T)sqrt(fabs(p->scale)));
            kr = k_scaled;
            k_rs = E;
            k_cs = 1;
        }
        if (SUF(sdpa_product)(mk_mat_c(qk, qb, kb), (mk_cmat){qr, qb, E, q_rs, q_cs},
                              (mk_cmat){kr, E, kb, k_cs, k_rs}, 0, dot) != 0)
            return -1;
    }
    /* 2. causal: -inf right of the diagonal (before the scale, as torch's flash kernel) */
    if (p->is_causal)
        for (int64_t r = 0; r < qb; r++) {
            const int64_t last = m0 + r - n;   /* last key column row r sees */
            for (int64_t j = last + 1 < 0 ? 0 : last + 1; j < kb; j++)
                qk[r * kb + j] = -INFINITY;
        }
    /* 3. s <- s * scale + mask */
    for (int64_t r = 0; r < qb; r++) {
        T *s = qk + r * kb;
        if (p->mask_kind == SDPA_MASK_FLOAT) {
            const T *mr = (const T *)mask + (m0 + r) * p->mask.rs + n * p->mask.cs;
            for (int64_t j = 0; j < kb; j++)
                s[j] = s[j] * scale + mr[j * p->mask.cs];
        } else if (p->mask_kind == SDPA_MASK_BOOL) {
            const unsigned char *mr =
                (const unsigned char *)mask + (m0 + r) * p->mask.rs + n * p->mask.cs;
            for (int64_t j = 0; j < kb; j++)
                s[j] = s[j] * scale + (mr[j * p->mask.cs] ? (T)0 : (T)-INFINITY);
        } else if (scale != 1) {
            for (int64_t j = 0; j < kb; j++)
                s[j] = s[j] * scale;
        }
    }
    return 0;
}

/* The block's query rows for the products: q itself, or (prescale) a copy
 * scaled by +-sqrt(|scale|) in q_scaled [qb, E]. */
static const T *SUF(sdpa_query_rows)(const sdpa_problem *p, T *q_scaled, const T *q,
                                     int64_t m0, int64_t qb, int64_t *q_rs, int64_t *q_cs)
{
    const T *qr = q + m0 * p->q.rs;
    *q_rs = p->q.rs;
    *q_cs = p->q.cs;
    if (p->prescale && p->E > 0) {
        const T root = (T)sqrt(fabs(p->scale));
        SUF(sdpa_scale_rows)(q_scaled, qr, *q_rs, *q_cs, qb, p->E, p->scale < 0 ? -root : root);
        qr = q_scaled;
        *q_rs = p->E;
        *q_cs = 1;
    }
    return qr;
}

#undef T
#undef SUF
