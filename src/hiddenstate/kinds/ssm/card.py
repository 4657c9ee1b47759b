"""What the family page says of Mamba and Mamba-2 layers: ``MAMBA_CARD`` and ``MAMBA2_CARD`` (:class:`~hiddenstate.report.cards.KindCard`).

The opening paragraph (the SSM state's sizes), each layer's card (the decays ``exp(dt A)`` as keep
gates, the time constants, the step sizes, the exact gradient against lag, PCA), what a unit is
(a channel of ``y`` before the gate; Mamba-2: a head-channel) and what the explorer's gate
buttons show. Registered with the kinds ``"mamba"`` and ``"mamba2"`` (:mod:`hiddenstate.kinds.ssm.view`).
"""

from __future__ import annotations

import html

import numpy as np

from hiddenstate.report.cards import KEEP, KindCard, per_unit_rows

__all__ = ["MAMBA2_CARD", "MAMBA_CARD"]


def _head(m, what) -> str:
    return (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), SSM state (Di="
            f"{m.get('d_inner')}, S={m.get('d_state')}) and convolution state (Di, K-1={m.get('d_conv', 1) - 1}) "
            f"per sequence; measured on {m.get('T')} steps of {m.get('N')} sequence(s).</p>")


def _head2(m, what) -> str:
    return (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), SSM state (H={m.get('num_heads')}"
            f", P={m.get('head_dim')}, S={m.get('d_state')}) with one decay per head, and convolution state (Dc, "
            f"K-1={m.get('d_conv', 1) - 1}) per sequence; measured on {m.get('T')} steps of {m.get('N')} "
            f"sequence(s).</p>")


def _layer(la, m, curve, recomputed) -> str:
    """A Mamba layer's card: the decays, channel time constants and step sizes, the gradient against lag, PCA."""
    tau = la.channel_time_constant
    q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
    rows = [("mean decay exp(dt A)", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"state entries kept > {la.decay.high:g} (share of steps)", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"state entries kept < {la.decay.low:g} (share of steps)", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("channel time constant: its slowest entry's 1/(1 - mean decay), 10/50/90% over channels", " / ".join(f"{v:.3g}" for v in q) + " steps"),
            ("longest channel time constant", f"{float(np.max(tau)):.4g} steps (channel {int(np.argmax(tau))})"),
            ("mean step size dt", f"{float(np.mean(la.mean_dt)):.4g}"),
            ("output gate sigmoid(z) open > 0.9 / shut < 0.1",
             f"{100 * float(np.mean(la.gate.right)):.1f}% / {100 * float(np.mean(la.gate.left)):.1f}%"),
            (f"|dh_T/dh_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{body}</table>'
            f"<p>The exact Jacobian product dh<sub>T</sub>/dh<sub>T-k</sub> (the diagonal of the last k decays), its "
            f"largest entry against the lag k:</p>{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            f"</section>")


def _layer2(la, m, curve, recomputed) -> str:
    """A Mamba-2 layer's card: the heads' decays, time constants and step sizes, the gradient against lag, PCA."""
    tau = la.time_constants
    q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
    rows = [("mean head decay exp(dt A_h)", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"heads kept > {la.decay.high:g} (share of steps)", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"heads kept < {la.decay.low:g} (share of steps)", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("head time constant 1/(1 - mean decay), 10/50/90% over heads", " / ".join(f"{v:.3g}" for v in q) + " steps"),
            ("longest head time constant", f"{float(np.max(tau)):.4g} steps (head {int(np.argmax(tau))})"),
            ("mean step size dt", f"{float(np.mean(la.mean_dt)):.4g}"),
            ("output gate sigmoid(z) open > 0.9 / shut < 0.1",
             f"{100 * float(np.mean(la.gate.right)):.1f}% / {100 * float(np.mean(la.gate.left)):.1f}%"),
            (f"|dh_T/dh_(T-{la.flow_spectral.size - 1})| (largest entry / RMS)",
             f"{la.flow_spectral[-1]:.3g} / {la.flow_rms[-1]:.3g}"),
            ("principal components for 90% of the state's variance", str(la.pca.n_components_for(0.9)))]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    taus = per_unit_rows([("time constant (steps)", tau, "{:.3g}")], [f"head {h}" for h in range(tau.size)],
                         corner="per head")
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{body}</table>{taus}'
            f"<p>The exact Jacobian product dh<sub>T</sub>/dh<sub>T-k</sub> (each head's (P, S) block times the "
            f"product of its last k decays), its largest entry against the lag k:</p>"
            f"{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}</section>")


#: Mamba's card.
MAMBA_CARD = KindCard(
    _head, _layer,
    unit="A channel d is a unit: its activation is its readout before the gate, y<sub>t</sub>[d] = C<sub>t</sub> "
         "&middot; h<sub>t</sub>[d] + D<sub>d</sub> a<sub>t</sub>[d].",
    gate="the mean of exp(dt A) over its S state entries" + KEEP + ", and to its output gate sigmoid(z).",
    entries="Di*S")

#: Mamba-2's card.
MAMBA2_CARD = KindCard(
    _head2, _layer2,
    unit="A head-channel d = h P + p is a unit: its activation is its readout before the gate and the gated norm, "
         "y<sub>t</sub>[h, p] = h<sub>t</sub>[h, p] &middot; C<sub>t</sub> + D<sub>h</sub> x<sub>t</sub>[h, p].",
    gate="its head's exp(dt A<sub>h</sub>) (unit k is row k mod P of head k // P)" + KEEP + ", and to its output "
         "gate sigmoid(z).",
    entries="H*P*S")
