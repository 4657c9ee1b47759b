"""One self-contained HTML page that shows what a recurrent network's hidden state does.

:func:`build_report` takes measurements made with this package (loss history, gate statistics,
gradient norms against lag, memory curves, PCA of a trajectory, fixed points, per-character unit
activations) and writes a single HTML file: figures are PNGs embedded as base64 ``data:`` URIs,
the style sheet and the few lines of script are inline, and nothing is fetched from the network,
so the file opens from disk, can be mailed, and renders the same everywhere.

Each section is optional and appears only when its measurement is given. The text view colours
every character by the activation of chosen units, as in the "quote cell" figure of Karpathy,
Johnson and Fei-Fei (2015): warm for positive, cool for negative activations (or white to warm
for values in [0, 1] such as gates); hovering a character shows its value.

References
----------
A. Karpathy, J. Johnson, L. Fei-Fei, "Visualizing and understanding recurrent networks",
arXiv:1506.02078, 2015.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import os
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["build_report", "render_html"]

# Palette (colour-blind safe, Okabe-Ito based) shared by figures and page.
_COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#7f7f7f", "#F0E442"]
_KIND_COLORS = {"stable": "#009E73", "marginal": "#E69F00", "saddle": "#D55E00", "unstable": "#CC79A7"}
_WARM = (213, 94, 0)  # positive activations
_COOL = (0, 114, 178)  # negative activations


# --------------------------------------------------------------------------- figures

def _rc():
    import matplotlib

    return matplotlib.rc_context({
        "font.size": 9.5,
        "axes.titlesize": 10.5,
        "axes.labelsize": 9.5,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.edgecolor": "#9aa0a6",
        "axes.labelcolor": "#3c4043",
        "axes.grid": True,
        "grid.color": "#e8eaed",
        "grid.linewidth": 0.8,
        "xtick.color": "#5f6368",
        "ytick.color": "#5f6368",
        "legend.frameon": False,
        "legend.fontsize": 8.5,
        "axes.prop_cycle": matplotlib.cycler(color=_COLORS),
        "figure.dpi": 100,
        "savefig.dpi": 160,
    })


def _figure(width=6.0, height=3.4, ncols=1, **kw):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, **kw)
    return fig, axes


def _png(fig) -> str:
    buf = io.BytesIO()
    with np.errstate(all="ignore"):  # matplotlib's internals may under/overflow harmlessly
        fig.savefig(buf, format="png", facecolor="white")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _xy(name, obj):
    """(x, y) float arrays from an array (x = 0..n-1) or a pair (x, y)."""
    if isinstance(obj, tuple) and len(obj) == 2:
        x, y = np.asarray(obj[0], dtype=np.float64), np.asarray(obj[1], dtype=np.float64)
    else:
        y = np.asarray(obj, dtype=np.float64).reshape(-1)
        x = np.arange(y.size, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"{name} must be an array (n,) or a pair (x, y) of equal-length arrays; got shapes "
                         f"{x.shape} and {y.shape}.")
    return x, y


def _fig_loss(loss) -> str:
    with _rc():
        fig, ax = _figure(6.0, 3.2)
        for name, obj in loss.items():
            x, y = _xy(f"loss[{name!r}]", obj)
            ok = np.isfinite(y)
            ax.plot(x[ok], y[ok], lw=1.6, label=name)
            if ok.any():
                ax.annotate(f"{y[ok][-1]:.3f}", (x[ok][-1], y[ok][-1]), textcoords="offset points",
                            xytext=(4, 0), va="center", fontsize=8, color="#3c4043")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(loc="upper right")
        return _png(fig)


def _is_keep_gate(name: str) -> bool:
    last = name.strip().split()[-1].lower() if name.strip() else ""
    return last in ("z", "f", "update", "forget")


def _fig_gates(gates) -> str:
    keep = [g for g in gates if _is_keep_gate(g.name)]
    with _rc():
        fig, axes = (_figure(6.4, 3.3, ncols=2, width_ratios=[1.15, 1]) if keep else _figure(6.0, 3.3))
        ax = axes[0] if keep else axes
        ax.fill_between([0, 1], [1, 0], [1, 1], color="#f1f3f4", zorder=0, lw=0)
        ax.plot([0, 1], [1, 0], color="#bdc1c6", lw=0.8, zorder=1)
        for i, g in enumerate(gates):
            ax.scatter(g.left, g.right, s=18, alpha=0.75, color=_COLORS[i % len(_COLORS)],
                       edgecolors="white", linewidths=0.4, label=g.name, zorder=2)
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.03)
        ax.set_aspect("equal")
        ax.set_xlabel(f"fraction left-saturated (< {gates[0].low:g})")
        ax.set_ylabel(f"fraction right-saturated (> {gates[0].high:g})")
        ax.set_title("gate saturation, one dot per unit")
        ax.legend(loc="upper right", markerscale=1.3)
        if keep:
            ax2 = axes[1]
            for i, g in enumerate(keep):
                tau = np.sort(np.minimum(g.time_constant, 1e6))[::-1]
                ax2.plot(np.arange(1, tau.size + 1), tau, marker="o", ms=3, lw=1.2, label=g.name,
                         color=_COLORS[gates.index(g) % len(_COLORS)])
            ax2.set_yscale("log")
            _plain_log_ticks(ax2.yaxis)
            ax2.set_xlabel("unit (sorted)")
            ax2.set_ylabel("time constant 1/(1 - mean) [steps]")
            ax2.set_title("memory time constant")
            ax2.axhline(10, color="#bdc1c6", lw=0.8, ls="--")
            ax2.legend(loc="upper right")
        return _png(fig)


def _plain_log_ticks(axis):
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _fig_gradient(gradient, refs) -> str:
    with _rc():
        fig, ax = _figure(6.0, 3.4)
        lo = np.inf
        for name, obj in gradient.items():
            x, y = _xy(f"gradient[{name!r}]", obj)
            ok = np.isfinite(y) & (y > 0)
            if ok.any():
                lo = min(lo, y[ok].min())
                ax.plot(x[ok], y[ok], lw=1.8, label=name)
        for j, (name, obj) in enumerate((refs or {}).items()):
            x, y = _xy(f"gradient_refs[{name!r}]", obj)
            ok = np.isfinite(y) & (y > 0)
            if ok.any():
                ax.plot(x[ok], y[ok], lw=1.0, ls="--", color=["#5f6368", "#9aa0a6", "#3c4043"][j % 3], label=name)
        ax.set_yscale("log")
        if np.isfinite(lo):
            ax.set_ylim(bottom=max(lo * 0.3, 1e-300))
        ax.set_xlabel("lag k (steps back from the last step)")
        ax.set_ylabel("norm")
        ax.legend(loc="best")
        return _png(fig)


def _fig_memory(memory) -> str:
    with _rc():
        fig, ax = _figure(6.0, 3.4)
        metric = None
        for i, (name, mc) in enumerate(memory.items()):
            color = _COLORS[i % len(_COLORS)]
            ax.plot(mc.lags, mc.score, marker="o", ms=3.5, lw=1.6, color=color,
                    label=f"{name} (capacity {mc.capacity:.1f})")
            if mc.metric == "accuracy":
                ax.axhline(mc.chance, color=color, lw=0.8, ls=":")
            metric = mc.metric
        ax.axhline(0.0, color="#9aa0a6", lw=0.8)
        ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.05)
        ax.set_xlabel("lag k")
        ax.set_ylabel("held-out R²" if metric == "r2" else "held-out accuracy")
        ax.legend(loc="upper right")
        return _png(fig)


def _fig_pca(res, fixed_points) -> str:
    from matplotlib.collections import LineCollection

    sc = np.asarray(res.scores)
    if sc.shape[-1] < 2:
        sc = np.concatenate([sc, np.zeros(sc.shape[:-1] + (1,))], axis=-1)
    trajs = [sc] if sc.ndim == 2 else [sc[:, n] for n in range(min(sc.shape[1], 4))]
    with _rc():
        fig, axes = _figure(12.5, 4.6, ncols=2, width_ratios=[1.9, 1])
        ax, ax2 = axes
        for j, tr in enumerate(trajs):
            pts = tr[:, :2]
            segs = np.stack([pts[:-1], pts[1:]], axis=1)
            lw = 1.4 if len(segs) < 300 else (0.9 if len(segs) < 1000 else 0.45)
            lc = LineCollection(segs, cmap="viridis", linewidths=lw if j == 0 else 0.6 * lw,
                                alpha=(0.95 if len(segs) < 1000 else 0.7) if j == 0 else 0.4)
            lc.set_array(np.arange(len(segs), dtype=np.float64))
            ax.add_collection(lc)
            ax.scatter(pts[:1, 0], pts[:1, 1], marker="o", s=28, color="#3c4043", zorder=3,
                       label="start" if j == 0 else None)
            ax.scatter(pts[-1:, 0], pts[-1:, 1], marker="s", s=26, color="#fde725", edgecolors="#3c4043",
                       zorder=3, label="end" if j == 0 else None)
        allpts = np.concatenate([t[:, :2] for t in trajs])
        lo, hi = allpts.min(axis=0), allpts.max(axis=0)
        span = np.maximum(hi - lo, 1e-9)
        if fixed_points:
            seen = set()
            for p in fixed_points:
                if p.h.shape != res.mean.shape:
                    continue
                xy = res.transform(p.h)[:2]
                if xy.size < 2:
                    xy = np.append(xy, 0.0)
                if np.any(xy < lo - 0.5 * span) or np.any(xy > hi + 0.5 * span):
                    continue  # far from every visited state: would squash the trajectory
                stable = p.kind == "stable"
                lab = None if p.kind in seen else f"{p.kind} fixed point"
                seen.add(p.kind)
                ax.scatter([xy[0]], [xy[1]], s=260 if stable else 130, marker="*" if stable else "X",
                           color=_KIND_COLORS.get(p.kind, "#3c4043"), edgecolors="#202124", linewidths=0.9,
                           zorder=5, label=lab)
        ax.autoscale_view()
        fig.colorbar(lc, ax=ax, label="time step", shrink=0.85, pad=0.01)
        evr = res.explained_variance_ratio
        ax.set_xlabel(f"PC1 ({100 * evr[0]:.1f} %)")
        ax.set_ylabel(f"PC2 ({100 * evr[1]:.1f} %)" if evr.size > 1 else "PC2")
        ax.set_title("trajectory in the top-two PC plane")
        ax.legend(loc="best", fontsize=7.5)
        k = min(10, evr.size)
        ax2.bar(np.arange(1, k + 1), evr[:k], color=_COLORS[0], alpha=0.85, label="per component")
        ax2.plot(np.arange(1, k + 1), np.cumsum(evr[:k]), color=_COLORS[1], marker="o", ms=3, label="cumulative")
        ax2.set_ylim(0, 1.05)
        ax2.set_xlabel("component")
        ax2.set_ylabel("explained variance ratio")
        ax2.set_title("explained variance")
        ax2.legend(loc="upper left")
        return _png(fig)


def _fig_eigs(fixed_points) -> str:
    with _rc():
        fig, ax = _figure(3.6, 3.4)
        th = np.linspace(0, 2 * np.pi, 256)
        ax.plot(np.cos(th), np.sin(th), color="#9aa0a6", lw=1.0, ls="--")
        seen = set()
        for p in fixed_points:
            ev = np.asarray(p.eigenvalues)
            lab = None if p.kind in seen else p.kind
            seen.add(p.kind)
            ax.scatter(ev.real, ev.imag, s=14, alpha=0.7, color=_KIND_COLORS.get(p.kind, "#3c4043"), label=lab,
                       edgecolors="none")
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel("Re λ")
        ax.set_ylabel("Im λ")
        ax.set_title("Jacobian eigenvalues")
        ax.legend(loc="upper right", fontsize=7.5)
        return _png(fig)


# --------------------------------------------------------------------------- HTML pieces

_CSS = """
:root { --ink:#202124; --muted:#5f6368; --line:#e8eaed; --card:#fff; --bg:#f6f7f9; --accent:#0072B2; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { background: linear-gradient(135deg, #0b3d5c 0%, #0072B2 60%, #2a9d8f 100%); color:#fff;
  padding: 34px 40px 26px; }
