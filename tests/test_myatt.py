"""myatt.MyAtt against the seed's torch MyAtt (oracle) holding the same weights."""
import types

import numpy as np
import pytest
import torch

import myatt
import oracle
from helpers import assert_same_bits, torch_runs_our_softmax
from mkl_order import torch_sums_in_our_order
from oracle import assert_matches, run, to_torch, torch_dtype, torch_myatt

KEYS = ["attn.weight", "attn.bias", "attn_combine.weight", "attn_combine.bias"]
SEED_SIZES = (32, 32, 32, 64, 32)   # query_size, key_size, value_size1, value_size2, output_size


def make(sizes, dtype):
    return myatt.MyAtt(*sizes, dtype=dtype)


def inputs(rng, sizes, S, dtype, Bq=1, Bk=1):
    q, k, v1, v2, _ = sizes
    Q = rng.standard_normal((Bq, S, q)).astype(dtype)
    K = rng.standard_normal((Bk, S, k)).astype(dtype)
    V = rng.standard_normal((1, v1, v2)).astype(dtype)
    return Q, K, V


def check_against_oracle(m, Q, K, V, *, call=None):
    """m(Q, K, V) (or `call`) equals the oracle in shapes, dtypes and values."""
    dtype = np.dtype(m.dtype)
    out, attn = (call or m)(Q, K, V)
    t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
    S = np.shape(Q)[1]
    assert out.shape == (1, S, m.output_size) == tuple(t_out.shape)
    assert attn.shape == (S, m.value_size1) == tuple(t_attn.shape)
    assert out.dtype == dtype and attn.dtype == dtype
    assert_matches(out, t_out)
    assert_matches(attn, t_attn)
    return out, attn


def snapshot(m):
    return {k: v.copy() for k, v in m.state_dict().items()}


def assert_state_equal(m, snap):
    sd = m.state_dict()
    assert sorted(sd) == sorted(snap)
    for k in snap:
        np.testing.assert_array_equal(sd[k], snap[k], strict=True)


# --------------------------------------------------------------------------- #
# Forward vs the oracle
# --------------------------------------------------------------------------- #
def test_seed_demo_shapes(rng, dtype):
    """The seed's own demo: Q, K [1, 1, 32], V [1, 32, 64]."""
    m = make(SEED_SIZES, dtype)
    Q = rng.standard_normal((1, 1, 32)).astype(dtype)
    K = rng.standard_normal((1, 1, 32)).astype(dtype)
    V = rng.standard_normal((1, 32, 64)).astype(dtype)
    out, attn = check_against_oracle(m, Q, K, V)
    assert out.shape == (1, 1, 32)
    assert attn.shape == (1, 32)


@pytest.mark.kernel_path
@pytest.mark.parametrize("sizes,S", [((48, 40, 48, 72, 36), 64), ((256, 256, 252, 264, 240), 128),
                                     ((64, 32, 96, 48, 24), 200)], ids=str)
def test_torchs_bits(rng, dtype, sizes, S):
    """Where torch's GEMM (MKL) keeps to its main kernel's summation order (rows in
    whole groups of 4, columns in whole groups of 12: docs/torch-summation-order.md)
    and torch runs the softmax kernel our path reproduces, both outputs are torch's,
    bit for bit: the linear layers, the softmax and the bmm all compute what torch
    computes."""
    m = make(sizes, dtype)
    Q, K, V = inputs(rng, sizes, S, dtype)
    out, attn = check_against_oracle(m, Q, K, V)
    t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
    if torch_runs_our_softmax() and torch_sums_in_our_order(dtype):
        assert_same_bits(attn, t_attn)
        assert_same_bits(out, t_out)
    # (otherwise check_against_oracle held them to assert_close)


