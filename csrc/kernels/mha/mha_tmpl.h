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

/* The views of q, k, v over a buffer laid out as mha_layout_of says. */
static void SUF(mha_views)(T *buf, SUF(mha_seq) *q, SUF(mha_seq) *k, SUF(mha_seq) *v,
                           const mha_problem *p)
{
    const mha_layout lay = mha_layout_of(p);
    *q = SUF(mha_seq_of)(buf + lay.off[0], lay.rs[0], p->L, p);
    *k = SUF(mha_seq_of)(buf + lay.off[1], lay.rs[1], p->S, p);
    *v = SUF(mha_seq_of)(buf + lay.off[2], lay.rs[2], p->S, p);
}

/* 1. The in-projections into *proj (freed by the caller): q, k, v as views of it.
 * torch's _in_projection_packed: one GEMM on query when query, key and value
 * are one array, one on key for key and value when those two are, else three. */
static int SUF(mha_project)(T **proj, SUF(mha_seq) *q, SUF(mha_seq) *k, SUF(mha_seq) *v,
                            const mha_problem *p)
{
    const int64_t E = p->E, LN = p->L * p->N, SN = p->S * p->N;
    const int64_t kdim = p->w_k.cols, vdim = p->w_v.cols;
    const T *bq = p->b_in, *bk = bq != NULL ? bq + E : NULL, *bv = bq != NULL ? bq + 2 * E : NULL;
    const mha_layout lay = mha_layout_of(p);
    T *buf = *proj = mha_alloc(lay.size, sizeof(T));
    if (buf == NULL)
        return -1;
    SUF(mha_views)(buf, q, k, v, p);
    if (p->qkv_same) {   /* [L*N, 3E] = query @ in_proj_weight^T + in_proj_bias */
        const mk_cmat w = {p->w_q.data, 3 * E, E, p->w_q.rs, p->w_q.cs};
        return SUF(linear_forward)(mk_mat_c(buf, LN, 3 * E), mk_cmat_c(p->query, LN, E), w, bq);
    }
    if (SUF(linear_forward)(mk_mat_c(buf, LN, E), mk_cmat_c(p->query, LN, E), p->w_q, bq) < 0)
        return -1;
    if (p->kv_same) {    /* [S*N, 2E] = key @ in_proj_weight[E:]^T + bias[E:] */
        const mk_cmat w = {p->w_k.data, 2 * E, E, p->w_k.rs, p->w_k.cs};
        return SUF(linear_forward)(mk_mat_c(buf + lay.off[1], SN, 2 * E),
                                   mk_cmat_c(p->key, SN, E), w, bk);
    }
    if (SUF(linear_forward)(mk_mat_c(buf + lay.off[1], SN, E), mk_cmat_c(p->key, SN, kdim),
                            p->w_k, bk) < 0)
        return -1;
    return SUF(linear_forward)(mk_mat_c(buf + lay.off[2], SN, E),
                               mk_cmat_c(p->value, SN, vdim), p->w_v, bv);
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
                              : p->attn_mask_3d ? am + (b * H + h) * p->attn_mask_stride + i * S
                                                : am + i * S;
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

/* The heads as one SDPA problem over [N, H] (the forward's and the backward's). */
static void SUF(mha_sdpa_problem)(sdpa_problem *sp, SUF(mha_seq) q, SUF(mha_seq) k,
                                  SUF(mha_seq) v, const T *mask, const int64_t mst[3],
                                  const mha_problem *p, int64_t S2)
{
    const int64_t N = p->N, H = p->H, hd = p->E / p->H;
    memset(sp, 0, sizeof *sp);
    sp->L = p->L;
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
}

/* Between [N, H, len, hd] (C-contiguous) and the heads of x ([N, len] rows,
 * head h in columns [h * hd, (h + 1) * hd)): to_x copies c into x, else x into c. */
static void SUF(mha_heads_copy)(T *c, SUF(mha_seq) x, int64_t len, const mha_problem *p,
                                int to_x)
{
    const int64_t N = p->N, H = p->H, hd = p->E / p->H;
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < len; i++) {
                T *xr = x.data + b * x.sb + i * x.si + h * hd;
                T *cr = c + ((b * H + h) * len + i) * hd;
                memcpy(to_x ? xr : cr, to_x ? cr : xr, (size_t)hd * sizeof(T));
            }
}

