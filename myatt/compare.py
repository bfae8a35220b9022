"""Drop-in validation: run a torch module and its myatt twin on the same inputs.

``myatt.compare(torch_module, *inputs)`` returns a :class:`Comparison`: ``print`` it for a
table of the largest differences per result, test ``report.agree`` (or ``bool(report)``),
or call ``report.assert_close()`` in a test.

torch is imported when ``compare`` is called, never when ``myatt`` is imported.
"""
import copy as _copy
import html as _html
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _interop

__all__ = ["compare", "Comparison", "ResultComparison", "DEFAULT_TOLERANCES"]

# torch.testing.assert_close defaults: dtype -> (rtol, atol)
DEFAULT_TOLERANCES = {np.dtype(np.float32): (1.3e-6, 1e-5), np.dtype(np.float64): (1e-7, 1e-7)}


@dataclass
class ResultComparison:
    """How one result (``output``, ``attn_weights``, ...) of myatt and torch compare.

    One entry of ``Comparison.results``, made by :func:`compare`; get it by name with
    ``report["output"]``. Differences are taken in float64; an element counts as outside the
    tolerance as in ``torch.testing.assert_close``: a finite pair when
    ``|myatt - torch| > atol + rtol * |torch|``, NaN against NaN unless `equal_nan`, and
    NaN or an infinity on one side only (or opposite infinities) always.

    Attributes
    ----------
    name : str
        The result's name: ``"output"``, ``"attn_weights"`` or ``"result[i]"``.
    shape, torch_shape : tuple of int
        The shapes of myatt's and torch's results.
    dtype, torch_dtype : str
        myatt's dtype (``"float32"`` or ``"float64"``) and torch's, as torch names it.
    rtol, atol : float
        The tolerances compared at.
    max_abs_err : float
        ``max |myatt - torch|`` over the positions where both are finite.
    max_rel_err : float
        ``max |myatt - torch| / |torch|`` there (inf where torch is 0 and myatt is not).
    mismatched : int
        How many elements ``assert_close`` counts as not close.
    equal_nan : bool
        Whether NaN against NaN agreed (:func:`compare`'s `equal_nan`).
    nonfinite_same, nonfinite_differ : int
        Positions with NaN on both sides or the same infinity; positions with a NaN or an
        infinity on one side only (or opposite infinities).
    worst_index : tuple of int or None
        The worst mismatch: a NaN/inf on one side, else a shared NaN when not
        `equal_nan`, else the largest finite ``|myatt - torch|``; None when the two sides
        are equal everywhere. ``myatt_value`` and ``torch_value`` are the two values
        there.
    agree : bool
        ``torch.testing.assert_close`` passes; ``message`` holds its message when it fails.
    err64_myatt, err64_torch : float or None
        For float32 results: each side's ``max |result - torch in float64|`` (the fair judge
        when two float32 results differ); None for float64.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> r = myatt.compare(torch.nn.Linear(8, 4), np.ones((3, 8)))["output"]
    >>> r.name, r.shape, r.mismatched, r.agree
    ('output', (3, 4), 0, True)
    """

    name: str
    shape: Tuple[int, ...]            #: myatt's shape
    torch_shape: Tuple[int, ...]      #: torch's shape
    dtype: str                        #: myatt's dtype ("float32" or "float64")
    torch_dtype: str                  #: torch's dtype, as torch names it
    rtol: float
    atol: float
    max_abs_err: float = float("nan")   #: max |myatt - torch| where both are finite
    max_rel_err: float = float("nan")   #: max |myatt - torch| / |torch| there (inf where torch is 0)
    mismatched: int = 0               #: elements assert_close counts as not close
    worst_index: Optional[Tuple[int, ...]] = None   #: the worst mismatch (None when there is none)
    myatt_value: float = float("nan")   #: myatt's value at worst_index
    torch_value: float = float("nan")   #: torch's value at worst_index
    agree: bool = False               #: torch.testing.assert_close passes
    equal_nan: bool = True            #: NaN on both sides counts as agreement
    nonfinite_same: int = 0           #: positions with NaN on both sides or the same inf
    nonfinite_differ: int = 0         #: positions with NaN/inf on one side only (or opposite infs)
    message: str = ""                 #: assert_close's message when it fails
    err64_myatt: Optional[float] = None   #: max |myatt - torch in float64| (float32 only)
    err64_torch: Optional[float] = None   #: max |torch - torch in float64| (float32 only)

    @property
    def size(self) -> int:
        """The number of elements compared (0 when the shapes differ)."""
        return int(np.prod(self.shape)) if self.shape == self.torch_shape else 0

    def summary(self) -> str:
        """One line: where they differ most, or that they agree.

        Returns
        -------
        str
            ``"output: agrees (max abs err ...)"``, or how many elements are outside the
            tolerance, the worst one, and each side's error against float64.
        """
        if self.shape != self.torch_shape:
            return f"{self.name}: shapes differ: myatt {self.shape}, torch {self.torch_shape}"
        if self.agree:
            return f"{self.name}: agrees (max abs err {self.max_abs_err:.3g})"
        s = (f"{self.name}: {self.mismatched} of {self.size} elements outside "
             f"rtol={self.rtol:g}, atol={self.atol:g}")
        if self.nonfinite_differ:
            s += f"; {self.nonfinite_differ} NaN/inf on one side only"
        if self.nonfinite_same:
            s += (f"; {self.nonfinite_same} NaN/inf the same on both sides"
                  + ("" if self.equal_nan else " (NaN counts as a mismatch: equal_nan=False)"))
        if self.worst_index is not None:
            s += (f"; worst at {self.worst_index}: myatt {self.myatt_value!r}, "
                  f"torch {self.torch_value!r}")
        if self.err64_myatt is not None and self.err64_torch is not None:
            better = "no larger" if self.err64_myatt <= self.err64_torch else "LARGER"
            s += (f"; against float64 myatt's error ({self.err64_myatt:.3g}) is {better} "
                  f"than torch's ({self.err64_torch:.3g})")
        return s