def test_forward_method_and_call_agree(rng, dtype):
    m = make(SEED_SIZES, dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 5, dtype)
    out1, attn1 = check_against_oracle(m, Q, K, V)
    out2, attn2 = check_against_oracle(m, Q, K, V, call=m.forward)
    np.testing.assert_array_equal(out1, out2, strict=True)
    np.testing.assert_array_equal(attn1, attn2, strict=True)
    result = m(Q, K, V)
    assert isinstance(result, tuple) and len(result) == 2


def test_is_an_extension_type():
    assert isinstance(myatt.MyAtt.forward, types.MethodDescriptorType)
    assert isinstance(myatt.MyAtt.state_dict, types.MethodDescriptorType)
    # __call__: the tp_call slot, plus a C method of the same name that carries its text
    # signature (METH_COEXIST) for inspect.signature and Jupyter; either way C, not Python.
    assert isinstance(myatt.MyAtt.__call__, (types.WrapperDescriptorType,
                                              types.MethodDescriptorType))


@pytest.mark.parametrize("S", [0, 1, 2, 3, 17, 64, 65, 257])
def test_sequence_lengths(rng, dtype, S):
    m = make(SEED_SIZES, dtype)
    check_against_oracle(m, *inputs(rng, SEED_SIZES, S, dtype))


@pytest.mark.parametrize("Bq,Bk", [(2, 1), (1, 3), (3, 2), (2, 5), (4, 4)])
def test_batches_beyond_item_0_are_ignored(rng, dtype, Bq, Bk):
    m = make(SEED_SIZES, dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 6, dtype, Bq=Bq, Bk=Bk)
    out, attn = check_against_oracle(m, Q, K, V)
    # changing the other batch items changes nothing
    Q2, K2 = Q.copy(), K.copy()
    Q2[1:] = rng.standard_normal(Q2[1:].shape)
    K2[1:] = np.nan
    out2, attn2 = m(Q2, K2, V)
    np.testing.assert_array_equal(out2, out, strict=True)
    np.testing.assert_array_equal(attn2, attn, strict=True)


SIZE_CASES = [
    (1, 1, 1, 1, 1),
    (3, 5, 7, 11, 13),
    (17, 63, 64, 65, 257),
    (257, 1, 257, 3, 65),
    (64, 64, 64, 64, 64),
    (100, 150, 257, 200, 130),
    (0, 3, 2, 4, 3),          # no query features: cat((Q[0], K[0])) is K[0]
    (3, 0, 2, 4, 3),          # no key features
    (3, 4, 5, 0, 2),          # value_size2 == 0
    (3, 4, 5, 6, 0),          # output_size == 0
    (3, 4, 0, 6, 2),          # value_size1 == 0: empty softmax rows
]


@pytest.mark.parametrize("sizes", SIZE_CASES, ids=str)
@pytest.mark.parametrize("S", [0, 1, 7, 300])
def test_sizes(rng, dtype, sizes, S):
    m = make(sizes, dtype)
    check_against_oracle(m, *inputs(rng, sizes, S, dtype))


def test_hundreds_with_batches(rng, dtype):
    sizes = (129, 96, 300, 257, 200)
    m = make(sizes, dtype)
    check_against_oracle(m, *inputs(rng, sizes, 257, dtype, Bq=2, Bk=3))


def test_query_feature_size_quirk(rng, dtype):
    """torch accepts a Q feature size other than query_size when the sums still match:
    Q.shape[2] + K.shape[2] == query_size + key_size and
    Q.shape[2] + V.shape[2] == query_size + value_size2. myatt accepts it too (decisions 9)."""
    sizes = (32, 32, 8, 16, 5)
    m = make(sizes, dtype)
    for dq in (40, 24, 0, 48):
        dk = 64 - dq
        dv2 = 48 - dq
        Q = rng.standard_normal((2, 3, dq)).astype(dtype)
        K = rng.standard_normal((1, 3, dk)).astype(dtype)
        V = rng.standard_normal((1, 8, dv2)).astype(dtype)
        # torch really accepts it ...
        t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
        assert tuple(t_out.shape) == (1, 3, 5) and tuple(t_attn.shape) == (3, 8)
        # ... and so does myatt, with the same numbers
        check_against_oracle(m, Q, K, V)


