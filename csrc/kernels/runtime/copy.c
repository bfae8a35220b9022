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

static void copy_rows(char *dst, const mk_cmat *m, int64_t item, int64_t r0, int64_t r1)
{
    const int64_t row_bytes = m->cols * item;
    if (m->cs == 1 && m->rs == m->cols) {   /* contiguous rows: one block (the seed's
                                               copies were a memcpy call per row) */
        memcpy(dst + r0 * row_bytes, (const char *)m->data + r0 * row_bytes,
               (size_t)((r1 - r0) * row_bytes));
        return;
    }
    for (int64_t i = r0; i < r1; i++) {
        const char *row = (const char *)m->data + i * m->rs * item;
        char *d = dst + i * row_bytes;
        if (m->cs == 1)
            memcpy(d, row, (size_t)row_bytes);
        else
            for (int64_t j = 0; j < m->cols; j++)
                memcpy(d + j * item, row + j * m->cs * item, (size_t)item);
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
