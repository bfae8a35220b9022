"""The bad-input matrix, complementing test_errors.py (which has the per-entry-point
shape tables): every array argument of every entry point, crossed with every kind of
bad value, gets the spec's exception class and a message that names the argument, and
a module is unchanged afterwards. Also: objects with __array__, sizes that overflow or
cannot be allocated (MemoryError, never a crash or a hang), NaN/inf and zero-size
dimensions (results as torch's).
"""
import re
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from entry_points import SMALL, WITH_ARRAYS, invoke
from helpers import name_re
from oracle import assert_matches, run, to_torch, torch_linear, torch_myatt


class ArrayLike:
    """Not an ndarray, but numpy.asarray takes it through __array__."""

    def __init__(self, value):
        self.value = value

    def __array__(self, dtype=None, copy=None):
        if isinstance(self.value, BaseException):
            raise self.value
        if callable(self.value):
            return self.value()
        return self.value


class BadSequence:
    """A sequence whose items fail half way."""

    def __len__(self):
        return 3

    def __getitem__(self, i):
        if i >= 2:
            raise RuntimeError("item unavailable")
        return [1.0] * 4


# kind -> (make(shape) -> bad value, exception)
BAD = {
    "complex": (lambda s: np.ones(s, np.complex128), TypeError),
    "object": (lambda s: np.ones(s, object), TypeError),
    "str": (lambda s: np.full(s, "1"), TypeError),
    "bytes": (lambda s: np.full(s, b"1"), TypeError),
    "datetime": (lambda s: np.zeros(s, "datetime64[ns]"), TypeError),
    "timedelta": (lambda s: np.zeros(s, "timedelta64[D]"), TypeError),
    "void": (lambda s: np.zeros(s, "V8"), TypeError),
    "longdouble": (lambda s: np.ones(s, np.longdouble), TypeError),
    "torch-complex": (lambda s: torch.ones(s, dtype=torch.complex128), TypeError),
    "None": (lambda s: None, TypeError),
    "int-scalar-object": (lambda s: object(), TypeError),
    "set": (lambda s: {1.0, 2.0}, TypeError),
    # the input's own exceptions reach the caller (SPEC, Errors); numpy's for a ragged list
    "ragged": (lambda s: [[1.0], [1.0, 2.0]], ValueError),
    "bad-sequence": (lambda s: BadSequence(), RuntimeError),
    "__array__-raises": (lambda s: ArrayLike(RuntimeError("no array today")), RuntimeError),
    "__array__-returns-list": (lambda s: ArrayLike(lambda: [1.0, 2.0]), TypeError),
    "__array__-returns-complex": (lambda s: ArrayLike(np.ones(s, np.complex64)), TypeError),
    "__array__-returns-str": (lambda s: ArrayLike(np.full(s, "x")), TypeError),
    "0-d": (lambda s: np.float32(1.0), ValueError),
    "ndim+2": (lambda s: np.ones((1, 1) + tuple(s), np.float32), ValueError),
    "empty-1d": (lambda s: np.ones((0,), np.float32), ValueError),
    "wrong-size": (lambda s: np.ones(tuple(d + 1 for d in s), np.float32), ValueError),
    "__array__-wrong-size": (lambda s: ArrayLike(np.ones(tuple(d + 1 for d in s))), ValueError),
    "broadcast-huge-wrong-size": (lambda s: np.broadcast_to(
        np.float32(1), (2**40,) + tuple(d + 1 for d in s)), ValueError),
}
# the kinds that are shape errors (softmax takes any ndim: not errors there)
SHAPE_KINDS = {"0-d", "ndim+2", "empty-1d", "wrong-size", "__array__-wrong-size",
               "broadcast-huge-wrong-size"}


def _snapshot(m):
    return {k: v.copy() for k, v in m.state_dict().items()}


