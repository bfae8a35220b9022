/* gemm_bf16_linear's AVX512_BF16 kernel (gemm_bf16.h: the order it sums in).
 * Compiled for AVX-512 + BF16 by MYATT_TARGET_PUSH whatever the build's
 * flags; only called when cpu.c found AVX512_BF16 usable (mk_cpu_bf16_dot).
 *
 * w is packed once per call into panels of 32 outputs: for each pair of k,
 * the 32 dwords (w[j, 2p], w[j, 2p + 1]) (zero past n and past k), from
 * rows of w or, for a transposed view, from its memory rows; x is read
 * in place, a dword of two bfloat16 per row and pair, broadcast.  The tile is
 * 14 rows x 32 outputs: 28 zmm accumulators, each vdpbf16ps one pair of k for
 * 16 outputs of a row.  Tiles sweep a group of 4 panels (512 KiB at k = 2048:
 * it stays in L2) over a band of rows; threads take bands of rows (of panel
 * groups when there are too few rows). */
#include "runtime/cpu.h"

#ifdef MYATT_X86

#include <immintrin.h>
#include <string.h>

#include "gemm_bf16.h"
#include "runtime/alloc.h"
#include "runtime/threads.h"

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512 ",avx512bw,avx512bf16")

#define BF_MR 14
#define BF_NR 32
#define BF_GROUP 4          /* panels swept together */
/* Below this many multiply-adds the product runs on one thread. */
#define BF_THREAD_WORK ((int64_t)1 << 22)

typedef struct {
    uint16_t *y;
    const uint16_t *x, *zero;
    const uint32_t *wp;      /* [panels][pairs][32] */
    const uint16_t *bias;    /* added before the rounding (gemm_bf16.h), or NULL */
    int64_t rs_bias, rs_y, rs_x, m, n, k, pairs, panels, mblocks, groups;
    int by_rows, ntasks;
    int64_t block;           /* k's blocks (gemm_bf16.h) */
} bf_job;

static inline __m512 bf_dot(__m512 acc, __m512i a, __m512i b)
{
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* 16 bfloat16 (the lanes of mask; zero past it) as float32 */
static inline __m512 bf_load16(__mmask16 mask, const uint16_t *p)
{
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

/* The tile of rows[0..13] (x rows, or a zero row past m) and panel wp: the
 * float32 sums of gemm_bf16.h, plus the bias (row r at bias + r * rs_bias),
 * rounded to bfloat16 into the first mr rows and nr columns of y; or, with
 * c32, the sums stored there in float32 (rows rs_y apart; added to what is
 * there with `accumulate`).  Inlined: each caller's copy has its own store. */
static inline __attribute__((always_inline)) void
bf_tile(const uint16_t *const *rows, const uint32_t *wp, const uint16_t *bias, int64_t rs_bias,
        uint16_t *y, int64_t rs_y, int mr, int nr, int64_t k, int64_t block, float *c32,
        int accumulate)
{
    __m512 acc[BF_MR][2], tot[BF_MR][2];
    for (int64_t lo = 0; lo < k; lo += block) {
        const int64_t hi = lo + block < k ? lo + block : k;
#pragma GCC unroll 14
        for (int r = 0; r < BF_MR; r++)
            acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        for (int64_t p = lo / 2; p < hi / 2; p++) {
            const __m512i b0 = _mm512_load_si512(wp + p * BF_NR);
            const __m512i b1 = _mm512_load_si512(wp + p * BF_NR + 16);
#pragma GCC unroll 14
            for (int r = 0; r < BF_MR; r++) {
                int32_t pair;
                memcpy(&pair, rows[r] + 2 * p, sizeof pair);
                const __m512i a = _mm512_set1_epi32(pair);
                acc[r][0] = bf_dot(acc[r][0], a, b0);
                acc[r][1] = bf_dot(acc[r][1], a, b1);
            }
        }
        if (hi & 1) {     /* an odd k's last element alone (w's packed pair ends in 0) */
            const int64_t p = hi / 2;
            const __m512i b0 = _mm512_load_si512(wp + p * BF_NR);
            const __m512i b1 = _mm512_load_si512(wp + p * BF_NR + 16);
#pragma GCC unroll 14
            for (int r = 0; r < BF_MR; r++) {
                const __m512i a = _mm512_set1_epi32(rows[r][hi - 1]);
                acc[r][0] = bf_dot(acc[r][0], a, b0);
                acc[r][1] = bf_dot(acc[r][1], a, b1);
            }
        }
#pragma GCC unroll 14
        for (int r = 0; r < BF_MR; r++)
            for (int h = 0; h < 2; h++)
                tot[r][h] = lo == 0 ? acc[r][h] : _mm512_add_ps(tot[r][h], acc[r][h]);
    }
    if (k == 0)
        for (int r = 0; r < BF_MR; r++)
            tot[r][0] = tot[r][1] = _mm512_setzero_ps();
    const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    if (c32 != NULL) {
        for (int r = 0; r < mr; r++) {
            float *cr = c32 + r * rs_y;
            __m512 v0 = tot[r][0], v1 = tot[r][1];
            if (accumulate) {
                v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), v0);
                v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), v1);
            }
            _mm512_mask_storeu_ps(cr, m0, v0);
            _mm512_mask_storeu_ps(cr + 16, m1, v1);
        }
        return;
    }
    for (int r = 0; r < mr; r++) {
        __m512 v0 = tot[r][0], v1 = tot[r][1];
        if (bias != NULL) {
            v0 = _mm512_add_ps(v0, bf_load16(m0, bias + r * rs_bias));
            v1 = _mm512_add_ps(v1, bf_load16(m1, bias + r * rs_bias + 16));
        }
        _mm256_mask_storeu_epi16(y + r * rs_y, m0, (__m256i)_mm512_cvtneps_pbh(v0));
        if (m1)
            _mm256_mask_storeu_epi16(y + r * rs_y + 16, m1, (__m256i)_mm512_cvtneps_pbh(v1));
    }
}

