"""Drop-in validation: run a torch module or function and its myatt twin on the same inputs.

``myatt.compare(torch_fn, *args, **kwargs)`` returns a :class:`Comparison`: ``print`` it for
a table of the largest differences per result (and per gradient, with ``backward=True``),
test ``report.agree`` (or ``bool(report)``), or call ``report.assert_close()`` in a test.

torch is imported when ``compare`` is called, never when ``myatt`` is imported.
"""
import copy as _copy
import html as _html
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _interop, _judge, _twins

__all__ = ["compare", "Comparison", "ResultComparison", "DEFAULT_TOLERANCES"]

# torch.testing.assert_close defaults: dtype -> (rtol, atol)
DEFAULT_TOLERANCES = {np.dtype(n): _judge.DEFAULT_TOLERANCES[n]
                      for n in ("float32", "float64", "float16")}   # (bfloat16: _judge's)


def _is_float(dtype):
    """A floating dtype: NumPy's, or ml_dtypes' bfloat16 (whose kind is 'V')."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


@dataclass
class ResultComparison:
    """How one result (``output``, ``attn_weights``, ``grad_Q``, ...) of myatt and torch compare.

    One entry of ``Comparison.results``, made by :func:`compare`; get it by name with
    ``report["output"]``. Differences are taken in float64; an element counts as outside the
    tolerance as in ``torch.testing.assert_close``: a finite pair when
    ``|myatt - torch| > atol + rtol * |torch|``, NaN against NaN unless `equal_nan`, and
    NaN or an infinity on one side only (or opposite infinities) always.

    The verdict (``agree``) is the spec's: within the tolerances, or, for a float32 result
    outside them, the long-reduction rule: myatt's and torch's float64 reruns agree with each
    other (at float64's tolerances) and myatt's error against them is no larger than
    torch's. ``reason`` says which side is nearer to float64.

    Attributes
    ----------
    name : str
        The result's name: ``"output"``, ``"attn_weights"`` or ``"result[i]"``; a
        gradient's, ``"grad_"`` and the input's or parameter's name (``"grad_Q"``,
        ``"grad_attn.weight"``).
    shape, torch_shape : tuple of int
        The shapes of myatt's and torch's results.
    dtype, torch_dtype : str
        myatt's dtype (``"float32"``, ``"float64"``, ``"float16"`` or ``"bfloat16"``) and
        torch's, as torch names it.
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
    within_tolerance : bool
        ``torch.testing.assert_close`` passes; ``message`` holds its message when it fails.
    agree : bool
        The verdict: within the tolerances, or the long-reduction rule above.
    err64_myatt, err64_torch : float or None
        For float32 and half-precision results: each side's ``max |result - torch in
        float64|`` (the fair judge when two such results differ); None for float64.
    agree64 : bool or None
        Whether myatt's float64 rerun agrees with torch's (None without a myatt rerun: a
        myatt side that is not one of myatt's own modules or functions).
    reason : str
        Why the result differs, or agrees though outside the tolerances, and which side is
        nearer to float64; empty when within the tolerances.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> r = myatt.compare(torch.nn.Linear(8, 4), np.ones((3, 8)))["output"]
    >>> r.name, r.shape, r.mismatched, r.within_tolerance, r.agree
    ('output', (3, 4), 0, True, True)
    """

    name: str
    shape: Tuple[int, ...]            #: myatt's shape
    torch_shape: Tuple[int, ...]      #: torch's shape
    dtype: str                        #: myatt's dtype ("float32", "float64", "float16", ...)
    torch_dtype: str                  #: torch's dtype, as torch names it
    rtol: float
    atol: float
    max_abs_err: float = float("nan")   #: max |myatt - torch| where both are finite
    max_rel_err: float = float("nan")   #: max |myatt - torch| / |torch| there (inf where torch is 0)
    mismatched: int = 0               #: elements assert_close counts as not close
    worst_index: Optional[Tuple[int, ...]] = None   #: the worst mismatch (None when there is none)
    myatt_value: float = float("nan")   #: myatt's value at worst_index
    torch_value: float = float("nan")   #: torch's value at worst_index
    within_tolerance: bool = False    #: torch.testing.assert_close passes
    agree: bool = False               #: the verdict (within tolerance, or the float64 rule)
    equal_nan: bool = True            #: NaN on both sides counts as agreement
    nonfinite_same: int = 0           #: positions with NaN on both sides or the same inf
    nonfinite_differ: int = 0         #: positions with NaN/inf on one side only (or opposite infs)
    message: str = ""                 #: assert_close's message when it fails
    err64_myatt: Optional[float] = None   #: max |myatt - torch in float64| (not for float64)
    err64_torch: Optional[float] = None   #: max |torch - torch in float64| (not for float64)
    agree64: Optional[bool] = None    #: myatt's and torch's float64 reruns agree
    reason: str = ""                  #: why it differs, or agrees outside the tolerances

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
        if self.within_tolerance:
            return f"{self.name}: agrees (max abs err {self.max_abs_err:.3g})"
        if self.agree:
            return f"{self.name}: agrees by the float64 rule: {self.reason}"
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
            if self.agree64 is False:
                s += "; the float64 reruns of the two sides differ too"
        return s


@dataclass
class Comparison:
    """The report of :func:`compare`: one :class:`ResultComparison` per result and gradient.

    ``bool(report)`` and ``report.agree`` say whether every result agrees (at
    ``torch.testing.assert_close`` tolerances, or by the long-reduction rule);
    ``print(report)`` shows a table (and Jupyter an HTML one); ``report["output"]`` is one
    result's :class:`ResultComparison`.

    Attributes
    ----------
    torch_module : str
        The torch side's name (its class, or a function's name).
    module : str
        The myatt side, as its ``repr`` or name.
    inputs : list of (str, tuple of int)
        The array arguments' names (the myatt side's: ``Q``, ``K``, ``V``; ``query``,
        ``key``, ``value``, ``key_padding_mask``; ``input``; or ``input[i]`` for a callable
        without a signature) and shapes.
    dtype : str
        The dtype both sides computed in.
    results : list of ResultComparison
        One per result, in the order the module returns them, then (``backward=True`` or
        ``grad_outputs``) one per gradient: the inputs', then the parameters'.
    notes : list of str
        What :func:`compare` did or left out, and why: both sides run in eval mode (or
        without dropout) where either would drop, float64 columns absent because the torch
        callable failed on float64 inputs. Printed under the header.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> report = myatt.compare(torch.nn.Linear(8, 4), np.ones((3, 8)))
    >>> print(report)                                # doctest: +ELLIPSIS
    myatt.compare: torch Linear vs myatt Linear(in_features=8, out_features=4, bias=True, dtype=float32)
    inputs: input (3, 8) as float32
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
                   "yes" if r.within_tolerance else "yes (f64)" if r.agree else "NO"]
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
        rtol, atol = _judge.DEFAULT_TOLERANCES.get(self.dtype, (None, None))
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
        by_rule = [r for r in self.results if r.agree and not r.within_tolerance]
        n = len(self.results)
        if self.agree and not by_rule:
            lines = [f"AGREE: all {n} result(s) match torch at assert_close tolerances."]
        elif self.agree:
            lines = [f"AGREE: all {n} result(s) agree with torch: {n - len(by_rule)} within "
                     f"assert_close tolerances, {len(by_rule)} by the float64 rule (outside "
                     f"them, myatt no further from float64 than torch):"]
        else:
            lines = ["DIFFER: " + "; ".join(r.name for r in self.results if not r.agree)
                     + " outside tolerance."]
        lines += ["  " + r.summary() for r in self.results if not r.agree or r in by_rule]
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


