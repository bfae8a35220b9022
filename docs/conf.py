"""Sphinx configuration of myatt's documentation site.

Build from the repository root, with the extension built in place:

    python setup.py build_ext --inplace
    PYTHONPATH=$PWD python -m sphinx -W -b html docs build/docs/html
    PYTHONPATH=$PWD python -m sphinx -W -b doctest docs build/docs/doctest

(``bash .ci/docs PYTHON`` does both, as CI does.)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import myatt  # noqa: E402  (the in-place build: the API reference is its docstrings)

project = "myatt"
author = "the myatt developers"
copyright = "2026, the myatt developers"
release = version = myatt.__version__

extensions = [
    "myst_nb",                 # Markdown pages (MyST) and the walkthrough notebook
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",      # every example on the pages and in the docstrings runs
    "numpydoc",
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"
# Blocks without a language are shell commands or program output: not highlighted
# (doctest blocks are Python by their prompts).
highlight_language = "none"

# MyST: ```{doctest} fences and (label)= targets; heading anchors for #links
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The notebook is executed by CI (examples/run_notebooks.py) and stored with its
# outputs: render those, never run it here.
nb_execution_mode = "off"

# autodoc + numpydoc: the docstrings are the reference
autodoc_member_order = "bysource"
autodoc_typehints = "none"           # signatures carry them; numpydoc's sections say the rest
# Signatures come from the text signatures (inspect.signature), never from a docstring's first
# line (the text signature is not part of __doc__).
autodoc_docstring_signature = False
numpydoc_show_class_members = False  # members are listed by autodoc's :members:
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# doctest: the namespace every example starts from
doctest_global_setup = """
import numpy as np
import myatt
np.set_printoptions(precision=4, suppress=True)
"""


html_theme = "pydata_sphinx_theme"
html_title = f"myatt {version}"
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    "header_links_before_dropdown": 6,
}
# No left sidebar: the pages are flat (the navbar lists them); the right one has the page's
# sections.
html_sidebars = {"**": []}
html_static_path = ["_static"]
html_css_files = ["myatt.css"]


_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _bench_plot(app):
    """docs/_plots/bench.png: benchmarks/bench.py's --plot drawn from the figures of the run
    that docs/speed.md records (its table is parsed, so the plot and the table are one run)."""
    text = open(os.path.join(app.srcdir, "speed.md"), encoding="utf-8").read()
    rows = []
    # a row: the case (ending in its dtype), threads, then myatt's, torch's and NumPy's
    # times ("-" where a row has no NumPy column)
    time = r"([\d.]+) (ns|us|ms|s)"
    for m in re.finditer(rf"^(\S.*? float(?:32|64)) +(\d+) +{time} +{time} +(?:{time}|-) ",
                         text, re.M):
        case, thr = m.group(1), int(m.group(2))
        t = [float(m.group(i)) * _UNITS[m.group(i + 1)] if m.group(i) else None
             for i in (3, 5, 7)]
        rows.append(dict(case=case, threads=thr, myatt=t[0], torch=t[1], numpy=t[2]))
    if not rows:
        raise RuntimeError("docs/speed.md: no benchmark rows found for the plot")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench
    finally:
        sys.path.pop(0)
    os.makedirs(os.path.join(app.srcdir, "_plots"), exist_ok=True)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):      # bench.plot says where it wrote
        bench.plot({"rows": rows}, os.path.join(app.srcdir, "_plots", "bench.png"))


def setup(app):
    app.connect("builder-inited", _bench_plot)