def _assert_unchanged(m, snap):
    sd = m.state_dict()
    assert sorted(sd) == sorted(snap)
    for k in snap:
        assert sd[k].tobytes() == snap[k].tobytes(), f"{k} changed"


def _good():
    r = np.random.default_rng(0)
    return {
        "x": r.standard_normal((4, 6)).astype(np.float32),
        "w": r.standard_normal((3, 6)).astype(np.float32),
        "b": r.standard_normal(3).astype(np.float32),
        "a": r.standard_normal((2, 4, 6)).astype(np.float32),
        "m2": r.standard_normal((2, 6, 5)).astype(np.float32),
        "Q": r.standard_normal((1, 4, 3)).astype(np.float32),
        "K": r.standard_normal((1, 4, 4)).astype(np.float32),
        "V": r.standard_normal((1, 5, 6)).astype(np.float32),
    }


def _entry_points():
    """(entry point, argument, call(bad) -> None, module or None): every array argument of
    every entry point of the registry (entry_points.py), the others valid."""
    eps = []
    for ep in WITH_ARRAYS:
        obj = ep.target(SMALL)
        good = ep.good(SMALL)
        for i, arg in enumerate(ep.args):
            def call(v, ep=ep, obj=obj, good=good, i=i):
                invoke(ep, obj, good[:i] + [v] + good[i + 1:])
            eps.append((ep, arg, call, obj))
    return eps


EP_IDS = [f"{ep.name}-{arg.name}" for ep, arg, _, _ in _entry_points()]


def _cases():
    for i, (ep, arg, _, _) in enumerate(_entry_points()):
        for kind in BAD:
            if arg.ndim_free and kind in SHAPE_KINDS:
                continue            # softmax takes any ndim, so shape errors do not apply
            if arg.batch_free and kind == "ndim+2":
                continue            # linear's input may have any number of batch dims
            if arg.broadcasts and kind == "0-d":
                continue            # a 0-D mask broadcasts against every score
            if arg.optional and kind == "None":
                continue            # None is the default: no bias
            yield pytest.param(i, kind, id=f"{EP_IDS[i]}-{kind}")


@pytest.mark.parametrize("ep,kind", list(_cases()))
def test_bad_value_matrix(ep, kind):
    _, arg, call, module = _entry_points()[ep]
    make, exc = BAD[kind]
    snap = _snapshot(module) if module is not None else None
    with pytest.raises(exc) as info:
        call(make(arg.shape(SMALL)))
    assert type(info.value) is exc or (exc is ValueError and not isinstance(info.value, TypeError))
    # the message names the argument (MyAtt's feature-size messages name Q with K or V)
    names = [arg.name, *arg.also_named]
    # an input's own exception keeps its message; a note names the argument (3.11+)
    msg = "\n".join([str(info.value), *getattr(info.value, "__notes__", [])])   # (PEP 678)
    if sys.version_info >= (3, 11) or kind not in ("ragged", "bad-sequence", "__array__-raises"):
        assert re.search(name_re(*names), msg), f"message does not name {arg.name!r}: {msg}"
    if module is not None:
        _assert_unchanged(module, snap)


def test_bad_value_matrix_torch_rejects_shape_errors_too():
    """The shape kinds above are errors in torch as well."""
    with pytest.raises(Exception):
        F.linear(torch.ones(4, 6), torch.ones(4, 7))
    with pytest.raises(Exception):
        torch.bmm(torch.ones(2, 4, 6), torch.ones(3, 7, 5))