/* Rows [mb0, mb1) x panel groups [g0, g1) of the product. */
static void bf_range(const bf_job *j, int64_t mb0, int64_t mb1, int64_t g0, int64_t g1)
{
    const uint16_t *rows[BF_MR];
    for (int64_t g = g0; g < g1; g++) {
        const int64_t p1 = (g + 1) * BF_GROUP < j->panels ? (g + 1) * BF_GROUP : j->panels;
        for (int64_t mb = mb0; mb < mb1; mb++) {
            const int64_t i0 = mb * BF_MR;
            const int mr = j->m - i0 < BF_MR ? (int)(j->m - i0) : BF_MR;
            for (int r = 0; r < BF_MR; r++)
                rows[r] = r < mr ? j->x + (i0 + r) * j->rs_x : j->zero;
            for (int64_t pn = g * BF_GROUP; pn < p1; pn++) {
                const int64_t c0 = pn * BF_NR;
                const int nr = j->n - c0 < BF_NR ? (int)(j->n - c0) : BF_NR;
                bf_tile(rows, j->wp + pn * j->pairs * BF_NR,
                        j->bias != NULL ? j->bias + i0 * j->rs_bias + c0 : NULL, j->rs_bias,
                        j->y + i0 * j->rs_y + c0, j->rs_y, mr, nr, j->k, j->block, NULL, 0);
            }
        }
    }
}

static void bf_task(void *arg, int task)
{
    const bf_job *j = arg;
    const int64_t total = j->by_rows ? j->mblocks : j->groups;
    const int64_t a = total * task / j->ntasks, b = total * (task + 1) / j->ntasks;
    if (j->by_rows)
        bf_range(j, a, b, 0, j->groups);
    else
        bf_range(j, 0, j->mblocks, a, b);
}

typedef struct {
    uint32_t *wp;
    const uint16_t *w;
    int64_t rs_w, cs_w, n, k, pairs;
} bf_pack_job;

/* r[0..15] (16 dwords each) transposed in place: r[q][c] = old r[c][q]. */
static inline void bf_transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* r[4i + j], 128-bit lane L: element 4L + j of rows 4i .. 4i + 3 */
    for (int j = 0; j < 4; j++) {
        const __m512i a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
        const __m512i b = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
        const __m512i c = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
        const __m512i d = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
        t[j] = _mm512_shuffle_i32x4(a, c, 0x88);
        t[8 + j] = _mm512_shuffle_i32x4(a, c, 0xdd);
        t[4 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(b, d, 0xdd);
    }
    for (int q = 0; q < 16; q++)
        r[q] = t[q];
}

/* Panels [p0, p1) of a w whose columns are contiguous (a transposed view:
 * row j of w is column j of memory rows rs_w apart): each pair's two rows of
 * 16 outputs widened and interleaved (zero past n and past k). */
static void bf_pack_cols(const bf_pack_job *j, int64_t p0, int64_t p1)
{
    for (int64_t pn = p0; pn < p1; pn++) {
        uint32_t *dst = j->wp + pn * j->pairs * BF_NR;
        for (int h = 0; h < BF_NR; h += 16) {
            const int64_t c0 = pn * BF_NR + h, left = j->n - c0;
            const __mmask16 mask = left >= 16 ? 0xffff : left <= 0 ? 0
                                   : (__mmask16)((1u << left) - 1);
            for (int64_t p = 0; p < j->pairs; p++) {
                const uint16_t *r = j->w + 2 * p * j->rs_w + c0;
                const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, r));
                const __m512i hi = 2 * p + 1 < j->k
                    ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, r + j->rs_w))
                    : _mm512_setzero_si512();
                _mm512_store_si512(dst + p * BF_NR + h,
                                   _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        }
    }
}

