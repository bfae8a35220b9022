"""The registry of entry points (entry_points.py) itself: it declares every entry point of
the extension module that takes arrays (so that a new one cannot be left out of the
cross-cutting tests), and each declaration holds: a valid call at the declared shapes
succeeds, in the result dtype, with the declared result shapes, and equals the declared
plain reference. NumPy only: runs without torch."""
import itertools

import numpy as np
import pytest

import myatt
from entry_points import BY_NAME, ENTRY_POINTS, SMALL, flat, invoke, invoke_plain, sizes
from helpers import result_dtype

# The extension's entry points that take no arrays (sizes, seeds, settings, torch modules)
NO_ARRAYS = {"manual_seed", "get_num_threads", "set_num_threads", "kernel_path", "empty_cache",
             "Linear.state_dict", "Linear.from_torch", "MyAtt.state_dict", "MyAtt.from_torch",
             "MultiheadAttention.state_dict", "MultiheadAttention.from_torch",
             "MultiheadAttention.dropout="}
# torch's modes on every type: no arrays either
NO_ARRAYS |= {f"{t}.{m}" for t in ("Linear", "MyAtt", "MultiheadAttention")
              for m in ("train", "eval", "training=")}
EXTENSION = "myatt._myatt"


def _extension_types():
    return [o for o in vars(myatt).values()
            if isinstance(o, type) and o.__module__ == "myatt" and hasattr(o, "state_dict")]


def test_every_extension_entry_point_is_declared():
    """Functions, constructors, methods, __call__ and writable attributes of the C
    extension: each is in the registry or in NO_ARRAYS (and nothing is in both)."""
    found = set()
    for name, obj in vars(myatt).items():
        if (not name.startswith("_") and callable(obj)
                and getattr(obj, "__module__", None) == EXTENSION):
            found.add(name)
    types = _extension_types()
    assert {t.__name__ for t in types} >= {"Linear", "MyAtt"}
    # the extension's private functions (MultiheadAttention's half-precision helpers)
    found |= {n for n in dir(myatt._myatt) if n.startswith("_") and not n.startswith("__")}
    for t in types:
        found.add(t.__name__)
        for name, attr in vars(t).items():
            if name.startswith("_"):
                continue
            if type(attr).__name__ in ("method_descriptor", "classmethod_descriptor"):
                found.add(f"{t.__name__}.{name}")
        if t.__call__ is not object.__call__:
            found.add(f"{t.__name__}.__call__")
        # writable attributes: assigning the current value back succeeds
        entry = BY_NAME[t.__name__]
        inst = invoke(entry, None, [])
        for name, attr in vars(t).items():
            if type(attr).__name__ == "getset_descriptor" and not name.startswith("_"):
                try:
                    setattr(inst, name, getattr(inst, name))
                except AttributeError:
                    continue
                found.add(f"{t.__name__}.{name}=")
    declared = set(BY_NAME)
    # a sub-layer's assignment (MyAtt.attn.weight=), a call through vjp or in a mode
    # (MultiheadAttention.eval.vjp.pullback), a function's call with a keyword
    # (scaled_dot_product_attention.causal) are declared beyond what is found
    functions = {n for n in found if callable(getattr(myatt, n, None))
                 and not isinstance(getattr(myatt, n), type)}
    sub = {n for n in declared if n.count(".") >= 2 or n.split(".")[0] in functions}
    assert not declared & NO_ARRAYS
    missing = found - declared - NO_ARRAYS
    assert not missing, f"entry points missing from entry_points.py: {sorted(missing)}"
    stale = declared - sub - found
    assert not stale, f"entry_points.py declares what the extension lacks: {sorted(stale)}"


@pytest.mark.parametrize("ep", ENTRY_POINTS, ids=lambda e: e.name)
def test_declared_call_is_valid(ep, dtype):
    """At the declared shapes (small ones, and some empty), with each of its keyword
    options, the call succeeds and its result arrays have the declared shapes and the
    result dtype."""
    for s, opt in itertools.product(
            (SMALL, sizes(batch=(0,), in_f=0, b=0, n=0, shape=(0, 3), S=0, q=0, v2=0)),
            ep.options):
        obj = ep.target(s, dtype)
        args = ep.good(s, dtype)
        res = flat(invoke(ep, obj, args, s, opt), ep.result)
        assert tuple(r.shape for r in res) == ep.result_shapes(s)
        want = np.dtype(obj.dtype) if ep.module_dtype else result_dtype(*(a.dtype for a in args))
        for r in res:
            assert type(r) is np.ndarray and r.dtype == want and r.flags.c_contiguous
        if ep.result == "object":
            assert isinstance(res, tuple) and not res
            assert type(invoke(ep, obj, args, s)).__name__ == ep.name
        if ep.make is not None:
            assert type(obj).__name__ == ep.name.split(".")[0]


@pytest.mark.parametrize("ep", [e for e in ENTRY_POINTS if e.kind in ("function", "method")],
                         ids=lambda e: e.name)
def test_plain_reference_agrees(ep):
    """Every computing entry declares its plain float64 reference (tests/reference.py),
    and myatt's float64 results equal it within assert_close's float64 defaults (rtol
    1e-7, atol 1e-7), at the small sizes and with batches and empty dimensions."""
    assert ep.plain is not None, f"{ep.name} declares no plain reference"
    for s, opt in itertools.product(
            (SMALL, sizes(batch=(2, 3), b=3, shape=(2, 5, 3), dim=1, Bq=2, Bk=3, S=7),
             sizes(batch=(0,), in_f=0, b=0, n=0, shape=(0, 3), S=0, q=0, v2=0)), ep.options):
        obj = ep.target(s, np.float64)
        args = ep.good(s, np.float64, seed=3)
        ours = flat(invoke(ep, obj, args, s, opt), ep.result)
        plain = flat(invoke_plain(ep, obj, args, s, opt), ep.result)
        assert len(ours) == len(plain)
        for o, p in zip(ours, plain):
            assert p.dtype == np.float64 and o.shape == p.shape
            np.testing.assert_allclose(o, p, rtol=1e-7, atol=1e-7)
