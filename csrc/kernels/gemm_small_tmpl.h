/* The direct GEMM loop for small products (no heap, no threads), written once
 * for every path and dtype.  Included with
 *   T                   float or double
 *   GEMM_SMALL_NAME     the function's name
 *   GEMM_MADD(s, x, y)  the path's multiply-add s + x * y: "(s) + (x) * (y)"
 *                       for the portable path (built with -ffp-contract=off,
 *                       so two roundings), __builtin_fma* for the SIMD paths
 *                       (one rounding, compiled for the ISA of the includer)
 * defined.  No include guard on purpose.  Contract: gemm_small_f32_fn in
 * gemm_internal.h.
 *
 * Order of work: GEMM_SMALL_NB columns of c at a time, one kc block of k at a
 * time.  The B strip B[pc:pc+kb, j0:j0+NB] is read in place when its rows are
 * contiguous and complete, else copied (zero-padded) into a small stack buffer;
 * then every row of c runs NB independent sums over p (so they pipeline, and a
 * SIMD build vectorises the j loop: one or two vector registers).  Every output
 * is the sum of its kc blocks, each summed from zero in increasing p with
 * GEMM_MADD and then added onto c, exactly as the path's packed micro-kernel
 * does, so the two give the same bits. */

#ifndef GEMM_SMALL_KC_MAX
/* Longest kc block the stack strip holds: [GEMM_SMALL_KC_MAX][GEMM_SMALL_NB]
 * elements, 8 KiB for float, 16 KiB for double. */
#define GEMM_SMALL_KC_MAX 128
#endif

static void GEMM_SMALL_NAME(T *c, int64_t rs_c, int64_t cs_c,
                            const T *a, int64_t rs_a, int64_t cs_a,
                            const T *b, int64_t rs_b, int64_t cs_b,
                            int64_t m, int64_t n, int64_t k, int64_t kc, int c_holds_value)
{
    enum { NB = GEMM_SMALL_NB };
    _Alignas(64) T strip[GEMM_SMALL_KC_MAX * NB];   /* [kb][NB], when B is copied */
    for (int64_t j0 = 0; j0 < n; j0 += NB) {
        const int64_t nb = n - j0 < NB ? n - j0 : NB;
        const T *b_blk = b + j0 * cs_b;                   /* B[:, j0:j0+nb] */
        for (int64_t pc = 0; pc < k; pc += kc) {
            const int64_t kb = k - pc < kc ? k - pc : kc;
            const int onto_c = c_holds_value || pc > 0;   /* add onto c, else overwrite */
            const T *b_strip = b_blk + pc * rs_b;         /* B[pc:pc+kb, j0:j0+nb] */
            int64_t rs_s = rs_b;                          /* row stride of the strip */
            if (!(cs_b == 1 && nb == NB)) {
                if (kb > GEMM_SMALL_KC_MAX)
                    goto strided;
                /* Copy, along whichever B dimension is contiguous. */
                if (cs_b == 1 || (rs_b != 1 && cs_b != 1)) {
                    for (int64_t p = 0; p < kb; p++)
                        for (int64_t j = 0; j < NB; j++)
                            strip[p * NB + j] = j < nb ? b_strip[p * rs_b + j * cs_b] : 0;
                } else {
                    for (int64_t j = 0; j < NB; j++)
                        for (int64_t p = 0; p < kb; p++)
                            strip[p * NB + j] = j < nb ? b_strip[p + j * cs_b] : 0;
                }
                b_strip = strip;
                rs_s = NB;
            }
            for (int64_t i = 0; i < m; i++) {
                const T *a_row = a + i * rs_a + pc * cs_a;   /* A[i, pc:pc+kb] */
                T *c_blk = c + i * rs_c + j0 * cs_c;         /* C[i, j0:j0+nb] */
                T acc[NB];
                for (int j = 0; j < NB; j++)
                    acc[j] = 0;
                for (int64_t p = 0; p < kb; p++) {
                    const T a_ip = a_row[p * cs_a];
                    const T *b_p = b_strip + p * rs_s;       /* B[pc+p, j0:j0+NB] */
                    for (int j = 0; j < NB; j++)
                        acc[j] = GEMM_MADD(acc[j], a_ip, b_p[j]);
                }
                if (cs_c == 1 && nb == NB) {
                    if (onto_c)
                        for (int j = 0; j < NB; j++)
                            c_blk[j] = c_blk[j] + acc[j];
                    else
                        for (int j = 0; j < NB; j++)
                            c_blk[j] = acc[j];
                } else {
                    for (int64_t j = 0; j < nb; j++)
                        c_blk[j * cs_c] = onto_c ? c_blk[j * cs_c] + acc[j] : acc[j];
                }
            }
            continue;
        strided:
            /* A kc block longer than the strip: read B where it lies. */
            for (int64_t i = 0; i < m; i++) {
                const T *a_row = a + i * rs_a + pc * cs_a;
                T *c_blk = c + i * rs_c + j0 * cs_c;
                for (int64_t j = 0; j < nb; j++) {
                    T acc = 0;
                    for (int64_t p = 0; p < kb; p++)
                        acc = GEMM_MADD(acc, a_row[p * cs_a], b_strip[p * rs_b + j * cs_b]);
                    c_blk[j * cs_c] = onto_c ? c_blk[j * cs_c] + acc : acc;
                }
            }
        }
    }
}
