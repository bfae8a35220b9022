/* The MultiheadAttention forward, written once for both dtypes: included by
 * mha.c with T (float or double) and SUF(name) (name##_f32 or name##_f64)
 * defined, undefined again at the end.  No include guard on purpose.  Defines
 * the static body mha_forward_body; mha.c writes out the public symbols.
 * Contract and layout: mha.h. */
#ifndef T
#error "mha_tmpl.h: define T (the element type) before including it"
#endif
#ifndef SUF
#error "mha_tmpl.h: define SUF(name) (name##_f32, name##_f64) before including it"
#endif

/* A [N, len, cols] operand over rows of a projection: element (b, i, c) at
 * data[b * sb + i * si + c]; a head is the column block [h * hd, (h+1) * hd). */
typedef struct {
    T *data;
    int64_t sb, si;
} SUF(mha_seq);

/* The rows of a [len * N, ...] buffer with row stride rs, in the layout of mha.h. */
static SUF(mha_seq) SUF(mha_seq_of)(T *data, int64_t rs, int64_t len, const mha_problem *p)
{
    return p->batch_first ? (SUF(mha_seq)){data, len * rs, rs}
                          : (SUF(mha_seq)){data, rs, p->N * rs};
}

/* 1. The in-projections into *proj (freed by the caller): q, k, v as views of it. */
static int SUF(mha_project)(T **proj, SUF(mha_seq) *q, SUF(mha_seq) *k, SUF(mha_seq) *v,
                            const mha_problem *p)
{
    const int64_t E = p->E, LN = p->L * p->N, SN = p->S * p->N;
    const int64_t kdim = p->w_k.cols, vdim = p->w_v.cols;
    const T *bq = p->b_in, *bk = bq != NULL ? bq + E : NULL, *bv = bq != NULL ? bq + 2 * E : NULL;
    if (p->qkv_same) {   /* self-attention: [L*N, 3E] = query @ in_proj_weight^T + in_proj_bias */
        if ((*proj = mha_alloc(LN * 3 * E, sizeof(T))) == NULL)
            return -1;
        const mk_cmat w = {p->w_q.data, 3 * E, E, p->w_q.rs, p->w_q.cs};
        if (SUF(linear_forward)(mk_mat_c(*proj, LN, 3 * E), mk_cmat_c(p->query, LN, E), w, bq) < 0)
            return -1;
        *q = SUF(mha_seq_of)(*proj, 3 * E, p->L, p);
        *k = SUF(mha_seq_of)(*proj + E, 3 * E, p->S, p);
        *v = SUF(mha_seq_of)(*proj + 2 * E, 3 * E, p->S, p);
        return 0;
    }
    if ((*proj = mha_alloc(LN * E + 2 * SN * E, sizeof(T))) == NULL)
        return -1;
    T *pq = *proj, *pk = pq + LN * E;
    if (SUF(linear_forward)(mk_mat_c(pq, LN, E), mk_cmat_c(p->query, LN, E), p->w_q, bq) < 0)
        return -1;
    *q = SUF(mha_seq_of)(pq, E, p->L, p);
    if (p->kv_same) {    /* key is value: [S*N, 2E] = key @ in_proj_weight[E:]^T + bias[E:] */
        const mk_cmat w = {p->w_k.data, 2 * E, E, p->w_k.rs, p->w_k.cs};
        if (SUF(linear_forward)(mk_mat_c(pk, SN, 2 * E), mk_cmat_c(p->key, SN, E), w, bk) < 0)
            return -1;
        *k = SUF(mha_seq_of)(pk, 2 * E, p->S, p);
        *v = SUF(mha_seq_of)(pk + E, 2 * E, p->S, p);
        return 0;
    }
    T *pv = pk + SN * E;
    if (SUF(linear_forward)(mk_mat_c(pk, SN, E), mk_cmat_c(p->key, SN, kdim), p->w_k, bk) < 0
            || SUF(linear_forward)(mk_mat_c(pv, SN, E), mk_cmat_c(p->value, SN, vdim), p->w_v,
                                   bv) < 0)
        return -1;
    *k = SUF(mha_seq_of)(pk, E, p->S, p);
    *v = SUF(mha_seq_of)(pv, E, p->S, p);
    return 0;
}

