"""Bad inputs to every entry point: the exception class of the spec, a message that names
the argument (and holds the actual shape where a shape is wrong), and no change to a
module after a failed call, assignment or load.

TypeError: wrong argument types, unsupported dtypes. ValueError: wrong ndim or sizes.
numpy.exceptions.AxisError (a ValueError and an IndexError): softmax's dim out of range.
KeyError: missing/unexpected keys in a strict load_state_dict.
"""
import re
import sys

import numpy as np
import pytest
import torch

import myatt
import oracle
from entry_points import ENTRY_POINTS, SMALL, invoke
from helpers import name_re, shape_re
from oracle import run, torch_myatt

AxisError = np.exceptions.AxisError


def A(*shape, dtype=np.float32):
    """A valid float array of `shape` (ones)."""
    return np.ones(shape, dtype=dtype)


def raises(thunk, exc, names=(), shapes=()):
    """thunk() raises `exc`; its message names one of `names` and holds one of `shapes`."""
    match = name_re(*names) if names else None
    with pytest.raises(exc, match=match) as info:
        thunk()
    if shapes:
        msg = str(info.value)
        assert any(re.search(shape_re(s), msg) for s in shapes), \
            f"message {msg!r} holds none of the actual shapes {shapes}"
    return info


def snapshot(m):
    return {k: v.copy() for k, v in m.state_dict().items()}


def assert_state_equal(m, snap):
    sd = m.state_dict()
    assert sorted(sd) == sorted(snap)
    for k in snap:
        np.testing.assert_array_equal(sd[k], snap[k], strict=True)


# --------------------------------------------------------------------------- #
# Unsupported dtypes and non-array-likes: TypeError, naming the argument.
# --------------------------------------------------------------------------- #
BAD_VALUES = {
    "complex128": lambda s: np.ones(s, dtype=np.complex128),
    "complex64": lambda s: np.ones(s, dtype=np.complex64),
    "object": lambda s: np.ones(s, dtype=object),
    "str": lambda s: np.full(s, "1.0"),
    "bytes": lambda s: np.full(s, b"1.0"),
    "datetime64": lambda s: np.zeros(s, dtype="datetime64[s]"),
    "timedelta64": lambda s: np.zeros(s, dtype="timedelta64[s]"),
    "structured": lambda s: np.zeros(s, dtype=[("a", "f4"), ("b", "f4")]),
    "longdouble": lambda s: np.ones(s, dtype=np.longdouble),
    "torch_complex": lambda s: torch.ones(s, dtype=torch.complex64),
    "ragged_list": lambda s: [[1.0, 2.0], [3.0]],
    "None": lambda s: None,
    "dict": lambda s: {"a": 1},
}
BAD_IDS = list(BAD_VALUES)

# every kernel function of the registry (entry_points.py), each argument in turn
KERNELS = {ep.name: ep for ep in ENTRY_POINTS if ep.kind == "function"}
KERNEL_TYPE_CASES = [
    pytest.param(k, i, bad, id=f"{k}-{arg.name}-{bad}")
    for k, ep in KERNELS.items()
    for i, arg in enumerate(ep.args)
    for bad in BAD_IDS
    if not (arg.optional and bad == "None")      # bias=None is valid: no bias
]


@pytest.mark.parametrize("kernel,pos,bad", KERNEL_TYPE_CASES)
def test_kernel_bad_types(kernel, pos, bad):
    ep = KERNELS[kernel]
    args = [np.ones_like(a) for a in ep.good(SMALL)]
    args[pos] = BAD_VALUES[bad](ep.args[pos].shape(SMALL))
    exc = ValueError if bad == "ragged_list" else TypeError   # numpy's, as in numpy
    # numpy's message is kept; a note names the argument (3.11+)
    named = bad != "ragged_list" or sys.version_info >= (3, 11)
    raises(lambda: invoke(ep, None, args), exc, names=[ep.args[pos].name] if named else [])


