"""Validating a whole torch model: ``myatt.validate``, ``myatt.validating`` and their report.

``validate(model, *args)`` runs the model once; every call of scaled-dot-product attention,
multi-head attention, linear, softmax and bmm it makes is recorded and rerun by myatt on the
same values, and judged by the spec's rule (``myatt._judge``). This file holds the public
functions and the report, and needs NumPy only; the torch side (the recording through torch's
dispatch and function modes and module hooks, the reruns, the judging) lives in
``_validate_torch.py`` and the ``_validate_*.py`` files it imports, imported when a
validation starts.
"""
import html as _html
import re
from dataclasses import asdict, dataclass, field
from typing import Any, List, Optional, Tuple

import numpy as np

__all__ = ["validate", "validating", "Validation", "CallReport", "ResultReport"]

MODES = ("shadow", "replace")


def _torch_machinery():
    """The torch side (imports torch), or a clear ImportError."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError("myatt.validate and myatt.validating need PyTorch (pip install "
                          "torch): they run a torch model and rerun its calls with myatt; "
                          "myatt itself needs only NumPy") from e
    from . import _validate_torch
    return _validate_torch


@dataclass
class ResultReport:
    """One compared tensor of a call: its output, or the gradient of one of its inputs.

    ``name`` is ``"output"`` (``"attn_output"``, ``"attn_weights"`` for multi-head
    attention) or ``"grad <input>"``; the numbers are those of :func:`myatt._judge.judge`.
    """

    name: str
    shape: Tuple[int, ...]
    agree: bool
    max_abs: float
    max_rel: float
    myatt_error: Optional[float]
    torch_error: Optional[float]
    mismatched: int = 0
    size: int = 0
    reason: str = ""


@dataclass
class CallReport:
    """One call the model made: a row of :attr:`Validation.calls`.

    Attributes
    ----------
    index : int
        Its place among the recorded calls (0 first).
    op : str
        ``"sdpa"``, ``"mha"``, ``"linear"``, ``"softmax"``, ``"bmm"``, or torch's name of an
        op myatt has no twin for (``"aten._transformer_encoder_layer_fwd"``).
    module : str
        The qualified name of the module that made the call, relative to the model
        (``"layers.0.self_attn"``), ``""`` for the model itself or no module.
    shapes : tuple of tuple of int
        The shapes of the call's tensor inputs.
    dtype : str
        The dtype of the call (``"float32"``).
    max_abs, max_rel : float
        The largest ``|myatt - torch|`` and ``|myatt - torch| / |torch|`` over its results
        (output and, with ``backward=True``, gradients).
    myatt_error, torch_error : float or None
        Each side's largest error against torch's float64 rerun of the call (None for
        float64 calls, which have no wider rerun, and for skipped ones). Where a result is
        outside the tolerance myatt reruns the call in float64 too; when the two float64
        reruns disagree (a broken kernel is broken in float64 too) each side's error is
        against its own rerun, and the reason says so.
    verdict : str
        ``"agree"``, ``"differ"`` or ``"skipped"``.
    reason : str
        Why it differs, agrees outside the tolerance (the long-reduction rule), or was skipped.
    torch_op : str
        The torch function or aten op the call was seen as (``"aten.addmm.default"``).
    results : list of ResultReport
        Each compared tensor.
    """

    index: int
    op: str
    module: str
    shapes: Tuple[Tuple[int, ...], ...]
    dtype: str
    max_abs: float = float("nan")
    max_rel: float = float("nan")
    myatt_error: Optional[float] = None
    torch_error: Optional[float] = None
    verdict: str = "skipped"
    reason: str = ""
    torch_op: str = ""
    results: List[ResultReport] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        """The verdict is not ``"differ"`` (a skipped call does not differ)."""
        return self.verdict != "differ"


def _fmt(x):
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.3g}"


def _shapes(shapes, most=4):
    text = " ".join("(" + ",".join(str(n) for n in s) + ")" for s in shapes[:most])
    return text + (f" +{len(shapes) - most}" if len(shapes) > most else "")


_LAYER = re.compile(r"(?<=\.)\d+(?=\.|$)")


@dataclass
class Validation:
    """The report of :func:`validate` or :func:`validating`.

    ``report.agree`` (or ``bool(report)``) is True when no call differs; ``print(report)``
    shows a table, worst calls first (repeated layers that agree collapsed into one line),
    and one summary line; ``report.calls`` has every row (:class:`CallReport`), in the
    order the calls were made; ``report.outputs`` the end-to-end differences of a
    ``mode="replace"`` run; ``to_dict()``, ``plot()`` and, in Jupyter, an HTML table.

    Attributes
    ----------
    mode : str
        ``"shadow"`` or ``"replace"``.
    model : str
        What ran: the model's class name, or ``"validating block"``.
    backward : bool
        Whether the gradients were compared too.
    calls : list of CallReport
        One per recorded call.
    outputs : list of ResultReport
        ``mode="replace"`` in ``validate``: each output of the model run on myatt against
        the same model run on torch, the loss ``sum(output * grad_output)`` (`grad_outputs`,
        or ones), and with ``backward=True`` the gradient of every parameter.
    notes : list of str
        What was done or left out, and why.
    """

    mode: str
    model: str
    backward: bool = False
    calls: List[CallReport] = field(default_factory=list)
    outputs: List[ResultReport] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    rtol: Optional[float] = None
    atol: Optional[float] = None

    @property
    def agree(self) -> bool:
        """True when no call differs and every end-to-end result agrees."""
        return (all(c.verdict != "differ" for c in self.calls)
                and all(r.agree for r in self.outputs))

    def __bool__(self) -> bool:
        return self.agree

    @property
    def differ(self) -> List[CallReport]:
        """The calls whose verdict is ``"differ"``."""
        return [c for c in self.calls if c.verdict == "differ"]

    @property
    def skipped(self) -> List[CallReport]:
        """The calls myatt could not rerun, each with its reason."""
        return [c for c in self.calls if c.verdict == "skipped"]

    def assert_agree(self) -> None:
        """Raise AssertionError, with the table, when a call or an end-to-end result differs."""
        if not self.agree:
            raise AssertionError("myatt and torch differ\n" + str(self))

    # ---- the table -------------------------------------------------------------------
    def _ordered(self):
        """Rows worst first: differing calls (largest difference first), then agreeing ones
        (largest difference first), then skipped ones in call order."""
        def key(c):
            rank = {"differ": 0, "agree": 1, "skipped": 2}[c.verdict]
            size = -c.max_abs if c.verdict != "skipped" and not np.isnan(c.max_abs) else 0.0
            return (rank, size if c.verdict != "skipped" else c.index)
        return sorted(self.calls, key=key)

    def _lines(self, limit=40, collapse_from=20):
        """(header cells, rows of cells): differing calls one per row; in a report of more
        than `collapse_from` calls, agreeing and skipped calls collapsed by op, module with
        its layer numbers as '*', dtype and reason."""
        head = ["#", "op", "module", "shapes", "dtype", "max abs", "max rel", "myatt err",
                "torch err", "verdict"]
        rows, groups = [], {}
        for c in self._ordered():
            if c.verdict == "differ" or len(self.calls) <= collapse_from:
                rows.append([c])
                continue
            key = (c.verdict, c.op, _LAYER.sub("*", c.module), c.dtype,
                   c.reason if c.verdict == "skipped" else "")
            if key in groups:
                groups[key].append(c)
            else:
                groups[key] = [c]
                rows.append(groups[key])
        cells = []
        for group in rows[:limit]:
            c = group[0]      # the worst of its group (rows are sorted worst first)
            module = c.module if len(group) == 1 else _LAYER.sub("*", c.module)
            index = str(c.index) if len(group) == 1 else f"{c.index} +{len(group) - 1}"
            verdict = c.verdict if c.verdict != "skipped" else "skipped"
            cells.append([index, c.op, module or "-", _shapes(c.shapes), c.dtype,
                          _fmt(c.max_abs), _fmt(c.max_rel), _fmt(c.myatt_error),
                          _fmt(c.torch_error), verdict])
        more = len(rows) - limit if len(rows) > limit else 0
        return head, cells, more

    def _summary(self):
        n = len(self.calls)
        ops = {}
        for c in self.calls:
            ops[c.op] = ops.get(c.op, 0) + 1
        differ, skipped = len(self.differ), len(self.skipped)
        judged = n - skipped
        bad_out = [r.name for r in self.outputs if not r.agree]
        if self.agree:
            s = f"AGREE: {judged} of {n} calls agree with torch"
        else:
            s = f"DIFFER: {differ} of {n} calls differ"
            if bad_out:
                s += f"; end to end: {', '.join(bad_out)}"
        if skipped:
            s += f", {skipped} skipped (not rerun: see their reasons)"
        if self.outputs:
            s += (f"; end to end, {sum(r.agree for r in self.outputs)} of "
                  f"{len(self.outputs)} results agree")
        return s + "."

    def _header(self):
        n = len(self.calls)
        ops = {}
        for c in self.calls:
            ops[c.op] = ops.get(c.op, 0) + 1
        what = ", ".join(f"{k} {v}" for k, v in ops.items())
        tol = ("assert_close's defaults for each dtype" if self.rtol is None
               else f"rtol={self.rtol:g}, atol={self.atol:g}")
        return ([f"myatt.validate: {self.model}, mode={self.mode}"
                 + (", backward" if self.backward else "")
                 + f": {n} call(s)" + (f" ({what})" if what else ""),
                 f"tolerance: {tol}; errors are against torch's float64 rerun of each call"]
                + [f"note: {x}" for x in self.notes])

    def _details(self):
        lines = []
        for c in self.differ[:10]:
            lines.append(f"  #{c.index} {c.op} in {c.module or '-'}: {c.reason}")
        reasons = {}
        for c in self.skipped:
            reasons.setdefault(c.reason, []).append(c)
        for reason, cs in reasons.items():
            lines.append(f"  skipped {len(cs)} x {cs[0].op}: {reason}")
        for r in self.outputs:
            if not r.agree:
                lines.append(f"  end to end {r.name}: {r.reason}")
        return lines

    def _output_cells(self):
        return [[r.name, _shapes([r.shape]), _fmt(r.max_abs), _fmt(r.max_rel),
                 _fmt(r.myatt_error), _fmt(r.torch_error), "agree" if r.agree else "differ"]
                for r in self.outputs]

    def __str__(self) -> str:
        head, cells, more = self._lines()
        table = _table([head] + cells)
        out = self._header() + [""] + table
        if more:
            out.append(f"... and {more} more rows (report.calls has every call)")
        if self.outputs:
            out += ["", "end to end (the model on myatt against the model on torch):"]
            out += _table([["result", "shape", "max abs", "max rel", "myatt err",
                            "torch err", "verdict"]] + self._output_cells())
        out += ["", self._summary()] + self._details()
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head, cells, more = self._lines()
        colour = "#1a7f37" if self.agree else "#cf222e"

        def table(head, cells):
            th = "".join(f"<th>{_html.escape(c)}</th>" for c in head)
            body = "".join(
                "<tr" + (" style='color: #cf222e'" if row[-1] == "differ" else "") + ">"
                + "".join(f"<td>{_html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
            return (f"<table style='font-family: monospace'><thead><tr>{th}</tr></thead>"
                    f"<tbody>{body}</tbody></table>")

        parts = ["<div><div style='font-family: monospace'>"
                 + "<br>".join(_html.escape(x) for x in self._header()) + "</div>",
                 table(head, cells)]
        if more:
            parts.append(f"<div>... and {more} more rows (report.calls has every call)</div>")
        if self.outputs:
            parts.append(table(["result", "shape", "max abs", "max rel", "myatt err",
                                "torch err", "verdict"], self._output_cells()))
        parts.append(f"<div style='color: {colour}; font-weight: bold'>"
                     + _html.escape(self._summary()) + "</div>")
        details = self._details()
        if details:
            parts.append("<div style='font-family: monospace'>"
                         + "<br>".join(_html.escape(x) for x in details) + "</div>")
        return "".join(parts) + "</div>"

    def to_dict(self) -> dict:
        """The report as plain Python (lists, dicts, str, float, None): JSON-ready."""
        def clean(x):
            if isinstance(x, float) and np.isnan(x):
                return None
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            return x
        return clean({"mode": self.mode, "model": self.model, "backward": self.backward,
                      "agree": self.agree, "rtol": self.rtol, "atol": self.atol,
                      "calls": [asdict(c) for c in self.calls],
                      "outputs": [asdict(r) for r in self.outputs], "notes": list(self.notes)})

    def plot(self, ax=None):
        """Each call's error against its float64 rerun, myatt's beside torch's, and the
        difference between the two (log scale); differing calls circled, skipped calls as
        grey ticks at the bottom. Needs matplotlib.

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Where to draw (default: a new figure).

        Returns
        -------
        matplotlib.axes.Axes
        """
        try:
            import matplotlib.pyplot as plt
            from matplotlib.ticker import MaxNLocator
        except ImportError as e:
            raise ImportError("Validation.plot() needs matplotlib (pip install matplotlib)") from e
        if ax is None:
            _, ax = plt.subplots(figsize=(min(12, 5 + 0.12 * len(self.calls)), 3.6))
        judged = [c for c in self.calls if c.verdict != "skipped" and c.myatt_error is not None]
        x = np.array([c.index for c in judged], dtype=float)
        m = np.array([c.myatt_error for c in judged])
        t = np.array([c.torch_error for c in judged])
        d = np.array([c.max_abs for c in judged])
        # zeros (the same bits) drawn on a floor a decade below the smallest error
        values = np.concatenate([m, t, d])
        positive = values[np.isfinite(values) & (values > 0)]
        floor = positive.min() / 10 if positive.size else 1e-12
        m, t, d = (np.where(v > 0, v, floor) for v in (m, t, d))
        ax.set_yscale("log")
        if len(judged):
            ax.scatter(x - 0.15, m, s=16, marker="o", color="#1f77b4", label="myatt vs float64")
            ax.scatter(x + 0.15, t, s=16, marker="s", color="#ff7f0e", label="torch vs float64")
            ax.scatter(x, d, s=22, marker="x", color="#555555",
                       label="|myatt - torch| (0: at the bottom)")
            bad = [i for i, c in enumerate(judged) if c.verdict == "differ"]
            if bad:
                ax.scatter(x[bad], d[bad], s=110, facecolors="none", edgecolors="#cf222e",
                           linewidths=1.5, label="differs")
        skipped = [c.index for c in self.calls if c.verdict == "skipped"]
        if skipped:
            ax.plot(skipped, [0.03] * len(skipped), "|", color="grey", markersize=12,
                    transform=ax.get_xaxis_transform(), label="skipped")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("call (in the order the model made them)")
        ax.set_ylabel("max abs error")
        ax.set_title(f"myatt.validate: {self.model} ({self.mode}), "
                     f"{len(self.differ)} of {len(self.calls)} calls differ")
        ax.grid(True, which="major", alpha=0.3)
        if len(judged) or skipped:
            ax.legend(fontsize="small", loc="best")
        return ax


def _table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    left = {1, 2} if len(rows[0]) == 10 else {0}
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]


def validate(model: Any, *args: Any, mode: str = "shadow", backward: bool = False,
             grad_outputs: Any = None, rtol: Optional[float] = None,
             atol: Optional[float] = None, **kwargs: Any) -> Validation:
    """Run ``model(*args, **kwargs)`` once and check every attention, linear, softmax and bmm
    call it makes against myatt, rerun on the same values.

    Parameters
    ----------
    model : torch.nn.Module or callable
        What runs; module names in the report are relative to it when it is a module.
    *args, **kwargs
        Its arguments (tensors, masks, flags), passed as they are.
    mode : {"shadow", "replace"}
        ``"shadow"`` (default): torch runs as it would without validation (the same bits,
        its fast paths kept); each call is judged on its own inputs. ``"replace"``: myatt's
        results flow on (tensors of the call's dtype, shape and device, with gradients
        through :func:`myatt.vjp`), and the report adds the end-to-end difference of the
        model's outputs against the same model on torch (``report.outputs``).
    backward : bool
        Also back-propagate the outputs (`grad_outputs`, or ones) and compare each call's
        input and weight gradients: torch's autograd against myatt's pullback, given the
        same cotangent. The forward then runs with gradients enabled. Parameters' ``.grad``
        are left untouched (``torch.autograd.grad``).
    grad_outputs : Tensor or sequence of Tensor, optional
        The cotangents of the model's floating outputs that require grad, in order.
    rtol, atol : float, optional
        Tolerances, both or neither; default: ``assert_close``'s for each call's dtype.

    Returns
    -------
    Validation

    Raises
    ------
    ImportError
        When torch is not installed.
    ValueError
        For an unknown `mode`, only one of `rtol` and `atol`, or ``backward=True`` on a
        model none of whose outputs requires grad.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
    ...                                          batch_first=True)
    >>> report = myatt.validate(layer, torch.randn(2, 5, 16))
    >>> report.agree, sorted({c.op for c in report.calls})
    (True, ['linear', 'mha', 'sdpa'])
    """
    _check_arguments(mode, rtol, atol)
    return _torch_machinery().validate(model, args, kwargs, mode=mode, backward=bool(backward),
                                       grad_outputs=grad_outputs, rtol=rtol, atol=atol)


def validating(mode: str = "shadow", backward: bool = False, rtol: Optional[float] = None,
               atol: Optional[float] = None):
    """A context manager: every call made inside the block (a ``generate`` loop, a
    training step) is recorded as :func:`validate` records it; the report it gives is
    filled when the block ends.

    The calls of the thread that entered the block are recorded (and of torch's backward
    run for it); other threads run untouched and unrecorded. Blocks nest: each records the
    calls made inside it (an inner block's are in the outer report too); a nested block
    must have the outer one's mode (else ``ValueError``). With ``backward=True`` each call's
    gradients are compared when a backward pass inside the block reaches it. An exception
    raised inside propagates; the recording stops cleanly and the calls made before it are
    judged.

    Examples
    --------
    >>> import torch
    >>> lin = torch.nn.Linear(8, 4)
    >>> with myatt.validating() as report:
    ...     y = torch.softmax(lin(torch.randn(3, 8)), dim=-1)
    >>> [(c.op, c.module, c.verdict) for c in report.calls]
    [('linear', '', 'agree'), ('softmax', '', 'agree')]
    """
    _check_arguments(mode, rtol, atol)
    return _torch_machinery().Session(mode=mode, backward=bool(backward), rtol=rtol, atol=atol)


def _check_arguments(mode, rtol, atol):
    if mode not in MODES:
        raise ValueError(f"mode must be 'shadow' or 'replace', got {mode!r}")
    if (rtol is None) != (atol is None):
        raise ValueError("give both rtol and atol, or neither")
    if rtol is not None and not (rtol >= 0 and atol >= 0):
        raise ValueError(f"rtol and atol must be >= 0, got {rtol!r} and {atol!r}")
