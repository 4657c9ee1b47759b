"""The HTML report of a recurrent model's state, whatever the kind: :func:`build_family_report` (one self-contained page).

Reads an analysis (a :class:`~hiddenstate.probe.state_analysis.StateAnalysis` of any kind) by its
attributes (this layer does not import the probes). What it says of the kind (the opening
paragraph, each layer's card, what a unit is, the explorer's gate buttons, the state's entries)
is the kind's :class:`~hiddenstate.report.cards.KindCard`, found through the kind's record in the
registry (:func:`card_of`; the cards stand in the kinds' folders, ``kinds/<kind>/card.py``); the
rest is shared: the memory curve of every layer's state; with a text, the units that track text
features and the explorer (:func:`hiddenstate.report.explorer.explorer_html`, with the report's
own script and style sheet inlined); and the "Not measured" card with its reasons. For a transformers model's recurrent layers recomputed from its own run, the page opens
with the model's layer map (every layer's index, role and class; the recorded ones linked to
their cards), and each card gives its recomputation error against the model's own output.
"""

from __future__ import annotations

import datetime
import functools
import html
from importlib import resources

import numpy as np

from hiddenstate.kinds import KINDS
from hiddenstate.kinds.agreement import Agreement
from hiddenstate.report.cards import ROWS_CARD, KindCard
from hiddenstate.report.explorer import explorer_html
from hiddenstate.report.target import write_report
from hiddenstate.report.tracing import trace_section
from hiddenstate.version import __version__

__all__ = ["build_family_report", "build_mamba_report", "card_of", "default_title", "family_page", "mamba_page"]

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
          "table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.25rem .5rem;"
          "text-align:right}th{background:#f4f4f4}section{border:1px solid #ddd;border-radius:6px;padding:.5rem 1rem;"
          "margin:1rem 0}footer{color:#888;font-size:.8rem;margin-top:2rem}.key{font-size:.8rem;color:#555}")
_COLOURS = ("#1f77b4", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e")


@functools.cache
def _static(name: str) -> str:
    """A file of the package data folder ``hiddenstate/report/static/`` (the explorer's script and style)."""
    return (resources.files("hiddenstate.report") / "static" / name).read_text(encoding="utf-8")


def _curve(ys: np.ndarray, label: str, xlabel: str = "lag") -> str:
    """A small inline SVG line chart of ``ys`` (values in [0, 1]) against their index (``xlabel`` at the end)."""
    w, h, pad = 360, 140, 24
    n = max(len(ys) - 1, 1)
    pts = " ".join(f"{pad + (w - 2 * pad) * i / n:.1f},{h - pad - (h - 2 * pad) * float(np.clip(y, 0, 1)):.1f}"
                   for i, y in enumerate(ys))
    return (f'<svg width="{w}" height="{h}" role="img" aria-label="{html.escape(label)}">'
            f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{pts}"/>'
            f'<text x="{pad}" y="{pad - 6}" font-size="11">1</text>'
            f'<text x="{w - pad - 40}" y="{h - 6}" font-size="11">{xlabel} {len(ys) - 1}</text></svg>')


def _curves(curves, label: str, chance=None) -> str:
    """An inline SVG of several curves (name -> values in [0, 1] against their index) and a dotted chance line."""
    w, h, pad = 420, 170, 26
    n = max(max(len(ys) for ys in curves.values()) - 1, 1)

    def y_of(v):
        return h - pad - (h - 2 * pad) * float(np.clip(v, 0, 1))

    lines = "".join(
        f'<polyline fill="none" stroke="{_COLOURS[i % len(_COLOURS)]}" stroke-width="2" points="'
        + " ".join(f"{pad + (w - 2 * pad) * t / n:.1f},{y_of(v):.1f}" for t, v in enumerate(ys)) + '"/>'
        for i, ys in enumerate(curves.values()))
    if chance is not None:
        lines += (f'<line x1="{pad}" y1="{y_of(chance):.1f}" x2="{w - pad}" y2="{y_of(chance):.1f}" stroke="#666" '
                  f'stroke-dasharray="3,3"/>')
    key = " ".join(f'<span style="color:{_COLOURS[i % len(_COLOURS)]}">&#9632; {html.escape(name)}</span>'
                   for i, name in enumerate(curves))
    return (f'<svg width="{w}" height="{h}" role="img" aria-label="{html.escape(label)}">'
            f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>{lines}'
            f'<text x="{pad - 18}" y="{pad + 4}" font-size="11">1</text>'
            f'<text x="{pad - 18}" y="{h - pad + 4}" font-size="11">0</text>'
            f'<text x="{w - pad - 40}" y="{h - 6}" font-size="11">lag {n}</text></svg>'
            f'<div class="key">{key}{" · dashed: chance" if chance is not None else ""}</div>')


def _memory(analysis) -> str:
    """The memory-curve section: every layer's curve, its capacity and horizon; '' when none was measured."""
    mcs = {f"layer {la.layer}": la.memory for la in analysis.layers if getattr(la, "memory", None) is not None}
    if not mcs:
        return ""
    first = next(iter(mcs.values()))
    acc = first.metric == "accuracy"
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{mc.capacity:.3g}</td><td>{mc.horizon(0.5)}</td>"
        + "".join(f"<td>{float(mc.score[j]):.3f}</td>" for j in range(min(4, mc.score.size))) + "</tr>"
        for k, mc in mcs.items())
    heads = "".join(f"<th>lag {j}</th>" for j in range(min(4, first.score.size)))
    target = analysis.meta.get("memory target", "the input k steps back")
    chance = (f" Chance (dashed) is {first.chance:.3f}: always guessing the most common token of the training "
              "steps." if acc else "")
    entries = analysis.meta.get("state entries") or card_of(analysis).entries or "state"
    return (f'<section id="memory"><h2>Memory curve</h2><p>How well a ridge readout of the whole state h<sub>t'
            f"</sub> ({html.escape(entries)} entries, standardised; one penalty alpha = {first.alpha:g}) recovers {html.escape(target)}"
            f", fitted on the first 3/4 of the steps and scored on the rest. Its area above chance is the memory "
            f"capacity (Jaeger 2001); the horizon is the last lag of an unbroken run of scores &ge; 0.5.{chance}</p>"
            f"{_curves({k: mc.score for k, mc in mcs.items()}, 'memory curve', first.chance if acc else None)}"
            f"<table><tr><th></th><th>capacity</th><th>horizon</th>{heads}</tr>{rows}</table></section>")