/* 4a. need_weights == 0: every head through the flash kernel into o
 * [N, H, L, hd], then side by side into heads.  keep: o and lse kept there. */
static int SUF(mha_heads_flash)(SUF(mha_seq) heads, SUF(mha_seq) q, SUF(mha_seq) k,
                                SUF(mha_seq) v, const T *mask, const int64_t mst[3],
                                const mha_problem *p, int64_t S2, mha_saved *keep)
{
    const int64_t N = p->N, H = p->H, L = p->L, hd = p->E / p->H;
    sdpa_problem *sp = mk_alloc(sizeof *sp);
    T *o = mha_alloc(N * H * L * hd, sizeof(T));
    double *lse = NULL;
    int rc = -1;
    if (keep != NULL) {
        keep->o = o;
        keep->lse = lse = mha_alloc(N * H * L, sizeof(double));   /* sdpa.h */
    }
    if (sp == NULL || o == NULL || (keep != NULL && lse == NULL))
        goto done;
    SUF(mha_sdpa_problem)(sp, q, k, v, mask, mst, p, S2);
    if (SUF(sdpa_forward)(o, lse, sp) < 0)
        goto done;
    SUF(mha_heads_copy)(o, heads, L, p, 1);
    rc = 0;
done:
    if (keep == NULL)
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

/* torch's q * math.sqrt(1.0 / head_dim) (the scalar in the tensor's dtype):
 * qs [N, H, L, hd]. */
static T SUF(mha_scale)(const mha_problem *p)
{
    return (T)sqrt(1.0 / (double)(p->E / p->H));
}

static T *SUF(mha_scaled_q)(SUF(mha_seq) q, const mha_problem *p)
{
    const int64_t N = p->N, H = p->H, L = p->L, hd = p->E / p->H;
    T *qs = mha_alloc(N * H * L * hd, sizeof(T));
    if (qs == NULL)
        return NULL;
    const T sc = SUF(mha_scale)(p);
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                const T *src = q.data + b * q.sb + i * q.si + h * hd;
                T *dst = qs + ((b * H + h) * L + i) * hd;
                for (int64_t d = 0; d < hd; d++)
                    dst[d] = src[d] * sc;
            }
    return qs;
}

/* Dropout on w [N*H, L, S2] (the weights, or their gradient in the backward):
 * entry (bh, i, j) zeroed where sdpa_dropout_uniform draws below dropout_p, the
 * others scaled by 1 / (1 - dropout_p) (zeros when dropout_p is 1). */
static void SUF(mha_dropout)(T *w, const mha_problem *p, int64_t S2)
{
    const T keep = p->dropout_p >= 1 ? (T)0 : (T)(1.0 / (1.0 - p->dropout_p));
    for (int64_t bh = 0; bh < p->N * p->H; bh++)
        for (int64_t i = 0; i < p->L; i++) {
            T *row = w + (bh * p->L + i) * S2;
            for (int64_t j = 0; j < S2; j++)
                row[j] = sdpa_dropout_uniform(p->dropout_seed, bh, i, j) < p->dropout_p
                         ? (T)0 : row[j] * keep;
        }
}

/* 4b. need_weights == 1: torch's order.  w [N, H, L, S2] gets the weights;
 * pw (or NULL) the weights before dropout. */
