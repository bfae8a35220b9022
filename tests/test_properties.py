"""Property tests (hypothesis): random shapes (zeros included), random layouts and
random input dtypes for every entry point, against torch at assert_close's default
tolerances: the kernels and modules one by one below, and every computing entry point
of the registry (entry_points.py) by test_entry_point.

Runs are derandomised and bounded by the "myatt" profile of conftest.py (the same
examples every run, max_examples=40). For a longer search:
    MYATT_HYPOTHESIS_EXAMPLES=2000 python -m pytest tests/test_properties.py
"""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import myatt
from entry_points import COMPUTING, flat, invoke, invoke_torch, sizes
from helpers import ALL_REAL, result_dtype
from oracle import array_of, assert_matches, run, tensor_of, to_torch, torch_linear, torch_myatt

EXAMPLES = int(os.environ.get("MYATT_HYPOTHESIS_EXAMPLES", "40"))
prop = settings(max_examples=EXAMPLES)

LAYOUTS = ["c", "fortran", "every_other", "negative", "byteswapped", "transposed_view",
           "readonly", "list", "torch", "broadcast"]
dtypes = st.sampled_from([np.dtype(d) for d in ALL_REAL])
float_dtypes = st.sampled_from([np.dtype(np.float32), np.dtype(np.float64)])


def values(seed, shape, dtype, scale=1.0):
    """Data in `dtype`: unit-normal times `scale` for floats, small integers otherwise."""
    r = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return r.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "u":
        return r.integers(0, 3, size=shape).astype(dtype)
    if dtype.kind == "i":
        return r.integers(-2, 3, size=shape).astype(dtype)
    return (r.standard_normal(shape) * scale).astype(dtype)


def in_layout(a, layout):
    """The values of `a` in another memory layout (or another kind of array-like)."""
    if layout == "c" or a.ndim == 0:
        return a.copy()
    if layout == "fortran":
        return np.asfortranarray(a)
    if layout == "every_other":
        big = np.zeros(tuple(2 * s for s in a.shape), dtype=a.dtype)
        idx = tuple(slice(None, None, 2) for _ in a.shape)
        big[idx] = a
        return big[idx]
    if layout == "negative":
        idx = tuple(slice(None, None, -1) for _ in a.shape)
        return a[idx].copy()[idx]
    if layout == "byteswapped":
        return a.astype(a.dtype.newbyteorder())
    if layout == "transposed_view":
        return np.ascontiguousarray(a.T).T
    if layout == "readonly":
        c = a.copy()
        c.flags.writeable = False
        return c
    if layout == "list":
        return a.tolist() if a.size else a.copy()      # an empty list loses its shape
    if layout == "torch":
        if a.dtype.kind == "u" and a.dtype != np.uint8 or a.dtype.byteorder == ">":
            return a.copy()                             # torch lacks these dtypes
        return tensor_of(a.copy())                       # (bfloat16 through its bits)
    if layout == "broadcast":
        # zero strides: the first item repeated along the first axis
        if a.shape[0] == 0:
            return a.copy()
        a[...] = a[:1]
        return np.broadcast_to(a[:1], a.shape)
    raise AssertionError(layout)


def operand(draw, seed, shape, scale=1.0, dtype=None):
    d = draw(dtypes) if dtype is None else dtype
    a = values(seed, shape, d, scale)
    layout = draw(st.sampled_from(LAYOUTS))
    obj = in_layout(a, layout)
    # the dtype myatt sees: a list of float32 values is float64 to numpy.asarray
    return obj, a, np_of(obj).dtype.newbyteorder("=")


def np_of(obj):
    return array_of(obj) if isinstance(obj, torch.Tensor) else np.asarray(obj)


dims = st.integers(0, 9)


@prop
@given(data=st.data(), batch=st.lists(st.integers(0, 4), max_size=2), k=dims, n=dims,
       bias=st.booleans(), seed=st.integers(0, 2**31))