header h1 { margin:0 0 4px; font-size: 28px; font-weight: 650; letter-spacing: -0.01em; }
header p.sub { margin:0 0 14px; opacity:.9; max-width: 900px; }
.chips { display:flex; flex-wrap:wrap; gap:8px; }
.chip { background: rgba(255,255,255,.14); border:1px solid rgba(255,255,255,.25); border-radius: 999px;
  padding: 3px 12px; font-size: 13px; white-space: nowrap; }
.chip b { font-weight: 600; }
nav { position: sticky; top:0; z-index: 5; background: rgba(255,255,255,.94); backdrop-filter: blur(6px);
  border-bottom:1px solid var(--line); padding: 8px 40px; display:flex; gap: 18px; flex-wrap: wrap; font-size: 13.5px; }
nav a { color: var(--muted); text-decoration:none; } nav a:hover { color: var(--accent); }
main { max-width: 1280px; margin: 0 auto; padding: 24px 28px 40px; }
.grid { display:grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 20px; }
section.card { background:var(--card); border:1px solid var(--line); border-radius: 12px; padding: 18px 20px 14px;
  box-shadow: 0 1px 2px rgba(60,64,67,.06); margin-bottom: 20px; }
.grid section.card { margin-bottom: 0; }
section.card.wide { grid-column: 1 / -1; }
h2 { font-size: 17px; margin: 0 0 2px; font-weight: 620; }
p.what { color: var(--muted); margin: 0 0 12px; font-size: 13.5px; }
img.fig { width: 100%; height: auto; display:block; border-radius: 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13.5px; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); }
th { color: var(--muted); font-weight: 600; font-size: 13px; }
tr:hover td { background: #fafbfc; }
.badge { display:inline-block; border-radius: 999px; padding: 1px 9px; font-size: 12px; font-weight: 600; color:#fff; }
.fp { display:grid; grid-template-columns: minmax(0, 2fr) minmax(260px, 1fr); gap: 18px; align-items: start; }
.textviews { display:grid; grid-template-columns: repeat(auto-fit, minmax(540px, 1fr)); gap: 4px 22px; }
.textview { margin-bottom: 12px; min-width: 0; }
.unit-head { display:flex; justify-content: space-between; align-items: baseline; gap: 12px; margin: 10px 0 6px; }
.unit-head b { font-size: 14px; }
.readout { color: var(--muted); font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; min-height: 1.2em; }
pre.chars { margin:0; padding: 12px 14px; background: #fcfcfd; border:1px solid var(--line); border-radius: 8px;
  font: 13px/1.65 ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
  white-space: pre-wrap; word-break: break-all; max-height: 340px; overflow:auto; }
pre.chars span.nl::before { content: "\\21B5"; color: #9aa0a6; }
.legend { display:flex; align-items:center; gap: 8px; font-size: 12px; color: var(--muted); }
.legend .bar { width: 160px; height: 10px; border-radius: 5px; border:1px solid var(--line); }
footer { color: var(--muted); font-size: 12.5px; text-align:center; padding: 10px 0 30px; }
.empty { color: var(--muted); font-style: italic; }
@media (max-width: 700px) { header, nav { padding-left: 18px; padding-right: 18px; } main { padding: 14px; }
  .grid { grid-template-columns: 1fr; } .fp { grid-template-columns: 1fr; } }
"""

_JS = """
(function () {
  document.querySelectorAll('pre.chars').forEach(function (pre) {
    var out = document.getElementById(pre.dataset.readout);
    pre.addEventListener('mouseover', function (ev) {
      var s = ev.target;
      if (!s || s.tagName !== 'SPAN' || s.dataset.v === undefined) return;
      var ch = s.classList.contains('nl') ? '\\\\n' : s.textContent;
      out.textContent = 't = ' + s.dataset.t + '   ' + JSON.stringify(ch) + '   value ' + s.dataset.v;
    });
  });
})();
"""


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if v == 0 or (1e-3 <= abs(v) < 1e5):
            return f"{v:.4g}"
        return f"{v:.2e}"
    if isinstance(v, (np.integer,)):
        return str(int(v))
    return str(v)


def _card(anchor, title, what, body, wide=False) -> str:
    cls = "card wide" if wide else "card"
    return (f'<section class="{cls}" id="{anchor}"><h2>{_esc(title)}</h2>'
            f'<p class="what">{what}</p>{body}</section>')


def _img(b64, alt) -> str:
    return f'<img class="fig" alt="{_esc(alt)}" src="data:image/png;base64,{b64}">'


def _table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return '<p class="empty">(empty)</p>'
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_esc(_fmt(r.get(c, '')))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fp_table(points, max_rows: int = 15) -> str:
    rows = []
    for i, p in enumerate(points[:max_rows]):
        col = _KIND_COLORS.get(p.kind, "#5f6368")
        kind = f'<span class="badge" style="background:{col}">{_esc(p.kind)}</span>'
        rows.append(
            f"<tr><td>{i}</td><td>{kind}</td><td>{p.n_unstable}</td><td>{p.spectral_radius:.4f}</td>"
            f"<td>{_fmt(p.q)}</td><td>{float(np.linalg.norm(p.h)):.3f}</td><td>{p.n_hits}</td></tr>"
        )
    if len(points) > max_rows:
        counts = {}
        for p in points[max_rows:]:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        rest = ", ".join(f"{n} {k}" for k, n in counts.items())
        rows.append(f'<tr><td colspan="7" class="empty">… and {len(points) - max_rows} more ({rest})</td></tr>')
    head = ("<tr><th>#</th><th>kind</th><th>unstable dims</th><th>max |λ|</th><th>q</th>"
            "<th>‖h*‖</th><th>starts</th></tr>")
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _rgba(v: float, lo: float, hi: float, diverging: bool) -> str:
    if diverging:
        a = min(abs(v) / hi, 1.0) if hi > 0 else 0.0
        c = _WARM if v >= 0 else _COOL
    else:
        a = min(max((v - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 0.0
        c = _WARM
    return f"rgba({c[0]},{c[1]},{c[2]},{0.88 * a:.2f})"


def _textview(idx: int, label: str, text: str, values: np.ndarray) -> str:
    v = np.asarray(values, dtype=np.float64)
    lo, hi = float(np.min(v)), float(np.max(v))
    diverging = lo < 0.0
    scale = max(abs(lo), abs(hi)) if diverging else hi
    base_lo = 0.0 if (not diverging and lo >= 0 and hi <= 1) else lo
    base_hi = 1.0 if (not diverging and lo >= 0 and hi <= 1) else hi
    parts = []
    for t, ch in enumerate(text):
        bg = _rgba(v[t], base_lo, scale if diverging else base_hi, diverging)
        strong = (abs(v[t]) / scale if diverging and scale > 0 else
                  (v[t] - base_lo) / (base_hi - base_lo) if base_hi > base_lo else 0.0) > 0.7
        style = f"background:{bg}" + (";color:#fff" if strong else "")
        if ch == "\n":
            parts.append(f'<span class="nl" style="{style}" data-t="{t}" data-v="{v[t]:.3f}"></span>\n')
        else:
            parts.append(f'<span style="{style}" data-t="{t}" data-v="{v[t]:.3f}">{_esc(ch)}</span>')
    if diverging:
        bar = (f"linear-gradient(90deg, rgba({_COOL[0]},{_COOL[1]},{_COOL[2]},.88), #fff, "
               f"rgba({_WARM[0]},{_WARM[1]},{_WARM[2]},.88))")
        ends = (f"{-scale:.2f}", f"{scale:.2f}")
    else:
        bar = f"linear-gradient(90deg, #fff, rgba({_WARM[0]},{_WARM[1]},{_WARM[2]},.88))"
        ends = (f"{base_lo:.2f}", f"{base_hi:.2f}")
    rid = f"readout{idx}"
    return (
        f'<div class="textview"><div class="unit-head"><b>{_esc(label)}</b>'
        f'<span class="legend">{ends[0]}<span class="bar" style="background:{bar}"></span>{ends[1]}</span></div>'
        f'<pre class="chars" data-readout="{rid}">{"".join(parts)}</pre>'
        f'<div class="readout" id="{rid}">hover a character to read its value</div></div>'
    )


# --------------------------------------------------------------------------- public API

def _as_mapping(name, obj, default_key):
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (list, tuple)) and obj and all(hasattr(o, "name") for o in obj):
        return {o.name: o for o in obj}
    return {default_key: obj}


def render_html(
    *,
    title: str = "Inside the hidden state",
    subtitle: str | None = None,
    meta: Mapping[str, Any] | None = None,
    loss=None,
    gates=None,
    gradient=None,
    gradient_refs=None,
    memory=None,
    pca=None,
    fixed_points=None,
    text: str | None = None,
    text_units=None,
    tables: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    max_chars: int = 2000,
    project_fixed_points: bool = True,
) -> str:
    """Return the report as one HTML string (see :func:`build_report` for the parameters)."""
    with np.errstate(under="ignore"):  # tiny values (vanished gradients) may underflow when drawn
        return _render(title=title, subtitle=subtitle, meta=meta, loss=loss, gates=gates, gradient=gradient,
                       gradient_refs=gradient_refs, memory=memory, pca=pca, fixed_points=fixed_points, text=text,
                       text_units=text_units, tables=tables, max_chars=max_chars,
                       project_fixed_points=project_fixed_points)


def _render(*, title, subtitle, meta, loss, gates, gradient, gradient_refs, memory, pca, fixed_points, text,
            text_units, tables, max_chars, project_fixed_points) -> str:
    cards_grid, cards_wide, toc = [], [], []

    loss_m = _as_mapping("loss", loss, "train")
    if loss_m:
        cards_grid.append(_card("loss", "Loss", "Training (and validation) loss per step. A flat validation "
                                "curve under a falling training curve means the model is memorising.",
                                _img(_fig_loss(loss_m), "loss curve")))
        toc.append(("loss", "Loss"))

    gates_l = list(_as_mapping("gates", gates, "gate").values())
    if gates_l:
        cards_grid.append(_card(
            "gates", "Gate saturation",
            "Karpathy et al. (2015): each dot is one unit; its position is the fraction of steps its gate is "
            "nearly closed (&lt; 0.1) and nearly open (&gt; 0.9). Right: the time constant 1/(1 − mean) of the "
            "keep gates (GRU z, LSTM f) — units above the dashed line remember for more than 10 steps.",
            _img(_fig_gates(gates_l), "gate saturation scatter")))
        toc.append(("gates", "Gates"))

    grad_m = _as_mapping("gradient", gradient, "gradient")
    if grad_m:
        cards_grid.append(_card(
            "gradient", "Gradient flow over time",
            "Norm of the gradient reaching the hidden state k steps back. Pascanu, Mikolov &amp; Bengio (2013): "
            "with σ<sub>max</sub>(W<sub>hh</sub>) &lt; 1 a tanh RNN's gradient must vanish geometrically; gates "
            "that keep the state open a highway.",
            _img(_fig_gradient(grad_m, gradient_refs), "gradient norm against lag")))
        toc.append(("gradient", "Gradient"))

    mem_m = _as_mapping("memory", memory, "memory")
    if mem_m:
        cards_grid.append(_card(
            "memory", "Memory curve",
            "How well a linear readout of h<sub>t</sub> recovers the input k steps back, on held-out steps "
            "(ridge regression). The fixed-size state forgets: the curve falls with the lag; its area is the "
            "memory capacity (Jaeger 2001).",
            _img(_fig_memory(mem_m), "memory curve")))
        toc.append(("memory", "Memory"))

    fps = list(fixed_points) if fixed_points is not None else []
    if pca is not None:
        cards_wide.append(_card(
            "pca", "Trajectory in principal components",
            "The hidden state over time projected on its top two principal components (colour = time)"
            + ("; stars are stable fixed points, crosses unstable ones." if fps and project_fixed_points else "."),
            _img(_fig_pca(pca, fps if project_fixed_points else []), "PCA trajectory"), wide=True))
        toc.append(("pca", "PCA"))

    if fixed_points is not None:
        if fps:
            n_st = sum(p.kind == "stable" for p in fps)
            body = (f'<div class="fp"><div>{_fp_table(fps)}</div>'
                    f'<div>{_img(_fig_eigs(fps), "fixed point eigenvalues")}</div></div>')
            n_sad = sum(p.kind == "saddle" for p in fps)
            what = (f"Sussillo &amp; Barak (2013): minima of q(h) = ½‖F(h) − h‖² with the input held fixed. "
                    f"{len(fps)} distinct point{'s' if len(fps) != 1 else ''}, {n_st} stable"
                    + (f", {n_sad} saddle{'s' if n_sad != 1 else ''}: a saddle's unstable directions lead to the "
                       "attractors it separates." if n_sad else "."))
        else:
            body, what = '<p class="empty">No fixed point found from the given starts.</p>', "Sussillo &amp; Barak (2013)."
        cards_wide.append(_card("fixed", "Fixed points", what, body, wide=True))
        toc.append(("fixed", "Fixed points"))

    if text is not None and text_units:
        units = list(text_units.items()) if isinstance(text_units, Mapping) else list(text_units)
        shown = text[:max_chars]
        views = []
        for i, (label, vals) in enumerate(units):
            v = np.asarray(vals, dtype=np.float64).reshape(-1)
            if v.size < len(shown):
                raise ValueError(f"text_units[{label!r}] must have one value per character (>= {len(shown)}); got {v.size}.")
            if not np.isfinite(v[: len(shown)]).all():
                raise ValueError(f"text_units[{label!r}] must be finite; got NaN or Inf.")
            views.append(_textview(i, str(label), shown, v[: len(shown)]))
        more = f" (first {len(shown)} of {len(text)} characters)" if len(shown) < len(text) else ""
        cards_wide.append(_card(
            "text", "Text coloured by unit activation",
            "Each character's background is the unit's activation after reading it: warm positive, cool "
            f"negative (Karpathy et al. 2015's \"quote cell\" view){more}.",
            f'<div class="textviews">{"".join(views)}</div>', wide=True))
        toc.append(("text", "Text"))

    for j, (name, rows) in enumerate((tables or {}).items()):
        cards_wide.append(_card(f"table{j}", str(name), "", _table(list(rows)), wide=True))
        short = str(name).split(" (")[0]
        toc.append((f"table{j}", short if len(short) <= 32 else short[:30] + "…"))

    chips = "".join(f'<span class="chip">{_esc(k)}: <b>{_esc(_fmt(v))}</b></span>' for k, v in (meta or {}).items())
    nav = "".join(f'<a href="#{a}">{_esc(t)}</a>' for a, t in toc)
    content = ""
    if cards_grid:
        content += f'<div class="grid">{"".join(cards_grid)}</div><div style="height:20px"></div>'
    content += "".join(cards_wide)
    if not content:
        content = '<section class="card"><p class="empty">No measurements were given.</p></section>'
    try:
        from hiddenstate import __version__ as version
    except ImportError:  # pragma: no cover
        version = "?"
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    sub = f'<p class="sub">{_esc(subtitle)}</p>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_esc(title)}</h1>{sub}<div class=\"chips\">{chips}</div></header>"
        f"<nav>{nav}</nav><main>{content}</main>"
        f"<footer>hiddenstate {version} · generated {stamp} · self-contained, no network needed</footer>"
        f"<script>{_JS}</script></body></html>\n"
    )


def build_report(path, analysis=None, /, **measurements) -> pathlib.Path:
    """Write a self-contained HTML report of hidden-state measurements.

    Every measurement is optional; sections without data are left out.

    Parameters
    ----------
    path : str or os.PathLike
        Output file (``.html``); parent directories are created.
    analysis : hiddenstate.probe.analysis.Analysis, optional
        Everything :func:`hiddenstate.analyze_model` measured: its ``report_kwargs()`` supply the
        measurements below, and keywords given here override them.
    title : str, default "Inside the hidden state"
    subtitle : str, optional
        One line under the title (e.g. the model and data).
    meta : mapping of str to object, optional
        Key facts shown as chips in the header (``{"cell": "GRU", "H": 64, "val loss": 1.61}``).
    loss : mapping of str to array_like, or array_like, optional
        Loss curves by name; each an array of shape (S,) (x = 0..S-1) or a pair ``(steps, values)``.
    gates : sequence or mapping of :class:`~hiddenstate.gatestats.GateStats`, optional
        Plotted as the Karpathy et al. (2015) saturation scatter. Stats whose name ends in ``z``,
        ``f``, ``update`` or ``forget`` are keep gates and also get a time-constant plot.
    gradient : mapping of str to (lags, norms), optional
        Gradient or Jacobian-product norms against lag (log scale), e.g. from
        :mod:`hiddenstate.gradflow`.
    gradient_refs : mapping of str to (lags, values), optional
        Reference curves drawn dashed on the same axes (e.g. the bound ``0.9**k``).
    memory : :class:`~hiddenstate.memory.MemoryCurve` or mapping of str to it, optional
    pca : :class:`~hiddenstate.pca.PCAResult`, optional
        Its ``scores`` (T, K) or (T, N, K) are drawn as a trajectory coloured by time (up to 4
        sequences); fixed points of matching size are projected onto the same plane.
    fixed_points : sequence of :class:`~hiddenstate.fixedpoints.FixedPoint`, optional
        Summary table and eigenvalue plot.
    text : str, optional
        The text the activations were recorded on (one step per character).
    text_units : mapping of str to array_like (T,), or sequence of (label, values), optional
        Activations to colour ``text`` with, one view per entry (e.g. ``{"unit 17 (inside quotes,
        r=0.62)": h[:, 17]}``). Values in [0, 1] use a white-to-warm scale, others a diverging
        cool-white-warm scale symmetric about 0.
    tables : mapping of str to sequence of mappings, optional
        Extra tables (title -> rows), e.g. the Pascanu bound per weight matrix.
    max_chars : int, default 2000
        Characters of ``text`` shown.
    project_fixed_points : bool, default True
        Draw the fixed points in the PCA plane (only sensible when they live in the space the
        PCA was fitted on, e.g. a one-layer network; points of another size are never drawn).

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    ValueError
        If a measurement has the wrong shape (e.g. fewer activations than characters).
    TypeError
        If an unknown keyword is given.
    """
    allowed = {"title", "subtitle", "meta", "loss", "gates", "gradient", "gradient_refs", "memory", "pca",
               "fixed_points", "text", "text_units", "tables", "max_chars", "project_fixed_points"}
    unknown = sorted(set(measurements) - allowed)
    if unknown:
        raise TypeError(f"build_report got unknown keyword(s) {unknown}; allowed: {sorted(allowed)}.")
    if analysis is not None:
        measurements = {**analysis.report_kwargs(), **measurements}
    page = render_html(**measurements)
    out = pathlib.Path(os.fspath(path))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