static int SUF(mha_heads_weights)(SUF(mha_seq) heads, SUF(mha_seq) q, SUF(mha_seq) k,
                                  SUF(mha_seq) v, const T *mask, const int64_t mst[3],
                                  const mha_problem *p, int64_t S2, T *w, T *pw)
{
    const int64_t N = p->N, H = p->H, L = p->L, hd = p->E / p->H;
    T *qs = SUF(mha_scaled_q)(q, p);
    if (qs == NULL)
        return -1;
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
        if (pw != NULL)
            memcpy(pw, w, (size_t)(N * H * L * S2) * sizeof(T));
        SUF(mha_dropout)(w, p, S2);
    }
    /* heads[b, :, h] = weights[b, h] @ v[b, :, h] */
    for (int64_t b = 0; b < N && rc == 0; b++)
        rc = SUF(bmm_forward)((mk_batch){heads.data + b * heads.sb, H, L, hd, hd, heads.si, 1},
                              (mk_cbatch){w + b * H * L * S2, H, L, S2, L * S2, S2, 1},
                              (mk_cbatch){v.data + b * v.sb, H, S2, hd, hd, v.si, 1});
    return rc;
}

static int SUF(mha_forward_body)(T *out, T *weights, const mha_problem *p, mha_saved *keep)
{
    const int64_t L = p->L, N = p->N, E = p->E, H = p->H;
    const int64_t S2 = p->S + (p->bias_k != NULL) + p->add_zero_attn;
    if (L == 0 || N == 0)
        return 0;   /* nothing to write */
    mha_saved own = {0};   /* what is freed here, unless kept */
    mha_saved *sv = keep != NULL ? keep : &own;
    T *proj = NULL, *kx = NULL, *vx = NULL, *mask = NULL, *heads = NULL, *w = NULL, *pw = NULL;
    SUF(mha_seq) q, k, v;
    int rc = -1;
    if (SUF(mha_project)(&proj, &q, &k, &v, p) < 0)
        goto done;
    if (S2 != p->S && (SUF(mha_extend)(&kx, &k, p->bias_k, p, S2) < 0
                       || SUF(mha_extend)(&vx, &v, p->bias_v, p, S2) < 0))
        goto done;
    if ((p->attn_mask != NULL || p->key_padding_mask != NULL)
            && (mask = SUF(mha_merge_masks)(p, S2, sv->mst)) == NULL)
        goto done;
    if ((heads = mha_alloc(L * N * E, sizeof(T))) == NULL)
        goto done;
    const SUF(mha_seq) hs = SUF(mha_seq_of)(heads, E, L, p);
    if (!p->need_weights) {
        if (SUF(mha_heads_flash)(hs, q, k, v, mask, sv->mst, p, S2, keep) < 0)
            goto done;
    } else {
        /* the per-head weights go straight to `weights` unless averaged or kept */
        const int own_w = p->average_weights || keep != NULL;
        w = own_w ? mha_alloc(N * H * L * S2, sizeof(T)) : weights;
        if (keep != NULL && p->dropout_p > 0 && (pw = mha_alloc(N * H * L * S2, sizeof(T))) == NULL)
            goto done;
        if (w == NULL || SUF(mha_heads_weights)(hs, q, k, v, mask, sv->mst, p, S2, w, pw) < 0)
            goto done;
        if (p->average_weights) {   /* torch's mean(dim=1): the sum, then / H */
            for (int64_t b = 0; b < N; b++)
                for (int64_t r = 0; r < L * S2; r++)
                    weights[b * L * S2 + r] =
                        SUF(mha_sum_heads)(w + b * H * L * S2 + r, H, L * S2) / (T)H;
        } else if (own_w) {
            memcpy(weights, w, (size_t)(N * H * L * S2) * sizeof(T));
        }
    }
    /* 5. out = heads @ out_proj.weight^T + out_proj.bias */
    rc = SUF(linear_forward)(mk_mat_c(out, L * N, E), mk_cmat_c(heads, L * N, E), p->w_out,
                             p->b_out);
done:
    sv->proj = proj;
    sv->kx = kx;
    sv->vx = vx;
    sv->mask = mask;
    sv->heads = heads;
    sv->w = w != weights ? w : NULL;
    sv->pw = pw;
    if (keep == NULL) {
        mha_saved_free(&own);
        return rc;
    }
    const int64_t hd = E / H, NHL = N * H * L;
    const int64_t Nm = sv->mst[0] != 0 ? N : 1, Hm = sv->mst[1] != 0 ? H : 1;
    const int64_t Lm = sv->mst[2] != 0 ? L : 1;
    keep->nbytes = (int64_t)sizeof(T)
                   * ((proj != NULL ? mha_layout_of(p).size : 0)
                      + (kx != NULL ? 2 * N * S2 * E : 0) + (mask != NULL ? Nm * Hm * Lm * S2 : 0)
                      + (heads != NULL ? L * N * E : 0) + (sv->w != NULL ? NHL * S2 : 0)
                      + (pw != NULL ? NHL * S2 : 0) + (keep->o != NULL ? NHL * hd : 0))
                   + (keep->lse != NULL ? NHL * (int64_t)sizeof(double) : 0);
    return rc;
}