def _result_names(torch_fn, module, n):
    """MyAtt's or MultiheadAttention's names when either side is one (the torch callable
    may be a function around one), else output / result[i]."""
    mha = any(_is_mha(m) for m in (torch_fn, module))
    if n == 2 and (mha or module is _twins.multi_head_attention_forward):
        return ["attn_output", "attn_weights"]
    if n == 2 and any(all(hasattr(m, a) for a in _interop.MYATT_SIZES)
                      for m in (torch_fn, module)):
        return ["output", "attn_weights"]
    if n == 1:
        return ["output"]
    return [f"result[{i}]" for i in range(n)]


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _describe(module):
    if module is _twins.multi_head_attention_forward:
        return "myatt.MultiheadAttention (holding the function's weights)"
    if hasattr(module, "dtype") or not hasattr(module, "__name__"):
        return repr(module)
    prefix = "myatt." if str(getattr(module, "__module__", "")).startswith("myatt") else ""
    return prefix + module.__name__


_SCALARS = (int, float, bool, str, type(None), np.integer, np.floating, np.bool_)


class _Call:
    """One call's arguments, as both sides get them: array-likes converted to NumPy arrays of
    the myatt side's dtype (bool ones, masks, stay bool), scalars and None as they are; each
    argument named after the myatt side's parameters (``input[i]`` where it has none)."""

    def __init__(self, args, kwargs, names):
        def convert(i, x):
            if isinstance(x, _SCALARS):
                return x
            a = _interop.to_numpy(x)
            if a.dtype.kind not in "biu" and not _is_float(a.dtype):   # as myatt refuses them
                raise TypeError(f"compare(): inputs[{i}] has dtype {a.dtype}; myatt takes "
                                f"real numbers (bool, integer, float)")
            return a
        self.args = [convert(i, x) for i, x in enumerate(args)]
        self.kwargs = {k: convert(k, x) for k, x in kwargs.items()}
        self.names = [names[i] if names is not None and i < len(names) else f"input[{i}]"
                      for i in range(len(args))] + list(kwargs)

    def values(self):
        return self.args + list(self.kwargs.values())

    def arrays(self):
        """(name, array) of every array argument, in call order."""
        return [(n, x) for n, x in zip(self.names, self.values()) if isinstance(x, np.ndarray)]

    def cast(self, dtype):
        """The call with its arrays in `dtype` (bool ones stay bool), C-contiguous."""
        def conv(x):
            if not isinstance(x, np.ndarray):
                return x
            return np.array(x, dtype=np.bool_ if x.dtype == np.bool_ else dtype, order="C")
        c = _copy.copy(self)
        c.args = [conv(x) for x in self.args]
        c.kwargs = {k: conv(x) for k, x in self.kwargs.items()}
        return c

    def get(self, name):
        return dict(zip(self.names, self.values())).get(name)

    def set(self, name, value):
        i = self.names.index(name)
        if i < len(self.args):
            self.args[i] = value
        else:
            self.kwargs[name] = value

    def differentiable(self):
        """The names of the array arguments with gradients: floating ones that are no mask."""
        return [n for n, x in self.arrays() if _is_float(x.dtype) and n not in _twins.MASKS]