# --------------------------------------------------------------------------- #
# __array__ objects that work are taken like the arrays they give
# --------------------------------------------------------------------------- #
def test_array_protocol_objects_accepted(dtype):
    g = {k: v.astype(dtype) for k, v in _good().items()}
    wrap = {k: ArrayLike(v) for k, v in g.items()}
    np.testing.assert_array_equal(myatt.linear(wrap["x"], wrap["w"], wrap["b"]),
                                  myatt.linear(g["x"], g["w"], g["b"]), strict=True)
    np.testing.assert_array_equal(myatt.softmax(wrap["x"], 0), myatt.softmax(g["x"], 0),
                                  strict=True)
    np.testing.assert_array_equal(myatt.bmm(wrap["a"], wrap["m2"]), myatt.bmm(g["a"], g["m2"]),
                                  strict=True)
    m = myatt.MyAtt(3, 4, 5, 6, 2, dtype=dtype)
    out, attn = m(wrap["Q"], wrap["K"], wrap["V"])
    t_out, t_attn = run(torch_myatt(m), g["Q"], g["K"], g["V"], dtype=dtype)
    assert_matches(out, t_out)
    assert_matches(attn, t_attn)
    lin = myatt.Linear(6, 3, dtype=dtype)
    lin.weight = wrap["w"]
    lin.bias = wrap["b"]
    np.testing.assert_array_equal(lin.weight, g["w"])
    lin.load_state_dict({"weight": ArrayLike(g["w"] * 2), "bias": wrap["b"]})
    np.testing.assert_array_equal(lin.weight, g["w"] * 2)


def test_array_protocol_memory_error_propagates():
    """A MemoryError inside __array__ stays a MemoryError."""
    with pytest.raises(MemoryError):
        myatt.softmax(ArrayLike(MemoryError("no memory")))


# --------------------------------------------------------------------------- #
# Sizes that overflow or cannot be allocated: MemoryError, never a crash or a hang
# --------------------------------------------------------------------------- #
HUGE = 2**40
MEMORY_CASES = [
    ("Linear-bytes-overflow", lambda: myatt.Linear(2**31, 2**31), ["weight", "in_features"]),
    ("Linear-unallocatable", lambda: myatt.Linear(2**20, 2**40), ["weight"]),
    ("Linear-size-beyond-ssize_t", lambda: myatt.Linear(2**70, 1), ["in_features"]),
    ("Linear-out-beyond-ssize_t", lambda: myatt.Linear(1, 2**64), ["out_features"]),
    ("MyAtt-sum-overflows", lambda: myatt.MyAtt(2**62, 2**62, 1, 1, 1), ["MyAtt"]),
    ("MyAtt-unallocatable", lambda: myatt.MyAtt(2**40, 1, 2**30, 1, 1), ["attn.weight"]),
    ("MyAtt-combine-unallocatable", lambda: myatt.MyAtt(1, 1, 1, 1, 2**40),
     ["attn_combine.weight"]),
    ("Linear-dimension-past-numpy", lambda: myatt.Linear(0, 2**62, bias=False), ["weight"]),
    ("MyAtt-size-beyond-ssize_t", lambda: myatt.MyAtt(1, 1, 1, 1, 2**65), ["output_size"]),
    ("linear-result-overflows", lambda: myatt.linear(np.empty((HUGE, 0), np.float32),
                                                     np.empty((2**30, 0), np.float32)),
     ["linear", "result"]),
    ("linear-result-unallocatable",
     lambda: myatt.linear(np.broadcast_to(np.float32(1), (HUGE, 8)), np.ones((4, 8), np.float32)),
     ["linear", "result"]),
    ("linear-input-copy-unallocatable",
     lambda: myatt.linear(np.broadcast_to(np.float32(1), (2**20, 2**20, 8)),
                          np.ones((4, 8), np.float32)), ["input"]),
    ("softmax-input-copy-unallocatable",
     lambda: myatt.softmax(np.broadcast_to(np.float32(1), (HUGE, 8))), ["input"]),
    ("softmax-copy-numpy-refuses",                   # NumPy's ValueError "array is too big"
     lambda: myatt.softmax(np.broadcast_to(np.bool_(1), (2**60, 4))), ["input"]),
    ("linear-copy-numpy-refuses",
     lambda: myatt.vjp(myatt.linear, np.broadcast_to(np.bool_(1), (2**60, 4)),
                       np.ones((3, 4), np.float32)), ["linear(): input"]),
    ("softmax_backward-copy-unallocatable",
     lambda: myatt.softmax_backward(*[np.broadcast_to(np.float32(1), (HUGE, 8))] * 2),
     ["softmax_backward(): grad_output"]),
    ("linear_backward-copy-unallocatable",
     lambda: myatt.linear_backward(np.broadcast_to(np.float64(1), (HUGE, 4)),
                                   np.broadcast_to(np.float32(1), (HUGE, 8)),
                                   np.ones((4, 8), np.float32)),
     ["linear_backward(): input"]),
    ("MyAtt-input-copy-unallocatable",
     lambda: myatt.MyAtt(2, 2, 2, 2, 2)(*[np.broadcast_to(1.0, (1, HUGE, 2))] * 2,
                                        np.ones((1, 2, 2))), ["MyAtt: Q"]),
    ("sdpa-private-copy-unallocatable",
     lambda: myatt.vjp(myatt.scaled_dot_product_attention,
                       np.broadcast_to(np.float32(1), (1, HUGE, 3, 4)),
                       *[np.ones((1, 1, 3, 4), np.float32)] * 2),
     ["scaled_dot_product_attention(): query"]),
    ("mha-input-copy-unallocatable",
     lambda: myatt.MultiheadAttention(8, 1)(*[np.broadcast_to(np.float64(1), (1, HUGE, 8))] * 3),
     ["MultiheadAttention.forward(): query"]),
    ("bmm-result-overflows", lambda: myatt.bmm(np.empty((2**20, 2**20, 0)),
                                               np.empty((2**20, 0, 2**20))), ["bmm", "result"]),
    ("bmm-result-unallocatable",
     lambda: myatt.bmm(np.broadcast_to(np.float32(1), (2**16, 2**16, 1)),
                       np.broadcast_to(np.float32(1), (2**16, 1, 2**16))), ["bmm", "result"]),
]


