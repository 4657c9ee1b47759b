"""What the family page says of mLSTM layers: ``CARD`` (a :class:`~hiddenstate.report.cards.KindCard`).

The opening paragraph (the matrix memory, its normaliser and stabiliser), each layer's card (forget
gates, head time constants, the input gate and the stabiliser, the output gate, the exact gradient
against lag, the effective rank of the memory per step, PCA), what a unit is and what the
explorer's gate buttons show.

Registered with the kind ``"mlstm"`` (:mod:`hiddenstate.kinds.mlstm.view`); the family page
(:mod:`hiddenstate.report.family_page`) finds it through the kind's record.
"""

from __future__ import annotations

import html

import numpy as np

from hiddenstate.report.cards import KEEP, KindCard, gate_row, per_unit, quantiles, rows_html

__all__ = ["CARD"]


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
            ("head time constant 1/(1 - mean forget gate), 10/50/90%", quantiles(tau)),
            ("longest head time constant", f"{float(np.max(tau)):.4g} steps (head {int(np.argmax(tau))})"),
            ("mean log input gate i", f"{float(np.mean(la.mean_input_gate)):.4g}"),
            ("steps on which the stabiliser took the input gate (m = i)", f"{100 * float(np.mean(la.input_wins)):.1f}%"),
            gate_row(la, "output gate sigmoid(o)"),
            (f"|dC~_T/dC~_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("effective rank of C_T (entropy; mean over heads)", f"{float(la.effective_rank[-1].mean()):.3g} of {full}"),
            ("singular values of C_T above 1% of the largest (mean over heads)",
             f"{float(la.numerical_rank[-1].mean()):.3g} of {full}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{rows_html(rows)}</table>'
            + per_unit("time constant (steps)", tau, [f"head {h}" for h in range(tau.size)])
            + "<p>The memory's exact Jacobian product dC~<sub>T</sub>/dC~<sub>T-k</sub> of the unstabilised memory "
            "C~ = C exp(m): each head's product of its last k forget gates (the stored C is rescaled by exp(m<sub>T-k"
            "</sub> &minus; m<sub>T</sub>) on top, which the readout divides out), its largest entry against the lag "
            f"k:</p>{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            "<p>How full the associative memory is: the entropy effective rank of C<sub>t</sub> (Roy &amp; Vetterli "
            "2007; exp of the entropy of its normalised singular values), mean over heads, as a share of "
            f"min(D<sub>k</sub>, D<sub>v</sub>) = {full}, against the step t:</p>"
            f"{curve(la.effective_rank.mean(axis=1) / max(full, 1), f'layer {la.layer} effective rank', 'step')}"
            "</section>")


#: The mLSTM's card.
CARD = KindCard(
    _head_mlstm, _layer_mlstm,
    unit="A head-channel d = h D<sub>v</sub> + j is a unit: its activation is the mLSTM's readout before the "
         "per-head layer norm, h<sub>t</sub>[h, j] = (C<sub>t</sub><sup>T</sup> q<sub>t</sub>)[j] / max(|n<sub>t"
         "</sub> &middot; q<sub>t</sub>|, exp(&minus;m<sub>t</sub>)).",
    gate="its head's forget gate sigmoid(f)" + KEEP + " (unit k is column k mod Dv of head k // Dv), and to its "
         "output gate sigmoid(o).",
    entries="H*(Dk*Dv+Dk)")