/* 2. x [N, S, E] with the rows of bias_k / bias_v and of zeros appended:
 * *dst [N, S2, E] (freed by the caller), *x its view. */
static int SUF(mha_extend)(T **dst, SUF(mha_seq) *x, const T *bias, const mha_problem *p,
                           int64_t S2)
{
    const int64_t N = p->N, S = p->S, E = p->E;
    T *d = *dst = mha_alloc(N * S2 * E, sizeof(T));
    if (d == NULL)
        return -1;
    for (int64_t b = 0; b < N; b++) {
        T *db = d + b * S2 * E;
        for (int64_t i = 0; i < S; i++)
            memcpy(db + i * E, x->data + b * x->sb + i * x->si, (size_t)E * sizeof(T));
        int64_t i = S;
        if (bias != NULL)
            memcpy(db + (i++) * E, bias, (size_t)E * sizeof(T));
        if (p->add_zero_attn)
            memset(db + i * E, 0, (size_t)E * sizeof(T));
    }
    *x = (SUF(mha_seq)){d, S2 * E, E};
    return 0;
}

/* 3. The merged mask [Nm, Hm, Lm, S2] (Nm = N where it depends on the batch
 * item, else 1; likewise Hm, Lm), padded with zeros to S2 keys; its strides in
 * st[0..2] (0 along the dimensions it does not depend on). */
static T *SUF(mha_merge_masks)(const mha_problem *p, int64_t S2, int64_t st[3])
{
    const T *am = p->attn_mask, *kpm = p->key_padding_mask;
    const int64_t S = p->S, L = p->L, H = p->H;
    const int64_t Nm = kpm != NULL || p->attn_mask_3d ? p->N : 1;
    const int64_t Hm = p->attn_mask_3d ? H : 1, Lm = am != NULL ? L : 1;
    T *m = mha_alloc(Nm * Hm * Lm * S2, sizeof(T));
    if (m == NULL)
        return NULL;
    for (int64_t b = 0; b < Nm; b++)
        for (int64_t h = 0; h < Hm; h++)
            for (int64_t i = 0; i < Lm; i++) {
                T *row = m + ((b * Hm + h) * Lm + i) * S2;
                const T *ar = am == NULL ? NULL
                              : p->attn_mask_3d ? am + ((b * H + h) * L + i) * S : am + i * S;
                const T *kr = kpm != NULL ? kpm + b * S : NULL;
                for (int64_t j = 0; j < S; j++)
                    row[j] = ar != NULL && kr != NULL ? ar[j] + kr[j] : ar != NULL ? ar[j] : kr[j];
                for (int64_t j = S; j < S2; j++)
                    row[j] = 0;
            }
    st[0] = Nm > 1 ? Hm * Lm * S2 : 0;
    st[1] = Hm > 1 ? Lm * S2 : 0;
    st[2] = Lm > 1 ? S2 : 0;
    return m;
}

/* 4a. need_weights == 0: every head through the flash kernel into o
 * [N, H, L, hd], then side by side into heads. */
