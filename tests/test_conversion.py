"""Conversion errors (SPEC, Errors): an exception raised by an input's own
__array__, __len__ or __getitem__ reaches the caller with its own class and
message, with a note naming the argument (PEP 678, Python 3.11+); a ragged
list is numpy's ValueError; an unsupported dtype stays a TypeError.  Checked
at every entry point that converts an array-like."""
import sys

import numpy as np
import pytest
import torch

import myatt


class OwnError(Exception):
    """An exception only the input itself raises."""


class RaisingArray:
    """numpy.asarray takes it through __array__, which raises."""

    def __array__(self, dtype=None, copy=None):
        raise OwnError("no array today")


class RaisingLen:
    """A sequence whose __len__ raises."""

    def __len__(self):
        raise OwnError("no length today")

    def __getitem__(self, i):
        return 1.0


class RaisingItem:
    """A sequence whose items fail half way."""

    def __len__(self):
        return 3

    def __getitem__(self, i):
        if i >= 2:
            raise OwnError("item unavailable")
        return [1.0] * 4


def _ragged(shape):
    return [[1.0], [1.0, 2.0]]


def _complex(shape):
    return np.ones(shape, np.complex64)


def A(*shape):
    return np.ones(shape, np.float32)


SIZES = (3, 4, 5, 6, 2)   # query, key, value1, value2, output
S = 2


def _myatt_args():
    q, k, v1, v2, o = SIZES
    return {"Q": A(1, S, q), "K": A(1, S, k), "V": A(1, v1, v2),
            "grad_output": A(1, S, o), "grad_attn_weights": A(S, v1)}


def _myatt_call(how):
    def call(args):
        m = myatt.MyAtt(*SIZES)
        if how == "backward":
            return m.backward(args["Q"], args["K"], args["V"], args["grad_output"],
                              args["grad_attn_weights"])
        f = m if how == "call" else m.forward
        return f(args["Q"], args["K"], args["V"])
    return call


def _load(owner):
    def call(args):
        m = myatt.Linear(4, 3) if owner == "Linear" else myatt.MyAtt(*SIZES)
        sd = {k: np.asarray(v) for k, v in m.state_dict().items()}
        sd.update(args)
        return m.load_state_dict(sd)
    return call


def _assign(args):
    m = myatt.Linear(4, 3)
    m.weight = args["weight"]


def _linear_layer(how):
    def call(args):
        m = myatt.Linear(4, 3)
        if how == "backward":
            return m.backward(args["input"], args["grad_output"])
        return (m if how == "call" else m.forward)(args["input"])
    return call


# entry point -> (call(args dict), good args, the names the message uses per argument)
ENTRY_POINTS = {
    "linear": (lambda a: myatt.linear(a["input"], a["weight"], a["bias"]),
               {"input": A(2, 4), "weight": A(3, 4), "bias": A(3)}, "linear()"),
    "softmax": (lambda a: myatt.softmax(a["input"], -1), {"input": A(2, 4)}, "softmax()"),
    "bmm": (lambda a: myatt.bmm(a["input"], a["mat2"]),
            {"input": A(2, 3, 4), "mat2": A(2, 4, 5)}, "bmm()"),
    "linear_backward": (lambda a: myatt.linear_backward(a["grad_output"], a["input"],
                                                        a["weight"], a["bias"]),
                        {"grad_output": A(2, 3), "input": A(2, 4), "weight": A(3, 4),
                         "bias": A(3)}, "linear_backward()"),
    "softmax_backward": (lambda a: myatt.softmax_backward(a["grad_output"], a["output"], -1),
                         {"grad_output": A(2, 4), "output": A(2, 4)}, "softmax_backward()"),
    "bmm_backward": (lambda a: myatt.bmm_backward(a["grad_output"], a["input"], a["mat2"]),
                     {"grad_output": A(2, 3, 5), "input": A(2, 3, 4), "mat2": A(2, 4, 5)},
                     "bmm_backward()"),
    "Linear.__call__": (_linear_layer("call"), {"input": A(2, 4)}, "Linear"),
    "Linear.forward": (_linear_layer("forward"), {"input": A(2, 4)}, "Linear"),
    "Linear.backward": (_linear_layer("backward"), {"input": A(2, 4), "grad_output": A(2, 3)},
                        "Linear.backward()"),
    "Linear.weight=": (_assign, {"weight": A(3, 4)}, "Linear.weight"),
    "Linear.load_state_dict": (_load("Linear"), {"weight": A(3, 4), "bias": A(3)},
                               "Linear.load_state_dict()"),
    "MyAtt.__call__": (_myatt_call("call"),
                       {k: v for k, v in _myatt_args().items() if k in "QKV"}, "MyAtt"),
    "MyAtt.forward": (_myatt_call("forward"),
                      {k: v for k, v in _myatt_args().items() if k in "QKV"}, "MyAtt"),
    "MyAtt.backward": (_myatt_call("backward"), _myatt_args(), "MyAtt.backward()"),
    "MyAtt.load_state_dict": (_load("MyAtt"),
                              {"attn.weight": A(5, 7), "attn.bias": A(5),
                               "attn_combine.weight": A(2, 9), "attn_combine.bias": A(2)},
                              "MyAtt.load_state_dict()"),
}

CASES = [pytest.param(ep, arg, id=f"{ep}-{arg}")
         for ep, (_, good, _) in ENTRY_POINTS.items() for arg in good]

