/* The SIMD micro-kernels of gemm, written once for both dtypes and both vector
 * instruction sets: included by gemm_avx2.c and gemm_avx512.c (after their
 * vocabulary, simd_avx2.h / simd_avx512.h) with
 *   T                   float or double
 *   VEC(op)             the vocabulary of T's vectors (avx512_f32_##op): its
 *                       t, len, loadu, storeu, set1, fma, add and zero
 *   GEMM_KERNEL_MR      the tile's rows
 *   GEMM_KERNEL_NV      the tile's vectors of columns (NR = NV * VEC(len))
 *   GEMM_KERNEL_NAME    the prefix of the functions defined (gemm_f32_avx512)
 * defined.  It defines NAME_fma, NAME_start and NAME_finish (the pieces, for
 * the path's edge kernels too), NAME_kernel (gemm_kernel_*_fn: A from a packed
 * panel) and NAME_kernel_rows (gemm_kernel_rows_*_fn: A read in place), and
 * undefines all its parameters at its end.  No include guard on purpose.
 *
 * Arithmetic (the contract of gemm_internal.h, torch's order): one FMA per
 * term in increasing p; float32 sums each KC block from zero and then adds it
 * onto c, float64 (GEMM_CHAINS) starts its accumulators from c and continues
 * one chain.  The portable kernels do the same per output, so every path and
 * both ways of reading A give the same bits. */

#if !defined(T) || !defined(VEC) || !defined(GEMM_KERNEL_MR) || !defined(GEMM_KERNEL_NV) \
    || !defined(GEMM_KERNEL_NAME)
#error "gemm_kernel_tmpl.h: define T, VEC, GEMM_KERNEL_MR, GEMM_KERNEL_NV and GEMM_KERNEL_NAME"
#endif

#define GEMM_KERNEL_CAT_(x, y) x##y
#define GEMM_KERNEL_CAT(x, y) GEMM_KERNEL_CAT_(x, y)
#define GEMM_KERNEL_FN(suffix) GEMM_KERNEL_CAT(GEMM_KERNEL_NAME, suffix)
#define GEMM_KERNEL_NR (GEMM_KERNEL_NV * VEC(len))

/* acc[v][i] += A[i, p] * B[p, v*VLEN:(v+1)*VLEN] for p0 <= p < p1, i < MR,
 * v < NV (the vectors computed: GEMM_KERNEL_NV in full tiles, fewer in an edge
 * tile), A[i, p] at a[i * ars + (p - p0) * acs] (a packed panel: ars = 1,
 * acs = MR; rows in place: acs = 1), B[p, :] at b_panel + p * NR.  Inlined
 * with NV and the strides known. */
static inline __attribute__((always_inline))
void GEMM_KERNEL_FN(_fma)(int NV, VEC(t) acc[GEMM_KERNEL_NV][GEMM_KERNEL_MR],
                          int64_t p0, int64_t p1, const T *a, int64_t ars, int64_t acs,
                          const T *b_panel)
{
    for (int64_t p = p0; p < p1; p++) {
        const T *a_p = a + (p - p0) * acs;                 /* A[0:MR, p] */
        const T *b_p = b_panel + p * GEMM_KERNEL_NR;        /* B[p, 0:NR] */
        VEC(t) b[GEMM_KERNEL_NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            b[v] = VEC(loadu)(b_p + v * VEC(len));
#pragma GCC unroll 8
        for (int i = 0; i < GEMM_KERNEL_MR; i++) {
            const VEC(t) a_ip = VEC(set1)(a_p[i * ars]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[v][i] = VEC(fma)(a_ip, b[v], acc[v][i]);
        }
    }
}

/* The accumulators of a full tile at the start: c[MR, NR] for a float64 chain
 * that continues (accumulate), else zeros. */
static inline __attribute__((always_inline))
void GEMM_KERNEL_FN(_start)(VEC(t) acc[GEMM_KERNEL_NV][GEMM_KERNEL_MR], const T *c,
                            int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = GEMM_KERNEL_MR, NR = GEMM_KERNEL_NR };
    if (!GEMM_CHAINS(T) || !accumulate) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_KERNEL_NV; v++)
                acc[v][i] = VEC(zero)();
        return;
    }
    _Alignas(64) T tile[MR * NR];
    const T *src = c;
    int64_t rs = rs_c;
    if (cs_c != 1) {
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                tile[i * NR + j] = c[i * rs_c + j * cs_c];
        src = tile;
        rs = NR;
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_KERNEL_NV; v++)
            acc[v][i] = VEC(loadu)(src + i * rs + v * VEC(len));
}

