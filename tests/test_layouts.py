"""Every input layout of the spec, for the kernels, Linear and MyAtt (one by one, and
every computing entry point of the registry, entry_points.py, by test_entry_point_layouts).

Inputs may be lists, Fortran-ordered, strided (every other row/column, negative
strides), byte-swapped, unaligned, read-only arrays or CPU torch tensors (with or
without requires_grad). Inputs are never modified; results are new C-contiguous
ndarrays that share no memory with any input.
"""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from entry_points import COMPUTING, SMALL, flat, invoke, invoke_torch
from helpers import result_dtype
from oracle import assert_matches, run, to_torch, torch_linear, torch_myatt


# --------------------------------------------------------------------------- #
# Layouts: each maps a native C-contiguous array `a` to an object holding the
# same values in another layout.
# --------------------------------------------------------------------------- #
def _every_other(a, axes):
    if a.ndim == 0:
        return a.copy()
    big_shape = tuple(2 * s if i in axes else s for i, s in enumerate(a.shape))
    big = np.full(big_shape, 99.0, dtype=a.dtype)   # poison in the gaps
    idx = tuple(slice(None, None, 2) if i in axes else slice(None) for i in range(a.ndim))
    big[idx] = a
    return big[idx]


def _negative(a, axes):
    if a.ndim == 0:
        return a.copy()
    idx = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(a.ndim))
    return a[idx].copy()[idx]


def _readonly(a):
    c = a.copy()
    c.flags.writeable = False
    return c


def _unaligned(a):
    buf = np.empty(a.nbytes + 2 * a.itemsize, dtype=np.uint8)
    off = next(o for o in range(1, a.itemsize) if (buf.ctypes.data + o) % a.itemsize)
    u = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    u[...] = a
    if a.size:
        assert not u.flags.aligned
    return u


LAYOUTS = {
    "c": lambda a: a.copy(),
    "list": lambda a: a.tolist(),
    "fortran": np.asfortranarray,
    "transposed_view": lambda a: np.ascontiguousarray(a.T).T,
    "every_other_row": lambda a: _every_other(a, {0}),
    "every_other_col": lambda a: _every_other(a, {a.ndim - 1}),
    "every_other_all": lambda a: _every_other(a, set(range(a.ndim))),
    "negative_rows": lambda a: _negative(a, {0}),
    "negative_all": lambda a: _negative(a, set(range(a.ndim))),
    "byteswapped": lambda a: a.astype(a.dtype.newbyteorder()),
    "byteswapped_fortran": lambda a: np.asfortranarray(a.astype(a.dtype.newbyteorder())),
    "readonly": _readonly,
    "unaligned": _unaligned,
    "torch": lambda a: torch.from_numpy(a.copy()),
    "torch_requires_grad": lambda a: torch.from_numpy(a.copy()).requires_grad_(True),
    "torch_strided": lambda a: torch.from_numpy(np.asfortranarray(a)),
}
LAYOUT_NAMES = list(LAYOUTS)


def layout_cases(targets, sizes, size_ids):
    """(layout, target, size) combinations, less a list of a 0-size array for the operand
    with the 0-size axis (a nested empty list loses its inner dimensions)."""
    cases = []
    for layout in LAYOUT_NAMES:
        for target in targets:
            for size, size_id in zip(sizes, size_ids):
                if layout == "list" and size == 0 and target in ("input", "Q", "K", "all"):
                    continue
                cases.append(pytest.param(layout, target, size, id=f"{layout}-{target}-{size_id}"))
    return cases