static int SUF(mha_heads_flash)(SUF(mha_seq) heads, SUF(mha_seq) q, SUF(mha_seq) k,
                                SUF(mha_seq) v, const T *mask, const int64_t mst[3],
                                const mha_problem *p, int64_t S2)
{
    const int64_t N = p->N, H = p->H, L = p->L, hd = p->E / p->H;
    sdpa_problem *sp = mk_alloc(sizeof *sp);
    T *o = mha_alloc(N * H * L * hd, sizeof(T));
    int rc = -1;
    if (sp == NULL || o == NULL)
        goto done;
    memset(sp, 0, sizeof *sp);
    sp->L = L;
    sp->S = S2;
    sp->E = sp->Ev = hd;
    sp->nbatch = 2;
    sp->batch[0] = N;
    sp->batch[1] = H;
    const SUF(mha_seq) *ops[3] = {&q, &k, &v};
    sdpa_operand *dst[3] = {&sp->q, &sp->k, &sp->v};
    for (int t = 0; t < 3; t++) {
        *dst[t] = (sdpa_operand){.data = ops[t]->data, .rs = ops[t]->si, .cs = 1};
        dst[t]->bs[0] = ops[t]->sb;
        dst[t]->bs[1] = hd;
        dst[t]->bd[0] = N;
        dst[t]->bd[1] = H;
    }
    if (mask != NULL) {
        sp->mask = (sdpa_operand){.data = mask, .rs = mst[2], .cs = 1};
        sp->mask.bs[0] = mst[0];
        sp->mask.bs[1] = mst[1];
        sp->mask.bd[0] = mst[0] != 0 ? N : 1;
        sp->mask.bd[1] = mst[1] != 0 ? H : 1;
        sp->mask_kind = SDPA_MASK_FLOAT;
    }
    sp->k_group = sp->v_group = 1;
    sp->is_causal = p->is_causal;
    sp->scale = 1.0 / sqrt((double)hd);
    sp->prescale = p->dropout_p > 0;   /* torch's math path when it drops */
    sp->dropout_p = p->dropout_p;
    sp->dropout_seed = p->dropout_seed;
    if (SUF(sdpa_forward)(o, NULL, sp) < 0)
        goto done;
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++)
                memcpy(heads.data + b * heads.sb + i * heads.si + h * hd,
                       o + ((b * H + h) * L + i) * hd, (size_t)hd * sizeof(T));
    rc = 0;
done:
    mk_free(o);
    mk_free(sp);
    return rc;
}

/* torch's sum over the heads (SumKernel.cpp multi_row_sum): runs of 16 added
 * into a first accumulator, carried up a cascade of four levels. */
static T SUF(mha_sum_heads)(const T *x, int64_t H, int64_t stride)
{
    T acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    while (i + 16 <= H) {
        for (int j = 0; j < 16; j++, i++)
            acc[0] += x[i * stride];
        for (int l = 1; l < 4; l++) {
            acc[l] += acc[l - 1];
            acc[l - 1] = 0;
            if ((i & ((int64_t)15 << (l * 4))) != 0)
                break;
        }
    }
    for (; i < H; i++)
        acc[0] += x[i * stride];
    for (int l = 1; l < 4; l++)
        acc[0] += acc[l];
    return acc[0];
}

/* 4b. need_weights == 1: torch's order.  w [N, H, L, S2] gets the weights. */
static int SUF(mha_heads_weights)(SUF(mha_seq) heads, SUF(mha_seq) q, SUF(mha_seq) k,
                                  SUF(mha_seq) v, const T *mask, const int64_t mst[3],
                                  const mha_problem *p, int64_t S2, T *w)
{
    const int64_t N = p->N, H = p->H, L = p->L, hd = p->E / p->H;
    T *qs = mha_alloc(N * H * L * hd, sizeof(T));
    if (qs == NULL)
        return -1;
    /* q * math.sqrt(1.0 / head_dim): the scalar in the tensor's dtype */
    const T sc = (T)sqrt(1.0 / (double)hd);
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                const T *src = q.data + b * q.sb + i * q.si + h * hd;
                T *dst = qs + ((b * H + h) * L + i) * hd;
                for (int64_t d = 0; d < hd; d++)
                    dst[d] = src[d] * sc;
            }
    int rc = 0;
    /* scores = mask + q_scaled @ k^T (baddbmm), per batch item over its heads */
    for (int64_t b = 0; b < N && rc == 0; b++)
        rc = SUF(bmm_forward)((mk_batch){w + b * H * L * S2, H, L, S2, L * S2, S2, 1},
                              (mk_cbatch){qs + b * H * L * hd, H, L, hd, L * hd, hd, 1},
                              (mk_cbatch){k.data + b * k.sb, H, hd, S2, hd, 1, k.si});
    mk_free(qs);
    if (rc < 0)
        return -1;
    if (mask != NULL)
        for (int64_t b = 0; b < N; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < L; i++) {
                    T *row = w + ((b * H + h) * L + i) * S2;
                    const T *mr = mask + b * mst[0] + h * mst[1] + i * mst[2];
                    for (int64_t j = 0; j < S2; j++)
                        row[j] += mr[j];
                }
    SUF(softmax_forward)(w, w, N * H * L, S2, 1);
    if (p->dropout_p > 0) {
        const T keep = p->dropout_p >= 1 ? (T)0 : (T)(1.0 / (1.0 - p->dropout_p));
        for (int64_t bh = 0; bh < N * H; bh++)
            for (int64_t i = 0; i < L; i++) {
                T *row = w + (bh * L + i) * S2;
                for (int64_t j = 0; j < S2; j++)
                    row[j] = sdpa_dropout_uniform(p->dropout_seed, bh, i, j) < p->dropout_p
                             ? (T)0 : row[j] * keep;
            }
    }
    /* heads[b, :, h] = weights[b, h] @ v[b, :, h] */
    for (int64_t b = 0; b < N && rc == 0; b++)
        rc = SUF(bmm_forward)((mk_batch){heads.data + b * heads.sb, H, L, hd, hd, heads.si, 1},
                              (mk_cbatch){w + b * H * L * S2, H, L, S2, L * S2, S2, 1},
                              (mk_cbatch){v.data + b * v.sb, H, S2, hd, hd, v.si, 1});
    return rc;
}

