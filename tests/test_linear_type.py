"""myatt.Linear: construction, live weight/bias views, assignment, calls vs torch nn.Linear,
state_dict / load_state_dict."""
import gc
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from oracle import assert_matches, to_torch, torch_dtype, torch_linear


def snapshot(m):
    return {k: v.copy() for k, v in m.state_dict().items()}


def assert_state_equal(m, snap):
    sd = m.state_dict()
    assert sorted(sd) == sorted(snap)
    for k in snap:
        np.testing.assert_array_equal(sd[k], snap[k], strict=True)


# --------------------------------------------------------------------------- #
# Construction and attributes
# --------------------------------------------------------------------------- #
def test_is_an_extension_type():
    """Linear is defined in C: its methods are method descriptors, calling is a slot."""
    assert isinstance(myatt.Linear, type)
    assert isinstance(myatt.Linear.state_dict, types.MethodDescriptorType)
    assert isinstance(myatt.Linear.load_state_dict, types.MethodDescriptorType)
    # __call__: the tp_call slot, plus a C method of the same name that carries its text
    # signature (METH_COEXIST) for inspect.signature and Jupyter; either way C, not Python.
    assert isinstance(myatt.Linear.__call__, (types.WrapperDescriptorType,
                                              types.MethodDescriptorType))


@pytest.mark.parametrize("in_f,out_f", [(3, 5), (1, 1), (17, 64), (257, 3), (64, 65)])
def test_construction_defaults(in_f, out_f):
    m = myatt.Linear(in_f, out_f)
    assert m.in_features == in_f
    assert m.out_features == out_f
    assert m.dtype == np.dtype(np.float32)
    for arr, shape in ((m.weight, (out_f, in_f)), (m.bias, (out_f,))):
        assert type(arr) is np.ndarray
        assert arr.shape == shape
        assert arr.dtype == np.float32
        assert arr.flags.c_contiguous
        assert arr.flags.writeable
        # torch's init: kaiming_uniform_(a=sqrt(5)) and the bias both lie in
        # [-1/sqrt(in), 1/sqrt(in)]
        bound = 1.0 / np.sqrt(in_f)
        assert np.isfinite(arr).all()
        assert (np.abs(arr) <= bound * (1 + 1e-6)).all()


def test_weights_are_random():
    """Two modules built one after the other hold different weights (random init)."""
    a, b = myatt.Linear(16, 8), myatt.Linear(16, 8)
    assert not np.array_equal(a.weight, b.weight)
    assert np.unique(a.weight).size > 1


@pytest.mark.parametrize("spelling,expected", [
    (np.float32, np.float32), ("float32", np.float32), ("f4", np.float32),
    (np.dtype(np.float32), np.float32), (np.float64, np.float64), ("float64", np.float64),
    ("f8", np.float64), (np.dtype("float64"), np.float64), (float, np.float64),
], ids=repr)
def test_dtype_spellings(spelling, expected):
    m = myatt.Linear(4, 3, dtype=spelling)
    assert m.dtype == np.dtype(expected)
    assert np.dtype(m.dtype) == np.dtype(expected)
    assert m.weight.dtype == expected
    assert m.bias.dtype == expected
    assert m.state_dict()["weight"].dtype == expected


def test_numpy_integer_sizes():
    m = myatt.Linear(np.int64(4), np.int32(3))
    assert (m.in_features, m.out_features) == (4, 3)
    assert m.weight.shape == (3, 4)


def test_bias_false(rng, dtype):
    m = myatt.Linear(6, 4, bias=False, dtype=dtype)
    assert m.bias is None
    assert sorted(m.state_dict()) == ["weight"]
    x = rng.standard_normal((5, 6)).astype(dtype)
    out = m(x)
    expected = F.linear(to_torch(x, dtype), to_torch(m.weight, dtype))
    assert_matches(out, expected)
    assert_matches(out, torch_linear(m)(to_torch(x, dtype)))


@pytest.mark.parametrize("in_f,out_f", [(0, 3), (3, 0), (0, 0)])
def test_zero_sizes(rng, dtype, in_f, out_f):
    m = myatt.Linear(in_f, out_f, dtype=dtype)
    assert m.weight.shape == (out_f, in_f)
    assert m.bias.shape == (out_f,)
    x = rng.standard_normal((2, in_f)).astype(dtype)
    with torch.no_grad():
        expected = torch_linear(m)(to_torch(x, dtype))
    assert_matches(m(x), expected)


