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

import html

import numpy as np

from hiddenstate.kinds import KINDS
from hiddenstate.kinds.agreement import Agreement
from hiddenstate.report.cards import ROWS_CARD, KindCard
from hiddenstate.report.explorer import explorer_html
from hiddenstate.report.layout import line_chart, page_html
from hiddenstate.report.target import write_report
from hiddenstate.report.tracing import trace_section

__all__ = ["build_family_report", "build_mamba_report", "card_of", "default_title", "family_page", "mamba_page"]


def _card(anchor: str, title: str, what: str, body: str, *, wide: bool = False) -> str:
    """One card of the page: a ``div.card`` around the section (its id, heading and paragraph as the kinds' cards have them)."""
    what = f"<p>{what}</p>" if what else ""
    return (f'<div class="card{" wide" if wide else ""}"><section id="{anchor}"><h2>{html.escape(title)}</h2>{what}{body}'
            "</section></div>")


def _curve(ys: np.ndarray, label: str, xlabel: str = "lag") -> str:
    """A small inline SVG line chart of ``ys`` (values in [0, 1]) against their index, with axis ticks."""
    return line_chart({label: ys}, label, xlabel=xlabel, width=360, height=150)


def _curves(curves, label: str, chance=None) -> str:
    """An inline SVG of several curves (name -> values in [0, 1] against their index) and a dotted chance line."""
    return line_chart(curves, label, chance=chance)


def _memory(analysis) -> str:
    """The memory-curve card: every layer's curve, its capacity and horizon; '' when none was measured."""
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
    what = (f"How well a ridge readout of the whole state h<sub>t</sub> ({html.escape(entries)} entries, "
            f"standardised; one penalty alpha = {first.alpha:g}) recovers {html.escape(target)}, fitted on the first "
            "3/4 of the steps and scored on the rest. Its area above chance is the memory capacity (Jaeger 2001); the "
            f"horizon is the last lag of an unbroken run of scores &ge; 0.5 (-1: not even lag 0).{chance}")
    return _card("memory", "Memory curve", what,
                 f"{_curves({k: mc.score for k, mc in mcs.items()}, 'memory curve', first.chance if acc else None)}"
                 f"<table><tr><th>layer</th><th>capacity</th><th>horizon</th>{heads}</tr>{rows}</table>", wide=True)


def _step_word(analysis) -> str:
    """What one step of the text is: ``"token"`` (a tokenizer's pieces) or ``"character"``."""
    text = getattr(analysis, "text", None)
    return "character" if text is None or isinstance(text, str) else "token"


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
    step = _step_word(analysis)
    return _card("units", "Channels that track text features",
                 f"{unit} Each feature of the text (after reading each {step}) against every channel's y on sequence 0, "
                 "by Pearson r; the three best channels (Karpathy et al. 2015).",
                 f"<table><tr><th>layer</th><th>feature</th><th>best channels</th></tr>{''.join(rows)}</table>", wide=True)


#: The one definition of a unit's time constant, as the cards and the explorer say it.
TAU = ("its time constant 1/(1 &minus; m), m the mean over steps of its keep gate (a unit with several state entries: "
       "its slowest entry's; the same numbers as the layer's card, which gives their quantiles over units)")


