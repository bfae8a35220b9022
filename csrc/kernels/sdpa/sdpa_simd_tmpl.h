/* The SIMD forward of SDPA (sdpa_internal.h's state), written once for both
 * dtypes and both vector instruction sets: included by sdpa_avx2.c and
 * sdpa_avx512.c (after their vocabulary, simd_avx2.h / simd_avx512.h) with
 *   T              float or double
 *   VEC(op)        the vocabulary of T's vectors
 *   SDPA_MR        query rows per register tile
 *   SDPA_NV        vectors of columns per register tile (NR = NV * VEC(len))
 *   SDPA_VEXP(x)   the path's vector exp of T (torch's exp_u20 for float32,
 *                  Sleef's exp_u10 for float64, as torch's flash forward)
 *   SDPA_EXP(x)    the scalar exp of T (libm's expf / exp: torch's tails)
 *   SDPA_COPY_T    gemm_copy_avx.h's transposing copy of T
 *   SDPA_KEEP(p)   a VEC(mask) of the VEC(len) bytes at p: lanes whose byte is nonzero
 *   SDPA_NAME      the prefix of the functions defined (sdpa_f32_avx512)
 * defined; it defines NAME_ws_elems, NAME_state and NAME_exp and undefines
 * its parameters at its end.  No include guard on purpose.
 *
 * The query rows are copied once (1.).  Per block of SDPA_KV_SPLIT keys, K^T
 * is packed once into panels of NR keys (K^T[p, j] at panel[p * NR + j]) and v
 * is read in place (copied only when its columns are strided) (2.); then each
 * strip of MR query rows runs, with its scores never leaving L1:
 *   3. s[MR, kb] = q @ k^T by MR x NR register tiles, whose epilogue applies
 *      causal, scale and mask and keeps each row's running maximum;
 *   4. each row: exp(s - max) and its sum (the lanes, then torch's tree, then
 *      the tail with libm's exp), the rescale of what came before;
 *   5. dropout: the dropped weights zeroed;
 *   6. o[MR, Ev] = o * rescale + p @ v by MR x NR tiles.
 * Each step is a function of its own, always inlined into FN(_state): one
 * loop nest, no calls inside it.
 * Causal: a strip computes only the keys its last row sees (the others'
 * weights are 0, so the sums are the same).
 *
 * Arithmetic, per output, as sdpa_forward_tmpl.h's loops over the GEMM (its summation
 * contract, gemm_internal.h): float32 sums E (the scores) and the block's keys
 * (o) in blocks of gemm_sum_block, each from zero with one FMA per term in
 * increasing order, the blocks added in order onto o * rescale; float64 one
 * FMA chain continuing from o * rescale.  Every layout gives the same bits:
 * q is copied, k packed, v read or copied, all exactly. */

#if !defined(T) || !defined(VEC) || !defined(SDPA_MR) || !defined(SDPA_NV) \
    || !defined(SDPA_VEXP) || !defined(SDPA_EXP) || !defined(SDPA_KEEP) || !defined(SDPA_NAME) \
    || !defined(SDPA_COPY_T)
#error "sdpa_simd_tmpl.h: define T, VEC, SDPA_MR, SDPA_NV, SDPA_VEXP, SDPA_EXP, SDPA_KEEP, SDPA_NAME"
#endif

#define SDPA_CAT_(x, y) x##y
#define SDPA_CAT(x, y) SDPA_CAT_(x, y)
#define FN(suffix) SDPA_CAT(SDPA_NAME, suffix)
#define VL VEC(len)
#define NR (SDPA_NV * VEC(len))
/* keys of a block rounded up to whole panels; elements per 64 bytes */
#define KBP ((SDPA_KV_SPLIT + NR - 1) / NR * NR)
#define ALIGN_ELEMS (64 / (int64_t)sizeof(T))