# --------------------------------------------------------------------------- #
# weight and bias are live views of the object's memory
# --------------------------------------------------------------------------- #
def test_views_share_the_objects_memory(dtype):
    m = myatt.Linear(5, 3, dtype=dtype)
    assert np.shares_memory(m.weight, m.weight)
    assert np.shares_memory(m.bias, m.bias)
    w = m.weight
    w[1, 2] = 42.0
    assert m.weight[1, 2] == 42.0
    assert m.state_dict()["weight"][1, 2] == 42.0


def test_inplace_update_changes_the_next_call(rng, dtype):
    m = myatt.Linear(7, 4, dtype=dtype)
    x = rng.standard_normal((3, 7)).astype(dtype)
    before = m(x)
    w0, b0 = m.weight.copy(), m.bias.copy()
    g = rng.standard_normal((4, 7)).astype(dtype)
    lr = dtype.type(0.5)

    m.weight -= lr * g
    m.bias += dtype.type(1.0)

    np.testing.assert_array_equal(m.weight, w0 - lr * g, strict=True)
    np.testing.assert_array_equal(m.bias, b0 + dtype.type(1.0), strict=True)
    after = m(x)
    expected = F.linear(to_torch(x, dtype), to_torch(w0 - lr * g, dtype),
                        to_torch(b0 + dtype.type(1.0), dtype))
    assert_matches(after, expected)
    assert not np.allclose(after, before)


def test_write_through_a_kept_view(rng, dtype):
    m = myatt.Linear(4, 2, dtype=dtype)
    w, b = m.weight, m.bias
    new_w = rng.standard_normal((2, 4)).astype(dtype)
    w[...] = new_w
    b[...] = 0
    x = rng.standard_normal((3, 4)).astype(dtype)
    assert_matches(m(x), F.linear(to_torch(x, dtype), to_torch(new_w, dtype),
                                  torch.zeros(2, dtype=torch_dtype(dtype))))


def test_view_outlives_the_module(dtype):
    m = myatt.Linear(6, 5, dtype=dtype)
    w, b = m.weight, m.bias
    w_copy, b_copy = w.copy(), b.copy()
    del m
    gc.collect()
    np.testing.assert_array_equal(w, w_copy)
    np.testing.assert_array_equal(b, b_copy)
    w[...] = 1.0                       # still writable memory, not freed
    assert (w == 1.0).all()


# --------------------------------------------------------------------------- #
# Assignment copies in after a shape check
# --------------------------------------------------------------------------- #
def test_assignment_copies(rng, dtype):
    m = myatt.Linear(4, 3, dtype=dtype)
    a = rng.standard_normal((3, 4)).astype(dtype)
    c = rng.standard_normal(3).astype(dtype)
    m.weight = a
    m.bias = c
    np.testing.assert_array_equal(m.weight, a, strict=True)
    np.testing.assert_array_equal(m.bias, c, strict=True)
    assert not np.shares_memory(m.weight, a)
    assert not np.shares_memory(m.bias, c)
    a_copy, c_copy = a.copy(), c.copy()
    a[...] = 0
    c[...] = 0
    np.testing.assert_array_equal(m.weight, a_copy)
    np.testing.assert_array_equal(m.bias, c_copy)


def test_assignment_keeps_earlier_views_live(rng, dtype):
    """Assignment copies into the same memory: a view taken before sees the new values."""
    m = myatt.Linear(4, 3, dtype=dtype)
    old_view = m.weight
    a = rng.standard_normal((3, 4)).astype(dtype)
    m.weight = a
    np.testing.assert_array_equal(old_view, a)


@pytest.mark.parametrize("src_dtype", [np.float64, np.float32, np.int64, np.bool_, np.float16],
                         ids=lambda d: np.dtype(d).name)
def test_assignment_converts_to_module_dtype(rng, dtype, src_dtype):
    m = myatt.Linear(4, 3, dtype=dtype)
    a = (rng.standard_normal((3, 4)) * 3).astype(src_dtype)
    m.weight = a
    assert m.weight.dtype == dtype
    np.testing.assert_array_equal(m.weight, a.astype(dtype), strict=True)


def test_assignment_from_list_and_tensor(rng, dtype):
    m = myatt.Linear(4, 3, dtype=dtype)
    a = rng.standard_normal((3, 4)).astype(dtype)
    m.weight = a.tolist()
    np.testing.assert_array_equal(m.weight, a, strict=True)
    t = torch.from_numpy(a.copy() * 2).requires_grad_(True)
    m.weight = t
    np.testing.assert_array_equal(m.weight, a * 2, strict=True)
    m.bias = [1, 2, 3]
    np.testing.assert_array_equal(m.bias, np.array([1, 2, 3], dtype=dtype), strict=True)