def _units(analysis) -> str:
    """The table of the channels that track text features, per layer; '' without any."""
    rows = []
    for la in analysis.layers:
        for name, u in (getattr(la, "units", None) or {}).items():
            tops = ", ".join(f"{int(c)} (r = {float(r):+.2f})" for c, r in zip(u.top_units, u.top_r))
            rows.append(f"<tr><td>{la.layer}</td><th>{html.escape(name)}</th><td>{tops}</td></tr>")
    if not rows:
        return ""
    card = card_of(analysis)
    unit = card.unit or html.escape(str(analysis.meta.get("unit", "A unit is one entry of the layer's readout.")))
    return ('<section id="units"><h2>Channels that track text features</h2><p>' + unit + " Each feature of the text (after reading each character) against every channel's y on "
            "sequence 0, by Pearson r; the three best channels (Karpathy et al. 2015).</p>"
            f"<table><tr><th>layer</th><th>feature</th><th>best channels</th></tr>{''.join(rows)}</table></section>")


def _explorer(analysis) -> str:
    """The explorer section of the top layer's channels; '' without a text."""
    ex = getattr(analysis, "explore", None)
    if ex is None:
        return ""
    if "unit" in analysis.meta:  # the other kinds: the unit in the kind's words, its keep gate where it has one
        gates = [k for k in ex["signals"] if k != "y"]
        return ('<section id="text" class="card wide"><h2>Explore the units</h2><p class="what">The top layer\'s '
                f"units. {html.escape(analysis.meta['unit'])} Pick one to colour the text by its activation after each "
                "character (warm positive, cool negative)"
                + (f"; the gate buttons switch to its {html.escape(', '.join(gates))}" if gates else
                   "; this kind has no keep gate and no (0, 1) output gate")
                + ". Hover a character for its value and the norm of the whole state; the values are embedded at 8 "
                f"bits per unit and step.</p>{explorer_html(ex, max_chars=len(ex['text']))}</section>")
    return ('<section id="text" class="card wide"><h2>Explore the channels</h2><p class="what">The top layer\'s '
            "channels are the units (unit k is channel k). Pick one to colour the text by its activation y after each "
            "character (warm positive, cool negative); the gate buttons switch to its decay, "
            + card_of(analysis).gate + " The list sorts by the feature a channel tracks best, its time constant "
            "1/(1 - mean decay) or its saturation; hover a character for its value and the norm of the whole SSM "
            "state; select a span to list the channels that are on all over it. The values are embedded at 8 bits "
            f"per channel and step.</p>{explorer_html(ex, max_chars=len(ex['text']))}</section>")