# --------------------------------------------------------------------------- #
# Wrong ndim or sizes: ValueError naming the argument and holding its shape.
# --------------------------------------------------------------------------- #
# id, thunk, names (any of), actual shapes (any of)
KERNEL_VALUE_CASES = [
    ("linear-input-0d", lambda: myatt.linear(A(), A(3, 1)), ["input"], [()]),
    ("linear-input-in-mismatch", lambda: myatt.linear(A(4, 7), A(3, 5)), ["input", "weight"],
     [(4, 7), (3, 5)]),
    ("linear-input-1d-mismatch", lambda: myatt.linear(A(6), A(3, 5)), ["input", "weight"],
     [(6,), (3, 5)]),
    ("linear-weight-1d", lambda: myatt.linear(A(4, 7), A(7)), ["weight"], [(7,)]),
    ("linear-weight-0d", lambda: myatt.linear(A(4, 7), A()), ["weight"], [()]),
    ("linear-weight-3d", lambda: myatt.linear(A(4, 7), A(1, 3, 7)), ["weight"], [(1, 3, 7)]),
    ("linear-bias-2d", lambda: myatt.linear(A(4, 7), A(3, 7), A(1, 3)), ["bias"], [(1, 3)]),
    ("linear-bias-0d", lambda: myatt.linear(A(4, 7), A(3, 7), A()), ["bias"], [()]),
    ("linear-bias-length", lambda: myatt.linear(A(4, 7), A(3, 7), A(5)), ["bias"], [(5,)]),
    ("linear-bias-empty", lambda: myatt.linear(A(4, 7), A(3, 7), A(0)), ["bias"], [(0,)]),
    ("bmm-input-2d", lambda: myatt.bmm(A(5, 7), A(1, 7, 4)), ["input"], [(5, 7)]),
    ("bmm-input-4d", lambda: myatt.bmm(A(1, 1, 5, 7), A(1, 7, 4)), ["input"], [(1, 1, 5, 7)]),
    ("bmm-input-0d", lambda: myatt.bmm(A(), A(1, 7, 4)), ["input"], [()]),
    ("bmm-mat2-2d", lambda: myatt.bmm(A(1, 5, 7), A(7, 4)), ["mat2"], [(7, 4)]),
    ("bmm-mat2-4d", lambda: myatt.bmm(A(1, 5, 7), A(1, 1, 7, 4)), ["mat2"], [(1, 1, 7, 4)]),
    ("bmm-batch-mismatch", lambda: myatt.bmm(A(2, 5, 7), A(3, 7, 4)), ["input", "mat2"],
     [(2, 5, 7), (3, 7, 4)]),
    ("bmm-inner-mismatch", lambda: myatt.bmm(A(2, 5, 7), A(2, 6, 4)), ["input", "mat2"],
     [(2, 5, 7), (2, 6, 4)]),
]


@pytest.mark.parametrize("thunk,names,shapes", [c[1:] for c in KERNEL_VALUE_CASES],
                         ids=[c[0] for c in KERNEL_VALUE_CASES])
def test_kernel_bad_shapes(thunk, names, shapes):
    raises(thunk, ValueError, names=names, shapes=shapes)


def test_kernel_bad_shapes_rejected_by_torch_too():
    """The shape errors above are errors in torch as well (where torch defines the op;
    torch's F.linear takes a 1-D weight, which the decisions make an error here)."""
    F = torch.nn.functional
    for thunk in (lambda: F.linear(torch.ones(4, 7), torch.ones(3, 5)),
                  lambda: F.linear(torch.ones(4, 7), torch.ones(3, 7), torch.ones(5)),
                  lambda: torch.bmm(torch.ones(5, 7), torch.ones(1, 7, 4)),
                  lambda: torch.bmm(torch.ones(2, 5, 7), torch.ones(3, 7, 4)),
                  lambda: torch.bmm(torch.ones(2, 5, 7), torch.ones(2, 6, 4))):
        with pytest.raises(Exception):
            thunk()


SOFTMAX_AXIS_CASES = [((3, 4), 2), ((3, 4), -3), ((), 1), ((), -2), ((5,), 1), ((5,), -2),
                      ((2, 3, 4, 5), 4), ((2, 3, 4, 5), -5), ((2, 3), 100)]


@pytest.mark.parametrize("shape,dim", SOFTMAX_AXIS_CASES, ids=str)
def test_softmax_dim_out_of_range(shape, dim):
    with pytest.raises(Exception):                  # torch rejects it too
        torch.softmax(torch.ones(shape), dim)
    info = raises(lambda: myatt.softmax(A(*shape), dim), AxisError, names=["dim"])
    assert isinstance(info.value, ValueError) and isinstance(info.value, IndexError)


@pytest.mark.parametrize("dim", [1.0, "0", None, [0], (0,), np.float64(0.0), 0.5],
                         ids=repr)
def test_softmax_dim_not_an_integer(dim):
    raises(lambda: myatt.softmax(A(3, 4), dim), TypeError, names=["dim"])