def test_linear(data, batch, k, n, bias, seed):
    x, xv, dx = operand(data.draw, seed, tuple(batch) + (k,))
    w, wv, dw = operand(data.draw, seed + 1, (n, k), scale=max(k, 1) ** -0.5)
    b, bv, db = operand(data.draw, seed + 2, (n,)) if bias else (None, None, None)
    rd = result_dtype(dx, dw, db)
    ours = myatt.linear(x, w, b)
    theirs = F.linear(to_torch(xv, rd), to_torch(wv, rd), None if b is None else to_torch(bv, rd))
    assert ours.dtype == rd
    assert_matches(ours, theirs)


@prop
@given(data=st.data(), shape=st.lists(dims, max_size=4), seed=st.integers(0, 2**31))
def test_softmax(data, shape, seed):
    x, xv, dx = operand(data.draw, seed, tuple(shape), scale=3.0)
    span = max(len(shape), 1)
    dim = data.draw(st.integers(-span, span - 1), label="dim")
    rd = result_dtype(dx)
    ours = myatt.softmax(x, dim)
    assert ours.dtype == rd
    assert_matches(ours, torch.softmax(to_torch(xv, rd), dim))


@prop
@given(data=st.data(), b=st.integers(0, 3), n=dims, m=dims, p=dims, seed=st.integers(0, 2**31))
def test_bmm(data, b, n, m, p, seed):
    x, xv, dx = operand(data.draw, seed, (b, n, m))
    y, yv, dy = operand(data.draw, seed + 1, (b, m, p), scale=max(m, 1) ** -0.5)
    rd = result_dtype(dx, dy)
    ours = myatt.bmm(x, y)
    assert ours.dtype == rd
    assert_matches(ours, torch.bmm(to_torch(xv, rd), to_torch(yv, rd)))


@prop
@given(data=st.data(), sizes=st.tuples(dims, dims, dims, dims, dims), S=dims,
       Bq=st.integers(1, 3), Bk=st.integers(1, 3), mdtype=float_dtypes,
       seed=st.integers(0, 2**31))
def test_myatt(data, sizes, S, Bq, Bk, mdtype, seed):
    q, k, v1, v2, o = sizes
    myatt.manual_seed(seed)
    m = myatt.MyAtt(q, k, v1, v2, o, dtype=mdtype)
    Q, Qv, _ = operand(data.draw, seed, (Bq, S, q))
    K, Kv, _ = operand(data.draw, seed + 1, (Bk, S, k))
    V, Vv, _ = operand(data.draw, seed + 2, (1, v1, v2))
    out, attn = m(Q, K, V)
    t_out, t_attn = run(torch_myatt(m), Qv, Kv, Vv, dtype=mdtype)
    assert out.dtype == attn.dtype == mdtype
    assert_matches(out, t_out)
    assert_matches(attn, t_attn)


@prop
@given(data=st.data(), batch=st.lists(st.integers(0, 4), max_size=2), k=dims, n=dims,
       bias=st.booleans(), mdtype=float_dtypes, seed=st.integers(0, 2**31))
def test_linear_type(data, batch, k, n, bias, mdtype, seed):
    myatt.manual_seed(seed)
    lin = myatt.Linear(k, n, bias=bias, dtype=mdtype)
    # new parameters in any dtype and layout, assigned ...
    w, wv, _ = operand(data.draw, seed + 1, (n, k), scale=max(k, 1) ** -0.5)
    lin.weight = w
    if bias:
        b, bv, _ = operand(data.draw, seed + 2, (n,))
        lin.bias = b
    x, xv, _ = operand(data.draw, seed, tuple(batch) + (k,))
    ours = lin(x)
    assert ours.dtype == mdtype
    # ... and converted exactly as NumPy converts them
    np.testing.assert_array_equal(lin.weight, np.asarray(wv, dtype=mdtype))
    assert_matches(ours, run(torch_linear(lin), xv, dtype=mdtype))