/* ---- the backward ---------------------------------------------------------- */

/* The gradient of the projections' part that the heads see, need_weights == 1:
 * torch's ops in reverse (bmm, dropout, softmax, baddbmm, q * scale).
 * dq, dk, dv over the projections' gradients (dk, dv with S2 rows). */
static int SUF(mha_heads_weights_backward)(SUF(mha_seq) dq, SUF(mha_seq) dk, SUF(mha_seq) dv,
                                           SUF(mha_seq) dheads, SUF(mha_seq) q,
                                           SUF(mha_seq) k, SUF(mha_seq) v, const T *gw,
                                           const mha_problem *p, const mha_saved *s, int64_t S2)
{
    const int64_t N = p->N, H = p->H, L = p->L, hd = p->E / p->H, LS = L * S2;
    const T *w = s->w, *pw = s->pw != NULL ? s->pw : s->w;
    T *ds = mha_alloc(N * H * LS, sizeof(T)), *qs = SUF(mha_scaled_q)(q, p);
    int rc = -1;
    if (ds == NULL || qs == NULL)
        goto done;
    /* d(weights after dropout) = d_heads @ v^T (+ the weights' own cotangent) */
    for (int64_t b = 0; b < N; b++)
        if (SUF(bmm_forward)((mk_batch){ds + b * H * LS, H, L, S2, LS, S2, 1},
                             (mk_cbatch){dheads.data + b * dheads.sb, H, L, hd, hd, dheads.si, 1},
                             (mk_cbatch){v.data + b * v.sb, H, hd, S2, hd, 1, v.si}) < 0)
            goto done;
    if (gw != NULL)   /* averaged: mean's backward, the cotangent / H for every head */
        for (int64_t b = 0; b < N; b++)
            for (int64_t h = 0; h < H; h++) {
                T *d = ds + (b * H + h) * LS;
                const T *g = p->average_weights ? gw + b * LS : gw + (b * H + h) * LS;
                for (int64_t r = 0; r < LS; r++)
                    d[r] += p->average_weights ? g[r] / (T)H : g[r];
            }
    if (p->dropout_p > 0)   /* dropout's backward: the same mask and scale */
        SUF(mha_dropout)(ds, p, S2);
    SUF(softmax_backward)(ds, ds, pw, N * H * L, S2, 1);
    const T sc = SUF(mha_scale)(p);
    for (int64_t b = 0; b < N; b++) {
        const T *dsb = ds + b * H * LS, *wb = w + b * H * LS;
        /* d(q_scaled) = ds @ k, d k = ds^T @ q_scaled, d v = weights^T @ d_heads */
        if (SUF(bmm_forward)((mk_batch){dq.data + b * dq.sb, H, L, hd, hd, dq.si, 1},
                             (mk_cbatch){dsb, H, L, S2, LS, S2, 1},
                             (mk_cbatch){k.data + b * k.sb, H, S2, hd, hd, k.si, 1}) < 0
                || SUF(bmm_forward)((mk_batch){dk.data + b * dk.sb, H, S2, hd, hd, dk.si, 1},
                                    (mk_cbatch){dsb, H, S2, L, LS, 1, S2},
                                    (mk_cbatch){qs + b * H * L * hd, H, L, hd, L * hd, hd, 1}) < 0
                || SUF(bmm_forward)((mk_batch){dv.data + b * dv.sb, H, S2, hd, hd, dv.si, 1},
                                    (mk_cbatch){wb, H, S2, L, LS, 1, S2},
                                    (mk_cbatch){dheads.data + b * dheads.sb, H, L, hd, hd,
                                                dheads.si, 1}) < 0)
            goto done;
        for (int64_t i = 0; i < L; i++) {   /* q * scale's backward */
            T *row = dq.data + b * dq.sb + i * dq.si;
            for (int64_t c = 0; c < p->E; c++)
                row[c] *= sc;
        }
    }
    rc = 0;
done:
    mk_free(qs);
    mk_free(ds);
    return rc;
}