@pytest.mark.parametrize("call", [
    lambda: myatt.linear(A(4, 7)),
    lambda: myatt.linear(),
    lambda: myatt.linear(A(4, 7), A(3, 7), A(3), A(3)),
    lambda: myatt.softmax(),
    lambda: myatt.softmax(A(3), 0, 0),
    lambda: myatt.bmm(A(1, 2, 3)),
    lambda: myatt.bmm(A(1, 2, 3), A(1, 3, 2), A(1, 2, 2)),
    lambda: myatt.linear(A(4, 7), A(3, 7), nonsense=1),
], ids=["linear-1arg", "linear-0args", "linear-4args", "softmax-0args", "softmax-3args",
        "bmm-1arg", "bmm-3args", "linear-bad-keyword"])
def test_wrong_argument_count(call):
    with pytest.raises(TypeError):
        call()


# --------------------------------------------------------------------------- #
# MyAtt.forward
# --------------------------------------------------------------------------- #
SIZES = (3, 4, 5, 6, 2)     # query_size, key_size, value_size1, value_size2, output_size
GOOD = {"Q": (1, 4, 3), "K": (1, 4, 4), "V": (1, 5, 6)}

# id, replacements of GOOD, names (any of), actual shapes (any of)
MODULE_VALUE_CASES = [
    ("Q-2d", {"Q": (4, 3)}, ["Q"], [(4, 3)]),
    ("Q-4d", {"Q": (1, 1, 4, 3)}, ["Q"], [(1, 1, 4, 3)]),
    ("Q-0d", {"Q": ()}, ["Q"], [()]),
    ("K-2d", {"K": (4, 4)}, ["K"], [(4, 4)]),
    ("K-4d", {"K": (1, 1, 4, 4)}, ["K"], [(1, 1, 4, 4)]),
    ("Q-and-K-4d", {"Q": (1, 1, 4, 3), "K": (1, 1, 4, 4)}, ["Q", "K"], [(1, 1, 4, 3), (1, 1, 4, 4)]),
    ("V-2d", {"V": (5, 6)}, ["V"], [(5, 6)]),
    ("V-4d", {"V": (1, 1, 5, 6)}, ["V"], [(1, 1, 5, 6)]),
    ("S-mismatch", {"K": (1, 7, 4)}, ["Q", "K"], [(1, 4, 3), (1, 7, 4)]),
    ("S-mismatch-K-empty", {"K": (1, 0, 4)}, ["Q", "K"], [(1, 4, 3), (1, 0, 4)]),
    ("V-batch-2", {"V": (2, 5, 6)}, ["V"], [(2, 5, 6)]),
    ("V-batch-0", {"V": (0, 5, 6)}, ["V"], [(0, 5, 6)]),
    ("V-value_size1", {"V": (1, 7, 6)}, ["V"], [(1, 7, 6)]),
    ("V-features", {"V": (1, 5, 8)}, ["V"], [(1, 5, 8)]),
    ("K-features", {"K": (1, 4, 9)}, ["Q", "K"], [(1, 4, 3), (1, 4, 9)]),
    ("Q-features", {"Q": (1, 4, 2)}, ["Q", "K", "V"], [(1, 4, 2), (1, 4, 4), (1, 5, 6)]),
    ("Q-features-K-compensates-V-not", {"Q": (1, 4, 5), "K": (1, 4, 2)}, ["Q", "V"],
     [(1, 4, 5), (1, 5, 6)]),
    ("Bq-0", {"Q": (0, 4, 3)}, ["Q"], [(0, 4, 3)]),
    ("Bk-0", {"K": (0, 4, 4)}, ["K"], [(0, 4, 4)]),
]


def module_inputs(repl, dtype=np.float32):
    shapes = dict(GOOD, **repl)
    rng = np.random.default_rng(7)
    return [rng.standard_normal(shapes[k]).astype(dtype) for k in ("Q", "K", "V")]


@pytest.mark.parametrize("repl,names,shapes", [c[1:] for c in MODULE_VALUE_CASES],
                         ids=[c[0] for c in MODULE_VALUE_CASES])