def _explorer(analysis) -> str:
    """The explorer card of every recorded layer's units; '' without a text."""
    ex = getattr(analysis, "explore", None)
    if ex is None:
        return ""
    step = _step_word(analysis)
    steps = ("tokens (the text each token added, decoded from its id: whitespace-only tokens show as &#9251; and "
             "&#8629;, a byte of a multi-byte character as the tokenizer names it)" if step == "token" else "characters")
    n_layers = len(ex.get("layers") or [ex])
    pick = (f"The layer selector switches between the {n_layers} recorded layers (the top one first); the head "
            "selector lists one head's units and, for a matrix state, draws that head's state S<sub>t</sub> as a "
            "heat map, a step at a time (the step slider). ")
    if "unit" in analysis.meta:  # the other kinds: the unit in the kind's words, its keep gate where it has one
        gates = [k for k in ex["signals"] if k != "y"]
        what = (f"The text's units are {steps}. {pick}{html.escape(analysis.meta['unit'])} Pick one to colour the text "
                f"by its activation after each {step} (warm positive, cool negative)"
                + (f"; the gate buttons switch to its {html.escape(', '.join(gates))}" if gates else
                   "; this kind has no keep gate and no (0, 1) output gate")
                + f". The list sorts by the feature a unit tracks best, {TAU}, or its saturation (the share of steps "
                f"its output gate is below 0.1 or above 0.9). Hover a {step} for its value and the norm of the whole "
                "state; the values are embedded at 8 bits per unit and step.")
        return _card("text", "Explore the units", what, explorer_html(ex, max_chars=len(ex["text"])), wide=True)
    what = (f"The text's units are {steps}. {pick}The channels are the units (unit k is channel k). Pick one to colour "
            f"the text by its activation y after each {step} (warm positive, cool negative); the gate buttons switch to "
            f"its decay, " + card_of(analysis).gate + f" The list sorts by the feature a channel tracks best, {TAU}, or "
            "its saturation (the share of steps its output gate sigmoid(z) is below 0.1 or above 0.9: a decay is no "
            f"on/off gate); hover a {step} for its value and the norm of the whole SSM state; select a span to list the "
            "channels that are on all over it. The values are embedded at 8 bits per channel and step.")
    return _card("text", "Explore the channels", what, explorer_html(ex, max_chars=len(ex["text"])), wide=True)


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
    what = (f"Every layer of the model: {n_rec} of its {len(entries)} layers are recurrent. The model itself ran on the "
            "ids; each recorded recurrent layer was recomputed by our block from the input its hook saw, and its output "
            "held to the model's own. Attention, MLP and MoE parts are the model's own and are not measured here.")
    return _card("layermap", "Layer map", what,
                 '<div class="scroll"><table><tr><th>layer</th><th>role</th><th>class</th><th>module</th>'
                 f"<th>measured</th></tr>{''.join(rows)}</table></div>", wide=True)


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
    what = "recorded recurrent " if getattr(analysis, "layer_map", None) else ""
    card = card_of(analysis)
    title = title or default_title(analysis)
    sections = [("state", "State", _card("state", "The recurrent state", "", card.head(m, what), wide=True)),
                ("layermap", "Layer map", _layer_map(analysis))]
    layers = "".join(f'<div class="card">{card.layer(la, m, _curve, _recomputed)}</div>' for la in analysis.layers)
    sections.append((f"layer{analysis.layers[0].layer}" if analysis.layers else "", "Layers",
                     f'<div class="grid">{layers}</div><div style="height:20px"></div>' if layers else ""))
    if causal_trace is not None:
        sections.append(("trace", "Causal trace", trace_section(causal_trace)))
    sections += [("memory", "Memory", _memory(analysis)), ("units", "Channels", _units(analysis)),
                 ("text", "Explore", _explorer(analysis)),
                 ("skipped", "Not measured", _card("skipped", "Not measured", "What the report of the other kinds "
                                                   "shows and this one does not, and why.", f"<ul>{skipped}</ul>",
                                                   wide=True))]
    kind = _kind(analysis)
    chips = {"kind": KINDS[kind].display if kind in KINDS else (kind or "recurrent"), "layers": str(len(analysis.layers)),
             "T": str(m.get("T")), "N": str(m.get("N"))}
    steps = m.get("steps")
    if steps is not None and len(steps):  # a window (and stride) of the input: the positions the report reads
        step = steps[1] - steps[0] if len(steps) > 1 else 1
        chips["positions"] = f"{steps[0]} to {steps[-1]}" + (f", stride {step}" if step > 1 else "")
    errors = [la.recomputed for la in analysis.layers if getattr(la, "recomputed", None) is not None]
    if errors:
        chips["recomputed within"] = f"{max(errors):.2g}"
    shown = [(a, lab, body) for a, lab, body in sections if body]
    return page_html(title, subtitle or None, chips, [(a, lab) for a, lab, _ in shown],
                     "".join(body for _, _, body in shown), warnings=m.get("warnings", ()))


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