/* need_weights == 0: the flash kernel's backward from the kept o and lse. */
static int SUF(mha_heads_flash_backward)(SUF(mha_seq) dq, SUF(mha_seq) dk, SUF(mha_seq) dv,
                                         SUF(mha_seq) dheads, SUF(mha_seq) q, SUF(mha_seq) k,
                                         SUF(mha_seq) v, const mha_problem *p,
                                         const mha_saved *s, int64_t S2)
{
    const int64_t N = p->N, H = p->H, L = p->L, hd = p->E / p->H;
    sdpa_problem *sp = mk_alloc(sizeof *sp);
    T *buf = mha_alloc(N * H * hd * (2 * L + 2 * S2), sizeof(T));
    int rc = -1;
    if (sp == NULL || buf == NULL)
        goto done;
    T *dout = buf, *dq4 = dout + N * H * L * hd, *dk4 = dq4 + N * H * L * hd;
    T *dv4 = dk4 + N * H * S2 * hd;
    SUF(mha_sdpa_problem)(sp, q, k, v, s->mask, s->mst, p, S2);
    SUF(mha_heads_copy)(dout, dheads, L, p, 0);
    const sdpa_grads g = {dq4, dk4, dv4, dout, s->o, s->lse};
    if (SUF(sdpa_backward)(&g, sp) < 0)
        goto done;
    SUF(mha_heads_copy)(dq4, dq, L, p, 1);
    SUF(mha_heads_copy)(dk4, dk, S2, p, 1);
    SUF(mha_heads_copy)(dv4, dv, S2, p, 1);
    rc = 0;
done:
    mk_free(buf);
    mk_free(sp);
    return rc;
}

/* The appended rows' gradients: rows i < S of dx [N, S2, E] into d (the
 * projection's gradient), the bias row summed over the batch into dbias. */
static void SUF(mha_unextend)(SUF(mha_seq) d, const T *dx, T *dbias, const mha_problem *p,
                              int64_t S2)
{
    const int64_t N = p->N, S = p->S, E = p->E;
    for (int64_t b = 0; b < N; b++)
        for (int64_t i = 0; i < S; i++)
            memcpy(d.data + b * d.sb + i * d.si, dx + (b * S2 + i) * E, (size_t)E * sizeof(T));
    if (dbias == NULL)
        return;
    for (int64_t c = 0; c < E; c++) {
        T acc = 0;
        for (int64_t b = 0; b < N; b++)
            acc += dx[(b * S2 + S) * E + c];
        dbias[c] = acc;
    }
}