@pytest.mark.parametrize("method", ["call", "forward"])
def test_module_bad_shapes(dtype, method, repl, names, shapes):
    m = myatt.MyAtt(*SIZES, dtype=dtype)
    snap = snapshot(m)
    Q, K, V = module_inputs(repl, dtype)
    # torch rejects these inputs ...
    with pytest.raises(Exception):
        run(torch_myatt(m), Q, K, V, dtype=dtype)
    # ... and so does myatt, with a ValueError
    fn = m if method == "call" else m.forward
    raises(lambda: fn(Q, K, V), ValueError, names=names, shapes=shapes)
    assert_state_equal(m, snap)


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("arg", ["Q", "K", "V"])
def test_module_bad_types(arg, bad):
    m = myatt.MyAtt(*SIZES)
    snap = snapshot(m)
    args = dict(zip("QKV", module_inputs({})))
    args[arg] = BAD_VALUES[bad](GOOD[arg])
    exc = ValueError if bad == "ragged_list" else TypeError   # numpy's, as in numpy
    named = bad != "ragged_list" or sys.version_info >= (3, 11)
    raises(lambda: m(args["Q"], args["K"], args["V"]), exc, names=[arg] if named else [])
    assert_state_equal(m, snap)


@pytest.mark.parametrize("nargs", [0, 1, 2, 4])
def test_module_wrong_argument_count(nargs):
    m = myatt.MyAtt(*SIZES)
    args = (module_inputs({}) + [A(1)])[:nargs]
    with pytest.raises(TypeError):
        m(*args)
    with pytest.raises(TypeError):
        m.forward(*args)


# --------------------------------------------------------------------------- #
# Linear call
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("x,exc,names,shapes", [
    (A(5), ValueError, ["input"], [(5,)]),
    (A(2, 6), ValueError, ["input"], [(2, 6)]),
    (A(), ValueError, ["input"], [()]),
    (np.ones((2, 7), dtype=np.complex64), TypeError, ["input"], []),
    (np.full((2, 7), "x"), TypeError, ["input"], []),
    (None, TypeError, ["input"], []),
], ids=["1d-mismatch", "2d-mismatch", "0d", "complex", "str", "None"])
def test_linear_type_call_errors(x, exc, names, shapes):
    m = myatt.Linear(7, 3)
    snap = snapshot(m)
    raises(lambda: m(x), exc, names=names, shapes=shapes)
    assert_state_equal(m, snap)


# --------------------------------------------------------------------------- #
# Constructors
# --------------------------------------------------------------------------- #
OVERFLOW = (ValueError, MemoryError, OverflowError)

LINEAR_CTOR_CASES = [
    ("in-negative", (-1, 3), {}, ValueError, ["in_features"]),
    ("out-negative", (3, -1), {}, ValueError, ["out_features"]),
    ("in-float", (3.0, 3), {}, TypeError, ["in_features"]),
    ("out-float", (3, 3.5), {}, TypeError, ["out_features"]),
    ("in-str", ("3", 3), {}, TypeError, ["in_features"]),
    ("in-None", (None, 3), {}, TypeError, ["in_features"]),
    ("dtype-int32", (3, 3), {"dtype": np.int32}, TypeError, ["dtype"]),
    ("dtype-int8", (3, 3), {"dtype": "int8"}, TypeError, ["dtype"]),
    ("dtype-complex64", (3, 3), {"dtype": "complex64"}, TypeError, ["dtype"]),
    ("dtype-longdouble", (3, 3), {"dtype": np.longdouble}, TypeError, ["dtype"]),
    ("dtype-object", (3, 3), {"dtype": object}, TypeError, ["dtype"]),
    ("dtype-nonsense", (3, 3), {"dtype": "nonsense"}, TypeError, []),
    ("dtype-positional", (3, 3, True, np.float64), {}, TypeError, []),
    ("missing-arg", (3,), {}, TypeError, []),
    ("overflow", (2**62, 2**62), {}, OVERFLOW, []),
    ("too-big-for-C", (2**70, 1), {}, OVERFLOW, []),
]


@pytest.mark.parametrize("args,kwargs,exc,names", [c[1:] for c in LINEAR_CTOR_CASES],
                         ids=[c[0] for c in LINEAR_CTOR_CASES])
def test_linear_constructor_errors(args, kwargs, exc, names):
    raises(lambda: myatt.Linear(*args, **kwargs), exc, names=names)


