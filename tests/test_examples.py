"""The training example (examples/train_copy.py), short: the loss falls by a clear factor
and the learned attention points each query at its slot."""
import importlib.util
import os

import numpy as np

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