def _layer_map(analysis) -> str:
    """The layer map of a transformers model: every layer's index, roles and classes, recorded ones linked to their cards.

    A layer with parts (Jamba's feed-forward, Zamba's shared attention block) shows them after its
    mixer: ``recurrent + moe``, ``JambaMambaMixer + JambaSparseMoeBlock``.
    """
    entries = getattr(analysis, "layer_map", None)
    if not entries:
        return ""
    recorded = {la.layer for la in analysis.layers}
    rows = []
    for e in entries:
        if e.index in recorded:
            idx = f'<a href="#layer{e.index}">{e.index}</a>'
            what = "recorded: its card below"
        else:
            idx = str(e.index)
            what = "not recorded (layers= chose others)" if e.role == "recurrent" else ""
        parts = ((e.role, e.class_name, e.path),) + tuple(getattr(e, "parts", ()))  # a layer's MoE, shared attention
        role, cls = (" + ".join(html.escape(p[k]) for p in parts) for k in range(2))
        path = " + ".join(f"<code>{html.escape(p[2])}</code>" for p in parts)
        rows.append(f"<tr><td>{idx}</td><td>{role}</td><td style=\"text-align:left\">{cls}</td>"
                    f"<td style=\"text-align:left\">{path}</td><td style=\"text-align:left\">{what}</td></tr>")
    n_rec = sum(e.role == "recurrent" for e in entries)
    return ('<section id="layermap"><h2>Layer map</h2><p>Every layer of the model: '
            f"{n_rec} of its {len(entries)} layers are recurrent. The model itself ran on the ids; each recorded "
            "recurrent layer was recomputed by our block from the input its hook saw, and its output held to the "
            "model's own. Attention, MLP and MoE layers are the model's own and are not measured here.</p>"
            "<table><tr><th>layer</th><th>role</th><th>class</th><th>module</th><th></th></tr>"
            f"{''.join(rows)}</table></section>")


def _recomputed(la) -> str:
    """``<p>layer 3 recomputed: 2.1e-07 of the model's own output; the state's share ...</p>`` ('' for a layer traced as it computes)."""
    err = getattr(la, "recomputed", None)
    if err is None:
        return ""
    head = (f'<p class="recomputed">layer {la.layer} recomputed: {err:.2g} of the model\'s own output (max |ours &minus; '
            "theirs| / max |theirs| over its whole output, our block in float64 against the model's run)")
    if not isinstance(err, Agreement):
        return head + "</p>"
    if err.state_error is not None:
        state = (f"the state's share of the readout y = C h + D x is {err.share:.2g} (var(C h) / var(y)); with the "
                 f"skip D set to 0 in the model's own mixer and in our block, what is left is read out of the state "
                 f"alone and agrees to {err.state_error:.2g} of its largest value")
    elif err.share >= 1.0:
        state = "the kind has no skip term beside the state's readout: the figure is the state readout's"
    elif not err.seen:
        state = (f"<strong>the state's share {err.share:.2g} of the readout: too small for this check to see the "
                 "recurrence</strong> (the figure is no evidence about the state)")
    else:
        state = f"the state's share of the readout is {err.share:.2g}"
    return f"{head}; {state}.</p>"


def _kind(analysis) -> str | None:
    """The analysis's kind: ``meta["kind"]``, else its class's ``kind`` (a Mamba analysis's meta names none)."""
    return analysis.meta.get("kind") or getattr(analysis, "kind", None)


def card_of(analysis) -> KindCard:
    """The :class:`~hiddenstate.report.cards.KindCard` of an analysis's kind, found through the kind's record.

    Parameters
    ----------
    analysis : StateAnalysis
        Any kind's analysis (``meta["kind"]`` or its class's ``kind`` names the kind).

    Returns
    -------
    KindCard
        The registered kind's ``card`` (:func:`hiddenstate.kinds.get_kind`), or
        :data:`~hiddenstate.report.cards.ROWS_CARD` for a kind with none or one not registered.
    """
    kind = _kind(analysis)
    card = KINDS[kind].report_card() if kind in KINDS else None
    return ROWS_CARD if card is None else card