@pytest.mark.parametrize("in_dtype", [np.float64, np.float32, np.int64, np.bool_, np.float16],
                         ids=lambda d: np.dtype(d).name)
def test_inputs_converted_to_module_dtype(rng, dtype, in_dtype):
    sizes = (5, 6, 7, 8, 9)
    m = make(sizes, dtype)
    Q, K, V = ((rng.standard_normal(s) * 2).astype(in_dtype)
               for s in ((1, 4, 5), (1, 4, 6), (1, 7, 8)))
    check_against_oracle(m, Q, K, V)


def test_mixed_input_dtypes(rng, dtype):
    sizes = (5, 6, 7, 8, 9)
    m = make(sizes, dtype)
    Q = rng.standard_normal((1, 4, 5)).astype(np.float64)
    K = rng.integers(-3, 4, size=(1, 4, 6)).astype(np.int32)
    V = rng.standard_normal((1, 7, 8)).astype(np.float32)
    check_against_oracle(m, Q, K, V)


def test_nonfinite_inputs_propagate_like_torch(rng, dtype):
    sizes = (4, 4, 6, 5, 3)
    m = make(sizes, dtype)
    Q, K, V = inputs(rng, sizes, 5, dtype)
    Q[0, 0, 1] = np.nan
    K[0, 2, 0] = np.inf
    K[0, 3, :] = -np.inf
    V[0, 4, 2] = np.inf
    out, attn = m(Q, K, V)
    t_out, t_attn = run(torch_myatt(m), Q, K, V, dtype=dtype)
    assert_matches(out, t_out, equal_nan=True)
    assert_matches(attn, t_attn, equal_nan=True)
    assert np.isnan(attn[0]).all()


# --------------------------------------------------------------------------- #
# Attributes
# --------------------------------------------------------------------------- #
def test_attributes(dtype):
    m = myatt.MyAtt(3, 5, 7, 11, 13, dtype=dtype)
    assert (m.query_size, m.key_size, m.value_size1, m.value_size2, m.output_size) == \
        (3, 5, 7, 11, 13)
    assert m.dtype == dtype
    assert isinstance(m.attn, myatt.Linear)
    assert isinstance(m.attn_combine, myatt.Linear)
    assert (m.attn.in_features, m.attn.out_features) == (3 + 5, 7)
    assert (m.attn_combine.in_features, m.attn_combine.out_features) == (3 + 11, 13)
    assert m.attn.dtype == dtype and m.attn_combine.dtype == dtype
    assert m.attn.bias is not None and m.attn_combine.bias is not None
    # the shapes torch gives its parameters
    t = oracle.MyAtt(3, 5, 7, 11, 13)
    for k, v in t.state_dict().items():
        assert m.state_dict()[k].shape == tuple(v.shape)


def test_default_dtype_is_float32():
    m = myatt.MyAtt(2, 2, 2, 2, 2)
    assert m.dtype == np.dtype(np.float32)
    assert all(v.dtype == np.float32 for v in m.state_dict().values())


@pytest.mark.parametrize("spelling,expected", [
    ("float64", np.float64), ("f4", np.float32), (np.dtype("f8"), np.float64), (np.float32, np.float32),
], ids=repr)
def test_dtype_spellings(spelling, expected):
    m = myatt.MyAtt(2, 3, 4, 5, 6, dtype=spelling)
    assert m.dtype == np.dtype(expected)
    assert all(v.dtype == expected for v in m.state_dict().values())


