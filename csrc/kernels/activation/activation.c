/* The activations (activation.h): activation_tmpl.h's bodies for float and
 * double, and the public symbols, over the kernel threads when large.  float32
 * gelu with approximate='none' is torch's oneDNN computation instead
 * (gelu_onednn.h), on the path cpu.h chose (activation_internal.h); but for one
 * element, where torch does not call oneDNN (its use_mkldnn wants numel > 1)
 * and its own kernel's scalar loop computes what activation_tmpl.h does. */
#include "activation.h"
#include "activation_internal.h"
#include "gelu_onednn.h"

#include <math.h>

#include "runtime/threads.h"

#define T float
#define SUF(name) name##_f32
#define MATH(fn) fn##f
#include "activation_tmpl.h"

#define T double
#define SUF(name) name##_f64
#define MATH(fn) fn
#include "activation_tmpl.h"

/* oneDNN's gelu_erf minimax polynomials (gelu_onednn.h): the coefficients of
 * degree 0 to 5 of each interval, as its table gives their bits (25 of 32) */
const uint32_t gelu_minimax_bits[6][32] = {
    {
        0xa6f2cb94u, 0x32827792u, 0x3381cc0cu, 0x34523d4au, 0x351ac44du, 0x35f36d88u,
        0x36ee8229u, 0x37b8a3bbu, 0x3867a213u, 0x3940033bu, 0x3a2a5a1du, 0x3ae35863u,
        0x3b7828f2u, 0x3c08b14bu, 0x3c515ed3u, 0xbb503236u, 0xbd8d8e5eu, 0xbe8abcd9u,
        0xbf0c19a2u, 0xbeccb328u, 0x3e176cedu, 0x3f470d99u, 0x3f7abb28u, 0x3f800000u,
        0x00000000u,
    },
    {
        0x3f4c422au, 0x3f4c421fu, 0x3f4c4207u, 0x3f4c41cbu, 0x3f4c413bu, 0x3f4c3fadu,
        0x3f4c3a2fu, 0x3f4c2d40u, 0x3f4c146au, 0x3f4bc341u, 0x3f4ad08cu, 0x3f48f8cfu,
        0x3f45fac7u, 0x3f404e07u, 0x3f3b980fu, 0x3f48dff3u, 0x3f78b21bu, 0x3fbb0704u,
        0x40019c32u, 0x3fe536d6u, 0x3f81331eu, 0x3e6c8684u, 0x3c98f936u, 0x00000000u,
        0x3f800000u,
    },
    {
        0xb62173f4u, 0x3735e4cfu, 0x37f2ff89u, 0x388c23beu, 0x3917535cu, 0x39ab2ab0u,
        0x3a60fadbu, 0x3af9b960u, 0x3b6e5491u, 0x3c0a4ec5u, 0x3ca5aa8cu, 0x3d2138d9u,
        0x3d8737d4u, 0x3ddfb660u, 0x3e0f27abu, 0x3d94004bu, 0xbe0efdebu, 0xbf1d96c3u,
        0xbf89db58u, 0xbf6d9897u, 0xbef69fb8u, 0xbdc4f8a8u, 0xbbde6422u, 0x00000000u,
        0x00000000u,
    },
    {
        0xbe081a19u, 0xbe084570u, 0xbe08639bu, 0xbe089837u, 0xbe08f409u, 0xbe09ab95u,
        0xbe0b66d0u, 0xbe0e400au, 0xbe124df8u, 0xbe1bde02u, 0xbe2f19c9u, 0xbe4931bfu,
        0xbe685fbcu, 0xbe89c95fu, 0xbe96cbcau, 0xbe8044aau, 0xbe0550f2u, 0x3dcfd6a1u,
        0x3e94c826u, 0x3e79345fu, 0x3decec91u, 0x3ca46568u, 0x3aa1e00au, 0x00000000u,
        0x00000000u,
    },
    {
        0xba3d61dbu, 0x39f097a3u, 0x3a5845dcu, 0x3ab1fa35u, 0x3b0cefb8u, 0x3b653ab6u,
        0x3bcae527u, 0x3c221712u, 0x3c6c5840u, 0x3cc0a703u, 0x3d1dcc19u, 0x3d63656du,
        0x3d955907u, 0x3dbf9910u, 0x3dd53f69u, 0x3db7dcefu, 0x3d639ebeu, 0xba6ede48u,
        0xbd22be69u, 0xbd041cf1u, 0xbc64f5abu, 0xbb097a32u, 0xb8ebf380u, 0x00000000u,
        0x00000000u,
    },
    {
        0x3cb7d80cu, 0x3c9b6050u, 0x3c978d11u, 0x3c92e850u, 0x3c8d058bu, 0x3c848454u,
        0x3c6cd623u, 0x3c4c824bu, 0x3c2a7935u, 0x3be0b390u, 0x3b0651acu, 0xbb232f53u,
        0xbbd42fa0u, 0xbc2c5366u, 0xbc492c9eu, 0xbc2a7aa6u, 0xbbd55d04u, 0xba823a76u,
        0x3b102aa8u, 0x3ae25a7eu, 0x3a31f792u, 0x38b84375u, 0x3689bb5au, 0x00000000u,
        0x00000000u,
    },
};