static int SUF(mha_forward_body)(T *out, T *weights, const mha_problem *p)
{
    const int64_t L = p->L, N = p->N, E = p->E, H = p->H;
    const int64_t S2 = p->S + (p->bias_k != NULL) + p->add_zero_attn;
    if (L == 0 || N == 0)
        return 0;   /* nothing to write */
    T *proj = NULL, *kx = NULL, *vx = NULL, *mask = NULL, *heads = NULL, *w = NULL;
    SUF(mha_seq) q, k, v;
    int64_t mst[3] = {0, 0, 0};
    int rc = -1;
    if (SUF(mha_project)(&proj, &q, &k, &v, p) < 0)
        goto done;
    if (S2 != p->S && (SUF(mha_extend)(&kx, &k, p->bias_k, p, S2) < 0
                       || SUF(mha_extend)(&vx, &v, p->bias_v, p, S2) < 0))
        goto done;
    if ((p->attn_mask != NULL || p->key_padding_mask != NULL)
            && (mask = SUF(mha_merge_masks)(p, S2, mst)) == NULL)
        goto done;
    if ((heads = mha_alloc(L * N * E, sizeof(T))) == NULL)
        goto done;
    const SUF(mha_seq) hs = SUF(mha_seq_of)(heads, E, L, p);
    if (!p->need_weights) {
        if (SUF(mha_heads_flash)(hs, q, k, v, mask, mst, p, S2) < 0)
            goto done;
    } else {
        w = p->average_weights ? mha_alloc(N * H * L * S2, sizeof(T)) : weights;
        if (w == NULL || SUF(mha_heads_weights)(hs, q, k, v, mask, mst, p, S2, w) < 0)
            goto done;
        if (p->average_weights)   /* torch's mean(dim=1): the sum, then / H */
            for (int64_t b = 0; b < N; b++)
                for (int64_t r = 0; r < L * S2; r++)
                    weights[b * L * S2 + r] =
                        SUF(mha_sum_heads)(w + b * H * L * S2 + r, H, L * S2) / (T)H;
    }
    /* 5. out = heads @ out_proj.weight^T + out_proj.bias */
    rc = SUF(linear_forward)(mk_mat_c(out, L * N, E), mk_cmat_c(heads, L * N, E), p->w_out,
                             p->b_out);
done:
    if (w != weights)
        mk_free(w);
    mk_free(heads);
    mk_free(mask);
    mk_free(vx);
    mk_free(kx);
    mk_free(proj);
    return rc;
}

#undef T
#undef SUF
