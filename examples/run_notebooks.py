"""Execute the example notebooks (CI runs this so that they never rot).

    python examples/run_notebooks.py [--write] [--readme-figure] [notebook ...]

Each notebook runs in a fresh kernel with examples/ as its working directory.
Fails on any cell error, on matplotlib's "Glyph ... missing from font"
warning (the attention plot's Chinese labels must render), and on a file the
run wrote into examples/ (the tracked README picture, examples/attention.png,
is rewritten only with --readme-figure). --write saves the executed notebook,
outputs included, back to its file.
"""
import argparse
import glob
import hashlib
import os
import sys

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))
README_FIGURE = os.path.join(HERE, "attention.png")


def outputs_text(nb):
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                yield out.get("text", "")
            elif "data" in out:
                yield out["data"].get("text/plain", "")


def snapshot():
    """{file name: sha256} of examples/ (what a run must leave as it was)."""
    out = {}
    for name in sorted(os.listdir(HERE)):
        full = os.path.join(HERE, name)
        if os.path.isfile(full):
            with open(full, "rb") as f:
                out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def run(path, write, readme_figure=False):
    nb = nbformat.read(path, as_version=4)
    before = snapshot()
    env = os.environ.copy()
    env.pop("MYATT_README_FIGURE", None)
    if readme_figure:
        env["MYATT_README_FIGURE"] = README_FIGURE
    old_env = os.environ.copy()
    os.environ.clear()
    os.environ.update(env)   # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": HERE}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    after = snapshot()
    changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n)
                     and not (readme_figure and n == os.path.basename(README_FIGURE)))
    if changed:
        raise SystemExit(f"{path}: the run wrote into examples/: {', '.join(changed)} (outputs "
                         f"go elsewhere; the README picture only with --readme-figure)")
    missing = [t for t in outputs_text(nb)
               if "missing from font" in t or "no installed font has glyphs" in t]
    if missing:
        raise SystemExit(f"{path}: glyphs missing from the plot's fonts (install a CJK font, "
                         f"e.g. Debian's fonts-wqy-microhei):\n" + "".join(missing))
    if write:
        nbformat.write(nb, path)
    print(f"{os.path.relpath(path)}: {len(nb.cells)} cells executed")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="save the executed notebooks")
    p.add_argument("--readme-figure", action="store_true",
                   help="rewrite the README's picture, examples/attention.png")
    p.add_argument("notebooks", nargs="*",
                   default=sorted(glob.glob(os.path.join(HERE, "*.ipynb"))))
    args = p.parse_args()
    if not args.notebooks:
        sys.exit("no notebooks found")
    for path in args.notebooks:
        run(path, args.write, args.readme_figure)


if __name__ == "__main__":
    main()