static void gelu_minimax_portable(float *out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gelu_minimax_1(inp[i]);
}

static void gelu_as_portable(float *out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gelu_as_1(inp[i]);
}

static void gelu_grad_portable(float *grad_inp, const float *grad_out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        grad_inp[i] = grad_out[i] * gelu_as_grad_1(inp[i]);
}

static const gelu_erf_kernels gelu_erf_kernels_portable = {
    "portable", gelu_minimax_portable, gelu_as_portable, gelu_grad_portable,
};

/* The path mk_cpu_isa() chose (CPU detection + MYATT_KERNEL, decided once). */
static const gelu_erf_kernels *gelu_erf_select(void)
{
    switch (mk_cpu_isa()) {
#ifdef MYATT_X86
    case MK_ISA_AVX512: return &gelu_erf_kernels_avx512;
    case MK_ISA_AVX2: return &gelu_erf_kernels_avx2;
#endif
    default: return &gelu_erf_kernels_portable;
    }
}

/* Elementwise work over the kernel threads: a job's range function on chunks
 * of GELU_CHUNK elements (a multiple of every path's vector length), from
 * GELU_PARALLEL_MIN elements up (torch's GELU_MIN_ELEMENTS_FOR_MULTI_THREADING). */
enum { GELU_CHUNK = 8192, GELU_PARALLEL_MIN = 16384 };

typedef struct gelu_job gelu_job;
struct gelu_job {
    void (*range)(const gelu_job *j, int64_t lo, int64_t len);
    int approximate;
    void *out;                      /* forward: out; backward: grad_inp */
    const void *inp, *grad_out;     /* grad_out NULL: the forward */
    int64_t n, per_task;
};

/* float32, approximate='none': oneDNN's computation on the path cpu.h chose;
 * the forward's variant as oneDNN picks it: the minimax polynomials where
 * myatt's path is AVX-512 (oneDNN's on such a CPU), else A&S's erf */
static void gelu_range_onednn(const gelu_job *j, int64_t lo, int64_t len)
{
    const gelu_erf_kernels *k = gelu_erf_select();
    float *out = (float *)j->out + lo;
    const float *inp = (const float *)j->inp + lo;
    if (j->grad_out != NULL)
        k->grad(out, (const float *)j->grad_out + lo, inp, len);
    else
        (mk_cpu_isa() == MK_ISA_AVX512 ? k->minimax : k->as)(out, inp, len);
}

/* activation_tmpl.h's bodies */
#define GELU_RANGE(T, SUF)                                                                   \
    static void gelu_range_##SUF(const gelu_job *j, int64_t lo, int64_t len)                 \
    {                                                                                        \
        if (j->grad_out != NULL)                                                             \
            gelu_backward_body_##SUF((T *)j->out + lo, (const T *)j->grad_out + lo,          \
                                     (const T *)j->inp + lo, len, j->approximate);           \
        else                                                                                 \
            gelu_forward_body_##SUF((T *)j->out + lo, (const T *)j->inp + lo, len,           \
                                    j->approximate);                                         \
    }
GELU_RANGE(float, f32)
GELU_RANGE(double, f64)
#undef GELU_RANGE

static void gelu_task(void *arg, int task)
{
    const gelu_job *j = arg;
    const int64_t lo = (int64_t)task * j->per_task;
    const int64_t len = j->n - lo < j->per_task ? j->n - lo : j->per_task;
    if (len > 0)
        j->range(j, lo, len);
}

static void gelu_run(void (*range)(const gelu_job *, int64_t, int64_t), void *out,
                     const void *grad_out, const void *inp, int64_t n, int approximate)
{
    gelu_job j = {range, approximate, out, inp, grad_out, n, n};
    int tasks = 1;
    if (n >= GELU_PARALLEL_MIN) {
        const int64_t chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
        const int threads = mk_get_num_threads();
        tasks = chunks < threads ? (int)chunks : threads;
        j.per_task = (chunks + tasks - 1) / tasks * GELU_CHUNK;
    }
    if (tasks > 1)
        mk_parallel_run(tasks, gelu_task, &j);
    else
        gelu_task(&j, 0);
}

/* float32: oneDNN's exact gelu but for one element (see the head of this file) */
#define GELU_RANGE_F32(approximate, n) \
    ((approximate) == GELU_NONE && (n) > 1 ? gelu_range_onednn : gelu_range_f32)

void gelu_forward_f32(void *out, const void *inp, int64_t n, int approximate)
{
    gelu_run(GELU_RANGE_F32(approximate, n), out, NULL, inp, n, approximate);
}

void gelu_forward_f64(void *out, const void *inp, int64_t n, int approximate)
{
    gelu_run(gelu_range_f64, out, NULL, inp, n, approximate);
}

void gelu_backward_f32(void *grad_inp, const void *grad_out, const void *inp, int64_t n,
                       int approximate)
{
    gelu_run(GELU_RANGE_F32(approximate, n), grad_inp, grad_out, inp, n, approximate);
}

void gelu_backward_f64(void *grad_inp, const void *grad_out, const void *inp, int64_t n,
                       int approximate)
{
    gelu_run(gelu_range_f64, grad_inp, grad_out, inp, n, approximate);
}