/* Panels [p0, p1) of w, packed (zero past n and past k): whole 16-pair blocks
 * by 16 x 16 dword transposes, the rest one element at a time; a transposed
 * w by bf_pack_cols. */
static void bf_pack(void *arg, int64_t p0, int64_t p1)
{
    const bf_pack_job *j = arg;
    if (j->cs_w != 1) {
        bf_pack_cols(j, p0, p1);
        return;
    }
    const int64_t whole = j->k / 32 * 16;         /* pairs in whole blocks of 16 */
    for (int64_t pn = p0; pn < p1; pn++) {
        uint32_t *dst = j->wp + pn * j->pairs * BF_NR;
        for (int h = 0; h < BF_NR; h += 16) {
            const uint16_t *src[16];
            for (int c = 0; c < 16; c++) {
                const int64_t col = pn * BF_NR + h + c;
                src[c] = col < j->n ? j->w + col * j->rs_w : NULL;
            }
            for (int64_t p = 0; p < whole; p += 16) {
                __m512i r[16];
                for (int c = 0; c < 16; c++)
                    r[c] = src[c] != NULL ? _mm512_loadu_si512(src[c] + 2 * p)
                                          : _mm512_setzero_si512();
                bf_transpose16(r);
                for (int q = 0; q < 16; q++)
                    _mm512_store_si512(dst + (p + q) * BF_NR + h, r[q]);
            }
            for (int c = 0; c < 16; c++)
                for (int64_t p = whole; p < j->pairs; p++) {
                    uint32_t v = 0;
                    if (src[c] != NULL) {
                        v = src[c][2 * p];
                        if (2 * p + 1 < j->k)
                            v |= (uint32_t)src[c][2 * p + 1] << 16;
                    }
                    dst[p * BF_NR + h + c] = v;
                }
        }
    }
}

int gemm_bf16_linear_avx512(uint16_t *y, int64_t rs_y, const uint16_t *x, int64_t rs_x,
                            mk_cmat wv, const uint16_t *bias, int64_t rs_bias, int64_t m,
                            int64_t n, int64_t k, int x_transposed)
{
    if (m <= 0 || n <= 0)
        return 0;
    const int64_t pairs = (k + 1) / 2, panels = (n + BF_NR - 1) / BF_NR;
    uint32_t *wp = mk_alloc(mk_bytes((size_t)(panels * pairs * BF_NR), sizeof *wp));
    uint16_t *zero = mk_alloc(mk_bytes((size_t)(2 * pairs + 2), sizeof *zero));
    if (wp == NULL || zero == NULL) {
        mk_free(wp);
        mk_free(zero);
        return -1;
    }
    memset(zero, 0, (size_t)(2 * pairs + 2) * sizeof *zero);
    /* rows of k contiguous (k = 1: any), or a transposed view: columns contiguous */
    const int by_rows = wv.cs == 1 || k <= 1;
    bf_pack_job pj = {wp, wv.data, by_rows ? wv.rs : wv.cs, by_rows ? 1 : wv.cs, n, k, pairs};
    mk_parallel_bands(panels, pairs * BF_NR * (int64_t)sizeof *wp, (int64_t)1 << 20, bf_pack,
                      &pj);
    bf_job j = {y, x, zero, wp, bias, rs_bias, rs_y, rs_x, m, n, k, pairs, panels,
                (m + BF_MR - 1) / BF_MR, (panels + BF_GROUP - 1) / BF_GROUP, 1, 1,
                k <= 1024 || x_transposed ? 512 : 1024};
    int64_t nthreads = (double)m * (double)n * (double)k < (double)BF_THREAD_WORK
                           ? 1 : mk_get_num_threads();
    j.by_rows = j.mblocks >= 2 * nthreads || j.mblocks >= j.groups;
    const int64_t units = j.by_rows ? j.mblocks : j.groups;
    j.ntasks = (int)(nthreads < units ? nthreads : units);
    mk_parallel_run(j.ntasks, bf_task, &j);
    mk_free(wp);
    mk_free(zero);
    return 0;
}

/* The bits of a float32 whose value is a bfloat16 (its low half zero). */
static inline uint16_t bf_bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

/* w [n, k] (float32 view of bfloat16 values) packed as bf_pack packs a bfloat16
 * w: panels of 32 outputs, each pair of k one dword (zero past n and past k). */
