"""Notebook display: every result's ``__repr__`` and ``_repr_html_`` carry its real numbers, as valid HTML."""

from __future__ import annotations

import os
import pathlib
from html.parser import HTMLParser

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.probe.analysis import analyze_model
from hiddenstate.probe.fixedpoints import FixedPoints, find_fixed_points
from hiddenstate.probe.gatestats import gate_statistics
from hiddenstate.probe.gradflow import hidden_gradient_norms, jacobian_flow
from hiddenstate.probe.memory import memory_curve
from hiddenstate.probe.pca import pca
from hiddenstate.report import build_report
from hiddenstate.report.notebook import Report

_VOID = {"img", "br", "hr", "meta", "input", "link", "col", "area", "base", "source", "wbr"}


class _Balance(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def _fragment(html: str) -> list[str]:
    """Parse an HTML fragment; every element closed in order. Returns the tags seen."""
    p = _Balance()
    p.feed(html)
    p.close()
    assert not p.errors and not p.stack, (p.errors, p.stack)
    assert not html.lstrip().lower().startswith(("<!doctype", "<html"))  # a fragment, not a page
    return p.tags


@pytest.fixture(scope="module")
def gru():
    rng = np.random.default_rng(0)
    layer = hs.GRU(3, 8, rng=rng)
    x = rng.normal(size=(60, 2, 3))
    return layer, x, hs.trace(layer, x)


def test_trace_repr(gru):
    layer, x, tr = gru
    assert repr(tr) == "Trace(gru, 1 layer x 1 direction, T=60, N=2, H=8, 120 valid steps)"
    assert repr(tr[0]) == "LayerTrace(gru layer 0, T=60, N=2, H=8, gates r, z, n)"
    html = tr._repr_html_()
    assert "table" in _fragment(html)
    assert f"{np.linalg.norm(tr[0].h, axis=-1).mean():.4g}" in html  # mean ‖h_t‖
    assert f"{tr[0].gates['z'].mean():.4g}" in html


def test_gate_stats_repr(gru):
    _, _, tr = gru
    z = tr[0].gates["z"]
    g = gate_statistics(z, name="layer 0 z", keep=True)
    left, right = (z < 0.1).mean(), (z > 0.9).mean()
    tau = (1 / (1 - z.reshape(-1, 8).mean(axis=0))).max()
    assert repr(g) == (f"GateStats('layer 0 z', H=8, steps=120, mean={z.mean():.4g}, <0.1: {100 * left:.1f}%, "
                       f">0.9: {100 * right:.1f}%, longest τ={tau:.4g})")
    html = g._repr_html_()
    tags = _fragment(html)
    assert "img" in tags and "data:image/png;base64," in html
    assert f"{z.mean():.4g}" in html and f"{tau:.4g}" in html
    assert "longest" not in repr(gate_statistics(z, name="r"))  # not a keep gate: no time constant
    with pytest.raises(TypeError, match="keep must be a bool or None; got str"):
        gate_statistics(z, keep="yes")


def test_memory_and_gradient_reprs(gru):
    layer, x, tr = gru
    mc = memory_curve(tr.output, x, max_lag=5)
    assert repr(mc) == (f"MemoryCurve(r2, lags 0..5, capacity={mc.capacity:.4g}, horizon(0.5)={mc.horizon(0.5)}, "
                        "chance=0)")
    cap = float(np.clip(mc.score, 0, 1).sum())  # chance 0: the capacity is the clipped sum
    html = mc._repr_html_()
    assert "img" in _fragment(html) and f"{cap:.4g}" in html
    jf = jacobian_flow(tr[0], max_lag=7)
    assert repr(jf).startswith("JacobianFlow(block 'h', lags 0..7, σ_max 1 -> ")
    assert f"{jf.spectral[-1]:.4g}" in repr(jf) and f"{jf.spectral[-1]:.4g}" in jf._repr_html_()
    _fragment(jf._repr_html_())
    gn = hidden_gradient_norms(layer, x[:20])
    last = np.linalg.norm(np.full((2, 8), 1 / np.sqrt(8)), axis=1).mean()  # dL/dh_T is the given dh_last
    assert repr(gn).startswith(f"GradientNorms(L=1, T=20, ‖dL/dh‖ at lag 0: {last:.4g}, at lag 19: ")
    _fragment(gn._repr_html_())


def test_fixed_points_and_pca_reprs():
    W = np.array([[2.0]])  # h -> tanh(2h): stable points at ±0.9575, a repeller at 0

    def F(h):
        return np.tanh(W @ h)

    def J(h):
        return (1 - np.tanh(W @ h) ** 2)[:, None] * W

    pts = find_fixed_points(F, J, np.linspace(-2, 2, 9)[:, None])
    assert isinstance(pts, FixedPoints) and isinstance(pts, list) and pts.n_starts == 9
    assert repr(pts) == "FixedPoints(3 from 9 starts: 2 stable, 1 unstable)"
    root = float(np.abs(pts[0].h[0]))
    assert abs(np.tanh(2 * root) - root) < 1e-10
    html = pts._repr_html_()
    assert "img" in _fragment(html) and f"{root:.4g}" in html and ">9<" in html  # ‖h*‖ and the starts
    assert repr(pts[0]).startswith("FixedPoint(stable, H=1, q=")
    states = np.random.default_rng(1).normal(size=(50, 4)) * np.array([3.0, 2.0, 1.0, 0.5])
    p = pca(states)
    evr = np.linalg.svd(states - states.mean(0), compute_uv=False) ** 2
    evr /= evr.sum()
    assert repr(p) == (f"PCAResult(K=4 of H=4, PC1 {100 * evr[0]:.1f}%, PC1+PC2 {100 * evr[:2].sum():.1f}%, "
                       f"90% in {int(np.searchsorted(np.cumsum(evr), 0.9) + 1)} components)")
    html = p._repr_html_()
    # percentages, as the plot labels them
    assert f"{100 * evr[0]:.1f} %" in html and f"{100 * evr[:2].sum():.1f} %" in html
    assert f"{evr[:2].sum():.4g}" not in html
    _fragment(p._repr_html_())


def test_analysis_and_report_reprs(tmp_path):
    rng = np.random.default_rng(2)
    text = "to be, or not to be: that is the question.\n" * 3
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text])
    x = np.eye(len(chars))[ids][:, None]
    an = analyze_model(hs.GRU(len(chars), 6, rng=rng), x, tokens=ids[:, None], text=text, grad_steps=20,
                       n_fixed_point_starts=4, rng=rng)
    r = repr(an)
    assert r.startswith(f"Analysis(GRU, H=6, T={len(text)}, N=1: gates, gradient, memory, pca, fixed points")
    assert "skipped: feature 'inside quotes'" in r
    html = an._repr_html_()
    _fragment(html)
    assert f"capacity {an.memory.capacity:.2f}" in html and "no double quote" in html
    report = build_report(tmp_path / "r.html", an)
    assert isinstance(report, Report) and isinstance(report, pathlib.Path)
    assert report == tmp_path / "r.html" and os.fspath(report) == str(tmp_path / "r.html")
    size = (tmp_path / "r.html").stat().st_size
    assert repr(report) == f"Report({str(tmp_path / 'r.html')!r}, {size / 1e6:.2f} MB)"
    frame = report._repr_html_()
    assert _fragment(frame) == ["iframe"] and "&lt;!DOCTYPE html&gt;" in frame
    assert "(no such file)" in Report(tmp_path / "missing.html")._repr_html_()