def default_title(analysis) -> str:
    """The page's title when none is given: it names the kind and the model (``"Inside the Mamba-2 layers of ..."``).

    Parameters
    ----------
    analysis : StateAnalysis

    Returns
    -------
    str
    """
    kind = _kind(analysis)
    what = KINDS[kind].display if kind in KINDS else (kind or "recurrent")
    model = analysis.meta.get("model")
    return f"Inside the {what} layers of {model}" if model else f"Inside the {what} layers"


def family_page(analysis, *, title: str = "", subtitle: str = "", causal_trace=None) -> str:
    """The report's HTML text, for an analysis of any registered kind (its card from the kind's record).

    Parameters
    ----------
    analysis : StateAnalysis
        Any kind's analysis: :func:`hiddenstate.kinds.ssm.mamba_analysis.analyze_mamba`'s,
        :func:`hiddenstate.probe.block_analysis.analyze_block`'s (``meta["kind"]`` names the kind; the
        page's texts and layer cards are the kind's :class:`~hiddenstate.report.cards.KindCard`,
        :func:`card_of`).
        With a ``layer_map`` (a transformers model's recurrent layers recomputed,
        :func:`hiddenstate.pipelines.family_inspection.analyze_family_model`) the page opens with the
        model's layer map, and each card says how close its recomputation came to the model's own
        output.
    title : str, default ""
        "" gives :func:`default_title`: the kind and the model (``"Inside the Mamba layers of
        hiddenstate MambaLM"``).
    subtitle : str, default ""
    causal_trace : CausalTrace, optional
        A :func:`hiddenstate.causal_trace` of the same model: the page gains its section (the
        heatmap, :func:`hiddenstate.report.tracing.trace_section`) after the layer cards.

    Returns
    -------
    str
        A self-contained HTML page.

    Raises
    ------
    TypeError
        ``analysis`` is not an analysis (``layers`` and a ``meta`` dict), ``title`` or ``subtitle`` not a str.
    """
    for name, text in (("title", title), ("subtitle", subtitle)):
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str; got {type(text).__name__} {text!r:.60}.")
    if not hasattr(analysis, "layers") or not isinstance(getattr(analysis, "meta", None), dict):
        raise TypeError(f"analysis must be an analysis of recurrent layers (analyze_mamba, analyze_block, "
                        f"inspect_model: layers and a meta dict); got {type(analysis).__name__}.")
    m = analysis.meta
    skipped = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in analysis.not_measured.items())
    explorer = _explorer(analysis)
    style = (_static("report.css") if explorer else "") + _STYLE  # the explorer's classes; ours win elsewhere
    script = f"<script>\n{_static('report.js')}</script>" if explorer else ""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    what = "recorded recurrent " if getattr(analysis, "layer_map", None) else ""
    card = card_of(analysis)
    head = card.head(m, what)
    title = title or default_title(analysis)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{style}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p>{head}{_layer_map(analysis)}"
            + "".join(card.layer(la, m, _curve, _recomputed) for la in analysis.layers)
            + ("" if causal_trace is None else trace_section(causal_trace))
            + _memory(analysis) + _units(analysis) + explorer
            + f'<section id="skipped"><h2>Not measured</h2><p>What the report of the other kinds shows and this one '
              f"does not, and why.</p><ul>{skipped}</ul></section>"
            f"<footer>hiddenstate {__version__} · generated {stamp} · self-contained, no network needed</footer>"
            f"{script}</body></html>")


def build_family_report(out, analysis, *, title: str = "", subtitle: str = "", causal_trace=None):
    """Write the report of any kind's analysis to ``out`` (a new file or a previous hiddenstate report).

    Parameters
    ----------
    out : str or os.PathLike
    analysis : StateAnalysis
    title : str, default ""
        "" gives :func:`default_title`.
    subtitle : str, default ""
    causal_trace : CausalTrace, optional
        Adds its section (:func:`family_page`).

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    TypeError, ValueError
        From :func:`family_page` and :func:`hiddenstate.report.target.check_report_path` (nothing is
        written).
    """
    return write_report(out, family_page(analysis, title=title, subtitle=subtitle, causal_trace=causal_trace))


#: 0.2's names, kept: the page serves every kind.
mamba_page = family_page
build_mamba_report = build_family_report
