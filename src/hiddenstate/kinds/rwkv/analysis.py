"""The hidden-state tools on RWKV-4's time mixing: the shared layer loop through the kind's view.

**RWKV-4** (:class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix`, transformers' ``RwkvSelfAttention``): the WKV
numerator and denominator per channel with a running maximum. A layer's analysis
(:class:`RWKVLayerAnalysis`) has

* the decay ``exp(-exp(time_decay))`` per channel as the keep gate (the same on every step: a
  parameter, not a gate of the input) and each channel's time constant (``time_constants`` (A,));
* the exact gradient against lag, the powers of the decays (``flow_spectral``, ``flow_rms``);
* the receptance ``sigmoid(r)`` as the output gate (``gate``);
* each channel's mean share of the current token in its readout (``current_share`` (A,)):
  how much of ``wkv_t`` is the present token (with its bonus) rather than the memory;
* PCA and the memory curve of the stored ``(num, den)``; the channels' ``wkv`` as units.

References
----------
B. Peng et al., "RWKV: Reinventing RNNs for the Transformer Era", Findings of EMNLP 2023,
arXiv:2305.13048.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.kinds.rwkv.view import rwkv_view
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.layer_loop import LayerKind
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult
from hiddenstate.probe.state_analysis import (
    NEEDS_TEXT,
    StateAnalysis,
    layers_phrase,
    per_head_mean,
    summary_tail,
    tau_phrase,
)

__all__ = ["NOT_MEASURED_RWKV", "RWKV", "RWKVAnalysis", "RWKVLayerAnalysis"]

#: What the analysis of a recurrent layer measures that it does not measure on RWKV-4, and why.
NOT_MEASURED_RWKV = {
    "fixed points": "for a fixed input the WKV step (num, den) -> w (num, den) + e^k (v, 1) is affine with a fixed "
                    "decay w in (0, 1) per channel, so its one fixed point exists and is stable by construction, and "
                    "it moves with every input (k and v are functions of the input): there is no search to run",
}


@dataclass(frozen=True)
class RWKVLayerAnalysis:
    """What was measured on one RWKV-4 time-mixing layer.

    Attributes
    ----------
    layer : int
        The layer's index (in its model).
    record : RWKVRecord
        Every step's shift, num, den, max, decay, keys, receptance, readout and current-token share.
    decay : GateStats
        Statistics of the decay ``exp(-exp(time_decay))`` (the keep gate, constant in time), one unit per channel.
    gate : GateStats
        The receptance ``sigmoid(r)`` per channel.
    time_constants : ndarray of shape (A,)
        ``1 / (1 - decay)`` in steps, per channel.
    flow_spectral, flow_rms : ndarray of shape (K,)
        The largest entry and the RMS of ``d num~_T / d num~_{T-k}`` (the decays to the power k).
    current_share : ndarray of shape (A,)
        Each channel's mean share of the current token in its readout ``wkv_t``.
    pca : PCAResult
        PCA of the stored (num, den) flattened to 2A features.
    memory : MemoryCurve or None
        The memory curve of the flattened state; None when the steps are too few.
    units : dict of str to UnitCorrelation, or None
        With a text: the channels whose ``wkv`` tracks each text feature.
    recomputed : float or None
        For a layer recomputed from a model's own run, the relative error of its output.
    """

    layer: int
    record: object
    decay: GateStats
    gate: GateStats
    time_constants: np.ndarray
    flow_spectral: np.ndarray
    flow_rms: np.ndarray
    current_share: np.ndarray
    pca: PCAResult
    memory: MemoryCurve | None = None
    units: dict | None = None
    recomputed: float | None = None



@dataclass(frozen=True)
class RWKVAnalysis(StateAnalysis):
    """The measurements of every RWKV-4 time-mixing layer of a model (an RWKV model's, or :func:`analyze_layer`'s).

    Attributes
    ----------
    layers : list of RWKVLayerAnalysis
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``kind`` (``"rwkv"``), ``T``, ``N``, ``attention_hidden_size``, ``hidden_size``,
        ``num_layers``, ``model`` and, with a memory curve, ``memory target``.
    text : str or None
        The characters of sequence 0.
    explore : dict or None
        With a text: the explorer's data of the top layer's channels.
    layer_map : tuple of LayerInfo, or None
        For a transformers model, every layer of it.
    """

    not_measured: dict = field(default_factory=lambda: dict(NOT_MEASURED_RWKV))

    def summary(self) -> str:
        """One line per layer: decays, time constants, current-token share, gradient, PCA, memory.

        Returns
        -------
        str
        """
        m = self.meta
        lines = [f"{m.get('model', 'RWKV')}: {layers_phrase(self)}, WKV state (A={m.get('attention_hidden_size')}"
                 f" numerators and denominators) per sequence, {m.get('T')} steps of {m.get('N')} sequence(s)"]
        for la in self.layers:
            lines.append(f"layer {la.layer}: mean channel decay {float(np.mean(la.decay.mean)):.3f}; channel time "
                         f"constants {tau_phrase(la.time_constants)}; current token's share of the readout "
                         f"{float(np.mean(la.current_share)):.3g}; |dS_T/dS_(T-{la.flow_spectral.size - 1})| "
                         f"{la.flow_spectral[-1]:.3g}" + summary_tail(la))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


def _measure_rwkv(index: int, rec, max_lag: int, common: dict) -> dict:
    """An RWKV layer's own measurement beyond the view's: each channel's mean current-token share."""
    return {"current_share": per_head_mean(rec.current)}


def _sizes_rwkv(rec) -> dict:
    return {"kind": "rwkv", "attention_hidden_size": rec.num.shape[-1], "hidden_size": rec.shift.shape[-1]}


_TEXT = NEEDS_TEXT.replace("analyze_mamba", "analyze_layer")

#: The RWKV-4 records' kind for the shared layer loop.
RWKV = LayerKind("rwkv", _measure_rwkv, RWKVLayerAnalysis, RWKVAnalysis, _sizes_rwkv, NOT_MEASURED_RWKV, _TEXT,
                 rwkv_view)
