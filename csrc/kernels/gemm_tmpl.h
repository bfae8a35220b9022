/* GEMM driver, written once for both dtypes: included by gemm.c with
 *   T          the element type (float or double)
 *   SUF(name)  name##_f32 or name##_f64
 * defined.  No include guard on purpose.  See gemm.h for the contract and
 * gemm_internal.h for the micro-kernel interface.
 *
 * Notation: A is a[m, k], B is b[k, n], C is c[m, n]; X[i, j] of a strided
 * operand is x[i * rs_x + j * cs_x] (strides in elements, any sign). */

/* c[m, n] = (accumulate ? c : 0) + bias[n] on every row.  Never reads c when
 * !accumulate (c may be uninitialised). */
static void SUF(gemm_init_bias)(T *c, int64_t rs_c, int64_t cs_c, const T *bias,
                                int64_t m, int64_t n, int accumulate)
{
    for (int64_t i = 0; i < m; i++) {
        T *c_row = c + i * rs_c;   /* C[i, :] */
        for (int64_t j = 0; j < n; j++) {
            T *c_ij = c_row + j * cs_c;
            *c_ij = accumulate ? *c_ij + bias[j] : bias[j];
        }
    }
}

/* c[m, n] = 0 */
static void SUF(gemm_init_zero)(T *c, int64_t rs_c, int64_t cs_c, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++) {
        T *c_row = c + i * rs_c;
        for (int64_t j = 0; j < n; j++)
            c_row[j * cs_c] = 0;
    }
}

/* Pack the block A[0:mc, 0:kc] (a points at its [0, 0]) into MR x KC panels:
 *   a_pack[q * panel_len + p * mr + i] = A[q * mr + i, p]
 * with rows past mc zero, so the micro-kernel always sees full panels.
 * panel_len >= kc * mr keeps every panel 64-byte aligned. */
static void SUF(gemm_pack_a)(T *a_pack, const T *a, int64_t rs_a, int64_t cs_a,
                             int64_t mc, int64_t kc, int mr, int64_t panel_len)
{
    for (int64_t ir = 0; ir < mc; ir += mr) {
        T *panel = a_pack + (ir / mr) * panel_len;   /* [kc, mr] */
        const int64_t m_r = gemm_min(mr, mc - ir);
        for (int64_t i = 0; i < m_r; i++) {
            const T *a_row = a + (ir + i) * rs_a;    /* A[ir + i, 0:kc] */
            for (int64_t p = 0; p < kc; p++)
                panel[p * mr + i] = a_row[p * cs_a];
        }
        for (int64_t i = m_r; i < mr; i++)           /* zero-pad the edge panel */
            for (int64_t p = 0; p < kc; p++)
                panel[p * mr + i] = 0;
    }
}

/* Pack the block B[0:kc, 0:nc] (b points at its [0, 0]) into KC x NR panels:
 *   b_pack[q * panel_len + p * nr + j] = B[p, q * nr + j]
 * with columns past nc zero. */
static void SUF(gemm_pack_b)(T *b_pack, const T *b, int64_t rs_b, int64_t cs_b,
                             int64_t kc, int64_t nc, int nr, int64_t panel_len)
{
    for (int64_t jr = 0; jr < nc; jr += nr) {
        T *panel = b_pack + (jr / nr) * panel_len;   /* [kc, nr] */
        const int64_t n_r = gemm_min(nr, nc - jr);
        for (int64_t p = 0; p < kc; p++) {
            const T *b_row = b + p * rs_b + jr * cs_b;   /* B[p, jr:jr+n_r] */
            T *dst = panel + p * nr;
            for (int64_t j = 0; j < n_r; j++)
                dst[j] = b_row[j * cs_b];
            for (int64_t j = n_r; j < nr; j++)           /* zero-pad the edge panel */
                dst[j] = 0;
        }
    }
}

/* An edge tile (m_r < mr or n_r < nr): the kernel writes a full local tile,
 * of which the valid m_r x n_r corner is copied (or added) into c. */
static void SUF(gemm_edge_tile)(const SUF(gemm_microkernel) *uk, int64_t kc,
                                const T *a_panel, const T *b_panel,
                                T *c, int64_t rs_c, int64_t cs_c,
                                int64_t m_r, int64_t n_r, int accumulate)
{
    _Alignas(GEMM_PANEL_ALIGN) T tile[GEMM_MAX_MR * GEMM_MAX_NR];   /* [mr, nr] */
    const int nr = uk->nr;
    uk->kernel(kc, a_panel, b_panel, tile, nr, 1, 0);
    for (int64_t i = 0; i < m_r; i++) {
        const T *tile_row = tile + i * nr;
        T *c_row = c + i * rs_c;
        for (int64_t j = 0; j < n_r; j++) {
            T *c_ij = c_row + j * cs_c;
            *c_ij = accumulate ? *c_ij + tile_row[j] : tile_row[j];
        }
    }
}

