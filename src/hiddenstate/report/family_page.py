"""The HTML report of a Mamba model's state: :func:`build_mamba_report` (one self-contained page, no network).

Reads a :class:`hiddenstate.kinds.ssm.mamba_analysis.MambaAnalysis` by its attributes (this layer does not
import the probes): per layer the decay ``exp(dt A)`` as the keep gate (statistics, the
channels' time constants), the step size, the exact gradient-against-lag curve, PCA; the memory
curve of every layer's state; with a text, the channels that track text features and the explorer
(:func:`hiddenstate.report.explorer.explorer_html`: a channel is a unit, its decay the gate view,
with the report's own script and style sheet inlined); and the "Not measured" card with its
reasons. For a transformers model's recurrent layers recomputed from its own run, the page opens
with the model's layer map (every layer's index, role and class; the recorded ones linked to
their cards), and each card gives its recomputation error against the model's own output.
"""

from __future__ import annotations

import datetime
import functools
import html
from importlib import resources

import numpy as np

from hiddenstate.report.explorer import explorer_html
from hiddenstate.report.kind_cards import CARDS
from hiddenstate.report.target import write_report
from hiddenstate.version import __version__

__all__ = ["build_mamba_report", "mamba_page"]

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
    entries = analysis.meta.get("state entries") or _ENTRIES.get(_kind(analysis), "Di*S")
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
    unit = (CARDS[_kind(analysis)].unit if _kind(analysis) in CARDS else
            html.escape(analysis.meta["unit"]) if "unit" in analysis.meta else _DELTA_UNIT if _is_delta(analysis) else
            "A head-channel d = h P + p is a unit: its activation is its readout before the gate and the gated norm, "
            "y<sub>t</sub>[h, p] = h<sub>t</sub>[h, p] &middot; C<sub>t</sub> + D<sub>h</sub> x<sub>t</sub>[h, p]."
            if _is2(analysis) else
            "A channel d is a unit: its activation is its readout before the gate, y<sub>t</sub>[d] = C<sub>t</sub> "
            "&middot; h<sub>t</sub>[d] + D<sub>d</sub> a<sub>t</sub>[d].")
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
            + _explorer_gate(analysis) + " The list sorts by the feature a channel tracks best, its time constant "
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
    """``<p>layer 3 recomputed: 2.1e-07 of the model's own output</p>`` ('' for a layer traced as it computes)."""
    err = getattr(la, "recomputed", None)
    if err is None:
        return ""
    return (f'<p class="recomputed">layer {la.layer} recomputed: {err:.2g} of the model\'s own output (max |ours &minus; '
            "theirs| / max |theirs| over its whole output, our block in float64 against the model's run)</p>")


def _kind(analysis) -> str:
    """The analysis's kind (``meta["kind"]``; a Mamba analysis has none)."""
    return analysis.meta.get("kind", "mamba")


def _is2(analysis) -> bool:
    """Whether ``analysis`` is of a Mamba-2 model (``meta["kind"] == "mamba2"``)."""
    return _kind(analysis) == "mamba2"


def _is_delta(analysis) -> bool:
    """Whether ``analysis`` is of delta-rule layers (``meta["kind"]`` ``"gated_delta"`` or ``"kda"``)."""
    return _kind(analysis) in ("gated_delta", "kda")


_ENTRIES = {"mamba": "Di*S", "mamba2": "H*P*S", "gated_delta": "Hv*Dk*Dv", "kda": "H*D*D",
            **{kind: card.entries for kind, card in CARDS.items()}}
_DELTA_UNIT = ("A head-channel d = h D<sub>v</sub> + j is a unit: its activation is the delta rule's readout before "
               "the gated norm, o<sub>t</sub>[h, j] = (S<sub>t</sub><sup>T</sup> q<sub>t</sub>)[j].")


def _explorer_gate(analysis) -> str:
    """What the explorer's gate buttons show, per kind."""
    if _kind(analysis) in CARDS:
        return CARDS[_kind(analysis)].gate
    keep = " (its keep gate, in (0, 1]: white forgets at once, warm keeps)"
    if _is_delta(analysis):
        own = ("its head's mean key-channel decay exp(g)" + keep + ", and to its output gate sigmoid(g)."
               if _kind(analysis) == "kda" else "its head's decay exp(g)" + keep + " (unit k is column k mod Dv of "
               "head k // Dv).")
        return own
    return (("its head's exp(dt A<sub>h</sub>) (unit k is row k mod P of head k // P)" if _is2(analysis) else
             "the mean of exp(dt A) over its S state entries") + keep + ", and to its output gate sigmoid(z).")


