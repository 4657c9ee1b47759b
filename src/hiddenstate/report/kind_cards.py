"""The Mamba report's texts and layer cards for the kinds beyond Mamba and the delta rule: ``CARDS`` by ``meta["kind"]``.

:func:`hiddenstate.report.family_page.mamba_page` reads an analysis by its attributes; for a kind
listed here (the mLSTM of xLSTM, RWKV-4's time mixing) it takes the page's opening paragraph, each
layer's card, the sentence that says what a unit is, what the explorer's gate buttons show and
the memory curve's count of state entries from its :class:`KindCard`. Nothing here imports the
probes.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = ["CARDS", "KindCard"]

_KEEP = " (its keep gate, in (0, 1]: white forgets at once, warm keeps)"


class KindCard(NamedTuple):
    """What the Mamba report says of one kind.

    Attributes
    ----------
    head : callable
        ``head(meta, what) -> str``: the opening paragraph (HTML), ``what`` is ``"recorded
        recurrent "`` for a transformers model's layers, else ``""``.
    layer : callable
        ``layer(la, meta, curve, recomputed) -> str``: one layer's card (HTML), with the page's
        ``curve(ys, label, xlabel="lag")`` chart and ``recomputed(la)`` line.
    unit : str
        What a unit is (HTML), for the units table.
    gate : str
        What the explorer's gate buttons show (HTML), ending with a full stop.
    entries : str
        The flattened state's entries, for the memory curve (``"H*(Dk*Dv+Dk)"``).
    """

    head: Callable
    layer: Callable
    unit: str
    gate: str
    entries: str


def _rows(rows) -> str:
    return "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)


def _quantiles(tau) -> str:
    finite = tau[np.isfinite(tau)]
    q = np.quantile(finite, [0.1, 0.5, 0.9]) if finite.size else [np.inf] * 3
    return " / ".join(f"{v:.3g}" for v in q) + " steps"


def _gate(la, name) -> tuple:
    return (f"{name} open > 0.9 / shut < 0.1",
            f"{100 * float(np.mean(la.gate.right)):.1f}% / {100 * float(np.mean(la.gate.left)):.1f}%")


def _per_unit(name, values, labels, fmt="{:.3g}") -> str:
    cols = "".join(f"<th>{lab}</th>" for lab in labels)
    cells = "".join(f"<td>{fmt.format(float(v))}</td>" for v in values)
    return (f'<div style="overflow-x:auto"><table><tr><th></th>{cols}</tr><tr><th>{name}</th>{cells}</tr></table>'
            "</div>")


def _head_mlstm(m, what) -> str:
    return (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}mLSTM layer(s), matrix memory C "
            f"(H={m.get('num_heads')}, Dk={m.get('head_k_dim')}, Dv={m.get('head_v_dim')}), normaliser n (H, Dk) and "
            f"stabiliser m (H, 1) per sequence, with one forget gate sigmoid(f) and one exponential input gate "
            f"exp(i) per head; measured on {m.get('T')} steps of {m.get('N')} sequence(s).</p>")


def _layer_mlstm(la, m, curve, recomputed) -> str:
    tau = la.time_constants
    full = min(int(m.get("head_k_dim", 1)), int(m.get("head_v_dim", 1)))
    rows = [("mean forget gate sigmoid(f)", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"heads kept > {la.decay.high:g} (share of steps)", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"heads kept < {la.decay.low:g} (share of steps)", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("head time constant 1/(1 - mean forget gate), 10/50/90%", _quantiles(tau)),
            ("longest head time constant", f"{float(np.max(tau)):.4g} steps (head {int(np.argmax(tau))})"),
            ("mean log input gate i", f"{float(np.mean(la.mean_input_gate)):.4g}"),
            ("steps on which the stabiliser took the input gate (m = i)", f"{100 * float(np.mean(la.input_wins)):.1f}%"),
            _gate(la, "output gate sigmoid(o)"),
            (f"|dC~_T/dC~_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("effective rank of C_T (entropy; mean over heads)", f"{float(la.effective_rank[-1].mean()):.3g} of {full}"),
            ("singular values of C_T above 1% of the largest (mean over heads)",
             f"{float(la.numerical_rank[-1].mean()):.3g} of {full}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{_rows(rows)}</table>'
            + _per_unit("time constant (steps)", tau, [f"head {h}" for h in range(tau.size)])
            + "<p>The memory's exact Jacobian product dC~<sub>T</sub>/dC~<sub>T-k</sub> of the unstabilised memory "
            "C~ = C exp(m): each head's product of its last k forget gates (the stored C is rescaled by exp(m<sub>T-k"
            "</sub> &minus; m<sub>T</sub>) on top, which the readout divides out), its largest entry against the lag "
            f"k:</p>{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            "<p>How full the associative memory is: the entropy effective rank of C<sub>t</sub> (Roy &amp; Vetterli "
            "2007; exp of the entropy of its normalised singular values), mean over heads, as a share of "
            f"min(D<sub>k</sub>, D<sub>v</sub>) = {full}, against the step t:</p>"
            f"{curve(la.effective_rank.mean(axis=1) / max(full, 1), f'layer {la.layer} effective rank', 'step')}"
            "</section>")


def _head_rwkv(m, what) -> str:
    return (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}RWKV-4 time-mixing layer(s), WKV "
            f"numerator and denominator (A={m.get('attention_hidden_size')} channels) with their running maximum, and "
            f"the token shift's last input (M={m.get('hidden_size')}) per sequence, with a fixed decay "
            f"exp(-exp(time_decay)) per channel; measured on {m.get('T')} steps of {m.get('N')} sequence(s).</p>")


def _layer_rwkv(la, m, curve, recomputed) -> str:
    tau = la.time_constants
    rows = [("mean channel decay exp(-exp(time_decay))", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"channels kept > {la.decay.high:g}", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"channels kept < {la.decay.low:g}", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("channel time constant 1/(1 - decay), 10/50/90%", _quantiles(tau)),
            ("longest channel time constant", f"{float(np.max(tau)):.4g} steps (channel {int(np.argmax(tau))})"),
            ("current token's share of the readout wkv (mean)", f"{float(np.mean(la.current_share)):.3g}"),
            _gate(la, "receptance sigmoid(r)"),
            (f"|dS_T/dS_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{_rows(rows)}</table>'
            + _per_unit("time constant (steps)", tau, [str(a) for a in range(tau.size)])
            + "<p>The exact Jacobian product of the unstabilised numerator and denominator, d num~<sub>T</sub>/d num~"
            "<sub>T-k</sub> = diag(w<sup>k</sup>) (the stored state is rescaled by exp(max<sub>T-k</sub> &minus; "
            "max<sub>T</sub>) on top, which wkv = num / den divides out), its largest entry against the lag k:</p>"
            f"{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}</section>")


#: The report's texts and cards by ``meta["kind"]``.
CARDS = {
    "mlstm": KindCard(
        _head_mlstm, _layer_mlstm,
        unit="A head-channel d = h D<sub>v</sub> + j is a unit: its activation is the mLSTM's readout before the "
             "per-head layer norm, h<sub>t</sub>[h, j] = (C<sub>t</sub><sup>T</sup> q<sub>t</sub>)[j] / max(|n<sub>t"
             "</sub> &middot; q<sub>t</sub>|, exp(&minus;m<sub>t</sub>)).",
        gate="its head's forget gate sigmoid(f)" + _KEEP + " (unit k is column k mod Dv of head k // Dv), and to its "
             "output gate sigmoid(o).",
        entries="H*(Dk*Dv+Dk)"),
    "rwkv": KindCard(
        _head_rwkv, _layer_rwkv,
        unit="A channel a is a unit: its activation is the WKV readout wkv<sub>t</sub>[a], the average of the values "
             "weighted by exp(k) and decayed by w per step, before the receptance.",
        gate="its channel's decay exp(-exp(time_decay))" + _KEEP + ", the same on every step, and to its receptance "
             "sigmoid(r).",
        entries="2A"),
}
