/* The direct GEMM loop for small products (no heap, no threads), written once
 * for every path and dtype.  Included with
 *   T                   float or double
 *   GEMM_SMALL_NAME     the function's name
 *   GEMM_SMALL_COLS     columns of c computed side by side: as many as the
 *                       path's vector registers hold with room to spare
 *   GEMM_SMALL_ROWS     (optional, SIMD paths) rows of a whole strip computed
 *                       side by side (their accumulators: GEMM_SMALL_ROWS x
 *                       GEMM_SMALL_COLS / VEC(len) vector registers); 1 if unset
 *   GEMM_SMALL_COPY_T   (optional) a faster transposing copy for B strips
 *                       with rs_b == 1 (see gemm_copy_avx.h)
 *   GEMM_SMALL_ROWS_WT  (optional) up to GEMM_SMALL_ROWS_WT_MAX rows of A
 *                       against such a B, each block of it transposed in
 *                       registers once for all of them (gemm_row_avx.h); two
 *                       rows and more only above GEMM_SMALL_ROWS_WT_WORK
 *                       multiply-adds (optional, 0 if unset)
 *   GEMM_MADD(s, x, y)  the fused multiply-add s + x * y, one rounding:
 *                       fma/fmaf for the portable path (libm: the hardware
 *                       instruction when present), __builtin_fma* for the SIMD
 *                       paths (compiled for the ISA of the includer)
 *   VEC(op)             (optional, SIMD paths) the vocabulary of T's vectors
 *                       (simd_avx2.h): its t, len, loadu, storeu, set1, fma
 *                       (the same arithmetic as GEMM_MADD, lane by lane), add
 *                       and zero;
 *                       GEMM_SMALL_COLS / 4 must be a multiple of VEC(len)
 * defined; it undefines them all at its end, ready for the next inclusion.
 * No include guard on purpose.  Contract: gemm_small_f32_fn in gemm_internal.h.
 *
 * Order of work: a strip of NB columns of c at a time (NB = GEMM_SMALL_COLS,
 * or a half or a quarter of it for a narrow tail), one kc block of k at a
 * time.  The B strip B[pc:pc+kb, j0:j0+NB] is read in place when its rows are
 * contiguous and complete, else copied (zero-padded) into a 16 KiB stack
 * buffer; then every row of c runs NB independent sums over p (independent
 * chains pipeline, and a SIMD build vectorises the j loop over a few vector
 * registers: for 1 x 64 @ 64 x 32 on AVX-512, two zmm chains side by side).  Every
 * output follows the summation contract of gemm_internal.h exactly as the path's
 * packed micro-kernel does, so the two give the same bits: float32, the sum of
 * its kc blocks, each summed from zero in increasing p with GEMM_MADD and then
 * added onto c; float64 (GEMM_CHAINS), one GEMM_MADD chain continuing from c.
 * One row against a B whose rows are contiguous (the SIMD paths): up to
 * GEMM_SMALL_ROWS strips side by side (GEMM_SMALL_ONE_ROW), and longer rows (a
 * weight stored transposed) streamed (GEMM_SMALL_ROW_B), in the same order. */

#if !defined(T) || !defined(GEMM_SMALL_NAME) || !defined(GEMM_SMALL_COLS) || !defined(GEMM_MADD)
#error "gemm_small_tmpl.h: define T, GEMM_SMALL_NAME, GEMM_SMALL_COLS and GEMM_MADD"
#endif

#define GEMM_SMALL_CAT_(x, y) x##y
#define GEMM_SMALL_CAT(x, y) GEMM_SMALL_CAT_(x, y)
#define GEMM_SMALL_STRIP GEMM_SMALL_CAT(GEMM_SMALL_NAME, _strip)
#define GEMM_SMALL_STRIP_ELEMS (16384 / (int)sizeof(T))   /* the copy buffer */

#ifdef VEC
#ifndef GEMM_SMALL_ROWS
#define GEMM_SMALL_ROWS 1
#endif
#define GEMM_SMALL_WHOLE GEMM_SMALL_CAT(GEMM_SMALL_NAME, _whole)
/* R rows of contiguous row segments (R <= GEMM_SMALL_ROWS): C[r, :NB] for r < R
 * (c_blk = C[0, j0], rows rs_c apart: c itself in a whole strip, else the io[]
 * buffer of one row) from A's rows (a_rows = A[0, pc], rs_a apart) against the
 * strip.  Each output is one GEMM_MADD chain in increasing p (from c when
 * chain_from_c, else from 0; the sum added onto c when add_onto_c): the R rows
 * share each vector of B loaded, and their R x NB / VLEN chains are independent
 * (one row's NB / VLEN chains wait on the FMA latency: 4 x 128 @ 128 x 256 ran at
 * a fifth of the FMA rate). */