static int SUF(mha_backward_body)(const mha_grads *g, const mha_problem *p, const mha_saved *s)
{
    const int64_t L = p->L, N = p->N, E = p->E, S = p->S, LN = L * N, SN = S * N;
    const int64_t S2 = S + (p->bias_k != NULL) + p->add_zero_attn;
    const int64_t rows[3] = {LN, SN, SN}, dims[3] = {E, p->w_k.cols, p->w_v.cols};
    const void *inputs[3] = {p->query, p->key, p->value};
    void *d_inputs[3] = {g->d_query, g->d_key, g->d_value};
    const mk_cmat ws[3] = {p->w_q, p->w_k, p->w_v};
    if (L == 0 || N == 0) {   /* no output: every gradient is zero */
        for (int t = 0; t < 3; t++) {
            memset(d_inputs[t], 0, (size_t)(rows[t] * dims[t]) * sizeof(T));
            memset(g->d_w[t], 0, (size_t)(E * dims[t]) * sizeof(T));
        }
        void *vecs[4] = {g->d_b_in, g->d_bias_k, g->d_bias_v, g->d_b_out};
        const int64_t lens[4] = {3 * E, E, E, E};
        for (int i = 0; i < 4; i++)
            if (vecs[i] != NULL)
                memset(vecs[i], 0, (size_t)lens[i] * sizeof(T));
        memset(g->d_w_out, 0, (size_t)(E * E) * sizeof(T));
        return 0;
    }
    const mha_layout lay = mha_layout_of(p);
    T *dheads = mha_alloc(LN * E, sizeof(T)), *dproj = mha_alloc(lay.size, sizeof(T));
    T *dkx = NULL, *dvx = NULL;
    int rc = -1;
    if (dheads == NULL || dproj == NULL)
        goto done;
    /* 5. out_proj */
    if (SUF(linear_backward)(mk_mat_c(dheads, LN, E), mk_mat_c(g->d_w_out, E, E), g->d_b_out,
                             mk_cmat_c(g->d_out, LN, E), mk_cmat_c(s->heads, LN, E),
                             p->w_out) < 0)
        goto done;
    /* 4. the heads, into the projections' gradients (laid out as proj) */
    SUF(mha_seq) q, k, v, dq, dk, dv;
    SUF(mha_views)(s->proj, &q, &k, &v, p);
    SUF(mha_views)(dproj, &dq, &dk, &dv, p);
    SUF(mha_seq) dkh = dk, dvh = dv;   /* where the heads write: S2 rows */
    if (S2 != S) {
        if ((dkx = mha_alloc(N * S2 * E, sizeof(T))) == NULL
                || (dvx = mha_alloc(N * S2 * E, sizeof(T))) == NULL)
            goto done;
        k = (SUF(mha_seq)){s->kx, S2 * E, E};
        v = (SUF(mha_seq)){s->vx, S2 * E, E};
        dkh = (SUF(mha_seq)){dkx, S2 * E, E};
        dvh = (SUF(mha_seq)){dvx, S2 * E, E};
    }
    const SUF(mha_seq) hs = SUF(mha_seq_of)(dheads, E, L, p);
    rc = p->need_weights
         ? SUF(mha_heads_weights_backward)(dq, dkh, dvh, hs, q, k, v, g->d_weights, p, s, S2)
         : SUF(mha_heads_flash_backward)(dq, dkh, dvh, hs, q, k, v, p, s, S2);
    if (rc < 0)
        goto done;
    rc = -1;
    /* 2. the appended rows */
    if (S2 != S) {
        SUF(mha_unextend)(dk, dkx, g->d_bias_k, p, S2);
        SUF(mha_unextend)(dv, dvx, g->d_bias_v, p, S2);
    }
    /* 1. the in-projections: each input its own gradient */
    for (int t = 0; t < 3; t++) {
        T *db = g->d_b_in != NULL ? (T *)g->d_b_in + t * E : NULL;
        const mk_cmat dy = {dproj + lay.off[t], rows[t], E, lay.rs[t], 1};
        if (SUF(linear_backward)(mk_mat_c(d_inputs[t], rows[t], dims[t]),
                                 mk_mat_c(g->d_w[t], E, dims[t]), db, dy,
                                 mk_cmat_c(inputs[t], rows[t], dims[t]), ws[t]) < 0)
            goto done;
    }
    rc = 0;
done:
    mk_free(dvx);
    mk_free(dkx);
    mk_free(dproj);
    mk_free(dheads);
    return rc;
}

#undef T
#undef SUF
