"""Jupyter's rich display of Linear and MyAtt (``_repr_html_`` calls ``html``)."""
import html as _html

import numpy as np


def _fmt(x):
    return f"{x:.4g}"


def html(obj):
    """The repr, then a table of the parameters: shape, dtype, count and summary statistics."""
    sd = obj.state_dict()
    rows = []
    total = 0
    for name, p in sd.items():
        total += p.size
        if p.size:
            with np.errstate(all="ignore"):
                stats = [_fmt(p.mean()), _fmt(p.std()), _fmt(p.min()), _fmt(p.max())]
        else:
            stats = ["&ndash;"] * 4
        cells = [f"<code>{_html.escape(name)}</code>", _html.escape(str(list(p.shape))),
                 _html.escape(p.dtype.name), f"{p.size:,}"] + stats
        rows.append("<tr>" + "".join(f'<td style="text-align: left">{c}</td>' if i == 0
                                     else f"<td>{c}</td>" for i, c in enumerate(cells))
                    + "</tr>")
    head = ["parameter", "shape", "dtype", "elements", "mean", "std", "min", "max"]
    style = 'style="text-align: right; font-family: monospace"'
    return (
        f"<div><code>{_html.escape(repr(obj))}</code>"
        f"<table {style}><thead><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>" + "".join(rows)
        + f'<tr><td colspan="3" style="text-align: left"><b>total</b></td><td><b>{total:,}</b></td>'
        '<td colspan="4"></td></tr>'
        "</tbody></table></div>"
    )