def test_trace_and_analysis_show_figures_under_200_kB():
    import base64
    import re

    rng = np.random.default_rng(4)
    text = 'She said "come here" and he said "no".\nThey (both) left.\n' * 40  # T = 2240
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text])
    x = np.eye(len(chars))[ids][:, None]
    an = analyze_model(hs.GRU(len(chars), 64, rng=rng), x, tokens=ids[:, None], text=text, grad_steps=40,
                       n_fixed_point_starts=4, rng=rng)
    for obj, n_figs in ((an.trace, 1), (an, 3), (an.pca, 1)):  # analysis: gates, gradient, memory
        html = obj._repr_html_()
        _fragment(html)
        pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
        assert len(pngs) == n_figs, type(obj).__name__
        for b64 in pngs:
            png = base64.b64decode(b64)
            assert png[:8] == b"\x89PNG\r\n\x1a\n"
            assert int.from_bytes(png[16:20], "big") <= 720  # PNG width, at most as wide as it is shown
        assert len(html) < 200_000, (type(obj).__name__, len(html))


def test_state_figure_averages_windows_and_picks_varying_units():
    from hiddenstate.report.plots import state_figure

    h = np.zeros((10, 70))
    h[:, 5] = np.arange(10.0)  # the most varying unit
    h[:, 3] = np.arange(10.0) / 100
    fig = state_figure(h, max_units=2, max_steps=4)  # windows of 3 steps: 0-2, 3-5, 6-8, 9
    img = fig.axes[0].images[0].get_array()  # (units, columns)
    np.testing.assert_allclose(img[1], [1.0, 4.0, 7.0, 9.0])  # unit 5: window means, by hand
    np.testing.assert_allclose(img[0], [0.01, 0.04, 0.07, 0.09])  # unit 3 comes first (unit order)
    assert "2 of 70 units" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match=r"h must be finite states of shape \(T, H\)"):
        state_figure(np.zeros(5))


