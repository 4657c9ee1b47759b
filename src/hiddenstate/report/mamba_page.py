"""The HTML report of a Mamba model's state: :func:`build_mamba_report` (one self-contained page, no network).

Reads a :class:`hiddenstate.probe.mamba.MambaAnalysis` by its attributes (this layer does not
import the probes): per layer the decay ``exp(dt A)`` as the keep gate (statistics, the
channels' time constants), the step size, the exact gradient-against-lag curve, PCA, and the
"Not measured" card with its reasons.
"""

from __future__ import annotations

import datetime
import html

import numpy as np

from hiddenstate.report.target import write_report
from hiddenstate.version import __version__

__all__ = ["build_mamba_report", "mamba_page"]

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
          "table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.25rem .5rem;"
          "text-align:right}th{background:#f4f4f4}section{border:1px solid #ddd;border-radius:6px;padding:.5rem 1rem;"
          "margin:1rem 0}footer{color:#888;font-size:.8rem;margin-top:2rem}")


def _curve(ys: np.ndarray, label: str) -> str:
    """A small inline SVG line chart of ``ys`` (values in [0, 1]) against their index."""
    w, h, pad = 360, 140, 24
    n = max(len(ys) - 1, 1)
    pts = " ".join(f"{pad + (w - 2 * pad) * i / n:.1f},{h - pad - (h - 2 * pad) * float(np.clip(y, 0, 1)):.1f}"
                   for i, y in enumerate(ys))
    return (f'<svg width="{w}" height="{h}" role="img" aria-label="{html.escape(label)}">'
            f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{pts}"/>'
            f'<text x="{pad}" y="{pad - 6}" font-size="11">1</text>'
            f'<text x="{w - pad - 40}" y="{h - 6}" font-size="11">lag {len(ys) - 1}</text></svg>')


def _layer(la) -> str:
    tau = la.channel_time_constant
    q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
    rows = [("mean decay exp(dt A)", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"state entries kept > {la.decay.high:g} (share of steps)", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"state entries kept < {la.decay.low:g} (share of steps)", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("channel time constant 1/(1 - mean decay), 10/50/90%", " / ".join(f"{v:.3g}" for v in q) + " steps"),
            ("longest channel time constant", f"{float(np.max(tau)):.4g} steps (channel {int(np.argmax(tau))})"),
            ("mean step size dt", f"{float(np.mean(la.mean_dt)):.4g}"),
            ("output gate sigmoid(z) open > 0.9 / shut < 0.1",
             f"{100 * float(np.mean(la.gate.right)):.1f}% / {100 * float(np.mean(la.gate.left)):.1f}%"),
            (f"|dh_T/dh_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2><table>{body}</table>'
            f"<p>The exact Jacobian product dh<sub>T</sub>/dh<sub>T-k</sub> (the diagonal of the last k decays), its "
            f"largest entry against the lag k:</p>{_curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            f"</section>")


def mamba_page(analysis, *, title: str = "Inside a Mamba model", subtitle: str = "") -> str:
    """The report's HTML text.

    Parameters
    ----------
    analysis : MambaAnalysis
        From :func:`hiddenstate.probe.mamba.analyze_mamba`.
    title : str, default "Inside a Mamba model"
    subtitle : str, default ""

    Returns
    -------
    str
        A self-contained HTML page.
    """
    m = analysis.meta
    skipped = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in analysis.not_measured.items())
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} layer(s), SSM state (Di={m.get('d_inner')}, "
            f"S={m.get('d_state')}) and convolution state (Di, K-1={m.get('d_conv', 1) - 1}) per sequence; measured on "
            f"{m.get('T')} steps of {m.get('N')} sequence(s).</p>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p>{head}"
            + "".join(_layer(la) for la in analysis.layers)
            + f'<section id="skipped"><h2>Not measured</h2><p>What the report of the other kinds shows and this one '
              f"does not, and why.</p><ul>{skipped}</ul></section>"
            f"<footer>hiddenstate {__version__} · generated {stamp} · self-contained, no network needed</footer>"
            "</body></html>")


def build_mamba_report(out, analysis, *, title: str = "Inside a Mamba model", subtitle: str = ""):
    """Write the report of a Mamba analysis to ``out`` (a new file or a previous hiddenstate report).

    Parameters
    ----------
    out : str or os.PathLike
    analysis : MambaAnalysis
    title : str, default "Inside a Mamba model"
    subtitle : str, default ""

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    TypeError, ValueError
        From :func:`hiddenstate.report.target.check_report_path` (nothing is written).
    """
    return write_report(out, mamba_page(analysis, title=title, subtitle=subtitle))
