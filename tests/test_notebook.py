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
    assert f"{evr[:2].sum():.4g}" in p._repr_html_()
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