@pytest.mark.parametrize("thunk,names", [c[1:] for c in MEMORY_CASES],
                         ids=[c[0] for c in MEMORY_CASES])
def test_memory_errors(thunk, names):
    with pytest.raises(MemoryError, match=name_re(*names)):
        thunk()


def test_myatt_forward_memory_error_leaves_module_unchanged():
    m = myatt.MyAtt(0, 0, 2**10, 0, 0)
    snap = _snapshot(m)
    Q = np.empty((1, 2**55, 0), np.float32)        # no bytes, but S = 2**55
    with pytest.raises(MemoryError, match=name_re("MyAtt")):
        m(Q, Q, np.empty((1, 2**10, 0)))
    _assert_unchanged(m, snap)


def test_linear_call_memory_error_leaves_layer_unchanged():
    lin = myatt.Linear(8, 4)
    snap = _snapshot(lin)
    with pytest.raises(MemoryError, match=name_re("linear", "result")):
        lin(np.broadcast_to(np.float32(1), (HUGE, 8)))
    _assert_unchanged(lin, snap)


@pytest.mark.parametrize("size", [-1, -2**63, -2**70, np.int64(-5)], ids=repr)
def test_negative_sizes(size):
    with pytest.raises(ValueError, match="in_features"):
        myatt.Linear(size, 3)
    with pytest.raises(ValueError, match="value_size2"):
        myatt.MyAtt(3, 3, 3, size, 3)


@pytest.mark.parametrize("size", [True, 3.0, "3", None, np.float64(3), 3 + 0j, [3]], ids=repr)
def test_non_integer_sizes(size):
    with pytest.raises(TypeError, match="out_features"):
        myatt.Linear(3, size)
    with pytest.raises(TypeError, match="key_size"):
        myatt.MyAtt(3, size, 3, 3, 3)


