/* mk_copy_view (copy.h): bands of rows (mk_parallel_bands). */
#include "copy.h"

#include <string.h>

#include "threads.h"

/* The bytes of a copy's band (mk_parallel_bands: below twice this, one
 * thread; waking one costs more than copying less than this). */
#define MK_COPY_THREAD_BYTES ((int64_t)4 << 20)

typedef struct {
    char *dst;
    mk_cmat m;
    int64_t item;
} copy_job;

/* Rows [r0, r1) of a view whose columns are strided, elements of SIZE bytes,
 * in tiles of 32 x 32: a transposed view's source lines are each read once
 * (not once per element of a row). */
#define COPY_TILES(SIZE)                                                                  \
    static void copy_tiles_##SIZE(char *dst, const mk_cmat *m, int64_t r0, int64_t r1)    \
    {                                                                                     \
        const char *src = m->data;                                                        \
        for (int64_t i0 = r0; i0 < r1; i0 += 32)                                          \
            for (int64_t j0 = 0; j0 < m->cols; j0 += 32) {                                \
                const int64_t i1 = i0 + 32 < r1 ? i0 + 32 : r1;                           \
                const int64_t j1 = j0 + 32 < m->cols ? j0 + 32 : m->cols;                 \
                for (int64_t i = i0; i < i1; i++)                                         \
                    for (int64_t j = j0; j < j1; j++)                                     \
                        memcpy(dst + (i * m->cols + j) * SIZE,                            \
                               src + (i * m->rs + j * m->cs) * SIZE, SIZE);               \
            }                                                                             \
    }
COPY_TILES(2)
COPY_TILES(4)
COPY_TILES(8)

static void copy_rows(char *dst, const mk_cmat *m, int64_t item, int64_t r0, int64_t r1)
{
    const int64_t row_bytes = m->cols * item;
    if (m->cs == 1 && m->rs == m->cols) {   /* contiguous rows: one block (the seed's
                                               copies were a memcpy call per row) */
        memcpy(dst + r0 * row_bytes, (const char *)m->data + r0 * row_bytes,
               (size_t)((r1 - r0) * row_bytes));
        return;
    }
    if (m->cs == 1) {
        for (int64_t i = r0; i < r1; i++)
            memcpy(dst + i * row_bytes, (const char *)m->data + i * m->rs * item,
                   (size_t)row_bytes);
        return;
    }
    switch (item) {   /* (element copies of a constant size: no memcpy call each) */
    case 2: copy_tiles_2(dst, m, r0, r1); break;
    case 4: copy_tiles_4(dst, m, r0, r1); break;
    case 8: copy_tiles_8(dst, m, r0, r1); break;
    default:
        for (int64_t i = r0; i < r1; i++)
            for (int64_t j = 0; j < m->cols; j++)
                memcpy(dst + (i * m->cols + j) * item,
                       (const char *)m->data + (i * m->rs + j * m->cs) * item, (size_t)item);
    }
}

static void copy_band(void *arg, int64_t r0, int64_t r1)
{
    const copy_job *job = arg;
    copy_rows(job->dst, &job->m, job->item, r0, r1);
}

void mk_copy_view(void *dst, mk_cmat m, int64_t item)
{
    if (m.rows <= 0 || m.cols <= 0)
        return;
    copy_job job = {dst, m, item};
    mk_parallel_bands(m.rows, m.cols * item, MK_COPY_THREAD_BYTES, copy_band, &job);
}