def test_sublayers_are_live(rng, dtype):
    """m.attn / m.attn_combine are the module's own layers: changing them changes m."""
    sizes = (4, 5, 6, 7, 3)
    m = make(sizes, dtype)
    assert m.attn is m.attn
    Q, K, V = inputs(rng, sizes, 4, dtype)
    out0, attn0 = m(Q, K, V)
    m.attn.weight *= dtype.type(2)
    m.attn_combine.bias -= dtype.type(1)
    np.testing.assert_array_equal(m.state_dict()["attn.weight"], m.attn.weight, strict=True)
    np.testing.assert_array_equal(m.state_dict()["attn_combine.bias"], m.attn_combine.bias,
                                  strict=True)
    out1, attn1 = check_against_oracle(m, Q, K, V)
    assert not np.allclose(out0, out1)
    assert not np.allclose(attn0, attn1)


def test_attn_layer_alone_matches_torch(rng, dtype):
    sizes = (4, 5, 6, 7, 3)
    m = make(sizes, dtype)
    t = torch_myatt(m)
    x = rng.standard_normal((3, 9)).astype(dtype)
    with torch.no_grad():
        assert_matches(m.attn(x), t.attn(to_torch(x, dtype)))


@pytest.mark.parametrize("name", ["query_size", "key_size", "value_size1", "value_size2",
                                  "output_size", "dtype", "attn", "attn_combine"])
def test_readonly_attributes(name):
    m = myatt.MyAtt(2, 3, 4, 5, 6)
    before = getattr(m, name)
    with pytest.raises(AttributeError):
        setattr(m, name, myatt.Linear(5, 4) if name.startswith("attn") else 7)
    assert getattr(m, name) is before or getattr(m, name) == before


# --------------------------------------------------------------------------- #
# state_dict / load_state_dict
# --------------------------------------------------------------------------- #
def test_state_dict_copies_under_torch_keys(dtype):
    m = myatt.MyAtt(3, 5, 7, 11, 13, dtype=dtype)
    sd = m.state_dict()
    t = oracle.MyAtt(3, 5, 7, 11, 13)
    assert sorted(sd) == sorted(t.state_dict()) == sorted(KEYS)
    np.testing.assert_array_equal(sd["attn.weight"], m.attn.weight, strict=True)
    np.testing.assert_array_equal(sd["attn.bias"], m.attn.bias, strict=True)
    np.testing.assert_array_equal(sd["attn_combine.weight"], m.attn_combine.weight, strict=True)
    np.testing.assert_array_equal(sd["attn_combine.bias"], m.attn_combine.bias, strict=True)
    snap = snapshot(m)
    for v in sd.values():
        assert type(v) is np.ndarray and v.dtype == dtype and v.flags.c_contiguous
        for live in (m.attn.weight, m.attn.bias, m.attn_combine.weight, m.attn_combine.bias):
            assert not np.shares_memory(v, live)
        v[...] = 123.0
    assert_state_equal(m, snap)


def torch_source(sizes, dtype, rng):
    t = oracle.MyAtt(*sizes).to(torch_dtype(dtype))
    with torch.no_grad():                  # weights different from any myatt draw
        for p in t.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape))))
    return t


@pytest.mark.parametrize("source", ["torch", "torch_params", "numpy", "lists"])
def test_load_state_dict(rng, dtype, source):
    sizes = (6, 5, 7, 4, 3)
    t = torch_source(sizes, dtype, rng)
    if source == "torch":
        sd = t.state_dict()                                     # as it comes
    elif source == "torch_params":
        sd = dict(t.named_parameters())                         # requires_grad=True
    elif source == "numpy":
        sd = {k: v.numpy().copy() for k, v in t.state_dict().items()}
    else:
        sd = {k: v.tolist() for k, v in t.state_dict().items()}
    m = make(sizes, dtype)
    result = m.load_state_dict(sd)
    assert isinstance(result, tuple) and len(result) == 2
    missing, unexpected = result
    assert type(missing) is list and type(unexpected) is list
    assert missing == [] and unexpected == []
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k], v.numpy(), strict=True)
    Q, K, V = inputs(rng, sizes, 5, dtype, Bq=2)
    out, attn = m(Q, K, V)
    t_out, t_attn = run(t, Q, K, V, dtype=dtype)
    assert_matches(out, t_out)
    assert_matches(attn, t_attn)


