"""myatt.plot_attention, headless (Agg)."""
import os
import sys
import warnings

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import myatt  # noqa: E402
from myatt import plot as myatt_plot  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def tick_texts(labels):
    return [t.get_text() for t in labels]


def test_heatmap_of_weights(rng, tmp_path):
    w = rng.dirichlet(np.ones(4), size=3)
    ax = myatt.plot_attention(w, x_labels=["I", "am", "here", "<EOS>"], y_labels=["a", "b", "c"])
    assert isinstance(ax, matplotlib.axes.Axes)
    np.testing.assert_array_equal(ax.images[0].get_array(), w)
    assert ax.images[0].get_cmap().name == "bone"
    assert tick_texts(ax.get_xticklabels()) == ["I", "am", "here", "<EOS>"]
    assert tick_texts(ax.get_yticklabels()) == ["a", "b", "c"]
    assert all(t.get_rotation() == 45 for t in ax.get_xticklabels())
    assert len(ax.figure.axes) == 2   # the colour bar
    path = tmp_path / "attention.png"
    ax.figure.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_myatt_weights_and_given_axes(rng):
    m = myatt.MyAtt(4, 4, 6, 5, 3)
    _, w = m(rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 2, 4)),
             rng.standard_normal((1, 6, 5)))
    fig, (a1, a2) = plt.subplots(1, 2)
    ax = myatt.plot_attention(w, ax=a2, colorbar=False, title="t")
    assert ax is a2 and len(a1.images) == 0 and ax.get_title() == "t"
    np.testing.assert_array_equal(ax.images[0].get_array(), w)
    assert len(fig.axes) == 2   # no colour bar


def test_weights_of_any_kind(rng):
    w = rng.random((2, 3))
    for given in (w.tolist(), w[None], w[None, None]):
        ax = myatt.plot_attention(given)
        np.testing.assert_allclose(ax.images[0].get_array(), w)
    ax = myatt.plot_attention(w[0])   # 1-D: one row
    assert ax.images[0].get_array().shape == (1, 3)


def test_weights_as_a_torch_tensor(rng):
    torch = pytest.importorskip("torch")
    w = rng.random((2, 3))
    ax = myatt.plot_attention(torch.from_numpy(w).requires_grad_())
    np.testing.assert_array_equal(ax.images[0].get_array(), w)


def mha_weights(torch, seed, **kw):
    """torch.nn.MultiheadAttention(8, 4)'s weights for a batch of 2, L = 3, S = 5."""
    torch.manual_seed(seed)
    t = torch.nn.MultiheadAttention(8, 4, batch_first=True)
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with torch.no_grad():
        return t(q, kv, kv, **kw)[1]


def test_grid_of_heads(tmp_path):
    """torch's per-head weights [N, H, L, S]: one Axes per head of batch item 1, titled,
    on one colour scale with one colour bar (heads.png in tmp_path: look at it)."""
    torch = pytest.importorskip("torch")
    w = mha_weights(torch, 0, average_attn_weights=False)
    assert w.shape == (2, 4, 3, 5)
    axes = myatt.plot_attention(w, x_labels=list("abcde"), y_labels=["x", "y", "z"], batch=1,
                                title="batch item 1")
    assert isinstance(axes, np.ndarray) and axes.shape == (4,)
    for h, ax in enumerate(axes):
        np.testing.assert_array_equal(ax.images[0].get_array(), w[1, h].numpy())
        assert ax.get_title() == f"head {h}"
        assert ax.images[0].get_clim() == (w[1].min().item(), w[1].max().item())
        assert tick_texts(ax.get_xticklabels()) == list("abcde")
        assert tick_texts(ax.get_yticklabels()) == ["x", "y", "z"]
    fig = axes[0].figure
    assert len(fig.axes) == 5 and fig.get_suptitle() == "batch item 1"   # + the colour bar
    assert all(a.figure is fig for a in axes)
    fig.savefig(tmp_path / "heads.png", dpi=80)
    # The same heads unbatched ([H, L, S]), and batch item -1 is item 1.
    for given, kw in ((w[1], {}), (w, {"batch": -1})):
        again = myatt.plot_attention(given, **kw)
        assert [a.get_title() for a in again] == [f"head {h}" for h in range(4)]
        np.testing.assert_array_equal(again[3].images[0].get_array(), w[1, 3].numpy())


