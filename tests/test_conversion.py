"""Conversion errors (SPEC, Errors): an exception raised by an input's own
__array__, __len__ or __getitem__ reaches the caller with its own class and
message, with a note naming the argument (PEP 678, Python 3.11+); a ragged
list is numpy's ValueError; an unsupported dtype stays a TypeError.  Checked
at every entry point that converts an array-like (the registry's, entry_points.py), each
argument in turn."""
import sys

import numpy as np
import pytest
import torch

import myatt
from entry_points import SMALL, WITH_ARRAYS, invoke


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

# Every entry point of the registry that converts an array-like, each argument in turn
CASES = [pytest.param(ep, pos, id=f"{ep.name}-{arg.name}")
         for ep in WITH_ARRAYS for pos, arg in enumerate(ep.args)]
OWN = {"__array__": RaisingArray, "__len__": RaisingLen, "__getitem__": RaisingItem}


def _call_with(ep, pos, value):
    args = ep.good(SMALL)
    args[pos] = value
    return invoke(ep, ep.target(SMALL), args)


def _notes(exc):
    return getattr(exc, "__notes__", [])


@pytest.mark.parametrize("ep,pos", CASES)
def test_good_arguments_pass(ep, pos):
    """The registry's good arguments work, so each failure below is the bad one's."""
    invoke(ep, ep.target(SMALL), ep.good(SMALL))


@pytest.mark.parametrize("protocol", list(OWN))
@pytest.mark.parametrize("ep,pos", CASES)
def test_inputs_own_exception_reaches_the_caller(ep, pos, protocol):
    with pytest.raises(OwnError) as info:
        _call_with(ep, pos, OWN[protocol]())
    assert type(info.value) is OwnError
    assert str(info.value) in ("no array today", "no length today", "item unavailable")
    if sys.version_info >= (3, 11):
        notes = _notes(info.value)
        assert len(notes) == 1, notes
        assert ep.args[pos].name in notes[0], notes


@pytest.mark.parametrize("ep,pos", CASES)
def test_ragged_list_is_numpys_value_error(ep, pos):
    with pytest.raises(ValueError) as info:
        _call_with(ep, pos, _ragged(None))
    with pytest.raises(ValueError) as numpys:
        np.asarray(_ragged(None))
    assert str(info.value) == str(numpys.value)   # numpy's message, unchanged
    if sys.version_info >= (3, 11):
        assert any(ep.args[pos].name in n for n in _notes(info.value)), _notes(info.value)


@pytest.mark.parametrize("ep,pos", CASES)
def test_unsupported_dtype_stays_type_error(ep, pos):
    arg = ep.args[pos]
    with pytest.raises(TypeError, match=arg.name.replace(".", r"\.")) as info:
        _call_with(ep, pos, _complex(arg.shape(SMALL)))
    assert _notes(info.value) == []


@pytest.mark.parametrize("ep,pos", CASES)
def test_torch_tensor_requiring_grad_still_converts(ep, pos):
    """A tensor that requires grad refuses __array__; it is read detached, as before."""
    good = ep.good(SMALL)[pos]
    _call_with(ep, pos, torch.tensor(good).requires_grad_(True))


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
    (None, "None"), (object, "object"), (torch.int64, "torch.int64"), (3, "3"),
], ids=repr)
def test_unknown_dtype_names_the_constructor(owner, bad, shown):
    with pytest.raises(TypeError) as info:
        CONSTRUCTORS[owner](dtype=bad)
    allowed = ("float32, float64, float16 or bfloat16" if owner in ("Linear", "MyAtt")
               else "float32 or float64")                                  # half too
    assert str(info.value) == f"{owner}(): dtype must be {allowed}, got {shown}"


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