def _torch_drops(torch_fn, torch):
    """The dropout modules of a torch module in training mode: [(name, p)]."""
    if not (isinstance(torch_fn, torch.nn.Module) and torch_fn.training):
        return []
    return [(n or type(m).__name__, float(m.p)) for n, m in torch_fn.named_modules()
            if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0] + \
           [(n or type(m).__name__, float(m.dropout)) for n, m in torch_fn.named_modules()
            if isinstance(m, torch.nn.MultiheadAttention) and m.training and m.dropout > 0]


def _myatt_drops(module):
    """The same for a myatt module: its MultiheadAttention layers that drop."""
    found = []
    if isinstance(module, _twins.MODULE_TYPES):
        subs = [("", module)] + [(k, v) for k, v in getattr(module, "__dict__", {}).items()
                                 if isinstance(v, _twins.MODULE_TYPES)]
        found = [(n or type(m).__name__, m.dropout) for n, m in subs
                 if isinstance(m, _myatt_mha()) and m.training and m.dropout > 0]
    return found


def _myatt_mha():
    from . import MultiheadAttention
    return MultiheadAttention


class _Modes:
    """Puts both sides in eval mode where either would drop (torch's dropout modules and
    MultiheadAttention's own dropout; myatt's MultiheadAttention), or a function's dropout
    off (dropout_p=0; multi_head_attention_forward's training=False), and restores them."""

    def __init__(self, torch_fn, module, call, torch):
        self.saved, self.note = [], None
        drops = ([("torch's " + n, p) for n, p in _torch_drops(torch_fn, torch)]
                 + [("myatt's " + n, p) for n, p in _myatt_drops(module)])
        if drops:
            sides = [torch_fn] if isinstance(torch_fn, torch.nn.Module) else []
            sides += [module] if isinstance(module, _twins.MODULE_TYPES) else []
            for side in sides:
                mods = list(side.modules()) if hasattr(side, "modules") else _myatt_tree(side)
                self.saved += [(m, m.training) for m in mods]
                side.eval()
            names = ", ".join(f"{n} (p={p:g})" for n, p in drops[:3])
            more = f" and {len(drops) - 3} more" if len(drops) > 3 else ""
            self.note = (f"a side was in training mode with dropout {names}{more}: both "
                         f"compared in eval mode (no dropout; the modes restored afterwards)")
        p = call.get("dropout_p")
        if isinstance(p, (int, float)) and p > 0 and call.get("training") is not False:
            if "training" in call.names or module is _twins.multi_head_attention_forward:
                call.set("training", False) if "training" in call.names \
                    else call.kwargs.update(training=False)
                self.note = (f"dropout_p={p:g}: both compared with training=False (dropout "
                             f"draws a random mask on each side)")
            else:
                call.set("dropout_p", 0.0)
                self.note = (f"dropout_p={p:g}: both compared with dropout_p=0 (dropout draws "
                             f"a random mask on each side)")

    def restore(self):
        for m, training in self.saved:
            m.training = training