@prop
@given(data=st.data(), sizes=st.tuples(dims, dims, dims, dims, dims), mdtype=float_dtypes,
       seed=st.integers(0, 2**31))
def test_load_state_dict_any_layout(data, sizes, mdtype, seed):
    m = myatt.MyAtt(*sizes, dtype=mdtype)
    ref = {k: values(seed + i, v.shape, np.float64) for i, (k, v) in enumerate(m.state_dict().items())}
    sd = {}
    for k, v in ref.items():
        layout = data.draw(st.sampled_from(LAYOUTS), label=k)
        sd[k] = in_layout(v.copy(), layout)
        ref[k] = np_of(sd[k])
    assert m.load_state_dict(sd) == ([], [])
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, np.asarray(ref[k], dtype=mdtype))


# --------------------------------------------------------------------------- #
# Every computing entry point of the registry (entry_points.py), the same way
# --------------------------------------------------------------------------- #
def draw_sizes(draw, ep):
    """Random sizes (zeros included) for the fields the entry's shapes use."""
    kw = {}
    for f in ep.sizes_of:
        if f == "batch":
            kw[f] = tuple(draw(st.lists(st.integers(0, 4), max_size=2), label=f))
        elif f == "shape":
            kw[f] = tuple(draw(st.lists(dims, max_size=4), label=f))
        elif f == "dim":
            span = max(len(kw["shape"]), 1)
            kw[f] = draw(st.integers(-span, span - 1), label=f)
        elif f in ("Bq", "Bk"):
            kw[f] = draw(st.integers(1, 3), label=f)
        else:
            kw[f] = draw(dims, label=f)
    return sizes(**kw)


@pytest.mark.parametrize("ep", [e for e in COMPUTING if e.torch is not None], ids=lambda e: e.name)
@prop
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_entry_point(ep, data, seed):
    """Random sizes, and every array argument in a random dtype and layout (or None where
    allowed), one of the entry's keyword options: the results are torch's on the same
    values, in the result dtype (the promotion rule for functions, the object's dtype for
    methods)."""
    s = draw_sizes(data.draw, ep)
    mdtype = data.draw(float_dtypes, label="module dtype") if ep.make else None
    myatt.manual_seed(seed)
    obj = ep.target(s, mdtype) if ep.make else None
    objs, vals, seen = [], [], []
    for i, arg in enumerate(ep.args):
        if arg.optional and data.draw(st.booleans(), label=f"{arg.name} is None"):
            objs.append(None), vals.append(None), seen.append(None)
            continue
        scale = 1.0 if arg.fan_in is None else max(arg.fan_in(s), 1) ** -0.5
        dtype = data.draw(float_dtypes, label=f"{arg.name} dtype") if arg.floating else None
        o, v, d = operand(data.draw, seed + i, arg.shape(s), scale=scale, dtype=dtype)
        objs.append(o), vals.append(v), seen.append(d if arg.promotes else None)
    rd = np.dtype(obj.dtype) if ep.module_dtype else result_dtype(*seen)
    opt = data.draw(st.sampled_from(ep.options), label="options")
    ours = flat(invoke(ep, obj, objs, s, opt), ep.result)
    # a mask reaches torch as myatt computes with it: in the result dtype, or beside
    # half-precision operands in float32 unless it is of their dtype (torch takes both)
    tdts = [np.dtype(np.float32) if arg.broadcasts and rd.itemsize == 2 and o is not None
            and np_of(o).dtype != rd else rd for arg, o in zip(ep.args, objs)]
    theirs = flat(invoke_torch(ep, obj, [None if v is None else to_torch(v, t)
                                         for v, t in zip(vals, tdts)], s, opt), ep.result)
    assert len(ours) == len(theirs)
    if all(v is not None for v in vals):            # (no bias: no bias gradient)
        assert tuple(o.shape for o in ours) == ep.result_shapes(s)
    for o, t in zip(ours, theirs):
        assert o.dtype == rd
        assert_matches(o, t)