static int64_t FN(_round)(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/* acc[v][i] += A[i, p] * B[p, v * VL:(v + 1) * VL] for p0 <= p < p1, i < MR,
 * v < NV, A[i, p] at a[i * ars + p], B[p, :] at b + p * brs (the last vector
 * only in the lanes of `last` when masked). */
static inline __attribute__((always_inline))
void FN(_fma)(int NV, VEC(t) acc[SDPA_NV][SDPA_MR], int64_t p0, int64_t p1, const T *a,
              int64_t ars, const T *b, int64_t brs, int masked, VEC(mask) last)
{
    for (int64_t p = p0; p < p1; p++) {
        const T *b_p = b + p * brs;
        VEC(t) bv[SDPA_NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = masked && v == NV - 1 ? VEC(load_or)(last, b_p + v * VL, VEC(zero)())
                                          : VEC(loadu)(b_p + v * VL);
#pragma GCC unroll 8
        for (int i = 0; i < SDPA_MR; i++) {
            const VEC(t) a_ip = VEC(set1)(a[i * ars + p]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[v][i] = VEC(fma)(a_ip, bv[v], acc[v][i]);
        }
    }
}

static inline __attribute__((always_inline))
void FN(_zero)(VEC(t) acc[SDPA_NV][SDPA_MR])
{
#pragma GCC unroll 8
    for (int i = 0; i < SDPA_MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < SDPA_NV; v++)
            acc[v][i] = VEC(zero)();
}

/* The lanes of a vector of keys that take part: the first `count` (clamped) */
static inline __attribute__((always_inline)) VEC(mask) FN(_first)(int64_t count)
{
    return VEC(mask_first)((int)(count < 0 ? 0 : count > VL ? VL : count));
}

/* What the strip's tile epilogue needs to know. */
typedef struct {
    const sdpa_problem *p;
    T scale;
    int64_t n, kb;                 /* the block's first key and its length */
    int64_t seen[SDPA_MR];         /* keys of the block each row sees (causal), else kb */
    const void *mask[SDPA_MR];     /* each row's mask at key n, or NULL */
} FN(_tile_ctx);

/* acc[v][i] stored to tile[i * ld + v * VL] (constant indices: the
 * accumulators stay in registers; the epilogues then run from memory) */
static inline __attribute__((always_inline))
void FN(_store)(VEC(t) acc[SDPA_NV][SDPA_MR], T *tile, int64_t ld)
{
#pragma GCC unroll 8
    for (int i = 0; i < SDPA_MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < SDPA_NV; v++)
            VEC(storeu)(tile + i * ld + v * VL, acc[v][i]);
}

/* One tile of scores: s[0:MR, c0:c0+NV*VL] (s rows KBP apart) from the
 * strip's query rows qs [MR, E] and the K^T panel kp [E, NR] (its first NV
 * vectors: the caller's NV covers the keys the strip sees); E summed in blocks
 * of ecb (float32), the partial sums kept in s between blocks.  Epilogue per
 * row of the first `mr`: -inf where causal hides a key, * scale, + mask, -inf
 * past kb; the row's running maximum rmax[i] (NaN skipped) updated. */
static inline __attribute__((always_inline))
void FN(_score_tile)(int NV, const FN(_tile_ctx) *c, int mr, int64_t c0, const T *qs,
                     int64_t E, int64_t ecb, const T *kp, T *s, VEC(t) *rmax)
{
    VEC(t) acc[SDPA_NV][SDPA_MR];
    const VEC(mask) none = VEC(mask_first)(0);
    for (int64_t e0 = 0; e0 < E; e0 += ecb) {
        const int64_t e1 = e0 + ecb < E ? e0 + ecb : E;
        FN(_zero)(acc);
        FN(_fma)(NV, acc, e0, e1, qs, E, kp, NR, 0, none);
#pragma GCC unroll 8
        for (int i = 0; i < SDPA_MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                T *s_iv = s + i * KBP + c0 + v * VL;
                VEC(storeu)(s_iv, e0 > 0 ? VEC(add)(VEC(loadu)(s_iv), acc[v][i]) : acc[v][i]);
            }
    }
    const sdpa_problem *p = c->p;
    const VEC(t) ninf = VEC(set1)(-INFINITY), zero = VEC(zero)(), scale = VEC(set1)(c->scale);
    for (int i = 0; i < mr; i++) {
        T *s_row = s + i * KBP;
        VEC(t) mx = rmax[i];
        for (int v = 0; v < NV; v++) {
            const int64_t col = c0 + v * VL;
            VEC(t) x = VEC(loadu)(s_row + col);
            if (c->seen[i] < col + VL)   /* causal: -inf before the scale, as torch */
                x = VEC(blend)(FN(_first)(c->seen[i] - col), ninf, x);
            x = VEC(mul)(x, scale);
            const int64_t valid = c->kb - col < VL ? c->kb - col : VL;
            if (p->mask_kind == SDPA_MASK_FLOAT && valid > 0) {
                const T *m = (const T *)c->mask[i] + col * p->mask.cs;
                VEC(t) mv;
                if (p->mask.cs == 1) {
                    mv = valid == VL ? VEC(loadu)(m) : VEC(load_or)(FN(_first)(valid), m, zero);
                } else {
                    T tmp[VL];
                    for (int l = 0; l < VL; l++)
                        tmp[l] = l < valid ? m[l * p->mask.cs] : 0;
                    mv = VEC(loadu)(tmp);
                }
                x = VEC(add)(x, mv);
            } else if (p->mask_kind == SDPA_MASK_BOOL && valid > 0) {
                const unsigned char *m = (const unsigned char *)c->mask[i] + col * p->mask.cs;
                VEC(mask) keep;
                if (p->mask.cs == 1 && valid == VL) {
                    keep = SDPA_KEEP(m);
                } else {
                    unsigned char tmp[VL];
                    for (int l = 0; l < VL; l++)
                        tmp[l] = l < valid ? m[l * p->mask.cs] : 0;
                    keep = SDPA_KEEP(tmp);
                }
                x = VEC(add)(x, VEC(blend)(keep, ninf, zero));
            }
            if (valid < VL)
                x = VEC(blend)(FN(_first)(valid), ninf, x);
            VEC(storeu)(s_row + col, x);
            mx = VEC(max)(x, mx);   /* a NaN x leaves mx */
        }
        rmax[i] = mx;
    }
}

/* o[0:mr, c0:c0+NV*VL] (rows Ev apart; the last vector in the lanes of `last`
 * when masked) = o * resc + pr[0:mr, 0:lim] @ v[0:lim, c0:...] (pr rows KBP
 * apart, v rows vrs apart), the keys summed in blocks of kcb from zero and
 * added in order (float32), or one chain from o * resc (float64). */
static inline __attribute__((always_inline))
void FN(_pv_panel)(int NV, int mr, const T *pr, int64_t lim, int64_t kcb, const T *v,
                   int64_t vrs, T *o, int64_t Ev, const T *resc, int masked, VEC(mask) last)
{
    VEC(t) acc[SDPA_NV][SDPA_MR];
    _Alignas(64) T tile[SDPA_MR * NR];
    if (GEMM_CHAINS(T)) {
        /* the chain starts from o * resc (rows past mr: 0) */
        for (int i = 0; i < SDPA_MR; i++)
            for (int u = 0; u < NV; u++) {
                VEC(t) ov = VEC(zero)();
                if (i < mr) {
                    const T *o_iu = o + i * Ev + u * VL;
                    ov = masked && u == NV - 1 ? VEC(load_or)(last, o_iu, VEC(zero)())
                                               : VEC(loadu)(o_iu);
                    ov = VEC(mul)(ov, VEC(set1)(resc[i]));
                }
                VEC(storeu)(tile + i * NR + u * VL, ov);
            }
#pragma GCC unroll 8
        for (int i = 0; i < SDPA_MR; i++)
#pragma GCC unroll 4
            for (int u = 0; u < SDPA_NV; u++)
                acc[u][i] = u < NV ? VEC(loadu)(tile + i * NR + u * VL) : VEC(zero)();
        FN(_fma)(NV, acc, 0, lim, pr, KBP, v, vrs, masked, last);
        FN(_store)(acc, tile, NR);
        for (int i = 0; i < mr; i++)
            for (int u = 0; u < NV; u++) {
                const VEC(t) r = VEC(loadu)(tile + i * NR + u * VL);
                if (masked && u == NV - 1)
                    VEC(store_mask)(o + i * Ev + u * VL, last, r);
                else
                    VEC(storeu)(o + i * Ev + u * VL, r);
            }
        return;
    }
    for (int64_t p0 = 0; p0 < lim; p0 += kcb) {
        const int64_t p1 = p0 + kcb < lim ? p0 + kcb : lim;
        FN(_zero)(acc);
        FN(_fma)(NV, acc, p0, p1, pr, KBP, v, vrs, masked, last);
        FN(_store)(acc, tile, NR);
        for (int i = 0; i < mr; i++) {
            const VEC(t) r = VEC(set1)(resc[i]);
            for (int u = 0; u < NV; u++) {
                T *o_iu = o + i * Ev + u * VL;
                const int m = masked && u == NV - 1;
                VEC(t) ov = m ? VEC(load_or)(last, o_iu, VEC(zero)()) : VEC(loadu)(o_iu);
                if (p0 == 0)
                    ov = VEC(mul)(ov, r);
                ov = VEC(add)(ov, VEC(loadu)(tile + i * NR + u * VL));
                if (m)
                    VEC(store_mask)(o_iu, last, ov);
                else
                    VEC(storeu)(o_iu, ov);
            }
        }
    }
}

/* The regions of FN(_state)'s workspace, in order, each rounded up to 64 bytes:
 *   qbuf [round(nrows, MR), E]      the query rows, contiguous (padding rows 0)
 *   kp   [KBP / NR][E][NR]          K^T of the key block, in panels of NR keys
 *   vp   [SDPA_KV_SPLIT, Ev]        v of the key block, when its columns are strided
 *   sbuf [MR, KBP]                  a strip's scores, then its weights
 *   resc [MR]                       each row's rescale of what came before */
typedef struct {
    T *qbuf, *kp, *vp, *sbuf, *resc;
} FN(_ws);

/* The elements of the regions for `nrows` query rows; with ws != NULL, w's
 * pointers into ws.  (Sizes and offsets in one place, for ws_elems and state.) */
static size_t FN(_carve)(FN(_ws) *w, T *ws, const sdpa_problem *p, int64_t nrows)
{
    const int64_t size[5] = {FN(_round)(nrows, SDPA_MR) * p->E, KBP * p->E,
                             p->v.cs != 1 ? SDPA_KV_SPLIT * p->Ev : 0, SDPA_MR * KBP, SDPA_MR};
    T **const region[5] = {&w->qbuf, &w->kp, &w->vp, &w->sbuf, &w->resc};
    int64_t off = 0;
    for (int r = 0; r < 5; r++) {
        if (ws != NULL)
            *region[r] = ws + off;
        off += FN(_round)(size[r], ALIGN_ELEMS);
    }
    return (size_t)off;
}

static size_t FN(_ws_elems)(const sdpa_problem *p, int64_t max_rows)
{
    FN(_ws) sizes_only;
    return FN(_carve)(&sizes_only, NULL, p, max_rows);
}

/* 1. The query rows into qbuf [round(n, MR), E], contiguous (prescale: times
 *    +-sqrt(|scale|)); padding rows 0. */
static inline __attribute__((always_inline))
void FN(_copy_queries)(const sdpa_problem *p, const sdpa_rows *rows, T *qbuf)
{
    const int64_t E = p->E, nrows = rows->n, rows_pad = FN(_round)(nrows, SDPA_MR);
    const T root = (T)sqrt(fabs(p->scale));
    const T q_factor = p->prescale ? (p->scale < 0 ? -root : root) : (T)1;
    for (int64_t r = 0; r < rows_pad; r++) {
        const T *q = r < nrows ? (const T *)rows->q[r] : NULL;
        for (int64_t c = 0; c < E; c++)
            qbuf[r * E + c] = q == NULL ? (T)0
                              : p->prescale ? q[c * p->q.cs] * q_factor : q[c * p->q.cs];
    }
}

/* The online softmax's start (row_max -inf, row_sum 0, o [n, Ev] 0); returns
 * the end of the keys any row sees: k1, causal at most the last row's + 1. */
static inline __attribute__((always_inline))
int64_t FN(_start_rows)(const sdpa_problem *p, const sdpa_rows *rows, int64_t k1, T *o,
                        T *row_max, T *row_sum)
{
    const int64_t Ev = p->Ev;
    int64_t last_row = -1;
    for (int64_t r = 0; r < rows->n; r++) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0;
        for (int64_t c = 0; c < Ev; c++)
            o[r * Ev + c] = 0;
        last_row = rows->i[r] > last_row ? rows->i[r] : last_row;
    }
    return p->is_causal && last_row + 1 < k1 ? last_row + 1 : k1;
}

/* 2. K^T of keys [n, n + used) into the panels kp (K^T[c, j] at
 *    kp[(j / NR) * NR * E + c * NR + j % NR]; zero past `used` in the last
 *    panel; prescale: times sqrt(|scale|)). */
static inline __attribute__((always_inline))
void FN(_pack_keys)(const sdpa_problem *p, T *kp, const T *k, int64_t n, int64_t used)
{
    const int64_t E = p->E;
    const T k_factor = p->prescale ? (T)sqrt(fabs(p->scale)) : (T)1;
    for (int64_t j0 = 0; j0 < used; j0 += NR) {
        T *panel = kp + j0 * E;
        if (p->k.cs == 1) {   /* rows of k: the transposing copy through registers */
            const int64_t nb = used - j0 < NR ? used - j0 : NR;
            SDPA_COPY_T(panel, NR, k + (n + j0) * p->k.rs, p->k.rs, E, nb);
            if (p->prescale)   /* the vectors that hold keys */
                for (int64_t c = 0; c < E; c++)
                    for (int64_t j = 0; j < nb; j += VL)
                        VEC(storeu)(panel + c * NR + j,
                                    VEC(mul)(VEC(loadu)(panel + c * NR + j),
                                             VEC(set1)(k_factor)));
            continue;
        }
        for (int64_t j = 0; j < NR; j++) {
            const T *kr = k + (n + j0 + j) * p->k.rs;
            if (j0 + j >= used)
                for (int64_t c = 0; c < E; c++)
                    panel[c * NR + j] = 0;
            else if (p->prescale)
                for (int64_t c = 0; c < E; c++)
                    panel[c * NR + j] = kr[c * p->k.cs] * k_factor;
            else
                for (int64_t c = 0; c < E; c++)
                    panel[c * NR + j] = kr[c * p->k.cs];
        }
    }
}

/*    v of keys [n, n + used): in place (*vrs = its row stride), or, when its
 *    columns are strided, copied into vp [used, Ev] (*vrs = Ev). */
static inline __attribute__((always_inline))
const T *FN(_block_values)(const sdpa_problem *p, T *vp, const T *v, int64_t n, int64_t used,
                           int64_t *vrs)
{
    const int64_t Ev = p->Ev;
    const T *vs = v + n * p->v.rs;
    *vrs = p->v.rs;
    if (p->v.cs == 1)
        return vs;
    for (int64_t j = 0; j < used; j++)
        for (int64_t c = 0; c < Ev; c++)
            vp[j * Ev + c] = vs[j * p->v.rs + c * p->v.cs];
    *vrs = Ev;
    return vp;
}

/* The strip of rows [s0, s0 + mr) into ctx: the keys of the block each row
 * sees (causal; 0 for the padding rows) and its mask at the block's first key.
 * Returns the keys the strip sees (0: causal, none of these nor later ones). */
static inline __attribute__((always_inline))
int64_t FN(_strip_keys)(FN(_tile_ctx) *ctx, const sdpa_rows *rows, int64_t s0, int mr)
{
    const sdpa_problem *p = ctx->p;
    const int64_t n = ctx->n, kb = ctx->kb;
    int64_t lim = 0;
    for (int i = 0; i < SDPA_MR; i++) {
        int64_t seen = kb;
        if (i < mr && p->is_causal) {
            seen = rows->i[s0 + i] + 1 - n;
            seen = seen < 0 ? 0 : seen > kb ? kb : seen;
        }
        ctx->seen[i] = i < mr ? seen : 0;
        ctx->mask[i] = NULL;
        if (i < mr && p->mask_kind == SDPA_MASK_FLOAT)
            ctx->mask[i] = (const T *)rows->mask[s0 + i] + n * p->mask.cs;
        else if (i < mr && p->mask_kind == SDPA_MASK_BOOL)
            ctx->mask[i] = (const unsigned char *)rows->mask[s0 + i] + n * p->mask.cs;
        lim = i < mr && seen > lim ? seen : lim;
    }
    return lim;
}

/* 3. The strip's scores s[MR, 0:lim] (rows KBP apart) from its query rows qs
 *    [MR, E] and the panels kp, tile by tile; rmax[i]: row i's maximum (NaN
 *    skipped, -inf for none). */
static inline __attribute__((always_inline))
void FN(_strip_scores)(const FN(_tile_ctx) *ctx, int mr, int64_t lim, const T *qs, int64_t E,
                       int64_t ecb, const T *kp, T *s, VEC(t) rmax[SDPA_MR])
{
    for (int i = 0; i < SDPA_MR; i++)
        rmax[i] = VEC(set1)(-INFINITY);
    for (int64_t c0 = 0; c0 < lim; c0 += NR) {
        const int64_t vecs = (lim - c0 + VL - 1) / VL;   /* few keys: fewer vectors */
        switch (vecs < SDPA_NV ? (int)vecs : SDPA_NV) {
#define SDPA_SCORES(NVC)                                                       \
    case NVC:                                                                  \
        FN(_score_tile)(NVC, ctx, mr, c0, qs, E, ecb, kp + c0 * E, s, rmax);   \
        break;
        SDPA_SCORES(1)
#if SDPA_NV >= 2
        SDPA_SCORES(2)
#endif
#if SDPA_NV >= 3
        SDPA_SCORES(3)
#endif
#if SDPA_NV >= 4
        SDPA_SCORES(4)
#endif
#undef SDPA_SCORES
        default: break;
        }
    }
}

/* 4. One row of the strip: s[j] <- exp(s[j] - max) for j < lim (the body
 *    kb - kb % VL in vectors summed in lanes, then torch's tree, then the tail
 *    with the scalar exp), the running max and sum updated, *resc the rescale
 *    of what came before; rmax the row's maximum from its score tiles. */
static inline __attribute__((always_inline))
void FN(_row_weights)(T *s, VEC(t) rmax, int64_t lim, int64_t kb, T *row_max, T *row_sum,
                      T *resc)
{
    const int64_t body = kb - kb % VL;
    T lanes[VL];
    VEC(storeu)(lanes, rmax);
    T mx = -INFINITY;
    for (int l = 0; l < VL; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    if (mx == -INFINITY)   /* a NaN the maximum skipped */
        for (int64_t j = 0; j < lim; j++)
            if (s[j] != s[j]) {
                mx = s[j];
                break;
            }
    mx = *row_max > mx ? *row_max : mx;
    if (mx == -INFINITY) {   /* every key so far masked: nothing to add */
        for (int64_t j = 0; j < lim; j++)
            s[j] = 0;
        *resc = 1;
        return;
    }
    const VEC(t) mxv = VEC(set1)(mx);
    VEC(t) acc = VEC(zero)();
    int64_t j = 0;
    for (; j < body && j < lim; j += VL) {
        const VEC(t) e = SDPA_VEXP(VEC(sub)(VEC(loadu)(s + j), mxv));
        acc = VEC(add)(acc, e);
        VEC(storeu)(s + j, e);
    }
    T sum = VEC(reduce_add)(acc);
    for (j = body; j < lim; j++) {
        const T e = SDPA_EXP(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    *resc = SDPA_EXP(*row_max - mx);
    *row_sum = sum + *resc * *row_sum;
    *row_max = mx;
}

/* 5. Dropout: the dropped weights of the strip's rows out of the product (the
 *    row sums keep them). */
static inline __attribute__((always_inline))
void FN(_strip_dropout)(const sdpa_problem *p, const sdpa_rows *rows, int64_t s0, int mr,
                        int64_t n, int64_t lim, T *s)
{
    for (int i = 0; i < mr; i++)
        for (int64_t j = 0; j < lim; j++)
            if (sdpa_dropout_uniform(p->dropout_seed, rows->b[s0 + i], rows->i[s0 + i], n + j)
                    < p->dropout_p)
                s[i * KBP + j] = 0;
}

/* 6. os[mr, Ev] = os * resc + s[mr, 0:lim] @ vs[0:lim, Ev], NR columns at a
 *    time (vs rows vrs apart). */
static inline __attribute__((always_inline))
void FN(_strip_pv)(int mr, const T *s, int64_t lim, int64_t kcb, const T *vs, int64_t vrs,
                   T *os, int64_t Ev, const T *resc)
{
    for (int64_t c0 = 0; c0 < Ev; c0 += NR) {
        const int64_t cols = Ev - c0 < NR ? Ev - c0 : NR;
        const int nv = (int)((cols + VL - 1) / VL);
        const int masked = cols % VL != 0;
        const VEC(mask) last = FN(_first)(cols - (nv - 1) * VL);
        switch (nv) {
#define SDPA_PV(NVC)                                                                     \
    case NVC:                                                                            \
        FN(_pv_panel)(NVC, mr, s, lim, kcb, vs + c0, vrs, os + c0, Ev, resc, masked,     \
                      last);                                                             \
        break;
        SDPA_PV(1)
#if SDPA_NV >= 2
        SDPA_PV(2)
#endif
#if SDPA_NV >= 3
        SDPA_PV(3)
#endif
#if SDPA_NV >= 4
        SDPA_PV(4)
#endif
#undef SDPA_PV
        default: break;
        }
    }
}

/* sdpa_internal.h's state: per key block, steps 2 once, then for each strip
 * of MR rows steps 3 to 6 (the helpers above, inlined: one loop nest). */
static int FN(_state)(const sdpa_problem *p, T *ws, const sdpa_rows *rows, const T *k,
                      const T *v, int64_t k0, int64_t k1, T *o, T *row_max, T *row_sum)
{
    const int64_t E = p->E, Ev = p->Ev, S = p->S, nrows = rows->n;
    FN(_ws) w;
    FN(_carve)(&w, ws, p, nrows);
    FN(_copy_queries)(p, rows, w.qbuf);
    const int64_t num_keys = FN(_start_rows)(p, rows, k1, o, row_max, row_sum);
    const int64_t ecb = GEMM_CHAINS(T) ? E : gemm_sum_block(E);
    FN(_tile_ctx) ctx = {.p = p, .scale = p->prescale ? (T)1 : (T)p->scale};

    for (int64_t n = k0; n < num_keys; n += SDPA_KV_SPLIT) {
        const int64_t kb = S - n < SDPA_KV_SPLIT ? S - n : SDPA_KV_SPLIT;
        const int64_t used = num_keys - n < kb ? num_keys - n : kb;   /* keys anyone sees */
        const int64_t kcb = GEMM_CHAINS(T) ? kb : gemm_sum_block(kb);
        FN(_pack_keys)(p, w.kp, k, n, used);
        int64_t vrs;
        const T *vs = FN(_block_values)(p, w.vp, v, n, used, &vrs);
        ctx.n = n;
        ctx.kb = kb;

        for (int64_t s0 = 0; s0 < nrows; s0 += SDPA_MR) {
            const int mr = nrows - s0 < SDPA_MR ? (int)(nrows - s0) : SDPA_MR;
            const int64_t lim = FN(_strip_keys)(&ctx, rows, s0, mr);
            if (lim == 0)
                continue;   /* causal: no row of the strip sees these keys (nor later ones) */
            VEC(t) rmax[SDPA_MR];
            FN(_strip_scores)(&ctx, mr, lim, w.qbuf + s0 * E, E, ecb, w.kp, w.sbuf, rmax);
            for (int i = 0; i < mr; i++)
                FN(_row_weights)(w.sbuf + i * KBP, rmax[i], lim, kb, row_max + s0 + i,
                                 row_sum + s0 + i, w.resc + i);
            if (p->dropout_p > 0)
                FN(_strip_dropout)(p, rows, s0, mr, n, lim, w.sbuf);
            FN(_strip_pv)(mr, w.sbuf, lim, kcb, vs, vrs, o + s0 * Ev, Ev, w.resc);
        }
    }
    return 0;
}

/* out[i] = exp(inp[i]): SDPA_VEXP over whole vectors, the tail through a
 * zero-padded vector (in place allowed) */
static void FN(_exp)(T *out, const T *inp, int64_t n)
{
    int64_t j = 0;
    for (; j + VL <= n; j += VL)
        VEC(storeu)(out + j, SDPA_VEXP(VEC(loadu)(inp + j)));
    if (j < n) {
        T tmp[VL];
        for (int l = 0; l < VL; l++)
            tmp[l] = j + l < n ? inp[j + l] : 0;
        VEC(storeu)(tmp, SDPA_VEXP(VEC(loadu)(tmp)));
        for (int l = 0; j + l < n; l++)
            out[j + l] = tmp[l];
    }
}

#undef SDPA_CAT_
#undef SDPA_CAT
#undef FN
#undef VL
#undef NR
#undef KBP
#undef ALIGN_ELEMS
#undef T
#undef VEC
#undef SDPA_MR
#undef SDPA_NV
#undef SDPA_VEXP
#undef SDPA_EXP
#undef SDPA_KEEP
#undef SDPA_COPY_T
#undef SDPA_NAME