def test_load_state_dict_other_dtype(rng, dtype):
    other = np.float64 if dtype == np.float32 else np.float32
    sizes = (3, 4, 5, 6, 2)
    t = torch_source(sizes, other, rng)
    m = make(sizes, dtype)
    m.load_state_dict(t.state_dict())
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k], v.numpy().astype(dtype), strict=True)


def test_round_trip_through_torch(rng, dtype):
    sizes = (3, 4, 5, 6, 2)
    a = make(sizes, dtype)
    t = torch_myatt(a)
    b = make(sizes, dtype)
    b.load_state_dict(t.state_dict())
    assert_state_equal(b, snapshot(a))


def test_load_state_dict_strict_false(rng, dtype):
    sizes = (3, 4, 5, 6, 2)
    m = make(sizes, dtype)
    snap = snapshot(m)
    new_w = rng.standard_normal((5, 7)).astype(dtype)
    sd = {"attn.weight": new_w, "attn.extra": np.zeros(2), "foo": np.ones(1)}
    result = m.load_state_dict(sd, strict=False)
    assert isinstance(result, tuple) and len(result) == 2
    missing, unexpected = result
    assert type(missing) is list and type(unexpected) is list
    t = oracle.MyAtt(*sizes).to(torch_dtype(dtype))
    t_result = t.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    assert sorted(missing) == sorted(t_result.missing_keys) == sorted(KEYS[1:])
    assert sorted(unexpected) == sorted(t_result.unexpected_keys) == ["attn.extra", "foo"]
    np.testing.assert_array_equal(m.attn.weight, new_w, strict=True)
    for k in KEYS[1:]:
        np.testing.assert_array_equal(m.state_dict()[k], snap[k], strict=True)


def test_load_state_dict_strict_false_empty(dtype):
    m = make((3, 4, 5, 6, 2), dtype)
    snap = snapshot(m)
    missing, unexpected = m.load_state_dict({}, strict=False)
    assert sorted(missing) == sorted(KEYS) and list(unexpected) == []
    assert_state_equal(m, snap)


def _bad_shape(sd):
    sd = dict(sd)
    sd["attn_combine.bias"] = np.zeros(sd["attn_combine.bias"].shape[0] + 1)
    return sd


def _bad_dtype(sd):
    sd = dict(sd)
    sd["attn_combine.bias"] = sd["attn_combine.bias"].astype(np.complex128)
    return sd


def _missing(sd):
    sd = dict(sd)
    del sd["attn_combine.bias"]
    return sd


def _unexpected(sd):
    sd = dict(sd)
    sd["attn_combine.extra"] = np.zeros(3)
    return sd


def _bad_ndim(sd):
    sd = dict(sd)
    sd["attn_combine.weight"] = sd["attn_combine.weight"][None]
    return sd


def _ragged(sd):
    sd = dict(sd)
    sd["attn_combine.bias"] = [[1.0], [2.0, 3.0]]
    return sd


@pytest.mark.parametrize("corrupt,exc", [
    (_bad_shape, ValueError), (_bad_ndim, ValueError), (_bad_dtype, TypeError),
    (_missing, KeyError), (_unexpected, KeyError), (_ragged, ValueError),
], ids=["bad_shape", "bad_ndim", "bad_dtype", "missing", "unexpected", "ragged"])
def test_failed_load_changes_nothing(rng, dtype, corrupt, exc):
    """One bad entry among good ones (put last, after the good ones): nothing is written."""
    sizes = (3, 4, 5, 6, 2)
    m = make(sizes, dtype)
    snap = snapshot(m)
    good = {k: v.numpy() for k, v in torch_source(sizes, dtype, rng).state_dict().items()}
    bad = corrupt(good)
    with pytest.raises(exc):
        m.load_state_dict(bad)
    assert_state_equal(m, snap)
    # ... and the module still works on its old weights
    check_against_oracle(m, *inputs(rng, sizes, 3, dtype))