def test_self_assignment_is_harmless(dtype):
    m = myatt.Linear(4, 3, dtype=dtype)
    w0 = m.weight.copy()
    m.weight = m.weight
    np.testing.assert_array_equal(m.weight, w0, strict=True)


@pytest.mark.parametrize("value", [np.zeros((4, 3)), np.zeros((3, 4, 1)), np.zeros((1, 3, 4)),
                                   np.zeros(12), np.float32(0.0), np.zeros((3, 1)),
                                   np.zeros((3, 5))], ids=lambda v: str(np.shape(v)))
def test_assignment_shape_checked_exactly(dtype, value):
    """No broadcasting, no reshaping: the shape must be exactly [out, in]."""
    m = myatt.Linear(4, 3, dtype=dtype)
    snap = snapshot(m)
    with pytest.raises(ValueError):
        m.weight = value
    assert_state_equal(m, snap)


def test_readonly_attributes(dtype):
    m = myatt.Linear(4, 3, dtype=dtype)
    for name, value in (("in_features", 5), ("out_features", 5), ("dtype", np.float64)):
        with pytest.raises(AttributeError):
            setattr(m, name, value)
    assert (m.in_features, m.out_features, m.dtype) == (4, 3, dtype)


def test_bias_cannot_be_added_or_removed(dtype):
    m = myatt.Linear(4, 3, dtype=dtype)
    snap = snapshot(m)
    with pytest.raises(TypeError):
        m.bias = None
    with pytest.raises(TypeError):
        del m.bias
    with pytest.raises(TypeError):
        del m.weight
    assert_state_equal(m, snap)
    nb = myatt.Linear(4, 3, bias=False, dtype=dtype)
    with pytest.raises(TypeError):
        nb.bias = np.zeros(3, dtype=dtype)
    assert nb.bias is None


# --------------------------------------------------------------------------- #
# Calling applies linear: vs torch nn.Linear with the same weights
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("in_f,out_f", [(3, 5), (17, 64), (65, 63), (257, 1), (1, 257), (128, 300)])
@pytest.mark.parametrize("batch", [(), (1,), (7,), (2, 3), (0,), (257,)], ids=str)
def test_call_matches_torch(rng, dtype, in_f, out_f, batch):
    m = myatt.Linear(in_f, out_f, dtype=dtype)
    x = rng.standard_normal(batch + (in_f,)).astype(dtype)
    t = torch_linear(m)
    with torch.no_grad():
        expected = t(to_torch(x, dtype))
    out = m(x)
    assert out.dtype == dtype
    assert_matches(out, expected)


@pytest.mark.parametrize("in_dtype", [np.float64, np.float32, np.int32, np.bool_, np.float16],
                         ids=lambda d: np.dtype(d).name)
def test_call_converts_input_to_module_dtype(rng, dtype, in_dtype):
    m = myatt.Linear(6, 4, dtype=dtype)
    x = (rng.standard_normal((5, 6)) * 3).astype(in_dtype)
    out = m(x)
    assert out.dtype == dtype
    with torch.no_grad():
        expected = torch_linear(m)(to_torch(x, dtype))
    assert_matches(out, expected)


# --------------------------------------------------------------------------- #
# state_dict / load_state_dict
# --------------------------------------------------------------------------- #
def test_state_dict_is_copies(dtype):
    m = myatt.Linear(5, 3, dtype=dtype)
    sd = m.state_dict()
    assert sorted(sd) == ["bias", "weight"]
    np.testing.assert_array_equal(sd["weight"], m.weight, strict=True)
    np.testing.assert_array_equal(sd["bias"], m.bias, strict=True)
    for k, v in sd.items():
        assert type(v) is np.ndarray
        assert v.dtype == dtype
        assert v.flags.c_contiguous
        assert not np.shares_memory(v, m.weight) and not np.shares_memory(v, m.bias)
    snap = {k: v.copy() for k, v in sd.items()}
    sd["weight"][...] = 7.0
    sd["bias"] += 1.0
    assert_state_equal(m, snap)


def test_state_dict_keys_match_torch(dtype):
    for bias in (True, False):
        m = myatt.Linear(5, 3, bias=bias, dtype=dtype)
        t = torch.nn.Linear(5, 3, bias=bias)
        assert sorted(m.state_dict()) == sorted(t.state_dict())
        for k, v in t.state_dict().items():
            assert m.state_dict()[k].shape == tuple(v.shape)


