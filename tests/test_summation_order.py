"""The GEMM's summation order: torch's (MKL's) measured rule, docs/torch-summation-order.md.

Our kernel's contract (csrc/kernels/gemm/gemm_internal.h), asserted bit for bit against a
reference in NumPy / Python (tests/mkl_order.py) for every kernel path:

  float32: KC = k if k <= 192, k // 2 if k <= 384, else 192; each block summed from 0
           with one FMA per term in increasing p; tot = bias + blk0 + blk1 + ...
           (no bias: blk0 + blk1 + ...)
  float64: one FMA chain in increasing p starting from the bias (or 0).

Agreement with torch itself depends on the machine (MKL's code path): only reported,
never asserted (the benchmark prints the same share as its "=torch" column); the tests that
compare products with torch bit for bit run that comparison where
mkl_order.torch_sums_in_our_order holds.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from mkl_order import ref_f32, ref_f64


F32_SHAPES = [(1, 5, 3), (3, 40, 7), (9, 150, 49), (17, 192, 50), (13, 257, 20), (8, 300, 96),
              (5, 385, 11), (33, 500, 64), (4, 1000, 13), (250, 70, 100)]
F64_SHAPES = [(1, 5, 3), (3, 7, 30), (9, 70, 25), (5, 130, 13), (2, 260, 3)]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape", F32_SHAPES, ids=str)
def test_float32_rule_bit_exact(rng, shape, with_bias):
    m, k, n = shape
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if with_bias else None
    expected = ref_f32(x, w, b)
    np.testing.assert_array_equal(myatt.linear(x, w, b), expected, strict=True)
    # bmm: the same sums with B = w^T contiguous (another packing, the same bits)
    if not with_bias:
        got = myatt.bmm(x[None], np.ascontiguousarray(w.T)[None])[0]
        np.testing.assert_array_equal(got, expected, strict=True)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape", F64_SHAPES, ids=str)
def test_float64_rule_bit_exact(rng, shape, with_bias):
    m, k, n = shape
    x = rng.standard_normal((m, k))
    w = rng.standard_normal((n, k))
    b = rng.standard_normal(n) if with_bias else None
    expected = ref_f64(x, w, b)
    np.testing.assert_array_equal(myatt.linear(x, w, b), expected, strict=True)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rule_whatever_the_thread_count(rng, threads):
    m, k, n = 300, 400, 200   # big enough for the thread pool
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    old = myatt.get_num_threads()
    try:
        myatt.set_num_threads(threads)
        got = myatt.linear(x, w, b)
    finally:
        myatt.set_num_threads(old)
    np.testing.assert_array_equal(got, ref_f32(x, w, b), strict=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_report_share_identical_to_torch(rng, dtype):
    """Not asserted (MKL's order is machine-specific): printed for -s runs. The weights are
    scaled as nn.Linear's (1/sqrt(k)), so that the sums stay unit-scale and assert_close holds
    whatever order MKL sums in (test_long_reductions.py has the unit-scale case)."""
    shares = []
    for m, k, n in [(128, 512, 256), (37, 257, 50), (64, 300, 96), (200, 100, 130)]:
        x = rng.standard_normal((m, k)).astype(dtype)
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(dtype)
        b = rng.standard_normal(n).astype(dtype)
        ours = myatt.linear(x, w, b)
        theirs = F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)).numpy()
        torch.testing.assert_close(torch.from_numpy(ours), torch.from_numpy(theirs))
        shares.append(float(np.mean(ours == theirs)))
    print(f"\n{np.dtype(dtype).name}: share of linear outputs bit-identical to torch: "
          + ", ".join(f"{s:.3f}" for s in shares))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("sizes,S", [((5, 4, 7, 6, 3), 9), ((100, 157, 30, 40, 20), 70),
                                     ((200, 300, 64, 250, 33), 40)], ids=str)
def test_fused_module_equals_cat_and_linear(rng, dtype, sizes, S):
    """The fused forward sums cat(Q, K) @ W^T (and cat(Q, applied) @ Wc^T) as ONE
    reduction, through the gemm's two-source packing: bit for bit what myatt's own
    kernels give on concatenated copies, as torch's cat + Linear."""
    m = myatt.MyAtt(*sizes, dtype=dtype)
    q, k, v1, v2, _ = sizes
    Q = rng.standard_normal((1, S, q)).astype(dtype)
    K = rng.standard_normal((1, S, k)).astype(dtype)
    V = rng.standard_normal((1, v1, v2)).astype(dtype)
    out, attn = m(Q, K, V)
    scores = myatt.linear(np.concatenate((Q[0], K[0]), -1), m.attn.weight, m.attn.bias)
    aw = myatt.softmax(scores, -1)
    np.testing.assert_array_equal(attn, aw, strict=True)
    applied = myatt.bmm(aw[None], V)[0]
    expected = myatt.linear(np.concatenate((Q[0], applied), -1), m.attn_combine.weight,
                            m.attn_combine.bias)
    np.testing.assert_array_equal(out[0], expected, strict=True)


def test_fused_module_threads(rng):
    """Bands of rows over the thread pool offset both sources of [Q | K]."""
    sizes, S = (200, 300, 64, 250, 33), 300
    m = myatt.MyAtt(*sizes, dtype=np.float32)
    Q = rng.standard_normal((1, S, 200)).astype(np.float32)
    K = rng.standard_normal((1, S, 300)).astype(np.float32)
    V = rng.standard_normal((1, 64, 250)).astype(np.float32)
    old = myatt.get_num_threads()
    try:
        results = []
        for n in (1, 3):
            myatt.set_num_threads(n)
            results.append(m(Q, K, V))
    finally:
        myatt.set_num_threads(old)
    scores = myatt.linear(np.concatenate((Q[0], K[0]), -1), m.attn.weight, m.attn.bias)
    for out, attn in results:
        np.testing.assert_array_equal(attn, myatt.softmax(scores, -1), strict=True)
        np.testing.assert_array_equal(out, results[0][0], strict=True)