@dataclass
class Comparison:
    """The report of :func:`compare`: one :class:`ResultComparison` per result.

    ``bool(report)`` and ``report.agree`` say whether every result agrees at
    ``torch.testing.assert_close`` tolerances; ``print(report)`` shows a table (and
    Jupyter an HTML one); ``report["output"]`` is one result's :class:`ResultComparison`.

    Attributes
    ----------
    torch_module : str
        The torch side's name (its class, or a function's name).
    module : str
        The myatt side, as its ``repr`` or name.
    inputs : list of (str, tuple of int)
        The inputs' names (``Q``, ``K``, ``V``; ``query``, ``key``, ``value``; or
        ``input[i]``) and shapes.
    dtype : str
        The dtype both sides computed in.
    results : list of ResultComparison
        One per result, in the order the module returns them.
    notes : list of str
        What :func:`compare` did or left out, and why: a torch module with dropout run in
        eval mode, float64 columns absent because the torch callable failed on float64
        inputs. Printed under the header.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> report = myatt.compare(torch.nn.Linear(8, 4), np.ones((3, 8)))
    >>> print(report)                                # doctest: +ELLIPSIS
    myatt.compare: torch Linear vs myatt Linear(in_features=8, out_features=4, bias=True, dtype=float32)
    inputs: input[0] (3, 8) as float32
    ...
    AGREE: all 1 result(s) match torch at assert_close tolerances.
    >>> bool(report), [r.name for r in report.results]
    (True, ['output'])
    """

    torch_module: str
    module: str
    inputs: List[Tuple[str, Tuple[int, ...]]]
    dtype: str
    results: List[ResultComparison] = field(default_factory=list)
    #: what was done or left out, and why (eval mode for dropout, float64 columns absent)
    notes: List[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        """True when there is a result and every result agrees with torch's."""
        return bool(self.results) and all(r.agree for r in self.results)

    def __bool__(self) -> bool:
        return self.agree

    def __getitem__(self, name: str) -> ResultComparison:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def assert_close(self) -> None:
        """Raise AssertionError, with the report, unless every result agrees.

        Raises
        ------
        AssertionError
            When any result is outside the tolerances (or no result was compared); its
            message is the report's table.
        """
        if not self.agree:
            raise AssertionError("myatt and torch differ\n" + str(self))

    def _rows(self):
        head = ["result", "shape", "max abs err", "max rel err", "outside tol", "agree"]
        with64 = any(r.err64_myatt is not None for r in self.results)
        if with64:
            head[5:5] = ["myatt vs f64", "torch vs f64"]
        nonfinite = any(r.nonfinite_same or r.nonfinite_differ for r in self.results)
        if nonfinite:
            head[5:5] = ["nan/inf same", "nan/inf differ"]
        rows = [head]
        for r in self.results:
            same = r.shape == r.torch_shape
            row = [r.name, str(r.shape) if same else f"{r.shape} vs {r.torch_shape}",
                   f"{r.max_abs_err:.3g}" if same else "-",
                   f"{r.max_rel_err:.3g}" if same else "-",
                   f"{r.mismatched}/{r.size}" if same else "-",
                   "yes" if r.agree else "NO"]
            if with64:
                row[5:5] = [f"{r.err64_myatt:.3g}" if r.err64_myatt is not None else "-",
                            f"{r.err64_torch:.3g}" if r.err64_torch is not None else "-"]
            if nonfinite:
                row[5:5] = [str(r.nonfinite_same) if same else "-",
                            str(r.nonfinite_differ) if same else "-"]
            rows.append(row)
        return rows

    def _header(self):
        inputs = ", ".join(f"{n} {s}" for n, s in self.inputs)
        rtol, atol = DEFAULT_TOLERANCES.get(np.dtype(self.dtype), (None, None))
        tol = {(r.rtol, r.atol) for r in self.results}
        tol_s = ", ".join(f"rtol={a:g}, atol={b:g}" for a, b in sorted(tol))
        default = tol == {(rtol, atol)}
        # equal_nan, said where it matters: NaN/inf in a result, or NaN made a mismatch
        nan = {r.equal_nan for r in self.results}
        shown = nan == {False} or any(r.nonfinite_same or r.nonfinite_differ
                                      for r in self.results)
        nan_s = ("" if not shown else ", NaN on both sides agrees (equal_nan=True)"
                 if nan == {True} else ", NaN is a mismatch (equal_nan=False)")
        return ([f"myatt.compare: torch {self.torch_module} vs myatt {self.module}",
                 f"inputs: {inputs or '(none)'} as {self.dtype}",
                 f"tolerance: {tol_s}" + (" (assert_close defaults)" if default else "")
                 + nan_s] + [f"note: {n}" for n in self.notes])

    def _verdict(self):
        if self.agree:
            return (f"AGREE: all {len(self.results)} result(s) match torch at "
                    f"assert_close tolerances.")
        lines = ["DIFFER: " + "; ".join(r.name for r in self.results if not r.agree)
                 + " outside tolerance."]
        lines += ["  " + r.summary() for r in self.results if not r.agree]
        return "\n".join(lines)

    def __str__(self) -> str:
        rows = self._rows()
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        table = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                 for row in rows]
        return "\n".join(self._header() + [""] + table + ["", self._verdict()])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows = self._rows()
        colour = "#1a7f37" if self.agree else "#cf222e"
        head = "".join(f"<th>{_html.escape(c)}</th>" for c in rows[0])
        body = "".join("<tr>" + "".join(
            f"<td style='text-align: left'>{_html.escape(c)}</td>" if i == 0
            else f"<td>{_html.escape(c)}</td>" for i, c in enumerate(row)) + "</tr>"
            for row in rows[1:])
        header = "<br>".join(_html.escape(line) for line in self._header())
        verdict = _html.escape(self._verdict()).replace("\n", "<br>")
        return (f"<div><div style='font-family: monospace'>{header}</div>"
                f"<table style='font-family: monospace; text-align: right'>"
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<div style='color: {colour}; font-weight: bold'>{verdict}</div></div>")


def _is_mha(m):
    return all(hasattr(m, a) for a in ("embed_dim", "num_heads", "out_proj"))


def _result_names(torch_module, module, n):
    """MyAtt's or MultiheadAttention's names when either side is one (the torch callable
    may be a function around one), else output / result[i]."""
    if n == 2 and any(_is_mha(m) for m in (torch_module, module)):
        return ["attn_output", "attn_weights"]
    if n == 2 and any(all(hasattr(m, a) for a in _interop.MYATT_SIZES)
                      for m in (torch_module, module)):
        return ["output", "attn_weights"]
    if n == 1:
        return ["output"]
    return [f"result[{i}]" for i in range(n)]


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


# MultiheadAttention.forward's arguments in order, naming its array inputs in a report.
_MHA_ARGS = ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask"]


def _input_dtype(x, dtype):
    """The dtype an array input is passed in: bool stays bool, any other becomes `dtype`."""
    return np.bool_ if x.dtype == np.bool_ else dtype


def _myatt_twin(torch_module):
    from . import Linear, MultiheadAttention, MyAtt

    if all(hasattr(torch_module, a) for a in _interop.MYATT_SIZES):
        return MyAtt.from_torch(torch_module)
    if _is_mha(torch_module):
        return MultiheadAttention.from_torch(torch_module)
    if hasattr(torch_module, "in_features") and hasattr(torch_module, "out_features"):
        return Linear.from_torch(torch_module)
    raise TypeError(f"compare(): no myatt twin for {type(torch_module).__name__} (the "
                    f"tutorial's MyAtt, torch.nn.MultiheadAttention and torch.nn.Linear "
                    f"have one); pass module=")


def _describe(module):
    if hasattr(module, "dtype") or not hasattr(module, "__name__"):
        return repr(module)
    prefix = "myatt." if str(getattr(module, "__module__", "")).startswith("myatt") else ""
    return prefix + module.__name__


def _compare_one(name, ours, theirs, rtol, atol, equal_nan, torch):
    ours_t = torch.from_numpy(np.ascontiguousarray(ours))
    theirs = theirs.detach().cpu()
    r = ResultComparison(name=name, shape=tuple(ours.shape), torch_shape=tuple(theirs.shape),
                         dtype=ours.dtype.name, torch_dtype=str(theirs.dtype).replace("torch.", ""),
                         rtol=rtol, atol=atol, equal_nan=equal_nan)
    try:
        torch.testing.assert_close(ours_t, theirs, rtol=rtol, atol=atol, equal_nan=equal_nan)
        r.agree = True
    except AssertionError as e:
        r.message = str(e)
    if r.shape != r.torch_shape:
        return r
    a = ours.astype(np.float64)
    b = theirs.to(torch.float64).numpy()
    with np.errstate(all="ignore"):
        # assert_close's rule, position by position: finite pairs within atol + rtol * |b|;
        # the same infinity agrees; NaN with NaN agrees when equal_nan; any other pair
        # with a NaN or an infinity is a mismatch.
        finite = np.isfinite(a) & np.isfinite(b)
        both_nan = np.isnan(a) & np.isnan(b)
        same = both_nan | (~finite & (a == b))
        differ = ~finite & ~same
        diff = np.where(finite, np.abs(a - b), 0.0)
        rel = np.where(diff == 0, 0.0, diff / np.abs(b))
        outside = finite & ~(diff <= atol + rtol * np.abs(b))
        bad = outside | differ | (both_nan if not equal_nan else False)
    r.mismatched = int(np.count_nonzero(bad))
    r.nonfinite_same = int(np.count_nonzero(same))
    r.nonfinite_differ = int(np.count_nonzero(differ))
    r.max_abs_err = float(diff.max()) if a.size else 0.0
    r.max_rel_err = float(rel.max()) if a.size else 0.0
    # The worst mismatch: a NaN/inf on one side, else NaN on both (equal_nan=False), else
    # the largest finite difference; none when nothing differs (never two equal values).
    for where in (differ, both_nan if not equal_nan else None, diff):
        if where is not None and np.any(where):
            worst = np.unravel_index(int(np.argmax(where)), where.shape)
            r.worst_index = tuple(int(i) for i in worst)
            r.myatt_value = ours[worst].item()
            r.torch_value = theirs.numpy()[worst].item()
            break
    return r


def _eval_for_dropout(torch_module, torch):
    """If `torch_module` is a torch Module in training mode with a dropout of p > 0: put
    it in eval mode and return (a note saying so, the modes to restore); else (None, None)."""
    if not (isinstance(torch_module, torch.nn.Module) and torch_module.training):
        return None, None
    drops = [(n, m) for n, m in torch_module.named_modules()
             if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0]
    if not drops:
        return None, None
    modes = {m: m.training for m in torch_module.modules()}
    torch_module.eval()
    names = ", ".join(f"{n or type(m).__name__} (p={m.p:g})" for n, m in drops[:3])
    more = f" and {len(drops) - 3} more" if len(drops) > 3 else ""
    return (f"the torch module was in training mode with dropout {names}{more}: compared in "
            f"eval mode (no dropout; training mode restored afterwards)"), modes


def compare(torch_module: Any, *inputs: Any, module: Any = None, rtol: Optional[float] = None,
            atol: Optional[float] = None, equal_nan: bool = True,
            float64_reference: bool = True) -> Comparison:
    """Run `torch_module` and its myatt twin on the same inputs and report how they differ.

    Both sides get the same values, converted to the myatt side's dtype (bool arrays, such
    as masks, stay bool), and run without gradients; every result is compared as
    ``torch.testing.assert_close`` compares it.
    A torch module in training mode with a dropout of p > 0 would be compared against
    random masks: it runs in eval mode instead (its modes are restored afterwards), and
    the report's ``notes`` say so. Other modules run in the mode they are in.

    Parameters
    ----------
    torch_module : torch.nn.Module or callable
        The tutorial's torch ``MyAtt``, a ``torch.nn.MultiheadAttention``, a
        ``torch.nn.Linear``, or, with `module`, any torch module or function
        (``torch.softmax``, ``torch.bmm``, ...).
    *inputs : array_like or scalar
        The call's arguments (NumPy arrays, torch tensors, array-likes), e.g. ``Q, K, V``.
        Python scalars and None (a softmax's ``dim``, a missing bias) are passed to both
        sides as they are.
    module : callable, optional
        The myatt side. Default: ``MyAtt.from_torch(torch_module)`` (or
        ``MultiheadAttention.from_torch``, ``Linear.from_torch``), i.e. the same weights. Pass your own :class:`myatt.MyAtt`
        to check it against a torch model, or a function such as :func:`myatt.softmax`.
    rtol, atol : float, optional
        Tolerances, both or neither. Default: ``assert_close``'s for the dtype
        (float32: 1.3e-6 and 1e-5; float64: 1e-7 and 1e-7).
    equal_nan : bool, default True
        Whether a NaN on both sides at the same position agrees. True because a NaN in the
        inputs gives NaNs, and myatt giving torch's NaNs is agreement; False is
        ``assert_close``'s own default, where any NaN is a mismatch. Either way the
        report counts the NaN/inf positions the two sides share (``nonfinite_same``)
        apart from those where only one side has a NaN or an infinity
        (``nonfinite_differ``, always a mismatch), and the max errors are over the
        positions where both values are finite.
    float64_reference : bool, default True
        For float32, also run torch in float64 on the same weights and inputs, and report
        each side's error against it (the spec's rule for long float32 reductions, where
        two correct kernels may differ beyond tolerance). A torch module is copied to
        float64 for that; a plain callable is called with float64 inputs, and when that
        fails (a function around a float32 module) the report's ``notes`` say why the
        float64 columns are absent.

    Returns
    -------
    Comparison
        ``print`` it for a table, ``.agree`` or ``bool()`` for the verdict,
        ``.assert_close()`` to raise, ``["output"]`` for one result's numbers.

    Raises
    ------
    ImportError
        When torch is not installed.
    TypeError
        When `torch_module` has no myatt twin and no `module` is given, when the torch
        module's dtype is not the myatt side's, or when an array input is not real numbers.
    ValueError
        When only one of `rtol` and `atol` is given, or either is negative or NaN, or when
        the two sides return different numbers of results.

    See Also
    --------
    MyAtt.from_torch, MultiheadAttention.from_torch, Linear.from_torch : the twins
        `compare` builds.

    Examples
    --------
    A ``torch.nn.Linear`` against the :class:`myatt.Linear` holding its weights:

    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> lin = torch.nn.Linear(8, 4)
    >>> x = np.linspace(-1, 1, 24).reshape(3, 8)
    >>> report = myatt.compare(lin, x)
    >>> report.agree, report["output"].mismatched
    (True, 0)
    >>> report.assert_close()          # silent when they agree

    A kernel against its torch function (the scalar ``dim`` goes to both):

    >>> myatt.compare(torch.softmax, x.astype(np.float32), -1, module=myatt.softmax).agree
    True

    A module whose weights differ from the torch module's:

    >>> mine = myatt.Linear.from_torch(lin)
    >>> mine.bias += 1e-3
    >>> report = myatt.compare(lin, x, module=mine)
    >>> report.agree
    False
    >>> print(report["output"].summary())           # doctest: +ELLIPSIS
    output: 12 of 12 elements outside rtol=1.3e-06, atol=1e-05; worst at ...
    """
    import torch

    if (rtol is None) != (atol is None):
        raise ValueError("compare(): give both rtol and atol, or neither")
    if rtol is not None and atol is not None and not (rtol >= 0 and atol >= 0):
        raise ValueError(f"compare(): rtol and atol must be >= 0, got {rtol!r} and {atol!r}")
    if module is None:
        module = _myatt_twin(torch_module)
    # Array-likes are converted (the same values for both sides); Python scalars and None
    # (a softmax's dim, a bias of None) are passed to both as they are.
    is_array = [not isinstance(x, (int, float, bool, str, type(None), np.integer)) for x in inputs]
    given = [_interop.to_numpy(x) if a else x for x, a in zip(inputs, is_array)]
    for i, (x, a) in enumerate(zip(given, is_array)):
        if a and x.dtype.kind not in "biuf":   # as myatt refuses them
            raise TypeError(f"compare(): inputs[{i}] has dtype {x.dtype}; myatt "
                            "takes real numbers (bool, integer, float)")
    if hasattr(module, "dtype"):
        dtype = np.dtype(module.dtype)
    else:
        dtype = np.dtype(np.float64 if any(a and x.dtype == np.float64
                                           for x, a in zip(given, is_array)) else np.float32)
    # Bool arrays (masks) stay bool: as floats they would be added to the scores instead.
    args = [np.array(x, dtype=_input_dtype(x, dtype), order="C") if a else x
            for x, a in zip(given, is_array)]
    arrays = [x for x, a in zip(args, is_array) if a]
    if rtol is None:
        rtol, atol = DEFAULT_TOLERANCES[dtype]
    params = list(torch_module.parameters()) if hasattr(torch_module, "parameters") else []
    device = params[0].device if params else torch.device("cpu")
    if params and params[0].is_floating_point():
        torch_dt = str(params[0].dtype)
        if torch_dt != f"torch.{dtype.name}":
            raise TypeError(f"compare(): the torch module is {torch_dt} but the myatt side "
                            f"computes in {dtype.name}: convert one of them first "
                            f"(module.float() / module.double(), or dtype= for myatt)")

    def run_torch(mod, dt):
        with torch.no_grad():
            return _as_tuple(mod(*(torch.from_numpy(x.astype(_input_dtype(x, dt))).to(device)
                                   if a else x
                                   for x, a in zip(args, is_array))))

    notes = []
    note, modes = _eval_for_dropout(torch_module, torch)
    if note is not None:
        notes.append(note)
    try:
        return _compare(torch_module, module, args, is_array, arrays, dtype, rtol, atol,
                        equal_nan, float64_reference, run_torch, notes, torch)
    finally:
        if modes is not None:
            for m, training in modes.items():
                m.training = training


def _compare(torch_module, module, args, is_array, arrays, dtype, rtol, atol, equal_nan,
             float64_reference, run_torch, notes, torch):
    theirs = run_torch(torch_module, dtype)
    ours = _as_tuple(module(*args))
    if len(ours) != len(theirs):
        raise ValueError(f"compare(): myatt returned {len(ours)} result(s), torch {len(theirs)}")
    names = _result_names(torch_module, module, len(ours))
    if names == ["output", "attn_weights"] and len(arrays) == 3:
        input_names = ["Q", "K", "V"]
    elif names == ["attn_output", "attn_weights"] and len(arrays) >= 3:
        input_names = [_MHA_ARGS[i] if i < len(_MHA_ARGS) else f"input[{i}]"
                       for i, a in enumerate(is_array) if a]
    else:
        input_names = [f"input[{i}]" for i in range(len(arrays))]
    torch_name = (type(torch_module).__name__ if hasattr(torch_module, "forward")
                  else getattr(torch_module, "__name__", type(torch_module).__name__))
    report = Comparison(torch_module=torch_name, module=_describe(module),
                        inputs=[(n + " bool" * (a.dtype == np.bool_), tuple(a.shape))
                                for n, a in zip(input_names, arrays)],
                        dtype=dtype.name, notes=notes)
    report.results = [_compare_one(n, np.asarray(o), t, rtol, atol, equal_nan, torch)
                      for n, o, t in zip(names, ours, theirs)]

    if float64_reference and dtype == np.float32:
        ref_module = torch_module
        if isinstance(torch_module, torch.nn.Module):
            ref_module = _copy.deepcopy(torch_module).to(torch.float64)
        try:
            refs = run_torch(ref_module, np.float64)
        except (RuntimeError, TypeError) as e:   # a callable that does not take float64
            refs = None
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            notes.append(f"no float64 columns: {torch_name} failed on float64 inputs "
                         f"({type(e).__name__}: {first[:120]}); pass the torch module itself "
                         f"(it is copied to float64), or float64_reference=False")
        if refs is not None and len(refs) != len(ours):
            notes.append(f"no float64 columns: {torch_name} gave {len(refs)} result(s) on "
                         f"float64 inputs, {len(ours)} on {dtype.name}")
        elif refs is not None:
            for r, o, t, ref in zip(report.results, ours, theirs, refs):
                if r.shape != r.torch_shape or tuple(ref.shape) != r.shape:
                    continue
                ref64 = ref.detach().cpu().numpy()
                with np.errstate(all="ignore"):
                    em = np.abs(np.asarray(o, np.float64) - ref64)
                    et = np.abs(t.detach().cpu().to(torch.float64).numpy() - ref64)
                r.err64_myatt = float(np.nanmax(em)) if em.size else 0.0
                r.err64_torch = float(np.nanmax(et)) if et.size else 0.0
    return report
