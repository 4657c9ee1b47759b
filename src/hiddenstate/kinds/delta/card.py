"""What the family page says of delta-rule layers (``"gated_delta"``, ``"kda"``): ``CARD`` (a :class:`~hiddenstate.report.cards.KindCard`).

The opening paragraph (the matrix state's sizes, a decay per head or per key channel), each
layer's card (decays, time constants, the write strength beta, the exact gradient against lag,
the effective rank of the matrix state per step, PCA), what a unit is (a head-channel of the
readout ``o``) and what the explorer's gate buttons show. Registered with both delta-rule kinds
(:mod:`hiddenstate.kinds.delta.view`).
"""

from __future__ import annotations

import html

import numpy as np

from hiddenstate.report.cards import KEEP, KindCard, per_unit_rows

__all__ = ["CARD", "KDA_CARD"]


def _head(m, what) -> str:
    per = "key channel" if m.get("kind") == "kda" else "head"
    return (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), matrix state (Hv="
            f"{m.get('num_heads')}, Dk={m.get('head_k_dim')}, Dv={m.get('head_v_dim')}) updated by the delta rule "
            f"with one decay per {per}, and convolution state (Dc, K-1={m.get('d_conv', 1) - 1}) per sequence; "
            f"measured on {m.get('T')} steps of {m.get('N')} sequence(s).</p>")


def _layer(la, meta, curve, recomputed) -> str:
    """A delta-rule layer's card: decays, time constants, beta, gradient against lag, effective rank per step, PCA."""
    tau = la.head_time_constant
    q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
    full = min(int(meta.get("head_k_dim", 1)), int(meta.get("head_v_dim", 1)))
    unit = "key channels" if la.time_constants.ndim == 2 else "heads"
    rows = [("mean decay exp(g)", f"{float(np.mean(la.decay.mean)):.4f}"),
            (f"{unit} kept > {la.decay.high:g} (share of steps)", f"{100 * float(np.mean(la.decay.right)):.1f}%"),
            (f"{unit} kept < {la.decay.low:g} (share of steps)", f"{100 * float(np.mean(la.decay.left)):.1f}%"),
            ("head time constant 1/(1 - mean decay), 10/50/90% over heads", " / ".join(f"{v:.3g}" for v in q) + " steps"),
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
    per = [("time constant (steps)", tau, "{:.3g}"), ("mean beta", la.mean_beta, "{:.3g}"),
           ("effective rank of S_T", la.effective_rank[-1], "{:.3g}"),
           ("singular values above 1%", la.numerical_rank[-1], "{:.3g}")]
    table = per_unit_rows(per, [f"head {h}" for h in range(tau.size)], corner="per head")
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{body}</table>{table}'
            f"<p>The exact Jacobian product dS<sub>T</sub>/dS<sub>T-k</sub> = &prod; (I &minus; &beta; k k<sup>T</sup>) "
            f"diag(a) (not diagonal: each step's delta write mixes the key directions), its spectral norm against the "
            f"lag k:</p>{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}"
            f"<p>How full the associative memory is: the entropy effective rank of S<sub>t</sub> (Roy &amp; Vetterli "
            f"2007; exp of the entropy of its normalised singular values), mean over heads, as a share of "
            f"min(D<sub>k</sub>, D<sub>v</sub>) = {full}, against the step t:</p>"
            f"{curve(la.effective_rank.mean(axis=1) / max(full, 1), f'layer {la.layer} effective rank', 'step')}"
            f"</section>")


#: The gated delta rule's card.
CARD = KindCard(
    _head, _layer,
    unit="A head-channel d = h D<sub>v</sub> + j is a unit: its activation is the delta rule's readout before the "
         "gated norm, o<sub>t</sub>[h, j] = (S<sub>t</sub><sup>T</sup> q<sub>t</sub>)[j].",
    gate="its head's decay exp(g)" + KEEP + " (unit k is column k mod Dv of head k // Dv).",
    entries="Hv*Dk*Dv")

#: KDA's card: the same but for its gate buttons (a decay per key channel, a (0, 1) output gate) and its entries.
KDA_CARD = CARD._replace(gate="its head's mean key-channel decay exp(g)" + KEEP + ", and to its output gate sigmoid(g).",
                         entries="H*D*D")
