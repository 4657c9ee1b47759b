"""The causal trace's figure and page: a heatmap of layers x steps (:func:`trace_figure`), a report section, an HTML page.

Reads a :class:`~hiddenstate.edit.causal.result.CausalTrace` by its attributes (this layer does
not import the edit package): ``indirect_effect`` (L, S), ``normalized``, ``layers``, ``steps``,
``position``, ``model``, ``part``, ``clean_prob``, ``corrupted_prob``, ``cost``.
"""

from __future__ import annotations

import datetime
import html

import numpy as np

from hiddenstate.report.figures import figure, png_base64, style
from hiddenstate.version import __version__

__all__ = ["trace_figure", "trace_page", "trace_section"]


def trace_figure(values, layers, steps, *, title: str = "", label: str = "indirect effect", step_labels=None):
    """A heatmap of ``values``: one row per layer, one column per step, a diverging colour bar centred on 0.

    Parameters
    ----------
    values : array_like of shape (L, S)
        The indirect effect (or its normalised form) per layer and step.
    layers : sequence of int
        L row labels (the model's layer indices).
    steps : sequence of int
        S column labels (the restored steps).
    title : str, default ""
    label : str, default "indirect effect"
        The colour bar's label.
    step_labels : sequence of str, optional
        S tick labels instead of the step numbers (the tokens read).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        ``values`` not (L, S); ``step_labels`` not S long.
    """
    values = np.asarray(values, dtype=np.float64)
    L, S = len(layers), len(steps)
    if values.shape != (L, S):
        raise ValueError(f"values must have shape (L={L}, S={S}), one row per layer; got {values.shape}.")
    if step_labels is not None and len(step_labels) != S:
        raise ValueError(f"step_labels must hold one label per step ({S}); got {len(step_labels)}.")
    top = float(np.nanmax(np.abs(values))) if values.size and np.isfinite(values).any() else 0.0
    top = top or 1.0
    with style():
        fig, ax = figure(min(3.0 + 0.32 * S, 14.0), min(max(2.8, 1.6 + 0.32 * L), 10.0))
        image = ax.imshow(values, aspect="auto", cmap="RdBu_r", vmin=-top, vmax=top, interpolation="nearest")
        ax.grid(False)
        ax.set_yticks(range(L), [str(i) for i in layers])
        every = max(1, S // 24)
        ax.set_xticks(range(0, S, every), [str(s) for s in (step_labels or steps)][::every])
        ax.set_xlabel("restored step (the state after reading that token)")
        ax.set_ylabel("layer")
        if title:
            ax.set_title(title)
        fig.colorbar(image, ax=ax, label=label)
    return fig


def trace_section(trace, *, step_labels=None) -> str:
    """A report section (HTML) of a causal trace: its heatmap, the probabilities and what was restored.

    Parameters
    ----------
    trace : CausalTrace
    step_labels : sequence of str, optional
        As :func:`trace_figure`.

    Returns
    -------
    str
        ``<section id="causal-trace">...</section>``.
    """
    fig = trace.plot(step_labels=step_labels)
    ie = np.asarray(trace.indirect_effect)
    a, b = np.unravel_index(int(np.argmax(ie)), ie.shape)
    norm = trace.normalized
    best = f"{ie[a, b]:.4g}" + ("" if norm is None else f" ({norm[a, b]:.3g} of the gap)")
    rows = [("target probability, clean run", f"{float(np.mean(trace.clean_prob)):.4g}"),
            ("target probability, corrupted run", f"{float(np.mean(trace.corrupted_prob)):.4g}"),
            ("largest indirect effect", f"{best} at layer {trace.layers[a]}, step {trace.steps[b]}"),
            ("edited runs", f"{trace.cost.runs} ({trace.cost.seconds_per_run:.3g} s each)")]
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (f'<section id="causal-trace"><h2>Causal trace</h2><p>The corrupted run with one layer\'s '
            f"{html.escape(trace.part)} after one step restored from the clean run, continued by the model's own "
            f"code; each cell is the target token's probability at position {trace.position} minus the corrupted "
            f"run's (Meng et al. 2022, on the recurrent state itself). Averaged over {len(trace.clean_prob)} "
            f'sequence(s).</p><img alt="causal trace heatmap" src="data:image/png;base64,{png_base64(fig)}" '
            f'style="max-width:100%"><table>{table}</table></section>')


def trace_page(trace, *, title: str = "", step_labels=None) -> str:
    """A self-contained HTML page of a causal trace (:func:`trace_section` under a title).

    Parameters
    ----------
    trace : CausalTrace
    title : str, default ""
        "" gives ``"Causal trace of <model>"``.
    step_labels : sequence of str, optional

    Returns
    -------
    str
        The page; its footer marks it as a hiddenstate report
        (:func:`hiddenstate.report.target.check_report_path` replaces it, nothing else).
    """
    title = title or f"Causal trace of {trace.model}"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    style_css = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
                 "table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.25rem .5rem;"
                 "text-align:left}th{background:#f4f4f4}footer{color:#888;font-size:.8rem;margin-top:2rem}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{style_css}</style></head><body><h1>{html.escape(title)}</h1>"
            f"{trace_section(trace, step_labels=step_labels)}"
            f"<footer>hiddenstate {__version__} · generated {stamp} · self-contained, no network needed</footer>"
            "</body></html>")