@pytest.mark.parametrize("dim", [2**100, -2**100, np.int64(2**62)], ids=repr)
def test_softmax_absurd_dim(dim):
    with pytest.raises(np.exceptions.AxisError, match="dim"):
        myatt.softmax(np.ones((2, 3)), dim)


@pytest.mark.parametrize("n", [0, -1, 2**31, 2**70, 10**6], ids=repr)
def test_absurd_thread_counts(n):
    before = myatt.get_num_threads()
    with pytest.raises(ValueError, match="n"):
        myatt.set_num_threads(n)
    assert myatt.get_num_threads() == before


# --------------------------------------------------------------------------- #
# NaN and inf: results as torch's (NaN where torch has NaN)
# --------------------------------------------------------------------------- #
def _poisoned(rng, shape, dtype, frac=0.15):
    a = rng.standard_normal(shape).astype(dtype)
    mask = rng.random(shape)
    a[mask < frac] = np.nan
    a[(mask >= frac) & (mask < 2 * frac)] = np.inf
    a[(mask >= 2 * frac) & (mask < 3 * frac)] = -np.inf
    return a


@pytest.mark.parametrize("where", ["input", "weight", "bias"])
def test_nonfinite_linear(rng, dtype, where):
    x = rng.standard_normal((5, 7)).astype(dtype)
    w = rng.standard_normal((4, 7)).astype(dtype) / 3
    b = rng.standard_normal(4).astype(dtype)
    if where == "input":
        x = _poisoned(rng, x.shape, dtype)
    elif where == "weight":
        w = _poisoned(rng, w.shape, dtype)
    else:
        b = _poisoned(rng, b.shape, dtype)
    ours = myatt.linear(x, w, b)
    assert_matches(ours, F.linear(to_torch(x, dtype), to_torch(w, dtype), to_torch(b, dtype)),
                   equal_nan=True)
    lin = myatt.Linear(7, 4, dtype=dtype)
    lin.weight, lin.bias = w, b                    # non-finite parameters are values too
    assert_matches(lin(x), run(torch_linear(lin), x, dtype=dtype), equal_nan=True)


def test_nonfinite_bmm_softmax(rng, dtype):
    a = _poisoned(rng, (2, 5, 6), dtype)
    m2 = rng.standard_normal((2, 6, 3)).astype(dtype)
    assert_matches(myatt.bmm(a, m2), torch.bmm(to_torch(a, dtype), to_torch(m2, dtype)),
                   equal_nan=True)
    for dim in (0, 1, 2):
        assert_matches(myatt.softmax(a, dim), torch.softmax(to_torch(a, dtype), dim),
                       equal_nan=True)


@pytest.mark.parametrize("where", ["Q", "K", "V", "attn.weight", "attn_combine.bias"])
def test_nonfinite_myatt(rng, dtype, where):
    m = myatt.MyAtt(3, 4, 5, 6, 2, dtype=dtype)
    Q = rng.standard_normal((1, 6, 3)).astype(dtype)
    K = rng.standard_normal((2, 6, 4)).astype(dtype)
    V = rng.standard_normal((1, 5, 6)).astype(dtype)
    if where == "Q":
        Q = _poisoned(rng, Q.shape, dtype, 0.05)
    elif where == "K":
        K = _poisoned(rng, K.shape, dtype, 0.05)
    elif where == "V":
        V = _poisoned(rng, V.shape, dtype, 0.05)
    else:
        sd = m.state_dict()
        sd[where] = _poisoned(rng, sd[where].shape, dtype, 0.1)
        m.load_state_dict(sd)
    out, attn = m(Q, K, V)
    t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
    assert_matches(out, t_out, equal_nan=True)
    assert_matches(attn, t_attn, equal_nan=True)


# --------------------------------------------------------------------------- #
# Zero-size dimensions: results as torch's
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("xs,ws", [((0, 5), (3, 5)), ((4, 0), (3, 0)), ((4, 5), (0, 5)),
                                   ((0, 0), (0, 0)), ((2, 0, 5), (3, 5)), ((0,), (3, 0))],
                         ids=str)
