"""Attention heatmaps, in the manner of the PyTorch seq2seq tutorial's ``showAttention``.

matplotlib is an optional extra (``pip install "myatt[plot]"``); it is imported
when a plot is drawn, never when ``myatt`` is imported.
"""
import unicodedata
from typing import Any, Dict, FrozenSet, Optional, Sequence

import numpy as np

from . import _interop

__all__ = ["plot_attention"]

# Families with CJK glyphs, tried first when labels need them (Debian: fonts-noto-cjk,
# fonts-wqy-microhei, fonts-wqy-zenhei; macOS and Windows names after them).
CJK_FAMILIES = ["Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC",
                "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Droid Sans Fallback",
                "AR PL UMing CN", "PingFang SC", "Hiragino Sans GB", "Heiti SC",
                "Microsoft YaHei", "SimHei", "Arial Unicode MS"]


def _import_pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("myatt.plot_attention needs matplotlib: pip install matplotlib "
                          "(or pip install \"myatt[plot]\")") from e
    return plt


_CHARMAPS: Dict[str, FrozenSet[int]] = {}

# A glyph that stands for more code points than this is a placeholder, not a letter:
# "Last Resort" fonts (matplotlib >= 3.11 ships Last Resort High-Efficiency) map every
# code point of a Unicode block to one box showing the block's name, 371 glyphs for
# all 1.1 million code points. Real fonts share a glyph among a few code points at most
# (a space and a no-break space; a CJK compatibility ideograph and its unified twin).
_PLACEHOLDER_SHARE = 64


def _charmap(path: str) -> FrozenSet[int]:
    """The code points a font file draws with a glyph of their own (cached).

    Code points mapped to .notdef or to a placeholder glyph shared by more than
    _PLACEHOLDER_SHARE code points (a Last Resort font's boxes) are left out.
    """
    if path not in _CHARMAPS:
        from collections import Counter

        from matplotlib import ft2font

        try:
            cmap = ft2font.FT2Font(path).get_charmap()
        except (OSError, RuntimeError, ValueError):
            cmap = {}
        share = Counter(cmap.values())
        _CHARMAPS[path] = frozenset(c for c, g in cmap.items()
                                    if g != 0 and share[g] <= _PLACEHOLDER_SHARE)
    return _CHARMAPS[path]


def _fallback_family(chars, exclude=None):
    """The name of an installed font family that has a glyph for each of `chars`, or None.

    Known CJK families first, then every font matplotlib knows, then system fonts it
    has not listed yet (its font cache may predate a font installed since). The family
    `exclude` (the default one, which lacks them) is never the answer.
    """
    from matplotlib import font_manager

    fm = font_manager.fontManager
    codes = {ord(c) for c in chars}

    def search(entries):
        entries = sorted(entries, key=lambda f: (f.name not in CJK_FAMILIES,
                                                 CJK_FAMILIES.index(f.name)
                                                 if f.name in CJK_FAMILIES else 0, f.name))
        for f in entries:
            if f.name != exclude and codes <= _charmap(f.fname):
                return f.name
        return None

    found = search(fm.ttflist)
    if found is None:
        known = {f.fname for f in fm.ttflist}
        for path in font_manager.findSystemFonts():
            if path not in known:
                try:
                    fm.addfont(path)
                except Exception:   # an unreadable font file: skip it
                    continue
        found = search([f for f in fm.ttflist if f.fname not in known])
    return found


def label_fonts(labels):
    """None when matplotlib's default font has a glyph for every character of `labels`;
    else [default family, a family with the missing glyphs (CJK, for instance)].

    Warns, naming what to install, when no installed font has those glyphs.
    """
    import warnings

    from matplotlib import font_manager

    text = "".join(str(s) for s in labels)
    default_path = font_manager.findfont(font_manager.FontProperties())
    default_cmap = _charmap(default_path)
    missing = sorted({c for c in text if not c.isspace() and ord(c) not in default_cmap
                      and unicodedata.category(c)[0] != "C"})
    if not missing:
        return None
    default_family = font_manager.get_font(default_path).family_name
    extra = _fallback_family(missing, exclude=default_family)
    if extra is None:
        warnings.warn(f"myatt.plot_attention: no installed font has glyphs for "
                      f"{''.join(missing[:10])!r}; install one with them (for Chinese, "
                      f"Debian's fonts-noto-cjk or fonts-wqy-microhei)", UserWarning,
                      stacklevel=4)
        return None
    # The default font first (its Latin glyphs), then the one with the rest: matplotlib
    # >= 3.6 falls back glyph by glyph along the list.
    return [default_family, extra]