def test_state_dict_loads_into_torch(rng, dtype):
    m = myatt.Linear(9, 4, dtype=dtype)
    t = torch.nn.Linear(9, 4, dtype=torch_dtype(dtype))
    t.load_state_dict({k: torch.from_numpy(v) for k, v in m.state_dict().items()})
    x = rng.standard_normal((3, 9)).astype(dtype)
    with torch.no_grad():
        assert_matches(m(x), t(to_torch(x, dtype)))


@pytest.mark.parametrize("source", ["torch", "torch_params", "numpy", "lists"])
def test_load_state_dict(rng, dtype, source):
    t = torch.nn.Linear(9, 4, dtype=torch_dtype(dtype))
    if source == "torch":
        sd = t.state_dict()                                  # as it comes
    elif source == "torch_params":
        sd = dict(t.named_parameters())                      # requires_grad=True
        assert all(v.requires_grad for v in sd.values())
    elif source == "numpy":
        sd = {k: v.detach().numpy().copy() for k, v in t.state_dict().items()}
    else:
        sd = {k: v.tolist() for k, v in t.state_dict().items()}
    m = myatt.Linear(9, 4, dtype=dtype)
    result = m.load_state_dict(sd)
    missing, unexpected = result
    assert isinstance(result, tuple) and len(result) == 2
    assert type(missing) is list and type(unexpected) is list
    assert missing == [] and unexpected == []
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k], v.numpy(), strict=True)
    x = rng.standard_normal((3, 9)).astype(dtype)
    with torch.no_grad():
        assert_matches(m(x), t(to_torch(x, dtype)))


def test_load_state_dict_converts_dtype(dtype):
    other = torch.float64 if dtype == np.float32 else torch.float32
    t = torch.nn.Linear(5, 2, dtype=other)
    m = myatt.Linear(5, 2, dtype=dtype)
    m.load_state_dict(t.state_dict())
    assert m.weight.dtype == dtype
    np.testing.assert_array_equal(m.weight, t.weight.detach().numpy().astype(dtype), strict=True)
    np.testing.assert_array_equal(m.bias, t.bias.detach().numpy().astype(dtype), strict=True)


def test_load_state_dict_strict_false(rng, dtype):
    t = torch.nn.Linear(5, 2, dtype=torch_dtype(dtype))
    m = myatt.Linear(5, 2, dtype=dtype)
    bias0 = m.bias.copy()
    w = rng.standard_normal((2, 5)).astype(dtype)
    sd = {"weight": w, "extra": np.zeros(3)}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    t_result = t.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    assert (sorted(missing), sorted(unexpected)) == (sorted(t_result.missing_keys),
                                                     sorted(t_result.unexpected_keys))
    assert (sorted(missing), sorted(unexpected)) == (["bias"], ["extra"])
    np.testing.assert_array_equal(m.weight, w, strict=True)
    np.testing.assert_array_equal(m.bias, bias0, strict=True)


def test_load_state_dict_key_with_nul_is_another_key(dtype):
    """"weight\0x" is not "weight" (a C string comparison stopped at the NUL and loaded it)."""
    t = torch.nn.Linear(2, 2, dtype=torch_dtype(dtype))
    m = myatt.Linear(2, 2, dtype=dtype)
    before = m.state_dict()
    sd = {"weight\0x": np.zeros((2, 2)), "weight": np.ones((2, 2)), "bias": np.zeros(2)}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    t_result = t.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    assert (missing, unexpected) == (t_result.missing_keys, t_result.unexpected_keys)
    assert (missing, unexpected) == ([], ["weight\0x"])
    assert (m.weight == 1).all() and not m.bias.any()
    m.load_state_dict(before)
    with pytest.raises(KeyError, match="weight"):
        m.load_state_dict({"weight\0": np.zeros((2, 2)), "bias": np.zeros(2)})
    same = m.state_dict()
    assert all((same[k] == before[k]).all() for k in before)


def test_load_state_dict_bias_false(rng, dtype):
    t = torch.nn.Linear(5, 2, bias=False, dtype=torch_dtype(dtype))
    m = myatt.Linear(5, 2, bias=False, dtype=dtype)
    assert tuple(map(list, m.load_state_dict(t.state_dict()))) == ([], [])
    np.testing.assert_array_equal(m.weight, t.weight.detach().numpy(), strict=True)
    snap = snapshot(m)
    with pytest.raises(KeyError, match="bias"):
        m.load_state_dict({"weight": np.zeros((2, 5)), "bias": np.zeros(2)})
    assert_state_equal(m, snap)