def test_zero_size_linear(rng, dtype, xs, ws):
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    assert_matches(myatt.linear(x, w, b),
                   F.linear(to_torch(x, dtype), to_torch(w, dtype), to_torch(b, dtype)))
    assert_matches(myatt.linear(x, w), F.linear(to_torch(x, dtype), to_torch(w, dtype)))


@pytest.mark.parametrize("sa,sb", [((0, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 5)),
                                   ((2, 3, 0), (2, 0, 5)), ((2, 3, 4), (2, 4, 0))], ids=str)
def test_zero_size_bmm(rng, dtype, sa, sb):
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    assert_matches(myatt.bmm(a, b), torch.bmm(to_torch(a, dtype), to_torch(b, dtype)))


@pytest.mark.parametrize("sizes,S", [((3, 4, 5, 6, 2), 0), ((0, 4, 5, 6, 2), 3),
                                     ((3, 0, 5, 6, 2), 3), ((3, 4, 0, 6, 2), 3),
                                     ((3, 4, 5, 0, 2), 3), ((3, 4, 5, 6, 0), 3),
                                     ((0, 0, 0, 0, 0), 2)], ids=str)
def test_zero_size_myatt(rng, dtype, sizes, S):
    q, k, v1, v2, o = sizes
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q = rng.standard_normal((1, S, q)).astype(dtype)
    K = rng.standard_normal((1, S, k)).astype(dtype)
    V = rng.standard_normal((1, v1, v2)).astype(dtype)
    out, attn = m(Q, K, V)
    t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
    assert_matches(out, t_out, equal_nan=True)
    assert_matches(attn, t_attn, equal_nan=True)


# --------------------------------------------------------------------------- #
# Empty results with huge other dimensions: at once, not after 2**40 empty steps
# (found while writing the fuzz harness: MyAtt and bmm looped over S or the batch
# even when there was nothing to write)
# --------------------------------------------------------------------------- #
def test_huge_empty_myatt_returns_at_once(dtype):
    m = myatt.MyAtt(0, 0, 0, 0, 0, dtype=dtype)
    Q = np.empty((1, 2**50, 0), dtype)
    out, attn = m(Q, Q, np.empty((1, 0, 0), dtype))
    assert out.shape == (1, 2**50, 0) and attn.shape == (2**50, 0)


@pytest.mark.parametrize("sa,sb", [((2**50, 0, 3), (2**50, 3, 2)), ((2**50, 2, 3), (2**50, 3, 0))],
                         ids=str)
def test_huge_empty_bmm_returns_at_once(dtype, sa, sb):
    a = np.broadcast_to(np.ones((), dtype), sa)
    b = np.broadcast_to(np.ones((), dtype), sb)
    assert myatt.bmm(a, b).shape == (sa[0], sa[1], sb[2])


def test_huge_empty_sdpa_pullback_returns_at_once(dtype):
    """No query rows (L = 0) in a broadcast batch of 2**50 items: the output is empty, and
    the pullback's key and value gradients are sums of no terms, zeros (its loop over the
    batch ran for hours; fuzz/regressions/python/timeout-sdpa-pullback-no-query-rows-
    huge-batch)."""
    q = np.ones((1, 4, 0, 2), dtype)
    k = np.ones((1, 1, 4, 2), dtype)
    v = np.broadcast_to(np.ones((), dtype), (2**50, 1, 4, 3))[:, :, :, :0]
    out, pull = myatt.vjp(myatt.scaled_dot_product_attention, q, k, v, is_causal=True)
    assert out.shape == (2**50, 4, 0, 0)
    dq, dk, dv, dmask = pull(np.broadcast_to(np.ones((), dtype), out.shape))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dmask is None and not dk.any()
