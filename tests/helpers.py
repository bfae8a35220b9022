"""Test data and dtype rules shared by the test files (NumPy only; the torch side is oracle.py)."""
import re

import numpy as np

try:   # NumPy's bfloat16 (ml_dtypes, an optional extra of myatt's)
    from ml_dtypes import bfloat16
    BFLOAT16 = [bfloat16]
except ImportError:
    BFLOAT16 = []

# Every real dtype the kernels accept and convert (float32/float64 are native).
ALL_REAL = [np.float16, np.float32, np.float64, np.bool_, np.int8, np.int16, np.int32, np.int64,
            np.uint8, np.uint16, np.uint32, np.uint64] + BFLOAT16
# A smaller set for pairwise promotion tables.
PROMO_DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_] + BFLOAT16


def dtype_id(d):
    return "None" if d is None else np.dtype(d).name


def data(rng, shape, dtype):
    """Unit-scale test data of `shape` in `dtype` (small integers for integer/bool dtypes)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "u":
        return rng.integers(0, 5, size=shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def scaled(rng, shape, dtype, fan_in):
    """Like data(), but float values scaled by 1/sqrt(fan_in), as nn.Linear initialises a weight.

    A product summed over fan_in unit-scale terms then stays unit-scale. (With both
    operands unit-scale, a sum of a few hundred terms is ~16 in magnitude and two
    correct float32 kernels already differ by more than assert_close's atol of 1e-5:
    that is the spec's "long reduction" case, tested in test_long_reductions.py.)
    """
    a = data(rng, shape, dtype)
    if a.dtype.kind == "f":
        a = (a / np.sqrt(max(fan_in, 1))).astype(a.dtype)
    return a


def result_dtype(*dtypes):
    """The kernels' rule, torch's promotion: the widest float among the array
    operands (float64 > float32 > float16, bfloat16), float16 with bfloat16
    float32, and float32 when none is a float (bool, integers)."""
    floats = {np.dtype(d) for d in dtypes
              if d is not None and np.dtype(d).name in ("float16", "bfloat16", "float32",
                                                        "float64")}
    if np.dtype(np.float64) in floats:
        return np.dtype(np.float64)
    if len(floats) == 1:
        return floats.pop()
    return np.dtype(np.float32)


def shape_re(shape):
    """A regex for `shape` written as a tuple or a list: (3, 4), [3, 4], (5,), [5], (), []."""
    shape = tuple(int(s) for s in shape)
    if not shape:
        return r"(\(\s*\)|\[\s*\])"
    inner = r"\s*,\s*".join(str(s) for s in shape)
    return r"[\[(]\s*" + inner + r"\s*,?\s*[\])]"


def name_re(*names):
    """A regex matching any of the argument names as a whole word."""
    return "|".join(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])" for n in names)


# myatt's kernel path -> the torch CPU capability (torch.backends.cpu.get_cpu_capability(),
# chosen with ATEN_CPU_CAPABILITY) whose last-axis softmax kernel that path reproduces bit
# for bit: same vector width, reduction orders and exp (Sleef's; libm's for "portable")
TORCH_CAPABILITY = {"avx512": "AVX512", "avx2": "AVX2", "portable": "DEFAULT"}


def cpu_flags():
    """The CPU's feature flags (/proc/cpuinfo), or an empty set where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def torch_runs_our_softmax():
    """Whether torch's softmax here is the kernel myatt's path reproduces bit for bit.
    CI pairs every MYATT_KERNEL run with torch's matching capability and sets
    MYATT_REQUIRE_TORCH_KERNEL=1, which makes a mismatch an error."""
    import os

    import myatt
    import torch

    same = TORCH_CAPABILITY[myatt.kernel_path()] == torch.backends.cpu.get_cpu_capability()
    if os.environ.get("MYATT_REQUIRE_TORCH_KERNEL") == "1":
        assert same, (f"myatt path {myatt.kernel_path()} but torch capability "
                      f"{torch.backends.cpu.get_cpu_capability()}: set ATEN_CPU_CAPABILITY")
    return same


def assert_same_bits(got, expected):
    """Bit-identical arrays (NaN where the other has NaN, whatever the payload)."""
    got = np.asarray(got)
    expected = np.asarray(expected.detach().numpy() if hasattr(expected, "detach") else expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    nan = np.isnan(got)
    np.testing.assert_array_equal(nan, np.isnan(expected))
    uint = np.uint32 if got.dtype == np.float32 else np.uint64
    diff = (got.view(uint) != expected.view(uint)) & ~nan
    assert not diff.any(), (f"{diff.sum()} of {diff.size} elements differ from torch's bits, "
                            f"largest difference {np.max(np.abs(got - expected)[diff]):.3g}")
