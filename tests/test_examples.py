"""The training example (examples/train_copy.py), short: the loss falls by a clear factor
and the learned attention points each query at its slot."""
import importlib.util
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    path = os.path.join(ROOT, "examples", name)
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_copy_loss_falls():
    ex = load("train_copy.py")
    m, losses = ex.train(steps=200, progress=False)
    assert len(losses) == 200 and all(np.isfinite(losses))
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    assert last < first / 10, (first, last)
    w = ex.attention_map(m)
    assert w.shape == (ex.SLOTS, ex.SLOTS)
    assert (np.argmax(w, axis=1) == np.arange(ex.SLOTS)).all()
    assert np.diag(w).min() > 0.5


def test_train_copy_main(tmp_path, capsys):
    ex = load("train_copy.py")
    plot = tmp_path / "attn.png"
    ex.main(["--steps", "30", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert "loss: first" in out
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib not installed" in out
    else:
        assert plot.stat().st_size > 0


def test_train_copy_writes_nothing_into_the_working_directory(tmp_path, monkeypatch, capsys):
    """Run from examples/, the default heatmap went over the README's picture
    (examples/attention.png); it goes to the temporary directory instead."""
    ex = load("train_copy.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ex.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    ex.main(["--steps", "5"])   # the parser's default is read when main() runs
    out = capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"]
    if "heatmap saved to" in out:
        assert (tmp_path / "tmp" / "myatt_train_copy.png").stat().st_size > 0


def bar_frames(err):
    return [f for f in err.replace("\n", "\r").split("\r") if "step" in f]


def test_train_copy_bar_shows_the_loss_and_never_0_percent(capsys):
    """With tqdm: the loss is the bar's postfix, no line is written beside the bar (each
    redrew it at 0 %), and the bar is drawn only once the run has lasted a second (so
    the default run, shorter, draws none)."""
    pytest.importorskip("tqdm")
    ex = load("train_copy.py")
    ex.train(steps=201, progress=True, log_every=100)
    captured = capsys.readouterr()
    assert captured.out == ""
    frames = bar_frames(captured.err)
    assert not [f for f in frames if " 0/201" in f]
    assert all("loss=" in f for f in frames)


def test_train_copy_lines_without_tqdm(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    ex = load("train_copy.py")
    ex.train(steps=201, progress=True, log_every=100)
    captured = capsys.readouterr()
    lines = [line.split()[1] for line in captured.out.splitlines() if line.startswith("step")]
    assert lines == ["0", "100", "200"] and captured.err == ""


def notebook_cell(text):
    import json

    with open(os.path.join(ROOT, "examples", "walkthrough.ipynb"), encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    found = [c for c in cells if c["cell_type"] == "code" and text in "".join(c["source"])]
    assert len(found) == 1, text
    return "".join(found[0]["source"])


def test_notebook_saves_the_readme_picture_only_when_asked(tmp_path, monkeypatch):
    """The walkthrough's plot cell, run where the notebook runs (examples/ is its working
    directory): no file unless MYATT_README_FIGURE names one (run_notebooks.py
    --readme-figure sets it to examples/attention.png)."""
    source = notebook_cell("savefig")
    saved = []

    class Figure:
        def savefig(self, path, **kw):
            saved.append(path)

    class Plot:
        @staticmethod
        def subplots(*a, **k):
            return Figure(), [None, None]

    class Myatt:
        @staticmethod
        def plot_attention(*a, **k):
            return None

    names = dict(plt=Plot, myatt=Myatt, untrained=None, fitted=None, src=None, tgt=None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MYATT_README_FIGURE", raising=False)
    exec(source, dict(names))
    assert saved == [] and list(tmp_path.iterdir()) == []
    monkeypatch.setenv("MYATT_README_FIGURE", str(tmp_path / "readme.png"))
    exec(source, dict(names))
    assert saved == [str(tmp_path / "readme.png")]
