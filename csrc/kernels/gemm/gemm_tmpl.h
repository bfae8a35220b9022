/* GEMM driver, written once for both dtypes: included by gemm.c with
 *   T          the element type (float or double)
 *   SUF(name)  name##_f32 or name##_f64
 * defined, and undefined again at the end of this file.  No include guard on
 * purpose.  It defines static bodies only (gemm_strided_body,
 * gemm_run_body): gemm.c writes out the public symbols.  See gemm.h for the
 * contract and gemm_internal.h for the micro-kernel interface.
 *
 * Notation: A is a[m, k], B is b[k, n], C is c[m, n]; X[i, j] of a strided
 * operand is x[i * rs_x + j * cs_x] (strides in elements, any sign). */
#ifndef T
#error "gemm_tmpl.h: define T (the element type) before including it"
#endif
#ifndef SUF
#error "gemm_tmpl.h: define SUF(name) (name##_f32, name##_f64) before including it"
#endif

/* c[m, n] = (accumulate ? c : 0) + bias[n] on every row.  Never reads c when
 * !accumulate (c may be uninitialised). */
static void SUF(gemm_init_bias)(T *c, int64_t rs_c, int64_t cs_c, const T *bias,
                                int64_t m, int64_t n, int accumulate)
{
    for (int64_t i = 0; i < m; i++) {
        T *c_row = c + i * rs_c;   /* C[i, :] */
        if (cs_c == 1 && accumulate) {
            for (int64_t j = 0; j < n; j++)
                c_row[j] = c_row[j] + bias[j];
            continue;
        }
        if (cs_c == 1) {
            memcpy(c_row, bias, (size_t)n * sizeof(T));
            continue;
        }
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
 * panel_len >= kc * mr keeps every panel 64-byte aligned.  The loops run along
 * A's contiguous direction: for a transposed A (rs_a == 1, e.g. grad_out^T in a
 * weight gradient) whole columns A[0:mc, p], each cut into the panels' rows
 * (reading mr elements of kc columns at a large stride, panel by panel, kept
 * a few L1 sets busy: 6 % of a large backward); else rows of A, through the
 * path's transposing copy when it has one (a scalar copy took 11 % of a 2048^3
 * product). */