def _font_kw(labels):
    family = label_fonts(labels)
    return {} if family is None else {"fontfamily": family}


def _labels(labels, n, what):
    if labels is None:
        return None
    labels = [str(s) for s in labels]
    if len(labels) != n:
        raise ValueError(f"plot_attention(): {what} has {len(labels)} labels for {n} "
                         f"{'columns' if what == 'x_labels' else 'rows'} of weights")
    return labels


def _draw(ax, w, xl, yl, cmap, x_rotation, **norm):
    """One heatmap of `w` [rows, cols] on `ax`, labelled; returns the image."""
    rows, cols = w.shape
    image = ax.matshow(w.astype(np.float64), cmap=cmap, **norm)
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    if xl is not None:
        # Along the top (matshow's side), slanted so that short words such as "I" stay
        # legible (the tutorial's 90 degrees turns an "I" into a dash): x_rotation=90 for that.
        ax.set_xticklabels(xl, rotation=x_rotation, rotation_mode="anchor",
                           ha="left" if x_rotation else "center",
                           va="center" if x_rotation else "bottom", **_font_kw(xl))
    if yl is not None:
        ax.set_yticklabels(yl, **_font_kw(yl))
    return image


def _select(weights, batch):
    """`weights` as a real [rows, cols] or [heads, rows, cols] array: item `batch` of the
    first axis when given, then leading axes of size 1 dropped, a 1-D vector as one row."""
    w = _interop.to_numpy(weights)
    if w.dtype.kind not in "biuf":
        raise TypeError(f"plot_attention(): weights must be real numbers, got {w.dtype}")
    if batch is not None:
        if isinstance(batch, (bool, np.bool_)) or not isinstance(batch, (int, np.integer)):
            raise TypeError(f"plot_attention(): batch must be an int, got "
                            f"{type(batch).__name__}")
        if w.ndim not in (3, 4):
            raise ValueError(f"plot_attention(): batch needs weights with a batch axis, "
                             f"[N, L, S] or [N, H, L, S], got shape {w.shape}")
        if not -w.shape[0] <= batch < w.shape[0]:
            raise ValueError(f"plot_attention(): batch {batch} is out of range for "
                             f"{w.shape[0]} batch items (weights of shape {w.shape})")
        w = w[batch]
    while w.ndim > 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim == 4:
        raise ValueError(f"plot_attention(): weights of shape {tuple(np.shape(weights))} "
                         f"are [N, H, L, S] with N = {w.shape[0]}: pass batch= (the batch "
                         f"item to draw)")
    if w.ndim not in (2, 3):
        raise ValueError(f"plot_attention(): weights must be [rows, cols], [heads, rows, "
                         f"cols] or [N, heads, rows, cols] (leading axes of size 1 are "
                         f"dropped), got shape {tuple(np.shape(weights))}")
    return w


def _head_axes(ax, heads, rows, cols, plt):
    """The figure and a 1-D array of `heads` Axes: `ax` flattened, or a new grid."""
    if ax is None:
        ncols = min(heads, 4)
        nrows = -(-heads // ncols)
        fig, grid = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                                 figsize=(ncols * max(2.5, 0.4 * cols + 1.2) + 1.0,
                                          nrows * max(2.2, 0.4 * rows + 1.2)))
        grid = grid.ravel()
        for extra in grid[heads:]:
            extra.remove()
        return fig, grid[:heads]
    axes = np.asarray(ax, dtype=object).ravel()
    if axes.size != heads:
        raise ValueError(f"plot_attention(): ax has {axes.size} Axes for {heads} heads "
                         f"(weights [heads, rows, cols] need one Axes per head)")
    return axes[0].figure, axes