static void bf_pack_f32(uint32_t *wp, mk_cmat w, int64_t pairs)
{
    const int64_t n = w.rows, k = w.cols, panels = (n + BF_NR - 1) / BF_NR;
    const float *src = w.data;
    for (int64_t pn = 0; pn < panels; pn++) {
        uint32_t *dst = wp + pn * pairs * BF_NR;
        for (int h = 0; h < BF_NR; h += 16) {
            const int64_t c0 = pn * BF_NR + h, left = n - c0;
            int64_t p0 = 0;
            if (w.cs == 1 && left >= 16) {   /* rows of k contiguous: 16 x 16 transposes */
                for (; p0 + 16 <= k / 2; p0 += 16) {
                    __m512i r[16];
                    for (int c = 0; c < 16; c++) {
                        const float *row = src + (c0 + c) * w.rs + 2 * p0;
                        r[c] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 16),
                                                            _mm512_loadu_ps(row));
                    }
                    bf_transpose16(r);
                    for (int q = 0; q < 16; q++)
                        _mm512_store_si512(dst + (p0 + q) * BF_NR + h, r[q]);
                }
            } else if (w.rs == 1 && left > 0) {   /* columns contiguous: 16 outputs a load */
                const __mmask16 mask = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
                const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
                for (; p0 < k / 2; p0++) {
                    const float *r0 = src + c0 + 2 * p0 * w.cs;
                    const __m512i lo = _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, r0));
                    const __m512i hi = _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, r0 + w.cs));
                    _mm512_store_si512(dst + p0 * BF_NR + h,
                                       _mm512_or_si512(_mm512_srli_epi32(lo, 16),
                                                       _mm512_and_si512(hi, high)));
                }
            }
            for (int c = 0; c < 16; c++)   /* the rest, one element at a time */
                for (int64_t p = p0; p < pairs; p++) {
                    uint32_t v = 0;
                    if (c < left) {
                        const float *e = src + (c0 + c) * w.rs + 2 * p * w.cs;
                        v = bf_bits_of(e[0]);
                        if (2 * p + 1 < k)
                            v |= (uint32_t)bf_bits_of(e[w.cs]) << 16;
                    }
                    dst[p * BF_NR + h + c] = v;
                }
        }
    }
}

int gemm_bf16_f32_avx512(mk_mat c, mk_cmat x, mk_cmat w, int accumulate)
{
    const int64_t m = x.rows, k = x.cols, n = w.rows;
    if (m <= 0 || n <= 0)
        return 0;
    const int64_t pairs = (k + 1) / 2, panels = (n + BF_NR - 1) / BF_NR, kp = 2 * pairs;
    uint32_t *wp = mk_alloc(mk_bytes((size_t)(panels * pairs * BF_NR), sizeof *wp));
    /* x's rows in bfloat16 (an odd k's last pair ends in 0), then a zero row */
    uint16_t *xb = mk_alloc(mk_bytes((size_t)((m + 1) * kp + 2), sizeof *xb));
    if (wp == NULL || xb == NULL) {
        mk_free(wp);
        mk_free(xb);
        return -1;
    }
    bf_pack_f32(wp, w, pairs);
    const float *xs = x.data;
    for (int64_t i = 0; i < m; i++) {
        uint16_t *dst = xb + i * kp;
        const float *row = xs + i * x.rs;
        int64_t j = 0;
        if (x.cs == 1)
            for (; j + 16 <= k; j += 16)
                _mm256_storeu_si256((__m256i *)(dst + j),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(row + j)));
        for (; j < k; j++)
            dst[j] = bf_bits_of(row[j * x.cs]);
        if (k & 1)
            dst[k] = 0;
    }
    memset(xb + m * kp, 0, (size_t)(kp + 2) * sizeof *xb);
    const int64_t block = k <= 1024 ? 512 : 1024;
    float *cd = c.data;
    const uint16_t *rows[BF_MR];
    for (int64_t i0 = 0; i0 < m; i0 += BF_MR) {
        const int mr = m - i0 < BF_MR ? (int)(m - i0) : BF_MR;
        for (int r = 0; r < BF_MR; r++)
            rows[r] = xb + (r < mr ? i0 + r : m) * kp;
        for (int64_t pn = 0; pn < panels; pn++) {
            const int64_t c0 = pn * BF_NR;
            const int nr = n - c0 < BF_NR ? (int)(n - c0) : BF_NR;
            bf_tile(rows, wp + pn * pairs * BF_NR, NULL, 0, NULL, c.rs, mr, nr, k, block,
                    cd + i0 * c.rs + c0, accumulate);
        }
    }
    mk_free(wp);
    mk_free(xb);
    return 0;
}

MYATT_TARGET_POP()

#endif
