"""The GEMM summation order of docs/torch-summation-order.md as a plain reference (NumPy and
exact fractions), and whether torch's MKL sums in that order on this machine.

The rule was measured on AMD Zen 4/5, where MKL's main kernel follows it; MKL picks its code
path by CPU, and on other CPUs (an Intel Xeon with AVX-512: float32 sums of k <= 384 as one
chain, 384 < k <= 768 in two halves) it sums differently. Tests that compare myatt's products
with torch's bit for bit do so only where `torch_sums_in_our_order` holds; the rule itself is
asserted against myatt everywhere (tests/test_summation_order.py).
"""
import functools
from fractions import Fraction

import numpy as np


def kc_rule(k):
    return k if k <= 192 else k // 2 if k <= 384 else 192


def fma32(a, b, c):
    """fmaf(a, b, c) elementwise for float32 arrays: a * b is exact in float64, a * b + c
    rounds once in float64, then to float32.  That double rounding could differ from
    one rounding only if the float64 sum were inexact and an exact float32 tie: checked."""
    exact = a.astype(np.float64) * b.astype(np.float64)
    s = exact + c.astype(np.float64)
    r = s.astype(np.float32)
    inexact = (s - exact) != c.astype(np.float64)
    other = np.nextafter(r, np.where(s > r, np.float32(np.inf), np.float32(-np.inf)))
    tie = (r.astype(np.float64) + other.astype(np.float64)) / 2 == s
    assert not np.any(inexact & tie & (s != r)), "double-rounding hazard: pick other data"
    return r


def ref_f32(x, w, bias):
    """x [m, k] @ w[n, k]^T (+ bias) in the float32 rule."""
    m, k = x.shape
    n = w.shape[0]
    kc = kc_rule(k) if k else 1
    tot = None if bias is None else np.broadcast_to(bias, (m, n)).astype(np.float32)
    for p0 in range(0, k, kc):
        acc = np.zeros((m, n), np.float32)
        for p in range(p0, min(p0 + kc, k)):
            acc = fma32(np.broadcast_to(x[:, p:p + 1], (m, n)), np.broadcast_to(w[:, p], (m, n)), acc)
        tot = acc if tot is None else (tot + acc).astype(np.float32)
    return np.zeros((m, n), np.float32) if tot is None else tot


def ref_f64(x, w, bias):
    """The float64 rule with exact FMA (Fraction arithmetic, correctly rounded back:
    int / int true division rounds correctly)."""
    m, k = x.shape
    n = w.shape[0]
    out = np.empty((m, n), np.float64)
    xf = [[Fraction(float(v)) for v in row] for row in x]
    wf = [[Fraction(float(v)) for v in row] for row in w]
    for i in range(m):
        for j in range(n):
            acc = 0.0 if bias is None else float(bias[j])
            for p in range(k):
                e = xf[i][p] * wf[j][p] + Fraction(acc)
                acc = e.numerator / e.denominator
            out[i, j] = acc
    return out


# One main-region shape (m, n in whole groups of 4 and 12) for each of the rule's regimes of k.
PROBE_SHAPES = {np.dtype(np.float32): [(8, 150, 24), (8, 300, 24), (8, 500, 24), (8, 1000, 24)],
                np.dtype(np.float64): [(8, 70, 24), (8, 200, 12)]}


@functools.lru_cache(maxsize=None)
def torch_sums_in_our_order(dtype):
    """Whether torch's F.linear (MKL) gives the rule's bits here, for every probe shape, with
    and without bias: then bit-for-bit comparisons of products with torch are meaningful."""
    import torch
    import torch.nn.functional as F

    dtype = np.dtype(dtype)
    rng = np.random.default_rng(7)
    ref = ref_f32 if dtype == np.float32 else ref_f64
    for m, k, n in PROBE_SHAPES[dtype]:
        x = rng.standard_normal((m, k)).astype(dtype)
        w = rng.standard_normal((n, k)).astype(dtype)
        b = rng.standard_normal(n).astype(dtype)
        for bias in (b, None):
            theirs = F.linear(torch.from_numpy(x), torch.from_numpy(w),
                              None if bias is None else torch.from_numpy(bias)).numpy()
            if not np.array_equal(ref(x, w, bias), theirs):
                return False
    return True