OWN = {"__array__": RaisingArray, "__len__": RaisingLen, "__getitem__": RaisingItem}


def _call_with(ep, arg, value):
    call, good, _ = ENTRY_POINTS[ep]
    args = dict(good)
    args[arg] = value
    return call(args)


def _notes(exc):
    return getattr(exc, "__notes__", [])


@pytest.mark.parametrize("ep,arg", CASES)
def test_good_arguments_pass(ep, arg):
    """The table's good arguments work, so each failure below is the bad one's."""
    call, good, _ = ENTRY_POINTS[ep]
    call(dict(good))


@pytest.mark.parametrize("protocol", list(OWN))
@pytest.mark.parametrize("ep,arg", CASES)
def test_inputs_own_exception_reaches_the_caller(ep, arg, protocol):
    with pytest.raises(OwnError) as info:
        _call_with(ep, arg, OWN[protocol]())
    assert type(info.value) is OwnError
    assert str(info.value) in ("no array today", "no length today", "item unavailable")
    if sys.version_info >= (3, 11):
        owner = ENTRY_POINTS[ep][2]
        notes = _notes(info.value)
        assert len(notes) == 1, notes
        assert owner in notes[0] and arg in notes[0], notes


@pytest.mark.parametrize("ep,arg", CASES)
def test_ragged_list_is_numpys_value_error(ep, arg):
    with pytest.raises(ValueError) as info:
        _call_with(ep, arg, _ragged(None))
    with pytest.raises(ValueError) as numpys:
        np.asarray(_ragged(None))
    assert str(info.value) == str(numpys.value)   # numpy's message, unchanged
    if sys.version_info >= (3, 11):
        assert any(arg in n for n in _notes(info.value)), _notes(info.value)


@pytest.mark.parametrize("ep,arg", CASES)
def test_unsupported_dtype_stays_type_error(ep, arg):
    shape = np.shape(ENTRY_POINTS[ep][1][arg])
    with pytest.raises(TypeError, match=arg.replace(".", r"\.")) as info:
        _call_with(ep, arg, _complex(shape))
    assert _notes(info.value) == []


@pytest.mark.parametrize("ep,arg", CASES)
def test_torch_tensor_requiring_grad_still_converts(ep, arg):
    """A tensor that requires grad refuses __array__; it is read detached, as before."""
    good = ENTRY_POINTS[ep][1][arg]
    _call_with(ep, arg, torch.tensor(good).requires_grad_(True))


def test_a_failed_conversion_leaves_the_module_unchanged():
    m = myatt.Linear(4, 3)
    before = {k: v.copy() for k, v in m.state_dict().items()}
    with pytest.raises(OwnError):
        m.load_state_dict({"weight": A(3, 4), "bias": RaisingArray()})
    with pytest.raises(OwnError):
        m.weight = RaisingItem()
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])


# --------------------------------------------------------------------------- #
# dtype= of the constructors
# --------------------------------------------------------------------------- #
CONSTRUCTORS = {"Linear": lambda **kw: myatt.Linear(4, 3, **kw),
                "MyAtt": lambda **kw: myatt.MyAtt(*SIZES, **kw)}


@pytest.mark.parametrize("owner", list(CONSTRUCTORS))
@pytest.mark.parametrize("tdtype,expected", [(torch.float32, np.float32),
                                             (torch.float64, np.float64)], ids=str)
def test_torch_dtypes_accepted(owner, tdtype, expected):
    m = CONSTRUCTORS[owner](dtype=tdtype)
    assert m.dtype == np.dtype(expected)
    for v in m.state_dict().values():
        assert v.dtype == expected


@pytest.mark.parametrize("owner", list(CONSTRUCTORS))
def test_torch_dtype_gives_torchs_weights(owner):
    """dtype=torch.float64 is dtype=numpy.float64: the same draws, the same weights."""
    myatt.manual_seed(3)
    a = CONSTRUCTORS[owner](dtype=torch.float64)
    myatt.manual_seed(3)
    b = CONSTRUCTORS[owner](dtype=np.float64)
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, b.state_dict()[k])


@pytest.mark.parametrize("owner", list(CONSTRUCTORS))
@pytest.mark.parametrize("bad,shown", [
    ("float23", "'float23'"), (np.int32, "int32"), ("complex64", "complex64"),
    (None, "None"), (object, "object"), (torch.float16, "torch.float16"),
    (torch.bfloat16, "torch.bfloat16"), (torch.int64, "torch.int64"), (3, "3"),
], ids=repr)
def test_unknown_dtype_names_the_constructor(owner, bad, shown):
    with pytest.raises(TypeError) as info:
        CONSTRUCTORS[owner](dtype=bad)
    assert str(info.value) == f"{owner}(): dtype must be float32 or float64, got {shown}"


def test_dtype_check_does_not_import_torch():
    """A torch dtype is recognised by its type's module and str, without importing
    torch: an object that only looks like one is refused, and torch stays unimported
    in a fresh interpreter that never asked for it."""
    import subprocess
    code = ("import sys, myatt\n"
            "class dtype:\n"
            "    __module__ = 'nottorch'\n"
            "    def __str__(self): return 'torch.float32'\n"
            "try:\n"
            "    myatt.Linear(2, 2, dtype=dtype())\n"
            "except TypeError as e:\n"
            "    print('refused')\n"
            "m = myatt.Linear(2, 2, dtype='float64')\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["refused", "False"]