def test_grid_on_given_axes_and_layout(rng):
    w = rng.random((5, 2, 3))
    fig, grid = plt.subplots(2, 3)
    axes = myatt.plot_attention(w, ax=grid.ravel()[:5], colorbar=False)
    assert list(axes) == list(grid.ravel()[:5]) and len(grid.ravel()[5].images) == 0
    assert len(fig.axes) == 6   # no colour bar
    axes = myatt.plot_attention(w[:4], ax=grid.ravel()[2:].reshape(2, 2))   # any shape
    assert [a.get_title() for a in axes] == [f"head {h}" for h in range(4)]
    # A new figure: at most 4 columns, the unused cells removed.
    axes = myatt.plot_attention(w)
    assert len(axes) == 5 and len(axes[0].figure.axes) == 6   # 5 heads + the colour bar
    assert [a.get_subplotspec().get_geometry()[:2] for a in axes] == [(2, 4)] * 5


def test_averaged_weights_of_a_batch():
    """[N, L, S] (torch's averaged weights) with batch: one heatmap; a batch of one
    needs no batch."""
    torch = pytest.importorskip("torch")
    w = mha_weights(torch, 1)
    assert w.shape == (2, 3, 5)
    ax = myatt.plot_attention(w, batch=0)
    assert isinstance(ax, matplotlib.axes.Axes)
    np.testing.assert_array_equal(ax.images[0].get_array(), w[0].numpy())
    ax = myatt.plot_attention(w[1:])
    np.testing.assert_array_equal(ax.images[0].get_array(), w[1].numpy())


def test_nan_rows_keep_the_scale(rng):
    """A row with every key masked is NaN in the weights: the shared scale is that of
    the finite weights."""
    w = rng.random((2, 3, 4))
    w[1, 0] = np.nan
    axes = myatt.plot_attention(w)
    assert axes[0].images[0].get_clim() == (np.nanmin(w), np.nanmax(w))


def test_bad_arguments(rng):
    with pytest.raises(ValueError, match="x_labels has 2 labels for 3 columns"):
        myatt.plot_attention(rng.random((2, 3)), x_labels=["a", "b"])
    with pytest.raises(ValueError, match="y_labels"):
        myatt.plot_attention(rng.random((2, 3)), y_labels=["a"])
    with pytest.raises(ValueError, match=r"\[rows, cols\]"):
        myatt.plot_attention(rng.random((2, 2, 2, 2, 3)))
    with pytest.raises(TypeError):
        myatt.plot_attention(np.ones((2, 2), dtype=complex))


