"""myatt.plot_attention, headless (Agg)."""
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


def test_bad_arguments(rng):
    with pytest.raises(ValueError, match="x_labels has 2 labels for 3 columns"):
        myatt.plot_attention(rng.random((2, 3)), x_labels=["a", "b"])
    with pytest.raises(ValueError, match="y_labels"):
        myatt.plot_attention(rng.random((2, 3)), y_labels=["a"])
    with pytest.raises(ValueError, match="2-D"):
        myatt.plot_attention(rng.random((2, 2, 3)))
    with pytest.raises(TypeError):
        myatt.plot_attention(np.ones((2, 2), dtype=complex))


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
    """With the fonts installed here (CI installs fonts-wqy-microhei): the Chinese labels
    get a font whose glyphs are distinct characters, matplotlib warns of no missing glyph,
    and the heatmap is saved (chinese_labels.png in the test's tmp_path: look at it)."""
    from matplotlib import font_manager

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        family = myatt_plot.label_fonts(CHINESE)
        if family is None:
            pytest.skip("no installed font has Chinese glyphs (Debian: fonts-wqy-microhei)")
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