def _myatt_tree(module):
    """A myatt module and the myatt modules under it (its layers, a subclass's attributes)."""
    found, todo = [], [module]
    while todo:
        m = todo.pop()
        if any(m is f for f in found):
            continue
        found.append(m)
        todo += [getattr(m, n) for n in ("attn", "attn_combine", "out_proj") if hasattr(m, n)]
        todo += [v for v in getattr(m, "__dict__", {}).values()
                 if isinstance(v, _twins.MODULE_TYPES)]
    return found


def _cotangents(grad_outputs, outs, dtype):
    """One cotangent per output (None for an absent output or one left out): grad_outputs
    converted to `dtype`, or ones."""
    if grad_outputs is None:
        return [None if o is None else np.ones(np.shape(o), dtype) for o in outs]
    given = list(grad_outputs) if isinstance(grad_outputs, (tuple, list)) else [grad_outputs]
    if len(given) > len(outs):
        raise ValueError(f"compare(): {len(given)} grad_outputs for {len(outs)} result(s)")
    given += [None] * (len(outs) - len(given))
    return [None if g is None or o is None else
            np.array(_interop.to_numpy(g), dtype=dtype, order="C") for g, o in zip(given, outs)]


def _run_torch(torch_fn, call, dtype, device, cotangents, torch):
    """torch's results of the call in `dtype` (its arrays as tensors), and with cotangents
    its gradients: {name: tensor} of the differentiable arguments, then the parameters
    (named_parameters)."""
    grads_wanted = cotangents is not None
    leaves = {}

    def tensor(name, x):
        if not isinstance(x, np.ndarray):
            return x
        t = _interop.to_tensor(x.astype(np.bool_ if x.dtype == np.bool_ else dtype),
                               torch).to(device)
        if grads_wanted and name in call.differentiable():
            leaves[name] = t.requires_grad_(True)
        return t
    targs = [tensor(n, x) for n, x in zip(call.names, call.args)]
    tkwargs = {k: tensor(k, x) for k, x in call.kwargs.items()}
    with torch.set_grad_enabled(grads_wanted):
        outs = _as_tuple(torch_fn(*targs, **tkwargs))
    if not grads_wanted:
        return outs, None
    if isinstance(torch_fn, torch.nn.Module):
        leaves.update((n, p) for n, p in torch_fn.named_parameters() if p.requires_grad)
    pairs = [(o, _interop.to_tensor(c.astype(dtype), torch).to(device))
             for o, c in zip(outs, cotangents)
             if c is not None and o is not None and o.requires_grad]
    got = torch.autograd.grad([o for o, _ in pairs], list(leaves.values()),
                              [c for _, c in pairs], allow_unused=True) if pairs and leaves else []
    grads = {n: torch.zeros_like(t) if g is None else g
             for (n, t), g in zip(leaves.items(), got or [None] * len(leaves))}
    return tuple(o.detach() if o is not None else None for o in outs), grads


