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


def _charmap(path: str) -> FrozenSet[int]:
    """The code points a font file has glyphs for (cached)."""
    if path not in _CHARMAPS:
        from matplotlib import ft2font

        try:
            _CHARMAPS[path] = frozenset(ft2font.FT2Font(path).get_charmap())
        except (OSError, RuntimeError, ValueError):
            _CHARMAPS[path] = frozenset()
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


def plot_attention(weights: Any, x_labels: Optional[Sequence[Any]] = None,
                   y_labels: Optional[Sequence[Any]] = None, ax: Any = None, *,
                   cmap: str = "bone", colorbar: bool = True, title: Optional[str] = None,
                   x_rotation: float = 45) -> Any:
    """Draw attention weights as a heatmap and return the matplotlib Axes.

    In the manner of the PyTorch seq2seq tutorial's ``showAttention``: one row per query,
    one column per attended position, the column labels along the top. Characters the
    default font lacks (Chinese labels, for instance) are drawn with an installed font
    that has them. Needs matplotlib (``pip install "myatt[plot]"``), imported on the first
    call.

    Parameters
    ----------
    weights : array_like, shape (rows, cols)
        The weights, e.g. :class:`MyAtt`'s ``attn_weights`` ``[S, value_size1]``: a NumPy
        array, a torch tensor or an array-like of real numbers. Leading axes of size 1 are
        dropped; a 1-D vector is drawn as one row.
    x_labels : sequence, optional
        One label per column (the attended words), along the top, slanted by `x_rotation`
        degrees.
    y_labels : sequence, optional
        One label per row (the queries).
    ax : matplotlib.axes.Axes, optional
        The Axes to draw on; default a new figure sized to the weights.
    cmap : str, default "bone"
        The colour map (the tutorial's).
    colorbar : bool, default True
        Draw a colour bar beside the heatmap.
    title : str, optional
        The Axes' title.
    x_rotation : float, default 45
        The slant of the column labels in degrees (the tutorial's 90 turns an "I" into a
        dash); 0 sets them upright and centred.

    Returns
    -------
    matplotlib.axes.Axes
        The Axes drawn on.

    Raises
    ------
    ImportError
        When matplotlib is not installed.
    TypeError
        When `weights` are not real numbers.
    ValueError
        When `weights` are not 2-D after dropping leading axes of size 1, or when a label
        list does not have one label per column (`x_labels`) or row (`y_labels`).

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
    """
    plt = _import_pyplot()
    w = np.asarray(_interop.to_numpy(weights))
    if w.dtype.kind not in "biuf":
        raise TypeError(f"plot_attention(): weights must be real numbers, got {w.dtype}")
    while w.ndim > 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2:
        raise ValueError(f"plot_attention(): weights must be 2-D [rows, cols] (leading axes "
                         f"of size 1 are dropped), got shape {tuple(np.shape(weights))}")
    rows, cols = w.shape
    xl = _labels(x_labels, cols, "x_labels")
    yl = _labels(y_labels, rows, "y_labels")

    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * cols + 2.5),
                                        max(3.0, 0.45 * rows + 1.8)))
    else:
        fig = ax.figure
    image = ax.matshow(w.astype(np.float64), cmap=cmap)
    if colorbar:
        fig.colorbar(image, ax=ax)
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
    if title is not None:
        ax.set_title(title, **_font_kw([title]))
    return ax