static void SUF(gemm_pack_a)(const SUF(gemm_microkernel) *uk,
                             T *a_pack, const T *a, int64_t rs_a, int64_t cs_a,
                             int64_t mc, int64_t kc, int mr, int64_t panel_len)
{
    if (rs_a == 1 && cs_a != 1) {
        for (int64_t p = 0; p < kc; p++) {
            const T *a_col = a + p * cs_a;                       /* A[0:mc, p] */
            /* and column p + 8, a jump of 8 strides the hardware does not foresee */
            for (int64_t i = 0; i < mc; i += GEMM_PANEL_ALIGN / (int64_t)sizeof(T))
                __builtin_prefetch(a_col + 8 * cs_a + i);
            T *dst = a_pack + p * mr;                            /* row p of panel 0 */
            for (int64_t ir = 0; ir < mc; ir += mr, dst += panel_len) {
                const int64_t m_r = gemm_min(mr, mc - ir);
                if (m_r == 8 && mr == 8) {   /* the SIMD paths' mr: one vector move */
                    memcpy(dst, a_col + ir, 8 * sizeof(T));
                    continue;
                }
                for (int64_t i = 0; i < m_r; i++)
                    dst[i] = a_col[ir + i];
                for (int64_t i = m_r; i < mr; i++)   /* zero-pad the edge panel */
                    dst[i] = 0;
            }
        }
        return;
    }
    for (int64_t ir = 0; ir < mc; ir += mr) {
        T *panel = a_pack + (ir / mr) * panel_len;   /* [kc, mr] */
        const int64_t m_r = gemm_min(mr, mc - ir);
        /* Rows of A are read kc elements at a time, too short for the hardware
         * prefetcher: ask for the next KC block of these rows now (a hint only;
         * past the end of A it is harmless). */
        if (cs_a == 1)
            for (int64_t i = 0; i < m_r; i++)
                for (int64_t p = 0; p < kc; p += GEMM_PANEL_ALIGN / (int64_t)sizeof(T))
                    __builtin_prefetch(a + (ir + i) * rs_a + kc + p);
        if (cs_a == 1 && uk->copy_t != NULL) {   /* panel[p, i] = A[ir + i, p], zero-padded */
            uk->copy_t(panel, mr, a + ir * rs_a, rs_a, kc, m_r);
            continue;
        }
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

/* The A operand: columns [0, k1) from a1, columns [k1, k) from a2
 * (A = [a1 | a2], e.g. torch.cat((Q, K), -1) without the copy); k1 >= k for
 * a single source. */
typedef struct {
    const T *a1;
    int64_t rs1, cs1, k1;
    const T *a2;
    int64_t rs2, cs2;
} SUF(gemm_a);

/* The block A[i0:, p0:p0+kc] as an operand of its own: its columns [0, k1) in
 * a1, the rest in a2, each pointer at the block's first element in its source
 * (a2 = a1 when the block lies in a1 alone). */
static SUF(gemm_a) SUF(gemm_a_block)(const SUF(gemm_a) *A, int64_t i0, int64_t p0, int64_t kc)
{
    int64_t k1 = A->k1 - p0;
    k1 = k1 < 0 ? 0 : k1 > kc ? kc : k1;
    const T *a1 = A->a1 + i0 * A->rs1 + p0 * A->cs1;
    if (k1 == kc)
        return (SUF(gemm_a)){a1, A->rs1, A->cs1, k1, a1, A->rs1, A->cs1};
    return (SUF(gemm_a)){a1, A->rs1, A->cs1, k1,
                         A->a2 + i0 * A->rs2 + (p0 + k1 - A->k1) * A->cs2, A->rs2, A->cs2};
}

/* dst[m, k] (C-contiguous) = A = [a1 | a2], a two-source A concatenated */
static void SUF(gemm_a_concat)(T *dst, const SUF(gemm_a) *A, int64_t m, int64_t k)
{
    for (int64_t i = 0; i < m; i++) {
        T *row = dst + i * k;
        const T *r1 = A->a1 + i * A->rs1, *r2 = A->a2 + i * A->rs2;
        if (A->cs1 == 1 && A->k1 > 0)
            memcpy(row, r1, (size_t)A->k1 * sizeof(T));
        else
            for (int64_t p = 0; p < A->k1; p++)
                row[p] = r1[p * A->cs1];
        if (A->cs2 == 1)
            memcpy(row + A->k1, r2, (size_t)(k - A->k1) * sizeof(T));
        else
            for (int64_t p = A->k1; p < k; p++)
                row[p] = r2[(p - A->k1) * A->cs2];
    }
}

/* Pack a block (gemm_a_block) of mc rows and kc columns: the columns of each
 * source go to their rows of the panels. */
static void SUF(gemm_pack_a_block)(const SUF(gemm_microkernel) *uk, T *a_pack,
                                   const SUF(gemm_a) *blk, int64_t mc, int64_t kc, int mr,
                                   int64_t panel_len)
{
    if (blk->k1 > 0)
        SUF(gemm_pack_a)(uk, a_pack, blk->a1, blk->rs1, blk->cs1, mc, blk->k1, mr, panel_len);
    if (kc > blk->k1)
        SUF(gemm_pack_a)(uk, a_pack + blk->k1 * mr, blk->a2, blk->rs2, blk->cs2,
                         mc, kc - blk->k1, mr, panel_len);
}

/* Pack the block B[0:kc, 0:nc] (b points at its [0, 0]) into KC x NR panels:
 *   b_pack[q * panel_len + p * nr + j] = B[p, q * nr + j]
 * with columns past nc zero.  A B with contiguous columns (rs_b == 1, B =
 * weight^T) is read along them: through the path's transposing copy when it
 * has one, else column by column (row by row of B, each row one element from
 * nr columns far apart, thrashed L1: linear ran 1.6x slower than bmm). */
static void SUF(gemm_pack_b)(const SUF(gemm_microkernel) *uk,
                             T *b_pack, const T *b, int64_t rs_b, int64_t cs_b,
                             int64_t kc, int64_t nc, int nr, int64_t panel_len)
{
    const int transposed = rs_b == 1 && cs_b != 1;
    for (int64_t jr = 0; jr < nc; jr += nr) {
        T *panel = b_pack + (jr / nr) * panel_len;   /* [kc, nr] */
        const int64_t n_r = gemm_min(nr, nc - jr);
        if (transposed && uk->copy_t != NULL) {
            uk->copy_t(panel, nr, b + jr * cs_b, cs_b, kc, n_r);
        } else if (transposed) {
            for (int64_t j = 0; j < nr; j++) {
                const T *b_col = b + (jr + j) * cs_b;    /* B[0:kc, jr + j] */
                for (int64_t p = 0; p < kc; p++)
                    panel[p * nr + j] = j < n_r ? b_col[p] : 0;
            }
        } else {
            for (int64_t p = 0; p < kc; p++) {
                const T *b_row = b + p * rs_b + jr * cs_b;   /* B[p, jr:jr+n_r] */
                T *dst = panel + p * nr;
                if (cs_b == 1)
                    memcpy(dst, b_row, (size_t)n_r * sizeof(T));
                else
                    for (int64_t j = 0; j < n_r; j++)
                        dst[j] = b_row[j * cs_b];
                for (int64_t j = n_r; j < nr; j++)           /* zero-pad the edge panel */
                    dst[j] = 0;
            }
        }
    }
}

/* An edge tile (m_r < mr or n_r < nr): the kernel writes a full local tile,
 * of which the valid m_r x n_r corner is copied (or added) into c.  A float64
 * chain (GEMM_CHAINS) continues from c: the tile starts as c's corner. */
static void SUF(gemm_edge_tile)(const SUF(gemm_microkernel) *uk, int64_t kc,
                                const T *a_panel, const T *b_panel,
                                T *c, int64_t rs_c, int64_t cs_c,
                                int64_t m_r, int64_t n_r, int accumulate)
{
    _Alignas(GEMM_PANEL_ALIGN) T tile[GEMM_MAX_MR * GEMM_MAX_NR];   /* [mr, nr] */
    const int nr = uk->nr;
    const int chain = GEMM_CHAINS(T) && accumulate;
    if (chain)
        for (int64_t i = 0; i < uk->mr; i++)
            for (int64_t j = 0; j < nr; j++)
                tile[i * nr + j] = i < m_r && j < n_r ? c[i * rs_c + j * cs_c] : 0;
    uk->kernel(kc, a_panel, b_panel, tile, nr, 1, chain);
    for (int64_t i = 0; i < m_r; i++) {
        const T *tile_row = tile + i * nr;
        T *c_row = c + i * rs_c;
        for (int64_t j = 0; j < n_r; j++) {
            T *c_ij = c_row + j * cs_c;
            *c_ij = accumulate && !chain ? *c_ij + tile_row[j] : tile_row[j];
        }
    }
}

/* The packed path on one thread: c[m, n] = (c_holds_value ? c : 0) + bias + a @ b
 * (bias: NULL, or bias[n] added on every row).  The bias goes onto each tile of
 * c just before its first KC block (the tile is then in L1; a pass over all of
 * c up front came back from memory: 2.3 ms of the 12 ms of a [4096, 512] @
 * [512, 1536] product on two threads); the same values, so the same bits.
 *
 * Loop order (C-stationary): for each NC block of columns and each super-block
 * of k, all of B[k-block, NC block] is packed first (KC x NR panels per KC
 * block); then for each MC block of rows, the KC blocks run innermost, so the
 * mc x nc block of c stays in L2 while every KC block is added onto it.  (With
 * kc = 64, the usual Goto order streamed all of c through memory once per 64
 * terms: 2.5x slower at 1024^3; KC is now up to 192, the order stays.)  The
 * packed B is bounded by GEMM_B_PACK_BYTES: nc shrinks first, then k is cut
 * into super-blocks (each output's KC blocks are still added in order). */
static int SUF(gemm_packed)(const SUF(gemm_microkernel) *uk,
                            T *c, int64_t rs_c, int64_t cs_c,
                            const SUF(gemm_a) *A,
                            const T *b, int64_t rs_b, int64_t cs_b, const T *bias,
                            int64_t m, int64_t n, int64_t k, int c_holds_value)
{
    /* 1. Block sizes and workspaces:
     *    a_pack [mc / mr panels][a_panel_max],
     *    b_pack [kk / kc blocks][nc / nr panels][b_panel_max]. */
    const int mr = uk->mr, nr = uk->nr;
    const int64_t kc = GEMM_CHAINS(T) ? uk->kc : gemm_sum_block(k);   /* see gemm_internal.h */
    const int64_t align = GEMM_PANEL_ALIGN / (int64_t)sizeof(T);   /* elements */
    const int64_t kc_max = gemm_min(kc, k);
    const int64_t mc = gemm_min(uk->mc, gemm_round_up(m, mr));
    const int64_t budget = GEMM_B_PACK_BYTES / (int64_t)sizeof(T);  /* elements of b_pack */
    int64_t nc = gemm_min(uk->nc, gemm_round_up(n, nr));
    int64_t kk = gemm_round_up(k, kc);                               /* k super-block */
    if (kk * nc > budget) {
        const int64_t nc_min = gemm_min(nc, 4 * (int64_t)nr);
        nc = budget / kk / nr * nr;
        nc = nc < nc_min ? nc_min : nc;
        if (kk * nc > budget) {
            kk = budget / nc / kc * kc;
            kk = kk < kc ? kc : kk;
        }
    }
    /* n in equal NC blocks of at most that (n = 1024, nc = 504: 504 + 504 + 16
     * re-packed all of A for a sliver of 16 columns; now 3 x 360) */
    nc = gemm_round_up(gemm_ceil_div(n, gemm_ceil_div(n, nc)), nr);
    const int64_t a_panel_max = gemm_round_up(kc_max * mr, align);
    const int64_t b_panel_max = gemm_round_up(kc_max * nr, align);
    const int64_t b_kblock = (nc / nr) * b_panel_max;               /* one KC block of b_pack */
    T *a_pack = mk_alloc(mk_bytes((size_t)((mc / mr) * a_panel_max), sizeof(T)));
    T *b_pack = mk_alloc(mk_bytes((size_t)(gemm_min(kk, gemm_round_up(k, kc)) / kc * b_kblock),
                                  sizeof(T)));
    if (a_pack == NULL || b_pack == NULL) {
        mk_free(a_pack);
        mk_free(b_pack);
        return -1;
    }

    /* 2. The loop nest. */
    for (int64_t jc = 0; jc < n; jc += nc) {                      /* NC columns of B and C */
        const int64_t nc_blk = gemm_min(nc, n - jc);
        for (int64_t kq = 0; kq < k; kq += kk) {                  /* super-block of k */
            const int64_t kq_end = gemm_min(kq + kk, k);

            /* B[kq:kq_end, jc:jc+nc_blk] -> b_pack, one KC block after another */
            for (int64_t pc = kq; pc < kq_end; pc += kc) {
                const int64_t kc_blk = gemm_min(kc, k - pc);
                SUF(gemm_pack_b)(uk, b_pack + (pc - kq) / kc * b_kblock,
                                 b + pc * rs_b + jc * cs_b, rs_b, cs_b,
                                 kc_blk, nc_blk, nr, gemm_round_up(kc_blk * nr, align));
            }

            for (int64_t ic = 0; ic < m; ic += mc) {              /* MC rows of A and C */
                const int64_t mc_blk = gemm_min(mc, m - ic);
                for (int64_t pc = kq; pc < kq_end; pc += kc) {    /* KC rows of B, in order */
                    const int64_t kc_blk = gemm_min(kc, k - pc);
                    const int64_t a_panel_len = gemm_round_up(kc_blk * mr, align);
                    const int64_t b_panel_len = gemm_round_up(kc_blk * nr, align);
                    const T *b_blk = b_pack + (pc - kq) / kc * b_kblock;
                    /* later KC blocks add onto what the first one (or the bias) wrote */
                    const int accumulate_blk = c_holds_value || bias != NULL || pc > 0;

                    /* A[ic:ic+mc_blk, pc:pc+kc_blk]: read in place by the full
                     * tiles where the path can, packed into a_pack (once) when
                     * it cannot or an edge tile needs the panels */
                    const SUF(gemm_a) blk = SUF(gemm_a_block)(A, ic, pc, kc_blk);
                    const int in_place = uk->kernel_rows != NULL
                                         && (blk.k1 == 0 || blk.cs1 == 1)
                                         && (blk.k1 == kc_blk || blk.cs2 == 1);
                    int a_packed = 0;

                    for (int64_t jr = 0; jr < nc_blk; jr += nr) {          /* NR columns */
                        const T *b_panel = b_blk + (jr / nr) * b_panel_len;
                        const int64_t n_r = gemm_min(nr, nc_blk - jr);
                        for (int64_t ir = 0; ir < mc_blk; ir += mr) {      /* MR rows */
                            const T *a_panel = a_pack + (ir / mr) * a_panel_len;
                            const int64_t m_r = gemm_min(mr, mc_blk - ir);
                            T *c_tile = c + (ic + ir) * rs_c + (jc + jr) * cs_c;
                            const int full = m_r == mr && n_r == nr;
                            if (bias != NULL && pc == 0)
                                SUF(gemm_init_bias)(c_tile, rs_c, cs_c, bias + jc + jr, m_r, n_r,
                                                    c_holds_value);
                            if (full && in_place) {
                                uk->kernel_rows(kc_blk, blk.a1 + ir * blk.rs1, blk.rs1, blk.k1,
                                                blk.a2 + ir * blk.rs2, blk.rs2, b_panel,
                                                c_tile, rs_c, cs_c, accumulate_blk);
                                continue;
                            }
                            if (!a_packed) {
                                SUF(gemm_pack_a_block)(uk, a_pack, &blk, mc_blk, kc_blk, mr,
                                                       a_panel_len);
                                a_packed = 1;
                            }
                            if (full)
                                uk->kernel(kc_blk, a_panel, b_panel, c_tile, rs_c, cs_c,
                                           accumulate_blk);
                            else if (uk->edge != NULL && cs_c == 1)
                                uk->edge(kc_blk, a_panel, b_panel, c_tile, rs_c,
                                         accumulate_blk, (int)m_r, (int)n_r);
                            else
                                SUF(gemm_edge_tile)(uk, kc_blk, a_panel, b_panel, c_tile,
                                                    rs_c, cs_c, m_r, n_r, accumulate_blk);
                        }
                    }
                }
            }
        }
    }

    mk_free(a_pack);
    mk_free(b_pack);
    return 0;
}

/* The direct loop (uk->small) on c = A @ B.  Against a weight^T (rs_b == 1),
 * more rows than an MR tile and at most twice rows_wt (gemm_use_direct sends
 * those here where the packed path's last tile would be part padding) go in
 * calls of rows_wt rows, each block of the weight transposed in registers once
 * per call: the packed path had packed the whole weight for two tiles (float32
 * 8 x 1024 @ [1024, 1024] on AVX-512: 488 -> 316 us).  Each row's sums are its
 * own: the same bits. */
static void SUF(gemm_small_rows)(const SUF(gemm_microkernel) *uk, T *c, int64_t rs_c,
                                int64_t cs_c, const T *a, int64_t rs_a, int64_t cs_a,
                                const T *b, int64_t rs_b, int64_t cs_b, int64_t m, int64_t n,
                                int64_t k, int64_t kc, int c_holds_value)
{
    const int64_t rows = rs_b == 1 && m > uk->mr && m <= 2 * uk->rows_wt ? uk->rows_wt : m;
    for (int64_t i = 0; i < m; i += rows)
        uk->small(c + i * rs_c, rs_c, cs_c, a + i * rs_a, rs_a, cs_a, b, rs_b, cs_b,
                  gemm_min(rows, m - i), n, k, kc, c_holds_value);
}

/* One thread's share of a parallel gemm: a band of columns (split_n) or of
 * rows of c, cut at multiples of nr or mr.  Every element of c is computed by
 * exactly one task, in the same order as on one thread. */
typedef struct {
    const SUF(gemm_microkernel) *uk;
    T *c;
    int64_t rs_c, cs_c;
    SUF(gemm_a) A;
    const T *b;
    int64_t rs_b, cs_b;
    const T *bias;        /* packed bands: added tile by tile (gemm_packed), or NULL */
    int64_t m, n, k;
    int64_t kc;           /* the direct loop's summation (float32) or cache block */
    int c_holds_value;
    int split_n;          /* 1: bands of columns, 0: bands of rows */
    int direct;           /* each band runs the direct loop (uk->small), not packed panels */
    int64_t band;         /* columns or rows per task */
    atomic_int failed;    /* a task could not allocate its workspace */
} SUF(gemm_job);

static void SUF(gemm_task)(void *arg, int task)
{
    SUF(gemm_job) *job = arg;
    const int64_t start = task * job->band;
    const int64_t size = job->split_n ? job->n : job->m;
    if (start >= size)
        return;
    const int64_t len = gemm_min(job->band, size - start);
    int rc = 0;
    if (job->direct)    /* the same, without packing (bands of columns) */
        SUF(gemm_small_rows)(job->uk, job->c + start * job->cs_c, job->rs_c, job->cs_c,
                             job->A.a1, job->A.rs1, job->A.cs1,
                             job->b + start * job->cs_b, job->rs_b, job->cs_b,
                             job->m, len, job->k, job->kc, job->c_holds_value);
    else if (job->split_n)   /* C[:, start:start+len] = A @ B[:, start:start+len] */
        rc = SUF(gemm_packed)(job->uk, job->c + start * job->cs_c, job->rs_c, job->cs_c,
                              &job->A,
                              job->b + start * job->cs_b, job->rs_b, job->cs_b,
                              job->bias != NULL ? job->bias + start : NULL,
                              job->m, len, job->k, job->c_holds_value);
    else {              /* C[start:start+len, :] = A[start:start+len, :] @ B */
        SUF(gemm_a) rows = job->A;
        rows.a1 += start * rows.rs1;
        if (rows.a2 != NULL)
            rows.a2 += start * rows.rs2;
        rc = SUF(gemm_packed)(job->uk, job->c + start * job->rs_c, job->rs_c, job->cs_c,
                              &rows,
                              job->b, job->rs_b, job->cs_b, job->bias,
                              len, job->n, job->k, job->c_holds_value);
    }
    if (rc != 0)
        atomic_store(&job->failed, 1);
}

/* A transposed into rows (gemm_run_src, step 4): dst[i, p] = A[i, p] = a[i + p * cs]
 * for the task's band of rows, GEMM_TRANSPOSE_ROWS at a time (the band's
 * rows of dst take a cache line each while a's rows stream). */
#define GEMM_TRANSPOSE_ROWS 64
typedef struct {
    const SUF(gemm_microkernel) *uk;
    T *dst;
    const T *a;
    int64_t cs, m, k, band;
} SUF(gemm_tjob);

static void SUF(gemm_transpose_task)(void *arg, int task)
{
    const SUF(gemm_tjob) *job = arg;
    const int64_t i1 = gemm_min((task + 1) * job->band, job->m);
    for (int64_t i = task * job->band; i < i1; i += GEMM_TRANSPOSE_ROWS)
        job->uk->copy_t(job->dst + i * job->k, (int)job->k, job->a + i, job->cs,
                        gemm_min(GEMM_TRANSPOSE_ROWS, i1 - i), job->k);
}

/* dst [m, k] (C-contiguous) = A, A[i, p] = a[i + p * cs], through uk->copy_t
 * on up to nthreads threads; -1 (dst untouched) when the path has none. */
static int SUF(gemm_transpose_body)(const SUF(gemm_microkernel) *uk, T *dst, const T *a,
                                    int64_t cs, int64_t m, int64_t k, int nthreads)
{
    if (uk->copy_t == NULL || k > INT32_MAX)
        return -1;
    if (m <= 0 || k <= 0)
        return 0;
    SUF(gemm_tjob) tjob = {uk, dst, a, cs, m, k,
                           gemm_round_up(gemm_ceil_div(m, nthreads > 0 ? nthreads : 1),
                                         GEMM_TRANSPOSE_ROWS)};
    if (nthreads > 1 && m > GEMM_TRANSPOSE_ROWS)
        mk_parallel_run((int)gemm_ceil_div(m, tjob.band), SUF(gemm_transpose_task), &tjob);
    else
        SUF(gemm_transpose_task)(&tjob, 0);
    return 0;
}

static int SUF(gemm_run_src)(const SUF(gemm_microkernel) *uk,
                             T *c, int64_t rs_c, int64_t cs_c,
                             const SUF(gemm_a) *A,
                             const T *b, int64_t rs_b, int64_t cs_b,
                             const T *bias,
                             int64_t m, int64_t n, int64_t k, int accumulate)
{
    if (m <= 0 || n <= 0)
        return 0;

    /* 1. No products: bias, c or zeros. */
    if (k <= 0) {
        if (bias != NULL)
            SUF(gemm_init_bias)(c, rs_c, cs_c, bias, m, n, accumulate);
        else if (!accumulate)
            SUF(gemm_init_zero)(c, rs_c, cs_c, m, n);
        return 0;
    }

    /* 2. Threads, when the product is big enough to pay for waking them: bands
     *    of c (never of k), whole tiles per band.  A few rows against a large B
     *    (the direct loop, step 3) read each element of B for at most m
     *    multiply-adds: they are bound by reading B, and a thread pays for far
     *    fewer of them (one token's 1 x 512 @ 512 x 1536 projection: 3 MiB of
     *    weight, 786 K multiply-adds, 63 -> 36 us on two threads). */
    int direct = gemm_use_direct(m, n, k, uk->mr, uk->rows_wt, rs_b, cs_b);
    const double work = (double)m * (double)n * (double)k   /* multiply-adds */
                        * (direct && m < uk->mr ? GEMM_ROWS_THREAD_WEIGHT : 1.0);
    int nthreads = 1;   /* work below 2 * GEMM_THREAD_MIN_WORK: one thread whatever the
                         * setting (and no look-up of the core count for tiny products) */
    if (work >= 2.0 * GEMM_THREAD_MIN_WORK) {
        nthreads = mk_get_num_threads();
        if (work < GEMM_THREAD_MIN_WORK * nthreads)
            nthreads = (int)(work / GEMM_THREAD_MIN_WORK);
    }

    /* 3. Small products, where packing would dominate, and a few rows against
     *    a B with contiguous rows, where the direct loop runs along those rows
     *    and full tiles would mostly multiply zero padding.  (Every column of
     *    the direct loop is computed alone, so bands of columns of any width
     *    give the same bits.) */
    /* A two-source A (gemm_cat) small enough is concatenated on the stack, so
     * the direct loop sees one source: the same arithmetic as a gemm on the
     * concatenated copy (the path depends on m, n, k and B's strides only). */
    _Alignas(64) T a_cat[GEMM_CAT_STACK_BYTES / sizeof(T)];
    SUF(gemm_a) A_one;
    if (direct && A->k1 < k) {
        if (m * k > (int64_t)(GEMM_CAT_STACK_BYTES / sizeof(T))) {
            direct = 0;
        } else {
            SUF(gemm_a_concat)(a_cat, A, m, k);
            A_one = (SUF(gemm_a)){a_cat, k, 1, k, NULL, 0, 0};
            A = &A_one;
        }
    }
    /* The bias, exactly once and before any product: up front for the direct
     * loop, tile by tile in gemm_packed.  c_holds_value: products go onto c. */
    int c_holds_value = accumulate;
    if (direct && bias != NULL) {
        SUF(gemm_init_bias)(c, rs_c, cs_c, bias, m, n, accumulate);
        c_holds_value = 1;
        bias = NULL;
    }
    const int64_t kc = GEMM_CHAINS(T) ? uk->kc : gemm_sum_block(k);
    const int split_n = direct || n >= m;     /* else the longer dimension */
    const int64_t unit = direct ? 64 : split_n ? uk->nr : uk->mr;
    const int64_t units = ((split_n ? n : m) + unit - 1) / unit;
    if (nthreads > units)
        nthreads = (int)units;
    /* 4. A transposed (one source, columns contiguous: grad_out^T in a weight
     *    gradient) is turned into rows once, by all threads, which the full
     *    tiles then read in place: packed, each MR x KC panel read MR elements
     *    of KC columns whose starts are often a multiple of 4 KiB apart (one L1
     *    set: a cache line from L2 for 24 bytes), once per NC block, and again
     *    by every thread.  Only a copy; for an A over GEMM_TRANSPOSE_MAX_BYTES
     *    or without its workspace, A is packed. */
    T *a_rows = NULL;
    if (!direct && A->k1 >= k && A->rs1 == 1 && A->cs1 != 1 && uk->copy_t != NULL
            && uk->kernel_rows != NULL && m >= uk->mr
            && (double)m * (double)k * (double)sizeof(T) <= GEMM_TRANSPOSE_MAX_BYTES
            && (a_rows = mk_alloc(mk_bytes(mk_bytes((size_t)m, (size_t)k), sizeof(T)))) != NULL) {
        SUF(gemm_transpose_body)(uk, a_rows, A->a1, A->cs1, m, k, nthreads);
        A_one = (SUF(gemm_a)){a_rows, k, 1, k, NULL, 0, 0};
        A = &A_one;
    }
    if (nthreads <= 1) {
        int rc = 0;
        if (direct)
            SUF(gemm_small_rows)(uk, c, rs_c, cs_c, A->a1, A->rs1, A->cs1, b, rs_b, cs_b, m,
                                 n, k, kc, c_holds_value);
        else
            rc = SUF(gemm_packed)(uk, c, rs_c, cs_c, A, b, rs_b, cs_b, bias, m, n, k,
                                  c_holds_value);
        mk_free(a_rows);
        return rc;
    }
    SUF(gemm_job) job = {
        .uk = uk, .c = c, .rs_c = rs_c, .cs_c = cs_c, .A = *A,
        .b = b, .rs_b = rs_b, .cs_b = cs_b, .bias = bias, .m = m, .n = n, .k = k, .kc = kc,
        .c_holds_value = c_holds_value, .split_n = split_n, .direct = direct,
        .band = (units + nthreads - 1) / nthreads * unit,
    };
    atomic_init(&job.failed, 0);
    mk_parallel_run(nthreads, SUF(gemm_task), &job);
    mk_free(a_rows);
    return atomic_load(&job.failed) ? -1 : 0;
}

static int SUF(gemm_run_body)(const SUF(gemm_microkernel) *uk,
                             T *c, int64_t rs_c, int64_t cs_c,
                             const T *a, int64_t rs_a, int64_t cs_a,
                             const T *b, int64_t rs_b, int64_t cs_b,
                             const T *bias,
                             int64_t m, int64_t n, int64_t k, int accumulate)
{
    const SUF(gemm_a) A = {a, rs_a, cs_a, k, NULL, 0, 0};
    return SUF(gemm_run_src)(uk, c, rs_c, cs_c, &A, b, rs_b, cs_b, bias, m, n, k, accumulate);
}

/* gemm.h's gemm_strided: A = [a1 | a2], k1 >= k for a single source */
static int SUF(gemm_strided_body)(T *c, int64_t rs_c, int64_t cs_c,
                                  const T *a1, int64_t rs_a1, int64_t cs_a1, int64_t k1,
                                  const T *a2, int64_t rs_a2, int64_t cs_a2,
                                  const T *b, int64_t rs_b, int64_t cs_b, const T *bias,
                                  int64_t m, int64_t n, int64_t k, int accumulate)
{
    const SUF(gemm_a) A = {a1, rs_a1, cs_a1, k1, a2, rs_a2, cs_a2};
    return SUF(gemm_run_src)(SUF(gemm_select)(), c, rs_c, cs_c, &A, b, rs_b, cs_b, bias,
                             m, n, k, accumulate);
}

#undef T
#undef SUF
