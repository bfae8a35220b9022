/* Strided matrix views: the one way a kernel is handed an operand.
 *
 * Element [i, j] of a view x is ((T *)x.data)[i * x.rs + j * x.cs]: strides
 * are counted in elements (not bytes) and may be zero or negative.  A batch
 * view adds the batch stride bs: item b is at data + b * bs.  `data` is
 * type-erased so that one signature serves every dtype (the glue picks the
 * kernel for a dtype from a table, csrc/dtype.h); a kernel reads it as its T.
 *
 * mk_mat / mk_batch are written (results), mk_cmat / mk_cbatch only read:
 * handing an input where a result is wanted does not compile. */
#ifndef MYATT_KERNELS_VIEW_H
#define MYATT_KERNELS_VIEW_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const void *data;
    int64_t rows, cols;
    int64_t rs, cs;
} mk_cmat;

typedef struct {
    void *data;
    int64_t rows, cols;
    int64_t rs, cs;
} mk_mat;

typedef struct {
    const void *data;
    int64_t batch, rows, cols;
    int64_t bs, rs, cs;
} mk_cbatch;

typedef struct {
    void *data;
    int64_t batch, rows, cols;
    int64_t bs, rs, cs;
} mk_batch;

/* A C-contiguous [rows, cols] result / input. */
static inline mk_mat mk_mat_c(void *data, int64_t rows, int64_t cols)
{
    return (mk_mat){data, rows, cols, cols, 1};
}

static inline mk_cmat mk_cmat_c(const void *data, int64_t rows, int64_t cols)
{
    return (mk_cmat){data, rows, cols, cols, 1};
}

/* A written view read back as an input. */
static inline mk_cmat mk_const(mk_mat x)
{
    return (mk_cmat){x.data, x.rows, x.cols, x.rs, x.cs};
}

/* The transpose: rows and columns swapped, no data moved. */
static inline mk_cmat mk_t(mk_cmat x)
{
    return (mk_cmat){x.data, x.cols, x.rows, x.cs, x.rs};
}

/* The block [r0:r0 + rows, c0:c0 + cols] of x, elements of `size` bytes. */
static inline mk_cmat mk_cblock(mk_cmat x, int64_t r0, int64_t c0, int64_t rows, int64_t cols,
                                size_t size)
{
    return (mk_cmat){(const char *)x.data + (r0 * x.rs + c0 * x.cs) * (int64_t)size,
                     rows, cols, x.rs, x.cs};
}

static inline mk_mat mk_block(mk_mat x, int64_t r0, int64_t c0, int64_t rows, int64_t cols,
                              size_t size)
{
    return (mk_mat){(char *)x.data + (r0 * x.rs + c0 * x.cs) * (int64_t)size,
                    rows, cols, x.rs, x.cs};
}

/* Item i of a batch, elements of `size` bytes. */
static inline mk_cmat mk_citem(mk_cbatch x, int64_t i, size_t size)
{
    return (mk_cmat){(const char *)x.data + i * x.bs * (int64_t)size, x.rows, x.cols, x.rs, x.cs};
}

static inline mk_mat mk_item(mk_batch x, int64_t i, size_t size)
{
    return (mk_mat){(char *)x.data + i * x.bs * (int64_t)size, x.rows, x.cols, x.rs, x.cs};
}

#endif