def test_bad_head_arguments(rng):
    w = rng.random((2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"N = 2: pass batch="):
        myatt.plot_attention(w)
    with pytest.raises(ValueError, match="batch 2 is out of range for 2 batch items"):
        myatt.plot_attention(w, batch=2)
    with pytest.raises(ValueError, match="batch -3 is out of range"):
        myatt.plot_attention(w, batch=-3)
    for bad in (1.0, True, "0"):
        with pytest.raises(TypeError, match="batch must be an int"):
            myatt.plot_attention(w, batch=bad)
    with pytest.raises(ValueError, match=r"batch needs weights with a batch axis"):
        myatt.plot_attention(w[0, 0], batch=0)
    _, axes = plt.subplots(1, 2)
    with pytest.raises(ValueError, match="ax has 2 Axes for 3 heads"):
        myatt.plot_attention(w[0], ax=axes)
    with pytest.raises(ValueError, match="ax has 1 Axes for 3 heads"):
        myatt.plot_attention(w[0], ax=axes[0])
    with pytest.raises(ValueError, match="x_labels has 4 labels for 5 columns"):
        myatt.plot_attention(w, batch=0, x_labels="abcd")


def test_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install matplotlib"):
        myatt.plot_attention(np.ones((2, 2)))


def test_latin_labels_need_no_fallback():
    assert myatt_plot.label_fonts(["I", "am", "Chinese", "<EOS>"]) is None


def test_fallback_font_for_missing_glyphs(monkeypatch):
    """Characters the default font lacks are drawn with an installed font that has them.

    Made deterministic with matplotlib's own fonts: the default font is made to lack
    'é', which DejaVu Sans Mono (shipped with matplotlib) has; installed CJK fonts,
    which have it too, are hidden.
    """
    from matplotlib import font_manager

    monkeypatch.setattr(myatt_plot, "CJK_FAMILIES", [])
    monkeypatch.setattr(font_manager.fontManager, "ttflist",
                        [f for f in font_manager.fontManager.ttflist
                         if ord("\u4e2d") not in myatt_plot._charmap(f.fname)])
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *a, **k: [])

    default = font_manager.findfont(font_manager.FontProperties())
    real = myatt_plot._charmap(default)
    monkeypatch.setitem(myatt_plot._CHARMAPS, default, real - {ord("é")})
    family = myatt_plot.label_fonts(["café"])
    assert family is not None and len(family) == 2 and family[1] != family[0]
    path = font_manager.findfont(font_manager.FontProperties(family=family[1]))
    assert ord("é") in myatt_plot._charmap(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = myatt.plot_attention(np.ones((1, 1)), x_labels=["café"])
        ax.figure.canvas.draw()
    assert ax.get_xticklabels()[0].get_fontfamily() == family


def test_warns_when_no_font_has_the_glyphs(monkeypatch):
    monkeypatch.setattr(myatt_plot, "_fallback_family", lambda chars, exclude: None)
    with pytest.warns(UserWarning, match="fonts-noto-cjk"):
        myatt.plot_attention(np.ones((1, 1)), x_labels=["\u4e2d"])


CHINESE = list("我是中国人")


def glyph_image(path, char):
    """The bitmap FreeType draws for `char` with the font file at `path`."""
    from matplotlib import ft2font

    font = ft2font.FT2Font(path)
    font.set_size(48, 72)
    font.set_text(char)
    font.draw_glyphs_to_bitmap()
    return np.asarray(font.get_image()).copy()


def test_placeholder_fonts_have_no_glyphs():
    """A Last Resort font maps every code point to a box naming its Unicode block: its
    character map covers Chinese, but it draws no Chinese character (the same box for
    all of them), so it never counts as having their glyphs."""
    from matplotlib import font_manager

    placeholders = [f.fname for f in font_manager.fontManager.ttflist
                    if f.name.startswith("Last Resort")]
    if not placeholders:
        pytest.skip(f"matplotlib {matplotlib.__version__} ships no Last Resort font")
    path = placeholders[0]
    images = [glyph_image(path, c) for c in CHINESE]
    assert all(np.array_equal(images[0], im) for im in images)   # one box for all
    assert not {ord(c) for c in CHINESE} & myatt_plot._charmap(path)
    assert ord("A") not in myatt_plot._charmap(path)


def test_no_chinese_font_warns_instead_of_drawing_boxes(monkeypatch):
    """The issue's reproducer: matplotlib's real font list, less the fonts that have
    Chinese glyphs (as on a machine without any). No font is picked: a warning names
    what to install."""
    from matplotlib import font_manager

    def draws_chinese(path):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # "Glyph ... missing from font(s)"
                images = [glyph_image(path, c) for c in CHINESE[:2]]
        except Exception:
            return False
        return images[0].any() and not np.array_equal(*images)

    monkeypatch.setattr(font_manager.fontManager, "ttflist",
                        [f for f in font_manager.fontManager.ttflist if not draws_chinese(f.fname)])
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *a, **k: [])
    with pytest.warns(UserWarning, match="fonts-wqy-microhei"):
        assert myatt_plot.label_fonts(CHINESE) is None


def test_chinese_labels_drawn_with_real_glyphs(tmp_path):
    """Wherever a font with Chinese glyphs is installed (CI installs fonts-wqy-microhei and
    sets MYATT_REQUIRE_CJK_FONT=1, which makes its absence an error): the Chinese labels
    get a font whose glyphs are distinct characters, matplotlib warns of no missing glyph,
    and the heatmap is saved (chinese_labels.png in the test's tmp_path: look at it).
    (Without one, test_no_chinese_font_warns_instead_of_drawing_boxes above holds.)"""
    from matplotlib import font_manager

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # the warning when none is installed
        family = myatt_plot.label_fonts(CHINESE)
    if family is None:
        assert os.environ.get("MYATT_REQUIRE_CJK_FONT") != "1", \
            "MYATT_REQUIRE_CJK_FONT=1 but no installed font has Chinese glyphs"
        pytest.skip("no installed font has Chinese glyphs (Debian: fonts-wqy-microhei; "
                    "CI installs it and sets MYATT_REQUIRE_CJK_FONT=1)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = font_manager.findfont(font_manager.FontProperties(family=family[1]),
                                     fallback_to_default=False)
        images = [glyph_image(path, c) for c in CHINESE]
        assert all(im.any() for im in images)
        assert len({im.tobytes() for im in images}) == len(CHINESE)   # five characters, not boxes
        ax = myatt.plot_attention(np.eye(5)[::-1], x_labels=CHINESE,
                                  y_labels=["I", "am", "Chinese", ".", "<EOS>"],
                                  title="我是中国人 / I am Chinese")
        ax.figure.savefig(tmp_path / "chinese_labels.png", dpi=80, bbox_inches="tight")
    assert [t.get_fontfamily() for t in ax.get_xticklabels()] == [family] * 5
    assert ax.get_yticklabels()[0].get_fontfamily() != family   # Latin: the default font