def _run_myatt(module, call, cotangents):
    """myatt's results of the call, and with cotangents its gradients {name: array}."""
    if cotangents is None:
        return _as_tuple(module(*call.args, **call.kwargs)), None
    try:
        result, pull = _twins.vjp(module, call.args, call.kwargs)
    except TypeError as e:
        if _twins.in_float64(module) is None:   # not one of myatt's
            raise TypeError(f"compare(): gradients need the myatt side to be one of myatt's "
                            f"modules or functions (myatt.vjp), got {_describe(module)}") from e
        raise
    outs = _as_tuple(result)
    return outs, pull(*[c for c in cotangents][:max(1, len(outs))])


def _torch_name(torch_fn):
    return (type(torch_fn).__name__ if hasattr(torch_fn, "forward")
            else getattr(torch_fn, "__name__", type(torch_fn).__name__))


def _float64_reruns(torch_fn, module, call, device, cotangents, notes, torch):
    """Both sides' float64 results and gradients of the call, or None where there is no
    rerun (a torch callable that fails on float64 is said in `notes`)."""
    call64 = call.cast(np.float64)
    cot64 = None if cotangents is None else [None if c is None else c.astype(np.float64)
                                             for c in cotangents]
    ref = torch_fn
    if isinstance(torch_fn, torch.nn.Module):
        ref = _copy.deepcopy(torch_fn).to(torch.float64)
    try:
        theirs = _run_torch(ref, call64, np.float64, device, cot64, torch)
    except (RuntimeError, TypeError) as e:   # a callable that does not take float64
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        notes.append(f"no float64 columns: {_torch_name(torch_fn)} failed on float64 inputs "
                     f"({type(e).__name__}: {first[:120]}); pass the torch module itself "
                     f"(it is copied to float64), or float64_reference=False")
        theirs = None
    m64 = _twins.in_float64(module)
    ours = None if m64 is None else _run_myatt(m64, call64, cot64)
    return ours, theirs


def _row(name, ours, theirs, ours64, theirs64, rtol, atol, equal_nan, torch):
    """The ResultComparison of one result (or gradient) and its float64 reruns."""
    ours = np.asarray(ours)
    theirs = theirs.detach().cpu()
    j = _judge.judge(ours, theirs.to(torch.float64).numpy(), rtol, atol, equal_nan,
                     ours64=ours64,
                     theirs64=None if theirs64 is None else _interop.to_numpy(theirs64))
    r = ResultComparison(name=name, shape=tuple(ours.shape), torch_shape=tuple(theirs.shape),
                         dtype=ours.dtype.name, torch_dtype=str(theirs.dtype).replace("torch.", ""),
                         rtol=rtol, atol=atol, equal_nan=equal_nan,
                         max_abs_err=j.max_abs, max_rel_err=j.max_rel, mismatched=j.mismatched,
                         worst_index=j.worst_index, within_tolerance=j.within_tolerance,
                         agree=j.agree, nonfinite_same=j.nonfinite_same,
                         nonfinite_differ=j.nonfinite_differ, err64_myatt=j.err64_myatt,
                         err64_torch=j.err64_torch, agree64=j.agree64, reason=j.reason)
    if j.worst_index is not None:
        r.myatt_value, r.torch_value = j.myatt_value, theirs[j.worst_index].item()
    if not j.within_tolerance:
        try:
            torch.testing.assert_close(_interop.to_tensor(ours, torch), theirs,
                                       rtol=rtol, atol=atol, equal_nan=equal_nan)
        except AssertionError as e:
            r.message = str(e)
    return r