def test_short_log_axis_and_single_point_loss_are_readable():
    from hiddenstate.report.figures import style
    from hiddenstate.report.plots import gates_figure, loss_figure

    class G:  # a duck-typed keep gate with time constants from 1.5 to 12 steps
        name, low, high, keep = "z", 0.1, 0.9, True
        left = right = np.zeros(4)
        time_constant = np.array([1.5, 3.0, 6.0, 12.0])

    fig = gates_figure([G()])
    ax = fig.axes[1]
    with style():
        fig.canvas.draw()
    labels = {t.get_text() for t in ax.yaxis.get_majorticklabels() + ax.yaxis.get_minorticklabels()
              if t.get_text() and ax.get_ylim()[0] <= t.get_position()[1] <= ax.get_ylim()[1]}
    assert {"2", "5", "10"} <= labels  # not only "10"
    fig = loss_figure({"train": np.array([3.0, 2.5, 2.0]), "validation": (np.array([2.0]), np.array([2.4]))})
    line = {ln.get_label(): ln for ln in fig.axes[0].lines}["validation"]
    assert line.get_marker() not in (None, "None", "", " ") and len(line.get_xdata()) == 1


def test_stream_repr_names_the_model_and_the_likeliest_next_characters():
    from hiddenstate.train.corpus import Vocabulary
    from hiddenstate.train.generate import Stream
    from hiddenstate.train.model import CharRNN

    vocab = Vocabulary("abcde ")
    model = CharRNN(vocab.size, 8, 2, cell="lstm", rng=np.random.default_rng(0))
    s = Stream(model, vocab=vocab)
    assert repr(s) == "Stream(LSTM 2 × 8, V=6, nothing read yet)"
    probs, _ = s.feed("a")
    top = np.argsort(-probs, kind="stable")[:3]
    want = ", ".join(f"{vocab.chars[i]!r} {probs[i]:.2f}" for i in top)
    assert repr(s) == f"Stream(LSTM 2 × 8, V=6, 1 read, next: {want})"
    s2 = Stream(model)
    s2.feed(2)
    assert repr(s2).startswith("Stream(LSTM 2 × 8, V=6, 1 read, next: id ")


def test_notebook_tables_are_styled_inline_with_numbers_right_aligned():
    import re

    from hiddenstate.report.notebook import facts_html

    html = facts_html("T", {"name": "gru", "units": 256, "ratio": 0.25}, rows=[{"unit": 3, "feature": "space"}])
    _fragment(html)
    assert html.count('<table style="border-collapse:collapse') == 2  # a notebook may drop a <style> block
    assert re.search(r'text-align:left[^"]*">gru<', html) and re.search(r'text-align:right[^"]*">256<', html)
    assert re.search(r'text-align:right[^"]*">0.25<', html) and re.search(r'text-align:left[^"]*">space<', html)
