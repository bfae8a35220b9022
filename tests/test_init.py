"""Initialisation is bit-exact to torch: myatt.manual_seed(s) followed by myatt.Linear /
myatt.MyAtt holds exactly what torch.manual_seed(s) followed by nn.Linear / the seed
tutorial's MyAtt holds, and leaves the generator where torch's would be.

How torch draws (what csrc/kernels/runtime/rng.c reproduces):
  * at::mt19937 seeded with the low 32 bits of the uint64 seed; Python ints are
    taken as uint64, negative ones as int64 two's complement (-1 -> 2**64 - 1).
  * nn.Linear.reset_parameters: kaiming_uniform_(weight, a=math.sqrt(5)) draws
    weight.numel() values row-major (nothing if 0 is in weight.shape), then bias
    (out values) from U(-1/sqrt(in), 1/sqrt(in)), or U(0, 0) when in == 0.
  * uniform_: float32 from one 32-bit draw (24 bits), float64 from one 64-bit draw
    (53 bits), out = fma(x, to - from, from) in the tensor's dtype.

The last point holds for torch's AVX2/AVX512 CPU kernels (what a modern x86-64 machine
runs); torch's DEFAULT kernel (ATEN_CPU_CAPABILITY=default, or a CPU without AVX2) does
not fuse, and then its weights differ from myatt's in the last bit.
`test_torch_uniform_is_fused` checks that precondition on its own.
"""
import contextlib
import warnings

import numpy as np
import pytest
import torch

import myatt
from oracle import MyAtt as TorchMyAtt

DTYPES = [np.float32, np.float64]
TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64}
UINT = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}

