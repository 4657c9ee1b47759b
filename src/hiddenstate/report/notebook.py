"""What a notebook shows for the measurements and the report: small HTML tables and inline figures.

The ``_repr_html_`` methods of :mod:`hiddenstate.probe`'s results (trace, gate statistics,
memory curve, gradient flow, fixed points, PCA, the whole analysis) call the functions here, so a
result left as the last line of a Jupyter cell is shown as a table of its key numbers and, where
one exists, the report's figure of it (:mod:`hiddenstate.report.plots`), as an inline PNG.
Like the rest of :mod:`hiddenstate.report`, this module reads the results duck-typed (only the
attributes named in each docstring) and imports nothing from :mod:`hiddenstate.probe`.

:class:`Report` is what :func:`hiddenstate.build_report` returns: the path of the page written
(a :class:`pathlib.Path`, so existing code keeps working) that a notebook shows as the page
itself, in an ``<iframe srcdoc>``.
"""

from __future__ import annotations

import html
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from hiddenstate.report.figures import png_base64, style

#: Resolution of the figures a notebook shows inline (the report's pages use 160)
NOTEBOOK_DPI = 100

__all__ = ["NOTEBOOK_DPI", "Report", "analysis_html", "facts_html", "figure_html", "fixed_points_html", "gate_stats_html",
           "gradient_norms_html", "jacobian_flow_html", "memory_html", "pca_html", "trace_html"]


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _num(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not np.isfinite(v):
            return str(v)
        return f"{v:.4g}" if v == 0 or 1e-3 <= abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


#: Inline styles (a notebook may drop a <style> block): ruled rows, numbers right-aligned
_TABLE = 'style="border-collapse:collapse;margin:4px 0 10px;font-size:12.5px"'
_TH = 'style="text-align:left;padding:2px 12px 2px 0;border-bottom:1px solid #dadce0;font-weight:600"'


def _td(v) -> str:
    """The style of one cell: numbers right-aligned, in tabular figures."""
    number = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    align = "right;font-variant-numeric:tabular-nums" if number else "left"
    return f'style="text-align:{align};padding:2px 12px 2px 0;border-bottom:1px solid #f1f3f4"'


def facts_html(title: str, facts: Mapping[str, object], rows: Sequence[Mapping[str, object]] = (), fig=None) -> str:
    """A titled two-column table of facts, an optional table of rows and an optional figure.

    Parameters
    ----------
    title : str
        The heading (escaped).
    facts : mapping of str to object
        Name -> value; numbers are formatted with 4 significant digits.
    rows : sequence of mappings, default ()
        A second table, one row per mapping (columns: the union of the keys, in order).
    fig : matplotlib.figure.Figure or sequence of them, optional
        Shown under the tables (:func:`figure_html`).

    Returns
    -------
    str
        A ``<div>`` fragment.
    """
    body = "".join(f'<tr><th {_TH}>{_esc(k)}</th><td {_td(v)}>{_esc(_num(v))}</td></tr>' for k, v in facts.items())
    out = f'<div class="hiddenstate"><b>{_esc(title)}</b><table {_TABLE}>{body}</table>'
    if rows:
        cols = list(dict.fromkeys(k for r in rows for k in r))
        head = "".join(f"<th {_TH}>{_esc(c)}</th>" for c in cols)
        trs = "".join("<tr>" + "".join(f"<td {_td(r.get(c, ''))}>{_esc(_num(r.get(c, '')))}</td>" for c in cols)
                      + "</tr>" for r in rows)
        out += f"<table {_TABLE}><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>"
    for f in (() if fig is None else fig if isinstance(fig, (list, tuple)) else (fig,)):
        out += figure_html(f)
    return out + "</div>"


def figure_html(fig, alt: str = "figure", *, dpi: float = NOTEBOOK_DPI) -> str:
    """An ``<img>`` with the figure inline as a PNG (house style, notebook resolution).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    alt : str, default "figure"
        The image's alternative text.
    dpi : float, default NOTEBOOK_DPI (100)
        Resolution of the PNG, lowered for a figure wider than 7.2 inches so that it is at most
        the 720 pixels it is shown at (the report's 160 made a PCA figure several hundred kB).

    Returns
    -------
    str
        ``<img src="data:image/png;base64,...">``, at most 720 pixels wide.
    """
    with style():
        b64 = png_base64(fig, dpi=min(float(dpi), 720.0 / fig.get_figwidth()))  # no wider than it is shown
    return f'<img alt="{_esc(alt)}" style="max-width:720px" src="data:image/png;base64,{b64}">'


def gate_stats_html(g) -> str:
    """A gate's per-unit statistics (``GateStats``): key numbers and the saturation scatter.

    Parameters
    ----------
    g : GateStats
        Reads ``name``, ``mean``, ``left``, ``right``, ``n_steps``, ``low``, ``high``, ``time_constant``
        and ``keep`` (when present).

    Returns
    -------
    str
        The fragment.
    """
    from hiddenstate.report.plots import gates_figure

    facts = {"units (H)": int(np.size(g.mean)), "steps averaged": int(g.n_steps), "mean activation": float(np.mean(g.mean)),
             f"mean fraction < {g.low:g}": float(np.mean(g.left)), f"mean fraction > {g.high:g}": float(np.mean(g.right))}
    if getattr(g, "keep", None):
        tau = np.asarray(g.time_constant)
        facts["longest time constant [steps]"] = float(np.max(tau))
        facts["units with τ ≥ 10 steps"] = int(np.sum(tau >= 10))
    return facts_html(f"GateStats {g.name}", facts, fig=gates_figure([g]))


def memory_html(mc) -> str:
    """A memory curve (``MemoryCurve``): capacity, horizon, chance and the curve.

    Parameters
    ----------
    mc : MemoryCurve
        Reads ``lags``, ``score``, ``metric``, ``chance``, ``alpha``, ``capacity``, ``horizon``.

    Returns
    -------
    str
        The fragment.
    """
    from hiddenstate.report.plots import memory_figure

    facts = {"metric": "held-out R²" if mc.metric == "r2" else "held-out accuracy", "lags": f"0..{int(mc.lags[-1])}",
             "capacity": float(mc.capacity), "horizon (score ≥ 0.5)": int(mc.horizon(0.5)),
             "score at lag 0": float(mc.score[0]), "chance": float(mc.chance), "ridge α": float(mc.alpha)}
    return facts_html("MemoryCurve", facts, fig=memory_figure({"memory": mc}))


def jacobian_flow_html(j) -> str:
    """Jacobian-product norms against lag (``JacobianFlow``).

    Parameters
    ----------
    j : JacobianFlow
        Reads ``lags``, ``spectral``, ``frobenius``, ``block``.

    Returns
    -------
    str
        The fragment.
    """
    from hiddenstate.report.plots import gradient_figure

    K = int(j.lags[-1])
    facts = {"lags": f"0..{K}", "block": j.block, f"σ_max(∂h_T/∂h_T-{K})": float(j.spectral[-1]),
             f"Frobenius norm at lag {K}": float(j.frobenius[-1])}
    fig = gradient_figure({"largest singular value": (j.lags, j.spectral), "Frobenius norm": (j.lags, j.frobenius)})
    return facts_html("JacobianFlow", facts, fig=fig)


def gradient_norms_html(g) -> str:
    """BPTT gradient norms against lag (``GradientNorms``), one curve per layer.

    Parameters
    ----------
    g : GradientNorms
        Reads ``norm`` (L, T), ``initial`` (L,) and ``curve``.

    Returns
    -------
    str
        The fragment.
    """
    from hiddenstate.report.plots import gradient_figure

    L, T = np.shape(g.norm)
    rows = [{"layer": li, "‖dL/dh_T‖ (lag 0)": float(g.norm[li, -1]), f"lag {T - 1}": float(g.norm[li, 0]),
             "initial state": float(g.initial[li])} for li in range(L)]
    fig = gradient_figure({f"layer {li}": g.curve(li) for li in range(L)})
    return facts_html("GradientNorms", {"layers": L, "steps": T}, rows, fig=fig)


def fixed_points_html(fps) -> str:
    """Fixed points (a sequence of ``FixedPoint``): counts by kind, one row each, the eigenvalues.

    Parameters
    ----------
    fps : sequence of FixedPoint
        Reads each point's ``kind``, ``q``, ``spectral_radius``, ``n_unstable``, ``n_hits``, ``h``,
        ``eigenvalues``, and the sequence's ``n_starts`` when present.

    Returns
    -------
    str
        The fragment.
    """
    from hiddenstate.report.plots import eigenvalue_figure

    facts = {"points": len(fps)}
    if getattr(fps, "n_starts", None) is not None:
        facts["starts"] = int(fps.n_starts)
    for kind in ("stable", "marginal", "saddle", "unstable"):
        facts[kind] = sum(p.kind == kind for p in fps)
    rows = [{"#": i, "kind": p.kind, "unstable dims": int(p.n_unstable), "max |λ|": float(p.spectral_radius),
             "q": float(p.q), "‖h*‖": float(np.linalg.norm(p.h)), "starts that ended here": int(p.n_hits)}
            for i, p in enumerate(list(fps)[:15])]
    return facts_html("Fixed points", facts, rows, fig=eigenvalue_figure(fps) if len(fps) else None)


def pca_html(p) -> str:
    """A PCA of states (``PCAResult``): explained variance and the trajectory.

    Parameters
    ----------
    p : PCAResult
        Reads ``components``, ``explained_variance_ratio``, ``scores``, ``n_components_for``.

    Returns
    -------
    str
        The fragment.
    """
    from hiddenstate.report.plots import pca_figure

    evr = np.asarray(p.explained_variance_ratio)
    K, H = np.shape(p.components)
    # percentages, as the plot's axis labels give them (43.1 %, not 0.4308)
    facts = {"components (K) × state size (H)": f"{K} × {H}", "PC1 explains": f"{100 * float(evr[0]):.1f} %",
             "PC1 + PC2 explain": f"{100 * float(evr[:2].sum()):.1f} %",
             "components for 90 %": int(p.n_components_for(0.9))}
    return facts_html("PCAResult", facts, fig=pca_figure(p) if np.ndim(p.scores) in (2, 3) else None)


def trace_html(tr) -> str:
    """A trace: its shape and one row per layer and direction.

    Parameters
    ----------
    tr : Trace
        Reads ``kind``, ``num_layers``, ``num_directions``, ``mask``, ``output`` (the heat map of
        sequence 0, :func:`~hiddenstate.report.plots.state_figure`) and each layer trace's
        ``label``, ``h``, ``gates``, ``mask``.

    Returns
    -------
    str
        The fragment.
    """
    from hiddenstate.report.plots import state_figure

    T, N = np.shape(tr.mask)
    rows = []
    for lt in tr:
        m = lt.mask
        norms = np.linalg.norm(lt.h, axis=-1)[m]
        row = {"layer": lt.label, "H": int(lt.h.shape[-1]), "mean ‖h_t‖": float(norms.mean()) if norms.size else 0.0}
        for g, v in lt.gates.items():
            row[f"mean {g}"] = float(v[m].mean()) if m.any() else 0.0
        rows.append(row)
    facts = {"kind": tr.kind.upper(), "layers × directions": f"{tr.num_layers} × {tr.num_directions}",
             "steps (T) × sequences (N)": f"{T} × {N}", "valid steps": int(np.sum(tr.mask))}
    h0 = np.asarray(tr.output)[np.asarray(tr.mask)[:, 0], 0]  # (T', D*H): sequence 0's valid steps
    return facts_html("Trace", facts, rows, fig=state_figure(h0) if h0.size and np.isfinite(h0).all() else None)


def analysis_html(an) -> str:
    """An analysis: its header facts, what was measured (with the key number of each) and what was not.

    Parameters
    ----------
    an : Analysis
        Reads ``meta``, ``gates``, ``gradient``, ``gradient_refs``, ``memory``, ``jacobian``,
        ``gradient_norms``, ``pca``, ``fixed_points``, ``units``, ``skipped``, ``timings``.

    Returns
    -------
    str
        The fragment: the tables, then the report's gate-saturation, gradient-flow and memory
        figures (those measured); ``hiddenstate.build_report(path, an)`` draws all of them.
    """
    from hiddenstate.report.plots import gates_figure, gradient_figure, memory_figure

    rows = []
    for g in an.gates:
        rows.append({"measurement": f"gate {g.name}", "key number": f"mean {float(np.mean(g.mean)):.3f}"})
    if an.jacobian is not None:
        rows.append({"measurement": "Jacobian flow",
                     "key number": f"σ_max at lag {int(an.jacobian.lags[-1])}: {float(an.jacobian.spectral[-1]):.3g}"})
    if an.gradient_norms is not None:
        rows.append({"measurement": "BPTT gradient norms", "key number": f"{np.shape(an.gradient_norms.norm)[1]} steps"})
    if an.memory is not None:
        rows.append({"measurement": "memory curve", "key number": f"capacity {float(an.memory.capacity):.2f}"})
    if an.pca is not None:
        rows.append({"measurement": "PCA",
                     "key number": f"PC1+PC2 explain {100 * float(np.sum(an.pca.explained_variance_ratio[:2])):.1f} %"})
    if an.fixed_points is not None:
        rows.append({"measurement": "fixed points", "key number": f"{len(an.fixed_points)} found"})
    for name, u in an.units.items():
        rows.append({"measurement": f"feature {name}", "key number": f"unit {int(u.top_units[0])}, r = {float(u.top_r[0]):+.2f}"})
    for name, why in an.skipped.items():
        rows.append({"measurement": f"{name} (not measured)", "key number": why})
    facts = dict(an.meta)
    if an.timings:
        facts["seconds"] = float(sum(an.timings.values()))
    figs = ([gates_figure(an.gates)] if an.gates else []) + (
        [gradient_figure(an.gradient, an.gradient_refs or None)] if an.gradient else []) + (
        [memory_figure({"memory": an.memory})] if an.memory is not None else [])
    return facts_html("Analysis", facts, rows, fig=figs)


class Report(type(pathlib.Path())):
    """The HTML report written by :func:`hiddenstate.build_report`: its path, shown as the page in a notebook.

    A :class:`pathlib.Path` (of the platform's flavour), so ``report.read_text()``, ``open(report)``,
    ``os.fspath(report)`` and comparisons with other paths work as before.

    Parameters
    ----------
    *args : str or os.PathLike
        The path's segments, as for :class:`pathlib.Path`.
    **kwargs
        As for :class:`pathlib.Path` (none on most Python versions).
    """

    def __repr__(self) -> str:
        """``Report('path', 2.41 MB)`` (the size of the file, when it exists)."""
        size = f", {self.stat().st_size / 1e6:.2f} MB" if self.is_file() else ""
        return f"Report({str(self)!r}{size})"

    def _repr_html_(self, height: int = 720) -> str:
        """The page in an ``<iframe srcdoc>`` (self-contained, so it renders inside the notebook)."""
        if not self.is_file():
            return f"<p>{_esc(self)} (no such file)</p>"
        page = self.read_text(encoding="utf-8")
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{int(height)}px;'
                f'border:1px solid #e8eaed;border-radius:8px" sandbox="allow-scripts"></iframe>')