def _layer_delta(la, meta) -> str:
    """A delta-rule layer's card: decays, time constants, beta, gradient against lag, effective rank per step, PCA."""
    tau = la.head_time_constant
    q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
    full = min(int(meta.get("head_k_dim", 1)), int(meta.get("head_v_dim", 1)))
    unit = "key channels" if la.time_constants.ndim == 2 else "heads"
    rows = [("mean decay exp(g)", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"{unit} kept > {la.decay.high:g} (share of steps)", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"{unit} kept < {la.decay.low:g} (share of steps)", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("head time constant 1/(1 - mean decay), 10/50/90%", " / ".join(f"{v:.3g}" for v in q) + " steps"),
            ("longest head time constant", f"{float(np.max(tau)):.4g} steps (head {int(np.argmax(tau))})"),
            ("mean write strength beta", f"{float(np.mean(la.mean_beta)):.4g}")]
    if la.gate is not None:
        rows.append(("output gate sigmoid(g) open > 0.9 / shut < 0.1",
                     f"{100 * float(np.mean(la.gate.right)):.1f}% / {100 * float(np.mean(la.gate.left)):.1f}%"))
    rows += [(f"|dS_T/dS_(T-{la.flow_spectral.size - 1})| (spectral norm / RMS)",
              f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
             ("effective rank of S_T (entropy; mean over heads)", f"{float(la.effective_rank[-1].mean()):.3g} of {full}"),
             ("singular values of S_T above 1% of the largest (mean over heads)",
              f"{float(la.numerical_rank[-1].mean()):.3g} of {full}"),
             ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    heads = "".join(f"<th>head {h}</th>" for h in range(tau.size))
    per = [("time constant (steps)", tau, "{:.3g}"), ("mean beta", la.mean_beta, "{:.3g}"),
           ("effective rank of S_T", la.effective_rank[-1], "{:.3g}"),
           ("singular values above 1%", la.numerical_rank[-1], "{:.3g}")]
    table = "".join(f"<tr><th>{name}</th>" + "".join(f"<td>{fmt.format(float(v))}</td>" for v in vals) + "</tr>"
                    for name, vals, fmt in per)
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{_recomputed(la)}<table>{body}</table>'
            f'<div style="overflow-x:auto"><table><tr><th></th>{heads}</tr>{table}</table></div>'
            f"<p>The exact Jacobian product dS<sub>T</sub>/dS<sub>T-k</sub> = &prod; (I &minus; &beta; k k<sup>T</sup>) "
            f"diag(a) (not diagonal: each step's delta write mixes the key directions), its spectral norm against the "
            f"lag k:</p>{_curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            f"<p>How full the associative memory is: the entropy effective rank of S<sub>t</sub> (Roy &amp; Vetterli "
            f"2007; exp of the entropy of its normalised singular values), mean over heads, as a share of "
            f"min(D<sub>k</sub>, D<sub>v</sub>) = {full}, against the step t:</p>"
            f"{_curve(la.effective_rank.mean(axis=1) / max(full, 1), f'layer {la.layer} effective rank', 'step')}"
            f"</section>")


def _layer2(la) -> str:
    """A Mamba-2 layer's card: the heads' decays, time constants and step sizes, the gradient against lag, PCA."""
    tau = la.time_constants
    q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
    rows = [("mean head decay exp(dt A_h)", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"heads kept > {la.decay.high:g} (share of steps)", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"heads kept < {la.decay.low:g} (share of steps)", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("head time constant 1/(1 - mean decay), 10/50/90%", " / ".join(f"{v:.3g}" for v in q) + " steps"),
            ("longest head time constant", f"{float(np.max(tau)):.4g} steps (head {int(np.argmax(tau))})"),
            ("mean step size dt", f"{float(np.mean(la.mean_dt)):.4g}"),
            ("output gate sigmoid(z) open > 0.9 / shut < 0.1",
             f"{100 * float(np.mean(la.gate.right)):.1f}% / {100 * float(np.mean(la.gate.left)):.1f}%"),
            (f"|dh_T/dh_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    heads = "".join(f"<th>head {h}</th>" for h in range(tau.size))
    taus = "".join(f"<td>{v:.3g}</td>" for v in tau)
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{_recomputed(la)}<table>{body}</table>'
            f'<div style="overflow-x:auto"><table><tr><th></th>{heads}</tr><tr><th>time constant (steps)</th>{taus}'
            f"</tr></table></div>"
            f"<p>The exact Jacobian product dh<sub>T</sub>/dh<sub>T-k</sub> (each head's (P, S) block times the "
            f"product of its last k decays), its largest entry against the lag k:</p>"
            f"{_curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}</section>")


def _card(la) -> str:
    """A layer's card from its own rows (``la.card_rows()``, ``la.flow_note``): the kinds beyond Mamba."""
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in la.card_rows())
    tau = getattr(la, "time_constants", None)
    taus = ""
    if tau is not None and tau.ndim == 1 and tau.size <= 64:
        cells = "".join(f"<th>{j}</th>" for j in range(tau.size))
        taus = (f'<div style="overflow-x:auto"><table><tr><th></th>{cells}</tr><tr><th>time constant (steps)</th>'
                + "".join(f"<td>{v:.3g}</td>" for v in tau) + "</tr></table></div>")
    rank = getattr(la, "effective_rank", None)
    if rank is not None:  # a matrix state: how full it is, step by step
        full = min(la.record.kv.shape[-2:])
        rank = (f"<p>How full the matrix memory is: the entropy effective rank of S<sub>t</sub> (Roy &amp; Vetterli "
                f"2007), mean over heads, as a share of D = {full}, against the step t:</p>"
                f"{_curve(rank.mean(axis=1) / full, f'layer {la.layer} effective rank', 'step')}")
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{_recomputed(la)}<table>{body}</table>{taus}'
            f"<p>{html.escape(la.flow_note)}</p>{_curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            f"{rank or ''}</section>")


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
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{_recomputed(la)}<table>{body}</table>'
            f"<p>The exact Jacobian product dh<sub>T</sub>/dh<sub>T-k</sub> (the diagonal of the last k decays), its "
            f"largest entry against the lag k:</p>{_curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            f"</section>")


def mamba_page(analysis, *, title: str = "Inside a Mamba model", subtitle: str = "") -> str:
    """The report's HTML text.

    Parameters
    ----------
    analysis : MambaAnalysis
        From :func:`hiddenstate.kinds.ssm.mamba_analysis.analyze_mamba`, or a Mamba-2 one from
        :func:`hiddenstate.kinds.ssm.mamba2_analysis.analyze_mamba2` (``meta["kind"] == "mamba2"``: per head).
        With a ``layer_map`` (a transformers model's recurrent layers recomputed,
        :func:`hiddenstate.pipelines.family_inspection.analyze_family_model`) the page opens with the
        model's layer map, and each card says how close its recomputation came to the model's own
        output.
    title : str, default "Inside a Mamba model"
    subtitle : str, default ""

    Returns
    -------
    str
        A self-contained HTML page.

    Raises
    ------
    TypeError
        ``analysis`` is not an analysis of a Mamba model, ``title`` or ``subtitle`` not a str.
    """
    for name, text in (("title", title), ("subtitle", subtitle)):
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str; got {type(text).__name__} {text!r:.60}.")
    if not hasattr(analysis, "layers") or not isinstance(getattr(analysis, "meta", None), dict):
        raise TypeError(f"analysis must be a MambaAnalysis (analyze_mamba) or Mamba2Analysis (analyze_mamba2); got "
                        f"{type(analysis).__name__}.")
    m = analysis.meta
    skipped = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in analysis.not_measured.items())
    explorer = _explorer(analysis)
    style = (_static("report.css") if explorer else "") + _STYLE  # the explorer's classes; ours win elsewhere
    script = f"<script>\n{_static('report.js')}</script>" if explorer else ""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    what = "recorded recurrent " if getattr(analysis, "layer_map", None) else ""
    card = CARDS.get(_kind(analysis))
    if card is not None:
        head = card.head(m, what)
    elif "state" in m:
        head = (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), "
                f"{html.escape(m['state'])} per sequence; measured on {m.get('T')} steps of {m.get('N')} "
                "sequence(s).</p>")
    elif _is_delta(analysis):
        per = "key channel" if _kind(analysis) == "kda" else "head"
        head = (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), matrix state (Hv="
                f"{m.get('num_heads')}, Dk={m.get('head_k_dim')}, Dv={m.get('head_v_dim')}) updated by the delta rule "
                f"with one decay per {per}, and convolution state (Dc, K-1={m.get('d_conv', 1) - 1}) per sequence; "
                f"measured on {m.get('T')} steps of {m.get('N')} sequence(s).</p>")
    elif _is2(analysis):
        head = (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), SSM state (H={m.get('num_heads')}"
                f", P={m.get('head_dim')}, S={m.get('d_state')}) with one decay per head, and convolution state (Dc, "
                f"K-1={m.get('d_conv', 1) - 1}) per sequence; measured on {m.get('T')} steps of {m.get('N')} "
                f"sequence(s).</p>")
    else:
        head = (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), SSM state (Di="
                f"{m.get('d_inner')}, S={m.get('d_state')}) and convolution state (Di, K-1={m.get('d_conv', 1) - 1}) "
                f"per sequence; measured on {m.get('T')} steps of {m.get('N')} sequence(s).</p>")
    layer = (_card if "state" in m else (lambda la: _layer_delta(la, m)) if _is_delta(analysis) else _layer2
             if _is2(analysis) else _layer)
    if card is not None:
        layer = lambda la: card.layer(la, m, _curve, _recomputed)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{style}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p>{head}{_layer_map(analysis)}"
            + "".join(layer(la) for la in analysis.layers) + _memory(analysis) + _units(analysis) + explorer
            + f'<section id="skipped"><h2>Not measured</h2><p>What the report of the other kinds shows and this one '
              f"does not, and why.</p><ul>{skipped}</ul></section>"
            f"<footer>hiddenstate {__version__} · generated {stamp} · self-contained, no network needed</footer>"
            f"{script}</body></html>")


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
        From :func:`mamba_page` and :func:`hiddenstate.report.target.check_report_path` (nothing is
        written).
    """
    return write_report(out, mamba_page(analysis, title=title, subtitle=subtitle))