int SUF(gemm_run)(const SUF(gemm_microkernel) *uk,
                  T *c, int64_t rs_c, int64_t cs_c,
                  const T *a, int64_t rs_a, int64_t cs_a,
                  const T *b, int64_t rs_b, int64_t cs_b,
                  const T *bias,
                  int64_t m, int64_t n, int64_t k, int accumulate)
{
    if (m <= 0 || n <= 0)
        return 0;

    /* 1. Bias, exactly once and before any product: c = (accumulate ? c : 0) + bias.
     *    Afterwards c_holds_value says whether products are added onto c or the
     *    first KC block overwrites it. */
    int c_holds_value = accumulate;
    if (bias != NULL) {
        SUF(gemm_init_bias)(c, rs_c, cs_c, bias, m, n, accumulate);
        c_holds_value = 1;
    }
    if (k <= 0) {   /* no products: bias, c or zeros */
        if (!c_holds_value)
            SUF(gemm_init_zero)(c, rs_c, cs_c, m, n);
        return 0;
    }

    /* 2. Small products, where packing would dominate, and a few rows against
     *    a B with contiguous rows, where the direct loop runs along those rows
     *    and full tiles would mostly multiply zero padding. */
    if (gemm_use_direct(m, n, k, uk->mr, cs_b)) {
        uk->small(c, rs_c, cs_c, a, rs_a, cs_a, b, rs_b, cs_b, m, n, k,
                  uk->kc, c_holds_value);
        return 0;
    }

    /* 3. Workspaces, sized for the largest block this product needs:
     *    a_pack [mc_max / mr panels][a_panel_max], b_pack [nc_max / nr panels][b_panel_max]. */
    const int mr = uk->mr, nr = uk->nr;
    const int64_t align = GEMM_PANEL_ALIGN / (int64_t)sizeof(T);   /* elements */
    const int64_t kc_max = gemm_min(uk->kc, k);
    const int64_t mc_max = gemm_min(uk->mc, gemm_round_up(m, mr));
    const int64_t nc_max = gemm_min(uk->nc, gemm_round_up(n, nr));
    const int64_t a_panel_max = gemm_round_up(kc_max * mr, align);
    const int64_t b_panel_max = gemm_round_up(kc_max * nr, align);
    T *a_pack = mk_alloc(mk_bytes((size_t)((mc_max / mr) * a_panel_max), sizeof(T)));
    T *b_pack = mk_alloc(mk_bytes((size_t)((nc_max / nr) * b_panel_max), sizeof(T)));
    if (a_pack == NULL || b_pack == NULL) {
        mk_free(a_pack);
        mk_free(b_pack);
        return -1;
    }

    /* 4. The Goto loop nest (BLIS loops 5..1). */
    for (int64_t jc = 0; jc < n; jc += uk->nc) {               /* NC columns of B and C */
        const int64_t nc_blk = gemm_min(uk->nc, n - jc);
        for (int64_t pc = 0; pc < k; pc += uk->kc) {           /* KC rows of B */
            const int64_t kc_blk = gemm_min(uk->kc, k - pc);
            const int64_t a_panel_len = gemm_round_up(kc_blk * mr, align);
            const int64_t b_panel_len = gemm_round_up(kc_blk * nr, align);
            /* later KC blocks add onto what the first one wrote */
            const int accumulate_blk = c_holds_value || pc > 0;

            /* B[pc:pc+kc_blk, jc:jc+nc_blk] -> b_pack */
            SUF(gemm_pack_b)(b_pack, b + pc * rs_b + jc * cs_b, rs_b, cs_b,
                             kc_blk, nc_blk, nr, b_panel_len);

            for (int64_t ic = 0; ic < m; ic += uk->mc) {       /* MC rows of A and C */
                const int64_t mc_blk = gemm_min(uk->mc, m - ic);

                /* A[ic:ic+mc_blk, pc:pc+kc_blk] -> a_pack */
                SUF(gemm_pack_a)(a_pack, a + ic * rs_a + pc * cs_a, rs_a, cs_a,
                                 mc_blk, kc_blk, mr, a_panel_len);

                for (int64_t jr = 0; jr < nc_blk; jr += nr) {  /* NR columns */
                    const T *b_panel = b_pack + (jr / nr) * b_panel_len;
                    const int64_t n_r = gemm_min(nr, nc_blk - jr);
                    for (int64_t ir = 0; ir < mc_blk; ir += mr) {   /* MR rows */
                        const T *a_panel = a_pack + (ir / mr) * a_panel_len;
                        const int64_t m_r = gemm_min(mr, mc_blk - ir);
                        T *c_tile = c + (ic + ir) * rs_c + (jc + jr) * cs_c;   /* C[ic+ir, jc+jr] */
                        if (m_r == mr && n_r == nr)
                            uk->kernel(kc_blk, a_panel, b_panel, c_tile, rs_c, cs_c,
                                       accumulate_blk);
                        else
                            SUF(gemm_edge_tile)(uk, kc_blk, a_panel, b_panel, c_tile,
                                                rs_c, cs_c, m_r, n_r, accumulate_blk);
                    }
                }
            }
        }
    }

    mk_free(a_pack);
    mk_free(b_pack);
    return 0;
}

int SUF(gemm)(T *c, int64_t rs_c, int64_t cs_c,
              const T *a, int64_t rs_a, int64_t cs_a,
              const T *b, int64_t rs_b, int64_t cs_b,
              const T *bias,
              int64_t m, int64_t n, int64_t k, int accumulate)
{
    return SUF(gemm_run)(SUF(gemm_select)(), c, rs_c, cs_c, a, rs_a, cs_a,
                         b, rs_b, cs_b, bias, m, n, k, accumulate);
}