def _as_numpy(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().numpy()
    return np.asarray(obj)


def _operand_dtype(obj):
    """The dtype the kernels see for an operand: what numpy.asarray makes of it."""
    return _as_numpy(obj).dtype.newbyteorder("=")


class Guard:
    """Remembers the inputs exactly, to check afterwards that nothing modified them
    and that no result shares memory with them."""

    def __init__(self, *objs):
        self.objs = objs
        self.saved = [self._save(o) for o in objs]

    @staticmethod
    def _save(o):
        if isinstance(o, torch.Tensor):
            return (o.detach().clone(), o.requires_grad)
        if isinstance(o, np.ndarray):
            return (o.copy(order="K"), o.flags.writeable, o.strides)
        return copy.deepcopy(o)

    def check(self, *results):
        for o, s in zip(self.objs, self.saved):
            if isinstance(o, torch.Tensor):
                assert torch.equal(o.detach(), s[0]) or (o.numel() == 0 and s[0].numel() == 0)
                assert o.requires_grad == s[1]
                assert o.grad is None
            elif isinstance(o, np.ndarray):
                assert o.tobytes() == s[0].tobytes()
                assert o.dtype == s[0].dtype
                assert o.flags.writeable == s[1]
                assert o.strides == s[2]
            else:
                assert o == s
            if isinstance(o, (np.ndarray, torch.Tensor)):
                for r in results:
                    assert not np.shares_memory(r, _as_numpy(o)), "result aliases an input"
        for r in results:
            assert type(r) is np.ndarray
            assert r.flags.c_contiguous
        for i, r in enumerate(results):
            for r2 in results[i + 1:]:
                assert not np.shares_memory(r, r2)


# --------------------------------------------------------------------------- #
# Kernels
# --------------------------------------------------------------------------- #
LINEAR_TARGETS = ["input", "weight", "bias", "all"]


@pytest.mark.parametrize("layout,target,n", layout_cases(LINEAR_TARGETS, [5, 0], ["full", "empty"]))
def test_linear_layouts(rng, dtype, layout, target, n):
    x = rng.standard_normal((n, 3, 7)).astype(dtype)
    w = rng.standard_normal((4, 7)).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    f = LAYOUTS[layout]
    ops = {"input": x, "weight": w, "bias": b}
    objs = {k: (f(v) if target in (k, "all") else v) for k, v in ops.items()}
    guard = Guard(*objs.values())
    out = myatt.linear(objs["input"], objs["weight"], objs["bias"])
    guard.check(out)
    rd = result_dtype(*(_operand_dtype(o) for o in objs.values()))
    assert out.dtype == rd
    assert_matches(out, F.linear(to_torch(x, rd), to_torch(w, rd), to_torch(b, rd)))


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("layout,target,n", layout_cases(["input"], [5, 0], ["full", "empty"]))
def test_softmax_layouts(rng, dtype, layout, target, n, dim):
    x = (3 * rng.standard_normal((7, n, 9))).astype(dtype)
    obj = LAYOUTS[layout](x)
    guard = Guard(obj)
    out = myatt.softmax(obj, dim)
    guard.check(out)
    rd = result_dtype(_operand_dtype(obj))
    assert out.dtype == rd
    assert_matches(out, torch.softmax(to_torch(x, rd), dim))


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_softmax_layouts_2d(rng, dtype, layout):
    x = (3 * rng.standard_normal((6, 11))).astype(dtype)
    obj = LAYOUTS[layout](x)
    for dim in (0, 1):
        guard = Guard(obj)
        out = myatt.softmax(obj, dim)
        guard.check(out)
        rd = result_dtype(_operand_dtype(obj))
        assert_matches(out, torch.softmax(to_torch(x, rd), dim))


@pytest.mark.parametrize("layout,target,n", layout_cases(["input", "mat2", "all"], [5, 0],
                                                          ["full", "empty"]))
def test_bmm_layouts(rng, dtype, layout, target, n):
    a = rng.standard_normal((3, n, 7)).astype(dtype)
    c = rng.standard_normal((3, 7, 4)).astype(dtype)
    f = LAYOUTS[layout]
    oa = f(a) if target in ("input", "all") else a
    oc = f(c) if target in ("mat2", "all") else c
    guard = Guard(oa, oc)
    out = myatt.bmm(oa, oc)
    guard.check(out)
    rd = result_dtype(_operand_dtype(oa), _operand_dtype(oc))
    assert out.dtype == rd
    assert_matches(out, torch.bmm(to_torch(a, rd), to_torch(c, rd)))


def test_zero_strides(rng, dtype):
    """Broadcast (stride-0, read-only) views are valid inputs too."""
    row = rng.standard_normal(7).astype(dtype)
    x = np.broadcast_to(row, (5, 7))
    w = np.broadcast_to(rng.standard_normal((4, 1)).astype(dtype), (4, 7))
    b = np.broadcast_to(np.asarray(0.5, dtype=dtype), (4,))
    guard = Guard(x, w, b)
    out = myatt.linear(x, w, b)
    guard.check(out)
    assert_matches(out, F.linear(to_torch(x, dtype), to_torch(w, dtype), to_torch(b, dtype)))
    s = myatt.softmax(x, 0)
    guard.check(s)
    assert_matches(s, torch.softmax(to_torch(x, dtype), 0))
    a3 = np.broadcast_to(row, (2, 3, 7))
    c3 = np.broadcast_to(rng.standard_normal((1, 7, 2)).astype(dtype), (2, 7, 2))
    guard = Guard(a3, c3)
    out = myatt.bmm(a3, c3)
    guard.check(out)
    assert_matches(out, torch.bmm(to_torch(a3, dtype), to_torch(c3, dtype)))


def test_torch_tensor_views(rng, dtype):
    """Non-contiguous torch views (transposed, sliced, with a storage offset)."""
    base = torch.from_numpy(rng.standard_normal((9, 12)).astype(dtype))
    x = base[1::2, 2:9]            # [4, 7], strided with an offset
    w = base.T[3:8, :7]            # [5, 7], transposed view
    guard = Guard(x, w)
    out = myatt.linear(x, w)
    guard.check(out)
    assert_matches(out, F.linear(x.contiguous(), w.contiguous()))
    out = myatt.softmax(x, 0)
    guard.check(out)
    assert_matches(out, torch.softmax(x, 0))


# --------------------------------------------------------------------------- #
# Linear (call, assignment)
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_linear_type_call_layouts(rng, dtype, layout):
    m = myatt.Linear(7, 4, dtype=dtype)
    x = rng.standard_normal((2, 5, 7)).astype(dtype)
    obj = LAYOUTS[layout](x)
    guard = Guard(obj)
    out = m(obj)
    guard.check(out, m.weight, m.bias)
    assert out.dtype == dtype
    with torch.no_grad():
        assert_matches(out, torch_linear(m)(to_torch(x, dtype)))


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_linear_type_assignment_layouts(rng, dtype, layout):
    m = myatt.Linear(7, 4, dtype=dtype)
    w = rng.standard_normal((4, 7)).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    ow, ob = LAYOUTS[layout](w), LAYOUTS[layout](b)
    guard = Guard(ow, ob)
    m.weight = ow
    m.bias = ob
    guard.check(m.weight, m.bias)
    np.testing.assert_array_equal(m.weight, w, strict=True)
    np.testing.assert_array_equal(m.bias, b, strict=True)


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_load_state_dict_layouts(rng, dtype, layout):
    m = myatt.MyAtt(3, 4, 5, 6, 2, dtype=dtype)
    good = {k: rng.standard_normal(v.shape).astype(dtype) for k, v in m.state_dict().items()}
    objs = {k: LAYOUTS[layout](v) for k, v in good.items()}
    guard = Guard(*objs.values())
    m.load_state_dict(objs)
    sd = m.state_dict()
    guard.check(*sd.values())
    for k, v in good.items():
        np.testing.assert_array_equal(sd[k], v, strict=True)


# --------------------------------------------------------------------------- #
# MyAtt
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("layout,target,S", layout_cases(["Q", "K", "V", "all"], [4, 0],
                                                          ["S4", "S0"]))
def test_myatt_layouts(rng, dtype, layout, target, S):
    m = myatt.MyAtt(5, 6, 7, 3, 4, dtype=dtype)
    Q = rng.standard_normal((2, S, 5)).astype(dtype)
    K = rng.standard_normal((3, S, 6)).astype(dtype)
    V = rng.standard_normal((1, 7, 3)).astype(dtype)
    f = LAYOUTS[layout]
    objs = {k: (f(v) if target in (k, "all") else v) for k, v in (("Q", Q), ("K", K), ("V", V))}
    guard = Guard(*objs.values())
    out, attn = m(objs["Q"], objs["K"], objs["V"])
    guard.check(out, attn)
    assert out.dtype == dtype and attn.dtype == dtype
    t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
    assert_matches(out, t_out)
    assert_matches(attn, t_attn)


@pytest.mark.parametrize("layout", ["c", "list", "fortran", "byteswapped", "negative_all",
                                    "torch", "readonly"])
@pytest.mark.parametrize("in_dtype", [np.float64, np.float32, np.int64, np.int8, np.bool_,
                                      np.float16], ids=lambda d: np.dtype(d).name)
def test_myatt_converts_inputs(rng, dtype, in_dtype, layout):
    """float64 / integer / bool inputs to a module: converted to the module's dtype,
    and the outputs are in the module's dtype."""
    if layout == "torch" and np.dtype(in_dtype) == np.float16:
        layout = "c"    # torch.from_numpy handles float16 too, but keep the table simple
    m = myatt.MyAtt(5, 6, 7, 3, 4, dtype=dtype)
    Q = (rng.standard_normal((1, 4, 5)) * 3).astype(in_dtype)
    K = (rng.standard_normal((1, 4, 6)) * 3).astype(in_dtype)
    V = (rng.standard_normal((1, 7, 3)) * 3).astype(in_dtype)
    f = LAYOUTS[layout]
    oq, ok, ov = f(Q), f(K), f(V)
    guard = Guard(oq, ok, ov)
    out, attn = m(oq, ok, ov)
    guard.check(out, attn)
    assert out.dtype == dtype and attn.dtype == dtype
    t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
    assert_matches(out, t_out)
    assert_matches(attn, t_attn)


def test_myatt_same_array_three_times(rng, dtype):
    """One array passed as Q, K and V at once (aliased inputs) is fine."""
    m = myatt.MyAtt(4, 4, 3, 4, 2, dtype=dtype)
    X = rng.standard_normal((1, 3, 4)).astype(dtype)
    guard = Guard(X)
    out, attn = m(X, X, X)
    guard.check(out, attn)
    t_out, t_attn = run(torch_myatt(m), X, X, X, dtype=dtype)
    assert_matches(out, t_out)
    assert_matches(attn, t_attn)


# --------------------------------------------------------------------------- #
# Every computing entry point of the registry (entry_points.py), the same way
# --------------------------------------------------------------------------- #
def _registry_layout_cases():
    for ep in COMPUTING:
        if ep.torch is None:
            continue
        for layout in LAYOUT_NAMES:
            for target in [a.name for a in ep.args] + ["all"]:
                yield pytest.param(ep, layout, target, id=f"{ep.name}-{layout}-{target}")


@pytest.mark.parametrize("ep,layout,target", list(_registry_layout_cases()))
def test_entry_point_layouts(dtype, ep, layout, target):
    """Each array argument (and all at once) in each layout: the inputs are unchanged,
    the results are new C-contiguous arrays sharing no memory with the inputs or each
    other, in the result dtype, equal to torch's on the same values."""
    obj = ep.target(SMALL, dtype)
    vals = ep.good(SMALL, dtype, seed=5)
    f = LAYOUTS[layout]
    objs = [f(v) if target in (a.name, "all") else v for a, v in zip(ep.args, vals)]
    guard = Guard(*objs)
    ours = flat(invoke(ep, obj, objs), ep.result)
    guard.check(*ours)
    rd = np.dtype(obj.dtype) if ep.module_dtype else result_dtype(
        *(_operand_dtype(o) for a, o in zip(ep.args, objs) if a.promotes))
    theirs = flat(invoke_torch(ep, obj, [to_torch(v, rd) for v in vals]), ep.result)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert o.dtype == rd
        assert_matches(o, t)


# --------------------------------------------------------------------------- #
# Every broadcast form of every mask argument (np.broadcast_to's and torch's expand's
# zero strides), for every entry point that takes one
# --------------------------------------------------------------------------- #
def _broadcast_forms(shape):
    """Each non-empty set of the axes of `shape` longer than 1, as the shape of the base
    that is broadcast along them."""
    axes = [i for i, n in enumerate(shape) if n > 1]
    for bits in range(1, 2 ** len(axes)):
        yield tuple(1 if i in axes and bits >> axes.index(i) & 1 else n
                    for i, n in enumerate(shape))


def _broadcast_mask_cases():
    for ep in COMPUTING:
        if ep.torch is None:
            continue
        for pos, arg in enumerate(ep.args):
            if not arg.floating:      # the masks: bool or floating
                continue
            for base in _broadcast_forms(arg.shape(SMALL)):
                for view in ("numpy", "torch"):
                    for kind in ("float", "bool"):
                        yield pytest.param(ep, pos, base, view, kind,
                                           id=f"{ep.name}-{arg.name}-{base}-{view}-{kind}")


@pytest.mark.parametrize("ep,pos,base,view,kind", list(_broadcast_mask_cases()))
def test_entry_point_broadcast_masks(dtype, ep, pos, base, view, kind):
    """A mask that is a broadcast view of a smaller one: torch's results on the same values
    (a 2-D MultiheadAttention attn_mask broadcast along its rows was read past its end)."""
    obj = ep.target(SMALL, dtype)
    vals = ep.good(SMALL, dtype, seed=7)
    shape = ep.args[pos].shape(SMALL)
    small = np.random.default_rng(3).standard_normal(base).astype(dtype)
    if kind == "bool":
        small = small > -0.5
    vals[pos] = np.broadcast_to(small, shape)
    objs = list(vals)
    objs[pos] = (vals[pos] if view == "numpy"
                 else torch.from_numpy(small).expand(shape))
    guard = Guard(*objs)
    ours = flat(invoke(ep, obj, objs), ep.result)
    guard.check(*ours)
    rd = np.dtype(obj.dtype) if ep.module_dtype else np.dtype(dtype)
    tensors = [torch.from_numpy(np.ascontiguousarray(v)) if v.dtype == bool else to_torch(v, rd)
               for v in vals]
    theirs = flat(invoke_torch(ep, obj, tensors), ep.result)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert_matches(o, t, equal_nan=kind == "bool")   # rows with every key masked: NaN