SEEDS = [0, 1, 42, 5489, 123456789, 2**32 + 1, 2**63, 2**64 - 1, -1, -12345, -2**63]
SHAPES = [(1, 1), (3, 5), (1, 16), (16, 1), (32, 64), (64, 96), (257, 3)]   # (in, out)
ZERO_SHAPES = [(0, 5), (5, 0), (0, 0)]                                      # (in, out)
MYATT_SIZES = [
    (32, 32, 32, 64, 32),   # the tutorial's
    (3, 5, 7, 11, 13),
    (1, 1, 1, 1, 1),
    (17, 0, 16, 2, 9),
    (0, 0, 4, 0, 3),        # zero fan-in: no weight draws, biases drawn as zeros
]


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #
@contextlib.contextmanager
def torch_building(dtype):
    """Build torch modules with parameters *drawn* in `dtype` (not converted after)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(TORCH_DTYPE[dtype])
    try:
        with warnings.catch_warnings():
            # "Initializing zero-element tensors is a no-op"
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.set_default_dtype(old)


def torch_linear(in_features, out_features, bias, dtype):
    with torch_building(dtype):
        return torch.nn.Linear(in_features, out_features, bias=bias)


def torch_myatt(sizes, dtype):
    with torch_building(dtype):
        return TorchMyAtt(*sizes)


def assert_bits_equal(ours, theirs, what=""):
    """`ours` (numpy) holds exactly the bits of the torch tensor `theirs`."""
    theirs = theirs.detach().numpy()
    assert isinstance(ours, np.ndarray), f"{what}: expected numpy.ndarray, got {type(ours)!r}"
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype} != torch's {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != torch's {theirs.shape}"
    a = np.ascontiguousarray(ours).view(UINT[ours.dtype])
    b = np.ascontiguousarray(theirs).view(UINT[theirs.dtype])
    if not np.array_equal(a, b):
        bad = int(np.count_nonzero(a != b))
        raise AssertionError(
            f"{what}: {bad} of {a.size} elements differ from torch's "
            f"(torch CPU capability {torch.backends.cpu.get_cpu_capability()})")


def assert_linear_equal(ours, theirs, what="linear"):
    assert_bits_equal(ours.weight, theirs.weight, f"{what}.weight")
    if theirs.bias is None:
        assert ours.bias is None, f"{what}.bias: expected None (bias=False)"
    else:
        assert_bits_equal(ours.bias, theirs.bias, f"{what}.bias")


def assert_myatt_equal(ours, theirs):
    assert_linear_equal(ours.attn, theirs.attn, "attn")
    assert_linear_equal(ours.attn_combine, theirs.attn_combine, "attn_combine")
    sd, tsd = ours.state_dict(), theirs.state_dict()
    assert list(sd) == list(tsd)
    for k in tsd:
        assert_bits_equal(sd[k], tsd[k], f"state_dict()[{k!r}]")


def seed_both(seed):
    torch.manual_seed(seed)
    myatt.manual_seed(seed)


# --------------------------------------------------------------------------- #
# precondition: the torch oracle's uniform_ is the fused one
# --------------------------------------------------------------------------- #
def test_torch_uniform_is_fused():
    """torch's float32 uniform_ is fma(x, to - from, from), x = (r & 0xffffff) * 2**-24.

    If this fails, torch runs its unfused DEFAULT kernel here (no AVX2, or
    ATEN_CPU_CAPABILITY=default) and every bit-exact init test below fails with it.
    """
    n, bound = 4096, 0.10206207261596575   # Linear(96, .)'s kaiming bound: not a power of 2
    torch.manual_seed(7)
    r = torch.empty(n, dtype=torch.int32).random_().numpy()   # low 31 bits of each 32-bit draw
    torch.manual_seed(7)
    got = torch.empty(n, dtype=torch.float32).uniform_(-bound, bound).numpy()
    lo, hi = np.float32(-bound), np.float32(bound)
    x = (r & 0xFFFFFF).astype(np.float32) * np.float32(2.0**-24)
    rng = hi - lo
    unfused = x * rng + lo                       # float32 ops, each rounded
    # x * rng and the sum are exact in float64 (24 + 24 bits, one common scale), so
    # a single rounding to float32 at the end is the fused multiply-add.
    fused = (x.astype(np.float64) * np.float64(rng) + np.float64(lo)).astype(np.float32)
    assert not np.array_equal(fused.view(np.uint32), unfused.view(np.uint32))
    assert np.array_equal(got.view(np.uint32), fused.view(np.uint32)), (
        "torch's uniform_ is not fused on this machine (CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}); myatt reproduces the fused kernel")


# --------------------------------------------------------------------------- #
# Linear
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("seed", SEEDS)
def test_linear_matches_torch(seed, shape, bias, dtype):
    in_f, out_f = shape
    seed_both(seed)
    theirs = torch_linear(in_f, out_f, bias, dtype)
    ours = myatt.Linear(in_f, out_f, bias=bias, dtype=dtype)
    assert_linear_equal(ours, theirs)
    # the generator is left where torch's is: the next module matches too
    theirs2 = torch_linear(9, 7, True, dtype)
    ours2 = myatt.Linear(9, 7, bias=True, dtype=dtype)
    assert_linear_equal(ours2, theirs2, "next linear")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape", ZERO_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("seed", [0, 42, -1])
def test_linear_zero_sizes(seed, shape, bias, dtype):
    """A zero-element weight draws nothing; a bias with in_features == 0 still draws
    out_features values, all exactly +0.0; what follows stays in step with torch."""
    in_f, out_f = shape
    seed_both(seed)
    theirs = torch_linear(in_f, out_f, bias, dtype)
    ours = myatt.Linear(in_f, out_f, bias=bias, dtype=dtype)
    assert_linear_equal(ours, theirs)
    if bias:
        assert np.array_equal(np.ascontiguousarray(ours.bias).view(UINT[np.dtype(dtype)]),
                              np.zeros(out_f, UINT[np.dtype(dtype)]))
    for in2, out2 in [(4, 3), (33, 17)]:
        assert_linear_equal(myatt.Linear(in2, out2, dtype=dtype),
                            torch_linear(in2, out2, True, dtype), f"next linear {in2}x{out2}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("seed", [0, 2**63, -7])
def test_linear_sequence_after_one_seed(seed, dtype):
    """Many modules after a single seed: the state carries over, including across
    the 624-word MT19937 refills (float64 uses two 32-bit words per value)."""
    layers = [(64, 96, True), (5, 0, True), (0, 5, True), (257, 3, False), (3, 257, True),
              (1, 1, False), (96, 64, True), (0, 0, True), (11, 13, True)]
    seed_both(seed)
    for in_f, out_f, bias in layers:
        assert_linear_equal(myatt.Linear(in_f, out_f, bias=bias, dtype=dtype),
                            torch_linear(in_f, out_f, bias, dtype), f"linear {in_f}x{out_f}")


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("tdtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape", SHAPES + ZERO_SHAPES + [(300, 40), (1, 5000)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("seed", [0, 3, -1])
def test_linear_half_matches_torch(seed, shape, bias, tdtype):
    """nn.Linear(..., dtype=torch.float16 / bfloat16): uniform_ draws in float32 and
    rounds, a value that rounds to the upper bound becoming the lower one."""
    if tdtype == torch.bfloat16:
        pytest.importorskip("ml_dtypes")   # myatt's bfloat16 arrays (a test extra)
    seed_both(seed)
    for in_f, out_f in (shape, (9, 7)):    # then the next module: the generator in step
        theirs = torch.nn.Linear(in_f, out_f, bias=bias, dtype=tdtype)
        ours = myatt.Linear(in_f, out_f, bias=bias, dtype=tdtype)
        for name in ("weight", "bias") if bias else ("weight",):
            want = getattr(theirs, name).detach().view(torch.int16).numpy()
            assert np.array_equal(getattr(ours, name).view(np.int16), want), name


def test_linear_default_dtype_and_bias():
    myatt.manual_seed(3)
    default = myatt.Linear(6, 4)
    assert default.weight.dtype == np.float32 and default.bias is not None
    myatt.manual_seed(3)
    explicit = myatt.Linear(6, 4, bias=True, dtype=np.float32)
    torch.manual_seed(3)
    theirs = torch_linear(6, 4, True, np.float32)
    assert_linear_equal(default, theirs)
    assert_linear_equal(explicit, theirs)


# --------------------------------------------------------------------------- #
# manual_seed
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("seed,same_as", [
    (-1, 2**64 - 1),          # negative seeds are int64 two's complement
    (-2**63, 2**63),
    (-12345, 2**64 - 12345),
    (2**32 + 1, 1),           # only the low 32 bits reach the MT19937 state
    (2**63 + 42, 42),
])
def test_manual_seed_aliases(seed, same_as, dtype):
    myatt.manual_seed(seed)
    a = myatt.Linear(10, 6, dtype=dtype)
    myatt.manual_seed(same_as)
    b = myatt.Linear(10, 6, dtype=dtype)
    torch.manual_seed(seed)
    t = torch_linear(10, 6, True, dtype)
    assert_linear_equal(a, t)
    assert_linear_equal(b, t)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_manual_seed_restarts_the_stream(dtype):
    myatt.manual_seed(99)
    first = myatt.Linear(8, 8, dtype=dtype)
    myatt.Linear(8, 8, dtype=dtype)          # advance
    myatt.manual_seed(99)
    again = myatt.Linear(8, 8, dtype=dtype)
    assert np.array_equal(first.weight, again.weight)
    assert np.array_equal(first.bias, again.bias)
    myatt.manual_seed(100)
    other = myatt.Linear(8, 8, dtype=dtype)
    assert not np.array_equal(first.weight, other.weight)


# --------------------------------------------------------------------------- #
# MyAtt
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("sizes", MYATT_SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("seed", [0, 1, 42, 123456789, 2**32 + 1, -1])
def test_myatt_matches_torch(seed, sizes, dtype):
    seed_both(seed)
    theirs = torch_myatt(sizes, dtype)
    ours = myatt.MyAtt(*sizes, dtype=dtype)
    assert_myatt_equal(ours, theirs)


@pytest.mark.parametrize("tdtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("sizes", MYATT_SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("seed", [0, 3, -1])
def test_myatt_half_matches_torch(seed, sizes, tdtype):
    """The seed's MyAtt built with torch's default dtype a half one: its layers' draws as
    nn.Linear's of that dtype (test_linear_half_matches_torch)."""
    if tdtype == torch.bfloat16:
        pytest.importorskip("ml_dtypes")
    seed_both(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(tdtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # "Initializing zero-element tensors is a no-op"
            theirs = TorchMyAtt(*sizes)
    finally:
        torch.set_default_dtype(old)
    ours = myatt.MyAtt(*sizes, dtype=tdtype)
    for name, want in theirs.state_dict().items():
        assert want.dtype == tdtype
        got = ours.state_dict()[name]
        assert np.array_equal(got.view(np.int16), want.view(torch.int16).numpy()), name


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_myatt_state_dict_keys(dtype):
    myatt.manual_seed(0)
    m = myatt.MyAtt(32, 32, 32, 64, 32, dtype=dtype)
    sd = m.state_dict()
    assert list(sd) == ["attn.weight", "attn.bias", "attn_combine.weight", "attn_combine.bias"]
    assert sd["attn.weight"].shape == (32, 64)
    assert sd["attn_combine.weight"].shape == (32, 96)
    assert all(v.dtype == dtype for v in sd.values())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("seed", [0, 42, 2**63])
def test_two_myatts_after_one_seed(seed, dtype):
    """attn draws before attn_combine, and a second module continues the stream."""
    first_sizes, second_sizes = (32, 32, 32, 64, 32), (3, 5, 7, 11, 13)
    seed_both(seed)
    t1, t2 = torch_myatt(first_sizes, dtype), torch_myatt(second_sizes, dtype)
    o1, o2 = myatt.MyAtt(*first_sizes, dtype=dtype), myatt.MyAtt(*second_sizes, dtype=dtype)
    assert_myatt_equal(o1, t1)
    assert_myatt_equal(o2, t2)
    # and a Linear after them
    assert_linear_equal(myatt.Linear(5, 4, dtype=dtype), torch_linear(5, 4, True, dtype))


@pytest.mark.parametrize("seed", [0, 42])
def test_mixed_dtypes_share_one_stream(seed):
    """float32 and float64 modules draw from the same generator, in order."""
    seed_both(seed)
    t = [torch_myatt((4, 4, 8, 6, 5), np.float64), torch_myatt((4, 4, 8, 6, 5), np.float32),
         torch_linear(7, 3, True, np.float64)]
    o = [myatt.MyAtt(4, 4, 8, 6, 5, dtype=np.float64), myatt.MyAtt(4, 4, 8, 6, 5, dtype=np.float32),
         myatt.Linear(7, 3, dtype=np.float64)]
    assert_myatt_equal(o[0], t[0])
    assert_myatt_equal(o[1], t[1])
    assert_linear_equal(o[2], t[2])