MYATT_NAMES = ["query_size", "key_size", "value_size1", "value_size2", "output_size"]
MYATT_CTOR_CASES = (
    [(f"{n}-negative", tuple(-1 if j == i else 3 for j in range(5)), {}, ValueError, [n])
     for i, n in enumerate(MYATT_NAMES)]
    + [(f"{n}-float", tuple(3.0 if j == i else 3 for j in range(5)), {}, TypeError, [n])
       for i, n in enumerate(MYATT_NAMES)]
    + [
        ("dtype-int64", (3,) * 5, {"dtype": np.int64}, TypeError, ["dtype"]),
        ("dtype-complex128", (3,) * 5, {"dtype": np.complex128}, TypeError, ["dtype"]),
        ("dtype-uint8", (3,) * 5, {"dtype": "uint8"}, TypeError, ["dtype"]),
        ("dtype-positional", (3,) * 5 + (np.float64,), {}, TypeError, []),
        ("four-args", (3,) * 4, {}, TypeError, []),
        ("overflow-sum", (2**62, 2**62, 1, 1, 1), {}, OVERFLOW, []),
        ("overflow-size", (2**40, 1, 2**40, 1, 1), {}, OVERFLOW, []),
    ])


@pytest.mark.parametrize("args,kwargs,exc,names", [c[1:] for c in MYATT_CTOR_CASES],
                         ids=[c[0] for c in MYATT_CTOR_CASES])
def test_myatt_constructor_errors(args, kwargs, exc, names):
    raises(lambda: myatt.MyAtt(*args, **kwargs), exc, names=names)


# --------------------------------------------------------------------------- #
# Assignment to weight / bias
# --------------------------------------------------------------------------- #
ASSIGN_CASES = [
    ("weight-transposed", "weight", lambda: A(7, 3), ValueError, [(7, 3)]),
    ("weight-1d", "weight", lambda: A(21), ValueError, [(21,)]),
    ("weight-3d", "weight", lambda: A(1, 3, 7), ValueError, [(1, 3, 7)]),
    ("weight-scalar", "weight", lambda: 0.0, ValueError, [()]),
    ("weight-broadcastable", "weight", lambda: A(1, 7), ValueError, [(1, 7)]),
    ("bias-length", "bias", lambda: A(4), ValueError, [(4,)]),
    ("bias-2d", "bias", lambda: A(1, 3), ValueError, [(1, 3)]),
    ("weight-complex", "weight", lambda: A(3, 7, dtype=np.complex64), TypeError, []),
    ("weight-str", "weight", lambda: np.full((3, 7), "1"), TypeError, []),
    ("weight-object", "weight", lambda: np.ones((3, 7), dtype=object), TypeError, []),
    ("weight-None", "weight", lambda: None, TypeError, []),
    ("weight-ragged", "weight", lambda: [[1.0] * 7, [1.0] * 6, [1.0] * 7], ValueError, []),
    ("bias-None", "bias", lambda: None, TypeError, []),
    ("bias-datetime", "bias", lambda: np.zeros(3, dtype="datetime64[s]"), TypeError, []),
]


@pytest.mark.parametrize("attr,value,exc,shapes", [c[1:] for c in ASSIGN_CASES],
                         ids=[c[0] for c in ASSIGN_CASES])
def test_assignment_errors(dtype, attr, value, exc, shapes):
    m = myatt.Linear(7, 3, dtype=dtype)
    snap = snapshot(m)
    raises(lambda: setattr(m, attr, value()), exc, names=[attr], shapes=shapes)
    assert_state_equal(m, snap)
    # through a MyAtt's sub-layer: the MyAtt is unchanged too
    big = myatt.MyAtt(3, 4, 3, 6, 2, dtype=dtype)      # attn is Linear(7, 3)
    big_snap = snapshot(big)
    raises(lambda: setattr(big.attn, attr, value()), exc, names=[attr], shapes=shapes)
    assert_state_equal(big, big_snap)


@pytest.mark.parametrize("attr", ["weight", "bias"])
def test_delete_parameter(attr):
    m = myatt.Linear(7, 3)
    snap = snapshot(m)
    with pytest.raises(TypeError):
        delattr(m, attr)
    assert_state_equal(m, snap)


@pytest.mark.parametrize("attr", MYATT_NAMES + ["dtype", "attn", "attn_combine"])
def test_myatt_readonly_attributes(attr):
    m = myatt.MyAtt(*SIZES)
    snap = snapshot(m)
    with pytest.raises(AttributeError):
        setattr(m, attr, 1)
    with pytest.raises((AttributeError, TypeError)):
        delattr(m, attr)
    assert_state_equal(m, snap)
    assert getattr(m, attr) is not None


# --------------------------------------------------------------------------- #
# load_state_dict
# --------------------------------------------------------------------------- #
def myatt_good_sd(m):
    rng = np.random.default_rng(3)
    return {k: rng.standard_normal(v.shape) for k, v in m.state_dict().items()}