def plot_attention(weights: Any, x_labels: Optional[Sequence[Any]] = None,
                   y_labels: Optional[Sequence[Any]] = None, ax: Any = None, *,
                   batch: Optional[int] = None, cmap: str = "bone", colorbar: bool = True,
                   title: Optional[str] = None, x_rotation: float = 45) -> Any:
    """Draw attention weights as a heatmap, or one per head, and return the Axes.

    In the manner of the PyTorch seq2seq tutorial's ``showAttention``: one row per query,
    one column per attended position, the column labels along the top. Per-head weights
    (:class:`MultiheadAttention`'s with ``average_attn_weights=False``) are drawn as a
    grid of heatmaps, one per head, titled "head 0", "head 1", ..., on one colour scale
    with one colour bar. Characters the default font lacks (Chinese labels, for instance)
    are drawn with an installed font that has them. Needs matplotlib
    (``pip install "myatt[plot]"``), imported on the first call.

    Parameters
    ----------
    weights : array_like, shape (rows, cols), (heads, rows, cols) or (N, heads, rows, cols)
        The weights: :class:`MyAtt`'s ``attn_weights`` ``[S, value_size1]``,
        :class:`MultiheadAttention`'s ``[L, S]`` (unbatched, averaged) or ``[H, L, S]``
        (unbatched, per head), or batched ones with `batch`; a NumPy array, a torch tensor
        or an array-like of real numbers. Leading axes of size 1 are dropped (a batch of
        one, a single head); a 1-D vector is drawn as one row.
    x_labels : sequence, optional
        One label per column (the attended words), along the top, slanted by `x_rotation`
        degrees; on every head's heatmap.
    y_labels : sequence, optional
        One label per row (the queries).
    ax : matplotlib.axes.Axes or array of them, optional
        The Axes to draw on, one per head for per-head weights (any shape, taken in
        row-major order); default a new figure sized to the weights (a grid of at most 4
        columns for heads).
    batch : int, optional
        The batch item to draw, for batched weights: ``weights[batch]`` is drawn, so that
        ``[N, L, S]`` (averaged) gives one heatmap and ``[N, H, L, S]`` a grid of heads.
        Required for 4-D weights with N > 1; a 3-D array without it is ``[H, L, S]``.
    cmap : str, default "bone"
        The colour map (the tutorial's).
    colorbar : bool, default True
        Draw a colour bar beside the heatmap (one for the grid of heads).
    title : str, optional
        The Axes' title; for a grid of heads, the figure's title above the heads'.
    x_rotation : float, default 45
        The slant of the column labels in degrees (the tutorial's 90 turns an "I" into a
        dash); 0 sets them upright and centred.

    Returns
    -------
    matplotlib.axes.Axes or numpy.ndarray of them
        The Axes drawn on; for per-head weights a 1-D array of them, head ``h`` on
        element ``h``.

    Raises
    ------
    ImportError
        When matplotlib is not installed.
    TypeError
        When `weights` are not real numbers, or `batch` is not an int.
    ValueError
        When `weights` are not 2-D or 3-D after `batch` and dropping leading axes of size
        1 (4-D ones with N > 1 and no `batch`), when `batch` is given for weights without
        a batch axis or is out of range, when a label list does not have one label per
        column (`x_labels`) or row (`y_labels`), or when `ax` does not hold one Axes per
        head.

    Warns
    -----
    UserWarning
        When no installed font has glyphs for some characters of the labels; the message
        names the fonts to install.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> w = myatt.softmax(np.array([[2.0, 0.5, 0.1], [0.1, 3.0, 0.2]]))
    >>> ax = myatt.plot_attention(w, x_labels=["I", "am", "here"], y_labels=["je", "suis"])
    >>> [t.get_text() for t in ax.get_xticklabels()]
    ['I', 'am', 'here']
    >>> ax.images[0].get_array().shape
    (2, 3)

    A :class:`MultiheadAttention`'s weights per head, batch item 1:

    >>> mha = myatt.MultiheadAttention(8, 2, batch_first=True)
    >>> x = np.ones((3, 4, 8), dtype=np.float32)
    >>> _, heads = mha(x, x, x, average_attn_weights=False)
    >>> heads.shape
    (3, 2, 4, 4)
    >>> axes = myatt.plot_attention(heads, batch=1)
    >>> [a.get_title() for a in axes]
    ['head 0', 'head 1']
    """
    plt = _import_pyplot()
    w = _select(weights, batch)
    rows, cols = w.shape[-2:]
    xl = _labels(x_labels, cols, "x_labels")
    yl = _labels(y_labels, rows, "y_labels")

    if w.ndim == 2:
        if ax is None:
            fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * cols + 2.5),
                                            max(3.0, 0.45 * rows + 1.8)))
        else:
            fig = ax.figure
        image = _draw(ax, w, xl, yl, cmap, x_rotation)
        if colorbar:
            fig.colorbar(image, ax=ax)
        if title is not None:
            ax.set_title(title, **_font_kw([title]))
        return ax

    fig, axes = _head_axes(ax, w.shape[0], rows, cols, plt)
    finite = w[np.isfinite(w)]
    norm = {"vmin": finite.min(), "vmax": finite.max()} if finite.size else {}
    for h, (a, wh) in enumerate(zip(axes, w)):
        image = _draw(a, wh, xl, yl, cmap, x_rotation, **norm)
        a.set_title(f"head {h}")
    if colorbar:
        fig.colorbar(image, ax=list(axes))
    if title is not None:
        fig.suptitle(title, **_font_kw([title]))
    return axes