/* c[MR, NR] = acc, or (float32 with accumulate: its block sum) c + acc */
static inline __attribute__((always_inline))
void GEMM_KERNEL_FN(_finish)(VEC(t) acc[GEMM_KERNEL_NV][GEMM_KERNEL_MR], T *c,
                             int64_t rs_c, int64_t cs_c, int accumulate)
{
    enum { MR = GEMM_KERNEL_MR, NR = GEMM_KERNEL_NR };
    const int add = !GEMM_CHAINS(T) && accumulate;
    if (cs_c == 1) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            T *c_row = c + i * rs_c;
#pragma GCC unroll 4
            for (int v = 0; v < GEMM_KERNEL_NV; v++) {
                VEC(t) r = acc[v][i];
                if (add)
                    r = VEC(add)(VEC(loadu)(c_row + v * VEC(len)), r);
                VEC(storeu)(c_row + v * VEC(len), r);
            }
        }
        return;
    }
    _Alignas(64) T tile[MR * NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < GEMM_KERNEL_NV; v++)
            VEC(storeu)(tile + i * NR + v * VEC(len), acc[v][i]);
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            T *c_ij = c + i * rs_c + j * cs_c;
            *c_ij = add ? *c_ij + tile[i * NR + j] : tile[i * NR + j];
        }
}

/* c[MR, NR] = (accumulate ? c : 0) + a_panel[kc][MR]^T @ b_panel[kc][NR] */
static void GEMM_KERNEL_FN(_kernel)(int64_t kc, const T *a_panel, const T *b_panel,
                                    T *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    VEC(t) acc[GEMM_KERNEL_NV][GEMM_KERNEL_MR];
    GEMM_KERNEL_FN(_start)(acc, c, rs_c, cs_c, accumulate);
    GEMM_KERNEL_FN(_fma)(GEMM_KERNEL_NV, acc, 0, kc, a_panel, 1, GEMM_KERNEL_MR, b_panel);
    GEMM_KERNEL_FN(_finish)(acc, c, rs_c, cs_c, accumulate);
}

/* the same with A read in place: columns [0, k1) from rows of a1, [k1, kc) of a2 */
static void GEMM_KERNEL_FN(_kernel_rows)(int64_t kc, const T *a1, int64_t rs_a1, int64_t k1,
                                         const T *a2, int64_t rs_a2, const T *b_panel,
                                         T *c, int64_t rs_c, int64_t cs_c, int accumulate)
{
    VEC(t) acc[GEMM_KERNEL_NV][GEMM_KERNEL_MR];
    GEMM_KERNEL_FN(_start)(acc, c, rs_c, cs_c, accumulate);
    GEMM_KERNEL_FN(_fma)(GEMM_KERNEL_NV, acc, 0, k1, a1, rs_a1, 1, b_panel);
    GEMM_KERNEL_FN(_fma)(GEMM_KERNEL_NV, acc, k1, kc, a2, rs_a2, 1, b_panel);
    GEMM_KERNEL_FN(_finish)(acc, c, rs_c, cs_c, accumulate);
}

#undef GEMM_KERNEL_CAT_
#undef GEMM_KERNEL_CAT
#undef GEMM_KERNEL_FN
#undef GEMM_KERNEL_NR
#undef GEMM_KERNEL_MR
#undef GEMM_KERNEL_NV
#undef GEMM_KERNEL_NAME
#undef T
#undef VEC