LOAD_CASES = [
    # id, transform of a good state dict, kwargs, exception, names, shapes
    ("not-a-mapping-list", lambda sd: list(sd.items()), {}, TypeError, [], []),
    ("not-a-mapping-None", lambda sd: None, {}, TypeError, [], []),
    ("missing", lambda sd: {k: v for k, v in sd.items() if k != "attn.bias"}, {}, KeyError,
     ["attn.bias"], []),
    ("unexpected", lambda sd: dict(sd, **{"attn.extra": np.zeros(2)}), {}, KeyError,
     ["attn.extra"], []),
    ("bad-shape", lambda sd: dict(sd, **{"attn_combine.weight": np.zeros((2, 7))}), {},
     ValueError, ["attn_combine.weight"], [(2, 7)]),
    ("bad-shape-not-strict", lambda sd: dict(sd, **{"attn_combine.weight": np.zeros((2, 7))}),
     {"strict": False}, ValueError, ["attn_combine.weight"], [(2, 7)]),
    ("bad-ndim", lambda sd: dict(sd, **{"attn.bias": np.zeros((1, 5))}), {}, ValueError,
     ["attn.bias"], [(1, 5)]),
    ("scalar", lambda sd: dict(sd, **{"attn.bias": 0.0}), {}, ValueError, ["attn.bias"], [()]),
    ("complex", lambda sd: dict(sd, **{"attn_combine.bias": np.zeros(2, np.complex64)}), {},
     TypeError, ["attn_combine.bias"], []),
    ("complex-tensor", lambda sd: dict(sd, **{"attn_combine.bias": torch.zeros(2, dtype=torch.complex64)}),
     {}, TypeError, ["attn_combine.bias"], []),
    ("str", lambda sd: dict(sd, **{"attn_combine.bias": np.array(["a", "b"])}), {}, TypeError,
     ["attn_combine.bias"], []),
    ("object", lambda sd: dict(sd, **{"attn_combine.bias": np.array([1, 2], dtype=object)}), {},
     TypeError, ["attn_combine.bias"], []),
    ("None-value", lambda sd: dict(sd, **{"attn_combine.bias": None}), {}, TypeError,
     ["attn_combine.bias"], []),
]


@pytest.mark.parametrize("transform,kwargs,exc,names,shapes", [c[1:] for c in LOAD_CASES],
                         ids=[c[0] for c in LOAD_CASES])
def test_load_state_dict_errors(dtype, transform, kwargs, exc, names, shapes):
    m = myatt.MyAtt(*SIZES, dtype=dtype)        # attn: Linear(7, 5), attn_combine: Linear(9, 2)
    snap = snapshot(m)
    bad = transform(myatt_good_sd(m))
    raises(lambda: m.load_state_dict(bad, **kwargs), exc, names=names, shapes=shapes)
    assert_state_equal(m, snap)


@pytest.mark.parametrize("bad,exc,names", [
    ({"weight": np.zeros((3, 6)), "bias": np.zeros(3)}, ValueError, ["weight"]),
    ({"weight": np.zeros((3, 7)), "bias": np.zeros(4)}, ValueError, ["bias"]),
    ({"weight": np.zeros((3, 7))}, KeyError, ["bias"]),
    ({"weight": np.zeros((3, 7)), "bias": np.zeros(3), "x": np.zeros(1)}, KeyError, ["x"]),
    ({"weight": np.zeros((3, 7)), "bias": np.zeros(3, np.complex128)}, TypeError, ["bias"]),
    ([("weight", np.zeros((3, 7))), ("bias", np.zeros(3))], TypeError, []),
], ids=["weight-shape", "bias-shape", "missing", "unexpected", "complex", "not-a-mapping"])
def test_linear_load_state_dict_errors(dtype, bad, exc, names):
    m = myatt.Linear(7, 3, dtype=dtype)
    snap = snapshot(m)
    raises(lambda: m.load_state_dict(bad), exc, names=names)
    assert_state_equal(m, snap)


def test_torch_rejects_the_module_errors_too():
    """Sanity check of the oracle: torch's load_state_dict rejects a bad shape and, in
    strict mode, missing/unexpected keys (with its own exception classes)."""
    t = oracle.MyAtt(*SIZES)
    sd = t.state_dict()
    with pytest.raises(RuntimeError):
        t.load_state_dict({k: v for k, v in sd.items() if k != "attn.bias"})
    with pytest.raises(RuntimeError):
        t.load_state_dict(dict(sd, **{"attn_combine.weight": torch.zeros(2, 7)}))