static inline __attribute__((always_inline))
void GEMM_SMALL_WHOLE(T *c_blk, int64_t rs_c, const T *a_rows, int64_t rs_a, int64_t cs_a,
                      const T *b_strip, int64_t rs_s, int64_t kb, int chain_from_c,
                      int add_onto_c, const int NB, const int R)
{
    enum { VLEN = VEC(len), REGS = GEMM_SMALL_ROWS * GEMM_SMALL_COLS / VLEN };
    const int NV = NB / VLEN;   /* R x NV <= REGS: one row may take R rows' registers */
    VEC(t) vacc[REGS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            vacc[r * NV + v] = chain_from_c ? VEC(loadu)(c_blk + r * rs_c + v * VLEN)
                                            : VEC(zero)();
    for (int64_t p = 0; p < kb; p++) {
        const T *b_p = b_strip + p * rs_s;       /* B[pc+p, j0:j0+NB] */
        VEC(t) b_v[REGS];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            b_v[v] = VEC(loadu)(b_p + v * VLEN);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const VEC(t) a_rp = VEC(set1)(a_rows[r * rs_a + p * cs_a]);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                vacc[r * NV + v] = VEC(fma)(a_rp, b_v[v], vacc[r * NV + v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            T *c_v = c_blk + r * rs_c + v * VLEN;
            VEC(storeu)(c_v, add_onto_c ? VEC(add)(VEC(loadu)(c_v), vacc[r * NV + v])
                                        : vacc[r * NV + v]);
        }
}

#define GEMM_SMALL_ONE_ROW GEMM_SMALL_CAT(GEMM_SMALL_NAME, _one_row)
/* c[:NB] = a[0, :] @ B[:, :NB] for one row of a against B's contiguous rows,
 * NB columns side by side (NB <= GEMM_SMALL_ROWS x GEMM_SMALL_COLS), in kc
 * blocks with the strips' arithmetic. */
static inline __attribute__((always_inline))
void GEMM_SMALL_ONE_ROW(T *c, const T *a, int64_t cs_a, const T *b, int64_t rs_b, int64_t k,
                        int64_t kc, int c_holds_value, const int NB)
{
    for (int64_t pc = 0; pc < k; pc += kc) {
        const int64_t kb = k - pc < kc ? k - pc : kc;
        const int onto_c = c_holds_value || pc > 0;
        GEMM_SMALL_WHOLE(c, 0, a + pc * cs_a, 0, cs_a, b + pc * rs_b, rs_b, kb,
                         GEMM_CHAINS(T) && onto_c, onto_c && !GEMM_CHAINS(T), NB, 1);
    }
}
#endif

/* C[:, j0:j0+nb] for one strip of NB >= nb columns (b_blk = B[:, j0]).  NB is
 * a constant at every call site (the function is always inlined), so the j
 * loops have fixed trip counts and vectorise. */
static inline __attribute__((always_inline))
void GEMM_SMALL_STRIP(T *c, int64_t rs_c, int64_t cs_c,
                      const T *a, int64_t rs_a, int64_t cs_a,
                      const T *b_blk, int64_t rs_b, int64_t cs_b,
                      int64_t m, int64_t nb, int64_t k, int64_t kc, int c_holds_value,
                      T *strip, const int NB)
{
    for (int64_t pc = 0; pc < k; pc += kc) {
        const int64_t kb = k - pc < kc ? k - pc : kc;
        const int onto_c = c_holds_value || pc > 0;   /* add onto c, else overwrite */
        const T *b_strip = b_blk + pc * rs_b;         /* B[pc:pc+kb, j0:j0+nb] */
        int64_t rs_s = rs_b;                          /* row stride of the strip */
        if (!(cs_b == 1 && nb == NB)) {
            if (kb * NB > GEMM_SMALL_STRIP_ELEMS)
                goto strided;
            /* Copy into strip[kb][NB], along whichever B dimension is contiguous. */
            if (rs_b == 1 && cs_b != 1) {
#ifdef GEMM_SMALL_COPY_T
                GEMM_SMALL_COPY_T(strip, NB, b_strip, cs_b, kb, nb);
#else
                for (int j = 0; j < NB; j++)
                    for (int64_t p = 0; p < kb; p++)
                        strip[p * NB + j] = j < nb ? b_strip[p + j * cs_b] : 0;
#endif
            } else {
                for (int64_t p = 0; p < kb; p++)
                    for (int j = 0; j < NB; j++)
                        strip[p * NB + j] = j < nb ? b_strip[p * rs_b + j * cs_b] : 0;
            }
            b_strip = strip;
            rs_s = NB;
        }
        const int chain_from_c = GEMM_CHAINS(T) && onto_c;
        const int add_onto_c = onto_c && !GEMM_CHAINS(T);
#ifdef VEC
        /* Vector accumulators, spelled out: in a plain T array the compiler
         * stored and reloaded them on every step (1 x 64 @ 64 x 32 ran 3x slower
         * than its FMA latency allows).  Where c's row segments are contiguous
         * (whole strips) they are read and written as vectors, GEMM_SMALL_ROWS
         * rows at a time, in a loop of their own: chosen row by row, the
         * compiler kept the accumulators in io[] of the other case, and the
         * seed's backward, whose outer products (k = 1) are mostly stores, took
         * 4 cycles a vector.  Else each row goes through io[]. */
        if (cs_c == 1 && nb == NB) {
            int64_t i = 0;
            for (; i + GEMM_SMALL_ROWS <= m; i += GEMM_SMALL_ROWS)
                GEMM_SMALL_WHOLE(c + i * rs_c, rs_c, a + i * rs_a + pc * cs_a, rs_a, cs_a,
                                 b_strip, rs_s, kb, chain_from_c, add_onto_c, NB,
                                 GEMM_SMALL_ROWS);
            for (; i < m; i++)
                GEMM_SMALL_WHOLE(c + i * rs_c, rs_c, a + i * rs_a + pc * cs_a, rs_a, cs_a,
                                 b_strip, rs_s, kb, chain_from_c, add_onto_c, NB, 1);
            continue;
        }
#endif
        for (int64_t i = 0; i < m; i++) {
            const T *a_row = a + i * rs_a + pc * cs_a;   /* A[i, pc:pc+kb] */
            T *c_blk = c + i * rs_c;                     /* C[i, j0:j0+nb] */
            T io[GEMM_SMALL_COLS];   /* the chain's start (float64 onto c), then the block sum */
            for (int j = 0; j < NB; j++)
                io[j] = chain_from_c && j < nb ? c_blk[j * cs_c] : 0;
#ifdef VEC
            GEMM_SMALL_WHOLE(io, 0, a_row, 0, cs_a, b_strip, rs_s, kb, 1, 0, NB, 1);
#else
            for (int64_t p = 0; p < kb; p++) {
                const T a_ip = a_row[p * cs_a];
                const T *b_p = b_strip + p * rs_s;       /* B[pc+p, j0:j0+NB] */
                for (int j = 0; j < NB; j++)
                    io[j] = GEMM_MADD(io[j], a_ip, b_p[j]);
            }
#endif
            for (int64_t j = 0; j < nb; j++)
                c_blk[j * cs_c] = add_onto_c ? c_blk[j * cs_c] + io[j] : io[j];
        }
        continue;
    strided:
        /* A kc block too long for the copy buffer: read B where it lies. */
        for (int64_t i = 0; i < m; i++) {
            const T *a_row = a + i * rs_a + pc * cs_a;
            T *c_blk = c + i * rs_c;
            for (int64_t j = 0; j < nb; j++) {
                T acc = GEMM_CHAINS(T) && onto_c ? c_blk[j * cs_c] : 0;
                for (int64_t p = 0; p < kb; p++)
                    acc = GEMM_MADD(acc, a_row[p * cs_a], b_strip[p * rs_b + j * cs_b]);
                c_blk[j * cs_c] = onto_c && !GEMM_CHAINS(T) ? c_blk[j * cs_c] + acc : acc;
            }
        }
    }
}

#ifdef VEC
#define GEMM_SMALL_ROW_B GEMM_SMALL_CAT(GEMM_SMALL_NAME, _row_b)
#define GEMM_SMALL_ROW_B_ELEMS (8192 / (int)sizeof(T))   /* the sums' buffer: in L1 */
/* One row of A against a B with contiguous rows (m == 1, cs_b == 1, B = a
 * weight stored transposed): c[j] for a chunk of up to 8 KiB of columns at a
 * time, whose sums live in s[] (L1) while B's rows stream past, four rows per
 * sweep (four loads of B and four FMAs per vector of s read and written; a
 * strip of columns held in registers instead walks B's rows a few cache
 * lines at a time, and ran at 60-75 % of this speed on 1 x 512 @ 512 x 1536).
 * The arithmetic of the strips: each output one chain in increasing p, float32
 * from zero per kc block then added onto c, float64 continuing from c. */
static void GEMM_SMALL_ROW_B(T *c, int64_t cs_c, const T *a, int64_t cs_a,
                             const T *b, int64_t rs_b, int64_t n, int64_t k, int64_t kc,
                             int c_holds_value)
{
    enum { VLEN = VEC(len) };
    _Alignas(64) T s[GEMM_SMALL_ROW_B_ELEMS];
    if (GEMM_CHAINS(T))
        kc = k;   /* one chain from c: no blocks */
    const int64_t nv = n / VLEN * VLEN;   /* columns in whole vectors; the rest below */
    for (int64_t j0 = 0; j0 < nv; j0 += GEMM_SMALL_ROW_B_ELEMS) {
        const int64_t nb = nv - j0 < GEMM_SMALL_ROW_B_ELEMS ? nv - j0 : GEMM_SMALL_ROW_B_ELEMS;
        T *c_j = c + j0 * cs_c;
        for (int64_t pc = 0; pc < k; pc += kc) {
            const int64_t kb = k - pc < kc ? k - pc : kc;
            const int onto_c = c_holds_value || pc > 0;
            for (int64_t j = 0; j < nb; j++)
                s[j] = GEMM_CHAINS(T) && onto_c ? c_j[j * cs_c] : 0;
            const T *a_p = a + pc * cs_a, *b_p = b + pc * rs_b + j0;
            int64_t p = 0;
            for (; p + 4 <= kb; p += 4) {
                const VEC(t) a0 = VEC(set1)(a_p[p * cs_a]), a1 = VEC(set1)(a_p[(p + 1) * cs_a]);
                const VEC(t) a2 = VEC(set1)(a_p[(p + 2) * cs_a]);
                const VEC(t) a3 = VEC(set1)(a_p[(p + 3) * cs_a]);
                const T *b0 = b_p + p * rs_b;
                for (int64_t j = 0; j < nb; j += VLEN) {
                    VEC(t) acc = VEC(fma)(a0, VEC(loadu)(b0 + j), VEC(loadu)(s + j));
                    acc = VEC(fma)(a1, VEC(loadu)(b0 + rs_b + j), acc);
                    acc = VEC(fma)(a2, VEC(loadu)(b0 + 2 * rs_b + j), acc);
                    VEC(storeu)(s + j, VEC(fma)(a3, VEC(loadu)(b0 + 3 * rs_b + j), acc));
                }
            }
            for (; p < kb; p++) {
                const VEC(t) a0 = VEC(set1)(a_p[p * cs_a]);
                const T *b0 = b_p + p * rs_b;
                for (int64_t j = 0; j < nb; j += VLEN)
                    VEC(storeu)(s + j, VEC(fma)(a0, VEC(loadu)(b0 + j), VEC(loadu)(s + j)));
            }
            for (int64_t j = 0; j < nb; j++)
                c_j[j * cs_c] = onto_c && !GEMM_CHAINS(T) ? c_j[j * cs_c] + s[j] : s[j];
        }
    }
    for (int64_t j = nv; j < n; j++)   /* the last columns, one chain each */
        for (int64_t pc = 0; pc < k; pc += kc) {
            const int64_t kb = k - pc < kc ? k - pc : kc;
            const int onto_c = c_holds_value || pc > 0;
            T acc = GEMM_CHAINS(T) && onto_c ? c[j * cs_c] : 0;
            for (int64_t p = pc; p < pc + kb; p++)
                acc = GEMM_MADD(acc, a[p * cs_a], b[p * rs_b + j]);
            c[j * cs_c] = onto_c && !GEMM_CHAINS(T) ? c[j * cs_c] + acc : acc;
        }
}
#endif

static void GEMM_SMALL_NAME(T *c, int64_t rs_c, int64_t cs_c,
                            const T *a, int64_t rs_a, int64_t cs_a,
                            const T *b, int64_t rs_b, int64_t cs_b,
                            int64_t m, int64_t n, int64_t k, int64_t kc, int c_holds_value)
{
    enum { COLS = GEMM_SMALL_COLS };
    _Alignas(64) T strip[GEMM_SMALL_STRIP_ELEMS];   /* [kb][NB], when B is copied */
    /* float64's kc is a cache block only (its chains continue from c): make its
     * strips fit the copy buffer (with the packed path's long KC they did not,
     * and every product took the scalar fallback below: 2x slower) */
    if (GEMM_CHAINS(T) && kc > GEMM_SMALL_STRIP_ELEMS / COLS)
        kc = GEMM_SMALL_STRIP_ELEMS / COLS;
#ifdef GEMM_SMALL_ROWS_WT
#ifndef GEMM_SMALL_ROWS_WT_WORK
#define GEMM_SMALL_ROWS_WT_WORK 0.0
#endif
    if (m <= GEMM_SMALL_ROWS_WT_MAX && rs_b == 1 && cs_b != 1
            && (m == 1 || (double)m * (double)n * (double)k > GEMM_SMALL_ROWS_WT_WORK)) {
        GEMM_SMALL_ROWS_WT(c, rs_c, cs_c, a, rs_a, cs_a, b, cs_b, m, n, k, kc, c_holds_value);
        return;
    }
#endif
    int64_t j0 = 0;
#ifdef VEC
    if (m == 1 && cs_b == 1 && n > GEMM_SMALL_ROWS * COLS) {
        GEMM_SMALL_ROW_B(c, cs_c, a, cs_a, b, rs_b, n, k, kc, c_holds_value);
        return;
    }
#if GEMM_SMALL_ROWS >= 2
    /* One row against up to GEMM_SMALL_ROWS strips: all of them side by side,
     * in the registers as many rows take (one strip's chains wait on the FMA
     * latency: float64 1 x 32 @ 32 x 64 ran at half the FMA rate) */
    if (m == 1 && cs_b == 1 && cs_c == 1 && n >= 2 * COLS) {
        j0 = n / COLS * COLS;   /* 2 .. GEMM_SMALL_ROWS strips */
        if (j0 == 2 * COLS)
            GEMM_SMALL_ONE_ROW(c, a, cs_a, b, rs_b, k, kc, c_holds_value, 2 * COLS);
#if GEMM_SMALL_ROWS >= 4
        else if (j0 == 3 * COLS)
            GEMM_SMALL_ONE_ROW(c, a, cs_a, b, rs_b, k, kc, c_holds_value, 3 * COLS);
        else if (j0 == 4 * COLS)
            GEMM_SMALL_ONE_ROW(c, a, cs_a, b, rs_b, k, kc, c_holds_value, 4 * COLS);
#endif
        else
            j0 = 0;   /* (a GEMM_SMALL_ROWS of 3: the strips below) */
    }
#endif
#endif
    for (; j0 < n; j0 += COLS) {
        const int64_t nb = n - j0 < COLS ? n - j0 : COLS;
        T *c_j = c + j0 * cs_c;             /* C[:, j0:j0+nb] */
        const T *b_j = b + j0 * cs_b;       /* B[:, j0:j0+nb] */
        if (nb > COLS / 2)
            GEMM_SMALL_STRIP(c_j, rs_c, cs_c, a, rs_a, cs_a, b_j, rs_b, cs_b, m, nb, k, kc,
                             c_holds_value, strip, COLS);
        else if (nb > COLS / 4)
            GEMM_SMALL_STRIP(c_j, rs_c, cs_c, a, rs_a, cs_a, b_j, rs_b, cs_b, m, nb, k, kc,
                             c_holds_value, strip, COLS / 2);
        else
            GEMM_SMALL_STRIP(c_j, rs_c, cs_c, a, rs_a, cs_a, b_j, rs_b, cs_b, m, nb, k, kc,
                             c_holds_value, strip, COLS / 4);
    }
}

#undef GEMM_SMALL_CAT_
#undef GEMM_SMALL_CAT
#undef GEMM_SMALL_STRIP
#undef GEMM_SMALL_WHOLE
#undef GEMM_SMALL_ONE_ROW
#undef GEMM_SMALL_STRIP_ELEMS
#undef GEMM_SMALL_ROW_B
#undef GEMM_SMALL_ROW_B_ELEMS

/* the parameters, for the next inclusion */
#undef T
#undef GEMM_MADD
#undef VEC
#undef GEMM_SMALL_COPY_T
#undef GEMM_SMALL_ROWS_WT
#undef GEMM_SMALL_ROWS_WT_MAX
#undef GEMM_SMALL_ROWS_WT_WORK
#undef GEMM_SMALL_NAME
#undef GEMM_SMALL_COLS
#undef GEMM_SMALL_ROWS
