"""How one result of myatt and torch's are judged: shared by ``compare`` and ``validate``.

NumPy only (torch is not needed to judge two arrays). The rule is the spec's:

- the two results agree when they are within ``torch.testing.assert_close``'s tolerances for
  their dtype (the same element-wise rule, computed here in float64 as assert_close does);
- else, where float64 reruns of both sides are given (the long-reduction exception: two correct
  float32 kernels may differ beyond the tolerances on long sums), they agree when torch's and
  myatt's float64 results agree with each other at float64's tolerances and myatt's error
  against them is no larger than torch's. A broken torch kernel is broken in float64 too, so
  torch's float64 alone is no referee: both reruns must agree before either is one.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

# torch.testing.assert_close's defaults: dtype name -> (rtol, atol)
DEFAULT_TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}


def tolerances(dtype) -> Tuple[float, float]:
    """``assert_close``'s default (rtol, atol) for a NumPy dtype or a dtype's name."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    try:
        return DEFAULT_TOLERANCES[name.replace("torch.", "")]
    except KeyError:
        raise TypeError(f"no default tolerances for dtype {name}") from None


@dataclass
class Judgement:
    """The numbers of one comparison and its verdict (see the module's docstring)."""

    within_tolerance: bool = False     #: the assert_close rule holds everywhere
    agree: bool = False                #: the verdict: within tolerance or the float64 rule
    size: int = 0                      #: elements compared (0 when the shapes differ)
    max_abs: float = float("nan")      #: max |myatt - torch| where both are finite
    max_rel: float = float("nan")      #: max |myatt - torch| / |torch| there
    mismatched: int = 0                #: elements outside the rule
    nonfinite_same: int = 0            #: NaN on both sides, or the same infinity
    nonfinite_differ: int = 0          #: NaN/inf on one side only, or opposite infinities
    worst_index: Optional[Tuple[int, ...]] = None
    myatt_value: float = float("nan")
    torch_value: float = float("nan")
    err64_myatt: Optional[float] = None   #: max |myatt - float64 reference|
    err64_torch: Optional[float] = None   #: max |torch - float64 reference|
    agree64: Optional[bool] = None     #: myatt's and torch's float64 reruns agree
    reason: str = ""                   #: why it differs, or why it agrees though outside tol


def _elementwise(a, b, rtol, atol, equal_nan):
    """assert_close's rule position by position, in float64: (bad, outside, same, differ,
    both_nan, diff, rel); `outside` the finite pairs among the bad."""
    with np.errstate(all="ignore"):
        finite = np.isfinite(a) & np.isfinite(b)
        both_nan = np.isnan(a) & np.isnan(b)
        same = both_nan | (~finite & (a == b))
        differ = ~finite & ~same
        diff = np.where(finite, np.abs(a - b), 0.0)
        rel = np.where(diff == 0, 0.0, diff / np.abs(b))
        outside = finite & ~(diff <= atol + rtol * np.abs(b))
        bad = outside | differ | (both_nan if not equal_nan else False)
    return bad, outside, same, differ, both_nan, diff, rel


def _max_error(x, ref):
    """max |x - ref| over the positions where both are finite (0 for none), in float64."""
    with np.errstate(all="ignore"):
        e = np.abs(x - ref)
    e = e[np.isfinite(e)]
    return float(e.max()) if e.size else 0.0


def _f64(x):
    return np.asarray(x).astype(np.float64)


def judge(ours, theirs, rtol: float, atol: float, equal_nan: bool = True,
          ours64=None, theirs64=None) -> Judgement:
    """Judge myatt's result `ours` against torch's `theirs` (array-likes NumPy can read).

    `ours64` and `theirs64` are the two sides' results on the same call rerun in float64
    (None when there is no rerun: then the verdict is the tolerance rule alone).
    """
    a, b = _f64(ours), _f64(theirs)
    j = Judgement()
    if a.shape != b.shape:
        j.reason = f"shapes differ: myatt {a.shape}, torch {b.shape}"
        return j
    j.size = int(a.size)
    bad, outside, same, differ, both_nan, diff, rel = _elementwise(a, b, rtol, atol, equal_nan)
    j.mismatched = int(np.count_nonzero(bad))
    j.within_tolerance = j.mismatched == 0
    j.nonfinite_same = int(np.count_nonzero(same))
    j.nonfinite_differ = int(np.count_nonzero(differ))
    j.max_abs = float(diff.max()) if a.size else 0.0
    j.max_rel = float(rel.max()) if a.size else 0.0
    # The worst mismatch: a NaN/inf on one side, else NaN on both (equal_nan=False), else
    # the largest finite difference; none when nothing differs (never two equal values).
    for where in (differ, both_nan if not equal_nan else None, diff):
        if where is not None and np.any(where):
            worst = np.unravel_index(int(np.argmax(where)), where.shape)
            j.worst_index = tuple(int(i) for i in worst)
            j.myatt_value = np.asarray(ours)[worst].item()
            j.torch_value = np.asarray(theirs)[worst].item()
            break
    if theirs64 is not None:
        ref = _f64(theirs64)
        if ref.shape == a.shape:
            j.err64_myatt = _max_error(a, ref)
            j.err64_torch = _max_error(b, ref)
            if ours64 is not None and _f64(ours64).shape == a.shape:
                r64, a64 = tolerances("float64")
                j.agree64 = not np.any(_elementwise(_f64(ours64), ref, r64, a64, True)[0])
    j.agree = j.within_tolerance
    if j.within_tolerance:
        return j
    j.reason = f"{j.mismatched} of {j.size} elements outside rtol={rtol:g}, atol={atol:g}"
    em, et = j.err64_myatt, j.err64_torch
    if em is None or et is None:
        return j
    nearer = ("myatt is nearer to float64" if em < et else "torch is nearer to float64"
              if et < em else "both are as near to float64")
    j.reason += f"; {nearer} (myatt's error {em:.3g}, torch's {et:.3g})"
    finite_only = int(np.count_nonzero(outside)) == j.mismatched   # no NaN/inf mismatch
    if finite_only and j.agree64 and em <= et:
        j.agree = True
        j.reason += "; the float64 reruns of the two sides agree"
    elif j.agree64 is False:
        j.reason += "; the float64 reruns of the two sides differ too"
    return j
