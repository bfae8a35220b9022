"""Execute the example notebooks (CI runs this so that they never rot).

    python examples/run_notebooks.py [--write] [notebook ...]

Each notebook runs in a fresh kernel with examples/ as its working directory.
Fails on any cell error, and on matplotlib's "Glyph ... missing from font"
warning (the attention plot's Chinese labels must render). --write saves the
executed notebook, outputs included, back to its file.
"""
import argparse
import glob
import os
import sys

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))


def outputs_text(nb):
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                yield out.get("text", "")
            elif "data" in out:
                yield out["data"].get("text/plain", "")


def run(path, write):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": HERE}}).execute()
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
    p.add_argument("notebooks", nargs="*",
                   default=sorted(glob.glob(os.path.join(HERE, "*.ipynb"))))
    args = p.parse_args()
    if not args.notebooks:
        sys.exit("no notebooks found")
    for path in args.notebooks:
        run(path, args.write)


if __name__ == "__main__":
    main()
