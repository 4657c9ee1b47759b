"""What the family page says of RWKV-4 time-mixing layers: ``CARD`` (a :class:`~hiddenstate.report.cards.KindCard`).

The opening paragraph (the WKV numerator and denominator, the token shift), each layer's card
(the channels' fixed decays and time constants, the current token's share of the readout, the
receptance, the exact gradient against lag, PCA), what a unit is and what the explorer's gate
buttons show.

Registered with the kind ``"rwkv"`` (:mod:`hiddenstate.kinds.rwkv.view`); the family page
(:mod:`hiddenstate.report.family_page`) finds it through the kind's record.
"""

from __future__ import annotations

import html

import numpy as np

from hiddenstate.report.cards import KEEP, KindCard, gate_row, per_unit, quantiles, rows_html

__all__ = ["CARD"]


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
            ("channel time constant 1/(1 - decay), 10/50/90%", quantiles(tau)),
            ("longest channel time constant", f"{float(np.max(tau)):.4g} steps (channel {int(np.argmax(tau))})"),
            ("current token's share of the readout wkv (mean)", f"{float(np.mean(la.current_share)):.3g}"),
            gate_row(la, "receptance sigmoid(r)"),
            (f"|dS_T/dS_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{rows_html(rows)}</table>'
            + per_unit("time constant (steps)", tau, [str(a) for a in range(tau.size)])
            + "<p>The exact Jacobian product of the unstabilised numerator and denominator, d num~<sub>T</sub>/d num~"
            "<sub>T-k</sub> = diag(w<sup>k</sup>) (the stored state is rescaled by exp(max<sub>T-k</sub> &minus; "
            "max<sub>T</sub>) on top, which wkv = num / den divides out), its largest entry against the lag k:</p>"
            f"{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}</section>")


#: RWKV-4's card.
CARD = KindCard(
    _head_rwkv, _layer_rwkv,
    unit="A channel a is a unit: its activation is the WKV readout wkv<sub>t</sub>[a], the average of the values "
         "weighted by exp(k) and decayed by w per step, before the receptance.",
    gate="its channel's decay exp(-exp(time_decay))" + KEEP + ", the same on every step, and to its receptance "
         "sigmoid(r).",
    entries="2A")
