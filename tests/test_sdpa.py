"""myatt.scaled_dot_product_attention against torch.nn.functional.scaled_dot_product_attention.

Default assert_close tolerances throughout (oracle.assert_matches).  torch computes in the
result dtype: its inputs (and a float mask) are converted to it first, as myatt converts
them.  The kernel's blocks are 32/64/256 query rows (by L) and 512 keys: the sizes below
sit on both sides of every block edge.
"""
import itertools
import tracemalloc

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from helpers import result_dtype
from oracle import assert_matches, opinfo_samples, to_torch

sdpa = myatt.scaled_dot_product_attention


def make(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def torch_sdpa(q, k, v, attn_mask=None, **kw):
    """torch's result for myatt's inputs: q, k, v (and a float mask) in the result dtype."""
    dt = result_dtype(np.asarray(q).dtype, np.asarray(k).dtype, np.asarray(v).dtype)
    return F.scaled_dot_product_attention(to_torch(q, dt), to_torch(k, dt), to_torch(v, dt),
                                          attn_mask=torch_mask(attn_mask, dt), **kw)


def check(q, k, v, attn_mask=None, equal_nan=False, **kw):
    ours = sdpa(q, k, v, attn_mask=attn_mask, **kw)
    assert_matches(ours, torch_sdpa(q, k, v, attn_mask=attn_mask, **kw), equal_nan=equal_nan)
    return ours


# ---- shapes -------------------------------------------------------------------------

SIZES = [0, 1, 31, 32, 33, 63, 64, 65, 191, 192, 255, 256, 257, 511, 512, 513, 767, 768, 1025]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("L", SIZES)
def test_query_lengths(L, dtype):
    rng = np.random.default_rng(L)
    check(make(rng, (2, L, 16), dtype), make(rng, (2, 40, 16), dtype), make(rng, (2, 40, 8), dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("S", SIZES)
def test_key_lengths(S, dtype):
    rng = np.random.default_rng(S)
    check(make(rng, (2, 70, 16), dtype), make(rng, (2, S, 16), dtype), make(rng, (2, S, 8), dtype))


@pytest.mark.parametrize("E, Ev", [(0, 4), (4, 0), (0, 0), (1, 1), (1, 7), (7, 1), (64, 64),
                                   (65, 33), (128, 128), (200, 16)])
def test_head_sizes(E, Ev):
    rng = np.random.default_rng(E * 1000 + Ev)
    check(make(rng, (3, 50, E)), make(rng, (3, 600, E)), make(rng, (3, 600, Ev)))


@pytest.mark.parametrize("L, S", [(1, 1), (1, 4096), (4096, 1), (300, 1100), (1100, 300),
                                  (0, 5), (5, 0), (0, 0)])
def test_lengths_differ(L, S):
    rng = np.random.default_rng(L + 7 * S)
    check(make(rng, (2, L, 16)), make(rng, (2, S, 16)), make(rng, (2, S, 16)))


@pytest.mark.parametrize("ndim", [2, 3, 4, 5])
def test_ndim(ndim):
    rng = np.random.default_rng(ndim)
    batch = (2, 3, 2)[:ndim - 2]
    check(make(rng, batch + (20, 8)), make(rng, batch + (30, 8)), make(rng, batch + (30, 5)))


@pytest.mark.parametrize("qb, kb, vb", [
    ((2, 3), (1, 3), (3,)), ((2, 1), (1, 3), (2, 3)), ((), (2, 3), ()), ((4,), (), (1,)),
    ((2, 1, 3), (3,), (1, 1, 1)), ((1,), (1,), (1,)), ((0,), (1,), ()), ((2, 0), (2, 1), (1,)),
])
def test_broadcast_batches(qb, kb, vb):
    rng = np.random.default_rng(len(qb) + 10 * len(kb))
    check(make(rng, qb + (9, 6)), make(rng, kb + (11, 6)), make(rng, vb + (11, 4)))


# ---- masks --------------------------------------------------------------------------

def mask_shapes(batch, L, S):
    """Every shape broadcastable to batch + (L, S): each dimension kept or 1, leading ones dropped."""
    full = batch + (L, S)
    for keep in itertools.product([True, False], repeat=len(full)):
        shape = tuple(n if kp else 1 for n, kp in zip(full, keep))
        for drop in range(len(full) + 1):
            yield shape[drop:]


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mask_every_broadcastable_shape(kind):
    rng = np.random.default_rng(5)
    batch, L, S = (2, 3), 40, 70
    q, k, v = make(rng, batch + (L, 8)), make(rng, batch + (S, 8)), make(rng, batch + (S, 8))
    for shape in sorted(set(mask_shapes(batch, L, S))):
        if kind == "bool":
            m = rng.random(shape) < 0.7
        else:
            m = make(rng, shape)
        check(q, k, v, attn_mask=m)


@pytest.mark.parametrize("L, S", [(33, 600), (300, 1100), (800, 530)])
def test_mask_long(L, S):
    rng = np.random.default_rng(L)
    q, k, v = make(rng, (2, L, 16)), make(rng, (2, S, 16)), make(rng, (2, S, 16))
    check(q, k, v, attn_mask=rng.random((L, S)) < 0.5)
    check(q, k, v, attn_mask=make(rng, (2, L, S)))


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("S", [5, 700])
def test_fully_masked_row_gives_zeros(kind, S):
    rng = np.random.default_rng(S)
    q, k, v = make(rng, (40, 8)), make(rng, (S, 8)), make(rng, (S, 8))
    keep = rng.random((40, S)) < 0.5
    keep[3] = False
    keep[39] = False
    m = keep if kind == "bool" else np.where(keep, 0.0, -np.inf).astype(np.float32)
    out = check(q, k, v, attn_mask=m)
    assert not out[3].any() and not out[39].any()


def test_mask_every_key_masked():
    rng = np.random.default_rng(0)
    q, k, v = make(rng, (2, 40, 8)), make(rng, (2, 600, 8)), make(rng, (2, 600, 8))
    out = check(q, k, v, attn_mask=np.zeros((600,), bool))
    assert not out.any()


def test_mask_float64_with_float32_inputs():
    rng = np.random.default_rng(1)
    q, k, v = make(rng, (9, 4)), make(rng, (7, 4)), make(rng, (7, 4))
    out = check(q, k, v, attn_mask=make(rng, (9, 7), np.float64))
    assert out.dtype == np.float32


def test_mask_float16_and_scalar():
    rng = np.random.default_rng(2)
    q, k, v = make(rng, (9, 4)), make(rng, (7, 4)), make(rng, (7, 4))
    check(q, k, v, attn_mask=make(rng, (9, 7), np.float16))
    check(q, k, v, attn_mask=np.float32(0.5))
    check(q, k, v, attn_mask=np.array([True] * 6 + [False]))


# ---- causal, scale, GQA -------------------------------------------------------------

@pytest.mark.parametrize("L, S", [(1, 1), (5, 5), (40, 70), (70, 40), (300, 1100), (1100, 300),
                                  (800, 800), (1025, 1537), (600, 3)])
def test_causal(L, S):
    rng = np.random.default_rng(L * 3 + S)
    check(make(rng, (2, L, 16)), make(rng, (2, S, 16)), make(rng, (2, S, 8)), is_causal=True)


# attn_mask with is_causal: torch 2.13's CPU kernel applies both on its flash path (4-D,
# E == Ev, a 2-D or 4-D mask, no dropout) and refuses them on its math path
MASK_FORMS = {"LS": lambda B, H, L, S: (L, S), "11LS": lambda B, H, L, S: (1, 1, L, S),
              "BHLS": lambda B, H, L, S: (B, H, L, S), "B1LS": lambda B, H, L, S: (B, 1, L, S),
              "1S": lambda B, H, L, S: (1, S), "L1": lambda B, H, L, S: (L, 1)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("L, S", [(5, 7), (7, 5), (1, 9), (33, 600), (600, 33), (513, 1025)])
@pytest.mark.parametrize("kind", ["float", "bool"])
@pytest.mark.parametrize("form", list(MASK_FORMS))
def test_mask_with_causal(dtype, L, S, kind, form):
    """Both applied, forward and gradients, as torch's (which equals the mask AND tril)."""
    rng = np.random.default_rng(L * 7 + S)
    B, H, E = 2, 3, 16
    q, k, v = (make(rng, (B, H, n, E), dtype) for n in (L, S, S))
    shape = MASK_FORMS[form](B, H, L, S)
    m = rng.random(shape) < 0.7 if kind == "bool" else make(rng, shape, dtype)
    ours = check(q, k, v, attn_mask=m, is_causal=True)
    tril = np.tril(np.ones((L, S), bool))
    both = m & tril if kind == "bool" else np.where(tril, m, -np.inf)
    np.testing.assert_array_equal(ours, sdpa(q, k, v, attn_mask=both))
    check_backward(q, k, v, attn_mask=m, is_causal=True)


@pytest.mark.parametrize("case", ["3-D", "5-D", "E != Ev", "dropout", "1-D mask", "3-D mask"])
def test_mask_with_causal_refused_where_torch_refuses(case):
    rng = np.random.default_rng(8)
    lead, Ev, mshape, kw = {"3-D": ((3,), 8, (5, 6), {}), "5-D": ((2, 2, 3), 8, (5, 6), {}),
                            "E != Ev": ((2, 3), 4, (5, 6), {}),
                            "dropout": ((2, 3), 8, (5, 6), {"dropout_p": 0.1}),
                            "1-D mask": ((2, 3), 8, (6,), {}),
                            "3-D mask": ((2, 3), 8, (3, 5, 6), {})}[case]
    q, k, v = make(rng, lead + (5, 8)), make(rng, lead + (6, 8)), make(rng, lead + (6, Ev))
    m = make(rng, mshape)
    with pytest.raises(RuntimeError if case != "1-D mask" else IndexError):   # torch's refusal
        F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v, m)),
                                       is_causal=True, **kw)
    with pytest.raises(ValueError, match=r"attn_mask and is_causal=True together"):
        sdpa(q, k, v, attn_mask=m, is_causal=True, **kw)


@pytest.mark.parametrize("L, S, E, Ev", [(0, 6, 8, 8), (5, 0, 8, 4), (5, 6, 8, 0), (5, 6, 0, 0)])
def test_mask_with_causal_on_an_empty_result_as_torch(L, S, E, Ev):
    """torch returns at once for an empty result or no keys, whatever the shapes: so does myatt."""
    rng = np.random.default_rng(9)
    q, k, v = make(rng, (3, L, E)), make(rng, (3, S, E)), make(rng, (3, S, Ev))
    check(q, k, v, attn_mask=make(rng, (L, S)), is_causal=True)


def test_decoding_with_a_key_value_cache():
    """is_causal aligns its triangle at the top left (query row i sees keys 0..i): right for a
    prefill (L == S), wrong for the new rows of a cached decode (L < S), which need the
    bottom-right triangle (row i sees keys 0..S - L + i) as an explicit mask (or no mask for
    a single new row). docs/conventions.md shows the same."""
    rng = np.random.default_rng(10)
    x = make(rng, (1, 4, 10, 16))                  # one sequence of 10 positions, 4 heads
    full = sdpa(x, x, x, is_causal=True)           # every position at once
    past, new = 7, 3                               # 7 cached, 3 new query rows
    q, kv = x[:, :, past:], x                      # keys and values: the cache and the new
    L, S = new, past + new
    bottom_right = np.tril(np.ones((L, S), bool), k=S - L)
    np.testing.assert_array_equal(sdpa(q, kv, kv, attn_mask=bottom_right), full[:, :, past:])
    assert_matches(sdpa(q, kv, kv, attn_mask=bottom_right),
                   torch_sdpa(q, kv, kv, attn_mask=bottom_right))
    top_left = sdpa(q, kv, kv, is_causal=True)     # sees keys 0..i only: not the decode's
    assert not np.allclose(top_left, full[:, :, past:])
    one = sdpa(x[:, :, -1:], kv, kv)               # a single new row sees every key: no mask
    np.testing.assert_array_equal(one, full[:, :, -1:])


@pytest.mark.parametrize("scale", [0.0, 0.125, 1.0, 3.0, -0.5])
def test_explicit_scale(scale):
    rng = np.random.default_rng(3)
    q, k, v = make(rng, (2, 70, 16)), make(rng, (2, 600, 16)), make(rng, (2, 600, 8))
    check(q, k, v, scale=scale)
    check(q, k, v, scale=scale, attn_mask=rng.random((70, 600)) < 0.5)


@pytest.mark.parametrize("ndim", [3, 4])
def test_causal_negative_scale(ndim):
    """4-D (E == Ev): torch's flash kernel multiplies the hidden keys' -inf by the scale, so the rows
    that hide a key are NaN (the last rows, which hide none, are not); 3-D: its math path adds
    the mask after the scaling: every row finite."""
    rng = np.random.default_rng(12)
    lead = (1, 2) if ndim == 4 else (2,)
    q, k, v = make(rng, lead + (40, 16)), make(rng, lead + (30, 16)), make(rng, lead + (30, 16))
    ours = check(q, k, v, is_causal=True, scale=-0.5, equal_nan=True)
    rows_nan = np.isnan(ours).all(axis=(-1, *range(ours.ndim - 2)))
    np.testing.assert_array_equal(rows_nan, np.arange(40) < 29 if ndim == 4 else False)


@pytest.mark.parametrize("hq, hk, hv", [(8, 2, 2), (8, 8, 8), (6, 3, 2), (4, 1, 1), (4, 1, 4)])
def test_gqa(hq, hk, hv):
    rng = np.random.default_rng(hq * 100 + hk * 10 + hv)
    q, k, v = make(rng, (2, hq, 33, 16)), make(rng, (2, hk, 70, 16)), make(rng, (2, hv, 70, 8))
    check(q, k, v, enable_gqa=True)
    check(q, k, v, enable_gqa=True, is_causal=True)
    check(q, k, v, enable_gqa=True, attn_mask=rng.random((hq, 33, 70)) < 0.6)


def test_gqa_decode():
    rng = np.random.default_rng(4)
    q, k, v = make(rng, (1, 32, 1, 128)), make(rng, (1, 8, 4096, 128)), make(rng, (1, 8, 4096, 128))
    check(q, k, v, enable_gqa=True)


@pytest.mark.parametrize("L", [1, 5, 32])
def test_gqa_heads_of_one_kv_head_together(L):
    """Few query rows: the SIMD forward computes the query heads that share a kv head as
    one item (their rows interleaved by head); per-head masks, causal and a strided query
    still give torch's result, and the bits of the contiguous query."""
    rng = np.random.default_rng(40 + L)
    q, k, v = make(rng, (2, 8, L, 16)), make(rng, (2, 2, 700, 16)), make(rng, (2, 2, 700, 24))
    want = check(q, k, v, enable_gqa=True)
    check(q, k, v, enable_gqa=True, is_causal=True)
    check(q, k, v, enable_gqa=True, attn_mask=rng.random((8, L, 700)) < 0.6)
    check(q, k, v, enable_gqa=True, attn_mask=make(rng, (2, 8, L, 700)))
    strided = np.repeat(q, 2, axis=-1)[..., ::2]
    np.testing.assert_array_equal(sdpa(strided, k, v, enable_gqa=True), want, strict=True)


# ---- special values -----------------------------------------------------------------

@pytest.mark.parametrize("where", ["q", "k", "v", "mask"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_inf_propagate(where, value):
    rng = np.random.default_rng(6)
    a = {"q": make(rng, (2, 40, 8)), "k": make(rng, (2, 600, 8)), "v": make(rng, (2, 600, 8)),
         "mask": make(rng, (40, 600))}
    a[where][..., 3, 5] = value
    check(a["q"], a["k"], a["v"], attn_mask=a["mask"], equal_nan=True)
    if where != "mask":
        check(a["q"], a["k"], a["v"], equal_nan=True)


def test_saturated_scores():
    rng = np.random.default_rng(7)
    q, k, v = make(rng, (2, 70, 16)) * 1e4, make(rng, (2, 600, 16)), make(rng, (2, 600, 8))
    check(q, k, v)
    check(q, k, v, is_causal=True)
    check(q, k, v, attn_mask=make(rng, (70, 600)) * 1e4)


# ---- dtypes and layouts -------------------------------------------------------------

@pytest.mark.parametrize("dq, dk, dv", [(np.float32, np.float32, np.float64),
                                        (np.float64, np.float32, np.float32),
                                        (np.float16, np.int32, np.float32),
                                        (np.int64, np.bool_, np.uint8)])
def test_dtypes(dq, dk, dv):
    rng = np.random.default_rng(8)
    q, k, v = (make(rng, s).astype(d) for s, d in zip([(9, 4), (7, 4), (7, 3)], [dq, dk, dv]))
    out = check(q, k, v)
    assert out.dtype == result_dtype(dq, dk, dv)


def test_layouts():
    rng = np.random.default_rng(9)
    q, k, v = make(rng, (2, 3, 70, 16)), make(rng, (2, 3, 600, 16)), make(rng, (2, 3, 600, 8))
    m = rng.random((3, 70, 600)) < 0.7
    want = sdpa(q, k, v, attn_mask=m)
    check(q, k, v, attn_mask=m)
    layouts = {
        "fortran": lambda a: np.asfortranarray(a),
        "strided": lambda a: np.repeat(a, 2, axis=-1)[..., ::2],
        "reversed": lambda a: np.ascontiguousarray(a[..., ::-1, :])[..., ::-1, :],
        "byteswapped": lambda a: a.astype(a.dtype.newbyteorder()),
        "readonly": lambda a: np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape),
        "tensor": lambda a: torch.from_numpy(a.copy()),
    }
    for name, f in layouts.items():
        got = sdpa(f(q), f(k), f(v), attn_mask=f(m))
        np.testing.assert_array_equal(got, want, err_msg=name, strict=True)
    # lists of Python floats are float64, as numpy.asarray reads them
    check(q.tolist(), k.tolist(), v.tolist(), attn_mask=m.tolist())
    check(q[0, 0].tolist(), k, v)
    qr = torch.from_numpy(q.copy()).requires_grad_()
    np.testing.assert_array_equal(sdpa(qr, k, v, attn_mask=m), want, strict=True)


def test_inputs_unchanged_and_result_new():
    rng = np.random.default_rng(10)
    q, k, v = make(rng, (9, 4)), make(rng, (7, 4)), make(rng, (7, 3))
    copies = [a.copy() for a in (q, k, v)]
    out = sdpa(q, k, v)
    for a, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(a, c)
    assert out.flags.c_contiguous and out.flags.owndata


def test_keywords_and_positional():
    rng = np.random.default_rng(11)
    q, k, v = make(rng, (9, 4)), make(rng, (7, 4)), make(rng, (7, 3))
    a = sdpa(q, k, v, None, 0.0, True, 0.3, False)
    b = sdpa(query=q, key=k, value=v, is_causal=True, scale=0.3)
    np.testing.assert_array_equal(a, b)


def test_signature_and_export():
    import inspect
    assert list(inspect.signature(sdpa).parameters) == [
        "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    assert "scaled_dot_product_attention" in myatt.__all__


# ---- threads ------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"mask": True}])
def test_bits_independent_of_thread_count(kw):
    rng = np.random.default_rng(12)
    q, k, v = make(rng, (2, 4, 300, 32)), make(rng, (2, 4, 1100, 32)), make(rng, (2, 4, 1100, 32))
    kw = dict(kw)
    if kw.pop("mask", False):
        kw["attn_mask"] = make(rng, (300, 1100))
    saved = myatt.get_num_threads()
    try:
        myatt.set_num_threads(1)
        one = sdpa(q, k, v, **kw)
        myatt.set_num_threads(2)
        two = sdpa(q, k, v, **kw)
    finally:
        myatt.set_num_threads(saved)
    np.testing.assert_array_equal(one, two)
    check(q, k, v, **kw)


# ---- dropout ------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("is_causal", [False, True])
def test_dropout_fraction_and_scaling(p, is_causal):
    """value = identity, so the output IS the weight matrix after dropout: every entry
    is 0 (dropped) or torch's weight / (1 - p), and the dropped share is p."""
    rng = np.random.default_rng(15)
    S = 600
    q, k = make(rng, (2, 3, 50, 8)), make(rng, (2, 3, S, 8))
    v = np.broadcast_to(np.eye(S, dtype=np.float32), (2, 3, S, S))
    myatt.manual_seed(0)
    out = sdpa(q, k, v, dropout_p=p, is_causal=is_causal)
    weights = torch_sdpa(q, k, v, is_causal=is_causal).numpy()
    kept = out != 0
    torch.testing.assert_close(torch.from_numpy(out[kept]), torch.from_numpy(weights[kept] / (1 - p)))
    live = weights != 0                          # causal: the upper triangle is 0 anyway
    dropped = 1 - kept[live].mean()
    n = live.sum()
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n), (dropped, p)


def test_dropout_one_gives_zeros():
    rng = np.random.default_rng(16)
    out = sdpa(make(rng, (2, 9, 4)), make(rng, (2, 7, 4)), make(rng, (2, 7, 3)), dropout_p=1.0)
    assert out.shape == (2, 9, 3) and not out.any()


def test_dropout_reproducible_and_thread_independent():
    rng = np.random.default_rng(17)
    q, k, v = make(rng, (2, 4, 300, 32)), make(rng, (2, 4, 1100, 32)), make(rng, (2, 4, 1100, 32))
    saved = myatt.get_num_threads()
    try:
        myatt.set_num_threads(1)
        myatt.manual_seed(3)
        one = sdpa(q, k, v, dropout_p=0.3)
        again = sdpa(q, k, v, dropout_p=0.3)
        myatt.set_num_threads(2)
        myatt.manual_seed(3)
        two = sdpa(q, k, v, dropout_p=0.3)
    finally:
        myatt.set_num_threads(saved)
    np.testing.assert_array_equal(one, two)
    assert not np.array_equal(one, again)        # the next call draws a new mask


@pytest.mark.parametrize("kw", [{}, {"mask": True}, {"dropout_p": 0.3}])
def test_decode_split_keys(kw):
    """L = 1 against a long S: the keys are split into chunks merged afterwards (so that
    decode runs on several threads); still torch's result, and bits equal for 1 and 2
    threads."""
    rng = np.random.default_rng(28)
    q, k, v = make(rng, (2, 1, 64)), make(rng, (2, 5000, 64)), make(rng, (2, 5000, 48))
    kw = dict(kw)
    if kw.pop("mask", False):
        keep = rng.random((1, 5000)) < 0.5
        keep[0, :1024] = False                   # whole chunks with every key masked
        kw["attn_mask"] = keep
    saved = myatt.get_num_threads()
    try:
        myatt.set_num_threads(1)
        myatt.manual_seed(5)
        one = sdpa(q, k, v, **kw)
        myatt.set_num_threads(2)
        myatt.manual_seed(5)
        two = sdpa(q, k, v, **kw)
    finally:
        myatt.set_num_threads(saved)
    np.testing.assert_array_equal(one, two)
    if "dropout_p" not in kw:
        check(q, k, v, **kw)
        check_backward(q, k, v, **kw)


# ---- memory -------------------------------------------------------------------------

def test_long_sequence_never_allocates_L_by_S():
    """L = S = 8192: the scores would be 256 MiB in float32; the traced peak (kernel
    workspaces go through PyMem_RawMalloc) stays a small fraction of that."""
    rng = np.random.default_rng(13)
    L = S = 8192
    q, k, v = make(rng, (1, 1, L, 8)), make(rng, (1, 1, S, 8)), make(rng, (1, 1, S, 8))
    myatt.empty_cache()
    tracemalloc.start()
    try:
        out = sdpa(q, k, v, is_causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < L * S * 4 // 32, f"peak traced memory {peak} bytes"
    assert_matches(out, torch_sdpa(q, k, v, is_causal=True))


@pytest.mark.parametrize("view", [False, True], ids=["array", "broadcast_to"])
@pytest.mark.parametrize("mask_dtype", [np.float32, np.float64, np.bool_])
def test_broadcast_mask_is_not_copied_per_head(mask_dtype, view):
    """A [1, 1, L, S] mask over 2 x 16 heads reaches the kernel through zero strides:
    neither the forward nor vjp and its pullback (which keeps a private copy of the
    mask as given) ever holds it once per head (32 copies: 8 MiB as bool, 32 MiB as
    float32), also when the mask is np.broadcast_to's [2, 16, L, S] view of it, whose
    zero strides a copy or a cast to float32 would fill in (they did, found by a
    helper session). Measured: the forward's traced peak 0.6 MiB (its output and workspace),
    vjp + pullback 8.5 MiB (bool) and 9.2 MiB (float32) alone, 10.9 MiB (float32) in
    the whole suite: the inputs' and the mask's copies, the outputs, the log-sum-exp,
    the gradients, and the backward's workspace, 1.5 MiB a thread at blocks of 256
    query rows (sdpa.h), plus GEMM packing buffers as the threads' caches stand; the
    bounds sit between."""
    rng = np.random.default_rng(17)
    N, H, L, S, E = 2, 16, 512, 512, 8
    q, k, v = make(rng, (N, H, L, E)), make(rng, (N, H, S, E)), make(rng, (N, H, S, E))
    mask = rng.standard_normal((1, 1, L, S))
    mask = mask > -1.0 if mask_dtype == np.bool_ else mask.astype(mask_dtype)
    per_head = N * H * L * S * (1 if mask_dtype == np.bool_ else 4)   # copied for every head
    if view:
        mask = np.broadcast_to(mask, (N, H, L, S))
    g = make(rng, (N, H, L, E))
    myatt.empty_cache()
    tracemalloc.start()
    try:
        out = sdpa(q, k, v, attn_mask=mask)
        _, peak_forward = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        (_, pullback) = myatt.vjp(sdpa, q, k, v, attn_mask=mask)
        grads = pullback(g)
        _, peak_backward = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_forward < per_head // 2, f"forward: peak traced memory {peak_forward} bytes"
    assert peak_backward < 14 << 20 < (9 << 20) + per_head, \
        f"vjp: peak traced memory {peak_backward} bytes"
    assert_matches(out, torch_sdpa(q, k, v, attn_mask=mask))
    tq, tk, tv = (to_torch(a, np.float32).requires_grad_() for a in (q, k, v))
    t_out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch_mask(mask, np.float32))
    t_grads = torch.autograd.grad(t_out, (tq, tk, tv), to_torch(g, np.float32))
    for ours, theirs in zip(grads, t_grads):
        assert_matches(ours, theirs)


# ---- gradients through myatt.vjp -----------------------------------------------------

def torch_mask(attn_mask, dt):
    """myatt's attn_mask as torch's sdpa takes it (a float one in the result dtype dt)."""
    if attn_mask is None:
        return None
    m = np.asarray(attn_mask)
    if m.ndim < 2:   # torch's bool-mask path indexes dim -2; [1, ...] broadcasts the same
        m = m.reshape((1,) * (2 - m.ndim) + m.shape)
    return torch.from_numpy(np.ascontiguousarray(m)) if m.dtype == np.bool_ else to_torch(m, dt)


def vjp_sdpa(q, k, v, **kw):
    return myatt.vjp(sdpa, q, k, v, **kw)


def check_backward(q, k, v, attn_mask=None, equal_nan=False, **kw):
    """myatt.vjp's result is the call's, bit for bit, and its pullback's gradients are
    torch.autograd.grad's of torch's sdpa, shaped and typed as the inputs (the mask's
    entry None).  Returns (pullback, grad_output, gradients)."""
    rng = np.random.default_rng(np.asarray(q).size + np.asarray(k).size)
    out, pull = vjp_sdpa(q, k, v, attn_mask=attn_mask, **kw)
    np.testing.assert_array_equal(out, sdpa(q, k, v, attn_mask=attn_mask, **kw), strict=True)
    dt = result_dtype(np.asarray(q).dtype, np.asarray(k).dtype, np.asarray(v).dtype)
    t = [to_torch(a, dt).requires_grad_() for a in (q, k, v)]
    tout = F.scaled_dot_product_attention(*t, attn_mask=torch_mask(attn_mask, dt), **kw)
    g = make(rng, tuple(tout.shape), dt)
    ours = pull(g)
    assert type(ours) is tuple and len(ours) == 4 and ours[3] is None
    theirs = torch.autograd.grad(tout, t, torch.from_numpy(g))
    for a, b, x in zip(ours, theirs, t):
        assert a.shape == tuple(x.shape) and a.dtype == dt
        assert_matches(a, b, equal_nan=equal_nan)
    return pull, g, ours


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("L, S", [(1, 1), (5, 7), (33, 600), (300, 1100), (1100, 300),
                                  (0, 5), (5, 0), (0, 0), (257, 513), (64, 1), (1, 1025)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_backward(L, S, is_causal, dtype):
    rng = np.random.default_rng(L * 7 + S)
    q, k, v = make(rng, (2, 2, L, 16), dtype), make(rng, (2, 2, S, 16), dtype), make(rng, (2, 2, S, 8), dtype)
    check_backward(q, k, v, is_causal=is_causal)


@pytest.mark.parametrize("E, Ev", [(0, 4), (4, 0), (0, 0), (1, 1), (1, 7), (65, 33)])
def test_backward_head_sizes(E, Ev):
    rng = np.random.default_rng(E * 100 + Ev)
    check_backward(make(rng, (3, 50, E)), make(rng, (3, 600, E)), make(rng, (3, 600, Ev)))


@pytest.mark.parametrize("ndim", [2, 3, 4, 5])
def test_backward_masks_and_scale(ndim):
    rng = np.random.default_rng(20 + ndim)
    batch = (2, 3, 2)[:ndim - 2]
    q, k, v = make(rng, batch + (70, 16)), make(rng, batch + (600, 16)), make(rng, batch + (600, 16))
    keep = rng.random((70, 600)) < 0.6
    keep[4] = False                                  # a fully masked row: zero gradients
    _, _, grads = check_backward(q, k, v, attn_mask=keep)
    assert not grads[0][..., 4, :].any()
    check_backward(q, k, v, attn_mask=make(rng, (70, 600)))
    check_backward(q, k, v, scale=0.3)
    check_backward(q, k, v, scale=-0.2)
    check_backward(q, k, v, scale=0.7, is_causal=True)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_backward_mask_every_broadcastable_shape(kind):
    rng = np.random.default_rng(31)
    batch, L, S = (2, 3), 9, 11
    q, k, v = make(rng, batch + (L, 8)), make(rng, batch + (S, 8)), make(rng, batch + (S, 4))
    for shape in sorted(set(mask_shapes(batch, L, S))):
        m = rng.random(shape) < 0.7 if kind == "bool" else make(rng, shape)
        check_backward(q, k, v, attn_mask=m)


@pytest.mark.parametrize("qb, kb, vb", [
    ((2, 3), (1, 3), (1, 3)), ((1, 3), (2, 3), (2, 3)), ((3,), (2, 1), (2, 1)),
    ((), (2, 3), (2, 3)), ((2, 3), (), ()), ((2, 1, 3), (4, 1), (4, 1)),
    # key and value broadcast differently: dK and dV summed in passes of their own
    ((2, 3), (1, 3), (2, 1)), ((2, 3), (3,), (2, 3)), ((2, 3), (), (2, 1)),
    ((0,), (1,), ()), ((2, 0), (2, 1), (1,)),
])
def test_backward_broadcast_batches(qb, kb, vb):
    rng = np.random.default_rng(len(qb) * 10 + len(kb) + 100 * len(vb))
    _, _, grads = check_backward(make(rng, qb + (40, 8)), make(rng, kb + (600, 8)),
                                 make(rng, vb + (600, 4)))
    if 0 in qb:                                      # no output: zeros, not garbage
        assert not grads[1].any() and not grads[2].any()


@pytest.mark.parametrize("hq, hk, hv", [(8, 2, 2), (6, 3, 3), (4, 1, 1), (6, 3, 2), (4, 1, 4),
                                        (8, 2, 4)])
def test_backward_gqa(hq, hk, hv):
    rng = np.random.default_rng(hq * 100 + hk * 10 + hv)
    q, k, v = make(rng, (2, hq, 33, 16)), make(rng, (2, hk, 70, 16)), make(rng, (2, hv, 70, 16))
    check_backward(q, k, v, enable_gqa=True)
    check_backward(q, k, v, enable_gqa=True, is_causal=True)
    check_backward(q, k, v, enable_gqa=True, attn_mask=rng.random((hq, 33, 70)) < 0.6)


def test_backward_gqa_decode():
    rng = np.random.default_rng(32)
    q, k, v = make(rng, (1, 32, 1, 128)), make(rng, (1, 8, 4096, 128)), make(rng, (1, 8, 4096, 128))
    check_backward(q, k, v, enable_gqa=True)


@pytest.mark.parametrize("where", ["q", "k", "v", "mask"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_backward_nan_inf(where, value):
    rng = np.random.default_rng(33)
    a = {"q": make(rng, (2, 40, 8)), "k": make(rng, (2, 600, 8)), "v": make(rng, (2, 600, 8)),
         "mask": make(rng, (40, 600))}
    a[where][..., 3, 5] = value
    check_backward(a["q"], a["k"], a["v"], attn_mask=a["mask"], equal_nan=True)


def test_backward_causal_skips_keys_hidden_from_a_block():
    """Causal gradients go by blocks of 64 query rows and skip the keys after a block's last
    row (docs/conventions.md): a NaN in key row 100 leaves grad_query of rows 0-63 finite, as
    torch's with that row finite (torch computes it, 0 * NaN, in its block of 512 keys); rows
    from 64, whose block computes key 100, are NaN.  (A NaN value row also reaches the
    gradients through the output, which only the SIMD forward computes without it.)"""
    rng = np.random.default_rng(35)
    a = {x: make(rng, (1, 2, 150, 8)) for x in "qkv"}
    g = make(rng, (1, 2, 150, 8))
    _, pull = vjp_sdpa(a["q"], a["k"], a["v"], is_causal=True)
    finite = pull(g)[0]
    a["k"][..., 100, :] = np.nan
    _, pull = vjp_sdpa(a["q"], a["k"], a["v"], is_causal=True)
    dq = pull(g)[0]
    assert np.isnan(dq[..., 64:, :]).all()
    np.testing.assert_array_equal(dq[..., :64, :], finite[..., :64, :])
    t = [to_torch(x, np.float32).requires_grad_() for x in (a["q"], a["k"], a["v"])]
    with torch.no_grad():
        t[1][..., 100, :] = 0.0
    tout = F.scaled_dot_product_attention(*t, is_causal=True)
    theirs = torch.autograd.grad(tout, t[0], torch.from_numpy(g))[0]
    assert_matches(np.ascontiguousarray(dq[..., :64, :]), theirs[..., :64, :])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch, dropout_p", [((2,), 0.0), ((2,), 0.3), ((1, 2), 0.0)])
def test_backward_one_key(dtype, batch, dropout_p):
    """One key: the weights are exactly 1 and grad_query and grad_key exactly 0, as torch's
    math path gives (3-D inputs; its softmax backward subtracts sum_j P dP, here dP itself).
    myatt takes that sum there, where dO . O (torch's flash backward's) left a rounding error
    summed over the L rows of q: 1e-5 at L = 947 in float32, beyond atol; with dropout, the
    kept weight's dP as well.  4-D: torch's flash backward, whose error is within atol here."""
    rng = np.random.default_rng(8)
    q, k = make(rng, batch + (947, 24), dtype), make(rng, batch + (1, 24), dtype)
    v, g = make(rng, batch + (1, 79), dtype), make(rng, batch + (947, 79), dtype)
    _, pull = vjp_sdpa(q, k, v, dropout_p=dropout_p)
    dq, dk, _, _ = pull(g)
    assert not dq.any() and not dk.any()
    t = [to_torch(a, dtype).requires_grad_() for a in (q, k, v)]
    tout = F.scaled_dot_product_attention(*t)
    theirs = torch.autograd.grad(tout, t, torch.from_numpy(g))
    if len(batch) == 1:
        assert not theirs[0].any() and not theirs[1].any()
    assert_matches(dq, theirs[0])
    assert_matches(dk, theirs[1])


@pytest.mark.parametrize("where", ["q", "k", "scale"])
def test_backward_empty_output_gives_zeros(where):
    """Ev == 0: the output depends on nothing, so every gradient is zero (torch's too),
    also where NaN or inf scores would make the softmax's gradient NaN."""
    rng = np.random.default_rng(34)
    a = {"q": make(rng, (2, 4, 3), np.float64), "k": make(rng, (2, 5, 3), np.float64)}
    kw = {"scale": np.inf} if where == "scale" else {}
    if where != "scale":
        a[where][1, 2, 0] = np.nan
    *_, ours = check_backward(a["q"], a["k"], np.zeros((2, 5, 0)), **kw)
    assert not any(g.any() for g in ours[:3])


def test_backward_saturated_scores():
    """Scores of 1e4 and more (query * 1e4), where a long reduction meets a large
    log-sum-exp.  float64: torch's gradients at default tolerances.  float32: the scores
    themselves are float32 (an ulp of 0.008 at 1e5, in any implementation); after them, a
    flash backward recomputes the weights from one log-sum-exp per row, whose float32
    rounding (torch's flash backward) moves them by up to ~0.4 % more.  myatt keeps the
    log-sum-exp in float64 (sdpa.h), so its float32 gradients are held to a float64
    backward from torch's float32 scores: grad_query and grad_value at assert_close's
    float32 defaults, and grad_key (a sum over 70 rows of +-1e4 scores that cancels) no
    further from the float64 gradients than torch's float32 flash gradient is."""
    rng = np.random.default_rng(34)
    q, k, v = make(rng, (2, 2, 70, 16)) * 1e4, make(rng, (2, 2, 600, 16)), make(rng, (2, 2, 600, 16))
    scale = 1 / np.sqrt(16)
    for is_causal in (False, True):
        check_backward(q.astype(np.float64), k, v, is_causal=is_causal)
        out, pull = vjp_sdpa(q, k, v, is_causal=is_causal)
        g = make(rng, out.shape)
        ours = pull(g)
        tq, tk, tv, tg = (torch.from_numpy(a) for a in (q, k, v, g))
        # the float64 backward from torch's float32 scores
        scores = ((tq @ tk.transpose(-1, -2)) * scale).double()
        if is_causal:
            scores = scores.masked_fill(torch.ones(70, 600, dtype=torch.bool).triu(1), -np.inf)
        P = torch.softmax(scores, -1)
        dP = tg.double() @ tv.double().transpose(-1, -2)
        dS = P * (dP - (P * dP).sum(-1, keepdim=True))
        want = (dS @ tk.double() * scale, dS.transpose(-1, -2) @ tq.double() * scale,
                P.transpose(-1, -2) @ tg.double())
        t = [x.clone().requires_grad_() for x in (tq, tk, tv)]
        tout = F.scaled_dot_product_attention(*t, is_causal=is_causal)
        assert "Flash" in type(tout.grad_fn).__name__
        theirs = torch.autograd.grad(tout, t, tg)
        torch.testing.assert_close(torch.from_numpy(ours[0]), want[0].float())
        torch.testing.assert_close(torch.from_numpy(ours[2]), want[2].float())
        ours_err = np.abs(ours[1] - want[1].numpy()).max()
        torch_err = np.abs(theirs[1].numpy() - want[1].numpy()).max()
        assert ours_err <= torch_err, (ours_err, torch_err)


def test_backward_dtypes_and_layouts():
    """Converted operands (integers, float64 beside float32, Fortran order, strided views,
    torch tensors, lists): gradients in the result dtype, shaped as given."""
    rng = np.random.default_rng(35)
    q, k, v = make(rng, (2, 3, 40, 8)), make(rng, (2, 3, 70, 8)), make(rng, (2, 3, 70, 4))
    check_backward(q.astype(np.float64), k, v)
    check_backward(np.rint(q * 3).astype(np.int32), k, v)
    check_backward(np.asfortranarray(q), np.repeat(k, 2, axis=-1)[..., ::2], v[..., ::-1, :])
    check_backward(torch.from_numpy(q), k.tolist(), v)
    _, pull = vjp_sdpa(torch.from_numpy(q).requires_grad_(), k, v)
    assert pull.fn == "scaled_dot_product_attention"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("is_causal", [False, True])
def test_backward_dropout_uses_the_forward_mask(dtype, is_causal):
    """The pullback reuses the forward's dropout mask.  out is linear in value: with value
    the identity, the forward's output IS the dropped, rescaled weights A [L, S], and the
    pullback's grad_value must be A^T @ grad_out.  With another value (the same seed, so
    the same mask), the gradients are torch's of (softmax(q k^T * scale) * keep / (1 - p)) @ v."""
    rng = np.random.default_rng(29)
    p, L, S = 0.3, 40, 600
    q, k = make(rng, (2, 3, L, 8), dtype), make(rng, (2, 3, S, 8), dtype)
    v = make(rng, (2, 3, S, 6), dtype)
    eye = np.broadcast_to(np.eye(S, dtype=dtype), (2, 3, S, S))
    myatt.manual_seed(7)
    weights, pull_eye = vjp_sdpa(q, k, eye, dropout_p=p, is_causal=is_causal)
    kept = weights != 0                              # (the dropped share: test_dropout_*)
    g_eye = make(rng, weights.shape, dtype)
    gv = pull_eye(g_eye)[2]
    assert_matches(gv, torch.from_numpy(weights).transpose(-2, -1) @ torch.from_numpy(g_eye))

    myatt.manual_seed(7)
    out, pull = vjp_sdpa(q, k, v, dropout_p=p, is_causal=is_causal)
    keep = torch.from_numpy(kept)
    t = [torch.from_numpy(a).requires_grad_() for a in (q, k, v)]
    scores = t[0] @ t[1].transpose(-2, -1) / np.sqrt(8)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -torch.inf)
    theirs_out = (torch.softmax(scores, -1) * keep / (1 - p)) @ t[2]
    assert_matches(out, theirs_out)
    g = make(rng, out.shape, dtype)
    theirs = torch.autograd.grad(theirs_out, t, torch.from_numpy(g))
    ours = pull(g)
    for a, b in zip(ours, theirs):
        assert_matches(a, b)
    for a, b in zip(pull(g), ours):                  # the same mask again, not a new draw
        np.testing.assert_array_equal(a, b, strict=True)


def test_backward_dropout_one():
    rng = np.random.default_rng(36)
    q, k, v = make(rng, (2, 9, 4)), make(rng, (2, 7, 4)), make(rng, (2, 7, 3))
    out, pull = vjp_sdpa(q, k, v, dropout_p=1.0)
    grads = pull(make(rng, out.shape))
    assert not out.any() and not any(g.any() for g in grads[:3])


def test_pullback_twice_and_in_place_changes():
    """A pullback may be called more than once (the same bits); inputs, the mask and the
    result changed in place after vjp (arrays and a torch tensor sharing its memory) change
    nothing: it holds copies, never the caller's memory."""
    rng = np.random.default_rng(37)
    q, k, v = make(rng, (2, 3, 40, 8)), make(rng, (2, 3, 600, 8)), make(rng, (2, 3, 600, 4))
    m = make(rng, (40, 600))
    g = make(rng, (2, 3, 40, 4))
    _, want_pull = vjp_sdpa(q.copy(), k.copy(), v.copy(), attn_mask=m.copy())
    want = want_pull(g)
    tk = torch.from_numpy(k)
    out, pull = vjp_sdpa(q, tk, v, attn_mask=m)
    for a, b in zip(pull(g), want):
        np.testing.assert_array_equal(a, b, strict=True)
    q[:] = 0
    with torch.no_grad():
        tk.mul_(3)
    v += 1
    m[:] = -np.inf
    out[:] = 7
    for _ in range(2):
        for a, b in zip(pull(g), want):
            np.testing.assert_array_equal(a, b, strict=True)
    bool_mask = rng.random((40, 600)) < 0.5
    _, pull = vjp_sdpa(q, k, v, attn_mask=bool_mask)
    want = pull(g)
    bool_mask[:] = False
    for a, b in zip(pull(g), want):
        np.testing.assert_array_equal(a, b, strict=True)


def test_pullback_repr_and_nbytes():
    """It holds the operands, the output and one log-sum-exp per row: never [L, S]."""
    q, k, v = np.ones((2, 5, 4), np.float32), np.ones((2, 7, 4)), np.ones((2, 7, 3))
    m = np.ones((5, 7), bool)
    _, pull = vjp_sdpa(q, k, v, attn_mask=m)
    assert repr(pull) == (
        "Pullback(scaled_dot_product_attention: query (2, 5, 4) float64, key (2, 7, 4) float64, "
        "value (2, 7, 3) float64, output (2, 5, 3) float64, lse (2, 5) float64, "
        "attn_mask (5, 7) bool; 1459 bytes)")
    assert pull.nbytes == 8 * (40 + 56 + 42 + 30 + 10) + 35


def test_backward_bits_independent_of_thread_count():
    rng = np.random.default_rng(23)
    q, k, v = make(rng, (2, 4, 300, 32)), make(rng, (2, 4, 1100, 32)), make(rng, (2, 4, 1100, 32))
    g = make(rng, (2, 4, 300, 32))
    saved = myatt.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            myatt.set_num_threads(n)
            for kw in ({"is_causal": True}, {"enable_gqa": True}):
                kv = (k, v) if not kw.get("enable_gqa") else (k[:, :1], v[:, :2])
                results.append(vjp_sdpa(q, *kv, **kw)[1](g))
    finally:
        myatt.set_num_threads(saved)
    for one, two in zip(results[:2], results[2:]):
        for a, b in zip(one[:3], two[:3]):
            np.testing.assert_array_equal(a, b)


def test_backward_long_sequence_memory():
    """The pullback of L = S = 4096 holds O(L) and its backward allocates no [L, S] buffer."""
    rng = np.random.default_rng(24)
    L = S = 4096
    q, k, v = make(rng, (1, 1, L, 8)), make(rng, (1, 1, S, 8)), make(rng, (1, 1, S, 8))
    g = make(rng, (1, 1, L, 8))
    myatt.empty_cache()
    tracemalloc.start()
    try:
        _, pull = vjp_sdpa(q, k, v, is_causal=True)
        pull(g)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the workspace: two [256, 512] tiles per thread and the GEMM's packed panels, ~1/8 of
    # the 64 MiB an [L, S] float32 matrix would take (and the same for any L and S)
    assert peak < L * S * 4 // 8, f"peak traced memory {peak} bytes"
    assert pull.nbytes == 4 * (3 * L * 8 + L * 8) + 8 * L   # the log-sum-exp in float64


def test_backward_errors():
    rng = np.random.default_rng(25)
    q, k, v = make(rng, (2, 4, 5, 8)), make(rng, (2, 4, 6, 8)), make(rng, (2, 4, 6, 3))
    g = make(rng, (2, 4, 5, 3))
    _, pull = vjp_sdpa(q, k, v)
    with pytest.raises(ValueError, match=r"^pullback\(\): grad_output must have shape "
                                         r"\(2, 4, 5, 3\), got \(2, 4, 5, 2\)$"):
        pull(g[..., :2])
    with pytest.raises(TypeError, match="grad_output"):
        pull(g.astype(complex))
    with pytest.raises(TypeError):
        pull()
    with pytest.raises(TypeError):
        pull(g, g)
    with pytest.raises(ValueError, match="key"):     # the forward's errors are the call's
        vjp_sdpa(q, k[..., :7], v)
    with pytest.raises(ValueError, match="attn_mask"):
        vjp_sdpa(q, k, v, attn_mask=np.ones((5, 7), bool))


# ---- leaks and concurrency ----------------------------------------------------------

def test_no_leaks():
    """Success and error paths, forward and backward, called many times: reference counts of
    the inputs unchanged, no growth of the memory tracemalloc traces (kernel workspaces
    included)."""
    import gc
    import sys
    rng = np.random.default_rng(26)
    q, k, v = make(rng, (2, 3, 40, 8)), make(rng, (2, 3, 600, 8)), make(rng, (2, 3, 600, 4))
    m, mf, g = rng.random((40, 600)) < 0.5, make(rng, (3, 40, 600)), make(rng, (2, 3, 40, 4))
    bad_m = np.ones((40, 7), bool)
    calls = [
        lambda: sdpa(q, k, v),
        lambda: sdpa(q, k, v, attn_mask=m),
        lambda: sdpa(q.astype(np.float64), k, v, attn_mask=mf, is_causal=False),
        lambda: sdpa(q, k, v, is_causal=True, dropout_p=0.2),
        lambda: sdpa(q, k[:, :1], v[:, :1], enable_gqa=True),
        lambda: vjp_sdpa(q, k, v, attn_mask=m)[1](g),
        lambda: vjp_sdpa(q, k, v, dropout_p=0.1, is_causal=True)[1](g),
        lambda: vjp_sdpa(q, k[:, :1], v, enable_gqa=True)[1](g),
    ]
    errors = [
        lambda: sdpa(q, k, v, attn_mask=bad_m),
        lambda: sdpa(q, k, v, attn_mask=m, is_causal=True),
        lambda: sdpa(q, k[..., :3], v),
        lambda: vjp_sdpa(q, k, v)[1](g[..., :2]),
        lambda: vjp_sdpa(q, k, v, attn_mask=bad_m),
    ]

    def run(n):
        for _ in range(n):
            for c in calls:
                c()
            for c in errors:
                try:
                    c()
                except (ValueError, TypeError):
                    pass

    objs = [q, k, v, m, mf, g, bad_m]
    run(5)
    gc.collect()
    before = [sys.getrefcount(o) for o in objs]
    tracemalloc.start()
    try:
        run(20)
        gc.collect()
        first, _ = tracemalloc.get_traced_memory()
        run(100)
        gc.collect()
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(o) for o in objs] == before
    assert second - first < 64 * 1024, (first, second)


def test_concurrent_python_threads():
    """Several Python threads at once (the GIL released during the kernel): each result
    equals the one computed alone."""
    import threading
    rng = np.random.default_rng(27)
    cases = [(make(rng, (2, 4, 200, 32)), make(rng, (2, 4, 700, 32)), make(rng, (2, 4, 700, 32)))
             for _ in range(4)]
    want = [sdpa(*c, is_causal=True) for c in cases]
    got = [None] * len(cases)

    def work(i):
        for _ in range(3):
            got[i] = sdpa(*cases[i], is_causal=True)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


# ---- errors -------------------------------------------------------------------------

def _errors():
    r = np.random.default_rng(14)
    q, k, v = make(r, (2, 4, 5, 8)), make(r, (2, 4, 6, 8)), make(r, (2, 4, 6, 3))
    return [
        ("query 1-D", ValueError, "query", lambda: sdpa(q[0, 0, 0], k, v)),
        ("key 1-D", ValueError, "key", lambda: sdpa(q, k[0, 0, 0], v)),
        ("value 1-D", ValueError, "value", lambda: sdpa(q, k, v[0, 0, 0])),
        ("E mismatch", ValueError, "key", lambda: sdpa(q, k[..., :7], v)),
        ("S mismatch", ValueError, "value", lambda: sdpa(q, k, v[..., :5, :])),
        ("heads differ", ValueError, "enable_gqa", lambda: sdpa(q, k[:, :2], v[:, :2])),
        ("gqa not dividing", ValueError, "key", lambda: sdpa(q, k[:, :3], v[:, :3], enable_gqa=True)),
        ("gqa value", ValueError, "value", lambda: sdpa(q, k[:, :2], v[:, :3], enable_gqa=True)),
        ("gqa 2-D", ValueError, "enable_gqa", lambda: sdpa(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True)),
        ("batch", ValueError, "broadcast", lambda: sdpa(q, k[:1].repeat(3, 0), v)),
        ("mask with causal", ValueError, "attn_mask", lambda: sdpa(q, k, v, np.ones((5, 6), bool),
                                                                   is_causal=True)),
        ("mask shape", ValueError, "attn_mask", lambda: sdpa(q, k, v, np.ones((5, 7), bool))),
        ("mask enlarges", ValueError, "attn_mask", lambda: sdpa(q, k, v, np.ones((3, 2, 4, 5, 6)))),
        ("mask dtype", TypeError, "attn_mask", lambda: sdpa(q, k, v, np.ones((5, 6), np.int32))),
        ("mask complex", TypeError, "attn_mask", lambda: sdpa(q, k, v, np.ones((5, 6), complex))),
        ("complex query", TypeError, "query", lambda: sdpa(q.astype(complex), k, v)),
        ("object key", TypeError, "key", lambda: sdpa(q, k.astype(object), v)),
        ("string value", TypeError, "value", lambda: sdpa(q, k, np.full((6, 3), "a"))),
        ("dropout > 1", ValueError, "dropout_p", lambda: sdpa(q, k, v, dropout_p=1.5)),
        ("dropout < 0", ValueError, "dropout_p", lambda: sdpa(q, k, v, dropout_p=-0.1)),
        ("dropout nan", ValueError, "dropout_p", lambda: sdpa(q, k, v, dropout_p=float("nan"))),
        ("dropout str", TypeError, "dropout_p", lambda: sdpa(q, k, v, dropout_p="0.1")),
        ("scale str", TypeError, "scale", lambda: sdpa(q, k, v, scale="1")),
        ("dropout complex", TypeError, "dropout_p", lambda: sdpa(q, k, v, dropout_p=1j)),
        ("dropout array", TypeError, "dropout_p",
         lambda: sdpa(q, k, v, dropout_p=np.array([0.5, 0.1]))),
        ("dropout huge", OverflowError, "dropout_p", lambda: sdpa(q, k, v, dropout_p=10**400)),
        ("scale huge", OverflowError, "scale", lambda: sdpa(q, k, v, scale=10**400)),
        # flags are bools (torch: "argument 'is_causal' must be bool, not int"); NumPy's too
        ("causal int", TypeError, "is_causal must be a bool, got int",
         lambda: sdpa(q, k, v, is_causal=1)),
        ("causal None", TypeError, "is_causal", lambda: sdpa(q, k, v, is_causal=None)),
        ("causal str", TypeError, "is_causal", lambda: sdpa(q, k, v, is_causal="yes")),
        ("gqa int", TypeError, "enable_gqa must be a bool", lambda: sdpa(q, k, v, enable_gqa=2)),
        # and a bool is not a number, Python's or NumPy's
        ("scale bool", TypeError, "scale", lambda: sdpa(q, k, v, scale=True)),
        ("scale numpy bool", TypeError, "scale", lambda: sdpa(q, k, v, scale=np.bool_(True))),
        ("dropout numpy bool", TypeError, "dropout_p",
         lambda: sdpa(q, k, v, dropout_p=np.bool_(False))),
    ]


def test_flags_take_numpy_bools():
    q = np.random.default_rng(0).standard_normal((2, 5, 4))
    np.testing.assert_array_equal(sdpa(q, q, q, is_causal=np.bool_(True)),
                                  sdpa(q, q, q, is_causal=True))


@pytest.mark.parametrize("case", _errors(), ids=lambda c: c[0])
def test_errors(case):
    _, exc, name, call = case
    with pytest.raises(exc, match=name):
        call()


# ---- torch's own samples ------------------------------------------------------------

def _exact_scores(q, k, v, mask, kw):
    """The sample with values on which every order of summation of the scores is exact:
    q, k, v rounded to integers in [-4, 4], a float mask to quarters, and a scale that is a
    power of 4 (torch's math path multiplies q and k by sqrt(scale) first: 0.5 here, exact).
    Shapes, mask kind, is_causal and enable_gqa stay the sample's."""
    def whole(t):
        return torch.clamp(torch.round(t / 2), -4, 4)
    if mask is not None and mask.dtype != torch.bool:
        mask = torch.round(mask * 4) / 4
    return whole(q), whole(k), whole(v), mask, dict(kw, scale=0.25)


def _torch_scores_in_our_order(q, k, gqa):
    """Whether torch's q @ k^T (MKL's GEMM, on this sample's shapes) has the bits of
    myatt's product (the rule of docs/torch-summation-order.md).  Products this small lie
    outside MKL's main kernel region, where its order depends on the CPU: on a Zen 3 (MKL's
    AVX2 code) none of OpInfo's samples is summed in our order (on Zen 4 the samples passed
    as drawn)."""
    if gqa and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
    theirs = torch.matmul(q, k.transpose(-2, -1))
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    items = [t.expand(*batch, *t.shape[-2:]).reshape(-1, *t.shape[-2:]).numpy() for t in (q, k)]
    ours = myatt.bmm(items[0], items[1].transpose(0, 2, 1))
    return np.array_equal(ours.view(np.uint8), theirs.reshape(ours.shape).numpy().view(np.uint8))


def test_opinfo_samples():
    """torch's OpInfo samples, those with dropout_p == 0 (the random streams differ), each
    against torch at assert_close default tolerances.

    One adjustment, for float32 samples whose scores torch's GEMM does not sum in our GEMM's
    order (_torch_scores_in_our_order; e.g. every one on a Zen 3,
    docs/torch-summation-order.md): they get values on which every order of
    summation of the scores is exact (_exact_scores).  With OpInfo's uniform(-9, 9) data the
    scores reach ~90, where one ulp of a score moves the weights past float32's tolerance,
    so two correct kernels summing in different orders disagree there by more than
    assert_close allows (torch's own float32 result is no closer to the exact one than
    ours).  Where torch sums in our order, and for float64 everywhere, the samples are as
    drawn."""
    samples = opinfo_samples("nn.functional.scaled_dot_product_attention")
    checked = adjusted = 0
    for s in samples:
        kw = dict(s.kwargs)
        if kw.get("dropout_p", 0.0) != 0.0:
            continue
        q, k, v = s.input, s.args[0], s.args[1]
        mask = kw.pop("attn_mask", None)
        if (q.dtype == torch.float32
                and not _torch_scores_in_our_order(q, k, kw.get("enable_gqa", False))):
            q, k, v, mask, kw = _exact_scores(q, k, v, mask, kw)
            adjusted += 1
        ours = sdpa(q, k, v, attn_mask=mask, **kw)
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
        assert_matches(ours, theirs)
        checked += 1
    assert checked > adjusted


def test_empty_result_of_a_huge_broadcast_batch():
    """Ev == 0: the result is empty whatever the batch count, so a batch of 2**40 broadcast
    items returns at once (the kernel computed every item's scores before; found by
    fuzz/fuzz_python.py)."""
    q, k, v = (np.broadcast_to(np.float32(1), s)
               for s in [(2 ** 40, 3, 4), (2 ** 40, 5, 4), (2 ** 40, 5, 0)])
    out = sdpa(q, k, v)
    assert out.shape == (2 ** 40, 3, 0) and out.dtype == np.float32


def test_vjp_of_an_empty_result_over_many_keys():
    """Ev == 0 through vjp: neither the result nor its log-sum-exp is computed (the
    [L, S] scores of 2**40 keys of E = 0, which hold no data, took seconds per 10**9
    keys before), and the gradients are the zeros of an empty result."""
    q, k = np.ones((3, 0), np.float32), np.ones((2 ** 40, 0), np.float32)
    out, pullback = myatt.vjp(sdpa, q, k, k)
    grads = pullback(np.ones((3, 0), np.float32))
    assert out.shape == (3, 0)
    assert [g.shape for g in grads[:3]] == [(3, 0), (2 ** 40, 0), (2 ** 40, 0)]