def compare(torch_fn: Any, *args: Any, module: Any = None, grad_outputs: Any = None,
            backward: bool = False, rtol: Optional[float] = None, atol: Optional[float] = None,
            equal_nan: bool = True, float64_reference: bool = True, **kwargs: Any) -> Comparison:
    """Run `torch_fn` and its myatt twin on the same arguments and report how they differ.

    Both sides get the same values, converted to the myatt side's dtype (a module's, else
    the floating arguments' as torch promotes them: float16 stays float16, bfloat16 with
    float16 is float32; bool arrays, such as masks, stay bool); every result is compared as ``torch.testing.assert_close``
    compares it, and with ``backward=True`` (or `grad_outputs`) every gradient too: torch's
    autograd against myatt's pullback (:func:`myatt.vjp`) given the same cotangents.
    Where either side would drop (a torch module in training mode with a dropout of p > 0,
    MultiheadAttention's own `dropout` included, or a myatt MultiheadAttention that drops),
    both run in eval mode and their modes are restored afterwards; a function's
    ``dropout_p > 0`` becomes 0 on both sides (``training=False`` for
    ``multi_head_attention_forward``). The report's ``notes`` say so.

    Parameters
    ----------
    torch_fn : torch.nn.Module or callable
        A torch module with a myatt twin (the tutorial's ``MyAtt``,
        ``torch.nn.MultiheadAttention``, ``torch.nn.Linear``: the twin holds a copy of its
        weights), a torch function with one (``F.scaled_dot_product_attention``,
        ``F.linear``, ``torch.softmax`` / ``F.softmax``, ``torch.bmm``,
        ``F.multi_head_attention_forward``), or, with `module`, any torch module or function.
    *args : array_like or scalar
        The call's positional arguments (NumPy arrays, torch tensors, array-likes), e.g.
        ``Q, K, V``. Python and NumPy scalars and None (a softmax's ``dim``, a missing bias)
        are passed to both sides as they are.
    module : callable, optional
        The myatt side. Default: the twin above. Pass your own :class:`myatt.MyAtt` to check
        it against a torch model, or any callable.
    grad_outputs : array_like or sequence of array_like, optional
        One cotangent per result (None leaves a result out, e.g. ``attn_weights``): compare
        the gradients of ``sum(result * grad_output)`` over the results with respect to every
        floating-point array argument that is not a mask and every parameter.
    backward : bool, default False
        Compare the gradients with cotangents of ones (when `grad_outputs` is not given).
    rtol, atol : float, optional
        Tolerances, both or neither. Default: ``assert_close``'s for the dtype
        (float32: 1.3e-6 and 1e-5; float64: 1e-7 and 1e-7; float16: 1e-3 and 1e-5;
        bfloat16: 1.6e-2 and 1e-5).
    equal_nan : bool, default True
        Whether a NaN on both sides at the same position agrees. True because a NaN in the
        inputs gives NaNs, and myatt giving torch's NaNs is agreement; False is
        ``assert_close``'s own default, where any NaN is a mismatch. Either way the
        report counts the NaN/inf positions the two sides share (``nonfinite_same``)
        apart from those where only one side has a NaN or an infinity
        (``nonfinite_differ``, always a mismatch), and the max errors are over the
        positions where both values are finite.
    float64_reference : bool, default True
        For float32, float16 and bfloat16, also rerun both sides in float64 on the same
        weights and arguments (torch's module copied to float64, myatt's rebuilt in
        float64), report each side's error against torch's float64 result, and judge a result outside the
        tolerances by the spec's long-reduction rule (it agrees when the two float64 reruns
        agree and myatt's error is no larger than torch's). A plain torch callable is called
        with float64 inputs; when that fails (a function around a float32 module) the
        report's ``notes`` say why the float64 columns are absent.
    **kwargs
        The call's keyword arguments (``attn_mask=``, ``is_causal=``, ``key_padding_mask=``,
        ...), passed to both sides, arrays converted as `args` are.

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
        When `torch_fn` has no myatt twin and no `module` is given, when the torch
        module's dtype is not the myatt side's, when an array argument is not real numbers,
        or when gradients are asked of a myatt side that myatt.vjp does not take.
    ValueError
        When only one of `rtol` and `atol` is given, or either is negative or NaN, when the
        two sides return different numbers of results, or when there are more
        `grad_outputs` than results.

    See Also
    --------
    MyAtt.from_torch, MultiheadAttention.from_torch, Linear.from_torch : the twins
        `compare` builds.
    vjp : myatt's gradients, which ``backward=True`` compares.

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

    A torch function against its myatt twin, keyword arguments and gradients included:

    >>> import torch.nn.functional as F
    >>> q = np.linspace(-1, 1, 2 * 5 * 8, dtype=np.float32).reshape(2, 5, 8)
    >>> report = myatt.compare(F.scaled_dot_product_attention, q, q, q, is_causal=True,
    ...                        backward=True)
    >>> [r.name for r in report.results], report.agree
    (['output', 'grad_query', 'grad_key', 'grad_value'], True)

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
        module = _twins.function_twin(torch_fn, torch) or _twins.module_twin(torch_fn)
    if module is None:
        raise TypeError(f"compare(): no myatt twin for {_describe(torch_fn)} (the tutorial's "
                        f"MyAtt, torch.nn.MultiheadAttention and torch.nn.Linear have one, and "
                        f"F.scaled_dot_product_attention, F.linear, torch.softmax, F.softmax, "
                        f"torch.bmm and F.multi_head_attention_forward); pass module=")
    call = _Call(args, kwargs, _twins.parameter_names(module) or _twins.parameter_names(torch_fn))
    if hasattr(module, "dtype"):
        dtype = np.dtype(module.dtype)
    else:
        # the floating arrays' promotion, as torch's (ml_dtypes': bfloat16 with float16
        # is float32); float32 where there are none
        floats = [x.dtype for _, x in call.arrays() if _is_float(x.dtype)]
        dtype = np.result_type(*floats) if floats else np.dtype(np.float32)
    call = call.cast(dtype)
    if rtol is None:
        rtol, atol = _judge.tolerances(dtype)
    params = list(torch_fn.parameters()) if hasattr(torch_fn, "parameters") else []
    device = params[0].device if params else torch.device("cpu")
    if params and params[0].is_floating_point() and str(params[0].dtype) != f"torch.{dtype.name}":
        raise TypeError(f"compare(): the torch module is {params[0].dtype} but the myatt side "
                        f"computes in {dtype.name}: convert one of them first "
                        f"(module.float() / module.double(), or dtype= for myatt)")
    modes = _Modes(torch_fn, module, call, torch)
    try:
        return _compare(torch_fn, module, call, dtype, device, rtol, atol, equal_nan,
                        float64_reference, grad_outputs, backward, modes, torch)
    finally:
        modes.restore()


def _compare(torch_fn, module, call, dtype, device, rtol, atol, equal_nan, float64_reference,
             grad_outputs, backward, modes, torch):
    notes = [] if modes.note is None else [modes.note]
    ours = _as_tuple(module(*call.args, **call.kwargs))
    cotangents = None
    if backward or grad_outputs is not None:
        cotangents = _cotangents(grad_outputs, ours, dtype)
        ours, our_grads = _run_myatt(module, call, cotangents)
    theirs, their_grads = _run_torch(torch_fn, call, dtype, device, cotangents, torch)
    if len(ours) != len(theirs):
        raise ValueError(f"compare(): myatt returned {len(ours)} result(s), torch {len(theirs)}")
    names = _result_names(torch_fn, module, len(ours))
    report = Comparison(torch_module=_torch_name(torch_fn), module=_describe(module),
                        inputs=[(n + " bool" * (a.dtype == np.bool_), tuple(a.shape))
                                for n, a in call.arrays()],
                        dtype=dtype.name, notes=notes)
    ours64 = theirs64 = (None, None)
    if float64_reference and dtype != np.float64:
        o64, t64 = _float64_reruns(torch_fn, module, call, device, cotangents, notes, torch)
        if t64 is not None and len(t64[0]) != len(ours):
            notes.append(f"no float64 columns: {report.torch_module} gave {len(t64[0])} "
                         f"result(s) on float64 inputs, {len(ours)} on {dtype.name}")
        elif t64 is not None:
            ours64, theirs64 = o64 or (None, None), t64
    outs64, grads64 = ours64
    touts64, tgrads64 = theirs64
    for i, (n, o, t) in enumerate(zip(names, ours, theirs)):
        if o is None or t is None:
            continue
        report.results.append(_row(n, o, t, None if outs64 is None else outs64[i],
                                   None if touts64 is None else touts64[i],
                                   rtol, atol, equal_nan, torch))
    for n, t in (their_grads or {}).items():
        if n not in our_grads:
            raise TypeError(f"compare(): myatt's pullback gives no gradient of {n!r}")
        report.results.append(_row(f"grad_{n}", our_grads[n], t,
                                   None if grads64 is None else grads64.get(n),
                                   None if tgrads64 is None else tgrads64.get(n),
                                   rtol, atol, equal_nan, torch))
    return report
